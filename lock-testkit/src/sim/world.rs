//! The simulation's view of the truth: what the store granted, what the fenced
//! resource accepted, which guards exist, in true (tokio) time, and the checks of
//! the protocol's invariants against it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lock_core::{Fence, FenceUpdate, LockKey, LockRecord, LockView, NewRecord, ReadView};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::schedule::{RW_LOCK, SEMAPHORE, Workload};
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

/// A fence as the fenced resource orders it: the number of deletes of the key's
/// record before the store granted it, then the fence itself.
///
/// A key's fences rise across a deletion of its record too (a worker that
/// releases with delete-on-release): the store goes on above the deleted
/// record's fence, and the world checks every grant against the highest one
/// before, deletes or not. The resource still orders writes by (delete epoch,
/// fence) and counts the stale writes that only the epoch turned away
/// ([`SimReport::stale_after_delete`]): with fences that keep rising there
/// are none, which the simulation test checks, so a resource comparing bare
/// fences, as users' resources do, is as safe.
///
/// [`SimReport::stale_after_delete`]: super::SimReport::stale_after_delete
type Epoched = (u64, Fence);

#[derive(Debug)]
struct KeyState {
    key: LockKey,
    /// Applied deletes of the record so far: the current delete epoch.
    epoch: u64,
    /// Highest fence the store has granted in this epoch.
    granted: Fence,
    /// The latest acquisition the store applied for each owner: its fence and
    /// epoch. A guard's epoch is looked up here: its fence alone may recur after
    /// a delete.
    grants: HashMap<String, Epoched>,
    /// Owner of the current acquisition (None once released).
    holder: Option<String>,
    last_write: Instant,
    free: Option<Free>,
    /// When the current holder's acquisition applied.
    held_since: Option<Instant>,
    /// Highest fence the resource accepted, and whose write it was.
    resource: Option<(Epoched, String)>,
}

/// A guard a worker holds, as the checks see it.
#[derive(Debug)]
struct HeldGuard {
    client: usize,
    view: LockView,
    /// Watches the guard in a calm run (see [`World::watch_calm_guard`]); stopped
    /// when the worker lets go.
    watcher: Option<AbortHandle>,
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
    guards: Vec<HeldGuard>,
    /// Reads of the reader-writer lock workers hold (their slots are in
    /// `guards` too).
    reads: Vec<HeldRead>,
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
    /// Each key's place in `State::keys`.
    index: HashMap<LockKey, usize>,
    state: Mutex<State>,
}

pub(crate) fn key_name(index: usize) -> LockKey {
    LockKey::new(format!("k{index}"))
}

/// The run's keys: `k0`, `k1`, … or, for a semaphore, its slots (as lock-core
/// names them on a store with sort keys: the layout docs/protocol.md gives).
pub(crate) fn keys_of(schedule: &Schedule) -> Vec<LockKey> {
    match schedule.workload {
        Workload::Semaphore { permits } => (0..permits)
            .map(|slot| LockKey::with_sort(SEMAPHORE, format!("permit-{slot:05}-of-{permits}")))
            .collect(),
        Workload::ReaderWriter { readers } => {
            [rw_writer_key(), LockKey::with_sort(RW_LOCK, "upgrade")]
                .into_iter()
                .chain((0..readers).map(|slot| {
                    LockKey::with_sort(RW_LOCK, format!("reader-{slot:05}-of-{readers}"))
                }))
                .collect()
        }
        _ => (0..schedule.keys).map(key_name).collect(),
    }
}

/// The write lock of the run's reader-writer lock (as lock-core names it on
/// a store with sort keys).
pub(crate) fn rw_writer_key() -> LockKey {
    LockKey::with_sort(RW_LOCK, "writer")
}

/// A read a worker holds, as the checks see it.
#[derive(Debug)]
struct HeldRead {
    /// The worker's client.
    client: usize,
    view: ReadView,
}

impl World {
    pub(crate) fn new(schedule: Schedule) -> Self {
        let start = Instant::now();
        let names = keys_of(&schedule);
        let index = names
            .iter()
            .enumerate()
            .map(|(i, key)| (key.clone(), i))
            .collect();
        let keys = names
            .into_iter()
            .map(|key| KeyState {
                key,
                epoch: 0,
                granted: Fence(0),
                grants: HashMap::new(),
                holder: None,
                last_write: start,
                free: None,
                held_since: None,
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
            calm: schedule.is_calm(),
            ..SimReport::default()
        };
        Self {
            schedule,
            start,
            index,
            state: Mutex::new(State {
                keys,
                clients,
                dead_owners: HashSet::new(),
                guards: Vec::new(),
                reads: Vec::new(),
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

    fn index(&self, key: &LockKey) -> Option<usize> {
        self.index.get(key).copied()
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
        state.guards.retain(|guard| {
            let mine = guard.client == client;
            if mine && let Some(watcher) = &guard.watcher {
                watcher.abort();
            }
            !mine
        });
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
        let Some(index) = self.index(key) else {
            return;
        };
        let now = Instant::now();
        let mut state = self.lock();
        let dead = state.dead_owners.contains(&record.owner);
        let ks = &mut state.keys[index];
        ks.last_write = now;
        let mut problem = None;
        if new.fence == FenceUpdate::Next && new.released {
            // A crashed holder's record cleared (a reader-writer lock's): the
            // fence rises, nobody holds it.
            if record.fence <= ks.granted {
                problem = Some(format!(
                    "fence did not increase on {}: {} written by {} after {}",
                    ks.key, record.fence, record.owner, ks.granted
                ));
            }
            ks.granted = ks.granted.max(record.fence);
            ks.holder = None;
            ks.free = Some(Free::Released(now));
            state.report.releases += 1;
        } else if new.fence == FenceUpdate::Next {
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
                problem = problem.map(|problem| format!("{key}: {problem}"));
            }
            let ks = &mut state.keys[index];
            let handed = ks.holder.as_deref() == Some(record.owner.as_str());
            ks.granted = ks.granted.max(record.fence);
            ks.grants
                .insert(record.owner.clone(), (ks.epoch, record.fence));
            ks.holder = Some(record.owner.clone());
            ks.held_since = Some(now);
            // An acquisition sent before its writer crashed is an orphan at once.
            ks.free = dead.then_some(Free::Orphaned(now, record.lease));
            state.report.acquisitions += 1;
            state.report.local_handoffs += u64::from(handed);
        } else if new.released {
            ks.holder = None;
            ks.free = Some(Free::Released(now));
            state.report.releases += 1;
        } else if new.rvn.final_until().is_some() {
            // Released within its min hold: held on purpose until the hold
            // ends, which waiters judge on their wall clocks; no liveness
            // bound applies to it, and its holder's crash orphans nothing.
            ks.holder = None;
            ks.free = None;
            state.report.releases += 1;
        }
        let (fence, owner, released) = (record.fence, record.owner.clone(), record.released);
        let final_write = new.rvn.final_until().is_some();
        self.note(&mut state, || {
            let what = match (new.fence, released) {
                (FenceUpdate::Next, true) => "clears a crashed holder's",
                (FenceUpdate::Next, _) => "acquires",
                (_, true) => "releases",
                _ if final_write => "leaves held to its min hold's end",
                _ => "heartbeats",
            };
            format!("store: {owner} {what} {key} (fence {fence})")
        });
        if let Some(problem) = problem {
            self.violate(&mut state, problem);
        }
    }

    /// The store deleted `record`: the key is free, and a new delete epoch
    /// begins, whose fences must still be above every fence granted before.
    pub(crate) fn applied_delete(&self, key: &LockKey, record: &LockRecord) {
        let Some(index) = self.index(key) else {
            return;
        };
        let mut state = self.lock();
        let ks = &mut state.keys[index];
        ks.holder = None;
        ks.free = Some(Free::Released(Instant::now()));
        ks.epoch += 1;
        let epoch = ks.epoch;
        state.report.deletes += 1;
        let (owner, fence) = (record.owner.clone(), record.fence);
        self.note(&mut state, || {
            format!("store: {owner} deletes {key} (fence {fence}); epoch {epoch}")
        });
    }

    // --- guards and the fenced resource ---------------------------------------

    /// A worker got `view` from `acquire`. Returns the delete epoch of its fence,
    /// which the worker hands to the resource with every write.
    pub(crate) fn add_guard(self: &Arc<Self>, client: usize, view: LockView) -> u64 {
        let mut state = self.lock();
        let (owner, key, fence) = (view.owner().to_owned(), view.key().clone(), view.fence());
        let (epoch, problem) = match self.grant_epoch(&state, &key, &owner, fence) {
            Ok(epoch) => (epoch, None),
            Err((epoch, problem)) => (epoch, Some(problem)),
        };
        // Spawned before the guard is listed, so the watcher is in place before
        // anything can remove the guard (nothing runs in between: one thread).
        let watcher = self.schedule.is_calm().then(|| {
            let world = self.clone();
            tokio::spawn(world.watch_calm_guard(view.clone())).abort_handle()
        });
        state.guards.push(HeldGuard {
            client,
            view,
            watcher,
        });
        self.note(&mut state, || {
            format!("{owner} holds {key} with fence {fence} (epoch {epoch})")
        });
        if let Some(problem) = problem {
            self.violate(&mut state, problem);
        }
        drop(state);
        self.check_guards();
        epoch
    }

    /// The delete epoch of the acquisition that gave `owner` `fence` on `key`: the
    /// store's latest acquisition for that owner and key (a worker holds one
    /// guard at a time, and its acquire ends with the write that got the guard).
    /// `Err` with the current epoch and the problem if the store never granted it
    /// that fence.
    fn grant_epoch(
        &self,
        state: &State,
        key: &LockKey,
        owner: &str,
        fence: Fence,
    ) -> Result<u64, (u64, String)> {
        let Some(ks) = self.index(key).and_then(|index| state.keys.get(index)) else {
            return Ok(0);
        };
        match ks.grants.get(owner) {
            Some(&(epoch, granted)) if granted == fence => Ok(epoch),
            other => Err((
                ks.epoch,
                format!(
                    "{owner} holds {key} with fence {fence}, but the store's latest acquisition \
                     of it for {owner} was {other:?} (delete epoch, fence)"
                ),
            )),
        }
    }

    /// The worker lets go of its guard on `key` (before releasing it).
    pub(crate) fn remove_guard(&self, client: usize, key: &LockKey) {
        self.lock().guards.retain(|guard| {
            let mine = guard.client == client && guard.view.key() == key;
            if mine && let Some(watcher) = &guard.watcher {
                // Aborted before its next poll: a watcher never reports a guard
                // after its worker let go.
                watcher.abort();
            }
            !mine
        });
    }

    /// A set of keys was taken (`at_once`: in one request).
    pub(crate) fn count_set(&self, at_once: bool) {
        let report = &mut self.lock().report;
        report.sets_taken += 1;
        report.sets_at_once += u64::from(at_once);
    }

    /// A set of keys failed (`error`) and left `key` held by its client: a
    /// violation.
    pub(crate) fn set_failed_set_held(
        &self,
        client: usize,
        key: &LockKey,
        error: &lock_core::LockError,
    ) {
        let mut state = self.lock();
        let owner = state.clients[client].owner.clone();
        let problem = format!("{owner}'s set of keys failed ({error}) and left {key} held by it");
        self.violate(&mut state, problem);
    }

    /// A writer of the run's reader-writer lock was admitted: it must not
    /// have been kept waiting once the readers inside had left, whatever
    /// readers kept coming. From the moment it held the write lock, once
    /// every reader slot (but its own, for an upgrade) was free, it is
    /// admitted within one poll: a refresh period on its clock and a few
    /// round trips. Checked in runs without store faults or min holds, for a
    /// writer not paused since it asked.
    pub(crate) fn check_writer_wait(&self, client: usize, paused_at_start: u64) {
        let mut state = self.lock();
        let schedule = &self.schedule;
        if !schedule.check_liveness || schedule.holds.iter().any(|holds| holds.min.is_some()) {
            return;
        }
        let slot = &state.clients[client];
        if slot.pauses != paused_at_start || slot.dead {
            return;
        }
        let owner = slot.owner.clone();
        let Some(writer) = self.index(&rw_writer_key()).map(|i| &state.keys[i]) else {
            return;
        };
        let (Some(holder), Some(since)) = (&writer.holder, writer.held_since) else {
            return;
        };
        if *holder != owner {
            return;
        }
        // The latest instant a reader slot (not the writer's own) was freed;
        // none still held by another.
        let mut last_free = since;
        for ks in &state.keys {
            let name = ks.key.sort().unwrap_or_default();
            if !name.starts_with("reader-") {
                continue;
            }
            match (&ks.holder, ks.free) {
                (Some(holder), _) if *holder == owner => {}
                (Some(_), _) => return,
                (None, Some(Free::Released(at))) => last_free = last_free.max(at),
                (None, _) => {}
            }
        }
        let now = Instant::now();
        let bound = schedule.released_bound() + schedule.latency.1;
        let waited = now.saturating_duration_since(last_free);
        if waited > bound {
            let problem = format!(
                "writer {owner} was admitted {waited:?} after every reader slot was free \
                 (it held the write lock since {:.3}s; bound {bound:?})",
                self.since_start(since).as_secs_f64()
            );
            self.violate(&mut state, problem);
        }
    }

    /// How many times `client` has been paused so far.
    pub(crate) fn pauses(&self, client: usize) -> u64 {
        self.lock().clients[client].pauses
    }

    /// A worker was admitted as a reader: its slot is a guard like any other
    /// (one holder per slot, fences granted by the store), and the read is
    /// checked against the writers.
    pub(crate) fn add_read(self: &Arc<Self>, client: usize, view: ReadView) {
        self.add_guard(client, view.slot().clone());
        let mut state = self.lock();
        let (owner, fence) = (view.slot().owner().to_owned(), view.fence());
        state.reads.push(HeldRead { client, view });
        self.note(&mut state, || {
            format!("{owner} reads with writer fence {fence}")
        });
        drop(state);
        self.check_guards();
    }

    /// The worker lets go of its read (before releasing it).
    pub(crate) fn remove_read(&self, client: usize) {
        let slots: Vec<LockKey> = {
            let mut state = self.lock();
            let (mine, others): (Vec<HeldRead>, Vec<HeldRead>) = std::mem::take(&mut state.reads)
                .into_iter()
                .partition(|read| read.client == client);
            state.reads = others;
            mine.iter()
                .map(|read| read.view.slot().key().clone())
                .collect()
        };
        for slot in slots {
            self.remove_guard(client, &slot);
        }
    }

    /// A reader reads the resource the write lock guards with its writer
    /// fence. `checked`: it found its read safe at this very instant; then no
    /// writer may have written with a newer fence (a writer came in while it
    /// read).
    pub(crate) fn resource_read(&self, view: &ReadView, checked: bool) {
        let Some(index) = self.index(&rw_writer_key()) else {
            return;
        };
        let mut state = self.lock();
        state.report.resource_reads += 1;
        let owner = view.slot().owner().to_owned();
        let fence = view.fence();
        let newer = state.keys[index]
            .resource
            .as_ref()
            .filter(|((_, high), _)| *high > fence)
            .map(|((_, high), writer)| (*high, writer.clone()));
        self.note(&mut state, || {
            format!(
                "{owner} reads with writer fence {fence}{}",
                if checked { "" } else { " without checking" }
            )
        });
        if let (true, Some((high, writer))) = (checked, newer) {
            let problem = format!(
                "{owner} trusted its read with writer fence {fence}, but {writer} had written                  with fence {high} since it was admitted"
            );
            self.violate(&mut state, problem);
        }
    }

    /// In a calm run (no store faults, no pauses, no crashes: see
    /// [`Schedule::is_calm`]) a guard must stay safe for as long as its worker
    /// holds it: heartbeats answer within one round trip, so nothing may put the
    /// lease in danger, let it expire or take it. This watches for the first
    /// instant the guard is not safe, exactly (`until_unsafe`), rather than
    /// sampling it; [`remove_guard`](Self::remove_guard) stops the watch.
    async fn watch_calm_guard(self: Arc<Self>, view: LockView) {
        let since = Instant::now();
        let bound = self.schedule.longest_hold();
        // Bounded like every wait on a guard, so a worker that never lets go
        // fails the run instead of leaving the watch pending.
        let outcome = tokio::time::timeout(bound, view.until_unsafe()).await;
        let held_for = since.elapsed();
        let (owner, key, fence) = (view.owner(), view.key(), view.fence());
        let problem = match outcome {
            // The worker's own limit: it is told, and stops writing.
            Ok(lock_core::LostReason::MaxHold { .. }) => return,
            Ok(reason) => format!(
                "in a calm run (no faults, pauses or crashes) {owner}'s guard on {key} with \
                 fence {fence} stopped being safe while its worker held it, {held_for:?} after \
                 the acquire returned: {reason}"
            ),
            Err(_) => format!(
                "{owner} still held its guard on {key} {held_for:?} after the acquire \
                 returned; an undisturbed worker lets go within {bound:?}"
            ),
        };
        let mut state = self.lock();
        self.violate(&mut state, problem);
    }

    /// A write to the fenced resource with a fence of delete epoch `epoch` (from
    /// [`add_guard`](Self::add_guard)). `checked`: the writer found its lease safe
    /// at this very instant. Returns whether the resource accepted it.
    pub(crate) fn resource_write(&self, view: &LockView, epoch: u64, checked: bool) -> bool {
        self.write_resource(view.key(), view.owner(), (epoch, view.fence()), checked)
    }

    /// [`resource_write`](Self::resource_write) by `owner` on `key` with fence
    /// `ours`.
    fn write_resource(&self, key: &LockKey, owner: &str, ours: Epoched, checked: bool) -> bool {
        let Some(index) = self.index(key) else {
            return false;
        };
        let (epoch, fence) = ours;
        let owner = owner.to_owned();
        let mut state = self.lock();
        let state = &mut *state;
        let ks = &mut state.keys[index];
        let accepted = ks.resource.as_ref().is_none_or(|(high, _)| ours >= *high);
        let mut problem = None;
        if accepted {
            if let Some((high, writer)) = &ks.resource
                && *high == ours
                && *writer != owner
            {
                problem = Some(format!(
                    "the resource accepted fence {fence} (epoch {epoch}) on {} from {owner} \
                     after {writer} wrote with the same fence: a fence was reused",
                    ks.key
                ));
            }
            ks.resource = Some((ours, owner.clone()));
        } else if let Some(((_, high), _)) = &ks.resource
            && fence >= *high
        {
            // Stale (from before a delete), yet its bare fence is as high as any
            // the resource took: only the epoch turned it away.
            state.report.stale_after_delete += 1;
        }
        if checked
            && (ours != (ks.epoch, ks.granted) || ks.holder.as_deref() != Some(owner.as_str()))
        {
            problem.get_or_insert(format!(
                "{owner} found its lease on {} safe with fence {fence} (epoch {epoch}), but \
                 the store had granted fence {} (epoch {}) to {:?}",
                ks.key, ks.granted, ks.epoch, ks.holder
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
                "{owner} writes {key} with fence {fence} (epoch {epoch}){}: {}",
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
                .map(|guard| &guard.view)
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
        if let Workload::ReaderWriter { .. } = self.schedule.workload {
            let writer = rw_writer_key();
            let writers: Vec<&LockView> = state
                .guards
                .iter()
                .map(|guard| &guard.view)
                .filter(|view| view.key() == &writer && view.is_safe())
                .collect();
            // An upgraded writer's own read is no reader beside it.
            let readers: Vec<&ReadView> = state
                .reads
                .iter()
                .map(|read| &read.view)
                .filter(|read| read.is_safe())
                .filter(|read| writers.iter().all(|w| w.owner() != read.slot().owner()))
                .collect();
            if let Workload::ReaderWriter { readers: limit } = self.schedule.workload {
                let reading = state
                    .reads
                    .iter()
                    .filter(|read| read.view.is_safe())
                    .count();
                if reading > limit as usize {
                    let problem = format!(
                        "{reading} readers trust their reads at once; the lock has {limit}"
                    );
                    self.violate(state, problem);
                    return;
                }
            }
            if let Some(writer) = writers.first()
                && let Some(reader) = readers.first()
            {
                let problem = format!(
                    "{} writes with fence {} while {} reads with fence {}: both leases are safe",
                    writer.owner(),
                    writer.fence(),
                    reader.slot().owner(),
                    reader.fence()
                );
                self.violate(state, problem);
                return;
            }
        }
        if let Workload::Semaphore { permits } = self.schedule.workload {
            let safe: Vec<&LockView> = state
                .guards
                .iter()
                .map(|guard| &guard.view)
                .filter(|view| view.is_safe())
                .collect();
            if safe.len() > permits as usize {
                let who = safe
                    .iter()
                    .map(|v| format!("{} on {} (fence {})", v.owner(), v.key(), v.fence()))
                    .collect::<Vec<_>>()
                    .join(", ");
                let problem = format!(
                    "{} permits of {permits} report a safe lease: {who}",
                    safe.len()
                );
                self.violate(state, problem);
            }
        }
    }

    /// A worker starts waiting for `key`.
    pub(crate) fn start_waiting(&self, client: usize, key: &LockKey) {
        let Some(key) = self.index(key) else {
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

    /// A worker's acquire of `key` ended; `gave_up` when its wait ran out
    /// without the lock. A waiter that was never paused while it waited (its
    /// start and pause count are kept from [`start_waiting`](Self::start_waiting))
    /// must not have given up on a key that was free for longer than the liveness
    /// bounds.
    pub(crate) fn stop_waiting(&self, client: usize, gave_up: bool) {
        let mut state = self.lock();
        let (mine, others): (Vec<Waiter>, Vec<Waiter>) = std::mem::take(&mut state.waiters)
            .into_iter()
            .partition(|w| w.client == client);
        state.waiters = others;
        // A semaphore's waiter waits for every slot: each must not have been
        // free for too long.
        for waiter in mine {
            let slot = &state.clients[client];
            let undisturbed = !*slot.gate.borrow() && slot.pauses == waiter.epoch;
            if gave_up && undisturbed && self.schedule.check_liveness {
                self.check_waiter(&mut state, waiter);
            }
        }
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
                        "it was {how} at {:.3}s and free for {free_for:?} while {} waited \
                         for it before anyone got it (bound {bound:?})",
                        self.since_start(since).as_secs_f64(),
                        clients[w.client].owner
                    )
                })
            })
    }

    /// `waiter` gave up on `key` now without the lock: the key must not have
    /// been free for longer than the liveness bounds since it started waiting.
    fn check_waiter(&self, state: &mut State, waiter: Waiter) {
        let key = state.keys[waiter.key].key.clone();
        let now = Instant::now();
        let owner = state.clients[waiter.client].owner.clone();
        let problem = state.keys[waiter.key].free.and_then(|free| {
            let (since, bound) = self.bound(free);
            let free_for = now.saturating_duration_since(since.max(waiter.started));
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
            self.violate(state, problem);
        }
    }

    /// After the orderly shutdown: no record is held by a live client.
    pub(crate) fn check_shutdown(&self, records: &[LockRecord]) {
        let mut state = self.lock();
        for record in records {
            // A final write holds the lock to the end of its min hold on
            // purpose, shut down or not.
            let final_write = record.rvn.final_until().is_some();
            if !record.released && !final_write && !state.dead_owners.contains(&record.owner) {
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
        write_as(world, "c0.0", fence, next, released);
    }

    /// The store applied a put by `owner` on k0 and stored `fence`.
    fn write_as(world: &World, owner: &str, fence: u64, next: bool, released: bool) {
        let new = NewRecord {
            owner: owner.into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(1),
            released,
            fence: if next {
                FenceUpdate::Next
            } else {
                FenceUpdate::Keep
            },
            data: lock_core::DataUpdate::Keep,
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
            written: None,
        };
        world.applied_put(&key_name(0), &new, &record);
    }

    /// The store deleted k0's record, last written by `owner` with `fence`.
    fn delete_as(world: &World, owner: &str, fence: u64) {
        let record = LockRecord {
            key: key_name(0),
            owner: owner.into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(1),
            released: false,
            fence: Fence(fence),
            data: None,
            expires_at: None,
            written: None,
        };
        world.applied_delete(&key_name(0), &record);
    }

    /// The delete epoch the world gives `owner`'s guard with `fence` on k0.
    fn epoch_of(world: &World, owner: &str, fence: u64) -> Result<u64, String> {
        world
            .grant_epoch(&world.lock(), &key_name(0), owner, Fence(fence))
            .map_err(|(_, e)| e)
    }

    #[test]
    fn fences_must_increase_across_a_delete() {
        let world = World::new(Schedule::from_seed(1, None));
        write_as(&world, "c0.0", 1, true, false);
        write_as(&world, "c1.0", 2, true, false);
        delete_as(&world, "c1.0", 2);
        // Above the deleted record's fence: as the store must.
        write_as(&world, "c0.0", 3, true, false);
        assert_eq!(world.take_violation(), None);
        assert_eq!(epoch_of(&world, "c0.0", 3), Ok(1));
        assert_eq!(world.report().deletes, 1);
        // Fence 1 again after a delete: a holder paused across the delete
        // still carries 2, which a resource would then admit.
        delete_as(&world, "c0.0", 3);
        write_as(&world, "c1.0", 1, true, false);
        let violation = world.take_violation().unwrap();
        assert!(
            violation.what.contains("fence did not increase"),
            "{violation}"
        );
    }

    #[test]
    fn a_guard_with_a_fence_its_owner_was_never_granted_is_a_violation() {
        let world = World::new(Schedule::from_seed(1, None));
        write_as(&world, "c0.0", 1, true, false);
        assert_eq!(epoch_of(&world, "c0.0", 1), Ok(0));
        assert!(epoch_of(&world, "c0.0", 2).is_err());
        assert!(epoch_of(&world, "c1.0", 1).is_err());
    }

    #[test]
    fn across_a_delete_the_resource_refuses_the_stale_holder_by_its_bare_fence_too() {
        let world = World::new(Schedule::from_seed(1, None));
        let k0 = key_name(0);
        write_as(&world, "c0.0", 1, true, false);
        assert!(world.write_resource(&k0, "c0.0", (0, Fence(1)), true));
        write_as(&world, "c1.0", 2, true, false);
        assert!(world.write_resource(&k0, "c1.0", (0, Fence(2)), true));
        delete_as(&world, "c1.0", 2);
        write_as(&world, "c0.0", 3, true, false);
        // The new holder's fence is above the 2 the resource saw.
        assert!(world.write_resource(&k0, "c0.0", (1, Fence(3)), true));
        // The holder from before the delete, writing without checking, is
        // stale, and its bare fence 2 is below 3: the epoch was not needed.
        assert!(!world.write_resource(&k0, "c1.0", (0, Fence(2)), false));
        assert_eq!(world.take_violation(), None);
        let report = world.report();
        assert_eq!((report.stale_rejected, report.stale_after_delete), (1, 0));
        // A stale holder that believed its lease safe is still a violation.
        assert!(!world.write_resource(&k0, "c1.0", (0, Fence(2)), true));
        let violation = world.take_violation().unwrap();
        assert!(violation.what.contains("safe"), "{violation}");
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
