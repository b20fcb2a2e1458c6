//! [`LockGroup`]: several locks held all or nothing
//! ([`LockClient::acquire_all`]).
//!
//! Where the store writes several keys in one atomic request and every key
//! is free, the set is taken in that one request. Otherwise the keys are
//! taken one by one in one fixed order (by partition key, then sort key, as
//! bytes), the order every client uses, so two clients asking for
//! overlapping sets never wait for each other in a circle: whichever gets the
//! lowest shared key first gets the rest in turn. Any failure, timeout or a
//! dropped future lets go of every key taken so far and releases it. Each
//! member keeps its own lease, heartbeats and fence; the group is safe only
//! while every member is.

use futures_util::future::{FutureExt, select_all};

use crate::acquire::AtOnce;
use crate::{AcquireOptions, Fence, LockClient, LockError, LockGuard, LockKey, LostReason};

/// Locks held together: acquired all or nothing by
/// [`LockClient::acquire_all`], released together.
///
/// Dropping it drops every member guard: each stops heartbeating and is
/// released in the background, as a dropped [`LockGuard`].
#[must_use = "dropping the group releases every lock in it"]
#[derive(Debug)]
pub struct LockGroup {
    /// In the order they were taken: by key.
    members: Vec<LockGuard>,
    /// Taken in one atomic request.
    at_once: bool,
}

impl LockGroup {
    /// The member guards, in key order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.members
    }

    /// Whether the set was taken in one atomic request (a store with
    /// [`atomic_writes`](crate::Capabilities::atomic_writes), every key
    /// free), rather than key by key.
    pub fn taken_at_once(&self) -> bool {
        self.at_once
    }

    /// The keys held, in key order.
    pub fn keys(&self) -> impl Iterator<Item = &LockKey> {
        self.members.iter().map(|guard| guard.key())
    }

    /// Each key's fence, in key order: present each to the resource that key
    /// guards.
    pub fn fences(&self) -> impl Iterator<Item = (&LockKey, Fence)> {
        self.members
            .iter()
            .map(|guard| (guard.key(), guard.fence()))
    }

    /// The member guarding `key`, if the group holds it.
    pub fn guard(&self, key: &LockKey) -> Option<&LockGuard> {
        self.members.iter().find(|guard| guard.key() == key)
    }

    /// True while every member's lease is safe: the group may be acted on.
    pub fn is_safe(&self) -> bool {
        self.members.iter().all(|guard| guard.is_safe())
    }

    /// Resolves when the first member stops being safe (in danger, lost,
    /// released), with why; the group is unsafe from then on.
    pub fn until_unsafe(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let watches: Vec<_> = self
            .members
            .iter()
            .map(|guard| guard.until_unsafe().boxed())
            .collect();
        async move {
            if watches.is_empty() {
                return LostReason::Released;
            }
            select_all(watches).await.0
        }
    }

    /// Release every member, in reverse key order. Each lets go of its lease
    /// before its write; the first error is returned after every release was
    /// tried.
    pub async fn release(mut self) -> Result<(), LockError> {
        let mut first = Ok(());
        while let Some(guard) = self.members.pop() {
            let released = guard.release().await;
            if first.is_ok() {
                first = released;
            }
        }
        first
    }

    /// The member guards, taken out of the group (each then lives and is
    /// released on its own).
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.members
    }
}

impl LockClient {
    /// Acquire every key in `keys`, all or nothing, and hold them together.
    ///
    /// Duplicate keys count once. The keys are taken in one fixed order (by
    /// partition key, then sort key, as bytes), whatever order they are given
    /// in, so clients asking for overlapping sets never deadlock. `options`
    /// apply to each key (its lease, data, hold limits...), and its
    /// [`wait`](AcquireOptions::wait) budget to the whole set: each key gets
    /// what is left of it (without one, the budget of one acquire). If a key
    /// cannot be had within it, or any other error comes, every key taken so
    /// far is let go of and released before the error is returned; nothing
    /// stays held. Dropping the future does the same, in the background.
    ///
    /// Each member keeps its own fence. On a store that writes several keys
    /// in one atomic request ([`Capabilities::atomic_writes`](crate::Capabilities::atomic_writes):
    /// DynamoDB, PostgreSQL, the memory store), a set whose keys are all free
    /// is taken in that one request, all or nothing
    /// ([`LockGroup::taken_at_once`]); a set with a key held (or handed
    /// between this client's tasks) is taken key by key as above.
    pub async fn acquire_all<K: Into<LockKey>>(
        &self,
        keys: impl IntoIterator<Item = K>,
        options: AcquireOptions,
    ) -> Result<LockGroup, LockError> {
        let mut keys: Vec<LockKey> = keys.into_iter().map(Into::into).collect();
        keys.sort();
        keys.dedup();
        let budget = options
            .wait
            .unwrap_or_else(|| self.inner.config.default_wait_for(&options));
        let started = self.inner.clock.now();
        if self.fits_one_request(&keys, &options) {
            match self.inner.acquire_at_once(&keys, &options).await {
                AtOnce::Held(members) => {
                    return Ok(LockGroup {
                        members,
                        at_once: true,
                    });
                }
                AtOnce::Failed(error) => return Err(error),
                AtOnce::NotNow => {}
            }
        }
        // Members taken so far: dropped (so released in the background) if
        // this future is dropped or a key fails.
        let mut group = LockGroup {
            members: Vec::with_capacity(keys.len()),
            at_once: false,
        };
        for key in keys {
            let spent = self.inner.clock.now().saturating_duration_since(started);
            let left = budget.saturating_sub(spent);
            match self.acquire(key, options.clone().wait(left)).await {
                Ok(guard) => group.members.push(guard),
                Err(error) => {
                    // Releases run in reverse; their errors are the background's
                    // to log: the acquire's error is the one to report.
                    let _ = group.release().await;
                    return Err(error);
                }
            }
        }
        Ok(group)
    }

    /// Whether `keys` may be tried in one atomic request: several keys, a
    /// store that writes that many at once (the records' size as the client
    /// measures it within its limit), and options a plain vacant write
    /// serves.
    fn fits_one_request(&self, keys: &[LockKey], options: &AcquireOptions) -> bool {
        let Some(limits) = self.inner.caps.atomic_writes else {
            return false;
        };
        let data = options.data.bytes().map_or(0, <[u8]>::len);
        let owner = self.inner.config.owner.len();
        let bytes: usize = keys
            .iter()
            .map(|key| key.partition().len() + key.sort().map_or(0, str::len) + owner + data)
            .sum();
        keys.len() > 1
            && keys.len() <= limits.max_keys
            && bytes <= limits.max_bytes
            && !options.reentrant
            && !options.only_if_exists
            && !options.busy_unless_dead
    }
}
