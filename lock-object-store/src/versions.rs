//! The versions of lock objects this store last wrote or read: the object
//! version (ETag, and version id where the service has one) each record was
//! stored as, so a write on a record this store has seen is one conditional
//! request, with no read first.
//!
//! A remembered version is only ever a guess: the write is conditional on it,
//! so a stale guess costs a refused request and a read, never a wrong write.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lock_core::LockRecord;
use lru::LruCache;
use object_store::UpdateVersion;
use object_store::path::Path;

/// A record and the object version it is stored as.
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub record: LockRecord,
    pub version: UpdateVersion,
}

/// The most recently used keys' versions, at most `capacity` of them.
#[derive(Debug)]
pub(crate) struct Versions {
    known: Mutex<LruCache<Path, Known>>,
}

impl Versions {
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self {
            known: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// What this store last saw at `path`.
    pub fn get(&self, path: &Path) -> Option<Known> {
        self.lock().get(path).cloned()
    }

    /// `path` holds `known` now.
    pub fn remember(&self, path: &Path, known: Known) {
        self.lock().put(path.clone(), known);
    }

    /// What `path` holds is unknown (a write whose outcome is unknown, an
    /// object found absent).
    pub fn forget(&self, path: &Path) {
        self.lock().pop(path);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Path, Known>> {
        // The cache holds guesses only: one left by a panicking thread is as
        // good as any.
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
