//! The revisions of lock keys this store last wrote or read: the
//! `mod_revision` each record was stored at, so a write on a record this
//! store has seen is one transaction comparing it, with no read first.
//!
//! A remembered revision is only ever a guess: the write is conditional on
//! it, so a stale guess costs a refused transaction (which returns the
//! current record), never a wrong write.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lock_core::LockRecord;
use lru::LruCache;

/// A record and the revision it was stored at.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub record: LockRecord,
    pub revision: i64,
}

/// The most recently used keys' revisions, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct Revisions {
    known: Mutex<LruCache<String, Known>>,
}

impl Revisions {
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self {
            known: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// What this store last saw at `key`.
    pub fn get(&self, key: &str) -> Option<Known> {
        self.lock().get(key).cloned()
    }

    /// `key` holds `known` now.
    pub fn remember(&self, key: &str, known: Known) {
        self.lock().put(key.to_owned(), known);
    }

    /// What `key` holds is unknown (a write whose outcome is unknown, a key
    /// found absent or deleted).
    pub fn forget(&self, key: &str) {
        self.lock().pop(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, Known>> {
        // The cache holds guesses only: one left by a panicking thread is as
        // good as any.
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
