//! The conformance cases: one `pub async fn` per clause of the store contract
//! (`docs/adapters.md`). Each takes a fresh, empty store and returns
//! `Err` with what went wrong. Cases read the store's
//! [`Capabilities`](lock_core::Capabilities) and check what it claims, skipping
//! what it says it cannot do.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, FencesAfterDeletion,
    KeyedWrite, LockClient, LockKey, LockRecord, ManyOutcome, NewRecord, Outcome, Rvn, StoreClock,
    StoreError, StoreErrorKind, WriteTime,
};

/// Why a conformance case failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaseError {
    /// The store broke the contract.
    #[error("contract violated: {0}")]
    Violation(String),
    /// A store call failed where it should have worked.
    #[error("store call failed: {0}")]
    Store(#[from] StoreError),
    /// A lock client on the store failed where it should have worked (the
    /// cases of what the client builds from the store's calls).
    #[error("lock client failed: {0}")]
    Client(#[from] lock_core::LockError),
}

/// What every case returns.
pub type CaseResult = Result<(), CaseError>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(CaseError::Violation(format!($($fmt)+)));
        }
    };
}

const LEASE: Duration = Duration::from_secs(10);

/// A fresh-RVN write by `owner`.
fn write(owner: &str, fence: FenceUpdate, released: bool) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: LEASE,
        released,
        fence,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

fn acquire(owner: &str) -> NewRecord {
    write(owner, FenceUpdate::Next, false)
}

fn heartbeat(owner: &str) -> NewRecord {
    write(owner, FenceUpdate::Keep, false)
}

fn release(owner: &str) -> NewRecord {
    write(owner, FenceUpdate::Keep, true)
}

fn applied(what: &str, outcome: Outcome) -> Result<LockRecord, CaseError> {
    match outcome {
        Outcome::Applied(record) => Ok(record),
        other => Err(CaseError::Violation(format!(
            "{what}: expected the write to apply, got {other:?}"
        ))),
    }
}

fn rejected(what: &str, outcome: Outcome) -> Result<Option<LockRecord>, CaseError> {
    match outcome {
        Outcome::Rejected { current } => Ok(current),
        other => Err(CaseError::Violation(format!(
            "{what}: expected a rejection, got {other:?}"
        ))),
    }
}

/// The record written by `new` as the store should return it (the expiry too,
/// where the store keeps one and the write set it).
fn check_written(
    what: &str,
    store: &dyn ConditionalStore,
    record: &LockRecord,
    key: &LockKey,
    new: &NewRecord,
    fence: Fence,
) -> CaseResult {
    ensure!(
        record.key == *key,
        "{what}: key {:?}, wrote {key:?}",
        record.key
    );
    ensure!(
        record.owner == new.owner,
        "{what}: owner {:?}",
        record.owner
    );
    ensure!(record.rvn == new.rvn, "{what}: RVN {:?}", record.rvn);
    ensure!(
        record.lease == new.lease,
        "{what}: lease {:?}",
        record.lease
    );
    ensure!(
        record.released == new.released,
        "{what}: released {}",
        record.released
    );
    // Data the write kept is checked by `data_is_kept_replaced_and_cleared`.
    match &new.data {
        DataUpdate::Replace(bytes) => ensure!(
            record.data.as_deref() == Some(bytes.as_slice()),
            "{what}: data {:?}, wrote {bytes:?}",
            record.data
        ),
        DataUpdate::Clear => ensure!(
            record.data.is_none(),
            "{what}: data {:?} after clearing it",
            record.data
        ),
        DataUpdate::Keep => {}
    }
    ensure!(
        record.fence == fence,
        "{what}: fence {}, expected {fence}",
        record.fence
    );
    if store.capabilities().stores_expiry && new.expires_at.is_some() {
        ensure!(
            record.expires_at == new.expires_at,
            "{what}: expiry {:?}, wrote {:?}",
            record.expires_at,
            new.expires_at
        );
    }
    Ok(())
}

/// A rejection carries the current record when the store says it can, and nothing
/// else ever.
fn check_current(
    what: &str,
    store: &dyn ConditionalStore,
    current: &Option<LockRecord>,
    expected: &Option<LockRecord>,
) -> CaseResult {
    if store.capabilities().returns_current_on_conflict {
        ensure!(
            current == expected,
            "{what}: the rejection carried {current:?}, the store holds {expected:?}"
        );
    } else {
        ensure!(
            current.is_none() || current == expected,
            "{what}: the rejection carried {current:?}, the store holds {expected:?}"
        );
    }
    Ok(())
}

/// `get` of a key never written is `Ok(None)`, with and without a sort key.
pub async fn get_of_a_missing_key(store: Arc<dyn ConditionalStore>) -> CaseResult {
    ensure!(
        store.get(&LockKey::new("missing")).await?.is_none(),
        "get of a missing key returned a record"
    );
    if store.capabilities().sort_keys {
        ensure!(
            store
                .get(&LockKey::with_sort("missing", "s"))
                .await?
                .is_none(),
            "get of a missing sort key returned a record"
        );
    }
    Ok(())
}

/// The fence of a key's record created after a record with fence `deleted`
/// was deleted: higher, unless the store says its fences restart (then 1).
fn check_fence_after_deletion(
    what: &str,
    store: &dyn ConditionalStore,
    deleted: Fence,
    next: Fence,
) -> CaseResult {
    if store.capabilities().fences_after_deletion == FencesAfterDeletion::Restart {
        ensure!(
            next == Fence(1),
            "{what}: a store whose fences restart gave fence {next}, not 1"
        );
    } else {
        ensure!(
            next > deleted,
            "{what}: fence {next} after a record with fence {deleted} was deleted: a holder paused across the deletion still carries {deleted}, and a resource would admit its stale writes"
        );
    }
    Ok(())
}

/// A key's first fence, given by a write sent at or after `sent`: 1 on a
/// store that remembers deleted records' fences or restarts them, and
/// between the wall clock's floors at `sent` and now on a store that takes
/// them from the clock ([`FencesAfterDeletion`]).
fn check_first_fence(
    what: &str,
    store: &dyn ConditionalStore,
    sent: SystemTime,
    fence: Fence,
) -> CaseResult {
    match store.capabilities().fences_after_deletion {
        FencesAfterDeletion::ClockFloor => {
            let (low, high) = (Fence::floor_at(sent), Fence::clock_floor());
            ensure!(
                low <= fence && fence <= high,
                "{what}: the first fence of a key was {fence}, not the clock's floor between {low} and {high}"
            );
        }
        _ => ensure!(
            fence == Fence(1),
            "{what}: the first fence of a key was {fence}, not 1"
        ),
    }
    Ok(())
}

/// `put` vacant on a new key applies with its first fence (see
/// [`FencesAfterDeletion`]) and stores every field; `get`
/// then returns the same record.
pub async fn put_vacant_on_a_new_key(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("new-key");
    let new = NewRecord {
        data: DataUpdate::Replace(b"payload \x00\xff".to_vec()),
        expires_at: Some(4_000_000_000),
        ..acquire("alice")
    };
    let sent = SystemTime::now();
    let record = applied(
        "put vacant on a new key",
        store.put(&key, Expect::Vacant, new.clone()).await?,
    )?;
    check_first_fence("put vacant on a new key", &*store, sent, record.fence)?;
    check_written(
        "put vacant on a new key",
        &*store,
        &record,
        &key,
        &new,
        record.fence,
    )?;
    let read = store.get(&key).await?;
    ensure!(
        read.as_ref() == Some(&record),
        "get after put returned {read:?}, put returned {record:?}"
    );
    Ok(())
}

/// `put` vacant on a released key applies with the previous fence + 1; so does a
/// takeover by version; fences are per key.
pub async fn put_vacant_on_a_released_key(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("released-key");
    let first = applied(
        "first acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    let released = applied(
        "release",
        store
            .put(&key, Expect::Version(first.rvn.clone()), release("alice"))
            .await?,
    )?;
    ensure!(released.is_vacant(), "a released record is not vacant");
    let new = acquire("bob");
    let second = applied(
        "acquire of the released key",
        store.put(&key, Expect::Vacant, new.clone()).await?,
    )?;
    // A store that deletes on release creates the record afresh, above the
    // fence it had unless the store says its fences restart.
    let expected = if store.capabilities().keeps_released_records {
        Fence(first.fence.0 + 1)
    } else if store.capabilities().fences_after_deletion == FencesAfterDeletion::Restart {
        Fence(1)
    } else {
        ensure!(
            second.fence > first.fence,
            "the record deleted on release had fence {}, the key's next fence was {}",
            first.fence,
            second.fence
        );
        second.fence
    };
    check_written(
        "acquire of the released key",
        &*store,
        &second,
        &key,
        &new,
        expected,
    )?;
    let takeover = acquire("carol");
    let third = applied(
        "takeover by version",
        store
            .put(&key, Expect::Version(second.rvn.clone()), takeover.clone())
            .await?,
    )?;
    check_written(
        "takeover by version",
        &*store,
        &third,
        &key,
        &takeover,
        Fence(second.fence.0 + 1),
    )?;
    // Another key starts its own fence history.
    let sent = SystemTime::now();
    let other = applied(
        "acquire of another key",
        store
            .put(&LockKey::new("other-key"), Expect::Vacant, acquire("dave"))
            .await?,
    )?;
    check_first_fence("acquire of another key", &*store, sent, other.fence)?;
    Ok(())
}

/// A held record is not vacant: `put` vacant is rejected, carries the holder (where
/// the store can), and changes nothing.
pub async fn put_vacant_on_a_held_key_is_rejected(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("held-key");
    let held = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    let current = rejected(
        "second vacant put",
        store.put(&key, Expect::Vacant, acquire("bob")).await?,
    )?;
    check_current(
        "second vacant put",
        store.as_ref(),
        &current,
        &Some(held.clone()),
    )?;
    let after = store.get(&key).await?;
    ensure!(
        after == Some(held),
        "a rejected put changed the record: {after:?}"
    );
    Ok(())
}

/// `put` under a version condition applies only when the stored RVN matches:
/// absent keys and other RVNs are rejected, the old RVN stops matching after a
/// write, and a released record still matches its own RVN.
pub async fn put_version_match_and_mismatch(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("versioned-key");
    let current = rejected(
        "version put on an absent key",
        store
            .put(&key, Expect::Version(Rvn::fresh()), acquire("alice"))
            .await?,
    )?;
    ensure!(
        current.is_none(),
        "a rejection on an absent key carried {current:?}"
    );
    ensure!(
        store.get(&key).await?.is_none(),
        "a rejected version put on an absent key wrote a record"
    );

    let first = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    let current = rejected(
        "version mismatch",
        store
            .put(&key, Expect::Version(Rvn::fresh()), heartbeat("alice"))
            .await?,
    )?;
    check_current(
        "version mismatch",
        store.as_ref(),
        &current,
        &Some(first.clone()),
    )?;
    ensure!(
        store.get(&key).await? == Some(first.clone()),
        "a rejected version put changed the record"
    );

    let new = heartbeat("alice");
    let second = applied(
        "version match",
        store
            .put(&key, Expect::Version(first.rvn.clone()), new.clone())
            .await?,
    )?;
    check_written("version match", &*store, &second, &key, &new, first.fence)?;
    let current = rejected(
        "the replaced RVN",
        store
            .put(&key, Expect::Version(first.rvn.clone()), heartbeat("alice"))
            .await?,
    )?;
    check_current(
        "the replaced RVN",
        store.as_ref(),
        &current,
        &Some(second.clone()),
    )?;

    let released = applied(
        "release",
        store
            .put(&key, Expect::Version(second.rvn.clone()), release("alice"))
            .await?,
    )?;
    if !store.capabilities().keeps_released_records {
        return Ok(());
    }
    applied(
        "version put on a released record",
        store
            .put(&key, Expect::Version(released.rvn), acquire("alice"))
            .await?,
    )?;
    Ok(())
}

/// Heartbeats and release keep the fence; each write replaces the data it carries
/// and the expiry.
pub async fn fence_kept_on_heartbeat_and_release(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("kept-key");
    let mut record = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    let fence = record.fence;
    for i in 0..3u8 {
        let new = NewRecord {
            data: DataUpdate::Replace(vec![i; 16]),
            expires_at: Some(4_000_000_000 + u64::from(i)),
            ..heartbeat("alice")
        };
        record = applied(
            "heartbeat",
            store
                .put(&key, Expect::Version(record.rvn.clone()), new.clone())
                .await?,
        )?;
        check_written("heartbeat", &*store, &record, &key, &new, fence)?;
    }
    let new = release("alice");
    let released = applied(
        "release",
        store
            .put(&key, Expect::Version(record.rvn.clone()), new.clone())
            .await?,
    )?;
    check_written("release", &*store, &released, &key, &new, fence)?;
    let after = store.get(&key).await?;
    if store.capabilities().keeps_released_records {
        ensure!(
            after == Some(released),
            "get after release returned {after:?}, not the released record"
        );
    } else {
        ensure!(
            after.is_none(),
            "the store says it does not keep released records, but get after release returned {after:?}"
        );
    }
    Ok(())
}

/// A write's data update: `Keep` leaves the stored bytes (none on a record it
/// creates), `Replace` stores new ones, `Clear` removes them; a release that
/// keeps the data leaves it for the next acquirer when the store keeps released
/// records; a rejected write changes nothing.
pub async fn data_is_kept_replaced_and_cleared(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("data-key");
    let data = |record: &LockRecord| record.data.clone();
    let created = applied(
        "acquire keeping nothing",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    ensure!(
        data(&created).is_none(),
        "a new record kept data from nowhere: {:?}",
        created.data
    );
    let set = NewRecord {
        data: DataUpdate::Replace(b"checkpoint 1".to_vec()),
        ..heartbeat("alice")
    };
    let with = applied(
        "replace",
        store.put(&key, Expect::Version(created.rvn), set).await?,
    )?;
    ensure!(
        with.data.as_deref() == Some(&b"checkpoint 1"[..]),
        "replace: {:?}",
        with.data
    );
    let kept = applied(
        "heartbeat keeping the data",
        store
            .put(&key, Expect::Version(with.rvn.clone()), heartbeat("alice"))
            .await?,
    )?;
    ensure!(
        kept.data == with.data,
        "a write that keeps the data changed it: {:?}",
        kept.data
    );
    let read = store.get(&key).await?;
    ensure!(
        read.as_ref().and_then(|r| r.data.clone()) == with.data,
        "get after a keeping write: {read:?}"
    );
    // A rejected write changes nothing, whatever its data.
    let refused = NewRecord {
        data: DataUpdate::Clear,
        ..heartbeat("bob")
    };
    rejected(
        "stale clear",
        store
            .put(&key, Expect::Version(with.rvn.clone()), refused)
            .await?,
    )?;
    let read = store.get(&key).await?;
    ensure!(
        read.as_ref().and_then(|r| r.data.clone()) == with.data,
        "a rejected write changed the data: {read:?}"
    );
    // Released with the data kept: the next acquirer finds it (when the store
    // keeps released records), then clears it.
    let released = applied(
        "release keeping the data",
        store
            .put(&key, Expect::Version(kept.rvn), release("alice"))
            .await?,
    )?;
    if !store.capabilities().keeps_released_records {
        return Ok(());
    }
    ensure!(released.data == with.data, "release: {:?}", released.data);
    let next = applied(
        "acquire keeping the data",
        store.put(&key, Expect::Vacant, acquire("bob")).await?,
    )?;
    ensure!(
        next.data == with.data,
        "the next acquirer did not find the data: {:?}",
        next.data
    );
    let clear = NewRecord {
        data: DataUpdate::Clear,
        ..heartbeat("bob")
    };
    let cleared = applied(
        "clear",
        store.put(&key, Expect::Version(next.rvn), clear).await?,
    )?;
    ensure!(cleared.data.is_none(), "clear: {:?}", cleared.data);
    let read = store.get(&key).await?;
    ensure!(
        read.as_ref().is_some_and(|r| r.data.is_none()),
        "get after clear: {read:?}"
    );
    Ok(())
}

/// `delete` under both expectations: vacant deletes only absent-or-released
/// records (absent: rejected, nothing to delete), version only a matching RVN; an
/// applied delete returns the deleted record.
pub async fn delete_with_both_expectations(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let key = LockKey::new("deleted-key");
    if !store.capabilities().conditional_delete {
        return delete_is_refused(store.as_ref(), &key).await;
    }
    let current = rejected(
        "vacant delete of an absent key",
        store.delete(&key, Expect::Vacant).await?,
    )?;
    ensure!(
        current.is_none(),
        "absent key: rejection carried {current:?}"
    );
    let current = rejected(
        "version delete of an absent key",
        store.delete(&key, Expect::Version(Rvn::fresh())).await?,
    )?;
    ensure!(
        current.is_none(),
        "absent key: rejection carried {current:?}"
    );

    let held = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    let current = rejected(
        "vacant delete of a held record",
        store.delete(&key, Expect::Vacant).await?,
    )?;
    check_current(
        "vacant delete of a held record",
        store.as_ref(),
        &current,
        &Some(held.clone()),
    )?;
    let current = rejected(
        "version delete with another RVN",
        store.delete(&key, Expect::Version(Rvn::fresh())).await?,
    )?;
    check_current(
        "version delete with another RVN",
        store.as_ref(),
        &current,
        &Some(held.clone()),
    )?;
    ensure!(
        store.get(&key).await? == Some(held.clone()),
        "a rejected delete removed the record"
    );
    let deleted = applied(
        "version delete",
        store
            .delete(&key, Expect::Version(held.rvn.clone()))
            .await?,
    )?;
    ensure!(
        deleted == held,
        "delete returned {deleted:?}, the record was {held:?}"
    );
    ensure!(
        store.get(&key).await?.is_none(),
        "the record is still there"
    );

    let held = applied(
        "acquire again",
        store.put(&key, Expect::Vacant, acquire("bob")).await?,
    )?;
    check_fence_after_deletion("acquire after a delete", &*store, deleted.fence, held.fence)?;
    let released = applied(
        "release",
        store
            .put(&key, Expect::Version(held.rvn), release("bob"))
            .await?,
    )?;
    if !store.capabilities().keeps_released_records {
        return Ok(());
    }
    let deleted = applied(
        "vacant delete of a released record",
        store.delete(&key, Expect::Vacant).await?,
    )?;
    ensure!(deleted == released, "delete returned {deleted:?}");
    ensure!(
        store.get(&key).await?.is_none(),
        "the released record is still there"
    );
    Ok(())
}

/// A key's fences keep rising across a deletion of its record: after
/// several acquisitions (takeovers by version), a release and a delete,
/// the key's next record has a fence above every fence it had (a holder
/// paused across the deletion carries the last of them), unless the store
/// says its fences restart ([`FencesAfterDeletion::Restart`]). Deletions
/// that do not go through the store (a time to live, a lifecycle rule, a
/// `DELETE` by hand) are each store's own tests'.
pub async fn fences_rise_across_a_deletion(store: Arc<dyn ConditionalStore>) -> CaseResult {
    if !store.capabilities().conditional_delete {
        return Ok(());
    }
    let key = LockKey::new("deleted-and-created-again");
    let mut held = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    for owner in ["bob", "carol", "dave"] {
        let next = applied(
            "takeover by version",
            store
                .put(&key, Expect::Version(held.rvn.clone()), acquire(owner))
                .await?,
        )?;
        ensure!(
            next.fence > held.fence,
            "takeover: fence {} after {}",
            next.fence,
            held.fence
        );
        held = next;
    }
    let highest = held.fence;
    let released = applied(
        "release",
        store
            .put(&key, Expect::Version(held.rvn.clone()), release("dave"))
            .await?,
    )?;
    if store.get(&key).await?.is_some() {
        applied(
            "delete of the released record",
            store
                .delete(&key, Expect::Version(released.rvn.clone()))
                .await?,
        )?;
    }
    ensure!(
        store.get(&key).await?.is_none(),
        "the record is still there after its delete"
    );
    let again = applied(
        "acquire of the deleted key",
        store.put(&key, Expect::Vacant, acquire("erin")).await?,
    )?;
    check_fence_after_deletion("acquire of the deleted key", &*store, highest, again.fence)?;
    // A record with no fence (a write that keeps the fence, on no record)
    // where a deleted one was: the acquisition on it still goes on above.
    let deleted = applied(
        "delete of the new record",
        store
            .delete(&key, Expect::Version(again.rvn.clone()))
            .await?,
    )?;
    let unfenced = applied(
        "a write that keeps the fence on the deleted key",
        store
            .put(
                &key,
                Expect::Vacant,
                write("grace", FenceUpdate::Keep, false),
            )
            .await?,
    )?;
    let again = applied(
        "acquire of the unfenced record",
        store
            .put(
                &key,
                Expect::Version(unfenced.rvn.clone()),
                acquire("heidi"),
            )
            .await?,
    )?;
    check_fence_after_deletion(
        "acquire of a record with no fence where a deleted one was",
        &*store,
        deleted.fence,
        again.fence,
    )?;
    // And a takeover of the new record goes on from it.
    let next = applied(
        "takeover of the new record",
        store
            .put(&key, Expect::Version(again.rvn.clone()), acquire("frank"))
            .await?,
    )?;
    ensure!(
        next.fence == Fence(again.fence.0 + 1),
        "takeover of the new record: fence {} after {}",
        next.fence,
        again.fence
    );
    Ok(())
}

/// A store without conditional deletes refuses every delete as `Invalid`, and
/// the record stays as it was.
async fn delete_is_refused(store: &dyn ConditionalStore, key: &LockKey) -> CaseResult {
    let held = applied(
        "acquire",
        store.put(key, Expect::Vacant, acquire("alice")).await?,
    )?;
    for expect in [Expect::Vacant, Expect::Version(held.rvn.clone())] {
        expect_invalid(
            "delete on a store without conditional deletes",
            store.delete(key, expect).await,
        )?;
    }
    ensure!(
        store.get(key).await? == Some(held),
        "a refused delete changed the record"
    );
    Ok(())
}

/// Listing pages through every record exactly once with a page limit smaller than
/// the number of records, and a partition filter returns that partition only.
pub async fn list_pages_through_every_record(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let sort = store.capabilities().sort_keys;
    let mut written = BTreeSet::new();
    for i in 0..7 {
        let key = if sort && i % 2 == 0 {
            LockKey::with_sort("list-a", format!("s{i}"))
        } else {
            LockKey::new(format!("list-{i}"))
        };
        applied("fill", store.put(&key, Expect::Vacant, acquire("o")).await?)?;
        written.insert(key);
    }
    let listed = list_all(store.as_ref(), None, 3).await?;
    ensure!(
        listed.pages > 1,
        "7 records with a limit of 3 came in {} page(s)",
        listed.pages
    );
    ensure!(
        listed.keys.len() == written.len(),
        "listed {} records ({:?}), wrote {}",
        listed.keys.len(),
        listed.keys,
        written.len()
    );
    let unique: BTreeSet<_> = listed.keys.iter().cloned().collect();
    ensure!(
        unique == written,
        "listed {unique:?}, wrote {written:?} (duplicates or gaps)"
    );
    if sort {
        let listed = list_all(store.as_ref(), Some("list-a"), 2).await?;
        let expected: BTreeSet<_> = written
            .iter()
            .filter(|k| k.partition() == "list-a")
            .cloned()
            .collect();
        let got: BTreeSet<_> = listed.keys.iter().cloned().collect();
        ensure!(
            got == expected && listed.keys.len() == expected.len(),
            "partition filter listed {:?}, expected {expected:?}",
            listed.keys
        );
        ensure!(
            listed.pages > 1,
            "4 records with a limit of 2 came in one page"
        );
    }
    Ok(())
}

struct Listed {
    keys: Vec<LockKey>,
    pages: usize,
}

async fn list_all(
    store: &dyn ConditionalStore,
    partition: Option<&str>,
    limit: usize,
) -> Result<Listed, CaseError> {
    let mut keys = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list(partition, cursor, limit).await?;
        pages += 1;
        ensure!(
            page.records.len() <= limit,
            "a page of limit {limit} held {} records",
            page.records.len()
        );
        keys.extend(page.records.into_iter().map(|r| r.key));
        ensure!(pages <= 100, "listing did not end after 100 pages");
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(Listed { keys, pages }),
        }
    }
}

/// Many tasks race compare-and-set on one key, round after round: each round
/// exactly one wins, and every loser is rejected.
pub async fn compare_and_set_race(store: Arc<dyn ConditionalStore>) -> CaseResult {
    const TASKS: usize = 12;
    const ROUNDS: usize = 4;
    let key = LockKey::new("race-key");
    let mut expect = Expect::Vacant;
    let mut fence = Fence(0);
    for round in 0..ROUNDS {
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..TASKS {
            let (store, key, expect) = (store.clone(), key.clone(), expect.clone());
            tasks.spawn(async move {
                let new = acquire(&format!("racer-{round}-{task}"));
                (store.put(&key, expect, new).await, task)
            });
        }
        let mut winners = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (outcome, _) = joined.map_err(|e| CaseError::Violation(format!("task: {e}")))?;
            if let Outcome::Applied(record) = outcome? {
                winners.push(record);
            }
        }
        ensure!(
            winners.len() == 1,
            "round {round}: {} of {TASKS} compare-and-set writes applied",
            winners.len()
        );
        let winner = winners.remove(0);
        ensure!(
            winner.fence > fence,
            "round {round}: fence {} after {fence}",
            winner.fence
        );
        ensure!(
            store.get(&key).await? == Some(winner.clone()),
            "round {round}: the store does not hold the winner"
        );
        fence = winner.fence;
        expect = Expect::Version(winner.rvn);
    }
    Ok(())
}

fn expect_invalid(what: &str, result: Result<Outcome, StoreError>) -> CaseResult {
    match result {
        Err(e) if e.kind() == StoreErrorKind::Invalid => Ok(()),
        other => Err(CaseError::Violation(format!(
            "{what}: expected an Invalid error, got {other:?}"
        ))),
    }
}

/// Keys longer than the store's limits, an empty key, a sort key on a store
/// without sort keys and data over the record limit are refused as `Invalid`, and
/// nothing is written.
pub async fn oversized_input_is_invalid_and_writes_nothing(
    store: Arc<dyn ConditionalStore>,
) -> CaseResult {
    let caps = store.capabilities();
    let long_partition = LockKey::new("p".repeat(caps.max_partition_key_bytes + 1));
    expect_invalid(
        "partition key over the limit",
        store
            .put(&long_partition, Expect::Vacant, acquire("o"))
            .await,
    )?;
    expect_invalid(
        "empty partition key",
        store
            .put(&LockKey::new(""), Expect::Vacant, acquire("o"))
            .await,
    )?;
    let sorted = if caps.sort_keys {
        LockKey::with_sort("p", "s".repeat(caps.max_sort_key_bytes + 1))
    } else {
        LockKey::with_sort("p", "s")
    };
    expect_invalid(
        "sort key over the limit (or not supported)",
        store.put(&sorted, Expect::Vacant, acquire("o")).await,
    )?;
    let key = LockKey::new("big-record");
    let big = NewRecord {
        data: DataUpdate::Replace(vec![7; caps.max_record_bytes + 1]),
        ..acquire("o")
    };
    expect_invalid(
        "data over the record limit",
        store.put(&key, Expect::Vacant, big.clone()).await,
    )?;
    // An oversized heartbeat of a held record must not change it either.
    let held = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("o")).await?,
    )?;
    let big_heartbeat = NewRecord {
        fence: FenceUpdate::Keep,
        ..big
    };
    expect_invalid(
        "heartbeat with data over the record limit",
        store
            .put(&key, Expect::Version(held.rvn.clone()), big_heartbeat)
            .await,
    )?;
    ensure!(
        store.get(&key).await? == Some(held),
        "a refused write changed the record"
    );
    let page = store.list(None, None, 100).await?;
    ensure!(
        page.records.len() == 1,
        "refused writes left records behind: {:?}",
        page.records.iter().map(|r| &r.key).collect::<Vec<_>>()
    );
    Ok(())
}

/// Locks under one partition with different sort keys are independent records.
pub async fn sort_keys_are_independent_locks(store: Arc<dyn ConditionalStore>) -> CaseResult {
    if !store.capabilities().sort_keys {
        return Ok(());
    }
    let a = LockKey::with_sort("jobs", "a");
    let b = LockKey::with_sort("jobs", "b");
    let whole = LockKey::new("jobs");
    for key in [&a, &b, &whole] {
        let sent = SystemTime::now();
        let record = applied(
            "acquire",
            store.put(key, Expect::Vacant, acquire("o")).await?,
        )?;
        ensure!(record.key == *key, "{key:?}: {record:?}");
        check_first_fence(&format!("acquire of {key:?}"), &*store, sent, record.fence)?;
    }
    let a_now = store
        .get(&a)
        .await?
        .ok_or_else(|| CaseError::Violation("jobs/a vanished".into()))?;
    applied(
        "release a",
        store
            .put(&a, Expect::Version(a_now.rvn), release("o"))
            .await?,
    )?;
    let b_now = store.get(&b).await?;
    ensure!(
        b_now.is_some_and(|r| !r.released),
        "releasing jobs/a touched jobs/b"
    );
    Ok(())
}

/// What a store says about when a record was written
/// ([`Capabilities::clock`](lock_core::Capabilities::clock)) is never later
/// than the write was sent, on reads, listings and rejections alike, since a
/// waiter takes over sooner by it:
/// * [`StoreClock::Age`]: the age a read reports is at most the time since the
///   write was sent (this host's clock, 1 % for the rates of two clocks), and
///   grows with time;
/// * [`StoreClock::Wall`]: the stamp is no earlier than this host's wall clock
///   read before the write was sent (the store's own clock, or the service's on
///   this machine, plus its granularity).
pub async fn write_times_are_never_later_than_the_write(
    store: Arc<dyn ConditionalStore>,
) -> CaseResult {
    let clock = store.capabilities().clock;
    if clock == StoreClock::None {
        return Ok(());
    }
    let key = LockKey::new("written");
    let sent = std::time::Instant::now();
    let sent_wall = std::time::SystemTime::now();
    applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("o")).await?,
    )?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let read = store
        .get(&key)
        .await?
        .ok_or_else(|| CaseError::Violation("the record vanished".into()))?;
    let read_elapsed = sent.elapsed();
    let rejection = rejected(
        "acquire of a held key",
        store.put(&key, Expect::Vacant, acquire("p")).await?,
    )?;
    let rejection_elapsed = sent.elapsed();
    // A fresh store: its one record is on the first page.
    let listed = store
        .list(None, None, 10)
        .await?
        .records
        .into_iter()
        .find(|record| record.key == key)
        .ok_or_else(|| CaseError::Violation("the listing lost the record".into()))?;
    let listed_elapsed = sent.elapsed();
    let mut seen = vec![("get", read.written, read_elapsed)];
    if let Some(current) = rejection {
        seen.push(("rejection", current.written, rejection_elapsed));
    }
    seen.push(("list", listed.written, listed_elapsed));
    for (what, written, elapsed) in seen {
        match (clock, written) {
            (StoreClock::Age, Some(WriteTime::Ago(age))) => {
                ensure!(
                    age <= elapsed.mul_f64(1.01),
                    "{what}: age {age:?}, but the write was sent only {elapsed:?} before"
                );
                ensure!(
                    age >= Duration::from_millis(150),
                    "{what}: age {age:?} more than 200 ms after the write"
                );
            }
            (StoreClock::Wall { granularity }, Some(WriteTime::At(at))) => {
                ensure!(
                    at >= sent_wall,
                    "{what}: stamped {at:?}, before the write was sent at {sent_wall:?}"
                );
                let latest = std::time::SystemTime::now() + granularity + Duration::from_secs(1);
                ensure!(
                    at <= latest,
                    "{what}: stamped {at:?}, after the read (now {latest:?} with room)"
                );
            }
            (clock, written) => ensure!(
                false,
                "{what}: a store whose clock is {clock:?} returned write time {written:?}"
            ),
        }
    }
    Ok(())
}

/// A lock client on `store` for the cases that check what the client builds
/// from the store's calls.
fn client_on(store: &Arc<dyn ConditionalStore>, owner: &str) -> Result<LockClient, CaseError> {
    Ok(LockClient::builder_shared(store.clone())
        .owner(owner)
        .lease(LEASE)
        .build()?)
}

/// A reader-writer lock on the store ([`LockClient::rw_lock`]): readers of
/// two clients share it, a writer is refused while they read and new readers
/// while it writes, readers carry the writer's fence (and, where released
/// records are kept, its data), and everything ends released. The lock's
/// records share a partition (or, without sort keys, a name prefix) with a
/// header the store must list and read back as written. A store that deletes
/// released records refuses it before anything is written.
pub async fn reader_writer_lock_readers_share_and_writers_are_alone(
    store: Arc<dyn ConditionalStore>,
) -> CaseResult {
    let (a, b) = (client_on(&store, "a")?, client_on(&store, "b")?);
    if !store.capabilities().keeps_released_records {
        // The writer fences readers carry would restart: refused before
        // anything is written.
        let refused = a.rw_lock("rw", 4);
        ensure!(
            matches!(refused, Err(lock_core::LockError::InvalidInput { .. })),
            "a store that deletes released records must refuse reader-writer locks, not {refused:?}"
        );
        ensure!(
            store.list(None, None, 10).await?.records.is_empty(),
            "written by a refused reader-writer lock"
        );
        return Ok(());
    }
    let (lock_a, lock_b) = (a.rw_lock("rw", 4)?, b.rw_lock("rw", 4)?);
    let once = AcquireOptions::new;
    let read_a = lock_a.try_read(once()).await?;
    let read_b = lock_b.try_read(once()).await?;
    let (Some(read_a), Some(read_b)) = (read_a, read_b) else {
        return Err(CaseError::Violation("a free lock refused a reader".into()));
    };
    ensure!(
        read_a.slot_index() != read_b.slot_index(),
        "two readers in one slot"
    );
    ensure!(
        lock_b.try_write(once()).await?.is_none(),
        "a writer got in beside two readers"
    );
    read_a.release().await?;
    read_b.release().await?;
    let write = lock_b
        .try_write(once())
        .await?
        .ok_or_else(|| CaseError::Violation("a free lock refused a writer".into()))?;
    let fence = write.fence();
    ensure!(
        lock_a.try_read(once()).await?.is_none(),
        "a reader got in beside a writer"
    );
    let keeps = store.capabilities().keeps_released_records;
    if keeps {
        write.release_with_data("v1").await?;
    } else {
        write.release().await?;
    }
    let read = lock_a
        .try_read(once())
        .await?
        .ok_or_else(|| CaseError::Violation("a reader was refused after the writer left".into()))?;
    if keeps {
        ensure!(
            read.fence() == fence && read.writer_data().as_deref() == Some(&b"v1"[..]),
            "the reader was admitted with fence {} and data {:?}, the writer left fence {fence} and v1",
            read.fence(),
            read.writer_data()
        );
    }
    read.release().await?;
    a.shutdown().await?;
    b.shutdown().await?;
    for record in store.list(None, None, 1_000).await?.records {
        let header = record.key.to_string().ends_with("#readers");
        ensure!(header || record.released, "left held: {record:?}");
    }
    Ok(())
}

/// Several locks all or nothing on the store ([`LockClient::acquire_all`]):
/// a set with one key held elsewhere fails and leaves none of its other keys
/// held; once that key is free, the set is taken whole, each key with its own
/// fence, and released whole.
pub async fn all_or_nothing_leaves_nothing_held(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let (a, b) = (client_on(&store, "a")?, client_on(&store, "b")?);
    let blocker = a.acquire("set-2", AcquireOptions::new()).await?;
    let keys = ["set-3", "set-1", "set-2"];
    let failed = b
        .acquire_all(keys, AcquireOptions::new().wait(Duration::ZERO))
        .await;
    ensure!(failed.is_err(), "a set with a held key was taken");
    for key in ["set-1", "set-3"] {
        let record = store.get(&LockKey::new(key)).await?;
        ensure!(
            record
                .as_ref()
                .is_none_or(|record| record.released || record.owner != "b"),
            "{key} left held after the set failed: {record:?}"
        );
    }
    blocker.release().await?;
    let group = b
        .acquire_all(keys, AcquireOptions::new().wait(Duration::from_secs(5)))
        .await?;
    let held: Vec<String> = group.keys().map(|key| key.to_string()).collect();
    ensure!(held == ["set-1", "set-2", "set-3"], "held {held:?}");
    ensure!(group.is_safe(), "a fresh group is not safe");
    group.release().await?;
    for key in keys {
        let record = store.get(&LockKey::new(key)).await?;
        ensure!(
            record.as_ref().is_none_or(|record| record.released),
            "{key} left held after the set was released: {record:?}"
        );
    }
    a.shutdown().await?;
    b.shutdown().await?;
    Ok(())
}

/// None of `keys` has a record: a refused `put_many` wrote nothing.
async fn nothing_written(store: &Arc<dyn ConditionalStore>, keys: &[LockKey]) -> CaseResult {
    for key in keys {
        ensure!(
            store.get(key).await?.is_none(),
            "{key} written by a refused put_many"
        );
    }
    Ok(())
}

/// Several writes in one request ([`ConditionalStore::put_many`]), all or
/// nothing, on a store whose [`Capabilities::atomic_writes`](lock_core::Capabilities::atomic_writes)
/// says it can; refused as `Invalid` with nothing written on one that says
/// it cannot:
/// * vacant writes on free keys apply together, each with its fence, in the
///   order of the request;
/// * one failed condition (the middle write's) writes nothing, and says which
///   (and its current record, where the store returns one);
/// * writes on versions with the next fence, and releases, apply as `put`s;
/// * a key twice, or more keys than the store takes: `Invalid`, nothing
///   written.
pub async fn put_many_is_all_or_nothing(store: Arc<dyn ConditionalStore>) -> CaseResult {
    let caps = store.capabilities();
    let keys: Vec<LockKey> = ["many-a", "many-b", "many-c"]
        .iter()
        .map(|key| {
            if caps.sort_keys {
                LockKey::with_sort("many", *key)
            } else {
                LockKey::new(*key)
            }
        })
        .collect();
    let vacant = |owner: &str| -> Vec<KeyedWrite> {
        keys.iter()
            .map(|key| KeyedWrite {
                key: key.clone(),
                expect: Expect::Vacant,
                new: acquire(owner),
            })
            .collect()
    };
    let Some(limits) = caps.atomic_writes else {
        let refused = store.put_many(vacant("o")).await;
        ensure!(
            matches!(&refused, Err(error) if error.kind() == StoreErrorKind::Invalid),
            "a store without atomic writes must refuse put_many as Invalid, not {refused:?}"
        );
        return nothing_written(&store, &keys).await;
    };
    ensure!(
        limits.max_keys >= 2,
        "atomic writes of fewer than 2 keys: {limits:?}"
    );
    // Every key free: all applied, in order, each with its first fence.
    let sent = SystemTime::now();
    let writes = vacant("o");
    let rvns: Vec<Rvn> = writes.iter().map(|write| write.new.rvn.clone()).collect();
    let records = match store.put_many(writes).await {
        Ok(ManyOutcome::Applied(records)) => records,
        // A store may learn at its first put_many that its server cannot (a
        // DynamoDB-compatible one without transactions): it then refuses as
        // Invalid, writing nothing, and says so from then on.
        Err(error)
            if error.kind() == StoreErrorKind::Invalid
                && store.capabilities().atomic_writes.is_none() =>
        {
            return nothing_written(&store, &keys).await;
        }
        other => return Err(CaseError::Violation(format!("free keys: {other:?}"))),
    };
    ensure!(records.len() == 3, "{records:?}");
    for ((record, key), rvn) in records.iter().zip(&keys).zip(&rvns) {
        ensure!(
            record.key == *key && record.rvn == *rvn && !record.released,
            "applied in order: {record:?}"
        );
        check_first_fence("put_many on free keys", &*store, sent, record.fence)?;
        let stored = store.get(key).await?;
        ensure!(
            stored.as_ref().is_some_and(|s| s.rvn == *rvn),
            "{key}: stored {stored:?}"
        );
    }
    // Release the first and last; the middle one stays held: a request for
    // all three is refused at index 1 and writes nothing.
    for (key, rvn) in [(&keys[0], &rvns[0]), (&keys[2], &rvns[2])] {
        applied(
            "release",
            store
                .put(key, Expect::Version(rvn.clone()), release("o"))
                .await?,
        )?;
    }
    let before: Vec<Option<LockRecord>> = {
        let mut before = Vec::new();
        for key in &keys {
            before.push(store.get(key).await?);
        }
        before
    };
    match store.put_many(vacant("p")).await? {
        ManyOutcome::Rejected { index: 1, current } => {
            if let Some(current) = current {
                ensure!(
                    current.rvn == rvns[1],
                    "the current record of many-b: {current:?}"
                );
            }
        }
        other => return Err(CaseError::Violation(format!("one key held: {other:?}"))),
    }
    for (key, was) in keys.iter().zip(&before) {
        let now = store.get(key).await?;
        ensure!(
            now.as_ref().map(|r| &r.rvn) == was.as_ref().map(|r| &r.rvn),
            "{key} changed by a refused put_many: {was:?} -> {now:?}"
        );
    }
    // On versions: the next fence on each.
    let current: Vec<LockRecord> = before.into_iter().flatten().collect();
    let writes: Vec<KeyedWrite> = current
        .iter()
        .map(|record| KeyedWrite {
            key: record.key.clone(),
            expect: Expect::Version(record.rvn.clone()),
            new: acquire("q"),
        })
        .collect();
    match store.put_many(writes).await? {
        ManyOutcome::Applied(records) => {
            for (record, was) in records.iter().zip(&current) {
                ensure!(
                    record.fence == Fence(was.fence.0 + 1) && record.owner == "q",
                    "{record:?} on {was:?}"
                );
            }
        }
        other => return Err(CaseError::Violation(format!("on versions: {other:?}"))),
    }
    // A key twice: Invalid, nothing written.
    let twice = vec![
        KeyedWrite {
            key: keys[0].clone(),
            expect: Expect::Vacant,
            new: acquire("r"),
        },
        KeyedWrite {
            key: keys[0].clone(),
            expect: Expect::Vacant,
            new: acquire("r"),
        },
    ];
    let refused = store.put_many(twice).await;
    ensure!(
        matches!(&refused, Err(error) if error.kind() == StoreErrorKind::Invalid),
        "a key twice in one request: {refused:?}"
    );
    // More keys than the store takes (where that is few enough to try).
    if limits.max_keys < 1_000 {
        let over: Vec<KeyedWrite> = (0..=limits.max_keys)
            .map(|i| KeyedWrite {
                key: if caps.sort_keys {
                    LockKey::with_sort("over", format!("k{i}"))
                } else {
                    LockKey::new(format!("over-{i}"))
                },
                expect: Expect::Vacant,
                new: acquire("s"),
            })
            .collect();
        let first = over[0].key.clone();
        let refused = store.put_many(over).await;
        ensure!(
            matches!(&refused, Err(error) if error.kind() == StoreErrorKind::Invalid),
            "{} keys, over the store's {}: {refused:?}",
            limits.max_keys + 1,
            limits.max_keys
        );
        ensure!(
            store.get(&first).await?.is_none(),
            "written by a refused put_many"
        );
    }
    Ok(())
}

/// A store that says it announces releases
/// ([`Capabilities::announces_releases`](lock_core::Capabilities::announces_releases))
/// has a release feed, and announces a release of a key (not a heartbeat)
/// to a waiter that subscribed before it, within ten seconds; one that does
/// not say so has no feed.
pub async fn releases_are_announced_where_the_store_says_so(
    store: Arc<dyn ConditionalStore>,
) -> CaseResult {
    let announces = store.capabilities().announces_releases;
    let Some(feed) = store.release_feed() else {
        ensure!(
            !announces,
            "the capabilities say the store announces releases, but it has no release feed"
        );
        return Ok(());
    };
    ensure!(
        announces,
        "the store has a release feed, but its capabilities say it does not announce releases"
    );
    let mut watch = feed.subscribe();
    // The listener may take a moment to be in place: release again until an
    // announcement comes, at most ten seconds.
    let key = LockKey::with_sort("announced", "a b");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut record = applied(
        "acquire",
        store.put(&key, Expect::Vacant, acquire("alice")).await?,
    )?;
    loop {
        record = applied(
            "heartbeat",
            store
                .put(
                    &key,
                    Expect::Version(record.rvn.clone()),
                    heartbeat("alice"),
                )
                .await?,
        )?;
        applied(
            "release",
            store
                .put(&key, Expect::Version(record.rvn.clone()), release("alice"))
                .await?,
        )?;
        let heard = tokio::time::timeout(
            Duration::from_millis(500),
            watch.released(|released| *released == key),
        )
        .await;
        if heard.is_ok() {
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "no release of {key} was announced within ten seconds"
        );
        record = applied(
            "acquire again",
            store.put(&key, Expect::Vacant, acquire("alice")).await?,
        )?;
    }
}
