//! The simulation's view of the truth: what the store granted, what the fenced
//! resource accepted, which guards exist, in true (tokio) time, and the checks of
//! the protocol's invariants against it.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{Fence, FenceUpdate, LockKey, LockRecord, LockView, NewRecord};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Schedule, SimReport, Violation};

/// Trace entries kept for a violation report.
const TRACE: usize = 400;

/// Why a key is free for a waiter to take, and since when.
#[derive(Clone, Copy, Debug)]
enum Free {
    /// Released at this instant.
    Released(Instant),
    /// Its holder crashed; the record was last written at this instant.
    Orphaned(Instant, Duration),
}

#[derive(Debug)]
struct KeyState {
    key: LockKey,
    /// Highest fence the store has granted.
    granted: Fence,
    /// Owner of the current acquisition (None once released).
    holder: Option<String>,
    last_write: Instant,
    free: Option<Free>,
    /// Highest fence the resource accepted, and whose write it was.
    resource: Option<(Fence, String)>,
}

#[derive(Debug)]
pub(crate) struct ClientSlot {
    pub(crate) owner: String,
    pub(crate) incarnation: u64,
    pub(crate) dead: bool,
    pub(crate) pauses: u64,
    pub(crate) gate: watch::Sender<bool>,
}

/// A worker inside `acquire`, not paused since it started.
#[derive(Debug)]
struct Waiter {
    client: usize,
    key: usize,
    started: Instant,
    epoch: u64,
}

#[derive(Debug)]
struct State {
    keys: Vec<KeyState>,
    clients: Vec<ClientSlot>,
    dead_owners: HashSet<String>,
    guards: Vec<(usize, LockView)>,
    waiters: Vec<Waiter>,
    violation: Option<Violation>,
    trace: VecDeque<(Instant, String)>,
    report: SimReport,
    faults_on: bool,
}

/// Shared by every client, store layer and the checker of one run.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) schedule: Schedule,
    start: Instant,
    state: Mutex<State>,
}

pub(crate) fn key_name(index: usize) -> LockKey {
    LockKey::new(format!("k{index}"))
}

impl World {
    pub(crate) fn new(schedule: Schedule) -> Self {
        let start = Instant::now();
        let keys = (0..schedule.keys)
            .map(|i| KeyState {
                key: key_name(i),
                granted: Fence(0),
                holder: None,
                last_write: start,
                free: None,
                resource: None,
            })
            .collect();
        let clients = (0..schedule.clients)
            .map(|i| ClientSlot {
                owner: format!("c{i}.0"),
                incarnation: 0,
                dead: false,
                pauses: 0,
                gate: watch::channel(false).0,
            })
            .collect();
        let report = SimReport {
            seed: schedule.seed,
            clients: schedule.clients,
            keys: schedule.keys,
            ..SimReport::default()
        };
        Self {
            schedule,
            start,
            state: Mutex::new(State {
                keys,
                clients,
                dead_owners: HashSet::new(),
                guards: Vec::new(),
                waiters: Vec::new(),
                violation: None,
                trace: VecDeque::new(),
                report,
                faults_on: true,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn since_start(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.start)
    }

    fn note(&self, state: &mut State, what: impl FnOnce() -> String) {
        if state.trace.len() == TRACE {
            state.trace.pop_front();
        }
        state.trace.push_back((Instant::now(), what()));
    }

    fn violate(&self, state: &mut State, what: String) {
        if state.violation.is_some() {
            return;
        }
        let trace = state
            .trace
            .iter()
            .map(|(at, line)| format!("{:>9.3}s {line}", self.since_start(*at).as_secs_f64()))
            .collect();
        state.violation = Some(Violation {
            seed: self.schedule.seed,
            at: self.since_start(Instant::now()),
            what,
            trace,
        });
    }

    pub(crate) fn violated(&self) -> bool {
        self.lock().violation.is_some()
    }

    pub(crate) fn take_violation(&self) -> Option<Violation> {
        self.lock().violation.take()
    }

    pub(crate) fn report(&self) -> SimReport {
        self.lock().report.clone()
    }

    fn index(key: &LockKey) -> Option<usize> {
        key.partition().strip_prefix('k')?.parse().ok()
    }

    // --- clients -----------------------------------------------------------

    pub(crate) fn owner(&self, client: usize) -> String {
        self.lock().clients[client].owner.clone()
    }

    pub(crate) fn gate(&self, client: usize) -> watch::Receiver<bool> {
        self.lock().clients[client].gate.subscribe()
    }

    pub(crate) fn faults_on(&self) -> bool {
        self.lock().faults_on
    }

    pub(crate) fn faults_off(&self) {
        self.lock().faults_on = false;
    }

    /// Counts pauses and wakes of `client`; `None` while it is paused. Equal
    /// values at two instants mean it ran undisturbed in between.
    pub(crate) fn awake_epoch(&self, client: usize) -> Option<u64> {
        let state = self.lock();
        let slot = &state.clients[client];
        (!*slot.gate.borrow()).then_some(slot.pauses)
    }

    pub(crate) fn set_paused(&self, client: usize, paused: bool) {
        let mut state = self.lock();
        let slot = &mut state.clients[client];
        if *slot.gate.borrow() != paused {
            slot.pauses += 1;
        }
        slot.gate.send_replace(paused);
        let owner = slot.owner.clone();
        if paused {
            state.report.pauses += 1;
        }
        self.note(&mut state, || {
            format!("{owner} {}", if paused { "paused" } else { "wakes" })
        });
    }

    /// The process dies: its guards vanish, the locks it held become orphans.
    pub(crate) fn crash(&self, client: usize) {
        let mut state = self.lock();
        let state = &mut *state;
        let slot = &mut state.clients[client];
        slot.dead = true;
        let owner = slot.owner.clone();
        slot.gate.send_replace(false);
        state.dead_owners.insert(owner.clone());
        state.guards.retain(|(c, _)| *c != client);
        state.waiters.retain(|w| w.client != client);
        for key in &mut state.keys {
            if key.holder.as_deref() == Some(owner.as_str()) {
                key.free = Some(Free::Orphaned(key.last_write, self.schedule.lease));
            }
        }
        state.report.crashes += 1;
        self.note(state, || format!("{owner} crashes"));
    }

    /// A new incarnation of a crashed client.
    pub(crate) fn restart(&self, client: usize, incarnation: u64) -> String {
        let mut state = self.lock();
        let slot = &mut state.clients[client];
        slot.dead = false;
        slot.owner = format!("c{client}.{incarnation}");
        slot.incarnation = incarnation;
        let owner = slot.owner.clone();
        self.note(&mut state, || format!("{owner} starts"));
        owner
    }

    /// Whether this incarnation of `client` is the one running (not crashed,
    /// not replaced by a restart).
    pub(crate) fn is_running(&self, client: usize, incarnation: u64) -> bool {
        let state = self.lock();
        let slot = &state.clients[client];
        !slot.dead && slot.incarnation == incarnation
    }

    // --- the store's truth (called by the recording layer) ------------------

    pub(crate) fn applied_put(&self, key: &LockKey, new: &NewRecord, record: &LockRecord) {
        let Some(index) = Self::index(key) else {
            return;
        };
        let now = Instant::now();
        let mut state = self.lock();
        let dead = state.dead_owners.contains(&record.owner);
        let ks = &mut state.keys[index];
        ks.last_write = now;
        let mut problem = None;
        if new.fence == FenceUpdate::Next {
            if record.fence <= ks.granted {
                problem = Some(format!(
                    "fence did not increase on {}: {} granted to {} after {}",
                    ks.key, record.fence, record.owner, ks.granted
                ));
            }
            // The fence check comes first: it must not be overwritten by the
            // liveness check of the same write.
            if problem.is_none()
                && let Some(free) = ks.free
            {
                problem = self.late_acquisition(&state.clients, &state.waiters, index, free, now);
            }
            let ks = &mut state.keys[index];
            ks.granted = ks.granted.max(record.fence);
            ks.holder = Some(record.owner.clone());
            // An acquisition sent before its writer crashed is an orphan at once.
            ks.free = dead.then_some(Free::Orphaned(now, record.lease));
            state.report.acquisitions += 1;
        } else if new.released {
            ks.holder = None;
            ks.free = Some(Free::Released(now));
            state.report.releases += 1;
        }
        let (fence, owner, released) = (record.fence, record.owner.clone(), record.released);
        self.note(&mut state, || {
            let what = match (new.fence, released) {
                (FenceUpdate::Next, _) => "acquires",
                (_, true) => "releases",
                _ => "heartbeats",
            };
            format!("store: {owner} {what} {key} (fence {fence})")
        });
        if let Some(problem) = problem {
            self.violate(&mut state, problem);
        }
    }

    pub(crate) fn applied_delete(&self, key: &LockKey) {
        if let Some(index) = Self::index(key) {
            let mut state = self.lock();
            let ks = &mut state.keys[index];
            ks.holder = None;
            ks.free = Some(Free::Released(Instant::now()));
        }
    }

    // --- guards and the fenced resource ---------------------------------------

    pub(crate) fn add_guard(&self, client: usize, view: LockView) {
        let mut state = self.lock();
        let (owner, key, fence) = (view.owner().to_owned(), view.key().clone(), view.fence());
        state.guards.push((client, view));
        self.note(&mut state, || {
            format!("{owner} holds {key} with fence {fence}")
        });
        drop(state);
        self.check_guards();
    }

    pub(crate) fn remove_guard(&self, client: usize, key: &LockKey) {
        self.lock()
            .guards
            .retain(|(c, view)| !(*c == client && view.key() == key));
    }

    /// A write to the fenced resource. `checked`: the writer found its lease safe
    /// at this very instant. Returns whether the resource accepted it.
    pub(crate) fn resource_write(&self, view: &LockView, checked: bool) -> bool {
        let Some(index) = Self::index(view.key()) else {
            return false;
        };
        let fence = view.fence();
        let owner = view.owner().to_owned();
        let mut state = self.lock();
        let state = &mut *state;
        let ks = &mut state.keys[index];
        let accepted = ks.resource.as_ref().is_none_or(|(high, _)| fence >= *high);
        let mut problem = None;
        if accepted {
            if let Some((high, writer)) = &ks.resource
                && *high == fence
                && *writer != owner
            {
                problem = Some(format!(
                    "the resource accepted fence {fence} on {} from {owner} after {writer} \
                     wrote with the same fence: a fence was reused",
                    ks.key
                ));
            }
            ks.resource = Some((fence, owner.clone()));
        }
        if checked && (fence != ks.granted || ks.holder.as_deref() != Some(owner.as_str())) {
            problem.get_or_insert(format!(
                "{owner} found its lease on {} safe with fence {fence}, but the store had \
                 granted fence {} to {:?}",
                ks.key, ks.granted, ks.holder
            ));
        }
        if checked && !accepted {
            problem.get_or_insert(format!(
                "the resource rejected {owner}'s fence {fence} on {} while its lease was safe",
                ks.key
            ));
        }
        if accepted {
            state.report.resource_writes += 1;
        } else {
            state.report.stale_rejected += 1;
        }
        let key = ks.key.clone();
        self.note(state, || {
            format!(
                "{owner} writes {key} with fence {fence}{}: {}",
                if checked { "" } else { " without checking" },
                if accepted { "accepted" } else { "rejected" }
            )
        });
        if let Some(problem) = problem {
            self.violate(state, problem);
        }
        accepted
    }

    /// At most one guard per key reports a safe lease, in true time.
    pub(crate) fn check_guards(&self) {
        let mut state = self.lock();
        let state = &mut *state;
        for index in 0..state.keys.len() {
            let key = &state.keys[index].key;
            let safe: Vec<&LockView> = state
                .guards
                .iter()
                .map(|(_, view)| view)
                .filter(|view| view.key() == key && view.is_safe())
                .collect();
            if safe.len() > 1 {
                let who = safe
                    .iter()
                    .map(|v| format!("{} (fence {}, {:?})", v.owner(), v.fence(), v.state()))
                    .collect::<Vec<_>>()
                    .join(", ");
                let problem = format!("{} guards on {key} report a safe lease: {who}", safe.len());
                self.violate(state, problem);
                return;
            }
        }
    }

    /// A worker starts waiting for `key`.
    pub(crate) fn start_waiting(&self, client: usize, key: &LockKey) {
        let Some(key) = Self::index(key) else {
            return;
        };
        let mut state = self.lock();
        let slot = &state.clients[client];
        if *slot.gate.borrow() {
            return;
        }
        let epoch = slot.pauses;
        state.waiters.push(Waiter {
            client,
            key,
            started: Instant::now(),
            epoch,
        });
    }

    /// A worker's acquire ended.
    pub(crate) fn stop_waiting(&self, client: usize) {
        self.lock().waiters.retain(|w| w.client != client);
    }

    /// How long `key` may stay free while a waiter polls for it.
    fn bound(&self, free: Free) -> (Instant, Duration) {
        match free {
            Free::Released(at) => (at, self.schedule.released_bound()),
            Free::Orphaned(at, lease) => (at, self.schedule.takeover_bound(lease)),
        }
    }

    /// An acquisition of a key that was free: too late if an undisturbed waiter
    /// had been polling for longer than the liveness bound.
    fn late_acquisition(
        &self,
        clients: &[ClientSlot],
        waiters: &[Waiter],
        key: usize,
        free: Free,
        now: Instant,
    ) -> Option<String> {
        if !self.schedule.check_liveness {
            return None;
        }
        let (since, bound) = self.bound(free);
        waiters
            .iter()
            .filter(|w| w.key == key)
            .filter(|w| {
                let slot = &clients[w.client];
                !slot.dead && !*slot.gate.borrow() && slot.pauses == w.epoch
            })
            .find_map(|w| {
                let free_for = now.saturating_duration_since(since.max(w.started));
                (free_for > bound).then(|| {
                    let how = match free {
                        Free::Released(_) => "released",
                        Free::Orphaned(..) => "orphaned by a crash",
                    };
                    format!(
                        "k{key} was {how} at {:.3}s and free for {free_for:?} while {} waited \
                         for it before anyone got it (bound {bound:?})",
                        self.since_start(since).as_secs_f64(),
                        clients[w.client].owner
                    )
                })
            })
    }

    /// A waiter on `key` that started at `started` (true time) gave up now without
    /// the lock, never paused meanwhile: the key must not have been free for
    /// longer than the liveness bounds.
    pub(crate) fn check_waiter(&self, client: usize, key: &LockKey, started: Instant) {
        if !self.schedule.check_liveness {
            return;
        }
        let Some(index) = Self::index(key) else {
            return;
        };
        let now = Instant::now();
        let mut state = self.lock();
        let owner = state.clients[client].owner.clone();
        let problem = state.keys[index].free.and_then(|free| {
            let (since, bound) = self.bound(free);
            let free_for = now.saturating_duration_since(since.max(started));
            let how = match free {
                Free::Released(_) => "released",
                Free::Orphaned(..) => "its holder crashed, the record unchanged",
            };
            (free_for > bound).then(|| {
                format!(
                    "{owner} gave up waiting for {key} without getting it although it was \
                     free for {free_for:?} ({how}; bound {bound:?})"
                )
            })
        });
        if let Some(problem) = problem {
            self.violate(&mut state, problem);
        }
    }

    /// After the orderly shutdown: no record is held by a live client.
    pub(crate) fn check_shutdown(&self, records: &[LockRecord]) {
        let mut state = self.lock();
        for record in records {
            if !record.released && !state.dead_owners.contains(&record.owner) {
                let problem = format!(
                    "{} is still held by {} after every client shut down",
                    record.key, record.owner
                );
                self.violate(&mut state, problem);
                return;
            }
        }
    }

    pub(crate) fn count_timeout(&self) {
        self.lock().report.acquire_timeouts += 1;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use lock_core::{Fence, FenceUpdate, LockRecord, NewRecord, Rvn};

    use super::{Schedule, World, key_name};

    fn write(world: &World, fence: u64, next: bool, released: bool) {
        let new = NewRecord {
            owner: "c0.0".into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(1),
            released,
            fence: if next {
                FenceUpdate::Next
            } else {
                FenceUpdate::Keep
            },
            data: None,
            expires_at: None,
        };
        let record = LockRecord {
            key: key_name(0),
            owner: new.owner.clone(),
            rvn: new.rvn.clone(),
            lease: new.lease,
            released,
            fence: Fence(fence),
            data: None,
            expires_at: None,
        };
        world.applied_put(&key_name(0), &new, &record);
    }

    #[test]
    fn a_fence_handed_out_again_after_a_release_is_a_violation() {
        let world = World::new(Schedule::from_seed(1, None));
        write(&world, 1, true, false);
        write(&world, 1, false, true);
        // The key is free (released), so the liveness check of this write runs
        // too; it must not hide the fence that did not increase.
        write(&world, 1, true, false);
        let violation = world.take_violation().unwrap();
        assert!(
            violation.what.contains("fence did not increase"),
            "{violation}"
        );
    }
}
