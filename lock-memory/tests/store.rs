//! The in-memory store's contract, its history, and the fault injector.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    ConditionalStore, Cursor, DataUpdate, Expect, Fence, FenceUpdate, LockKey, LockRecord,
    NewRecord, Outcome, Rvn, StoreErrorKind,
};
use lock_memory::{
    Call, CallResult, Fault, FaultConfig, FaultSource, FaultyStore, MemoryStore, Op,
    RECORD_OVERHEAD_BYTES, record_size,
};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(10);

/// A write by `owner` with RVN `rvn`.
fn write(owner: &str, rvn: &str, fence: FenceUpdate) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::from_stored(rvn),
        lease: LEASE,
        released: false,
        fence,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

fn acquire(owner: &str, rvn: &str) -> NewRecord {
    write(owner, rvn, FenceUpdate::Next)
}

fn heartbeat(owner: &str, rvn: &str) -> NewRecord {
    write(owner, rvn, FenceUpdate::Keep)
}

fn release(owner: &str, rvn: &str) -> NewRecord {
    NewRecord {
        released: true,
        ..write(owner, rvn, FenceUpdate::Keep)
    }
}

fn version(rvn: &str) -> Expect {
    Expect::Version(Rvn::from_stored(rvn))
}

fn applied(outcome: Outcome) -> LockRecord {
    match outcome {
        Outcome::Applied(record) => record,
        other => panic!("expected Applied, got {other:?}"),
    }
}

fn rejected(outcome: Outcome) -> Option<LockRecord> {
    match outcome {
        Outcome::Rejected { current } => current,
        other => panic!("expected Rejected, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Conditional writes and fences
// ---------------------------------------------------------------------------

#[tokio::test]
async fn fences_start_at_one_increase_per_acquisition_and_survive_release() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");

    let first = applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    assert_eq!(first.fence, Fence(1));
    assert_eq!(first.key, key);
    assert_eq!(first.owner, "a");
    assert_eq!(first.rvn, Rvn::from_stored("r1"));
    assert_eq!(first.lease, LEASE);
    assert!(!first.released);

    // Heartbeats (Keep) change the RVN and keep the fence.
    let mut rvn = "r1".to_owned();
    for i in 0..3 {
        let next = format!("hb{i}");
        let record = applied(
            store
                .put(&key, version(&rvn), heartbeat("a", &next))
                .await
                .unwrap(),
        );
        assert_eq!(record.fence, Fence(1));
        assert_eq!(record.rvn.as_str(), next);
        rvn = next;
    }

    // Release keeps the fence; the released record is vacant.
    let released = applied(
        store
            .put(&key, version(&rvn), release("a", "rel"))
            .await
            .unwrap(),
    );
    assert!(released.released && released.is_vacant());
    assert_eq!(released.fence, Fence(1));
    assert_eq!(store.record(&key), Some(released));

    // The next acquisition of the released record is previous + 1.
    let second = applied(
        store
            .put(&key, Expect::Vacant, acquire("b", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(second.fence, Fence(2));

    // A takeover by version is an acquisition too.
    let third = applied(
        store
            .put(&key, version("r2"), acquire("c", "r3"))
            .await
            .unwrap(),
    );
    assert_eq!(third.fence, Fence(3));
    assert_eq!(third.owner, "c");

    // A delete leaves the fence history: the key goes on above it, so a
    // holder paused across the deletion is refused at a fenced resource.
    applied(store.delete(&key, version("r3")).await.unwrap());
    assert_eq!(store.record(&key), None);
    let fresh = applied(
        store
            .put(&key, Expect::Vacant, acquire("d", "r4"))
            .await
            .unwrap(),
    );
    assert_eq!(fresh.fence, Fence(4));
}

#[tokio::test]
async fn keep_on_a_new_key_stores_fence_zero() {
    // `Keep` with no previous record keeps "no fence", i.e. 0; only `Next` acquires.
    let store = MemoryStore::new();
    let key = LockKey::new("k");
    let record = applied(
        store
            .put(&key, Expect::Vacant, heartbeat("a", "r"))
            .await
            .unwrap(),
    );
    assert_eq!(record.fence, Fence(0));
    let record = applied(
        store
            .put(&key, version("r"), acquire("a", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(record.fence, Fence(1));
    // A record with no fence left where a deleted one was: the next
    // acquisition still goes on above the deleted record's fence.
    applied(store.delete(&key, version("r2")).await.unwrap());
    applied(
        store
            .put(&key, Expect::Vacant, heartbeat("a", "r3"))
            .await
            .unwrap(),
    );
    let record = applied(
        store
            .put(&key, version("r3"), acquire("b", "r4"))
            .await
            .unwrap(),
    );
    assert_eq!(record.fence, Fence(2), "above the deleted record's fence 1");
}

#[tokio::test]
async fn fences_are_per_key() {
    let store = MemoryStore::new();
    for key in [
        LockKey::new("a"),
        LockKey::new("b"),
        LockKey::with_sort("a", "x"),
    ] {
        let record = applied(
            store
                .put(&key, Expect::Vacant, acquire("o", "r"))
                .await
                .unwrap(),
        );
        assert_eq!(record.fence, Fence(1), "{key:?}");
    }
    assert_eq!(store.records().len(), 3);
}

#[tokio::test]
async fn vacant_holds_for_absent_and_released_records_only() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );

    // Held: rejected, with the current record, and nothing changes.
    let current = rejected(
        store
            .put(&key, Expect::Vacant, acquire("b", "r2"))
            .await
            .unwrap(),
    );
    let held = current.expect("the current record comes back");
    assert_eq!(held.owner, "a");
    assert_eq!(held.rvn, Rvn::from_stored("r1"));
    assert_eq!(store.record(&key), Some(held));

    // Released: vacant.
    applied(
        store
            .put(&key, version("r1"), release("a", "r1-rel"))
            .await
            .unwrap(),
    );
    let taken = applied(
        store
            .put(&key, Expect::Vacant, acquire("b", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(taken.owner, "b");
    assert_eq!(taken.fence, Fence(2));
}

#[tokio::test]
async fn version_must_match_the_stored_rvn() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");

    // On an absent key, nothing matches and there is no current record.
    assert_eq!(
        rejected(
            store
                .put(&key, version("r0"), acquire("a", "r1"))
                .await
                .unwrap()
        ),
        None
    );
    assert!(store.records().is_empty());

    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    // Mismatch: rejected with the current record, unchanged.
    let current = rejected(
        store
            .put(&key, version("nope"), heartbeat("a", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(current.as_ref().map(|r| r.rvn.as_str()), Some("r1"));
    assert_eq!(store.record(&key), current);
    // Match: applied.
    let record = applied(
        store
            .put(&key, version("r1"), heartbeat("a", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(record.rvn.as_str(), "r2");
    // The old RVN no longer matches.
    let current = rejected(
        store
            .put(&key, version("r1"), heartbeat("a", "r3"))
            .await
            .unwrap(),
    );
    assert_eq!(current.map(|r| r.rvn), Some(Rvn::from_stored("r2")));
    // A version condition also matches a released record (that is how a stale
    // released record is recognised as one's own).
    applied(
        store
            .put(&key, version("r2"), release("a", "r4"))
            .await
            .unwrap(),
    );
    applied(
        store
            .put(&key, version("r4"), acquire("a", "r5"))
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn data_is_stored_kept_and_cleared_and_expiry_replaced_by_each_write() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");
    let new = NewRecord {
        data: DataUpdate::Replace(b"v1".to_vec()),
        expires_at: Some(1_700_000_000),
        ..acquire("a", "r1")
    };
    let record = applied(store.put(&key, Expect::Vacant, new).await.unwrap());
    assert_eq!(record.data.as_deref(), Some(&b"v1"[..]));
    assert_eq!(record.expires_at, Some(1_700_000_000));
    let record = applied(
        store
            .put(&key, version("r1"), heartbeat("a", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(
        record.data.as_deref(),
        Some(&b"v1"[..]),
        "a write that says nothing of the data keeps it"
    );
    assert_eq!(record.expires_at, None);
    let cleared = NewRecord {
        data: DataUpdate::Clear,
        ..heartbeat("a", "r3")
    };
    let record = applied(store.put(&key, version("r2"), cleared).await.unwrap());
    assert_eq!(record.data, None, "a clearing write removes it");
}

#[tokio::test]
async fn without_current_on_conflict_rejections_carry_nothing() {
    let store = MemoryStore::builder()
        .returns_current_on_conflict(false)
        .build();
    assert!(!store.capabilities().returns_current_on_conflict);
    let key = LockKey::new("job");
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    assert_eq!(
        rejected(
            store
                .put(&key, Expect::Vacant, acquire("b", "r2"))
                .await
                .unwrap()
        ),
        None
    );
    assert_eq!(
        rejected(
            store
                .put(&key, version("x"), acquire("b", "r2"))
                .await
                .unwrap()
        ),
        None
    );
    assert_eq!(
        rejected(store.delete(&key, Expect::Vacant).await.unwrap()),
        None
    );
    // The client has to read instead, and the read works.
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.owner),
        Some("a".into())
    );
    // The history shows what was returned.
    let last_put = store.history().into_iter().rfind(|e| e.is_put()).unwrap();
    assert_eq!(last_put.result, CallResult::Rejected(None));
}

#[tokio::test]
async fn delete_with_either_expectation() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");

    // Vacant on an absent key: nothing to delete.
    assert_eq!(
        rejected(store.delete(&key, Expect::Vacant).await.unwrap()),
        None
    );
    // Version on an absent key: same.
    assert_eq!(
        rejected(store.delete(&key, version("r1")).await.unwrap()),
        None
    );

    // Vacant on a held record: rejected with the holder, record kept.
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    let current = rejected(store.delete(&key, Expect::Vacant).await.unwrap());
    assert_eq!(current.map(|r| r.owner), Some("a".into()));
    assert!(store.record(&key).is_some());

    // Version mismatch: rejected, kept.
    let current = rejected(store.delete(&key, version("other")).await.unwrap());
    assert_eq!(
        current.map(|r| r.rvn.as_str().to_owned()),
        Some("r1".into())
    );
    assert!(store.record(&key).is_some());

    // Version match: applied, returns the deleted record.
    let deleted = applied(store.delete(&key, version("r1")).await.unwrap());
    assert_eq!(deleted.owner, "a");
    assert_eq!(store.record(&key), None);

    // Vacant on a released record: applied.
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r2"))
            .await
            .unwrap(),
    );
    applied(
        store
            .put(&key, version("r2"), release("a", "r3"))
            .await
            .unwrap(),
    );
    let deleted = applied(store.delete(&key, Expect::Vacant).await.unwrap());
    assert!(deleted.released);
    assert!(store.records().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_vacant_puts_have_exactly_one_winner() {
    let store = MemoryStore::new();
    let key = LockKey::new("race");
    let mut tasks = Vec::new();
    for i in 0..32 {
        let (store, key) = (store.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{i}");
            store
                .put(&key, Expect::Vacant, acquire(&owner, &owner))
                .await
                .unwrap()
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        if let Outcome::Applied(record) = task.await.unwrap() {
            winners.push(record);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].fence, Fence(1));
    assert_eq!(store.record(&key), Some(winners[0].clone()));
    // Every loser saw the winner as the current record.
    let history = store.history();
    assert_eq!(history.len(), 32);
    let winner_seq = history.iter().position(|e| e.applied()).unwrap();
    for entry in &history[winner_seq + 1..] {
        assert_eq!(entry.result, CallResult::Rejected(Some(winners[0].clone())));
    }
    assert_eq!(winner_seq, 0, "the first call to take effect wins");
}

// ---------------------------------------------------------------------------
// Listing
// ---------------------------------------------------------------------------

async fn fill(store: &MemoryStore) -> Vec<LockKey> {
    let mut keys = vec![
        LockKey::new("alpha"),
        LockKey::new("tenant"),
        LockKey::new("zulu"),
        LockKey::new("tenant-b"),
    ];
    for shard in 0..8 {
        keys.push(LockKey::with_sort("tenant", format!("shard-{shard}")));
        keys.push(LockKey::with_sort("tenant-b", format!("s{shard}")));
    }
    for key in &keys {
        applied(
            store
                .put(key, Expect::Vacant, acquire("o", "r"))
                .await
                .unwrap(),
        );
    }
    keys.sort();
    keys
}

async fn list_all(
    store: &MemoryStore,
    partition: Option<&str>,
    limit: usize,
) -> (Vec<LockKey>, usize) {
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list(partition, cursor, limit).await.unwrap();
        pages += 1;
        assert!(page.records.len() <= limit);
        seen.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 100, "the listing does not end");
    }
    (seen, pages)
}

#[tokio::test]
async fn list_pages_through_everything_in_key_order() {
    let store = MemoryStore::new();
    let keys = fill(&store).await;
    assert_eq!(keys.len(), 20);

    let (seen, pages) = list_all(&store, None, 3).await;
    assert_eq!(seen, keys, "every key once, in LockKey order");
    assert_eq!(pages, 7);

    // A limit that divides the count exactly ends without an empty page.
    let (seen, pages) = list_all(&store, None, 5).await;
    assert_eq!(seen, keys);
    assert_eq!(pages, 4);

    // One big page.
    let page = store.list(None, None, 1000).await.unwrap();
    assert_eq!(page.records.len(), 20);
    assert_eq!(page.next, None);
    assert_eq!(page.records, store.records());
}

#[tokio::test]
async fn list_filters_by_partition_across_pages() {
    let store = MemoryStore::new();
    let keys = fill(&store).await;

    let (seen, pages) = list_all(&store, Some("tenant"), 3).await;
    let expected: Vec<LockKey> = keys
        .iter()
        .filter(|k| k.partition() == "tenant")
        .cloned()
        .collect();
    assert_eq!(expected.len(), 9, "the bare key and 8 shards");
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);
    // "tenant-b" shares the prefix but is another partition.
    assert!(seen.iter().all(|k| k.partition() == "tenant"));

    let (seen, _) = list_all(&store, Some("tenant-b"), 4).await;
    assert_eq!(seen.len(), 9);
    let (seen, pages) = list_all(&store, Some("nobody"), 4).await;
    assert!(seen.is_empty());
    assert_eq!(pages, 1);
}

#[tokio::test]
async fn a_cursor_survives_deletion_of_its_key_and_bad_cursors_are_invalid() {
    let store = MemoryStore::new();
    let keys = fill(&store).await;
    let page = store.list(None, None, 2).await.unwrap();
    let last = page.records.last().unwrap().key.clone();
    applied(
        store
            .delete(&last, Expect::Version(Rvn::from_stored("r")))
            .await
            .unwrap(),
    );
    let page = store.list(None, page.next, 2).await.unwrap();
    assert_eq!(page.records[0].key, keys[2]);

    for (cursor, limit) in [(Some(Cursor("garbage".into())), 2), (None, 0)] {
        let error = store.list(None, cursor, limit).await.unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::Invalid);
    }
    let error = store.list(Some(""), None, 2).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
}

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_default_capabilities_are_reported() {
    let caps = MemoryStore::new().capabilities();
    assert!(caps.returns_current_on_conflict);
    assert!(caps.sort_keys);
    assert!(caps.keeps_released_records);
    assert_eq!(caps.max_partition_key_bytes, 2048);
    assert_eq!(caps.max_sort_key_bytes, 1024);
    assert_eq!(caps.max_record_bytes, 400 * 1024);

    let caps = MemoryStore::builder()
        .key_limits(10, 5)
        .max_record_bytes(1000)
        .sort_keys(false)
        .build()
        .capabilities();
    assert_eq!(
        (
            caps.max_partition_key_bytes,
            caps.max_sort_key_bytes,
            caps.max_record_bytes
        ),
        (10, 5, 1000)
    );
    assert!(!caps.sort_keys);
}

#[tokio::test]
async fn records_over_the_item_limit_are_invalid_and_nothing_is_written() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");
    let sized = |data_len: usize| NewRecord {
        data: DataUpdate::Replace(vec![7u8; data_len]),
        ..acquire("owner", "rvn")
    };
    // The measure: key + owner + RVN + data + fixed overhead.
    assert_eq!(
        record_size(&key, &sized(10)),
        3 + 5 + 3 + 10 + RECORD_OVERHEAD_BYTES
    );
    let fits = 400 * 1024 - (3 + 5 + 3 + RECORD_OVERHEAD_BYTES);
    assert_eq!(record_size(&key, &sized(fits)), 400 * 1024);

    let error = store
        .put(&key, Expect::Vacant, sized(fits + 1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
    assert!(
        error.message().contains("409601 bytes"),
        "{}",
        error.message()
    );
    assert!(store.records().is_empty());
    let history = store.history();
    assert_eq!(history.len(), 1);
    assert_eq!(
        history[0].result.error_kind(),
        Some(StoreErrorKind::Invalid)
    );
    assert!(!history[0].applied());

    // Exactly at the limit is fine.
    let record = applied(store.put(&key, Expect::Vacant, sized(fits)).await.unwrap());
    assert_eq!(record.data.map(|d| d.len()), Some(fits));

    // An oversized heartbeat leaves the stored record alone.
    let before = store.record(&key);
    let big = NewRecord {
        data: DataUpdate::Replace(vec![0u8; 500 * 1024]),
        ..heartbeat("owner", "rvn2")
    };
    let error = store.put(&key, version("rvn"), big).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
    assert_eq!(store.record(&key), before);

    // Data a write keeps counts too: a longer owner name on top of a record
    // at the limit would leave a record over it.
    let longer_owner = NewRecord {
        owner: "a-longer-owner".into(),
        ..heartbeat("owner", "rvn3")
    };
    let error = store
        .put(&key, version("rvn"), longer_owner)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
    assert_eq!(store.record(&key), before);

    // A configured limit applies the same way.
    let small = MemoryStore::builder().max_record_bytes(100).build();
    let error = small
        .put(&key, Expect::Vacant, sized(40))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
    applied(
        small
            .put(
                &key,
                Expect::Vacant,
                sized(100 - 11 - RECORD_OVERHEAD_BYTES),
            )
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn bad_keys_are_invalid_for_every_call_and_nothing_is_written() {
    let store = MemoryStore::new();
    let bad = [
        LockKey::new(""),
        LockKey::with_sort("p", ""),
        LockKey::new("x".repeat(2049)),
        LockKey::with_sort("p", "y".repeat(1025)),
        LockKey::with_sort("", "s"),
    ];
    for key in &bad {
        let put = store.put(key, Expect::Vacant, acquire("a", "r")).await;
        assert_eq!(put.unwrap_err().kind(), StoreErrorKind::Invalid, "{key:?}");
        let get = store.get(key).await;
        assert_eq!(get.unwrap_err().kind(), StoreErrorKind::Invalid, "{key:?}");
        let delete = store.delete(key, Expect::Vacant).await;
        assert_eq!(
            delete.unwrap_err().kind(),
            StoreErrorKind::Invalid,
            "{key:?}"
        );
    }
    assert!(store.records().is_empty());
    assert_eq!(store.calls(), 15);
    assert_eq!(store.applied_writes(), 0);
    assert!(
        store
            .history()
            .iter()
            .all(|e| e.result.error_kind() == Some(StoreErrorKind::Invalid))
    );

    // At the limits is fine (lengths are UTF-8 bytes).
    let longest = LockKey::with_sort("é".repeat(1024), "ü".repeat(512));
    applied(
        store
            .put(&longest, Expect::Vacant, acquire("a", "r"))
            .await
            .unwrap(),
    );
    let over = LockKey::with_sort("é".repeat(1024), format!("{}x", "ü".repeat(512)));
    assert!(
        store
            .put(&over, Expect::Vacant, acquire("a", "r"))
            .await
            .is_err()
    );
    assert_eq!(store.records().len(), 1);
}

#[tokio::test]
async fn configured_key_limits_and_no_sort_keys() {
    let store = MemoryStore::builder()
        .key_limits(4, 2)
        .sort_keys(false)
        .build();
    let error = store
        .put(
            &LockKey::with_sort("ab", "c"),
            Expect::Vacant,
            acquire("a", "r"),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
    assert!(error.message().contains("sort keys"), "{}", error.message());
    let error = store
        .put(&LockKey::new("abcde"), Expect::Vacant, acquire("a", "r"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
    applied(
        store
            .put(&LockKey::new("abcd"), Expect::Vacant, acquire("a", "r"))
            .await
            .unwrap(),
    );
    assert_eq!(store.records().len(), 1);

    let store = MemoryStore::builder().key_limits(4, 2).build();
    let put = store
        .put(
            &LockKey::with_sort("ab", "cde"),
            Expect::Vacant,
            acquire("a", "r"),
        )
        .await;
    assert_eq!(put.unwrap_err().kind(), StoreErrorKind::Invalid);
    applied(
        store
            .put(
                &LockKey::with_sort("ab", "cd"),
                Expect::Vacant,
                acquire("a", "r"),
            )
            .await
            .unwrap(),
    );
}

// ---------------------------------------------------------------------------
// History
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn history_records_every_call_in_order_with_tokio_times() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");
    let t0 = Instant::now();
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    store.get(&key).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    rejected(
        store
            .put(&key, Expect::Vacant, acquire("b", "r2"))
            .await
            .unwrap(),
    );
    store.list(Some("job"), None, 10).await.unwrap();
    applied(store.delete(&key, version("r1")).await.unwrap());

    assert_eq!((store.calls(), store.writes(), store.reads()), (5, 3, 2));
    assert_eq!(store.applied_writes(), 2);
    let history = store.history();
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let ops: Vec<Op> = history.iter().map(|e| e.op()).collect();
    assert_eq!(ops, vec![Op::Put, Op::Get, Op::Put, Op::List, Op::Delete]);
    let offsets: Vec<Duration> = history.iter().map(|e| e.started() - t0).collect();
    assert_eq!(
        offsets,
        [0, 2, 5, 5, 5].map(Duration::from_secs).to_vec(),
        "tokio (paused) time"
    );
    assert!(history.iter().all(|e| e.finished == e.started));

    // The first entry carries the full call and the applied record.
    let first = &history[0];
    assert_eq!(
        first.call,
        Call::Put {
            key: key.clone(),
            expect: Expect::Vacant,
            new: acquire("a", "r1"),
        }
    );
    assert_eq!(first.key(), Some(&key));
    assert_eq!(first.expect(), Some(&Expect::Vacant));
    assert_eq!(first.writer(), Some("a"));
    let CallResult::Applied(record) = &first.result else {
        panic!("{first:?}");
    };
    assert_eq!(record.fence, Fence(1));
    // The get found it; the rejected put carries the holder.
    assert_eq!(history[1].result, CallResult::Found(Some(record.clone())));
    assert_eq!(
        history[2].result,
        CallResult::Rejected(Some(record.clone()))
    );
    assert_eq!(history[2].writer(), Some("b"));
    assert_eq!(
        history[3].call,
        Call::List {
            partition: Some("job".into()),
            cursor: None,
            limit: 10
        }
    );
    assert_eq!(
        history[3].result,
        CallResult::Listed {
            keys: vec![key.clone()],
            next: None
        }
    );
    assert_eq!(history[4].expect(), Some(&version("r1")));
    assert!(history[4].applied());
}

#[tokio::test]
async fn clear_history_resets_the_counters_not_the_records_or_the_sequence() {
    let store = MemoryStore::new();
    let key = LockKey::new("job");
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    store.get(&key).await.unwrap();
    store.clear_history();
    assert_eq!((store.calls(), store.writes(), store.reads()), (0, 0, 0));
    assert!(store.history().is_empty());
    assert!(store.record(&key).is_some());
    // Reading through the test helpers is not a call.
    let _ = (store.records(), store.snapshot(), store.record(&key));
    assert_eq!(store.calls(), 0);
    store.get(&key).await.unwrap();
    assert_eq!(store.history()[0].seq, 2);
}

#[tokio::test]
async fn clones_share_records_and_history() {
    let store = MemoryStore::new();
    let handle = store.clone();
    let key = LockKey::with_sort("p", "s");
    applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    assert_eq!(handle.calls(), 1);
    let snapshot = handle.snapshot();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(snapshot.get(&key).map(|r| r.fence), Some(Fence(1)));
    assert_eq!(handle.records(), store.records());
    // Debug is a summary, not a dump.
    let debug = format!("{store:?}");
    assert!(
        debug.contains("records: 1") && debug.contains("calls: 1"),
        "{debug}"
    );
}

/// `n` calls on a fresh key: a vacant put, then alternately a get and a
/// heartbeat (applied) on it.
async fn make_calls(store: &MemoryStore, key: &str, n: usize) {
    let key = LockKey::new(key);
    for i in 0..n {
        match i {
            0 => {
                applied(
                    store
                        .put(&key, Expect::Vacant, acquire("a", "r0"))
                        .await
                        .unwrap(),
                );
            }
            i if i % 2 == 1 => {
                store.get(&key).await.unwrap();
            }
            i => {
                let previous = format!("r{}", i - 2);
                let next = format!("r{i}");
                applied(
                    store
                        .put(&key, version(&previous), heartbeat("a", &next))
                        .await
                        .unwrap(),
                );
            }
        }
    }
}

#[tokio::test]
async fn a_full_history_keeps_exactly_the_last_n_calls_and_the_counters_count_all() {
    let store = MemoryStore::builder().history_capacity(5).build();
    assert_eq!(store.history_capacity(), 5);
    make_calls(&store, "a", 4).await;
    assert_eq!(store.history().len(), 4, "not full yet: nothing dropped");
    make_calls(&store, "b", 9).await;
    let history = store.history();
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![8, 9, 10, 11, 12], "the last five, oldest first");
    let ops: Vec<Op> = history.iter().map(|e| e.op()).collect();
    assert_eq!(ops, vec![Op::Put, Op::Get, Op::Put, Op::Get, Op::Put]);
    assert_eq!(history[4].writer(), Some("a"));
    assert_eq!(history[4].expect(), Some(&version("r6")));
    // The counters are not bounded by the history.
    assert_eq!((store.calls(), store.writes(), store.reads()), (13, 7, 6));
    assert_eq!(store.applied_writes(), 7);
    store.clear_history();
    assert_eq!((store.calls(), store.history().len()), (0, 0));
    make_calls(&store, "c", 1).await;
    assert_eq!(
        store.history().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![13]
    );
}

#[tokio::test]
async fn a_history_of_capacity_zero_records_nothing_but_counts_everything() {
    let store = MemoryStore::builder().history_capacity(0).build();
    assert_eq!(store.history_capacity(), 0);
    make_calls(&store, "busy", 7).await;
    assert!(store.history().is_empty());
    assert_eq!((store.calls(), store.writes(), store.reads()), (7, 4, 3));
    assert_eq!(store.applied_writes(), 4);
    let debug = format!("{store:?}");
    assert!(
        debug.contains("calls: 7") && debug.contains("history: 0"),
        "{debug}"
    );
    // The store itself works as ever.
    assert_eq!(
        store
            .record(&LockKey::new("busy"))
            .map(|r| r.rvn.as_str().to_owned()),
        Some("r6".to_owned())
    );
}

#[tokio::test]
async fn the_default_history_keeps_the_last_ten_thousand_calls() {
    assert_eq!(lock_memory::DEFAULT_HISTORY_CAPACITY, 10_000);
    let store = MemoryStore::new();
    assert_eq!(store.history_capacity(), 10_000);
    assert_eq!(
        MemoryStore::builder().build().history_capacity(),
        10_000,
        "the builder's default is the same"
    );
    make_calls(&store, "a", 10_000).await;
    let history = store.history();
    assert_eq!(history.len(), 10_000);
    assert_eq!(history[0].seq, 0, "full, nothing dropped yet");
    make_calls(&store, "b", 3).await;
    let history = store.history();
    assert_eq!(history.len(), 10_000);
    assert_eq!(history.first().map(|e| e.seq), Some(3));
    assert_eq!(history.last().map(|e| e.seq), Some(10_002));
    assert_eq!(store.calls(), 10_003);
}

#[tokio::test]
async fn the_fault_record_keeps_the_last_n_events_or_none_and_counts_every_call() {
    let key = LockKey::new("job");
    let faulty = FaultyStore::new(MemoryStore::new(), 3).with_history_capacity(2);
    let off = FaultyStore::new(MemoryStore::new(), 3).with_history_capacity(0);
    for store in [&faulty, &off] {
        store.script(Op::Get, Fault::Throttled);
        for _ in 0..4 {
            let _ = store.get(&key).await;
        }
        assert_eq!((store.calls(), store.injected()), (4, 1));
    }
    let kept: Vec<(u64, Fault)> = faulty
        .faults()
        .into_iter()
        .map(|e| (e.seq, e.fault))
        .collect();
    assert_eq!(kept, vec![(2, Fault::Pass), (3, Fault::Pass)]);
    assert!(off.faults().is_empty());
    assert!(format!("{off:?}").contains("calls: 4"));
    // Shrinking keeps the most recent; the default is the store's.
    let faulty = faulty.with_history_capacity(1);
    assert_eq!(
        faulty.faults().iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3]
    );
    let fresh = FaultyStore::new(MemoryStore::new(), 3);
    for _ in 0..10_001 {
        let _ = fresh.get(&key).await;
    }
    assert_eq!(fresh.faults().len(), lock_memory::DEFAULT_HISTORY_CAPACITY);
    assert_eq!(fresh.faults().first().map(|e| e.seq), Some(1));
    assert_eq!(fresh.calls(), 10_001);
}

// ---------------------------------------------------------------------------
// Fault injection: scripted faults and outages
// ---------------------------------------------------------------------------

#[tokio::test]
async fn ambiguous_applied_really_applies_and_ambiguous_not_applied_really_does_not() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 1);
    let key = LockKey::new("job");

    faulty.script(Op::Put, Fault::AmbiguousNotApplied);
    let error = faulty
        .put(&key, Expect::Vacant, acquire("a", "r1"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous);
    assert_eq!(store.record(&key), None, "not applied");
    assert_eq!(store.calls(), 0, "the call never reached the store");

    faulty.script(Op::Put, Fault::AmbiguousApplied);
    let error = faulty
        .put(&key, Expect::Vacant, acquire("a", "r2"))
        .await
        .unwrap_err();
    assert!(error.is_ambiguous());
    let record = store.record(&key).expect("applied");
    assert_eq!(record.rvn.as_str(), "r2");
    assert_eq!(record.fence, Fence(1));
    assert_eq!(store.applied_writes(), 1);

    // The same for delete.
    faulty.script(Op::Delete, Fault::AmbiguousNotApplied);
    assert!(
        faulty
            .delete(&key, version("r2"))
            .await
            .unwrap_err()
            .is_ambiguous()
    );
    assert!(store.record(&key).is_some());
    faulty.script(Op::Delete, Fault::AmbiguousApplied);
    assert!(
        faulty
            .delete(&key, version("r2"))
            .await
            .unwrap_err()
            .is_ambiguous()
    );
    assert_eq!(store.record(&key), None);

    // Script consumed: calls pass again.
    assert_eq!(faulty.scripted(), 0);
    applied(
        faulty
            .put(&key, Expect::Vacant, acquire("a", "r3"))
            .await
            .unwrap(),
    );

    let kinds: Vec<(Fault, FaultSource)> = faulty
        .faults()
        .into_iter()
        .map(|e| (e.fault, e.source))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Fault::AmbiguousNotApplied, FaultSource::Script),
            (Fault::AmbiguousApplied, FaultSource::Script),
            (Fault::AmbiguousNotApplied, FaultSource::Script),
            (Fault::AmbiguousApplied, FaultSource::Script),
            (Fault::Pass, FaultSource::Random),
        ]
    );
    assert_eq!(faulty.injected(), 4);
    assert_eq!(faulty.calls(), 5);
}

#[tokio::test]
async fn failing_faults_never_reach_the_store() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 2);
    let key = LockKey::new("job");
    for (fault, kind) in [
        (Fault::Throttled, StoreErrorKind::Throttled),
        (Fault::Unavailable, StoreErrorKind::Unavailable),
        (
            Fault::Error(StoreErrorKind::NotFound),
            StoreErrorKind::NotFound,
        ),
        (
            Fault::Error(StoreErrorKind::Unauthorized),
            StoreErrorKind::Unauthorized,
        ),
    ] {
        faulty.script(Op::Put, fault.clone());
        let error = faulty
            .put(&key, Expect::Vacant, acquire("a", "r"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), kind, "{fault:?}");
        assert!(!fault.reaches_store());
    }
    assert_eq!(store.calls(), 0);
    assert!(store.records().is_empty());
}

#[tokio::test]
async fn scripted_faults_match_their_op_and_are_consumed_in_order() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 3);
    let key = LockKey::new("job");
    faulty.script(Op::Put, Fault::Pass);
    faulty.script(Op::Get, Fault::Throttled);
    faulty.script(Op::Put, Fault::Unavailable);
    assert_eq!(faulty.scripted(), 3);

    // The first put passes (Pass), the get fails, the list is untouched, the second
    // put fails, the third passes.
    applied(
        faulty
            .put(&key, Expect::Vacant, acquire("a", "r1"))
            .await
            .unwrap(),
    );
    assert_eq!(faulty.list(None, None, 10).await.unwrap().records.len(), 1);
    assert_eq!(
        faulty.get(&key).await.unwrap_err().kind(),
        StoreErrorKind::Throttled
    );
    let error = faulty
        .put(&key, version("r1"), heartbeat("a", "r2"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable);
    applied(
        faulty
            .put(&key, version("r1"), heartbeat("a", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(faulty.scripted(), 0);
    assert_eq!(
        faulty
            .get(&key)
            .await
            .unwrap()
            .map(|r| r.rvn.as_str().to_owned()),
        Some("r2".into())
    );

    let events = faulty.faults();
    let ops: Vec<(Op, Fault)> = events.iter().map(|e| (e.op, e.fault.clone())).collect();
    assert_eq!(
        ops,
        vec![
            (Op::Put, Fault::Pass),
            (Op::List, Fault::Pass),
            (Op::Get, Fault::Throttled),
            (Op::Put, Fault::Unavailable),
            (Op::Put, Fault::Pass),
            (Op::Get, Fault::Pass),
        ]
    );
    assert_eq!(events[0].key, Some(key.clone()));
    assert_eq!(events[1].key, None);
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4, 5]
    );

    faulty.script(Op::Delete, Fault::Throttled);
    faulty.clear_script();
    assert_eq!(faulty.scripted(), 0);
    faulty.clear_faults();
    assert_eq!(faulty.calls(), 0);
}

#[tokio::test]
async fn an_outage_fails_every_call_until_switched_back_and_holds_the_script() {
    let store = MemoryStore::new();
    let faulty =
        FaultyStore::new(store.clone(), 4).with_faults(FaultConfig::NONE.with_throttle(1.0));
    let key = LockKey::new("job");
    faulty.script(Op::Get, Fault::AmbiguousNotApplied);
    faulty.set_unavailable(true);
    assert!(faulty.is_unavailable());
    assert_eq!(
        faulty.get(&key).await.unwrap_err().kind(),
        StoreErrorKind::Unavailable
    );
    let put = faulty.put(&key, Expect::Vacant, acquire("a", "r")).await;
    assert_eq!(put.unwrap_err().kind(), StoreErrorKind::Unavailable);
    let delete = faulty.delete(&key, Expect::Vacant).await;
    assert_eq!(delete.unwrap_err().kind(), StoreErrorKind::Unavailable);
    let list = faulty.list(None, None, 1).await;
    assert_eq!(list.unwrap_err().kind(), StoreErrorKind::Unavailable);
    assert_eq!(store.calls(), 0, "nothing reached the store");
    assert!(
        faulty
            .faults()
            .iter()
            .all(|e| e.source == FaultSource::Outage)
    );
    assert_eq!(
        faulty.scripted(),
        1,
        "the script waits for the store to come back"
    );

    faulty.set_unavailable(false);
    assert!(
        faulty.get(&key).await.unwrap_err().is_ambiguous(),
        "the scripted fault"
    );
    // Then the random configuration (always throttle) applies again.
    let get = faulty.get(&key).await;
    assert_eq!(get.unwrap_err().kind(), StoreErrorKind::Throttled);
    assert_eq!(
        faulty.faults().last().map(|e| e.source),
        Some(FaultSource::Random)
    );
}

#[tokio::test]
async fn clones_share_the_switch_and_the_script_and_the_seed_is_visible() {
    let faulty = FaultyStore::new(MemoryStore::new(), 0xfeed);
    let handle = faulty.clone();
    handle.set_unavailable(true);
    assert!(faulty.is_unavailable());
    handle.script(Op::Put, Fault::Throttled);
    assert_eq!(faulty.scripted(), 1);
    assert_eq!(faulty.seed(), 0xfeed);
    let debug = format!("{faulty:?}");
    assert!(debug.contains(&format!("seed: {}", 0xfeed)), "{debug}");
    assert!(debug.contains("unavailable: true"), "{debug}");
    assert_eq!(faulty.capabilities(), MemoryStore::new().capabilities());
    faulty.inner().clear_history();
}

#[tokio::test]
async fn the_injector_wraps_any_store_including_a_trait_object() {
    let inner: Arc<dyn ConditionalStore> = Arc::new(
        MemoryStore::builder()
            .returns_current_on_conflict(false)
            .build(),
    );
    let faulty = FaultyStore::new(inner.clone(), 5);
    assert!(!faulty.capabilities().returns_current_on_conflict);
    let key = LockKey::new("job");
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    assert!(
        faulty
            .put(&key, Expect::Vacant, acquire("a", "r"))
            .await
            .is_err()
    );
    assert_eq!(
        inner.get(&key).await.unwrap().map(|r| r.owner),
        Some("a".into())
    );

    // And a wrapper of a wrapper.
    let twice = FaultyStore::new(faulty.clone(), 6);
    faulty.set_unavailable(true);
    assert_eq!(
        twice.get(&key).await.unwrap_err().kind(),
        StoreErrorKind::Unavailable
    );
}

// ---------------------------------------------------------------------------
// Fault injection: seeded random faults and delays
// ---------------------------------------------------------------------------

/// A fixed workload against a fresh store behind an injector with `seed`; returns
/// what the injector did and what each call returned.
async fn run_workload(seed: u64) -> (Vec<(Op, Fault, Option<Duration>)>, Vec<String>) {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store, seed)
        .with_write_faults(FaultConfig {
            throttle: 0.1,
            unavailable: 0.1,
            ambiguous_applied: 0.1,
            ambiguous_not_applied: 0.1,
            delay: Some((Duration::from_millis(1), Duration::from_millis(50))),
        })
        .with_read_faults(FaultConfig::NONE.with_throttle(0.3));
    let mut results = Vec::new();
    for i in 0..200 {
        let key = LockKey::new(format!("k{}", i % 5));
        // Errors are compared by kind (their messages name the injected fault).
        let result = match i % 4 {
            0 => format!(
                "{:?}",
                faulty
                    .get(&key)
                    .await
                    .map(|r| r.map(|r| r.fence))
                    .map_err(|e| e.kind())
            ),
            1 => format!(
                "{:?}",
                faulty
                    .put(&key, Expect::Vacant, acquire("a", &format!("r{i}")))
                    .await
                    .map(|o| matches!(o, Outcome::Applied(_)))
                    .map_err(|e| e.kind())
            ),
            2 => format!(
                "{:?}",
                faulty
                    .delete(&key, Expect::Vacant)
                    .await
                    .map(|o| matches!(o, Outcome::Applied(_)))
                    .map_err(|e| e.kind())
            ),
            _ => format!(
                "{:?}",
                faulty
                    .list(None, None, 3)
                    .await
                    .map(|p| p.records.len())
                    .map_err(|e| e.kind())
            ),
        };
        results.push(result);
    }
    let events = faulty
        .faults()
        .into_iter()
        .map(|e| (e.op, e.fault, e.delay))
        .collect();
    (events, results)
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_faults_and_results() {
    let (events_a, results_a) = run_workload(42).await;
    let (events_b, results_b) = run_workload(42).await;
    assert_eq!(events_a, events_b);
    assert_eq!(results_a, results_b);

    let (events_c, _) = run_workload(43).await;
    assert_ne!(events_a, events_c, "another seed, other faults");

    // The configured rates show: every write is delayed within its bounds, about
    // 40 % of writes and 30 % of reads are disturbed, and reads are never delayed
    // nor ambiguous (their configuration says throttle only).
    let writes: Vec<_> = events_a.iter().filter(|(op, ..)| op.is_write()).collect();
    let reads: Vec<_> = events_a.iter().filter(|(op, ..)| op.is_read()).collect();
    assert_eq!((writes.len(), reads.len()), (100, 100));
    for (_, _, delay) in &writes {
        let delay = delay.expect("every write is delayed");
        assert!(delay >= Duration::from_millis(1) && delay <= Duration::from_millis(50));
    }
    let faulted_writes = writes.iter().filter(|(_, f, _)| *f != Fault::Pass).count();
    assert!(
        (25..=55).contains(&faulted_writes),
        "{faulted_writes} of 100 writes"
    );
    for fault in [
        Fault::Throttled,
        Fault::Unavailable,
        Fault::AmbiguousApplied,
        Fault::AmbiguousNotApplied,
    ] {
        assert!(
            writes.iter().any(|(_, f, _)| *f == fault),
            "no {fault:?} at all"
        );
    }
    assert!(
        reads
            .iter()
            .all(|(_, f, d)| d.is_none() && matches!(f, Fault::Pass | Fault::Throttled))
    );
    let throttled_reads = reads
        .iter()
        .filter(|(_, f, _)| *f == Fault::Throttled)
        .count();
    assert!(
        (15..=45).contains(&throttled_reads),
        "{throttled_reads} of 100 reads"
    );
}

#[tokio::test(start_paused = true)]
async fn random_delays_run_on_tokio_time() {
    let store = MemoryStore::new();
    let delay = Duration::from_millis(250);
    let faulty =
        FaultyStore::new(store.clone(), 7).with_faults(FaultConfig::NONE.with_delay(delay, delay));
    let key = LockKey::new("job");
    let t0 = Instant::now();
    applied(
        faulty
            .put(&key, Expect::Vacant, acquire("a", "r"))
            .await
            .unwrap(),
    );
    assert_eq!(
        t0.elapsed(),
        delay,
        "paused time advanced by exactly the delay"
    );
    // The store applied the call after the delay.
    assert_eq!(store.history()[0].started - t0, delay);
    faulty.get(&key).await.unwrap();
    assert_eq!(t0.elapsed(), delay * 2);
    assert!(
        faulty
            .faults()
            .iter()
            .all(|e| e.delay == Some(delay) && e.fault == Fault::Pass)
    );
    assert_eq!(faulty.injected(), 2, "delayed calls count as disturbed");
}

#[tokio::test(start_paused = true)]
async fn a_delayed_call_does_not_block_other_calls() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 8);
    let key = LockKey::new("job");
    faulty.script(Op::Put, Fault::Delay(Duration::from_secs(5)));
    let t0 = Instant::now();
    let slow = {
        let (faulty, key) = (faulty.clone(), key.clone());
        tokio::spawn(async move {
            faulty
                .put(&key, Expect::Vacant, acquire("slow", "r1"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Meanwhile another writer gets in first.
    applied(
        faulty
            .put(&key, Expect::Vacant, acquire("fast", "r2"))
            .await
            .unwrap(),
    );
    assert_eq!(t0.elapsed(), Duration::from_secs(1));
    let outcome = slow.await.unwrap().unwrap();
    assert_eq!(t0.elapsed(), Duration::from_secs(5));
    assert_eq!(rejected(outcome).map(|r| r.owner), Some("fast".into()));
    let starts: Vec<Duration> = store.history().iter().map(|e| e.started - t0).collect();
    assert_eq!(starts, vec![Duration::from_secs(1), Duration::from_secs(5)]);
}

#[tokio::test(start_paused = true)]
async fn a_store_clock_reports_each_records_age_at_its_rate_and_a_step_ages_them_all() {
    let plain = MemoryStore::new();
    assert_eq!(plain.capabilities().clock, lock_core::StoreClock::None);
    let key = LockKey::new("job");
    applied(
        plain
            .put(&key, Expect::Vacant, acquire("a", "v1"))
            .await
            .unwrap(),
    );
    assert_eq!(plain.get(&key).await.unwrap().unwrap().written, None);

    // A store clock 10 % fast.
    let store = MemoryStore::builder().store_clock(1.1).build();
    assert_eq!(store.capabilities().clock, lock_core::StoreClock::Age);
    let age = |record: Option<LockRecord>| match record.and_then(|r| r.written) {
        Some(lock_core::WriteTime::Ago(age)) => age,
        other => panic!("no age: {other:?}"),
    };
    let written = applied(
        store
            .put(&key, Expect::Vacant, acquire("a", "v1"))
            .await
            .unwrap(),
    );
    assert_eq!(age(Some(written)), Duration::ZERO);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(age(store.get(&key).await.unwrap()), Duration::from_secs(11));
    // A rejection's current record and a listing carry it too.
    let current = rejected(
        store
            .put(&key, Expect::Vacant, acquire("b", "v2"))
            .await
            .unwrap(),
    );
    assert_eq!(age(current), Duration::from_secs(11));
    let page = store.list(None, None, 10).await.unwrap();
    assert_eq!(
        age(page.records.into_iter().next()),
        Duration::from_secs(11)
    );
    // A heartbeat makes it young again.
    applied(
        store
            .put(&key, version("v1"), heartbeat("a", "v3"))
            .await
            .unwrap(),
    );
    assert_eq!(age(store.get(&key).await.unwrap()), Duration::ZERO);
    // A step forward ages every record at once.
    store.step_store_clock(Duration::from_secs(30));
    assert_eq!(age(store.get(&key).await.unwrap()), Duration::from_secs(30));
    // The store's own view of its records is unchanged by reads.
    assert_eq!(store.record(&key).unwrap().written, None);
}
