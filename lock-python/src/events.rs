//! What the runtime's threads hand to Python: `on_unsafe` callbacks to call and
//! `tracing` events to log.
//!
//! The runtime's threads never run Python code: a thread waiting for the GIL
//! is a heartbeat not sent. They put events on a queue instead, and one
//! Python thread (`lease_lock._events`) takes them off with
//! [`next_events`] and calls the callbacks and the `logging` module there.
//! The queue is bounded: log records that do not fit are counted and the
//! count is logged with the next batch; callbacks are never dropped.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use lock_core::LostReason;
use pyo3::prelude::*;
use pyo3::types::PyList;
use tracing::field::{Field, Visit};
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use crate::values::lost_reason;

/// The most log records waiting for the Python thread.
const MAX_LOG_RECORDS: usize = 10_000;

/// One thing for the Python thread to do.
enum Event {
    /// Call `callback(reason)`.
    Lost {
        callback: Py<PyAny>,
        reason: LostReason,
    },
    /// `logging.getLogger(logger).log(level, message)`.
    Log {
        level: u8,
        logger: String,
        message: String,
    },
}

struct Queue {
    events: Mutex<(VecDeque<Event>, usize)>,
    ready: Condvar,
}

static QUEUE: Queue = Queue {
    events: Mutex::new((VecDeque::new(), 0)),
    ready: Condvar::new(),
};
/// Log records dropped because the queue was full, not yet reported.
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Set by [`wake_events`]: the waiting [`next_events`] returns at once.
static WAKE: AtomicBool = AtomicBool::new(false);

/// Make a waiting `next_events` return now (the thread is stopping).
#[pyfunction]
pub(crate) fn wake_events() {
    let guard = QUEUE
        .events
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    WAKE.store(true, Ordering::SeqCst);
    drop(guard);
    QUEUE.ready.notify_all();
}

impl Queue {
    fn push(&self, event: Event) {
        let mut guard = self
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (events, logs) = &mut *guard;
        if let Event::Log { .. } = event {
            if *logs >= MAX_LOG_RECORDS {
                DROPPED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            *logs += 1;
        }
        events.push_back(event);
        drop(guard);
        self.ready.notify_one();
    }
}

/// Have the Python thread call `callback(reason)`.
pub(crate) fn call_on_unsafe(callback: Py<PyAny>, reason: LostReason) {
    QUEUE.push(Event::Lost { callback, reason });
}

/// Wait up to `timeout` seconds for events; return them as tuples,
/// `("lost", callback, reason)` or `("log", level, logger, message)`.
#[pyfunction]
pub(crate) fn next_events(py: Python<'_>, timeout: f64) -> PyResult<Bound<'_, PyList>> {
    let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::from_secs(1));
    let taken: Vec<Event> = py.detach(|| {
        let guard = QUEUE
            .events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (mut guard, _) = QUEUE
            .ready
            .wait_timeout_while(guard, timeout, |(events, _)| {
                events.is_empty() && !WAKE.load(Ordering::SeqCst)
            })
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        WAKE.store(false, Ordering::SeqCst);
        guard.1 = 0;
        guard.0.drain(..).collect()
    });
    let out = PyList::empty(py);
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    if dropped > 0 {
        out.append((
            "log",
            30u8,
            "lease_lock",
            format!("{dropped} log records of the lock runtime were dropped: Python did not take them fast enough"),
        ))?;
    }
    for event in taken {
        match event {
            Event::Lost { callback, reason } => {
                out.append(("lost", callback, lost_reason(py, &reason)?))?;
            }
            Event::Log {
                level,
                logger,
                message,
            } => out.append(("log", level, logger, message))?,
        }
    }
    Ok(out)
}

/// The lowest Python logging level forwarded (`logging.DEBUG` is 10,
/// `WARNING` 30); events below it are not even formatted.
static MIN_LEVEL: AtomicUsize = AtomicUsize::new(30);

/// Forward `tracing` events at or above this Python logging level.
#[pyfunction]
pub(crate) fn set_log_level(level: usize) {
    if MIN_LEVEL.swap(level, Ordering::Relaxed) != level {
        // Each call site cached whether it is enabled (below): ask them again.
        tracing::callsite::rebuild_interest_cache();
    }
}

fn forwarded(level: &Level) -> bool {
    usize::from(python_level(level)) >= MIN_LEVEL.load(Ordering::Relaxed)
}

fn python_level(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 40,
        Level::WARN => 30,
        Level::INFO => 20,
        Level::DEBUG => 10,
        _ => 5,
    }
}

/// Sends `tracing` events to the Python thread as log records for the
/// logger `lease_lock.<target>` (`lock_core::heartbeat` becomes
/// `lease_lock.lock_core.heartbeat`).
pub(crate) struct ToPythonLogging;

impl<S: Subscriber> Layer<S> for ToPythonLogging {
    fn register_callsite(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Decided once per call site, so a disabled event or span (the AWS
        // SDK has many at debug and trace level on every request) costs
        // nothing; `set_log_level` has them decided again.
        if forwarded(metadata.level()) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        forwarded(metadata.level())
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let mut text = Fields::default();
        event.record(&mut text);
        let mut logger = String::from("lease_lock.");
        logger.push_str(&metadata.target().replace("::", "."));
        QUEUE.push(Event::Log {
            level: python_level(metadata.level()),
            logger,
            message: text.finish(),
        });
    }
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Fields {
    fn finish(mut self) -> String {
        if !self.rest.is_empty() {
            if !self.message.is_empty() {
                self.message.push(' ');
            }
            self.message.push_str(&self.rest);
        }
        self.message
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            if !self.rest.is_empty() {
                self.rest.push(' ');
            }
            let _ = write!(self.rest, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            if !self.rest.is_empty() {
                self.rest.push(' ');
            }
            let _ = write!(self.rest, "{}={value}", field.name());
        }
    }
}

/// Route this process's `tracing` events to Python's `logging`, unless the
/// program already installed a subscriber of its own.
pub(crate) fn install_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(ToPythonLogging);
    // Fails only if a subscriber is installed already: that one stays.
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// In a child of `fork()`: forget the parent's queued events (its callbacks
/// are for the parent's locks).
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    // A thread of the parent may have held the lock at the fork; such a
    // thread does not exist here, so never wait for it.
    if let Ok(mut guard) = QUEUE.events.try_lock() {
        guard.0.clear();
        guard.1 = 0;
    }
    DROPPED.store(0, Ordering::Relaxed);
}
