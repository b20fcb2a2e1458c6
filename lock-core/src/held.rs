//! The client's bookkeeping for one held lock, shared by its guards and the
//! heartbeat task.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::clock::{Clock, Instant, later};
use crate::protocol::Broken;
pub(crate) use crate::protocol::holding::HeldState;
use crate::slot::SlotCell;
use crate::timing::HoldLimits;
use crate::turns::{Handoff, Phase, Successors, Turn};
use crate::{Fence, LeaseState, LockKey, LostReason, Rvn, Takeover, Timing};

/// A held lock's timing: its lease, with the client's drift bound and a margin
/// for that lease, and how often it is heartbeaten.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LockTiming {
    pub timing: Timing,
    pub heartbeat_period: Duration,
}

/// One acquisition held by this client.
#[derive(Debug)]
pub(crate) struct Held {
    pub key: LockKey,
    pub fence: Fence,
    pub delete_on_release: bool,
    /// This lock's timing: the lease it was acquired with (the client's, or the
    /// acquire's own), the client's drift bound and a margin for that lease.
    pub timing: Timing,
    /// How often it is heartbeaten (the client's period, scaled to its lease).
    pub heartbeat_period: Duration,
    /// The expired lock this acquisition took over, if it did.
    pub took_over: Option<Takeover>,
    /// Its min and max hold, as instants.
    pub limits: HoldLimits,
    /// The key's turn among this client's acquires, held until the lock's
    /// release has finished (or the lock is lost or detached); `None` for a
    /// lock made without one (tests).
    turn: Mutex<Option<Turn>>,
    /// Serializes writes to this record (heartbeat, data update, release), so each
    /// write expects the RVN the previous one confirmed.
    pub write: tokio::sync::Mutex<()>,
    state: Mutex<HeldState>,
    /// Bumped on every change of `state`; waiters for loss or danger watch it.
    /// Made on first subscription: most acquisitions are never watched, and a
    /// channel costs a wake-up even when it is dropped.
    changed: OnceLock<watch::Sender<u64>>,
    /// This lock's entry in the heartbeat schedule (see `registry::Registry`).
    pub slot: SlotCell,
    /// Who else may take the lock over when it is released and no acquire of
    /// its key waits (set by a semaphore for its slots).
    successors: OnceLock<std::sync::Arc<dyn Successors>>,
    /// Called once, the moment the holder lets go (see [`leave`](Self::leave)),
    /// before anything is written: an election deposes its leader there.
    on_leave: OnceLock<LeaveHook>,
    /// Work running under the lock ([`WorkInProgress`](crate::WorkInProgress)):
    /// a release waits for it to end before it writes.
    work: WorkCount,
}

/// What [`Held::on_leave`] calls.
pub(crate) struct LeaveHook(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for LeaveHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaveHook")
    }
}

/// How many pieces of work run under a lock, and a wake-up when one ends.
#[derive(Debug, Default)]
pub(crate) struct WorkCount {
    running: AtomicUsize,
    ended: Notify,
}

/// Which moment [`Held::until`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Until {
    /// The lease is no longer safe: in danger, lost, or let go.
    Unsafe,
    /// The lease is over for good: stolen, expired, past its max hold, or
    /// let go (a release has begun).
    Ended,
    /// As `Ended`, but a release counts only once its write has ended (or
    /// the lock was handed on): when a waiter of this client may look again.
    ReleaseWritten,
}

/// What a write needs from the state, read under one lock.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The RVN the next write expects.
    pub rvn: Rvn,
    pub data: Option<Vec<u8>>,
    /// When the lease runs out, counted from the latest confirmed write.
    pub expires: Instant,
    pub lost: Option<LostReason>,
    pub stopping: bool,
}

impl Snapshot {
    /// Still worth heartbeating: not lost and not being released.
    pub fn wants_heartbeat(&self) -> bool {
        self.lost.is_none() && !self.stopping
    }
}

impl Held {
    pub fn new(
        key: LockKey,
        fence: Fence,
        delete_on_release: bool,
        rvn: Rvn,
        confirmed_send: Instant,
        lock_timing: LockTiming,
        data: Option<Vec<u8>>,
    ) -> Self {
        let LockTiming {
            timing,
            heartbeat_period,
        } = lock_timing;
        Self {
            key,
            fence,
            delete_on_release,
            timing,
            heartbeat_period,
            took_over: None,
            limits: HoldLimits::default(),
            turn: Mutex::new(None),
            write: tokio::sync::Mutex::new(()),
            // `confirmed_send` is where the acquiring write's lease runs
            // from (`protocol::holding::lease_runs_from`).
            state: Mutex::new(HeldState::acquired(
                rvn,
                confirmed_send,
                confirmed_send,
                data,
                Broken::Nothing,
            )),
            changed: OnceLock::new(),
            slot: SlotCell::default(),
            successors: OnceLock::new(),
            on_leave: OnceLock::new(),
            work: WorkCount::default(),
        }
    }

    /// This acquisition holds `turn` (until [`end_turn`](Self::end_turn)) and
    /// took over `took_over`.
    pub fn with_turn(mut self, turn: Option<Turn>, took_over: Option<Takeover>) -> Self {
        if let Some(turn) = &turn {
            turn.set_phase(Phase::Holding);
        }
        self.turn = Mutex::new(turn);
        self.took_over = took_over;
        self
    }

    /// This acquisition's min and max hold.
    pub fn with_limits(mut self, limits: HoldLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The key's turn: another acquire of this client waits for it.
    pub fn has_local_waiters(&self) -> bool {
        self.turn_slot().as_ref().is_some_and(Turn::has_waiters)
    }

    /// Hand the lock to `successors` when it is released while safe and no
    /// acquire of its key waits. Set once.
    pub fn set_successors(&self, successors: std::sync::Arc<dyn Successors>) {
        let _ = self.successors.set(successors);
    }

    /// Where the lock may go on release besides the key's own turn.
    pub fn successors(&self) -> Option<&dyn Successors> {
        self.successors.get().map(|successors| &**successors)
    }

    /// The release has begun: a fail-fast acquire may wait for it.
    pub fn releasing(&self) {
        if let Some(turn) = self.turn_slot().as_ref() {
            turn.set_phase(Phase::Releasing);
        }
    }

    /// Let the next acquire of this key on this client go, leaving it `handoff`
    /// (the lock, to take over in one write) if given. Idempotent.
    pub fn end_turn(&self, handoff: Option<Handoff>) {
        let turn = self.turn_slot().take();
        if let (Some(mut turn), Some(handoff)) = (turn, handoff) {
            turn.hand_off(handoff);
        }
    }

    fn turn_slot(&self) -> MutexGuard<'_, Option<Turn>> {
        self.turn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Take the write lock (see `write`), without building a waiting future
    /// when nothing else is writing, the usual case.
    pub async fn writing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        match self.write.try_lock() {
            Ok(guard) => guard,
            Err(_) => self.write.lock().await,
        }
    }

    /// Lock the state. A poisoned lock still holds consistent data (every update is
    /// a few field stores), so recover it instead of panicking.
    pub fn state(&self) -> MutexGuard<'_, HeldState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Apply `update` to the state and wake everyone watching it.
    pub fn update<R>(&self, update: impl FnOnce(&mut HeldState) -> R) -> R {
        let result = update(&mut self.state());
        // Nobody watching (the common case: no `lost()` future, no write in
        // flight): skip the wake-up. A watcher subscribes before it reads the state,
        // so it cannot miss a change made after it subscribed.
        if let Some(changed) = self.changed.get()
            && changed.receiver_count() > 0
        {
            changed.send_modify(|version| *version = version.wrapping_add(1));
        }
        result
    }

    /// What the next write needs, in one lock.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.state();
        Snapshot {
            rvn: state.rvn.clone(),
            data: state.data.clone(),
            expires: self.timing.expires(state.confirmed_send),
            lost: state.lost.clone(),
            stopping: state.stopping,
        }
    }

    /// The end of the safe time and the end of the lease, counted from the
    /// latest confirmed write.
    pub fn deadlines(&self) -> (Instant, Instant) {
        let confirmed_send = self.state().confirmed_send;
        (
            self.timing.safe_until(confirmed_send),
            self.timing.expires(confirmed_send),
        )
    }

    /// Give up one guard; true when it was the last, and the holder has now
    /// let the lock go (see [`leave`](Self::leave); the caller forgets it and
    /// releases it).
    pub fn drop_guard(&self) -> bool {
        // Let go in the same update that counts the last guard out, so a
        // reentrant acquire can never share a lock that is being released.
        let (last, first) = self.update(HeldState::drop_guard);
        if first {
            self.run_leave_hook();
        }
        last
    }

    /// The holder lets the lock go (a release, hand-off, final write, detach
    /// or shutdown is about to write, or to stop heartbeating): from now on
    /// the lock reads as lost ([`LostReason::Released`]), heartbeats stop,
    /// watchers of `until_unsafe` and `lost` wake, and the leave hook (an
    /// election's step-down) runs. Every way out calls this *before* its
    /// first write. Idempotent.
    pub fn leave(&self) {
        if self.update(HeldState::let_go) {
            self.run_leave_hook();
        }
    }

    /// Another guard for a reentrant acquire at `now`, if the holder trusts
    /// the lock now ([`HeldState::share`]).
    pub fn share(&self, now: Instant) -> bool {
        self.update(|state| state.share(&self.timing, &self.limits, now))
    }

    /// The leave hook, if one is set (run outside the state lock: it may
    /// take locks of its own).
    fn run_leave_hook(&self) {
        if let Some(LeaveHook(hook)) = self.on_leave.get() {
            hook();
        }
    }

    /// Call `hook` when the holder lets the lock go (at once if it already
    /// has). Set once.
    pub fn on_leave(&self, hook: impl Fn() + Send + Sync + 'static) {
        let set = self.on_leave.set(LeaveHook(Box::new(hook))).is_ok();
        if set && self.state().left {
            // Let go before the hook was set: run it now (running it twice is
            // harmless, never running it is not).
            self.run_leave_hook();
        }
    }

    /// One more piece of work runs under the lock.
    pub fn work_started(&self) {
        self.work.running.fetch_add(1, Ordering::AcqRel);
    }

    /// A piece of work under the lock has ended (its future was dropped).
    pub fn work_ended(&self) {
        self.work.running.fetch_sub(1, Ordering::AcqRel);
        self.work.ended.notify_waiters();
    }

    /// Wait until no work runs under the lock, or until the lease ends
    /// (past it, waiting protects nobody; read again on every wake-up, since
    /// a heartbeat in flight when the holder let go may still extend it).
    /// Returns at once outside a tokio runtime, where nothing could run the
    /// work anyway.
    pub async fn work_done(&self, clock: &dyn Clock) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        loop {
            let ended = self.work.ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read, so an end in between wakes it.
            ended.as_mut().enable();
            if self.work.running.load(Ordering::Acquire) == 0 {
                return;
            }
            let (_, expires) = self.deadlines();
            if clock.now() >= expires {
                tracing::warn!(key = %self.key, "work under the lock still ran when its lease ended; \
                    releasing anyway (drop a WorkInProgress before releasing its lock)");
                return;
            }
            tokio::select! {
                () = ended => {}
                () = clock.sleep_until(expires) => {}
            }
        }
    }

    /// A write sent at `sent` with `rvn` is confirmed at `answered`
    /// ([`HeldState::confirm`]: the lease now runs from the send, never
    /// backwards; a confirmed release or delete also marks the lock
    /// released, in the same update).
    pub fn confirm(
        &self,
        rvn: Rvn,
        sent: Instant,
        answered: Instant,
        data: Option<Vec<u8>>,
        released: bool,
    ) {
        self.update(|state| state.confirm(rvn, sent, answered, data, released, Broken::Nothing));
    }

    /// Mark the lease lost for good (the first reason wins).
    pub fn mark_lost(&self, reason: LostReason) {
        self.update(|state| {
            if state.lost.is_none() {
                state.lost = Some(reason);
            }
        });
    }

    /// Still worth heartbeating: not lost and not being released.
    pub fn wants_heartbeat(&self) -> bool {
        let state = self.state();
        state.lost.is_none() && !state.stopping
    }

    /// The holder's view at `now`: a lock let go reads as released.
    pub fn lease_state(&self, now: Instant) -> LeaseState {
        self.lease_state_of(&self.state(), now, true)
    }

    /// The lease at `now` as its writes left it, whether or not the holder
    /// has let go (what a detach hands on).
    pub fn lease_state_as_written(&self, now: Instant) -> LeaseState {
        self.lease_state_of(&self.state(), now, false)
    }

    /// The holder's view at `now` of the lock in `state`: lost for good, let
    /// go (when `count_left`), past its max hold, or as its timing says.
    fn lease_state_of(&self, state: &HeldState, now: Instant, count_left: bool) -> LeaseState {
        state.lease_state(&self.timing, &self.limits, now, count_left, Broken::Nothing)
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed
            .get_or_init(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Resolve with the reason once the moment `until` names has come.
    pub async fn until(&self, clock: &dyn Clock, until: Until) -> LostReason {
        let stop_at_danger = until == Until::Unsafe;
        let count_left = until != Until::ReleaseWritten;
        let mut changes = self.subscribe();
        loop {
            let now = clock.now();
            let wake = {
                let state = self.state();
                if !count_left && state.release_ended {
                    return state.lost.clone().unwrap_or(LostReason::Released);
                }
                // The next look: when the lease leaves the state it is in
                // now (never past the max hold).
                let next = match self.lease_state_of(&state, now, count_left) {
                    LeaseState::Lost { reason } => return reason,
                    LeaseState::InDanger { .. } if stop_at_danger => return LostReason::InDanger,
                    LeaseState::Safe { remaining } if stop_at_danger => later(now, remaining),
                    LeaseState::Safe { .. } => self.timing.expires(state.confirmed_send),
                    LeaseState::InDanger { remaining } => later(now, remaining),
                };
                self.limits.not_after(next)
            };
            tokio::select! {
                () = clock.sleep_until(wake) => {}
                changed = changes.changed() => {
                    // The sender lives as long as `self`; an error cannot happen while
                    // we borrow it, but do not spin if it somehow does.
                    if changed.is_err() {
                        clock.sleep_until(wake).await;
                    }
                }
            }
        }
    }
}
