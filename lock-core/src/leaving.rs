//! How a lock is left ([`Leaving`]), and what a way out that failed may have
//! left held ([`Leftovers`]): a release that gave up with the store out of
//! reach until past the lease, or the clean-up of an abandoned acquire that
//! failed the same way. The record may still show this client as holder, with
//! nobody heartbeating it: other clients take it over after a lease, but until
//! then it reads as held. Each is remembered by the versions the record may be
//! at, and `shutdown()` writes it again, conditional on each version, so what
//! the store kept through an outage does not outlive the client that wrote it
//! (a record anyone else wrote since shows another version and is not
//! touched).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use crate::held::Held;
use crate::timing::HoldLimits;
use crate::{LockKey, Rvn};

/// The most leftovers a client remembers; past it the oldest is forgotten (it
/// expires with its lease, as without this book). A client whose store is out
/// of reach for long forgets before it runs out of memory.
const MOST_REMEMBERED: usize = 1_024;

/// How a lock is left: its record deleted or marked released, and the data the
/// release writes with it (`None`: the data stays as it is).
#[derive(Clone, Debug, Default)]
pub(crate) struct Leaving {
    pub delete: bool,
    pub data: Option<Vec<u8>>,
}

impl Leaving {
    /// As the acquisition asked: delete-on-release or not, data kept.
    pub fn as_acquired(held: &Held) -> Self {
        Self {
            delete: held.delete_on_release,
            data: None,
        }
    }
}

/// A lock a failed way out may have left held: the versions its record may be
/// at (at most one is), and the write that was to leave it.
#[derive(Clone, Debug)]
pub(crate) struct Leftover {
    pub key: LockKey,
    pub rvns: Vec<Rvn>,
    pub leaving: Leaving,
    /// The lease the lock was held with (a released record keeps one).
    pub lease: Duration,
    /// Its min hold, if any: written again before the min hold ends, the
    /// write keeps the lock held to that end instead of releasing it.
    pub limits: HoldLimits,
}

/// The leftovers of one client, oldest first, for `shutdown()`.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    list: Mutex<VecDeque<Leftover>>,
}

impl Leftovers {
    fn list(&self) -> std::sync::MutexGuard<'_, VecDeque<Leftover>> {
        self.list
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remember `leftover` (forgetting the oldest past [`MOST_REMEMBERED`]).
    pub fn remember(&self, leftover: Leftover) {
        let mut list = self.list();
        list.push_back(leftover);
        if list.len() > MOST_REMEMBERED
            && let Some(oldest) = list.pop_front()
        {
            tracing::debug!(key = %oldest.key, "too many locks left held to remember; it expires with its lease");
        }
    }

    /// Every leftover, forgotten here.
    pub fn take_all(&self) -> Vec<Leftover> {
        self.list().drain(..).collect()
    }
}
