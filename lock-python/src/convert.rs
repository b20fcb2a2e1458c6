//! Arguments from Python, checked before anything is sent: durations (the
//! Python layer turns `timedelta`s into seconds), keys and data.

use std::time::Duration;

use lock_core::{AcquireOptions, LockKey};
use pyo3::prelude::*;

use crate::errors;

/// `seconds` as a `Duration`: finite and not negative; `float('inf')` is the
/// longest duration (for `wait`, forever).
pub(crate) fn duration(py: Python<'_>, name: &str, seconds: f64) -> PyResult<Duration> {
    if seconds == f64::INFINITY {
        return Ok(Duration::MAX);
    }
    if seconds.is_nan() || seconds < 0.0 {
        return Err(errors::invalid_input(
            py,
            format!(
                "{name} must be a number of seconds (or a timedelta) of zero or more, got {seconds}"
            ),
        ));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| errors::invalid_input(py, format!("{name} of {seconds} seconds is too long")))
}

/// `duration` for an optional argument.
pub(crate) fn optional(
    py: Python<'_>,
    name: &str,
    seconds: Option<f64>,
) -> PyResult<Option<Duration>> {
    seconds
        .map(|seconds| duration(py, name, seconds))
        .transpose()
}

/// An optional duration given as seconds (`int`, `float`) or a
/// `datetime.timedelta`.
pub(crate) fn optional_seconds(
    py: Python<'_>,
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(value) if value.is_none() => Ok(None),
        Some(value) => seconds(py, name, value).map(Some),
    }
}

/// A duration given as seconds (`int`, `float`) or a `datetime.timedelta`.
pub(crate) fn seconds(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let number = if value.is_instance_of::<pyo3::types::PyBool>() {
        None
    } else if let Ok(number) = value.extract::<f64>() {
        Some(number)
    } else if value.hasattr("total_seconds")? {
        Some(value.call_method0("total_seconds")?.extract::<f64>()?)
    } else {
        None
    };
    match number {
        Some(number) => duration(py, name, number),
        None => Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be seconds (int or float) or a datetime.timedelta, not {}",
            value.get_type().name()?
        ))),
    }
}

/// The lock key: the key, and the sort key when there is one.
pub(crate) fn key(key: String, sort_key: Option<String>) -> LockKey {
    match sort_key {
        Some(sort) => LockKey::with_sort(key, sort),
        None => LockKey::new(key),
    }
}

/// Data for a lock: `bytes`, `bytearray` or a `memoryview` (as the Python
/// layer's acquire takes), `None` for none; a `TypeError` for anything else
/// (a `str` must be encoded first).
pub(crate) fn data(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<u8>>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if let Ok(bytes) = value.cast::<pyo3::types::PyBytes>() {
        return Ok(Some(bytes.as_bytes().to_vec()));
    }
    if value.is_instance_of::<pyo3::types::PyByteArray>()
        || value.is_instance_of::<pyo3::types::PyMemoryView>()
    {
        let copied = value
            .py()
            .get_type::<pyo3::types::PyBytes>()
            .call1((value,))?;
        return Ok(Some(
            copied.cast::<pyo3::types::PyBytes>()?.as_bytes().to_vec(),
        ));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "data must be bytes, bytearray or memoryview, not {} (encode a str with .encode())",
        value
            .get_type()
            .name()
            .map(|name| name.to_string())
            .unwrap_or_default()
    )))
}

/// The settings an acquire of a lock and of a semaphore's permit share,
/// checked: applied to [`AcquireOptions`] in one place.
#[derive(Debug, Default)]
pub(crate) struct AcquireSettings {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) data: Option<Vec<u8>>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) refresh: Option<Duration>,
}

impl AcquireSettings {
    /// `options` with every setting given here.
    pub(crate) fn apply(self, mut options: AcquireOptions) -> AcquireOptions {
        if let Some(wait) = self.wait {
            options = options.wait(wait);
        }
        if let Some(lease) = self.lease {
            options = options.lease(lease);
        }
        if let Some(data) = self.data {
            options = options.data(data);
        }
        if let Some(hold) = self.min_hold {
            options = options.min_hold(hold);
        }
        if let Some(limit) = self.max_hold {
            options = options.max_hold(limit);
        }
        if let Some(period) = self.refresh {
            options = options.refresh_period(period);
        }
        options
    }
}

/// The options of a semaphore's permit or a reader-writer lock's read or
/// write, from the Python arguments (seconds or `timedelta`s, data as bytes).
pub(crate) fn settings(
    py: Python<'_>,
    wait: Option<&Bound<'_, PyAny>>,
    lease: Option<&Bound<'_, PyAny>>,
    data: Option<&Bound<'_, PyAny>>,
    min_hold: Option<&Bound<'_, PyAny>>,
    max_hold: Option<&Bound<'_, PyAny>>,
    refresh: Option<&Bound<'_, PyAny>>,
) -> PyResult<AcquireOptions> {
    Ok(AcquireSettings {
        wait: optional_seconds(py, "wait", wait)?,
        lease: optional_seconds(py, "lease", lease)?,
        data: self::data(data)?,
        min_hold: optional_seconds(py, "min_hold", min_hold)?,
        max_hold: optional_seconds(py, "max_hold", max_hold)?,
        refresh: optional_seconds(py, "refresh", refresh)?,
    }
    .apply(AcquireOptions::new()))
}
