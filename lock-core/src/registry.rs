//! The client's book of held locks: which keys it holds and when each one
//! heartbeats next, under one lock, so that an acquire or a release touches one
//! mutex for both.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use crate::LockKey;
use crate::clock::Instant;
use crate::held::Held;
use crate::metrics::ClientMetrics;
use crate::slot::Slot;

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
    /// Counts the locks held (`lock_locks_held`).
    metrics: Arc<ClientMetrics>,
}

/// What the registry's lock guards.
#[derive(Debug)]
pub(crate) struct Book {
    /// The locks held now, one per key.
    held: HashSet<ByKey>,
    /// When each lock heartbeats next; weak, so a lock dropped without being
    /// forgotten is skipped, not kept alive.
    due: BTreeMap<Slot, Weak<Held>>,
    /// The last insertion number given out (orders entries due at one instant).
    seq: u64,
    /// When the task's timer fires next, in nanoseconds after the base (`None`:
    /// it waits for a wake-up). An entry due after that needs no wake-up: the task
    /// sees it when it re-arms.
    armed: Option<u64>,
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

/// The registry, locked. Records the number of held locks when let go.
pub(crate) struct BookGuard<'a> {
    book: MutexGuard<'a, Book>,
    registry: &'a Registry,
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
        // Stored while the lock is still held, so the count never runs ahead of
        // or behind the set it counts.
        self.registry
            .len
            .store(self.book.held.len(), Ordering::Release);
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

    /// Forget every held lock and its schedule entry, returning the locks.
    pub(crate) fn drain_held(&mut self) -> Vec<Arc<Held>> {
        let held: Vec<Arc<Held>> = self.book.held.drain().map(|held| held.0).collect();
        for lock in &held {
            lock.slot.replace(None);
        }
        self.book.due.clear();
        held
    }

    /// Heartbeat `held` at `at`, replacing its earlier entry. True when the
    /// entry is due before the task's timer: the caller wakes the task once the
    /// lock is let go.
    #[must_use = "wake the task when this is true"]
    pub(crate) fn schedule(&mut self, held: &Arc<Held>, at: Instant) -> bool {
        let at = self.registry.offset(at);
        let book = &mut *self.book;
        book.seq += 1;
        let slot = (at, book.seq);
        if let Some(old) = held.slot.replace(Some(slot)) {
            book.due.remove(&old);
        }
        book.due.insert(slot, Arc::downgrade(held));
        book.armed.is_none_or(|armed| at < armed)
    }

    /// Stop heartbeating `held`.
    pub(crate) fn unschedule(&mut self, held: &Held) {
        if let Some(slot) = held.slot.replace(None) {
            self.book.due.remove(&slot);
        }
    }
}

impl Registry {
    /// An empty registry whose schedule counts from `base` (no due time is
    /// earlier).
    pub(crate) fn new(base: Instant, metrics: Arc<ClientMetrics>) -> Self {
        Self {
            base,
            book: Mutex::new(Book {
                held: HashSet::new(),
                due: BTreeMap::new(),
                seq: 0,
                armed: None,
            }),
            len: AtomicUsize::new(0),
            wake: Notify::new(),
            served: AtomicBool::new(false),
            metrics,
        }
    }

    /// Lock the registry. Every update is one insert or remove, so a poisoned
    /// lock still guards a whole book: recover it instead of panicking.
    pub(crate) fn lock(&self) -> BookGuard<'_> {
        BookGuard {
            book: self.book.lock().unwrap_or_else(|p| p.into_inner()),
            registry: self,
        }
    }

    /// `at` as nanoseconds after the base (saturating: nothing is due before it).
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

    /// Record a fresh acquisition, with its first heartbeat at `first`.
    pub(crate) fn hold(&self, held: &Arc<Held>, first: Instant) {
        let wake = {
            let mut book = self.lock();
            if book.book.held.replace(ByKey(held.clone())).is_none() {
                self.metrics.held_more();
            }
            // At the max hold, the heartbeat task marks the lock lost instead.
            book.schedule(held, held.limits.not_after(first))
        };
        if wake {
            self.wake.notify_one();
        }
    }

    /// Forget `held`: no more heartbeats, and the key may be acquired again.
    pub(crate) fn forget(&self, held: &Arc<Held>) {
        let mut book = self.lock();
        book.unschedule(held);
        // One lookup: a key held again under a new acquisition is rare, and goes back.
        if let Some(current) = book.book.held.take(&held.key) {
            if Arc::ptr_eq(&current.0, held) {
                self.metrics.held_fewer(1);
            } else {
                book.book.held.insert(current);
            }
        }
    }

    /// Heartbeat `held` again at `at` (the task, after a heartbeat), unless it
    /// no longer wants heartbeats. Checked under the registry's lock: a release
    /// marks the lock stopping before it takes this lock to forget it, so an entry
    /// cannot slip in after the release removed the lock's.
    pub(crate) fn schedule(&self, held: &Arc<Held>, at: Instant) {
        let wake = {
            let mut book = self.lock();
            held.wants_heartbeat() && book.schedule(held, at)
        };
        if wake {
            self.wake.notify_one();
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn lock(key: &str, base: Instant) -> Arc<Held> {
        Arc::new(Held::new(
            LockKey::new(key),
            crate::Fence(1),
            false,
            crate::Rvn::fresh(),
            base,
            crate::held::LockTiming {
                timing: crate::Timing {
                    lease: Duration::from_secs(20),
                    max_drift: 0.01,
                    safety_margin: Duration::from_secs(1),
                },
                heartbeat_period: Duration::from_secs(5),
            },
            None,
        ))
    }

    fn registry() -> (Registry, Instant) {
        let base = Instant::now();
        (
            Registry::new(base, Arc::new(crate::metrics::ClientMetrics::new(false))),
            base,
        )
    }

    #[test]
    fn due_entries_come_out_in_order_and_a_rescheduled_lock_only_once() {
        let (registry, base) = registry();
        let (a, b) = (lock("a", base), lock("b", base));
        registry.schedule(&a, base + Duration::from_secs(3));
        registry.schedule(&b, base + Duration::from_secs(1));
        // Rescheduled: its first entry is gone.
        registry.schedule(&a, base + Duration::from_secs(2));
        assert_eq!(registry.arm(), Some(base + Duration::from_secs(1)));
        let due = registry.take_due(base + Duration::from_secs(5));
        let keys: Vec<&str> = due.iter().map(|held| held.key.partition()).collect();
        assert_eq!(keys, ["b", "a"]);
        assert!(!a.slot.is_scheduled() && !b.slot.is_scheduled());
        assert_eq!(registry.arm(), None);
    }

    #[test]
    fn nothing_is_due_before_its_time_and_arm_gives_back_the_instant() {
        let (registry, base) = registry();
        let a = lock("a", base);
        let at = base + Duration::from_nanos(1_234_567_891);
        registry.schedule(&a, at);
        assert!(registry.take_due(at - Duration::from_nanos(1)).is_empty());
        assert_eq!(registry.arm(), Some(at));
        assert_eq!(registry.take_due(at).len(), 1);
    }

    #[test]
    fn a_lock_that_stopped_wanting_heartbeats_is_not_scheduled_again() {
        let (registry, base) = registry();
        let a = lock("a", base);
        a.update(|state| state.stopping = true);
        registry.schedule(&a, base + Duration::from_secs(1));
        assert!(!a.slot.is_scheduled());
        assert_eq!(registry.arm(), None);
    }

    #[test]
    fn hold_and_forget_track_the_key_and_its_first_heartbeat() {
        let (registry, base) = registry();
        let a = lock("a", base);
        assert!(registry.get(&a.key).is_none());
        let first = base + Duration::from_secs(3);
        registry.hold(&a, first);
        assert!(Arc::ptr_eq(&registry.get(&a.key).unwrap(), &a));
        assert_eq!(registry.arm(), Some(first));
        registry.forget(&a);
        assert!(registry.get(&a.key).is_none());
        assert!(!a.slot.is_scheduled());
        assert_eq!(registry.arm(), None);
    }

    #[test]
    fn forgetting_a_stale_acquisition_keeps_the_newer_one_of_its_key() {
        let (registry, base) = registry();
        let (old, new) = (lock("a", base), lock("a", base));
        registry.hold(&old, base);
        // Lost, then the key acquired again: the new acquisition replaces it.
        registry.forget(&old);
        registry.hold(&new, base);
        registry.forget(&old);
        assert!(Arc::ptr_eq(&registry.get(&new.key).unwrap(), &new));
        assert!(new.slot.is_scheduled());
        // And replacing without a forget in between keeps only the newer one.
        let newest = lock("a", base);
        registry.hold(&newest, base);
        assert!(Arc::ptr_eq(&registry.get(&new.key).unwrap(), &newest));
        assert_eq!(registry.lock().held_keys(), [LockKey::new("a")]);
    }

    #[test]
    fn draining_forgets_every_lock_and_its_entry() {
        let (registry, base) = registry();
        let (a, b) = (lock("a", base), lock("b", base));
        registry.hold(&a, base);
        registry.hold(&b, base);
        let mut drained = registry.lock().drain_held();
        drained.sort_by(|x, y| x.key.cmp(&y.key));
        assert!(Arc::ptr_eq(&drained[0], &a) && Arc::ptr_eq(&drained[1], &b));
        assert!(registry.get(&a.key).is_none() && registry.get(&b.key).is_none());
        assert!(!a.slot.is_scheduled() && !b.slot.is_scheduled());
        assert_eq!(registry.arm(), None);
    }

    #[test]
    fn a_dropped_lock_is_skipped_when_due() {
        let (registry, base) = registry();
        let a = lock("a", base);
        registry.schedule(&a, base + Duration::from_secs(1));
        drop(a);
        assert!(registry.take_due(base + Duration::from_secs(2)).is_empty());
    }
}
