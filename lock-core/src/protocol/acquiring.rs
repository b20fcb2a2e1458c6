//! What an acquire makes of the record it saw, read or shown by a refused
//! write ([`judge`]): take a free key, hold a write of its own that applied
//! (if its lease, counted from the send, is still safe), write afresh on one
//! too old to trust, write on a version handed over by another task of its
//! client, or wait for a holder until it may take over, which a final
//! write's min hold brings forward to its end.
//!
//! The client runs it in its acquire loop and carries out the step it names;
//! the model check runs it on the records its store holds.

use std::time::{Duration, SystemTime};

use crate::clock::Instant;
use crate::protocol::Broken;
use crate::protocol::holding::lease_runs_from;
use crate::record::LockRecord;
use crate::replies::AcquireFinds;
use crate::timing::{Timing, final_hold_ends_at};

/// What an acquire does next with the record it saw.
#[derive(Debug)]
pub(crate) enum Seen {
    /// Nobody holds the key: vacant (`None`), or released by its last
    /// holder (the record).
    Free(Option<LockRecord>),
    /// A write of this acquire's, sent at `sent`, applied, and its lease
    /// (running from the send) is safe now: the lock is held.
    Hold { record: LockRecord, sent: Instant },
    /// A write of this acquire's applied, but so long ago that its lease
    /// is no longer safe: acquire afresh on top of it (a new fence).
    Renew(LockRecord),
    /// Still the version another task of this client handed over: write on
    /// it.
    Handed(LockRecord),
    /// Held by someone else: it may be taken over from `takeover_at` (this
    /// client's sightings of the record, brought forward to the end of a
    /// final write's min hold); `final_hold` while that min hold runs (the
    /// holder is busy on purpose, not dead).
    Held {
        record: LockRecord,
        takeover_at: Instant,
        final_hold: bool,
    },
}

/// Judge `finds` (what `replies::acquire_finds` made of the record) at
/// `now` and `wall_now`. `timing_for` is the client's timing for a lease of
/// its own; `watched` notes this client's sighting of a record held by
/// another and says when it may be taken over (`Shared::sight`): called for
/// a held record only.
pub(crate) fn judge(
    finds: AcquireFinds,
    now: Instant,
    wall_now: SystemTime,
    timing_for: impl FnOnce(Duration) -> Timing,
    watched: impl FnOnce(&LockRecord) -> Instant,
    broken: Broken,
) -> Seen {
    match finds {
        AcquireFinds::Vacant => Seen::Free(None),
        AcquireFinds::Released(record) => Seen::Free(Some(record)),
        AcquireFinds::Handed(record) => Seen::Handed(record),
        AcquireFinds::Ours { record, sent } => {
            // The lease runs from the send, even when the write's reply was
            // lost and this read found it: too old to trust, and another
            // may have taken it over meanwhile.
            let from = lease_runs_from(sent, now, broken);
            if timing_for(record.lease).lease_state(from, now).is_safe() {
                Seen::Hold { record, sent }
            } else {
                Seen::Renew(record)
            }
        }
        AcquireFinds::Held(record) => {
            let watched = watched(&record);
            let (takeover_at, final_hold) = held_until(&record, watched, now, wall_now, broken);
            Seen::Held {
                record,
                takeover_at,
                final_hold,
            }
        }
    }
}

/// When a record held by another may be taken over, given `watched` (when
/// this client's sightings of it allow): a record its holder wrote for the
/// last time, to keep the lock to the end of a min hold, is busy on purpose
/// until that end (on this client's wall clock), and free from then on.
/// Also whether that min hold still runs (the holder is busy, not dead).
/// An acquire and a semaphore's poll of its permits both judge so.
pub(crate) fn held_until(
    record: &LockRecord,
    watched: Instant,
    now: Instant,
    wall_now: SystemTime,
    broken: Broken,
) -> (Instant, bool) {
    match record.rvn.final_until() {
        Some(until) if keeps_final_holds(broken) => {
            let ends = final_hold_ends_at(now, wall_now, until);
            (watched.min(ends), now < ends)
        }
        _ => (watched, false),
    }
}

/// Whether a final write's min hold ends the wait at its end (the rule
/// [`Broken::IgnoresFinalHold`] breaks).
fn keeps_final_holds(broken: Broken) -> bool {
    #[cfg(test)]
    if broken == Broken::IgnoresFinalHold {
        return false;
    }
    let _ = broken;
    true
}
