//! One heartbeat task per client for all held locks: it takes the due ones from
//! the registry's schedule, rate limited, and runs each heartbeat concurrently
//! with its own retries.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinSet;
use tracing::Instrument;

use crate::LostReason;
use crate::clock::Instant;
use crate::held::Held;
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
    /// Record a fresh acquisition and queue its first heartbeat.
    pub(crate) fn register(self: &Arc<Self>, held: &Arc<Held>, sent: Instant) {
        if !self.registry.is_served() {
            self.start_heartbeats();
        }
        self.registry.hold(held, sent, held.heartbeat_period);
    }

    /// Start the heartbeat task, or restart one that ended (its runtime went away,
    /// or it panicked): the schedule stays, and the locks whose heartbeat was in
    /// flight in the old task are added back.
    fn start_heartbeats(self: &Arc<Self>) {
        let mut heartbeats = self
            .heartbeats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Started or restarted meanwhile; or shutting down: an acquire racing
        // shutdown is undone, and needs no task.
        if self.registry.is_served() || self.ensure_running().is_err() {
            return;
        }
        let restarted = heartbeats.take().is_some();
        let task = spawn(
            Arc::downgrade(self),
            self.clock.clone(),
            self.config.heartbeat_rate_limit,
            self.registry.clone(),
        );
        if restarted {
            let now = self.clock.now();
            let mut wake = false;
            {
                let mut book = self.registry.lock();
                let unscheduled: Vec<Arc<Held>> = book
                    .held_locks()
                    .filter(|held| !held.slot.is_scheduled() && held.wants_heartbeat())
                    .cloned()
                    .collect();
                for held in &unscheduled {
                    wake |= book.schedule(held, now);
                }
            }
            // The new task may already have armed its timer (on another worker
            // thread) before these went in.
            if wake {
                self.registry.wake.notify_one();
            }
        }
        *heartbeats = Some(task);
    }
}

/// Start the task serving `registry`'s schedule for the client `shared`.
fn spawn(
    shared: Weak<Shared>,
    clock: Arc<dyn crate::Clock>,
    rate: Option<u32>,
    registry: Arc<Registry>,
) -> AbortOnDrop {
    registry.served.store(true, Ordering::Release);
    let serving = Serving(registry);
    AbortOnDrop(tokio::spawn(
        async move {
            let serving = serving;
            run(shared, serving.0.clone(), clock, rate).await;
        }
        .instrument(tracing::debug_span!("heartbeats")),
    ))
}

/// The task: take the due locks, start each one's heartbeat (rate limited),
/// schedule the next one as each ends, sleep until the earliest is due.
async fn run(
    inner: Weak<Shared>,
    schedule: Arc<Registry>,
    clock: Arc<dyn crate::Clock>,
    rate: Option<u32>,
) {
    let spacing = rate.map(|per_second| Duration::from_secs(1) / per_second.max(1));
    let mut running: JoinSet<Option<(Arc<Held>, Instant)>> = JoinSet::new();
    // Which lock each running heartbeat is for: a heartbeat that panics (a store
    // that panics) returns nothing, and its lock must not be left unheartbeaten
    // while its guard still looks held.
    let mut beating: HashMap<tokio::task::Id, Arc<Held>> = HashMap::new();
    let mut next_slot = clock.now();
    loop {
        let now = clock.now();
        for held in schedule.take_due(now) {
            if !held.wants_heartbeat() {
                continue;
            }
            if let Some(spacing) = spacing {
                if next_slot > now {
                    schedule.schedule(&held, next_slot);
                    continue;
                }
                next_slot = next_slot.max(now) + spacing;
            }
            let Some(inner) = inner.upgrade() else { return };
            let task = running.spawn(heartbeat(inner, held.clone()));
            beating.insert(task.id(), held);
        }
        let next_due = schedule.arm();
        tokio::select! {
            () = schedule.wake.notified() => {}
            Some(done) = running.join_next_with_id(), if !running.is_empty() => match done {
                Ok((id, next)) => {
                    beating.remove(&id);
                    if let Some((held, at)) = next {
                        schedule.schedule(&held, at);
                    }
                }
                Err(failed) => {
                    if let Some(held) = beating.remove(&failed.id())
                        && let Some(inner) = inner.upgrade()
                    {
                        tracing::error!(key = %held.key, error = %failed, "lock lost: its heartbeat panicked");
                        inner.lose(&held, LostReason::Expired);
                    }
                }
            },
            () = sleep_until_due(clock.as_ref(), next_due), if next_due.is_some() => {}
        }
    }
}

async fn sleep_until_due(clock: &dyn crate::Clock, due: Option<Instant>) {
    if let Some(due) = due {
        clock.sleep_until(due).await;
    }
}

/// One heartbeat of one lock, with retries until the lease runs out. Returns when
/// to heartbeat next, or `None` when the lock is no longer heartbeaten.
async fn heartbeat(inner: Arc<Shared>, held: Arc<Held>) -> Option<(Arc<Held>, Instant)> {
    let span = tracing::debug_span!("heartbeat", key = %held.key, fence = %held.fence);
    let next = async {
        let _writing = held.writing().await;
        // Read under the write lock; a lock released meanwhile ends as `Stopped`.
        let snapshot = held.snapshot();
        let now = inner.clock.now();
        let expires = snapshot.expires;
        match inner
            .write_held(&held, HeldWrite::Heartbeat, expires, now, snapshot)
            .await
        {
            WriteEnd::Confirmed => {
                let next = held.state().confirmed_send + held.heartbeat_period;
                tracing::trace!("heartbeat confirmed");
                Some(next)
            }
            WriteEnd::Stolen { owner } => {
                tracing::warn!(owner = owner.as_deref().unwrap_or("-"), "lock lost: stolen");
                inner.lose(&held, LostReason::Stolen { owner });
                None
            }
            WriteEnd::GaveUp(error) => {
                let error = error.map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(%error, "lock lost: lease expired before a heartbeat was confirmed");
                inner.lose(&held, LostReason::Expired);
                None
            }
            WriteEnd::Failed(error) => {
                tracing::warn!(%error, "lock lost: the store refused the heartbeat");
                inner.lose(&held, LostReason::Expired);
                None
            }
            WriteEnd::Stopped => None,
        }
    }
    .instrument(span)
    .await;
    next.map(|at| (held, at))
}
