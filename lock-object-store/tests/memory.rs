//! The object-store backend on object_store's in-memory store: the
//! conformance suite, the requests each operation costs, conditions that
//! fail, writes whose replies are lost or that are sent twice, and the lock
//! client end to end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, ConfigError, DataUpdate, Expect, Fence, FenceUpdate,
    LockError, LockKey, LockRecord, NewRecord, Outcome, Rvn, StoreErrorKind,
};
use support::{PutFault, Requests, another_process, memory_store};

mod conformance {
    lock_testkit::conformance_suite!(crate::support::MemoryFactory);
}

fn write(owner: &str, released: bool, fence: FenceUpdate) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released,
        fence,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

fn applied(outcome: Outcome) -> LockRecord {
    match outcome {
        Outcome::Applied(record) => record,
        other => panic!("expected the write to apply, got {other:?}"),
    }
}

fn rejected(outcome: Outcome) -> Option<LockRecord> {
    match outcome {
        Outcome::Rejected { current } => current,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

const fn requests(gets: usize, puts: usize) -> Requests {
    Requests {
        gets,
        puts,
        lists: 0,
    }
}

#[tokio::test]
async fn each_operation_costs_the_requests_the_capabilities_say() {
    let (store, objects) = memory_store();
    let caps = store.capabilities();
    assert!(!caps.conditional_delete);
    assert_eq!(caps.requests, lock_core::RequestCosts::VERSIONED_OBJECTS);
    assert_eq!(caps.max_record_bytes, 1024 * 1024, "1 MiB, as documented");
    assert_eq!(
        format!("{store:?}"),
        format!("BucketStore {{ url: {:?}, .. }}", store.url())
    );
    let key = LockKey::new("job");

    // A key never seen: read (absent), then create.
    let (held, cost) = objects
        .during(store.put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next)))
        .await;
    let held = applied(held.unwrap());
    assert_eq!(cost, requests(1, 1), "acquire of a new key");
    // A new record's first fence is the clock's floor (its object may have
    // been deleted by a lifecycle rule since an earlier holder's).
    let first = held.fence;
    assert!(first > Fence(1_700_000_000_000_000), "{first}");

    // A heartbeat on the version this store wrote: one PUT.
    let (beat, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(held.rvn.clone()),
            write("a", false, FenceUpdate::Keep),
        ))
        .await;
    let beat = applied(beat.unwrap());
    assert_eq!(cost, requests(0, 1), "heartbeat");
    assert_eq!(beat.fence, first);

    // The release: one PUT, the record kept.
    let (released, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(beat.rvn.clone()),
            write("a", true, FenceUpdate::Keep),
        ))
        .await;
    let released = applied(released.unwrap());
    assert_eq!(cost, requests(0, 1), "release");
    assert!(released.released);

    // Another process reads the released record, then takes it: one GET,
    // one PUT.
    let other = another_process(&store);
    let (seen, cost) = objects.during(other.get(&key)).await;
    assert_eq!(seen.unwrap(), Some(released.clone()));
    assert_eq!(cost, requests(1, 0), "read");
    let (taken, cost) = objects
        .during(other.put(&key, Expect::Vacant, write("b", false, FenceUpdate::Next)))
        .await;
    let taken = applied(taken.unwrap());
    assert_eq!(cost, requests(0, 1), "acquire after a read");
    assert_eq!(
        taken.fence,
        Fence(first.get() + 1),
        "fences rise across a release"
    );

    // The first store remembers its own release, now stale: its vacant
    // write's PUT is refused, and one read returns the holder's record.
    let (refused, cost) = objects
        .during(store.put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next)))
        .await;
    assert_eq!(rejected(refused.unwrap()), Some(taken.clone()));
    assert_eq!(
        cost,
        requests(1, 1),
        "vacant write on a stale released version"
    );
    // Now it knows the key is held: a vacant write reads, and writes nothing.
    let (refused, cost) = objects
        .during(store.put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next)))
        .await;
    assert_eq!(rejected(refused.unwrap()), Some(taken.clone()));
    assert_eq!(cost, requests(1, 0), "vacant write on a held key");

    // A takeover on a version another process wrote: read, then write.
    let (took, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(taken.rvn.clone()),
            write("a", false, FenceUpdate::Next),
        ))
        .await;
    assert_eq!(applied(took.unwrap()).fence, Fence(first.get() + 2));
    assert_eq!(
        cost,
        requests(0, 1),
        "the rejection's read taught it the version"
    );

    // The other store's version is stale: its heartbeat's PUT is refused,
    // and one read returns the current record.
    let (lost, cost) = objects
        .during(other.put(
            &key,
            Expect::Version(taken.rvn.clone()),
            write("b", false, FenceUpdate::Keep),
        ))
        .await;
    let current = rejected(lost.unwrap()).unwrap();
    assert_eq!(
        (current.owner.as_str(), current.fence),
        ("a", Fence(first.get() + 2))
    );
    assert_eq!(cost, requests(1, 1), "a refused heartbeat");
}

#[tokio::test]
async fn a_released_key_written_meanwhile_is_written_again_on_its_new_version() {
    let (store, _) = memory_store();
    let other = another_process(&store);
    let key = LockKey::new("job");
    let first = applied(
        store
            .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    let first_fence = first.fence;
    let released = applied(
        store
            .put(
                &key,
                Expect::Version(first.rvn),
                write("a", true, FenceUpdate::Keep),
            )
            .await
            .unwrap(),
    );
    // Both processes saw the released record; the other takes it and
    // releases it again, so the first's remembered version is stale though
    // the key is vacant.
    assert_eq!(other.get(&key).await.unwrap(), Some(released));
    let second = applied(
        other
            .put(&key, Expect::Vacant, write("b", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    applied(
        other
            .put(
                &key,
                Expect::Version(second.rvn),
                write("b", true, FenceUpdate::Keep),
            )
            .await
            .unwrap(),
    );
    let third = applied(
        store
            .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    assert_eq!(third.fence, Fence(first_fence.get() + 2));
    assert_eq!(store.get(&key).await.unwrap(), Some(third));
}

#[tokio::test]
async fn a_write_sent_twice_is_recognised_as_applied() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    objects.fail_next_put(PutFault::SendTwice);
    let new = write("a", false, FenceUpdate::Next);
    let (outcome, cost) = objects
        .during(store.put(&key, Expect::Vacant, new.clone()))
        .await;
    let record = applied(outcome.unwrap());
    assert_eq!(record.rvn, new.rvn);
    assert!(record.fence > Fence(0));
    // The read first, the create sent twice, the read that recognised it.
    assert_eq!(cost, requests(2, 2));
}

#[tokio::test]
async fn a_lost_reply_is_ambiguous_and_the_next_read_tells() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    objects.fail_next_put(PutFault::LoseReply);
    let new = write("a", false, FenceUpdate::Next);
    let error = store
        .put(&key, Expect::Vacant, new.clone())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(read.rvn, new.rvn);
    // The version is known again: a heartbeat is one PUT.
    let (beat, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(read.rvn),
            write("a", false, FenceUpdate::Keep),
        ))
        .await;
    applied(beat.unwrap());
    assert_eq!(cost, requests(0, 1));
}

#[tokio::test]
async fn a_conditional_request_conflict_is_not_applied_and_the_write_is_made_again() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    let held = applied(
        store
            .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    objects.fail_next_put(PutFault::Conflict);
    let (outcome, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(held.rvn.clone()),
            write("a", false, FenceUpdate::Keep),
        ))
        .await;
    let beat = applied(outcome.unwrap());
    assert_ne!(beat.rvn, held.rvn);
    // The refused PUT, the read that found the condition still held, the PUT.
    assert_eq!(cost, requests(1, 2));
}

#[tokio::test]
async fn delete_is_refused_and_so_is_delete_on_release() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    let (error, cost) = objects.during(store.delete(&key, Expect::Vacant)).await;
    assert_eq!(error.unwrap_err().kind(), StoreErrorKind::Invalid);
    assert_eq!(cost, requests(0, 0));

    let client = support::client(store, "a", Duration::from_secs(5));
    let (refused, cost) = objects
        .during(client.acquire("job", AcquireOptions::new().delete_on_release(true)))
        .await;
    assert!(
        matches!(
            refused,
            Err(LockError::InvalidConfig(ConfigError::DeleteNotConditional))
        ),
        "{refused:?}"
    );
    assert_eq!(cost, requests(0, 0), "refused before anything was sent");
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn listing_skips_other_objects_and_pages_by_path() {
    use lock_object_store::object_store::{ObjectStoreExt as _, PutPayload, path::Path};
    let (store, objects) = memory_store();
    for i in 0..5 {
        let key = LockKey::with_sort("p", format!("s{i}"));
        applied(
            store
                .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
                .await
                .unwrap(),
        );
    }
    applied(
        store
            .put(
                &LockKey::new("q"),
                Expect::Vacant,
                write("a", false, FenceUpdate::Next),
            )
            .await
            .unwrap(),
    );
    objects
        .put(
            &Path::from("locks/p/readme.txt"),
            PutPayload::from_static(b"not a lock"),
        )
        .await
        .unwrap();
    let mut keys = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(Some("p"), cursor, 2).await.unwrap();
        assert!(page.records.len() <= 2);
        keys.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<_> = (0..5)
        .map(|i| LockKey::with_sort("p", format!("s{i}")))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(store.list(None, None, 100).await.unwrap().records.len(), 6);
}

/// Eight stores, each with its own remembered versions, race for one key in
/// 50 trials, on new and released keys: exactly one wins each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    let (store, _) = memory_store();
    let writers: Vec<_> = (0..8).map(|_| another_process(&store)).collect();
    lock_testkit::scenarios::racing_writers(&store, &writers, 50).await;
}

#[tokio::test(start_paused = true)]
async fn the_client_acquires_heartbeats_hands_over_and_releases() {
    let (store, _) = memory_store();
    let lease = Duration::from_secs(6);
    let holder = support::client(store.clone(), "holder", lease);
    let waiter = support::client(another_process(&store), "waiter", lease);
    let key = LockKey::new("job");
    let guard = holder
        .acquire(
            key.clone(),
            AcquireOptions::new().data(b"checkpoint".to_vec()),
        )
        .await
        .unwrap();
    let first = store.get(&key).await.unwrap().unwrap();
    assert_eq!(guard.fence(), first.fence);
    tokio::time::sleep(lease * 2).await;
    let later = store.get(&key).await.unwrap().unwrap();
    assert_ne!(later.rvn, first.rvn, "heartbeats wrote new versions");
    assert!(guard.is_safe());
    let busy = waiter.try_acquire(key.clone(), AcquireOptions::new()).await;
    assert!(matches!(busy, Ok(None)), "{busy:?}");
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        let key = key.clone();
        async move {
            waiter
                .acquire(key, AcquireOptions::new().wait(Duration::from_secs(30)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    guard.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("bounded")
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence(), Fence(first.fence.get() + 1));
    assert_eq!(taken.data(), Some(b"checkpoint".to_vec()));
    drop(taken);
    let report = waiter.shutdown().await.unwrap();
    assert_eq!(report.released.len(), 1, "{report:?}");
    holder.shutdown().await.unwrap();
    assert!(store.get(&key).await.unwrap().unwrap().released);
}

/// A lock's object deleted behind the store's back (a bucket lifecycle
/// rule, `aws s3 rm`): the key's next fence is higher than every fence it
/// had, so a holder paused across the deletion is refused at a fenced
/// resource.
#[tokio::test]
async fn fences_keep_rising_after_the_lock_object_is_deleted_by_hand() {
    use lock_object_store::object_store::ObjectStoreExt;
    let (store, _) = memory_store();
    let key = LockKey::new("cleaned");
    lock_testkit::scenarios::fences_rise_after_a_deletion_by_hand(&store, &key, async {
        store
            .object_store()
            .delete(&store.object_path(&key))
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request() {
    let (store, objects) = memory_store();
    let too_long = LockKey::new("k".repeat(store.capabilities().max_partition_key_bytes + 1));
    let (error, cost) = objects
        .during(store.put(
            &too_long,
            Expect::Vacant,
            write("a", false, FenceUpdate::Next),
        ))
        .await;
    assert_eq!(error.unwrap_err().kind(), StoreErrorKind::Invalid);
    assert_eq!(cost, requests(0, 0));
}

#[tokio::test]
async fn a_foreign_object_at_a_lock_path_is_an_error_naming_it() {
    use lock_object_store::object_store::{ObjectStoreExt as _, PutPayload};
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    objects
        .put(
            &store.object_path(&key),
            PutPayload::from_static(b"{\"hello\":1}"),
        )
        .await
        .unwrap();
    let error = store.get(&key).await.unwrap_err();
    assert!(error.message().contains("locks/job/lock.json"), "{error}");
}

#[tokio::test]
async fn the_bucket_check_passes_on_a_store_with_conditional_writes_and_leaves_nothing() {
    let (store, objects) = memory_store();
    store.validate_bucket().await.unwrap();
    assert!(store.list(None, None, 10).await.unwrap().records.is_empty());
    let left: Vec<_> = {
        use futures_util::StreamExt as _;
        lock_object_store::object_store::ObjectStore::list(objects.as_ref(), None)
            .collect()
            .await
    };
    assert!(left.is_empty(), "{left:?}");
}

/// A store of the caller's own may retry a PUT that applied and then fail:
/// every failed write through it is ambiguous, so the client reads.
#[tokio::test]
async fn a_failed_write_through_a_store_that_may_retry_is_ambiguous() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    objects.fail_next_put(PutFault::AppliedThenDenied);
    let new = write("a", false, FenceUpdate::Next);
    let error = store
        .put(&key, Expect::Vacant, new.clone())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    assert!(error.message().contains("may retry"), "{error}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().rvn, new.rvn);
}

/// Objects the store did not write, at its paths: a fence at its end, a
/// record of another key.
#[tokio::test]
async fn records_that_cannot_be_written_on_or_belong_elsewhere_are_errors() {
    use lock_object_store::object_store::{ObjectStoreExt as _, PutPayload};
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    let at_the_end = format!(
        r#"{{"format":1,"partition":"job","sort":null,"owner":"o","rvn":"r","lease_ms":1000,"released":true,"fence":{},"data":null,"expires_at":null}}"#,
        u64::MAX
    );
    objects
        .put(
            &store.object_path(&key),
            PutPayload::from(at_the_end.into_bytes()),
        )
        .await
        .unwrap();
    let error = store
        .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
    assert!(error.message().contains("u64::MAX"), "{error}");

    let elsewhere = LockKey::new("other");
    let theirs = applied(
        store
            .put(
                &elsewhere,
                Expect::Vacant,
                write("a", false, FenceUpdate::Next),
            )
            .await
            .unwrap(),
    );
    let moved = LockKey::new("moved");
    let body = objects
        .get(&store.object_path(&elsewhere))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    objects
        .put(&store.object_path(&moved), PutPayload::from(body))
        .await
        .unwrap();
    let error = store.get(&moved).await.unwrap_err();
    assert!(error.message().contains("belongs elsewhere"), "{error}");
    assert_eq!(store.get(&elsewhere).await.unwrap(), Some(theirs));
}

#[tokio::test]
async fn an_empty_partition_lists_nothing() {
    let (store, _) = memory_store();
    applied(
        store
            .put(
                &LockKey::new("a"),
                Expect::Vacant,
                write("a", false, FenceUpdate::Next),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        store.list(Some(""), None, 10).await.unwrap(),
        lock_core::Page::default()
    );
}

/// A 404 to a PUT on an object version is a condition that failed (the object
/// went away), read and decided like a 412.
#[tokio::test]
async fn a_not_found_answer_to_a_conditional_update_is_a_failed_condition() {
    let (store, objects) = memory_store();
    let key = LockKey::new("job");
    let held = applied(
        store
            .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    objects.fail_next_put(PutFault::NotFound);
    let (beat, cost) = objects
        .during(store.put(
            &key,
            Expect::Version(held.rvn.clone()),
            write("a", false, FenceUpdate::Keep),
        ))
        .await;
    assert_eq!(applied(beat.unwrap()).fence, held.fence);
    // The refused PUT, the read that found the record unchanged, the PUT.
    assert_eq!(cost, requests(1, 2));
}

/// Keys and records exactly at the limits are written.
#[tokio::test]
async fn keys_and_records_at_the_limits_are_written() {
    let (store, _) = memory_store();
    let caps = store.capabilities();
    let key = LockKey::with_sort(
        "p".repeat(caps.max_partition_key_bytes),
        "s".repeat(caps.max_sort_key_bytes),
    );
    // An owner longer than one byte, so that a product of the sizes is not
    // their sum.
    let owner = "owner";
    let data = vec![
        7;
        caps.max_record_bytes
            - caps.max_partition_key_bytes
            - caps.max_sort_key_bytes
            - owner.len()
    ];
    let new = NewRecord {
        data: DataUpdate::Replace(data.clone()),
        ..write(owner, false, FenceUpdate::Next)
    };
    let record = applied(store.put(&key, Expect::Vacant, new).await.unwrap());
    assert_eq!(record.data, Some(data));
    assert_eq!(store.get(&key).await.unwrap(), Some(record));
}
