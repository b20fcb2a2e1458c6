//! The store contract: a linearizable map from [`LockKey`] to [`LockRecord`] with
//! conditional writes. Everything the protocol needs from a backend is here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{LockKey, LockRecord, NewRecord, Rvn, StoreError};

/// The condition a write is made under.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Expect {
    /// The key is absent or its record is released.
    Vacant,
    /// The stored record carries exactly this RVN.
    Version(Rvn),
}

impl Expect {
    /// Whether this condition holds on `record` (`None`: the key has no
    /// record): `Vacant` on no record or a released one, `Version` on a
    /// record with exactly that RVN.
    pub fn holds_on(&self, record: Option<&LockRecord>) -> bool {
        match (self, record) {
            (Expect::Vacant, None) => true,
            (Expect::Vacant, Some(record)) => record.is_vacant(),
            (Expect::Version(_), None) => false,
            (Expect::Version(rvn), Some(record)) => record.rvn == *rvn,
        }
    }
}

/// The result of a conditional write that reached the store and was decided.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// The condition held and the write applied. For `put`, the record as stored
    /// (with the fence the store computed); for `delete`, the record that was
    /// deleted.
    Applied(LockRecord),
    /// The condition did not hold; nothing was written. `current` is the record the
    /// store holds now (`None` when the key is absent, or when the store cannot
    /// return the current record in the same round trip; see
    /// [`Capabilities::returns_current_on_conflict`]).
    Rejected {
        /// The record that made the condition fail.
        current: Option<LockRecord>,
    },
}

/// An opaque position in a paged listing, produced by the store.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Cursor(pub String);

impl Cursor {
    /// Where to read after a page read from `given` that said `next`: `None`
    /// at the end. A store that hands back the cursor it was given would page
    /// forever: that is an error.
    pub(crate) fn after(
        given: Option<&Cursor>,
        next: Option<Cursor>,
    ) -> Result<Option<Cursor>, StoreError> {
        match next {
            Some(next) if given == Some(&next) => Err(StoreError::other(
                "the store returned the same listing cursor twice",
            )),
            next => Ok(next),
        }
    }
}

/// One page of a listing.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Page {
    /// The records of this page.
    pub records: Vec<LockRecord>,
    /// Where the next page starts; `None` when this was the last page.
    pub next: Option<Cursor>,
}

/// What a store can and cannot do, so that the client and the conformance suite ask
/// instead of failing at run time.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Capabilities {
    /// A rejected write carries the current record (no extra read on conflict).
    pub returns_current_on_conflict: bool,
    /// Keys may have a sort key.
    pub sort_keys: bool,
    /// Longest partition key in bytes (UTF-8).
    pub max_partition_key_bytes: usize,
    /// Longest sort key in bytes (UTF-8).
    pub max_sort_key_bytes: usize,
    /// Largest record in bytes, as the store measures it (key, attributes, data).
    pub max_record_bytes: usize,
    /// The store keeps released records. A store that deletes on release
    /// creates the record afresh at the next acquisition, with a fence as
    /// [`fences_after_deletion`](Self::fences_after_deletion) says.
    pub keeps_released_records: bool,
    /// What the first fence of a record created where none is (never
    /// written, or deleted by any path) is, and so whether fences keep
    /// rising across a deletion.
    pub fences_after_deletion: FencesAfterDeletion,
    /// The store keeps [`LockRecord::expires_at`](crate::LockRecord::expires_at)
    /// (it has somewhere to put a garbage-collection time).
    pub stores_expiry: bool,
    /// [`ConditionalStore::delete`] is a conditional write. A store that cannot
    /// make a delete conditional (an object store through `object_store`)
    /// refuses every `delete` as [`Invalid`](crate::StoreErrorKind::Invalid);
    /// the client then refuses delete-on-release before writing anything.
    pub conditional_delete: bool,
    /// Requests to the service each kind of call costs, where it is not one.
    pub requests: RequestCosts,
    /// What the store tells about when a record was written
    /// ([`LockRecord::written`](crate::LockRecord::written)), and so how soon
    /// a fresh client may take over a crashed holder's lock.
    pub clock: StoreClock,
    /// Whether [`ConditionalStore::put_many`] writes several keys in one
    /// atomic request, and how many: `None` (the default) for a store that
    /// cannot, which refuses every `put_many`. A wrapper that does not pass
    /// `put_many` through must say `None`.
    pub atomic_writes: Option<AtomicWrites>,
    /// The store announces releases to waiters in other processes
    /// ([`ConditionalStore::release_feed`]), so a hand-off does not wait for
    /// the waiter's next poll. A hint only: waiters still poll.
    pub announces_releases: bool,
}

/// How much one [`ConditionalStore::put_many`] may write
/// ([`Capabilities::atomic_writes`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct AtomicWrites {
    /// The most keys in one request (DynamoDB: 100 items).
    pub max_keys: usize,
    /// The most bytes all the records may take together, as the store
    /// measures them (DynamoDB: 4 MB).
    pub max_bytes: usize,
}

impl AtomicWrites {
    /// Up to `max_keys` keys and `max_bytes` bytes in one request.
    pub const fn new(max_keys: usize, max_bytes: usize) -> Self {
        Self {
            max_keys,
            max_bytes,
        }
    }
}

/// One conditional write of a [`ConditionalStore::put_many`]: what
/// [`put`](ConditionalStore::put) takes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct KeyedWrite {
    /// The key written.
    pub key: LockKey,
    /// The condition.
    pub expect: Expect,
    /// The record to write.
    pub new: NewRecord,
}

/// The result of a [`ConditionalStore::put_many`] that reached the store and
/// was decided: every write applied, or none.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ManyOutcome {
    /// Every condition held and every write applied, at one instant: the
    /// records as stored, in the order of the writes (fences computed).
    Applied(Vec<LockRecord>),
    /// A condition did not hold; nothing was written. `index` is the first
    /// write whose condition failed, `current` its current record where the
    /// store can return it.
    Rejected {
        /// Which write (its place in the request).
        index: usize,
        /// The record under its key now, if the store returned it.
        current: Option<LockRecord>,
    },
}

/// What a store does for the fence of a record it creates where there is
/// none ([`FenceUpdate::Next`](crate::FenceUpdate::Next) on an absent key):
/// whether a key's fences keep rising after its record was deleted — by a
/// time to live, a lifecycle rule, a scheduled `DELETE`, delete-on-release,
/// `lockctl release --force`, or by hand.
///
/// Fencing rests on it: a holder paused past its lease carries its fence
/// through the deletion, and a resource admits its stale write if the key's
/// next holder got a lower or equal fence.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[non_exhaustive]
pub enum FencesAfterDeletion {
    /// The store remembers the highest fence of every deleted record and
    /// starts above it: exact, whatever deleted the record (the in-memory
    /// store, which sees every deletion).
    Remembered,
    /// A record created where none is starts at the clock's floor
    /// ([`Fence::floor_at`](crate::Fence::floor_at): microseconds since the
    /// Unix epoch, on the store server's clock where the store has one, as
    /// PostgreSQL does, else on the creating process's): above every fence
    /// granted before the deletion as long as the clock that creates the
    /// record again is not behind the one that created it before by more
    /// than the time between the two creations.
    ClockFloor,
    /// Fences start again at 1 after a deletion: fences of such a store are
    /// not safe to check at a resource if the lock's record can be deleted.
    /// The client says so once, at warn, when it is built on such a store.
    #[default]
    Restart,
}

/// What a store's reads tell about when each record was written.
///
/// The timing rule that uses it is lock-core's
/// ([`ClockTrust::credit`](crate::timing::ClockTrust::credit)); a store only reports.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[non_exhaustive]
pub enum StoreClock {
    /// Nothing: a waiter takes over a record only after watching it unchanged
    /// for `lease × (1 + drift)` on its own monotonic clock.
    #[default]
    None,
    /// Every read reports the record's age on the store's own clock
    /// ([`WriteTime::Ago`](crate::WriteTime::Ago)): a record whose lease has passed
    /// on the store's clock is taken over the first time a client reads it.
    Age,
    /// Records carry a wall-clock time ([`WriteTime::At`](crate::WriteTime::At)),
    /// read to this granularity (already added by the store): used by clients
    /// given a [`max_clock_difference`](crate::LockClientBuilder::max_clock_difference).
    Wall {
        /// How coarse the stored time is (1 s for an HTTP `Last-Modified`).
        granularity: Duration,
    },
}

/// Requests to the service a call costs. A store on DynamoDB or PostgreSQL
/// makes every call in one request; a store whose conditional writes need the
/// object's version (an ETag) reads it first when it has not seen it, and
/// reads the current record after a rejection its service does not explain.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct RequestCosts {
    /// A `put` on a record this store wrote or read last: a heartbeat, a
    /// release, an acquire right after a read.
    pub write_on_seen: u8,
    /// A `put` on a record this store has not seen: another process's
    /// version, or a key it never read.
    pub write_on_unseen: u8,
    /// Added when a write is rejected: the read of the current record.
    pub rejection: u8,
}

impl Default for RequestCosts {
    fn default() -> Self {
        Self::ONE
    }
}

impl RequestCosts {
    /// Every call is one request.
    pub const ONE: Self = Self {
        write_on_seen: 1,
        write_on_unseen: 1,
        rejection: 0,
    };

    /// A store that writes on a version it must know (an object's ETag),
    /// learns versions from its own writes and reads, and reads the current
    /// record after a rejection.
    pub const VERSIONED_OBJECTS: Self = Self {
        write_on_seen: 1,
        write_on_unseen: 2,
        rejection: 1,
    };

    /// A store that writes on a revision it must know (etcd's
    /// `mod_revision`), learns revisions from its own writes and reads, and
    /// gets the current record back with a rejection: a write on a key it
    /// has not seen is refused once and made again on the revision returned.
    pub const REVISIONED_KEYS: Self = Self {
        write_on_seen: 1,
        write_on_unseen: 2,
        rejection: 0,
    };
}

impl Default for Capabilities {
    fn default() -> Self {
        Self {
            returns_current_on_conflict: true,
            sort_keys: true,
            max_partition_key_bytes: 2048,
            max_sort_key_bytes: 1024,
            max_record_bytes: 400 * 1024,
            keeps_released_records: true,
            fences_after_deletion: FencesAfterDeletion::Restart,
            stores_expiry: true,
            conditional_delete: true,
            requests: RequestCosts::ONE,
            clock: StoreClock::None,
            atomic_writes: None,
            announces_releases: false,
        }
    }
}

impl Capabilities {
    /// Builder-style setter for [`Capabilities::returns_current_on_conflict`].
    pub fn with_returns_current_on_conflict(mut self, value: bool) -> Self {
        self.returns_current_on_conflict = value;
        self
    }
    /// Builder-style setter for [`Capabilities::sort_keys`].
    pub fn with_sort_keys(mut self, value: bool) -> Self {
        self.sort_keys = value;
        self
    }
    /// Builder-style setter for the key length limits.
    pub fn with_key_limits(mut self, partition: usize, sort: usize) -> Self {
        self.max_partition_key_bytes = partition;
        self.max_sort_key_bytes = sort;
        self
    }
    /// Builder-style setter for [`Capabilities::max_record_bytes`].
    pub fn with_max_record_bytes(mut self, value: usize) -> Self {
        self.max_record_bytes = value;
        self
    }
    /// Builder-style setter for [`Capabilities::stores_expiry`].
    pub fn with_stores_expiry(mut self, value: bool) -> Self {
        self.stores_expiry = value;
        self
    }
    /// Builder-style setter for [`Capabilities::keeps_released_records`].
    pub fn with_keeps_released_records(mut self, value: bool) -> Self {
        self.keeps_released_records = value;
        self
    }
    /// Builder-style setter for [`Capabilities::fences_after_deletion`].
    pub fn with_fences_after_deletion(mut self, value: FencesAfterDeletion) -> Self {
        self.fences_after_deletion = value;
        self
    }
    /// Builder-style setter for [`Capabilities::conditional_delete`].
    pub fn with_conditional_delete(mut self, value: bool) -> Self {
        self.conditional_delete = value;
        self
    }
    /// Builder-style setter for [`Capabilities::requests`].
    pub fn with_requests(mut self, value: RequestCosts) -> Self {
        self.requests = value;
        self
    }
    /// Builder-style setter for [`Capabilities::clock`].
    pub fn with_clock(mut self, value: StoreClock) -> Self {
        self.clock = value;
        self
    }
    /// Builder-style setter for [`Capabilities::atomic_writes`].
    pub fn with_atomic_writes(mut self, value: Option<AtomicWrites>) -> Self {
        self.atomic_writes = value;
        self
    }
    /// Builder-style setter for [`Capabilities::announces_releases`].
    pub fn with_announces_releases(mut self, value: bool) -> Self {
        self.announces_releases = value;
        self
    }
}

/// A conditional key-value store the lock protocol runs on.
///
/// # Contract
///
/// Every implementation must give, for each key:
///
/// * **Linearizability**: every call takes effect atomically at one instant between
///   its start and its end, and a later call sees the effect of an earlier one.
/// * **Strongly consistent reads**: [`get`](Self::get) returns the latest applied
///   write (DynamoDB: `ConsistentRead = true`).
/// * **One write per call**: `put` and `delete` are single conditional writes that
///   either apply completely or not at all. Nothing is ever half-written.
/// * **Honest errors**: an error that means the write did not apply is
///   [`StoreErrorKind::Throttled`](crate::StoreErrorKind::Throttled) or
///   [`Unavailable`](crate::StoreErrorKind::Unavailable); a write that may have
///   applied (timeout after sending, lost response) is
///   [`Ambiguous`](crate::StoreErrorKind::Ambiguous). Claiming "not applied" for a
///   write that did apply breaks the protocol.
/// * **No hidden retries of conditional writes**: the client retries and resolves
///   ambiguity by RVN; an SDK retry that re-sends a write can turn a success into a
///   spurious rejection. If a store does retry, it must report a rejection whose
///   current record carries the RVN it wrote as applied.
///
/// The trait is object safe: the client holds an `Arc<dyn ConditionalStore>`.
#[async_trait]
pub trait ConditionalStore: Send + Sync + std::fmt::Debug + 'static {
    /// Strongly consistent read of one key. `Ok(None)` when the key is absent.
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError>;

    /// Write `new` under `key` if `expect` holds, in one atomic step.
    ///
    /// The stored fence is the previous fence + 1 for
    /// [`FenceUpdate::Next`](crate::FenceUpdate::Next) — on no record (never
    /// written, or deleted by any path) or one with fence 0, the key's first
    /// fence as [`Capabilities::fences_after_deletion`] says: above every
    /// fence the key had — and unchanged for
    /// [`FenceUpdate::Keep`](crate::FenceUpdate::Keep) (0 on no record). On success the applied
    /// record is returned; on a failed condition, the current record where the store
    /// can return it.
    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError>;

    /// Delete the record under `key` if `expect` holds, in one atomic step.
    ///
    /// [`Expect::Vacant`] on an absent key is rejected with `current: None` (there is
    /// nothing to delete).
    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError>;

    /// One page of at most `limit` records (order unspecified but stable for one
    /// store), starting at `cursor`. With `partition`, only that partition's records.
    /// Listing need not be a consistent snapshot.
    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// Write every one of `writes` if every one's condition holds, all in one
    /// atomic step (each as [`put`](Self::put) would, fences included), or
    /// none. The keys are distinct, at most
    /// [`AtomicWrites::max_keys`] of them.
    ///
    /// Optional: a store whose [`Capabilities::atomic_writes`] is `None`
    /// (the default) refuses every call as
    /// [`Invalid`](crate::StoreErrorKind::Invalid), and the client never
    /// makes one. Errors mean what they mean for `put`: `Ambiguous` when the
    /// request may have applied (then all of it or none). A store that learns
    /// only from its server's answer that it cannot (a DynamoDB-compatible
    /// service without transactions) refuses that call as `Invalid`, having
    /// written nothing, and reports `atomic_writes: None` from then on; the
    /// client then takes the keys one by one.
    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        let _ = writes;
        Err(StoreError::invalid(
            "this store cannot write several keys in one request (its Capabilities::atomic_writes is None)",
        ))
    }

    /// The releases this store announces to waiters in other processes
    /// (see [`released`](crate::released)): `None` (the default) for a store
    /// that cannot, whose waiters learn of a release by polling. A store
    /// that returns a feed says so in [`Capabilities::announces_releases`].
    fn release_feed(&self) -> Option<crate::ReleaseFeed> {
        None
    }

    /// What this store supports.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: ConditionalStore + ?Sized> ConditionalStore for $ty {
            async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
                (**self).get(key).await
            }
            async fn put(&self, key: &LockKey, expect: Expect, new: NewRecord) -> Result<Outcome, StoreError> {
                (**self).put(key, expect, new).await
            }
            async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
                (**self).delete(key, expect).await
            }
            async fn list(&self, partition: Option<&str>, cursor: Option<Cursor>, limit: usize) -> Result<Page, StoreError> {
                (**self).list(partition, cursor, limit).await
            }
            async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
                (**self).put_many(writes).await
            }
            fn release_feed(&self) -> Option<crate::ReleaseFeed> {
                (**self).release_feed()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
        }
    )*};
}

forward_store!(Arc<S>, Box<S>);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Capabilities, RequestCosts};
    use crate::{DataUpdate, Expect, Fence, FenceUpdate, LockKey, LockRecord, NewRecord, Rvn};

    fn record(released: bool, fence: u64, data: Option<Vec<u8>>) -> LockRecord {
        LockRecord {
            key: LockKey::new("k"),
            owner: "a".into(),
            rvn: Rvn::from_stored("r1"),
            lease: std::time::Duration::from_secs(10),
            released,
            fence: Fence(fence),
            data,
            expires_at: None,
            written: None,
        }
    }

    fn write(fence: FenceUpdate, data: DataUpdate) -> NewRecord {
        NewRecord {
            owner: "b".into(),
            rvn: Rvn::from_stored("r2"),
            lease: std::time::Duration::from_secs(5),
            released: false,
            fence,
            data,
            expires_at: Some(9),
        }
    }

    #[test]
    fn a_condition_holds_as_the_contract_says() {
        let held = record(false, 3, None);
        let released = record(true, 3, None);
        assert!(Expect::Vacant.holds_on(None));
        assert!(Expect::Vacant.holds_on(Some(&released)));
        assert!(!Expect::Vacant.holds_on(Some(&held)));
        let version = Expect::Version(Rvn::from_stored("r1"));
        assert!(version.holds_on(Some(&held)) && version.holds_on(Some(&released)));
        assert!(!version.holds_on(None));
        assert!(!Expect::Version(Rvn::from_stored("other")).holds_on(Some(&held)));
    }

    #[test]
    fn a_write_stores_the_next_or_kept_fence_and_the_updated_data() {
        let key = LockKey::new("k");
        let base = record(true, 3, Some(b"old".to_vec()));
        let next = write(FenceUpdate::Next, DataUpdate::Keep)
            .stored_on(&key, Some(&base))
            .unwrap();
        assert_eq!(
            (next.fence, next.data.as_deref(), next.owner.as_str()),
            (Fence(4), Some(&b"old"[..]), "b")
        );
        assert_eq!(next.expires_at, Some(9));
        // On no record (never written, or deleted): the clock's floor.
        let before = Fence::clock_floor();
        let first = write(FenceUpdate::Next, DataUpdate::Keep)
            .stored_on(&key, None)
            .unwrap();
        assert!(before <= first.fence && first.fence <= Fence::clock_floor());
        assert_eq!(first.data, None);
        let kept = write(FenceUpdate::Keep, DataUpdate::Clear)
            .stored_on(&key, Some(&base))
            .unwrap();
        assert_eq!((kept.fence, kept.data), (Fence(3), None));
        let last = record(false, u64::MAX, None);
        let error = write(FenceUpdate::Next, DataUpdate::Keep)
            .stored_on(&key, Some(&last))
            .unwrap_err();
        assert_eq!(error.kind(), crate::StoreErrorKind::Invalid);
    }

    #[test]
    fn each_setter_sets_its_own_capability() {
        let caps = Capabilities::default()
            .with_returns_current_on_conflict(false)
            .with_sort_keys(false)
            .with_key_limits(3, 4)
            .with_max_record_bytes(5)
            .with_stores_expiry(false)
            .with_keeps_released_records(false)
            .with_conditional_delete(false)
            .with_fences_after_deletion(super::FencesAfterDeletion::ClockFloor)
            .with_requests(RequestCosts::VERSIONED_OBJECTS)
            .with_clock(super::StoreClock::Age)
            .with_atomic_writes(Some(super::AtomicWrites::new(6, 7)))
            .with_announces_releases(true);
        assert_eq!(
            caps,
            Capabilities {
                returns_current_on_conflict: false,
                sort_keys: false,
                max_partition_key_bytes: 3,
                max_sort_key_bytes: 4,
                max_record_bytes: 5,
                keeps_released_records: false,
                fences_after_deletion: super::FencesAfterDeletion::ClockFloor,
                stores_expiry: false,
                conditional_delete: false,
                requests: RequestCosts::VERSIONED_OBJECTS,
                clock: super::StoreClock::Age,
                atomic_writes: Some(super::AtomicWrites::new(6, 7)),
                announces_releases: true,
            }
        );
    }
}
