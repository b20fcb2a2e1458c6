//! The tokio runtime the locks run on, and the two ways Python waits for it:
//! blocking (the GIL released, Ctrl-C still heard) and asyncio (a future of
//! the caller's event loop, completed from the runtime).
//!
//! One runtime per process. A runtime's threads do not survive `fork()`: in a
//! child, the parent's runtime would accept work and never run it. So the
//! runtime is kept with the process id that made it, a child gets a runtime
//! of its own on first use, and everything made on the parent's runtime
//! (clients, stores, locks) refuses to run in the child ([`Pid::check`]).

use std::cell::Cell;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCFunction;

use crate::errors;
use crate::signal_wake;

/// How often a blocking wait on the main thread looks for a signal (Ctrl-C)
/// where no signal can wake it ([`signal_wake`]: not on Windows, nor inside
/// a signal handler's own blocking call): Python runs signal handlers only
/// when the main thread asks. Every look costs a wake-up, so not more often
/// than a person notices: a `KeyboardInterrupt` within 50 ms.
const SIGNAL_CHECK: Duration = Duration::from_millis(50);

thread_local! {
    /// Whether this is Python's main thread, the only one that runs signal
    /// handlers (found out once per thread).
    static MAIN_THREAD: Cell<Option<bool>> = const { Cell::new(None) };
}

fn is_main_thread(py: Python<'_>) -> bool {
    MAIN_THREAD.with(|known| {
        if let Some(main) = known.get() {
            return main;
        }
        let main = (|| -> PyResult<bool> {
            let threading = py.import("threading")?;
            let main = threading.call_method0("main_thread")?;
            let current = threading.call_method0("current_thread")?;
            Ok(main.is(&current))
        })()
        // If it cannot be told, look for signals: only a cost.
        .unwrap_or(true);
        known.set(Some(main));
        main
    })
}

/// A runtime and the process that started it.
#[derive(Debug)]
pub(crate) struct ProcessRuntime {
    runtime: tokio::runtime::Runtime,
    pid: Pid,
}

static RUNTIME: Mutex<Option<Arc<ProcessRuntime>>> = Mutex::new(None);

/// The runtime of this process, started on first use.
pub(crate) fn runtime() -> PyResult<Arc<ProcessRuntime>> {
    let mut slot = RUNTIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let current = Pid::current();
    if let Some(existing) = slot.as_ref() {
        if existing.pid == current {
            return Ok(existing.clone());
        }
        // The parent's runtime, copied by fork() without its threads: never
        // dropped (dropping waits for threads that do not exist here).
        if let Some(stale) = slot.take() {
            std::mem::forget(stale);
        }
    }
    // One worker: a Python process's lock work (heartbeats, acquires, the
    // store's I/O) is light, and with one thread an answer from the store
    // wakes the thread that runs the call instead of handing it between two
    // (a third less client CPU per call at a 20 ms round trip, measured in
    // docs/performance.md). A worker never waits for the GIL, so it stays
    // free for heartbeats whatever Python does.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("lease-lock-runtime")
        .enable_all()
        .build()
        .map_err(|error| {
            errors::runtime_failed(format!("could not start the lock runtime: {error}"))
        })?;
    let made = Arc::new(ProcessRuntime {
        runtime,
        pid: current,
    });
    *slot = Some(made.clone());
    Ok(made)
}

/// Where a main-thread call's task puts its result, and the wake-up it owes
/// the waiting thread. Dropped however the task ends (a result sent, a panic,
/// an abort), it drops the sender first and then wakes the thread, which
/// finds the result or a closed channel: never a wait nobody ends.
struct Reply<T> {
    sender: Option<SyncSender<T>>,
    notifier: Option<signal_wake::Notifier>,
}

impl<T> Reply<T> {
    fn send(mut self, value: T) {
        if let Some(sender) = self.sender.take() {
            // The receiver is gone only if the caller was interrupted.
            let _ = sender.send(value);
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(notifier) = &self.notifier {
            notifier.notify();
        }
    }
}

impl ProcessRuntime {
    /// The process that started this runtime.
    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }

    /// The runtime's handle (to enter it while dropping lock objects, whose
    /// drops start releases on it).
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }

    /// Run `future` on the runtime and block this thread until it ends, with
    /// the GIL released. A signal handler that raises (Ctrl-C's
    /// `KeyboardInterrupt`) cancels the future, which the lock client treats
    /// like any dropped call: nothing it started stays held.
    pub(crate) fn block_on<T, F>(&self, py: Python<'_>, future: F) -> PyResult<T>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        self.pid.check(py)?;
        let (sender, receiver) = sync_channel(1);
        if !is_main_thread(py) {
            // No signal handler runs on this thread: nothing to look for.
            self.runtime.spawn(async move {
                // The receiver is gone only if the caller was interrupted.
                let _ = sender.send(future.await);
            });
            return py
                .detach(move || receiver.recv())
                .map_err(|_| dropped_call());
        }
        let mut woken_by_signal = signal_wake::Installed::install(py);
        let notifier = woken_by_signal
            .as_ref()
            .map(signal_wake::Installed::notifier);
        let task = self.runtime.spawn(async move {
            let reply = Reply {
                sender: Some(sender),
                notifier,
            };
            reply.send(future.await);
        });
        let result = match woken_by_signal.as_mut() {
            Some(installed) => self.wait_woken(py, installed, receiver, &task),
            None => self.wait_looking(py, receiver, &task),
        };
        if let Some(installed) = woken_by_signal {
            installed.uninstall(py);
        }
        result
    }

    /// A signal handler raised (Ctrl-C's `KeyboardInterrupt`): the call is
    /// cancelled, which the lock client treats like any dropped call.
    fn abandon<T: Send + 'static>(
        &self,
        receiver: Receiver<T>,
        task: &tokio::task::JoinHandle<()>,
        interrupted: PyErr,
    ) -> PyErr {
        task.abort();
        // The call may have ended just now, its result (a lock, say) waiting
        // in the channel: dropped on the runtime, where a lock's drop
        // releases it.
        self.runtime.spawn(async move { drop(receiver) });
        interrupted
    }

    /// The main thread's wait, woken by the result or by a signal.
    fn wait_woken<T: Send + 'static>(
        &self,
        py: Python<'_>,
        installed: &mut signal_wake::Installed,
        receiver: Receiver<T>,
        task: &tokio::task::JoinHandle<()>,
    ) -> PyResult<T> {
        loop {
            match receiver.try_recv() {
                Ok(value) => return Ok(value),
                Err(TryRecvError::Disconnected) => return Err(dropped_call()),
                Err(TryRecvError::Empty) => {}
            }
            // Also hears a signal that came before the wake-up socket was
            // set (its handler has not run yet).
            if let Err(interrupted) = py.check_signals() {
                return Err(self.abandon(receiver, task, interrupted));
            }
            installed.wait(py);
        }
    }

    /// The main thread's wait where no signal can wake it: it looks for
    /// signals every [`SIGNAL_CHECK`].
    fn wait_looking<T: Send + 'static>(
        &self,
        py: Python<'_>,
        mut receiver: Receiver<T>,
        task: &tokio::task::JoinHandle<()>,
    ) -> PyResult<T> {
        loop {
            let (received, back) = py.detach(move || {
                let received = receiver.recv_timeout(SIGNAL_CHECK);
                (received, receiver)
            });
            receiver = back;
            match received {
                Ok(value) => return Ok(value),
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(interrupted) = py.check_signals() {
                        return Err(self.abandon(receiver, task, interrupted));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(dropped_call()),
            }
        }
    }

    /// Run `future` and hand `convert(output)` to Python: blocking
    /// ([`block_on`](Self::block_on)) or as an awaitable
    /// ([`awaitable`](Self::awaitable)), as `is_async` says. Every call of
    /// the package that has an `_async` twin goes through here.
    pub(crate) fn run<T, F, C>(
        &self,
        py: Python<'_>,
        is_async: bool,
        future: F,
        convert: C,
    ) -> PyResult<Py<PyAny>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
        C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        if is_async {
            Ok(self.awaitable(py, future, convert)?.unbind())
        } else {
            let output = self.block_on(py, future)?;
            convert(py, output)
        }
    }

    /// Run `future` on the runtime and return an asyncio future of the
    /// running event loop that completes with `convert(output)`. Cancelling
    /// the asyncio future (a `wait_for` timeout, a cancelled task) cancels
    /// `future`.
    pub(crate) fn awaitable<'py, T, F, C>(
        &self,
        py: Python<'py>,
        future: F,
        convert: C,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
        C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    {
        let prepared = (|| -> PyResult<(Py<PyAny>, Py<PyAny>, Py<PyAny>)> {
            self.pid.check(py)?;
            let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
            let py_future = event_loop.call_method0("create_future")?.unbind();
            Ok((event_loop.unbind(), py_future, settle_function(py)?))
        })();
        let (event_loop, py_future, settle) = match prepared {
            Ok(prepared) => prepared,
            Err(error) => {
                // The call may own a lock (a release's guard): dropped on the
                // runtime, where a lock's drop releases it.
                if self.pid.is_current() {
                    self.runtime.spawn(async move { drop(future) });
                } else {
                    std::mem::forget(future);
                }
                return Err(error);
            }
        };
        let target = py_future.clone_ref(py);
        let task = self.runtime.spawn(async move {
            let output = AssertUnwindSafe(future).catch_unwind().await;
            // Handing the result to the event loop needs the GIL: on a thread
            // of the blocking pool, never on one that runs heartbeats.
            let handed = tokio::task::spawn_blocking(move || {
                Python::attach(|py| {
                    let converted = match output {
                        Ok(output) => {
                            std::panic::catch_unwind(AssertUnwindSafe(|| convert(py, output)))
                                .unwrap_or_else(|_| Err(panicked()))
                        }
                        Err(_) => Err(panicked()),
                    };
                    let (ok, value) = match converted {
                        Ok(value) => (true, value),
                        Err(error) => (false, error.into_value(py).into_any()),
                    };
                    // Fails only when the loop is closed: nobody is waiting.
                    let _ = event_loop
                        .bind(py)
                        .call_method1("call_soon_threadsafe", (settle, target, ok, value));
                })
            });
            // Fails only if the runtime is shutting down: nobody is waiting.
            let _ = handed.await;
        });
        let abort = task.abort_handle();
        let on_done = PyCFunction::new_closure(
            py,
            None,
            None,
            move |args: &Bound<'_, pyo3::types::PyTuple>,
                  _kwargs: Option<&Bound<'_, pyo3::types::PyDict>>|
                  -> PyResult<()> {
                let done = args.get_item(0)?;
                if done.call_method0("cancelled")?.is_truthy()? {
                    abort.abort();
                }
                Ok(())
            },
        )?;
        let py_future = py_future.into_bound(py);
        py_future.call_method1("add_done_callback", (on_done,))?;
        Ok(py_future)
    }
}

fn panicked() -> PyErr {
    errors::runtime_failed("the lock runtime panicked during this call (a bug: please report it)")
}

impl ProcessRuntime {
    /// `future` as a task of its own: awaiting the result can be cancelled
    /// (Ctrl-C, a cancelled await) without cancelling the call. `None` if
    /// the task panicked.
    pub(crate) fn detached<T, F>(
        &self,
        future: F,
    ) -> impl Future<Output = Option<T>> + Send + 'static
    where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let task = self.runtime.spawn(future);
        async move { task.await.ok() }
    }
}

fn dropped_call() -> PyErr {
    errors::runtime_failed(
        "the lock runtime dropped a call before it ended (a bug: please report it)",
    )
}

/// `_native._panicking_call()`: a blocking call whose future panics on the
/// runtime, so the package's tests can check that a call ending abnormally
/// (a bug) wakes its caller with an error instead of leaving it blocked. Not
/// part of the API; nothing else reaches a panic.
#[pyfunction]
pub(crate) fn _panicking_call(py: Python<'_>) -> PyResult<()> {
    runtime()?.block_on(py, async {
        if std::hint::black_box(true) {
            panic!("a call that panics, for the package's tests");
        }
    })
}

/// `lease_lock._bridge.settle`: sets a future's result or exception unless it
/// was cancelled meanwhile.
fn settle_function(py: Python<'_>) -> PyResult<Py<PyAny>> {
    static SETTLE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    Ok(SETTLE
        .import(py, "lease_lock._bridge", "settle")?
        .clone()
        .unbind())
}

/// The id of a process, to tell a child of `fork()` from its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pid(u32);

impl Pid {
    pub(crate) fn current() -> Self {
        Pid(std::process::id())
    }

    /// Refuse to use, in a child of `fork()`, what was made in the parent.
    pub(crate) fn check(self, py: Python<'_>) -> PyResult<()> {
        let current = Pid::current();
        if self == current {
            Ok(())
        } else {
            Err(errors::forked(
                py,
                format!(
                    "this object was created in process {} and cannot be used after fork() in process {}: \
                 create the store and the LockClient again in this process",
                    self.0, current.0
                ),
            ))
        }
    }

    /// Whether this is the current process.
    pub(crate) fn is_current(self) -> bool {
        self == Pid::current()
    }
}

/// `future`'s output, or `None` once `limit` has passed (`None`: no limit):
/// the `timeout=` of the package's blocking waits.
pub(crate) async fn within<T>(
    limit: Option<std::time::Duration>,
    future: impl Future<Output = T>,
) -> Option<T> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future).await.ok(),
        None => Some(future.await),
    }
}
