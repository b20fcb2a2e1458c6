//! A held lock's place in its client's heartbeat schedule, kept with the lock so
//! that the schedule (see `registry`) can find and move the lock's entry without
//! a lookup. The lock only carries the cell; the registry alone reads and
//! writes it.

use std::sync::atomic::{AtomicU64, Ordering};

/// A position in the schedule: due time (nanoseconds after the base), then
/// insertion order (from 1).
pub(crate) type Slot = (u64, u64);

/// A lock's position in the schedule, kept with the lock. Changed only under the
/// registry's lock, which orders the accesses: relaxed atomics suffice.
#[derive(Debug, Default)]
pub(crate) struct SlotCell {
    at: AtomicU64,
    /// 0: not in the schedule.
    seq: AtomicU64,
}

impl SlotCell {
    /// The lock's schedule entry, if it has one.
    pub(crate) fn get(&self) -> Option<Slot> {
        match self.seq.load(Ordering::Relaxed) {
            0 => None,
            seq => Some((self.at.load(Ordering::Relaxed), seq)),
        }
    }

    /// Set the lock's entry (or none), returning the previous one.
    pub(crate) fn replace(&self, slot: Option<Slot>) -> Option<Slot> {
        let old = self.get();
        let (at, seq) = slot.unwrap_or((0, 0));
        self.at.store(at, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Relaxed);
        old
    }

    /// The lock has a schedule entry (exact under the registry's lock).
    pub(crate) fn is_scheduled(&self) -> bool {
        self.seq.load(Ordering::Relaxed) != 0
    }
}
