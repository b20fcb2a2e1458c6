//! What this client has seen of other holders' records, remembered across
//! acquires: so repeated short attempts (a loop of `try_acquire`, a cron job's
//! one attempt a minute, tasks taking turns) take over a dead holder once its
//! record has kept one version for `lease × (1 + drift)`, as one long acquire
//! would, instead of each attempt starting a fresh count.
//!
//! It is safe for the same reason the count within one acquire is: every write
//! carries a fresh RVN, so a record showing the same RVN at two instants was not
//! written in between; the count starts when the reply carrying the first
//! sighting arrived, never before the write it shows.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::Instant;
use crate::{LockKey, LockRecord, Observation};

/// How many keys are remembered; the least recently seen are forgotten first
/// (forgetting only makes a takeover wait longer, never sooner).
pub(crate) const REMEMBERED_KEYS: usize = 10_000;

/// The first sighting of each key's current record, for the most recently seen
/// keys.
#[derive(Debug)]
pub(crate) struct Sightings {
    seen: Mutex<lru::LruCache<LockKey, Observation>>,
    /// Anything is remembered: lets [`forget`](Self::forget) skip the lock on
    /// the path of every acquire of a client that never waited for anyone.
    any: AtomicBool,
}

/// A sighting of a held record.
#[derive(Debug)]
pub(crate) struct Sighting {
    /// Since when this record has been seen unchanged.
    pub observation: Observation,
    /// The record seen before it was another held record: its holder was alive
    /// (it wrote) since this client last looked.
    pub changed: bool,
}

impl Default for Sightings {
    fn default() -> Self {
        Self::with_capacity(REMEMBERED_KEYS)
    }
}

impl Sightings {
    /// Remember at most `capacity` keys (at least one).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            seen: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            any: AtomicBool::new(false),
        }
    }

    /// `record` (held by someone else) arrived at `now`, proven `credit` old
    /// then (see [`ClockTrust::credit`](crate::timing::ClockTrust::credit)):
    /// since when has it been seen unchanged, and how old was it then?
    pub(crate) fn saw(&self, record: &LockRecord, now: Instant, credit: Duration) -> Sighting {
        let mut seen = self.lock();
        let observation = Observation {
            rvn: record.rvn.clone(),
            lease: record.lease,
            owner: record.owner.clone(),
            seen_at: now,
            credit,
        };
        match seen.get_mut(&record.key) {
            Some(first) if first.rvn == record.rvn => {
                // The same version again: keep whichever sighting proves it
                // older (the first, unless this read's store clock says more).
                if !first.proves_at_least(&observation) {
                    *first = observation;
                }
                Sighting {
                    observation: first.clone(),
                    changed: false,
                }
            }
            earlier => {
                let changed = earlier.is_some();
                seen.put(record.key.clone(), observation.clone());
                self.any.store(true, Ordering::Release);
                Sighting {
                    observation,
                    changed,
                }
            }
        }
    }

    /// The record of `key` is not someone else's held record any more (released,
    /// gone, or ours): forget it.
    pub(crate) fn forget(&self, key: &LockKey) {
        if self.any.load(Ordering::Acquire) {
            self.lock().pop(key);
        }
    }

    /// The owner last seen holding `key`, if any.
    pub(crate) fn holder(&self, key: &LockKey) -> Option<String> {
        self.lock().peek(key).map(|seen| seen.owner.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, lru::LruCache<LockKey, Observation>> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fence, Rvn};

    fn record(key: &str, rvn: &Rvn) -> LockRecord {
        LockRecord {
            key: LockKey::new(key),
            owner: "holder".into(),
            rvn: rvn.clone(),
            lease: Duration::from_secs(10),
            released: false,
            fence: Fence(1),
            data: None,
            expires_at: None,
            written: None,
        }
    }

    #[test]
    fn the_first_sighting_of_a_version_is_kept_and_a_new_version_restarts_the_count() {
        let sightings = Sightings::default();
        let t0 = Instant::now();
        let v1 = Rvn::fresh();
        let first = sightings.saw(&record("k", &v1), t0, Duration::ZERO);
        assert_eq!(first.observation.seen_at, t0);
        assert!(!first.changed);
        let again = sightings.saw(
            &record("k", &v1),
            t0 + Duration::from_secs(5),
            Duration::ZERO,
        );
        assert_eq!(
            again.observation.seen_at, t0,
            "counts from the first sighting"
        );
        assert!(!again.changed);
        let later = t0 + Duration::from_secs(6);
        let v2 = sightings.saw(&record("k", &Rvn::fresh()), later, Duration::ZERO);
        assert_eq!(v2.observation.seen_at, later);
        assert!(v2.changed, "the holder wrote: it is alive");
        sightings.forget(&LockKey::new("k"));
        assert!(
            !sightings
                .saw(&record("k", &v1), later, Duration::ZERO)
                .changed
        );
    }

    #[test]
    fn a_later_sighting_proving_the_version_older_replaces_the_first() {
        let sightings = Sightings::default();
        let t0 = Instant::now();
        let v1 = Rvn::fresh();
        let first = sightings.saw(&record("k", &v1), t0, Duration::from_secs(1));
        assert_eq!(first.observation.credit, Duration::from_secs(1));
        // Seen 2 s later, but the store says it is 4 s old: it was written
        // 1 s earlier than the first sighting proved.
        let later = t0 + Duration::from_secs(2);
        let again = sightings.saw(&record("k", &v1), later, Duration::from_secs(4));
        assert_eq!(again.observation.seen_at, later);
        assert_eq!(again.observation.credit, Duration::from_secs(4));
        // Seen later with less proof than the first sighting gives: the kept
        // sighting stands.
        let last = sightings.saw(
            &record("k", &v1),
            t0 + Duration::from_secs(3),
            Duration::ZERO,
        );
        assert_eq!(last.observation.seen_at, later);
        assert_eq!(last.observation.credit, Duration::from_secs(4));
    }

    #[test]
    fn only_the_most_recently_seen_keys_are_remembered() {
        let sightings = Sightings::with_capacity(2);
        let t0 = Instant::now();
        let rvn = Rvn::fresh();
        for key in ["a", "b", "c"] {
            sightings.saw(&record(key, &rvn), t0, Duration::ZERO);
        }
        assert_eq!(sightings.holder(&LockKey::new("a")), None);
        assert_eq!(
            sightings.holder(&LockKey::new("c")).as_deref(),
            Some("holder")
        );
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            sightings
                .saw(&record("a", &rvn), later, Duration::ZERO)
                .observation
                .seen_at,
            later
        );
    }
}
