//! Waking a blocked main thread the moment a signal arrives.
//!
//! Python runs signal handlers (Ctrl-C's `KeyboardInterrupt`) only on the
//! main thread, and only when that thread asks. A call that blocks the main
//! thread in Rust must therefore wake up to ask. Looking every few
//! milliseconds costs a wake-up each time and hears Ctrl-C late; instead the
//! wait reads one socket, written by two parties:
//!
//! * Python's own C-level signal handler, through `signal.set_wakeup_fd`
//!   (installed for the length of the wait): the signal's number, at once;
//! * the call's task on the runtime, when its result is ready: a zero byte.
//!
//! The wait wakes for either, looks for the result, then runs the signal
//! handlers. Unix only (a socket pair); elsewhere, and wherever Python refuses
//! the wake-up socket, the caller falls back to looking periodically.

#[cfg(unix)]
mod unix {
    use std::cell::{Cell, RefCell};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    use pyo3::prelude::*;
    use pyo3::sync::PyOnceLock;
    use pyo3::types::IntoPyDict;

    /// The byte a finished call writes; Python writes signal numbers (≥ 1).
    const RESULT_READY: u8 = 0;

    /// The main thread's socket pair. Kept for the life of the thread (a
    /// socket closed while a late task still writes to it could raise
    /// SIGPIPE in a process that does not ignore it), and made again in a
    /// child of `fork()`, whose copy is shared with the parent.
    #[derive(Debug)]
    struct Pair {
        reader: UnixStream,
        writer: UnixStream,
        pid: u32,
    }

    thread_local! {
        static PAIR: RefCell<Option<Arc<Pair>>> = const { RefCell::new(None) };
        /// A wait is under way on this thread: a signal handler that blocks
        /// in another call must not read the first wait's wake-ups.
        static WAITING: Cell<bool> = const { Cell::new(false) };
    }

    fn pair() -> Option<Arc<Pair>> {
        PAIR.with(|slot| {
            let mut slot = slot.borrow_mut();
            let pid = std::process::id();
            if let Some(existing) = slot.as_ref().filter(|pair| pair.pid == pid) {
                return Some(existing.clone());
            }
            let (reader, writer) = UnixStream::pair().ok()?;
            // Python's handler must never block on a full socket; the
            // reader blocks, which is the wait.
            writer.set_nonblocking(true).ok()?;
            let made = Arc::new(Pair {
                reader,
                writer,
                pid,
            });
            *slot = Some(made.clone());
            Some(made)
        })
    }

    fn set_wakeup_fd(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        static SET_WAKEUP_FD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        Ok(SET_WAKEUP_FD.import(py, "signal", "set_wakeup_fd")?.clone())
    }

    /// What a finished call uses to wake the wait.
    #[derive(Debug)]
    pub(crate) struct Notifier(Arc<Pair>);

    impl Notifier {
        /// Wake the wait (its result is in the channel).
        pub(crate) fn notify(&self) {
            // A full socket already holds a wake-up: nothing is lost.
            let _ = (&self.0.writer).write(&[RESULT_READY]);
        }
    }

    /// Python's wake-up socket pointed at this thread's pair, for one wait.
    #[derive(Debug)]
    pub(crate) struct Installed {
        pair: Arc<Pair>,
        /// The wake-up fd that was set before (-1: none), put back after.
        previous: i64,
        /// Signal numbers read, to pass on to `previous`'s owner (an asyncio
        /// loop dispatches its signal handlers from the numbers it reads).
        signals: Vec<u8>,
    }

    impl Installed {
        /// Point Python's wake-up socket at this thread's pair; `None` when
        /// that cannot be done (then look periodically instead).
        pub(crate) fn install(py: Python<'_>) -> Option<Self> {
            if WAITING.with(Cell::get) {
                return None;
            }
            let pair = pair()?;
            let kwargs = [("warn_on_full_buffer", false)].into_py_dict(py).ok()?;
            let previous = set_wakeup_fd(py)
                .ok()?
                .call((pair.writer.as_raw_fd(),), Some(&kwargs))
                .ok()?
                .extract::<i64>()
                .ok()?;
            WAITING.with(|waiting| waiting.set(true));
            Some(Installed {
                pair,
                previous,
                signals: Vec::new(),
            })
        }

        pub(crate) fn notifier(&self) -> Notifier {
            Notifier(self.pair.clone())
        }

        /// Block, with the GIL released, until a result is ready or a signal
        /// has arrived (or a late wake-up of an earlier call: the caller
        /// looks and waits again).
        pub(crate) fn wait(&mut self, py: Python<'_>) {
            let pair = self.pair.clone();
            let mut buffer = [0u8; 64];
            let read = py.detach(move || (&pair.reader).read(&mut buffer).map(|n| (n, buffer)));
            if let Ok((n, buffer)) = read {
                self.signals
                    .extend(buffer[..n].iter().filter(|&&byte| byte != RESULT_READY));
            }
        }

        /// Put the previous wake-up fd back, with the signals that arrived
        /// meanwhile written to it.
        pub(crate) fn uninstall(self, py: Python<'_>) {
            WAITING.with(|waiting| waiting.set(false));
            let restored = (|| -> PyResult<()> {
                let kwargs = [("warn_on_full_buffer", false)].into_py_dict(py)?;
                // warn_on_full_buffer cannot be read back: false is what
                // asyncio and trio set.
                set_wakeup_fd(py)?.call((self.previous,), Some(&kwargs))?;
                if self.previous >= 0 && !self.signals.is_empty() {
                    let os = py.import("os")?;
                    let signals = pyo3::types::PyBytes::new(py, &self.signals);
                    // As Python's handler does: a full or closed socket loses
                    // the wake-up, nothing else.
                    let _ = os.call_method1("write", (self.previous, signals));
                }
                Ok(())
            })();
            if let Err(error) = restored {
                error.write_unraisable(py, None);
            }
        }
    }
}

#[cfg(unix)]
pub(crate) use unix::{Installed, Notifier};

#[cfg(not(unix))]
mod elsewhere {
    use pyo3::prelude::*;

    /// No wake-up socket here: the wait looks periodically.
    #[derive(Debug)]
    pub(crate) enum Installed {}

    #[derive(Debug)]
    pub(crate) enum Notifier {}

    impl Installed {
        pub(crate) fn install(_py: Python<'_>) -> Option<Self> {
            None
        }
        pub(crate) fn notifier(&self) -> Notifier {
            match *self {}
        }
        pub(crate) fn wait(&mut self, _py: Python<'_>) {
            match *self {}
        }
        pub(crate) fn uninstall(self, _py: Python<'_>) {
            match self {}
        }
    }

    impl Notifier {
        pub(crate) fn notify(&self) {
            match *self {}
        }
    }
}

#[cfg(not(unix))]
pub(crate) use elsewhere::{Installed, Notifier};
