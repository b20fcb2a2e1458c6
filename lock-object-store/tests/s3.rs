//! The object-store backend on moto's S3 (started by `./scripts/test`, served
//! one request at a time): the conformance suite, racing writers, the bucket
//! check, the client end to end, and the shared fault drills through a TCP
//! fault proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, Expect, FenceUpdate, LockClient, LockKey, NewRecord, Outcome,
    StoreErrorKind,
};
use lock_object_store::{BucketError, BucketStore};
use lock_testkit::proxy::{FaultProxy, ProxyMode, ScriptedFault};
use lock_testkit::records::acquire_write;
use lock_testkit::{drills, scenarios};
use support::proxied::{LIMIT, through_proxy};
use support::{fresh_s3_store, s3_endpoint, s3_store_at};
use tokio::time::{Instant, timeout};

mod conformance {
    lock_testkit::conformance_suite!(crate::support::S3Factory);
}

/// A store on `store`'s prefix reaching moto through a new fault proxy.
fn proxied(store: &BucketStore) -> (FaultProxy, BucketStore) {
    let endpoint = s3_endpoint().expect("the store was made, so there is a server");
    through_proxy(&endpoint, store, s3_store_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let endpoint = s3_endpoint().unwrap();
    let writers: Vec<BucketStore> = (0..8)
        .map(|_| s3_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5)))
        .collect();
    scenarios::racing_writers(&store, &writers, 30).await;
}

#[tokio::test]
async fn the_bucket_check_passes_on_moto_and_a_missing_bucket_is_named() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    store.validate_bucket().await.unwrap();
    assert!(store.list(None, None, 10).await.unwrap().records.is_empty());

    let endpoint = s3_endpoint().unwrap();
    let missing = BucketStore::builder()
        .option("aws_endpoint", &endpoint)
        .option("aws_allow_http", "true")
        .option("aws_region", "us-east-1")
        .option("aws_access_key_id", "testing")
        .option("aws_secret_access_key", "testing")
        .build_from_url("s3://no-such-bucket-for-locks/x")
        .unwrap();
    let error = missing.validate_bucket().await.unwrap_err();
    assert!(matches!(error, BucketError::Missing { .. }), "{error:?}");
    assert!(
        error.to_string().contains("no-such-bucket-for-locks"),
        "{error}"
    );
}

#[tokio::test]
async fn a_store_not_reached_fails_as_unavailable_and_nothing_is_written() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    // Nothing listens on port 9 of loopback: the connection is refused.
    let nowhere = s3_store_at(
        "http://127.0.0.1:9",
        store.prefix().as_ref(),
        Duration::from_secs(1),
    );
    let key = LockKey::new("job");
    let error = nowhere
        .put(&key, Expect::Vacant, acquire_write("a"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// A PUT refused before a byte was sent (nothing listens any more) did not
/// apply: `Unavailable`, so the client repeats it rather than reading. The
/// store knows the version, so the PUT is the first request.
#[tokio::test]
async fn a_write_whose_connection_is_refused_is_unavailable_and_applied_nothing() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let key = LockKey::new("job");
    let held = match store
        .put(&key, Expect::Vacant, acquire_write("a"))
        .await
        .unwrap()
    {
        Outcome::Applied(record) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(via.get(&key).await.unwrap().as_ref(), Some(&held));
    drop(proxy);
    let heartbeat = NewRecord {
        fence: FenceUpdate::Keep,
        ..acquire_write("a")
    };
    let error = via
        .put(&key, Expect::Version(held.rvn.clone()), heartbeat)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert_eq!(store.get(&key).await.unwrap(), Some(held));
}

#[tokio::test]
async fn the_client_acquires_heartbeats_takes_over_and_releases() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let endpoint = s3_endpoint().unwrap();
    let other = s3_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5));
    scenarios::client_end_to_end(store, other).await;
}

#[tokio::test]
async fn replies_lost_after_the_write_applied_are_recognised_and_nothing_is_left_held() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let holder = support::client(via, "holder", Duration::from_secs(3));
    let key = LockKey::new("job");
    // The read before the create passes; the create applies, its reply is
    // lost. The client reads its own write back instead of waiting out
    // "someone's" lease.
    proxy.fail_next(ScriptedFault::Forward, 1);
    proxy.fail_next(ScriptedFault::LoseReply, 1);
    let started = Instant::now();
    let guard = timeout(
        LIMIT,
        holder.acquire(
            key.clone(),
            AcquireOptions::new().wait(Duration::from_secs(10)),
        ),
    )
    .await
    .expect("bounded")
    .expect("the acquire recognises its own write");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(proxy.stats().replies_lost >= 1, "{:?}", proxy.stats());
    assert!(guard.took_over().is_none());
    let fence = guard.fence();
    guard.release().await.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released);
    assert_eq!(record.fence, fence, "one acquisition, not two");
    holder.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_holder(store, via, &proxy).await;
}

#[tokio::test]
async fn a_fifth_of_requests_fail_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::contention_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn a_semaphore_under_failed_exchanges_never_has_more_safe_holders_than_permits() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::semaphore_under_faults(store, via, &proxy, faults).await;
}

/// With a declared clock bound, a fresh process takes a crashed holder's
/// lock once `Last-Modified + 1 s + lease × (1 + drift) + bound` has passed
/// on its wall clock (S3 gives whole seconds; moto's clock is this
/// machine's), in one read and one write; without one it watches the record.
#[tokio::test]
async fn with_a_clock_bound_a_fresh_process_takes_a_crashed_holders_lock_by_last_modified() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    assert!(matches!(
        store.capabilities().clock,
        lock_core::StoreClock::Wall { granularity } if granularity == Duration::from_secs(1)
    ));
    let lease = Duration::from_millis(1000);
    let bound = Duration::from_millis(200);
    let crashed = support::client(store.clone(), "crashed", lease);
    let detached = crashed
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    // No write of the holder's comes after this (its heartbeats stopped).
    let last_write = Instant::now();
    let attempt = |owner: &'static str, bound: Option<Duration>| {
        let fresh_store = support::another_process(&store);
        async move {
            let counted = lock_memory::FaultyStore::new(fresh_store, 4);
            let mut builder = LockClient::builder(counted.clone())
                .owner(owner)
                .lease(lease);
            if let Some(bound) = bound {
                builder = builder.max_clock_difference(bound);
            }
            let fresh = builder.build().unwrap();
            let got = timeout(LIMIT, fresh.try_acquire("job", AcquireOptions::new()))
                .await
                .expect("bounded")
                .unwrap();
            (got, counted.calls())
        }
    };
    // One second of granularity on top of the lease and the bound.
    tokio::time::sleep_until(
        last_write
            + Duration::from_secs(1)
            + lease.mul_f64(1.01)
            + bound
            + Duration::from_millis(50),
    )
    .await;
    let (watching, _) = attempt("watcher", None).await;
    assert!(watching.is_none(), "without a bound the record is watched");
    let (taken, calls) = attempt("cron", Some(bound)).await;
    let taken = taken.expect("taken over by Last-Modified");
    assert_eq!(calls, 2, "one refused write and the takeover");
    assert_eq!(taken.took_over().unwrap().owner, "crashed");
    assert!(taken.fence() > detached.fence());
    taken.release().await.unwrap();
    crashed.shutdown().await.unwrap();
}

/// Sets of keys through the same faults: a bucket writes one object per
/// request, so each set is taken key by key, in one order.
#[tokio::test]
async fn sets_of_keys_under_failed_exchanges_are_all_or_nothing() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::sets_under_faults(store, via, &proxy, faults).await;
}

#[tokio::test]
async fn a_reader_writer_lock_under_failed_exchanges_never_has_a_writer_beside_another() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::reader_writer_under_faults(store, via, &proxy, faults).await;
}

/// A partitioned reader of a reader-writer lock stops trusting its read
/// before a writer going direct is admitted.
#[tokio::test]
async fn a_partitioned_reader_is_lost_before_a_writer_going_direct_is_admitted() {
    let Some(store) = fresh_s3_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_reader(store, via, &proxy).await;
}
