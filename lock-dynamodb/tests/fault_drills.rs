//! Fault drills against the emulator through a TCP fault proxy
//! (`lock_testkit::proxy`): replies lost after the write applied, a partitioned
//! holder, and a fifth of all connections reset under contention (the last two
//! are `lock_testkit::drills`, which the PostgreSQL store runs too). Each drill
//! checks the timestamps it depends on and the records left in the table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, ConditionalStore, Fence, LockKey};
use lock_dynamodb::{DynamoDbStore, Layout, Timeouts};
use lock_testkit::drills;
use lock_testkit::proxy::{FaultProxy, ProxyMode, ScriptedFault};
use tokio::time::{Instant, timeout};

use support::{client, fresh_store, sdk_config};

/// Every wait on a future that might never resolve is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

/// Timeouts short enough that a lost or blackholed request fails well inside
/// the drills' leases (the defaults are sized for leases of 20 s).
fn drill_timeouts() -> Timeouts {
    Timeouts::default()
        .with_connect(Duration::from_millis(300))
        .with_attempt(Duration::from_millis(400))
        .with_operation(Duration::from_millis(1200))
}

/// A store reaching `store`'s table through a new fault proxy.
fn proxied(store: &DynamoDbStore) -> (FaultProxy, DynamoDbStore) {
    let endpoint = support::endpoint().expect("the table was created, so there is an emulator");
    let proxy = FaultProxy::start(&endpoint).expect("start the fault proxy");
    // One attempt per read too, so a fault reaches the client instead of
    // being retried by the SDK.
    let via = DynamoDbStore::builder(store.table())
        .layout(store.layout().clone())
        .timeouts(drill_timeouts())
        .read_attempts(1)
        .build_with_config(sdk_config(&proxy.url()))
        .expect("valid store configuration");
    (proxy, via)
}

/// Wait until `done` holds, polling, at most `LIMIT`.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn replies_lost_after_the_write_applied_are_recognised_and_nothing_is_left_held() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let lease = Duration::from_secs(3);
    let holder = client(via, "holder", lease);
    let key = LockKey::new("job");

    // Acquire: the write applies, its reply is lost. The client reads its own
    // write back instead of waiting out "someone's" lease.
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
    assert_eq!(proxy.stats().replies_lost, 1, "{:?}", proxy.stats());
    assert!(
        started.elapsed() < lease / 2,
        "recognised at once, not waited out: {:?}",
        started.elapsed()
    );
    let first = guard.fence();
    assert!(guard.took_over().is_none(), "{:?}", guard.took_over());
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.released), ("holder", false));

    // Heartbeat: the next request is a heartbeat; its reply is lost. The lock
    // stays safe through more than a lease: the next heartbeat finds the lost
    // one's version and knows it for its own.
    proxy.fail_next(ScriptedFault::LoseReply, 1);
    eventually("a heartbeat's reply is lost", || {
        proxy.stats().replies_lost == 2
    })
    .await;
    let lost = guard.until_ended();
    tokio::pin!(lost);
    let through = tokio::time::sleep(lease + lease / 2);
    tokio::select! {
        reason = &mut lost => panic!("the lock was lost after a lost heartbeat reply: {reason}"),
        () = through => {}
    }
    assert!(guard.is_safe(), "{:?}", guard.state());
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.fence), ("holder", first));

    // Release: its reply is lost; the release still reports success and the
    // record is released.
    proxy.fail_next(ScriptedFault::LoseReply, 1);
    timeout(LIMIT, guard.release())
        .await
        .expect("bounded")
        .expect("a release whose reply was lost is recognised as applied");
    assert_eq!(proxy.stats().replies_lost, 3, "{:?}", proxy.stats());
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released, "{record:?}");

    // Release by version: its read goes through, its write's reply is lost.
    let guard = holder
        .acquire(key.clone(), AcquireOptions::new())
        .await
        .unwrap();
    let detached = guard.detach().await.unwrap();
    assert_eq!(detached.fence(), Fence(first.get() + 1));
    proxy.fail_next(ScriptedFault::Forward, 1);
    proxy.fail_next(ScriptedFault::LoseReply, 1);
    let released = timeout(
        LIMIT,
        holder.release_version(key.clone(), detached.version()),
    )
    .await
    .expect("bounded")
    .expect("a release by version whose reply was lost is recognised as applied");
    assert_eq!(released.fence, Fence(first.get() + 1));
    assert_eq!(proxy.stats().replies_lost, 4, "{:?}", proxy.stats());
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released, "{record:?}");
    assert_eq!(record.fence, Fence(first.get() + 1));

    let report = holder.shutdown().await.unwrap();
    assert!(
        report.failed.is_empty() && report.timed_out.is_empty(),
        "{report:?}"
    );
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_holder(store, via, &proxy).await;
}

/// The emulator closes every connection after one request: failing a fifth of
/// the new connections fails a fifth of the requests.
#[tokio::test]
async fn a_fifth_of_connections_reset_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::ResetSome {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::contention_under_faults(store, via, &proxy, faults).await;
}

/// A semaphore through the same faults, on both table layouts: without a sort
/// key (a header and one read per slot) and with one (one query per poll).
#[tokio::test]
async fn a_semaphore_under_reset_connections_never_has_more_safe_holders_than_permits() {
    for layout in [Layout::native(), Layout::native().with_sort_key("sort_key")] {
        let Some(store) = fresh_store(layout).await else {
            return;
        };
        let (proxy, via) = proxied(&store);
        let faults = ProxyMode::ResetSome {
            fraction: 0.2,
            seed: drills::drill_seed(),
        };
        drills::semaphore_under_faults(store, via, &proxy, faults).await;
    }
}

/// Sets of keys through the same faults, in one transaction where every key
/// is free, on both table layouts.
#[tokio::test]
async fn sets_of_keys_under_reset_connections_are_all_or_nothing() {
    for layout in [Layout::native(), Layout::native().with_sort_key("sort_key")] {
        let Some(store) = fresh_store(layout).await else {
            return;
        };
        let (proxy, via) = proxied(&store);
        let faults = ProxyMode::ResetSome {
            fraction: 0.2,
            seed: drills::drill_seed(),
        };
        drills::sets_under_faults(store, via, &proxy, faults).await;
    }
}

/// A reader-writer lock through the same faults, on both table layouts.
#[tokio::test]
async fn a_reader_writer_lock_under_reset_connections_never_has_a_writer_beside_another() {
    for layout in [Layout::native(), Layout::native().with_sort_key("sort_key")] {
        let Some(store) = fresh_store(layout).await else {
            return;
        };
        let (proxy, via) = proxied(&store);
        let faults = ProxyMode::ResetSome {
            fraction: 0.2,
            seed: drills::drill_seed(),
        };
        drills::reader_writer_under_faults(store, via, &proxy, faults).await;
    }
}

/// A partitioned reader of a reader-writer lock stops trusting its read
/// before a writer going direct is admitted.
#[tokio::test]
async fn a_partitioned_reader_is_lost_before_a_writer_going_direct_is_admitted() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_reader(store, via, &proxy).await;
}
