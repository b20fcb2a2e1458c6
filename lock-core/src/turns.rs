//! Local queueing: the acquires of one key on one client (any clone of it) take
//! turns, first come first served, inside the client.
//!
//! A key's turn is held by whoever is acquiring it, then by the lock while it is
//! held, then by its release until the release has finished. So a second task
//! waits for the first without polling the store, an acquire right after a
//! dropped guard waits for that guard's release instead of finding the key
//! "already held", and a release that sees a task waiting can hand the lock over
//! in one write: it leaves a [`Handoff`] in the turn, and the next acquire writes
//! its record on top of the released one's version (fence + 1) instead of
//! releasing first and acquiring the vacant key after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{Mutex as FairMutex, OwnedMutexGuard};

use crate::clock::Sleep;
use crate::{LockKey, Rvn};

/// A held lock passed from a release to the next acquire of the same client: the
/// version of the record as the releasing holder last confirmed it. The next
/// acquire writes on top of exactly that version, so if anyone else wrote since
/// (the lease ran out and was taken over, an operator released it), the hand-off
/// write is refused and that acquire waits as for any other holder.
#[derive(Clone, Debug)]
pub(crate) struct Handoff {
    pub rvn: Rvn,
    /// The lease that version was written with: how long it holds the lock if
    /// nobody takes the hand-off (what bounds its clean-up).
    pub lease: std::time::Duration,
}

/// Where a release may leave its lock when no acquire of the key waits in the
/// key's own turn: a queue of tasks of this client that want any one of
/// several keys (a semaphore's tasks waiting for any of its slots). The lock
/// goes as a [`Handoff`] that the taker writes on in one write, as in a turn.
pub(crate) trait Successors: Send + Sync + std::fmt::Debug {
    /// Take `handoff` of `key` if a task waits for it; give it back otherwise
    /// (then the release writes as usual).
    fn offer(&self, key: &LockKey, handoff: Handoff) -> Result<(), Handoff>;
}

/// What the current holder of a turn is doing; read by a fail-fast acquire that
/// finds the turn taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// An acquire is running (waiting for another client, retrying the store).
    Acquiring,
    /// A guard holds the lock.
    Holding,
    /// The lock is being released; the turn is free once that write ends.
    Releasing,
}

impl Phase {
    fn from_u8(value: u8) -> Self {
        match value {
            0 => Phase::Acquiring,
            1 => Phase::Holding,
            _ => Phase::Releasing,
        }
    }
}

/// What becomes of a hand-off nobody took (the waiter it was left for gave up
/// or was cancelled before taking it): the client releases the lock by that RVN.
pub(crate) type Orphaned = Box<dyn Fn(LockKey, Handoff) + Send + Sync>;

/// The turns of every key this client is acquiring, holding or releasing now.
/// A key leaves the map when its last turn ends and nobody waits for it, so the
/// map only ever holds the keys in use.
#[derive(Default)]
pub(crate) struct Turns {
    lines: Arc<Mutex<HashMap<LockKey, Arc<Line>>>>,
    orphaned: Arc<OnceLock<Orphaned>>,
}

impl std::fmt::Debug for Turns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turns")
            .field("lines", &self.lines)
            .finish_non_exhaustive()
    }
}

/// One key's queue. tokio's mutex hands itself to waiters in the order they
/// asked: that is the FIFO.
#[derive(Debug)]
struct Line {
    baton: Arc<FairMutex<Option<Handoff>>>,
    /// Acquires waiting for the turn (a release hands over only to one of these).
    queued: AtomicUsize,
    /// The current holder's [`Phase`].
    phase: AtomicU8,
}

/// Why a turn was not given.
#[derive(Debug)]
pub(crate) enum NoTurn {
    /// Fail-fast, and another task of this client holds or is acquiring the key
    /// (or a release it waited behind did not end by the deadline).
    Busy,
    /// The wait budget ran out in the queue.
    TimedOut(Phase),
}

/// One key's turn, held. Dropping it lets the next waiter in; a hand-off left in
/// it with [`Turn::hand_off`] goes to that waiter.
pub(crate) struct Turn {
    /// The turn had to be waited for (another task of this client had it).
    pub waited: bool,
    /// A hand-off was left in it: if its waiter has gone when the turn ends,
    /// the hand-off must be reclaimed.
    handed: bool,
    baton: Option<OwnedMutexGuard<Option<Handoff>>>,
    line: Arc<Line>,
    key: LockKey,
    lines: Arc<Mutex<HashMap<LockKey, Arc<Line>>>>,
    orphaned: Arc<OnceLock<Orphaned>>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("key", &self.key)
            .field("waited", &self.waited)
            .finish_non_exhaustive()
    }
}

/// Counts a waiter in the queue for as long as it waits (however it stops);
/// a waiter that leaves without its turn reclaims a hand-off left for it.
struct Queued<'a> {
    line: &'a Line,
    key: &'a LockKey,
    orphaned: &'a OnceLock<Orphaned>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.line.queued.fetch_sub(1, Ordering::AcqRel);
        self.line.reclaim(self.key, self.orphaned);
    }
}

impl Turns {
    /// Take `key`'s turn, waiting in line until `deadline` fires. `fail_fast`:
    /// do not queue behind another task's acquire or lock, only behind a
    /// release (which ends by itself; `deadline` bounds that wait, and then the
    /// key counts as busy).
    pub(crate) async fn take(
        &self,
        key: &LockKey,
        fail_fast: bool,
        deadline: impl FnOnce() -> Sleep,
    ) -> Result<Turn, NoTurn> {
        let line = {
            let mut lines = self.lock();
            lines
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Line {
                        baton: Arc::new(FairMutex::new(None)),
                        queued: AtomicUsize::new(0),
                        phase: AtomicU8::new(Phase::Acquiring as u8),
                    })
                })
                .clone()
        };
        let turn = |baton: OwnedMutexGuard<Option<Handoff>>, line: Arc<Line>, waited| Turn {
            waited,
            handed: false,
            baton: Some(baton),
            line,
            key: key.clone(),
            lines: self.lines.clone(),
            orphaned: self.orphaned.clone(),
        };
        if let Ok(baton) = line.baton.clone().try_lock_owned() {
            line.phase.store(Phase::Acquiring as u8, Ordering::Release);
            return Ok(turn(baton, line, false));
        }
        let phase = line.phase();
        if fail_fast && (phase != Phase::Releasing || line.queued.load(Ordering::Acquire) > 0) {
            return Err(NoTurn::Busy);
        }
        line.queued.fetch_add(1, Ordering::AcqRel);
        let queued = Queued {
            line: &line,
            key,
            orphaned: &self.orphaned,
        };
        let baton = line.baton.clone();
        let waited = tokio::select! {
            biased;
            baton = baton.lock_owned() => Ok(baton),
            () = deadline() => Err(if fail_fast {
                NoTurn::Busy
            } else {
                NoTurn::TimedOut(line.phase())
            }),
        };
        // The phase is ours before we stop counting as queued, so a fail-fast
        // acquire never reads the previous holder's.
        if waited.is_ok() {
            line.phase.store(Phase::Acquiring as u8, Ordering::Release);
        }
        drop(queued);
        waited.map(|baton| turn(baton, line.clone(), true))
    }

    /// Hand-offs nobody took are released by `release` (set once, by the
    /// client that owns these turns).
    pub(crate) fn on_orphaned(&self, release: Orphaned) {
        let _ = self.orphaned.set(release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LockKey, Arc<Line>>> {
        self.lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Line {
    fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// Nobody holds the turn and nobody waits for it, yet a hand-off is left in
    /// it (its waiter gave up or was cancelled after the release chose it): the
    /// lock it names is held in the store with nobody heartbeating it. Give it
    /// to `orphaned` to release.
    fn reclaim(&self, key: &LockKey, orphaned: &OnceLock<Orphaned>) {
        if self.queued.load(Ordering::Acquire) > 0 {
            return;
        }
        let Ok(mut baton) = self.baton.try_lock() else {
            return;
        };
        if let Some(handoff) = baton.take() {
            drop(baton);
            match orphaned.get() {
                Some(release) => release(key.clone(), handoff),
                None => tracing::debug!(%key, "a hand-off nobody took expires with its lease"),
            }
        }
    }
}

impl Turn {
    /// Say what the holder of the turn is doing now.
    pub(crate) fn set_phase(&self, phase: Phase) {
        self.line.phase.store(phase as u8, Ordering::Release);
    }

    /// Another acquire of this key waits for the turn.
    pub(crate) fn has_waiters(&self) -> bool {
        self.line.queued.load(Ordering::Acquire) > 0
    }

    /// Take the hand-off the previous holder left, if any.
    pub(crate) fn take_handoff(&mut self) -> Option<Handoff> {
        self.baton.as_mut().and_then(|baton| baton.take())
    }

    /// Leave `handoff` for the next holder of the turn.
    pub(crate) fn hand_off(&mut self, handoff: Handoff) {
        if let Some(baton) = self.baton.as_mut() {
            **baton = Some(handoff);
            self.handed = true;
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Let the next waiter in first (a waiter that has left meanwhile leaves
        // a hand-off to be reclaimed), then forget the key if nobody else has
        // its line (the map's copy and ours are the only ones left).
        drop(self.baton.take());
        if self.handed {
            self.line.reclaim(&self.key, &self.orphaned);
        }
        let mut lines = self
            .lines
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if Arc::strong_count(&self.line) == 2
            && lines
                .get(&self.key)
                .is_some_and(|line| Arc::ptr_eq(line, &self.line))
        {
            lines.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;
    use crate::clock::Instant;

    fn never() -> Sleep {
        Box::pin(std::future::pending())
    }

    #[tokio::test]
    async fn turns_are_given_in_order_and_a_handoff_goes_to_the_next() {
        let turns = Arc::new(Turns::default());
        let key = LockKey::new("k");
        let mut first = turns.take(&key, false, never).await.unwrap();
        assert!(!first.has_waiters());
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..3 {
            let (turns, key, order) = (turns.clone(), key.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let mut turn = turns.take(&key, false, never).await.unwrap();
                order
                    .lock()
                    .unwrap()
                    .push((n, turn.take_handoff().is_some()));
            }));
            tokio::task::yield_now().await;
        }
        assert!(first.has_waiters());
        first.hand_off(Handoff {
            rvn: Rvn::fresh(),
            lease: std::time::Duration::from_secs(20),
        });
        drop(first);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [(0, true), (1, false), (2, false)]);
        assert!(turns.lock().is_empty(), "an idle key is forgotten");
    }

    #[tokio::test]
    async fn fail_fast_is_busy_behind_a_holder_and_waits_behind_a_release() {
        let turns = Arc::new(Turns::default());
        let key = LockKey::new("k");
        let held = turns.take(&key, false, never).await.unwrap();
        held.set_phase(Phase::Holding);
        assert!(matches!(
            turns.take(&key, true, never).await,
            Err(NoTurn::Busy)
        ));
        held.set_phase(Phase::Releasing);
        let waiter = {
            let (turns, key) = (turns.clone(), key.clone());
            tokio::spawn(async move { turns.take(&key, true, never).await.is_ok() })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiter.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_times_out_at_its_deadline() {
        let turns = Turns::default();
        let key = LockKey::new("k");
        let _held = turns.take(&key, false, never).await.unwrap();
        let started = Instant::now();
        let deadline = || -> Sleep { Box::pin(tokio::time::sleep(Duration::from_secs(2))) };
        assert!(matches!(
            turns.take(&key, false, deadline).await,
            Err(NoTurn::TimedOut(Phase::Acquiring))
        ));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }
}
