//! One heartbeat task per client for all held locks: a schedule ordered by due
//! time, rate limited, each heartbeat run concurrently with its own retries.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::LostReason;
use crate::client::Inner;
use crate::clock::Instant;
use crate::held::Held;
use crate::write::{HeldWrite, WriteEnd};

/// When each held lock is next due, shared by the client (which adds and removes
/// entries as locks are acquired and released) and the heartbeat task (which takes
/// the due ones). Entries hold their lock weakly, and a release removes its entry
/// at once, so a lock taken and released between heartbeats costs no work here
/// and leaves nothing behind.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Due times are kept as nanoseconds after this instant (the client's start),
    /// so a lock's entry fits in two atomics of its own.
    base: Instant,
    slots: Mutex<Slots>,
    /// Woken when an entry becomes the earliest, so the task re-arms its timer.
    wake: Notify,
    /// A task is serving this schedule; it clears the flag as it ends, however it
    /// ends (finished, aborted, panicked, its runtime gone).
    served: AtomicBool,
}

#[derive(Debug, Default)]
struct Slots {
    due: BTreeMap<Slot, Weak<Held>>,
    seq: u64,
    /// When the task's timer fires next (`None`: it waits for a wake-up). An entry
    /// due after that needs no wake-up: the task sees it when it re-arms.
    armed: Option<u64>,
}

/// A position in the schedule: due time (nanoseconds after the base), then
/// insertion order (from 1).
type Slot = (u64, u64);

/// A lock's position in the schedule, kept with the lock. Changed only under the
/// schedule's lock, which orders the accesses: relaxed atomics suffice, and a
/// release costs no second mutex.
#[derive(Debug, Default)]
pub(crate) struct SlotCell {
    at: AtomicU64,
    /// 0: not in the schedule.
    seq: AtomicU64,
}

impl SlotCell {
    fn get(&self) -> Option<Slot> {
        match self.seq.load(Ordering::Relaxed) {
            0 => None,
            seq => Some((self.at.load(Ordering::Relaxed), seq)),
        }
    }

    fn replace(&self, slot: Option<Slot>) -> Option<Slot> {
        let old = self.get();
        let (at, seq) = slot.unwrap_or((0, 0));
        self.at.store(at, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Relaxed);
        old
    }

    /// The lock has an entry (read outside the schedule's lock: a hint).
    pub(crate) fn is_scheduled(&self) -> bool {
        self.seq.load(Ordering::Relaxed) != 0
    }
}

impl Schedule {
    pub(crate) fn new(base: Instant) -> Self {
        Self {
            base,
            slots: Mutex::new(Slots::default()),
            wake: Notify::new(),
            served: AtomicBool::new(false),
        }
    }

    fn slots(&self) -> MutexGuard<'_, Slots> {
        // Each update is one insert or remove: a poisoned schedule is still whole.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn offset(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// True while a heartbeat task serves this schedule.
    pub(crate) fn is_served(&self) -> bool {
        self.served.load(Ordering::Acquire)
    }

    /// Heartbeat `held` at `at`, replacing its earlier entry.
    pub(crate) fn add(&self, held: &Arc<Held>, at: Instant) {
        let at = self.offset(at);
        let earliest = {
            let mut slots = self.slots();
            slots.seq += 1;
            let slot = (at, slots.seq);
            if let Some(old) = held.slot.replace(Some(slot)) {
                slots.due.remove(&old);
            }
            slots.due.insert(slot, Arc::downgrade(held));
            slots.armed.is_none_or(|armed| at < armed)
        };
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Stop heartbeating `held`.
    pub(crate) fn remove(&self, held: &Held) {
        if !held.slot.is_scheduled() {
            // Nothing to take out. A heartbeat that ends just now may still add
            // an entry, as it could just after a locked removal: the task skips
            // it when it comes due, since the lock no longer wants heartbeats.
            return;
        }
        let mut slots = self.slots();
        if let Some(slot) = held.slot.replace(None) {
            slots.due.remove(&slot);
        }
    }

    /// Take every entry due by `now`.
    fn take_due(&self, now: Instant) -> Vec<Arc<Held>> {
        let now = self.offset(now);
        let mut slots = self.slots();
        let mut due = Vec::new();
        while let Some(entry) = slots.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (slot, weak) = entry.remove_entry();
            if let Some(held) = weak.upgrade() {
                if held.slot.get() == Some(slot) {
                    held.slot.replace(None);
                }
                due.push(held);
            }
        }
        due
    }

    /// The earliest due time, which the task arms its timer for.
    fn arm(&self) -> Option<Instant> {
        let mut slots = self.slots();
        slots.armed = slots.due.first_key_value().map(|((at, _), _)| *at);
        slots.armed.map(|at| self.base + Duration::from_nanos(at))
    }
}

/// The running task. Dropping it (with the client) stops the task.
#[derive(Debug)]
pub(crate) struct Heartbeats {
    pub task: tokio::task::JoinHandle<()>,
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Clears [`Schedule::served`] when the task's future is dropped, whether it ran
/// or not.
struct Serving(Arc<Schedule>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.served.store(false, Ordering::Release);
    }
}

impl Heartbeats {
    pub(crate) fn start(
        inner: Weak<Inner>,
        clock: Arc<dyn crate::Clock>,
        rate: Option<u32>,
        schedule: Arc<Schedule>,
    ) -> Self {
        schedule.served.store(true, Ordering::Release);
        let serving = Serving(schedule.clone());
        let task = tokio::spawn(
            async move {
                let serving = serving;
                run(inner, serving.0.clone(), clock, rate).await;
            }
            .instrument(tracing::debug_span!("heartbeats")),
        );
        Self { task }
    }
}

async fn run(
    inner: Weak<Inner>,
    schedule: Arc<Schedule>,
    clock: Arc<dyn crate::Clock>,
    rate: Option<u32>,
) {
    let spacing = rate.map(|per_second| Duration::from_secs(1) / per_second.max(1));
    let mut running: JoinSet<Option<(Arc<Held>, Instant)>> = JoinSet::new();
    let mut next_slot = clock.now();
    loop {
        let now = clock.now();
        for held in schedule.take_due(now) {
            if !held.wants_heartbeat() {
                continue;
            }
            if let Some(spacing) = spacing {
                if next_slot > now {
                    schedule.add(&held, next_slot);
                    continue;
                }
                next_slot = next_slot.max(now) + spacing;
            }
            let Some(inner) = inner.upgrade() else { return };
            running.spawn(heartbeat(inner, held));
        }
        let next_due = schedule.arm();
        tokio::select! {
            () = schedule.wake.notified() => {}
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok(Some((held, at))) = done
                    && held.wants_heartbeat()
                {
                    schedule.add(&held, at);
                }
            }
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
async fn heartbeat(inner: Arc<Inner>, held: Arc<Held>) -> Option<(Arc<Held>, Instant)> {
    let span = tracing::debug_span!("heartbeat", key = %held.key, fence = %held.fence);
    let next = async {
        let _writing = held.writing().await;
        if !held.wants_heartbeat() {
            return None;
        }
        let expires = {
            let state = held.state();
            state.confirmed_send + state.lease
        };
        let now = inner.clock.now();
        match inner
            .write_held(&held, HeldWrite::Heartbeat, expires, now)
            .await
        {
            WriteEnd::Confirmed => {
                let next = held.state().confirmed_send + inner.config.heartbeat_period;
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
