//! One heartbeat task per client for all held locks: it takes the due ones from
//! the registry's schedule, sends them earliest deadline first as the pacing
//! allows (`pacing`), and runs each heartbeat concurrently with its own retries
//! (a throttled one comes back to the task, to go again in its turn).

use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tokio::task::JoinSet;
use tracing::Instrument;

use crate::LostReason;
use crate::clock::Instant;
use crate::held::Held;
use crate::metrics::HeartbeatOutcome;
use crate::pacing::Pacer;
use crate::registry::Registry;
use crate::shared::{AbortOnDrop, Shared};
use crate::write::{HeldWrite, WriteEnd};

/// Clears `Registry::served` when the task's future is dropped, whether it ran
/// or not.
struct Serving(Arc<Registry>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.served.store(false, Ordering::Release);
    }
}

impl Shared {
    /// Record a fresh acquisition and queue its first heartbeat, between
    /// three quarters of the heartbeat period and the period after `sent`, so
    /// locks taken together do not beat together.
    pub(crate) fn register(self: &Arc<Self>, held: &Arc<Held>, sent: Instant) {
        self.start_heartbeats();
        let period = held.heartbeat_period;
        let first = sent + period - (period / 4).mul_f64(self.backoff.random());
        self.registry.hold(held, first);
    }

    /// Start the heartbeat task, or restart one that ended (its runtime went away,
    /// or it panicked): the schedule stays, and the locks whose heartbeat was in
    /// flight in the old task are added back.
    ///
    /// Called by every registration, the check made once, under the mutex: a
    /// task serving the registry is left alone, and so is a client shutting
    /// down (an acquire racing shutdown is undone, and needs no task).
    fn start_heartbeats(self: &Arc<Self>) {
        let mut heartbeats = self
            .heartbeats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.registry.is_served() || self.ensure_running().is_err() {
            return;
        }
        if heartbeats.take().is_some() {
            // A restart: the old task's heartbeats in flight died with it. Their
            // locks are out of the schedule; put them back, due now, before the
            // new task first reads it (so it needs no wake-up for them).
            let now = self.clock.now();
            let mut book = self.registry.lock();
            let unscheduled: Vec<Arc<Held>> = book
                .held_locks()
                .filter(|held| !held.slot.is_scheduled() && held.wants_heartbeat())
                .cloned()
                .collect();
            for held in &unscheduled {
                // No wake-up: the new task reads the schedule before it sleeps.
                let _ = book.schedule(held, now);
            }
        }
        *heartbeats = Some(spawn(
            Arc::downgrade(self),
            self.clock.clone(),
            Pacer::new(
                self.config.heartbeat_rate_limit,
                self.config.retry_base,
                self.config.retry_max,
                self.clock.now(),
            ),
            self.registry.clone(),
        ));
    }
}

/// Start the task serving `registry`'s schedule for the client `shared`.
fn spawn(
    shared: Weak<Shared>,
    clock: Arc<dyn crate::Clock>,
    pacer: Pacer,
    registry: Arc<Registry>,
) -> AbortOnDrop {
    registry.served.store(true, Ordering::Release);
    let serving = Serving(registry);
    AbortOnDrop(tokio::spawn(
        async move {
            let serving = serving;
            run(shared, serving.0.clone(), clock, pacer).await;
        }
        .instrument(tracing::debug_span!("heartbeats")),
    ))
}

/// A lock whose heartbeat is due, waiting for a slot: the heap yields the one
/// whose safe time ends first (then the first to arrive), so under a rate limit
/// or throttling a lock nearer its deadline never waits behind later ones.
struct Ready {
    /// The end of its safe time when it became due.
    deadline: Instant,
    /// The end of its lease: past it the heartbeat goes without a slot (it
    /// gives up without a request, and the lock is lost).
    expires: Instant,
    /// When it started waiting for a slot: only a heartbeat already waiting
    /// when a slot opened may take that slot late.
    since: Instant,
    seq: u64,
    held: Weak<Held>,
}

impl Ready {
    fn new(held: &Arc<Held>, seq: u64, since: Instant) -> Self {
        let (deadline, expires) = held.deadlines();
        Self {
            deadline,
            expires,
            since,
            seq,
            held: Arc::downgrade(held),
        }
    }
}

impl PartialEq for Ready {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}

impl Eq for Ready {}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ready {
    /// Reversed: `BinaryHeap` is a max-heap, and the earliest deadline goes first.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

/// How one heartbeat ended, for the task.
enum Beat {
    /// Confirmed: heartbeat again at this instant.
    Confirmed(Arc<Held>, Instant),
    /// Throttled: send it again in its turn.
    Throttled(Arc<Held>),
    /// No more heartbeats for this lock (lost, stopped, released).
    Done,
}

/// The task: take the due locks, send their heartbeats earliest deadline first
/// as the pacing allows (the client's rate limit; a slower pace once the store
/// throttles), schedule the next one as each is confirmed, sleep until the next
/// is due or the next slot opens.
async fn run(
    inner: Weak<Shared>,
    schedule: Arc<Registry>,
    clock: Arc<dyn crate::Clock>,
    mut pacer: Pacer,
) {
    let mut ready: BinaryHeap<Ready> = BinaryHeap::new();
    let mut arrivals: u64 = 0;
    let mut running: JoinSet<Beat> = JoinSet::new();
    // Which lock each running heartbeat is for: a heartbeat that panics (a store
    // that panics) returns nothing, and its lock must not be left unheartbeaten
    // while its guard still looks held.
    let mut beating: HashMap<tokio::task::Id, Arc<Held>> = HashMap::new();
    loop {
        let now = clock.now();
        for held in schedule.take_due(now) {
            if held.wants_heartbeat() {
                arrivals += 1;
                ready.push(Ready::new(&held, arrivals, now));
            }
        }
        let mut next_slot = None;
        while let Some(first) = ready.peek() {
            let expired = first.expires <= now;
            let Some(held) = first.held.upgrade().filter(|held| held.wants_heartbeat()) else {
                ready.pop();
                continue;
            };
            if !expired && let Err(at) = pacer.take(now, first.since) {
                next_slot = Some(at);
                break;
            }
            ready.pop();
            let Some(inner) = inner.upgrade() else { return };
            let task = running.spawn(heartbeat(inner, held.clone()));
            beating.insert(task.id(), held);
        }
        let wake = [
            schedule.arm(),
            next_slot,
            ready.peek().map(|first| first.expires),
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            () = schedule.wake.notified() => {}
            Some(done) = running.join_next_with_id(), if !running.is_empty() => match done {
                Ok((id, beat)) => {
                    beating.remove(&id);
                    match beat {
                        Beat::Confirmed(held, at) => {
                            pacer.confirmed(clock.now());
                            schedule.schedule(&held, at);
                        }
                        Beat::Throttled(held) => {
                            pacer.throttled(clock.now());
                            arrivals += 1;
                            ready.push(Ready::new(&held, arrivals, clock.now()));
                        }
                        Beat::Done => {}
                    }
                }
                Err(failed) => {
                    if let Some(held) = beating.remove(&failed.id())
                        && let Some(inner) = inner.upgrade()
                    {
                        tracing::error!(key = %held.key, error = %failed, "lock lost: its heartbeat panicked");
                        inner.metrics.heartbeat(&held.key, HeartbeatOutcome::Failed, std::time::Duration::ZERO);
                        inner.lose(&held, LostReason::Expired);
                    }
                }
            },
            () = sleep_until_due(clock.as_ref(), wake), if wake.is_some() => {}
        }
    }
}

async fn sleep_until_due(clock: &dyn crate::Clock, due: Option<Instant>) {
    if let Some(due) = due {
        clock.sleep_until(due).await;
    }
}

/// One heartbeat of one lock, with retries until the lease runs out (a throttle
/// goes back to the task). Says when to heartbeat next.
async fn heartbeat(inner: Arc<Shared>, held: Arc<Held>) -> Beat {
    let span = tracing::debug_span!("heartbeat", key = %held.key, fence = %held.fence);
    async {
        let _writing = held.writing().await;
        // Read under the write lock; a lock released meanwhile ends as `Stopped`.
        let snapshot = held.snapshot();
        let now = inner.clock.now();
        if let Some(reason) = held.limits.max_hold_reached(now) {
            if snapshot.wants_heartbeat() {
                tracing::info!(%reason, "lock lost: max hold reached");
                inner.lose(&held, reason);
            }
            return Beat::Done;
        }
        let expires = snapshot.expires;
        // Due a period after the last confirmed write's send (the first one
        // earlier, jittered); the safe time ends at `safe_until`.
        let lateness =
            now.saturating_duration_since(held.state().confirmed_send + held.heartbeat_period);
        let (safe_until, _) = held.deadlines();
        let (beat, outcome) = match inner
            .write_held(&held, HeldWrite::Heartbeat, expires, now, snapshot)
            .await
        {
            WriteEnd::Confirmed => {
                let next = held
                    .state()
                    .next_heartbeat_at(held.heartbeat_period, &held.limits);
                tracing::trace!("heartbeat confirmed");
                let outcome = if inner.clock.now() > safe_until {
                    HeartbeatOutcome::Late
                } else {
                    HeartbeatOutcome::Confirmed
                };
                (Beat::Confirmed(held.clone(), next), Some(outcome))
            }
            WriteEnd::Stolen { owner } => {
                tracing::warn!(owner = owner.as_deref().unwrap_or("-"), "lock lost: stolen");
                inner.lose(&held, LostReason::Stolen { owner });
                (Beat::Done, Some(HeartbeatOutcome::Failed))
            }
            WriteEnd::GaveUp(error) => {
                let error = error.map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(%error, "lock lost: lease expired before a heartbeat was confirmed");
                inner.lose(&held, LostReason::Expired);
                (Beat::Done, Some(HeartbeatOutcome::Failed))
            }
            WriteEnd::Failed(error) => {
                tracing::warn!(%error, "lock lost: the store refused the heartbeat");
                inner.lose(&held, LostReason::Expired);
                (Beat::Done, Some(HeartbeatOutcome::Failed))
            }
            WriteEnd::Stopped => (Beat::Done, None),
            WriteEnd::Throttled(_) => {
                tracing::debug!("heartbeat throttled; sent again in its turn");
                (
                    Beat::Throttled(held.clone()),
                    Some(HeartbeatOutcome::Throttled),
                )
            }
        };
        if let Some(outcome) = outcome {
            inner.metrics.heartbeat(&held.key, outcome, lateness);
        }
        beat
    }
    .instrument(span)
    .await
}
