//! Metrics, through the [`metrics`] facade: every name, unit and label the
//! client emits is here, and emitted from here (the protocol's files call one
//! method each). With no recorder installed they cost a branch each; install
//! one (Prometheus, StatsD, OpenTelemetry: any `metrics` exporter) **before**
//! building clients, since each client registers its handles when it is
//! built. [`describe`] gives the recorder the units and descriptions.
//!
//! Labels are bounded: an operation, an outcome, a reason. A lock's key is a
//! label only when the client is built with
//! [`metric_key_labels(true)`](crate::LockClientBuilder::metric_key_labels)
//! (one series per key: for a handful of well-known keys, never for keys
//! made per job or per user).
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | `lock_store_calls_total` | counter | `op`, `outcome` | store calls by operation (`get`, `put`, `delete`, `list`) and outcome (`ok`, `applied`, `rejected`, or the error kind: `throttled`, `unavailable`, `ambiguous`, `not_found`, `invalid`, `unauthorized`, `other`) |
//! | `lock_store_call_seconds` | histogram | `op`, `outcome` | each store call's latency |
//! | `lock_acquires_total` | counter | `outcome` | acquires that ended: `acquired`, `timeout`, `busy` (held by another task of this client, fail-fast), `not_found`, `shutdown`, `error` |
//! | `lock_acquire_seconds` | histogram | `outcome` | how long each acquire took |
//! | `lock_acquire_wait_seconds` | histogram | `outcome` | how long each acquire that found the lock taken waited (contention) |
//! | `lock_takeovers_total` | counter | | locks taken over from a holder that stopped heartbeating |
//! | `lock_local_handoffs_total` | counter | | locks (or permits) handed to another task of the client in one write |
//! | `lock_heartbeats_total` | counter | `outcome` | heartbeats: `confirmed`, `late` (confirmed after the safe time ended: the lock was in danger meanwhile), `throttled` (sent again in turn), `failed` (the lock was lost) |
//! | `lock_heartbeat_lateness_seconds` | histogram | | how long after it was due each heartbeat was sent (rate limits, throttling, a busy runtime) |
//! | `lock_locks_held` | gauge | | locks held by the process's clients now |
//! | `lock_locks_lost_total` | counter | `reason` | locks lost while held: `stolen`, `expired`, `max_hold` |
//! | `lock_shutdown_locks_total` | counter | `result` | locks `shutdown()` released, `failed` to release or `timed_out` on |

use std::time::Duration;

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Level, Metadata, SharedString, Unit,
};

use crate::{LockKey, LostReason, StoreErrorKind};

#[cfg(feature = "collector")]
mod collector;
mod store;

#[cfg(feature = "collector")]
pub use collector::{Collector, Figure, FigureValue, Summary};
pub(crate) use store::ObservedStore;
pub use store::StoreMetrics;

/// Store calls, by `op` and `outcome`.
pub const STORE_CALLS: &str = "lock_store_calls_total";
/// Store call latency in seconds, by `op` and `outcome`.
pub const STORE_CALL_SECONDS: &str = "lock_store_call_seconds";
/// Acquires that ended, by `outcome`.
pub const ACQUIRES: &str = "lock_acquires_total";
/// Acquire latency in seconds, by `outcome`.
pub const ACQUIRE_SECONDS: &str = "lock_acquire_seconds";
/// Time waited by acquires that found the lock taken, in seconds, by `outcome`.
pub const ACQUIRE_WAIT_SECONDS: &str = "lock_acquire_wait_seconds";
/// Locks taken over from a holder that stopped heartbeating.
pub const TAKEOVERS: &str = "lock_takeovers_total";
/// Locks handed to another task of the same client.
pub const LOCAL_HANDOFFS: &str = "lock_local_handoffs_total";
/// Heartbeats, by `outcome`.
pub const HEARTBEATS: &str = "lock_heartbeats_total";
/// How late each heartbeat was sent, in seconds.
pub const HEARTBEAT_LATENESS_SECONDS: &str = "lock_heartbeat_lateness_seconds";
/// Locks held now.
pub const LOCKS_HELD: &str = "lock_locks_held";
/// Locks lost while held, by `reason`.
pub const LOCKS_LOST: &str = "lock_locks_lost_total";
/// Locks `shutdown()` dealt with, by `result`.
pub const SHUTDOWN_LOCKS: &str = "lock_shutdown_locks_total";

/// Give the installed recorder every metric's unit and description (what an
/// exporter prints as `# HELP` and `# UNIT`). Call once, after installing it.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        STORE_CALLS,
        Unit::Count,
        "Store calls by operation and outcome"
    );
    describe_histogram!(
        STORE_CALL_SECONDS,
        Unit::Seconds,
        "Store call latency by operation and outcome"
    );
    describe_counter!(ACQUIRES, Unit::Count, "Acquires that ended, by outcome");
    describe_histogram!(ACQUIRE_SECONDS, Unit::Seconds, "Acquire latency by outcome");
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time waited by acquires that found the lock taken, by outcome"
    );
    describe_counter!(
        TAKEOVERS,
        Unit::Count,
        "Locks taken over from a holder that stopped heartbeating"
    );
    describe_counter!(
        LOCAL_HANDOFFS,
        Unit::Count,
        "Locks handed to another task of the same client in one write"
    );
    describe_counter!(HEARTBEATS, Unit::Count, "Heartbeats by outcome");
    describe_histogram!(
        HEARTBEAT_LATENESS_SECONDS,
        Unit::Seconds,
        "How long after it was due each heartbeat was sent"
    );
    describe_gauge!(LOCKS_HELD, Unit::Count, "Locks held now");
    describe_counter!(LOCKS_LOST, Unit::Count, "Locks lost while held, by reason");
    describe_counter!(
        SHUTDOWN_LOCKS,
        Unit::Count,
        "Locks shutdown() released, failed to release or timed out on"
    );
}

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn counter(name: &'static str, labels: Vec<Label>) -> Counter {
    metrics::with_recorder(|recorder| {
        recorder.register_counter(&Key::from_parts(name, labels), &METADATA)
    })
}

fn histogram(name: &'static str, labels: Vec<Label>) -> Histogram {
    metrics::with_recorder(|recorder| {
        recorder.register_histogram(&Key::from_parts(name, labels), &METADATA)
    })
}

fn gauge(name: &'static str) -> Gauge {
    metrics::with_recorder(|recorder| {
        recorder.register_gauge(&Key::from_name(KeyName::from_const_str(name)), &METADATA)
    })
}

fn label(name: &'static str, value: &'static str) -> Label {
    Label::from_static_parts(name, value)
}

/// Which store method a call is, as a label.
const OPS: [&str; 5] = ["get", "put", "delete", "list", "put_many"];

/// How a store call ended, as a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreOutcome {
    /// A read answered.
    Ok,
    /// A write applied.
    Applied,
    /// A write's condition did not hold.
    Rejected,
    /// An error of this kind.
    Error(StoreErrorKind),
}

const STORE_OUTCOMES: [&str; 10] = [
    "ok",
    "applied",
    "rejected",
    "throttled",
    "unavailable",
    "ambiguous",
    "not_found",
    "invalid",
    "unauthorized",
    "other",
];

impl StoreOutcome {
    fn index(self) -> usize {
        match self {
            StoreOutcome::Ok => 0,
            StoreOutcome::Applied => 1,
            StoreOutcome::Rejected => 2,
            StoreOutcome::Error(kind) => match kind {
                StoreErrorKind::Throttled => 3,
                StoreErrorKind::Unavailable => 4,
                StoreErrorKind::Ambiguous => 5,
                StoreErrorKind::NotFound => 6,
                StoreErrorKind::Invalid => 7,
                StoreErrorKind::Unauthorized => 8,
                _ => 9,
            },
        }
    }

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        STORE_OUTCOMES[self.index()]
    }
}

/// How an acquire ended, as a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcquireOutcome {
    Acquired,
    Timeout,
    Busy,
    NotFound,
    Shutdown,
    Error,
}

const ACQUIRE_OUTCOMES: [&str; 6] = [
    "acquired",
    "timeout",
    "busy",
    "not_found",
    "shutdown",
    "error",
];

impl AcquireOutcome {
    /// The outcome of an acquire that ended with `result`.
    pub(crate) fn of<T>(result: &Result<T, crate::LockError>) -> Self {
        use crate::LockError;
        match result {
            Ok(_) => AcquireOutcome::Acquired,
            Err(LockError::AcquireTimeout { .. }) => AcquireOutcome::Timeout,
            Err(LockError::AlreadyHeld { .. }) => AcquireOutcome::Busy,
            Err(LockError::NotFound { .. }) => AcquireOutcome::NotFound,
            Err(LockError::Shutdown) => AcquireOutcome::Shutdown,
            Err(_) => AcquireOutcome::Error,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a heartbeat ended, as a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeartbeatOutcome {
    Confirmed,
    Late,
    Throttled,
    Failed,
}

const HEARTBEAT_OUTCOMES: [&str; 4] = ["confirmed", "late", "throttled", "failed"];

const LOST_REASONS: [&str; 3] = ["stolen", "expired", "max_hold"];

const SHUTDOWN_RESULTS: [&str; 3] = ["released", "failed", "timed_out"];

/// One client's metric handles, registered with the recorder installed when
/// the client was built (so a call costs no lookup).
#[derive(Debug)]
pub(crate) struct ClientMetrics {
    /// Add a `key` label (registered per call).
    key_labels: bool,
    store_calls: Vec<[Counter; 10]>,
    store_seconds: Vec<[Histogram; 10]>,
    acquires: [Counter; 6],
    acquire_seconds: [Histogram; 6],
    acquire_wait: [Histogram; 6],
    takeovers: Counter,
    handoffs: Counter,
    heartbeats: [Counter; 4],
    lateness: Histogram,
    held: Gauge,
    lost: [Counter; 3],
    shutdown: [Counter; 3],
}

impl ClientMetrics {
    pub(crate) fn new(key_labels: bool) -> Self {
        Self {
            key_labels,
            store_calls: OPS
                .iter()
                .map(|op| {
                    std::array::from_fn(|i| {
                        counter(
                            STORE_CALLS,
                            vec![label("op", op), label("outcome", STORE_OUTCOMES[i])],
                        )
                    })
                })
                .collect(),
            store_seconds: OPS
                .iter()
                .map(|op| {
                    std::array::from_fn(|i| {
                        histogram(
                            STORE_CALL_SECONDS,
                            vec![label("op", op), label("outcome", STORE_OUTCOMES[i])],
                        )
                    })
                })
                .collect(),
            acquires: counters(ACQUIRES, "outcome", &ACQUIRE_OUTCOMES),
            acquire_seconds: histograms(ACQUIRE_SECONDS, &ACQUIRE_OUTCOMES),
            acquire_wait: histograms(ACQUIRE_WAIT_SECONDS, &ACQUIRE_OUTCOMES),
            takeovers: counter(TAKEOVERS, Vec::new()),
            handoffs: counter(LOCAL_HANDOFFS, Vec::new()),
            heartbeats: counters(HEARTBEATS, "outcome", &HEARTBEAT_OUTCOMES),
            lateness: histogram(HEARTBEAT_LATENESS_SECONDS, Vec::new()),
            held: gauge(LOCKS_HELD),
            lost: counters(LOCKS_LOST, "reason", &LOST_REASONS),
            shutdown: counters(SHUTDOWN_LOCKS, "result", &SHUTDOWN_RESULTS),
        }
    }

    /// The metric with `key` as one more label, when the client asked for
    /// key labels (else the caller uses its registered handle).
    fn counter_for(
        &self,
        name: &'static str,
        labels: &[(&'static str, &'static str)],
        key: Option<&LockKey>,
    ) -> Option<Counter> {
        let key = key.filter(|_| self.key_labels)?;
        Some(counter(name, with_key(labels, key)))
    }

    fn histogram_for(
        &self,
        name: &'static str,
        labels: &[(&'static str, &'static str)],
        key: Option<&LockKey>,
    ) -> Option<Histogram> {
        let key = key.filter(|_| self.key_labels)?;
        Some(histogram(name, with_key(labels, key)))
    }

    /// A store call of `op` (index into [`OPS`]) on `key` ended with `outcome`
    /// after `elapsed`.
    pub(crate) fn store_call(
        &self,
        op: usize,
        key: Option<&LockKey>,
        outcome: StoreOutcome,
        elapsed: Duration,
    ) {
        let o = outcome.index();
        let labels = [("op", OPS[op]), ("outcome", STORE_OUTCOMES[o])];
        match self.counter_for(STORE_CALLS, &labels, key) {
            Some(keyed) => keyed.increment(1),
            None => self.store_calls[op][o].increment(1),
        }
        match self.histogram_for(STORE_CALL_SECONDS, &labels, key) {
            Some(keyed) => keyed.record(elapsed.as_secs_f64()),
            None => self.store_seconds[op][o].record(elapsed.as_secs_f64()),
        }
    }

    /// An acquire of `key` ended with `outcome` after `elapsed`; `waited`
    /// when it found the lock taken.
    pub(crate) fn acquire(
        &self,
        key: &LockKey,
        outcome: AcquireOutcome,
        elapsed: Duration,
        waited: bool,
    ) {
        let o = outcome.index();
        let labels = [("outcome", ACQUIRE_OUTCOMES[o])];
        match self.counter_for(ACQUIRES, &labels, Some(key)) {
            Some(keyed) => keyed.increment(1),
            None => self.acquires[o].increment(1),
        }
        let seconds = elapsed.as_secs_f64();
        match self.histogram_for(ACQUIRE_SECONDS, &labels, Some(key)) {
            Some(keyed) => keyed.record(seconds),
            None => self.acquire_seconds[o].record(seconds),
        }
        if waited {
            match self.histogram_for(ACQUIRE_WAIT_SECONDS, &labels, Some(key)) {
                Some(keyed) => keyed.record(seconds),
                None => self.acquire_wait[o].record(seconds),
            }
        }
    }

    /// `key` was taken over from a holder that stopped heartbeating.
    pub(crate) fn takeover(&self, key: &LockKey) {
        match self.counter_for(TAKEOVERS, &[], Some(key)) {
            Some(keyed) => keyed.increment(1),
            None => self.takeovers.increment(1),
        }
    }

    /// `key` was handed to another task of this client.
    pub(crate) fn handoff(&self, key: &LockKey) {
        match self.counter_for(LOCAL_HANDOFFS, &[], Some(key)) {
            Some(keyed) => keyed.increment(1),
            None => self.handoffs.increment(1),
        }
    }

    /// A heartbeat of `key`, sent `lateness` after it was due, ended with
    /// `outcome`.
    pub(crate) fn heartbeat(&self, key: &LockKey, outcome: HeartbeatOutcome, lateness: Duration) {
        let o = outcome as usize;
        let labels = [("outcome", HEARTBEAT_OUTCOMES[o])];
        match self.counter_for(HEARTBEATS, &labels, Some(key)) {
            Some(keyed) => keyed.increment(1),
            None => self.heartbeats[o].increment(1),
        }
        if outcome != HeartbeatOutcome::Throttled {
            match self.histogram_for(HEARTBEAT_LATENESS_SECONDS, &[], Some(key)) {
                Some(keyed) => keyed.record(lateness.as_secs_f64()),
                None => self.lateness.record(lateness.as_secs_f64()),
            }
        }
    }

    /// One more lock held.
    pub(crate) fn held_more(&self) {
        self.held.increment(1.0);
    }

    /// `count` fewer locks held.
    pub(crate) fn held_fewer(&self, count: usize) {
        self.held.decrement(count as f64);
    }

    /// `key` was lost while held, for `reason` (a release is not a loss).
    pub(crate) fn lost(&self, key: &LockKey, reason: &LostReason) {
        let r = match reason {
            LostReason::Stolen { .. } => 0,
            LostReason::Expired | LostReason::InDanger => 1,
            LostReason::MaxHold { .. } => 2,
            LostReason::Released => return,
        };
        let labels = [("reason", LOST_REASONS[r])];
        match self.counter_for(LOCKS_LOST, &labels, Some(key)) {
            Some(keyed) => keyed.increment(1),
            None => self.lost[r].increment(1),
        }
    }

    /// What `shutdown()` reported.
    pub(crate) fn shutdown(&self, report: &crate::ShutdownReport) {
        for (counter, count) in self.shutdown.iter().zip([
            report.released.len(),
            report.failed.len(),
            report.timed_out.len(),
        ]) {
            counter.increment(count as u64);
        }
    }
}

fn with_key(labels: &[(&'static str, &'static str)], key: &LockKey) -> Vec<Label> {
    let mut all: Vec<Label> = labels
        .iter()
        .map(|(name, value)| label(name, value))
        .collect();
    all.push(Label::new("key", SharedString::from(key.to_string())));
    all
}

/// One counter per value of one label.
fn counters<const N: usize>(
    name: &'static str,
    label_name: &'static str,
    values: &[&'static str; N],
) -> [Counter; N] {
    std::array::from_fn(|i| counter(name, vec![label(label_name, values[i])]))
}

/// One histogram per `outcome`.
fn histograms<const N: usize>(name: &'static str, values: &[&'static str; N]) -> [Histogram; N] {
    std::array::from_fn(|i| histogram(name, vec![label("outcome", values[i])]))
}
