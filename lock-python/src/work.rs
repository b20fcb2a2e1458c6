//! Work running under a lock, which a release waits for, and the warning of
//! the deprecated names of the signals a `Lock` and a `Leadership` share.

use std::ffi::CString;
use std::ops::Not;
use std::sync::{Arc, Mutex, Weak};
use std::thread::ThreadId;

use lock_core::{Fence, LockKey, LockView, WorkInProgress};
use pyo3::exceptions::{PyDeprecationWarning, PyRuntimeError};
use pyo3::prelude::*;

/// Work running under a lock (`Lock.run_while_safe`, `Election.lead`): while
/// it is open, a release of the lock makes the lock read as released at once
/// but waits for it to be closed (at most until the lease ends) before it
/// writes. Closed by `end()`, or when garbage collected.
#[pyclass(module = "lease_lock._native", name = "WorkInProgress", frozen)]
pub(crate) struct Work {
    open: Arc<Open>,
}

/// One piece of work, and where it runs.
struct Open {
    work: Mutex<Option<WorkInProgress>>,
    /// The lock's owner and key.
    owner: String,
    key: LockKey,
    fence: Fence,
    /// The thread that began it: the one its event loop runs on.
    thread: ThreadId,
}

impl Open {
    fn end(&self) {
        // Dropping it may wake a release waiting on the runtime's threads.
        drop(
            self.work
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
    }

    fn is_open(&self) -> bool {
        self.work
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }
}

/// Every open piece of work of this process, for the blocking calls that
/// release locks (see [`before_blocking_release`]).
static OPEN: Mutex<Vec<Weak<Open>>> = Mutex::new(Vec::new());

fn open_work() -> std::sync::MutexGuard<'static, Vec<Weak<Open>>> {
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Work {
    pub(crate) fn begin(view: &LockView) -> Self {
        let open = Arc::new(Open {
            work: Mutex::new(Some(view.begin_work())),
            owner: view.owner().to_owned(),
            key: view.key().clone(),
            fence: view.fence(),
            thread: std::thread::current().id(),
        });
        let mut all = open_work();
        all.retain(|open| open.upgrade().is_some_and(|open| open.is_open()));
        all.push(Arc::downgrade(&open));
        Self { open }
    }
}

#[pymethods]
impl Work {
    /// The work has ended (its task finished or was cancelled). Idempotent.
    fn end(&self) {
        self.open.end();
    }
}

/// Which locks a blocking call is about to release.
pub(crate) enum Releasing<'a> {
    /// One acquisition.
    Lock(&'a LockView),
    /// Whatever the owner holds under this key (an election's).
    Key { owner: &'a str, key: &'a LockKey },
    /// Everything the owner holds (a client's close).
    Owner(&'a str),
}

impl Releasing<'_> {
    fn covers(&self, open: &Open) -> bool {
        match self {
            Releasing::Lock(view) => {
                open.key == *view.key() && open.fence == view.fence() && open.owner == view.owner()
            }
            Releasing::Key { owner, key } => open.owner == *owner && open.key == **key,
            Releasing::Owner(owner) => open.owner == *owner,
        }
    }
}

/// Before a blocking call (`call`) releases `releasing`: work under those
/// locks begun on this thread cannot run while this thread waits in the call,
/// since its event loop is this thread, and the release would wait for it
/// until the lease ends. With an event loop running here, refuse before
/// anything is written (`RuntimeError`: the awaitable twin is the one to
/// call); with none, that work can never resume: end it, so the release
/// does not wait for it.
pub(crate) fn before_blocking_release(
    py: Python<'_>,
    releasing: Releasing<'_>,
    call: &str,
) -> PyResult<()> {
    let here = std::thread::current().id();
    let stuck: Vec<Arc<Open>> = open_work()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|open| open.thread == here && open.is_open() && releasing.covers(open))
        .collect();
    if stuck.is_empty() {
        return Ok(());
    }
    let loop_running = py
        .import("asyncio")?
        .call_method0("_get_running_loop")?
        .is_none()
        .not();
    if loop_running {
        return Err(PyRuntimeError::new_err(format!(
            "{call} would block this thread's event loop, which runs work under the lock \
             (run_while_safe or Election.lead) that the release must wait for: \
             await its _async twin instead"
        )));
    }
    for open in stuck {
        open.end();
    }
    Ok(())
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
