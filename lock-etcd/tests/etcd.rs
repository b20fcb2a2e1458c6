//! The etcd backend on the single-member cluster `./scripts/test` starts:
//! the conformance suite, racing writers, listing, errors, the client end to
//! end, and the shared fault drills through a TCP fault proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockKey, NewRecord,
    Outcome, Rvn, StoreErrorKind,
};
use lock_etcd::EtcdStore;
use lock_testkit::proxy::{FaultProxy, ProxyMode};
use lock_testkit::records::acquire_write;
use lock_testkit::{drills, scenarios};
use support::{LIMIT, client, endpoint, fresh_store, store_at};
use tokio::time::timeout;

mod conformance {
    lock_testkit::conformance_suite!(crate::support::PrefixFactory);
}

/// A store on `store`'s prefix reaching etcd through a new fault proxy, with
/// requests that time out well inside the drills' leases.
async fn proxied(store: &EtcdStore) -> (FaultProxy, EtcdStore) {
    let endpoint = endpoint().expect("the store was made, so there is a server");
    let proxy = FaultProxy::start(&endpoint).unwrap();
    let via = store_at(&proxy.addr().to_string(), store.prefix()).await;
    (proxy, via)
}

/// A write on a record this store has seen is one transaction; one on a
/// released record it has not seen is two (the refused one returns the
/// record), and a conflict returns the current record with no extra read.
#[tokio::test]
async fn a_stale_guess_costs_one_refused_transaction_and_never_a_wrong_write() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let other = store_at(&endpoint().unwrap(), store.prefix()).await;
    let key = LockKey::with_sort("jobs", "a");
    let Outcome::Applied(held) = store
        .put(&key, Expect::Vacant, acquire_write("a"))
        .await
        .unwrap()
    else {
        panic!("vacant");
    };
    // `other` never saw the key: its vacant write is refused with the holder.
    match other
        .put(&key, Expect::Vacant, acquire_write("b"))
        .await
        .unwrap()
    {
        Outcome::Rejected { current } => assert_eq!(current.as_ref(), Some(&held)),
        applied => panic!("{applied:?}"),
    }
    let release = NewRecord {
        released: true,
        fence: FenceUpdate::Keep,
        data: DataUpdate::Replace(b"left".to_vec()),
        ..acquire_write("a")
    };
    let Outcome::Applied(released) = store
        .put(&key, Expect::Version(held.rvn.clone()), release)
        .await
        .unwrap()
    else {
        panic!("release");
    };
    // `other` remembers the held record, which no longer satisfies "vacant";
    // the refused transaction shows it released, and the second applies on
    // its revision with the next fence, keeping the data.
    let Outcome::Applied(taken) = other
        .put(&key, Expect::Vacant, acquire_write("b"))
        .await
        .unwrap()
    else {
        panic!("a released key is vacant");
    };
    assert_eq!(taken.fence, Fence(released.fence.get() + 1));
    assert_eq!(taken.data.as_deref(), Some(&b"left"[..]));
    // `store` remembers the released record: a version write on it fails
    // with the current record, never overwriting it.
    match store
        .put(&key, Expect::Version(released.rvn), acquire_write("a"))
        .await
        .unwrap()
    {
        Outcome::Rejected { current } => assert_eq!(current, Some(taken.clone())),
        applied => panic!("{applied:?}"),
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(taken));
}

#[tokio::test]
async fn listings_page_by_key_and_keep_partitions_apart() {
    let Some(store) = fresh_store().await else {
        return;
    };
    for sort in ["a", "b", "c", "d", "e"] {
        store
            .put(
                &LockKey::with_sort("p", sort),
                Expect::Vacant,
                acquire_write("x"),
            )
            .await
            .unwrap();
    }
    for key in [LockKey::new("p"), LockKey::new("p/q"), LockKey::new("pq")] {
        store
            .put(&key, Expect::Vacant, acquire_write("x"))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list(Some("p"), cursor, 2).await.unwrap();
        pages += 1;
        assert!(page.records.len() <= 2);
        seen.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 10, "the listing pages forever");
    }
    seen.sort();
    let mut expected = vec![LockKey::new("p")];
    expected.extend(["a", "b", "c", "d", "e"].map(|s| LockKey::with_sort("p", s)));
    expected.sort();
    assert_eq!(seen, expected);
    let all = store.list(None, None, 100).await.unwrap();
    assert_eq!(all.records.len(), 8);
    assert_eq!(all.next, None);
}

#[tokio::test]
async fn a_value_that_is_not_a_record_is_refused_naming_its_key() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let key = LockKey::new("odd");
    let mut kv = support::raw_client(&support::endpoint().unwrap())
        .await
        .kv_client();
    kv.put(store.etcd_key(&key), "not json", None)
        .await
        .unwrap();
    let error = store.get(&key).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Other, "{error}");
    assert!(error.to_string().contains(&store.etcd_key(&key)), "{error}");
}

/// Nothing listens on port 9 of loopback: nothing was sent, so the write is
/// `Unavailable` (the client repeats it rather than resolving it).
#[tokio::test]
async fn a_store_not_reached_fails_as_unavailable_and_nothing_is_written() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let nowhere = store_at("127.0.0.1:9", store.prefix()).await;
    let key = LockKey::new("job");
    let error = timeout(LIMIT, nowhere.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// A reply lost after etcd applied the write is ambiguous, and the store
/// forgets the revision it can no longer know.
#[tokio::test]
async fn a_write_whose_reply_is_lost_is_ambiguous() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let key = LockKey::new("job");
    // A first request opens the connection.
    via.get(&key).await.unwrap();
    proxy.lose_next_replies(1);
    let error = timeout(LIMIT, via.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    let applied = store.get(&key).await.unwrap().expect("etcd applied it");
    assert_eq!(applied.owner, "a");
}

/// Several keys in one transaction: all taken at once, each with its fence.
#[tokio::test]
async fn a_set_of_free_keys_is_taken_in_one_transaction() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let holder = client(store.clone(), "holder", Duration::from_secs(5));
    let keys: Vec<LockKey> = (0..10).map(|i| LockKey::new(format!("k{i}"))).collect();
    let group = timeout(
        LIMIT,
        holder.acquire_all(keys.clone(), AcquireOptions::new()),
    )
    .await
    .expect("bounded")
    .unwrap();
    assert!(group.taken_at_once());
    for key in &keys {
        let record = store.get(key).await.unwrap().unwrap();
        assert!(!record.released && record.owner == "holder", "{record:?}");
    }
    group.release().await.unwrap();
    holder.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    drills::partitioned_holder(store, via, &proxy).await;
}

/// gRPC keeps one connection open: a fifth of the exchanges fail, in turn
/// before etcd saw them and after it answered.
#[tokio::test]
async fn a_fifth_of_requests_fail_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::contention_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn a_semaphore_under_failed_exchanges_never_has_more_safe_holders_than_permits() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::semaphore_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn sets_of_keys_under_failed_exchanges_are_all_or_nothing() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::sets_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn a_reader_writer_lock_under_failed_exchanges_never_has_a_writer_beside_another() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::reader_writer_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn a_partitioned_reader_is_lost_before_a_writer_going_direct_is_admitted() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    drills::partitioned_reader(store, via, &proxy).await;
}

/// A version expected of a key this store has not seen is read first: on an
/// absent key it is refused and nothing is written, alone or in a set.
#[tokio::test]
async fn a_version_expected_of_an_absent_key_is_refused_and_writes_nothing() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let key = LockKey::new("absent");
    let outcome = store
        .put(&key, Expect::Version(Rvn::fresh()), acquire_write("a"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected { current: None });
    let free = LockKey::new("free");
    let writes = vec![
        lock_core::KeyedWrite {
            key: free.clone(),
            expect: Expect::Vacant,
            new: acquire_write("a"),
        },
        lock_core::KeyedWrite {
            key: key.clone(),
            expect: Expect::Version(Rvn::fresh()),
            new: acquire_write("a"),
        },
    ];
    let outcome = store.put_many(writes).await.unwrap();
    assert_eq!(
        outcome,
        lock_core::ManyOutcome::Rejected {
            index: 1,
            current: None
        }
    );
    assert_eq!(store.get(&key).await.unwrap(), None);
    assert_eq!(store.get(&free).await.unwrap(), None);
}

/// Released records deleted by hand (`etcdctl del --prefix`, as an
/// operator cleaning up does): the key's next fence is higher than every
/// fence it had, so a holder paused across the deletion is refused at a
/// fenced resource.
#[tokio::test]
async fn fences_keep_rising_after_the_records_are_deleted_by_hand() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let mut kv = support::raw_client(&support::endpoint().unwrap())
        .await
        .kv_client();
    let prefix = format!("{}/", store.prefix());
    lock_testkit::scenarios::fences_rise_after_a_deletion_by_hand(
        &store,
        &LockKey::new("cleaned"),
        async {
            let options = etcd_client::DeleteOptions::new().with_prefix();
            let deleted = kv.delete(prefix, Some(options)).await.unwrap();
            assert!(deleted.deleted() >= 1, "{deleted:?}");
        },
    )
    .await;
}

/// A connection whose packets vanish (the proxy's blackhole) is never used
/// again once a request on it timed out, or was abandoned by its caller:
/// after the network heals, the next request goes on a new connection and
/// is answered at once, instead of hanging on the dead one.
#[tokio::test]
async fn after_a_timeout_or_an_abandoned_request_the_next_goes_on_a_new_connection() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let endpoint = endpoint().unwrap();
    let proxy = FaultProxy::start(&endpoint).unwrap();
    let via = support::store_with(&proxy.addr().to_string(), store.prefix(), |builder| {
        builder.timeouts(lock_etcd::Timeouts::default().with_request(Duration::from_millis(500)))
    })
    .await;
    let key = LockKey::new("job");
    via.get(&key).await.unwrap();

    // Timed out by the store.
    proxy.set(ProxyMode::Blackhole);
    let error = timeout(LIMIT, via.get(&key))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    proxy.set(ProxyMode::Pass);
    let read = timeout(Duration::from_millis(400), via.get(&key)).await;
    assert!(matches!(read, Ok(Ok(None))), "{read:?}");

    // Abandoned by its caller before the store's timeout.
    proxy.set(ProxyMode::Blackhole);
    let abandoned = timeout(Duration::from_millis(100), via.get(&key)).await;
    assert!(abandoned.is_err(), "{abandoned:?}");
    proxy.set(ProxyMode::Pass);
    let read = timeout(Duration::from_millis(400), via.get(&key)).await;
    assert!(matches!(read, Ok(Ok(None))), "{read:?}");
}

/// A release announced under `{prefix}/n/` wakes a waiter on another
/// connection at once.
#[tokio::test]
async fn an_announced_release_wakes_a_waiter_of_another_store_at_once() {
    let Some(store) = fresh_store().await else {
        return;
    };
    assert!(store.capabilities().announces_releases);
    let other = store_at(&endpoint().unwrap(), store.prefix()).await;
    drills::announced_hand_off(store, other).await;
}

/// Timeouts as long as `Duration::MAX` are taken without a panic.
#[tokio::test]
async fn the_longest_timeouts_are_taken_without_a_panic() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let slow = lock_etcd::EtcdStore::builder([endpoint().unwrap()], store.prefix())
        .timeouts(
            lock_etcd::Timeouts::default()
                .with_connect(Duration::MAX)
                .with_request(Duration::MAX),
        )
        .connect()
        .await
        .unwrap();
    assert_eq!(slow.get(&LockKey::new("job")).await.unwrap(), None);
}

/// Eight stores of their own race for one key, thirty times: a new key and a
/// released one that every writer has read (so each compares the same
/// revision). Exactly one wins each race, with the right fence; every loser
/// is shown the winner's record in the same round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let endpoint = endpoint().unwrap();
    let mut writers = Vec::new();
    for _ in 0..8 {
        writers.push(store_at(&endpoint, store.prefix()).await);
    }
    scenarios::racing_writers(&store, &writers, 30).await;
}

#[tokio::test]
async fn the_client_acquires_heartbeats_takes_over_and_releases() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let other = store_at(&endpoint().unwrap(), store.prefix()).await;
    scenarios::client_end_to_end(store, other).await;
}
