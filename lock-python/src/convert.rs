//! Arguments from Python, checked before anything is sent: durations (the
//! Python layer turns `timedelta`s into seconds) and keys.

use std::time::Duration;

use lock_core::LockKey;
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

/// The lock key: the key, and the sort key when there is one.
pub(crate) fn key(key: String, sort_key: Option<String>) -> LockKey {
    match sort_key {
        Some(sort) => LockKey::with_sort(key, sort),
        None => LockKey::new(key),
    }
}
