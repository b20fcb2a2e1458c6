//! The client's book of held locks: which keys it holds and when each one
//! heartbeats next, under one lock, so that an acquire or a release touches one
//! mutex for both.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::LockKey;
use crate::clock::Instant;
use crate::held::Held;

/// Held locks and their heartbeat schedule, shared by the client (which adds and
/// removes locks as they are acquired and released) and the heartbeat task
/// (which takes the due ones). Schedule entries hold their lock weakly, and a
/// release removes its entry at once, so a lock taken and released between
/// heartbeats leaves nothing behind.
#[derive(Debug)]
pub(crate) struct Registry {
    /// Due times are kept as nanoseconds after this instant (the client's start),
    /// so a lock's entry fits in two atomics of its own.
    base: Instant,
    book: Mutex<Book>,
    /// How many locks `book` holds, stored as its lock is let go: a client that
    /// holds nothing (the usual state before an acquire) answers "is this key
    /// held?" without taking the lock.
    len: AtomicUsize,
    /// Woken when an entry becomes the earliest, so the task re-arms its timer.
    pub(crate) wake: Notify,
    /// A task is serving the schedule; it clears the flag as it ends, however it
    /// ends (finished, aborted, panicked, its runtime gone).
    pub(crate) served: AtomicBool,
}

/// What the registry's lock guards.
#[derive(Debug)]
pub(crate) struct Book {
    held: HashSet<ByKey>,
    due: BTreeMap<Slot, Weak<Held>>,
    seq: u64,
    /// When the task's timer fires next (`None`: it waits for a wake-up). An entry
    /// due after that needs no wake-up: the task sees it when it re-arms.
    armed: Option<u64>,
    /// Jitter and backoff draws (seeded from the thread's generator, so a
    /// seeded simulation replays).
    rng: fastrand::Rng,
}

/// A held lock in the registry's set, found by its key: the set keeps no copy
/// of the key (copies are atomic reference counts, and each costs).
#[derive(Debug)]
struct ByKey(Arc<Held>);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl Borrow<LockKey> for ByKey {
    fn borrow(&self) -> &LockKey {
        &self.0.key
    }
}

/// A position in the schedule: due time (nanoseconds after the base), then
/// insertion order (from 1).
type Slot = (u64, u64);

/// A lock's position in the schedule, kept with the lock. Changed only under the
/// registry's lock, which orders the accesses: relaxed atomics suffice.
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

    /// The lock has an entry (read outside the registry's lock: a hint).
    pub(crate) fn is_scheduled(&self) -> bool {
        self.seq.load(Ordering::Relaxed) != 0
    }
}

/// The registry, locked. Records the number of held locks when let go.
pub(crate) struct BookGuard<'a> {
    book: MutexGuard<'a, Book>,
    registry: &'a Registry,
    /// An entry became the earliest: wake the task once the lock is let go.
    wake: bool,
}

impl std::ops::Deref for BookGuard<'_> {
    type Target = Book;

    fn deref(&self) -> &Book {
        &self.book
    }
}

impl std::ops::DerefMut for BookGuard<'_> {
    fn deref_mut(&mut self) -> &mut Book {
        &mut self.book
    }
}

impl Drop for BookGuard<'_> {
    fn drop(&mut self) {
        self.registry
            .len
            .store(self.book.held.len(), Ordering::Release);
        if self.wake {
            self.registry.wake.notify_one();
        }
    }
}

impl BookGuard<'_> {
    /// The keys of the locks held now.
    pub(crate) fn held_keys(&self) -> Vec<LockKey> {
        self.book
            .held
            .iter()
            .map(|held| held.0.key.clone())
            .collect()
    }

    /// The locks held now.
    pub(crate) fn held_locks(&self) -> impl Iterator<Item = &Arc<Held>> {
        self.book.held.iter().map(|held| &held.0)
    }

    /// Forget every held lock (their schedule entries stay, and are skipped once
    /// due), returning them.
    pub(crate) fn drain_held(&mut self) -> Vec<Arc<Held>> {
        self.book.held.drain().map(|held| held.0).collect()
    }

    /// Heartbeat `held` at `at`, replacing its earlier entry.
    pub(crate) fn schedule(&mut self, held: &Arc<Held>, at: Instant) {
        let at = self.registry.offset(at);
        let book = &mut *self.book;
        book.seq += 1;
        let slot = (at, book.seq);
        if let Some(old) = held.slot.replace(Some(slot)) {
            book.due.remove(&old);
        }
        book.due.insert(slot, Arc::downgrade(held));
        if book.armed.is_none_or(|armed| at < armed) {
            self.wake = true;
        }
    }

    /// Stop heartbeating `held`.
    pub(crate) fn unschedule(&mut self, held: &Held) {
        if let Some(slot) = held.slot.replace(None) {
            self.book.due.remove(&slot);
        }
    }

    /// A random fraction in `[0, 1)`.
    pub(crate) fn random(&mut self) -> f64 {
        self.book.rng.f64()
    }
}

impl Registry {
    pub(crate) fn new(base: Instant, rng: fastrand::Rng) -> Self {
        Self {
            base,
            book: Mutex::new(Book {
                held: HashSet::new(),
                due: BTreeMap::new(),
                seq: 0,
                armed: None,
                rng,
            }),
            len: AtomicUsize::new(0),
            wake: Notify::new(),
            served: AtomicBool::new(false),
        }
    }

    /// Lock the registry. Every update is one insert or remove, so a poisoned
    /// lock still guards a whole book: recover it instead of panicking.
    pub(crate) fn lock(&self) -> BookGuard<'_> {
        BookGuard {
            book: self.book.lock().unwrap_or_else(|p| p.into_inner()),
            registry: self,
            wake: false,
        }
    }

    fn offset(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// This client's acquisition of `key`, if it holds one.
    pub(crate) fn get(&self, key: &LockKey) -> Option<Arc<Held>> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.lock().book.held.get(key).map(|held| held.0.clone())
    }

    /// Record a fresh acquisition, with its first heartbeat between three
    /// quarters of `period` and `period` after `sent`, so locks taken together
    /// do not beat together.
    pub(crate) fn hold(&self, held: &Arc<Held>, sent: Instant, period: Duration) {
        let mut book = self.lock();
        book.book.held.replace(ByKey(held.clone()));
        let first = sent + period - (period / 4).mul_f64(book.random());
        book.schedule(held, first);
    }

    /// Forget `held`: no more heartbeats, and the key may be acquired again.
    pub(crate) fn forget(&self, held: &Arc<Held>) {
        let mut book = self.lock();
        book.unschedule(held);
        // One lookup: a key held again under a new acquisition is rare, and goes back.
        if let Some(current) = book.book.held.take(&held.key)
            && !Arc::ptr_eq(&current.0, held)
        {
            book.book.held.insert(current);
        }
    }

    /// Heartbeat `held` at `at`, replacing its earlier entry.
    pub(crate) fn schedule(&self, held: &Arc<Held>, at: Instant) {
        self.lock().schedule(held, at);
    }

    /// A random fraction in `[0, 1)`.
    pub(crate) fn random(&self) -> f64 {
        self.lock().random()
    }

    /// True while a heartbeat task serves the schedule.
    pub(crate) fn is_served(&self) -> bool {
        self.served.load(Ordering::Acquire)
    }

    /// Take every entry due by `now`.
    pub(crate) fn take_due(&self, now: Instant) -> Vec<Arc<Held>> {
        let now = self.offset(now);
        let mut book = self.lock();
        let mut due = Vec::new();
        while let Some(entry) = book.due.first_entry() {
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
    pub(crate) fn arm(&self) -> Option<Instant> {
        let mut book = self.lock();
        book.armed = book.due.first_key_value().map(|((at, _), _)| *at);
        book.armed.map(|at| self.base + Duration::from_nanos(at))
    }
}
