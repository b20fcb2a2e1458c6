//! Work running under a lock, which a release waits for, and the warning of
//! the deprecated names of the signals a `Lock` and a `Leadership` share.

use std::ffi::CString;
use std::sync::Mutex;

use lock_core::{LockView, WorkInProgress};
use pyo3::exceptions::PyDeprecationWarning;
use pyo3::prelude::*;

/// Work running under a lock (`Lock.run_while_safe`, `Election.lead`): while
/// it is open, a release of the lock makes the lock read as released at once
/// but waits for it to be closed (at most until the lease ends) before it
/// writes. Closed by `end()`, or when garbage collected.
#[pyclass(module = "lease_lock._native", name = "WorkInProgress", frozen)]
pub(crate) struct Work {
    open: Mutex<Option<WorkInProgress>>,
}

impl Work {
    pub(crate) fn begin(view: &LockView) -> Self {
        Self {
            open: Mutex::new(Some(view.begin_work())),
        }
    }
}

#[pymethods]
impl Work {
    /// The work has ended (its task finished or was cancelled). Idempotent.
    fn end(&self) {
        // Dropping it may wake a release waiting on the runtime's threads.
        drop(
            self.open
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
    }
}

/// Warn (`DeprecationWarning`, at the caller's line) that `old` is an old
/// name: `advice` says what to call instead.
pub(crate) fn deprecated(py: Python<'_>, old: &str, advice: &str) -> PyResult<()> {
    let message = CString::new(format!("{old} is deprecated: {advice}"))
        .unwrap_or_else(|_| CString::from(c"a deprecated name was called"));
    PyErr::warn(py, &py.get_type::<PyDeprecationWarning>(), &message, 1)
}

/// The advice of every deprecated name that meant "no longer safe".
pub(crate) const USE_UNSAFE: &str = "it fires when the lease is no longer safe (in danger, lost or released); \
     call until_unsafe() / wait_unsafe() / run_while_safe() for that moment, \
     or until_ended() / wait_ended() for the later moment the lease is over";
