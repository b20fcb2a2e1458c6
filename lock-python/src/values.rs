//! The value objects the client hands Python (`LostReason`, `LockInfo`,
//! `Takeover`: classes of `lease_lock._types`) and bytes, made from lock-core's
//! types. Below every other module of the package but `classes`: errors,
//! events and locks all make them.

use lock_core::{LockInfo, LostReason, Takeover};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple};

use crate::classes;

/// A class of `lease_lock._types`, called with keyword arguments.
fn make(py: Python<'_>, name: &'static str, fields: &[(&str, Py<PyAny>)]) -> PyResult<Py<PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let args = PyTuple::empty(py);
    classes::construct(py, &MODULE, "lease_lock._types", name, args, fields).map(Bound::unbind)
}

pub(crate) fn bytes(py: Python<'_>, data: Option<&[u8]>) -> Py<PyAny> {
    match data {
        Some(data) => PyBytes::new(py, data).into_any().unbind(),
        None => py.None(),
    }
}

/// `LostReason(kind, owner, limit, message)`.
pub(crate) fn lost_reason(py: Python<'_>, reason: &LostReason) -> PyResult<Py<PyAny>> {
    let (kind, owner, limit) = match reason {
        LostReason::Stolen { owner } => ("stolen", owner.clone(), None),
        LostReason::Expired => ("expired", None, None),
        LostReason::InDanger => ("in_danger", None, None),
        LostReason::Released => ("released", None, None),
        LostReason::MaxHold { limit } => ("max_hold", None, Some(limit.as_secs_f64())),
        _ => ("other", None, None),
    };
    make(
        py,
        "LostReason",
        &[
            ("kind", classes::value(py, kind)?),
            ("owner", classes::value(py, owner)?),
            ("limit", classes::value(py, limit)?),
            ("message", classes::value(py, reason.to_string())?),
        ],
    )
}

/// `LockInfo(...)` for one stored lock.
pub(crate) fn lock_info(py: Python<'_>, info: LockInfo) -> PyResult<Py<PyAny>> {
    make(
        py,
        "LockInfo",
        &[
            ("key", classes::value(py, info.key.partition())?),
            ("sort_key", classes::value(py, info.key.sort())?),
            ("owner", classes::value(py, info.owner)?),
            ("fence", classes::value(py, info.fence.0)?),
            ("lease", classes::value(py, info.lease.as_secs_f64())?),
            ("released", classes::value(py, info.released)?),
            ("data", bytes(py, info.data.as_deref())),
            (
                "held_by_this_client",
                classes::value(py, info.held_by_this_client)?,
            ),
            ("version", classes::value(py, info.version)?),
        ],
    )
}

/// `Takeover(owner, fence, data)`: what a crashed holder left.
pub(crate) fn takeover(py: Python<'_>, takeover: &Takeover) -> PyResult<Py<PyAny>> {
    make(
        py,
        "Takeover",
        &[
            ("owner", classes::value(py, takeover.owner.as_str())?),
            ("fence", classes::value(py, takeover.fence.0)?),
            ("data", bytes(py, takeover.data.as_deref())),
        ],
    )
}
