//! The lock client end to end on the PostgreSQL store: heartbeats, takeover,
//! release and shutdown; replies lost after a write applied, recognised by RVN;
//! a partition that leaves writes ambiguous; connections refused; and the
//! client drills every backend runs through the fault proxy
//! (`lock_testkit::drills`): a partitioned holder, and contention while a fifth
//! of the requests fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, Expect, Fence, LockClient, LockError, LockKey, StoreErrorKind,
};
use lock_memory::FaultyStore;
use lock_postgres::{PostgresStore, Timeouts};
use lock_testkit::drills;
use lock_testkit::proxy::{FaultProxy, ProxyMode, ScriptedFault};
use lock_testkit::records::acquire_write;
use tokio::time::{Instant, timeout};

use support::{client, fresh_store, same_table, url};

/// Every wait on a future that might never resolve is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

/// Timeouts short enough that a lost or blackholed statement fails well inside
/// the tests' leases.
fn drill_timeouts() -> Timeouts {
    Timeouts::default()
        .with_connect(Duration::from_millis(500))
        .with_statement(Duration::from_millis(300))
        .with_reply(Duration::from_millis(500))
}

/// A fault proxy in front of the test server, and a store on `store`'s table
/// reaching the server through it with one connection.
fn proxied(store: &PostgresStore) -> (FaultProxy, PostgresStore) {
    let url = url().expect("the table was created, so there is a server");
    let port = std::env::var("LOCK_POSTGRES_PORT").expect("./scripts/test sets LOCK_POSTGRES_PORT");
    let proxy = FaultProxy::start(&format!("127.0.0.1:{port}")).expect("start the fault proxy");
    let through = url.replacen(
        &format!("127.0.0.1:{port}/"),
        &format!("{}/", proxy.addr()),
        1,
    );
    assert_ne!(through, url, "the test URL names 127.0.0.1:{port}");
    let via = same_table(store, &through, |b| {
        b.timeouts(drill_timeouts()).max_connections(1)
    });
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
async fn end_to_end_heartbeats_takeover_release_and_shutdown() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let lease = Duration::from_millis(1000);
    // The holder reaches the table through a switch that can cut it off.
    let link = FaultyStore::new(same_table(&store, &url().unwrap(), |b| b), 1);
    let holder = LockClient::builder(link.clone())
        .owner("holder")
        .lease(lease)
        .heartbeat_period(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let first = store.get(&LockKey::new("job")).await.unwrap().unwrap();

    // Heartbeats keep it across several leases.
    tokio::time::sleep(lease * 3).await;
    assert!(guard.is_safe(), "{:?}", guard.state());
    let later = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!((later.owner.as_str(), later.fence), ("holder", first.fence));
    assert_ne!(later.rvn, first.rvn, "heartbeats wrote new versions");

    // The holder "crashes" (cut off from the table); a waiter takes over.
    let waiter = client(store.clone(), "waiter", lease);
    link.set_unavailable(true);
    let taken = timeout(
        LIMIT,
        waiter.acquire("job", AcquireOptions::new().wait(Duration::from_secs(10))),
    )
    .await
    .expect("bounded")
    .unwrap();
    // The store's clock proves the record's age, so the lease counts from
    // the holder's last heartbeat, before the cut (by a heartbeat period, or
    // more if that heartbeat ran late): what matters is that the holder had
    // stopped trusting it by then (checked below).
    assert_eq!(taken.fence(), Fence(first.fence.get() + 1));
    assert!(
        !guard.is_safe(),
        "the cut-off holder no longer trusts its lease"
    );
    link.set_unavailable(false);
    drop(guard);

    // Shutdown releases what the waiter holds.
    let other = waiter
        .acquire("other", AcquireOptions::new())
        .await
        .unwrap();
    let report = waiter.shutdown().await.unwrap();
    assert_eq!(report.released.len(), 2, "{report:?}");
    for key in ["job", "other"] {
        let record = store.get(&LockKey::new(key)).await.unwrap().unwrap();
        assert!(record.released, "{record:?}");
    }
    assert!(matches!(
        waiter.acquire("job", AcquireOptions::new()).await,
        Err(LockError::Shutdown)
    ));
    drop((taken, other));
    holder.shutdown().await.unwrap();
}

#[tokio::test]
async fn replies_lost_after_the_write_applied_are_recognised_and_nothing_is_left_held() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let key = LockKey::new("job");
    // Open the one connection first: a lost reply must be a statement's.
    via.get(&key).await.unwrap();
    let lease = Duration::from_secs(3);
    let holder = client(via, "holder", lease);

    // Acquire: the write applies, its reply is lost. The client reads its own
    // write back instead of waiting out "someone's" lease.
    proxy.lose_next_replies(1);
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

    // Heartbeat: its reply is lost; the lock stays safe through more than a
    // lease, because the next heartbeat finds the lost one's version.
    proxy.lose_next_replies(1);
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

    // Release: its reply is lost; the release still reports success.
    proxy.lose_next_replies(1);
    timeout(LIMIT, guard.release())
        .await
        .expect("bounded")
        .expect("a release whose reply was lost is recognised as applied");
    assert_eq!(proxy.stats().replies_lost, 3, "{:?}", proxy.stats());
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released, "{record:?}");

    let report = holder.shutdown().await.unwrap();
    assert!(
        report.failed.is_empty() && report.timed_out.is_empty(),
        "{report:?}"
    );
}

/// A partition: a write sent into it gets no reply within the reply timeout
/// and is ambiguous, a read is unavailable, and the silent connection is closed
/// so that the store works again as soon as the network heals. A connection
/// reset before anything reached the server is unavailable, nothing sent.
#[tokio::test]
async fn a_partition_makes_writes_ambiguous_and_the_store_recovers_when_it_heals() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let key = LockKey::new("job");
    via.get(&key).await.unwrap();

    proxy.set(ProxyMode::Blackhole);
    let started = Instant::now();
    let error = timeout(LIMIT, via.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    assert!(
        started.elapsed() >= drill_timeouts().reply,
        "{:?}",
        started.elapsed()
    );
    let error = timeout(LIMIT, via.get(&key))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");

    proxy.set(ProxyMode::Pass);
    // The blackholed write never reached the server.
    assert_eq!(store.get(&key).await.unwrap(), None);
    let held = timeout(LIMIT, via.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .expect("a new connection once the partition heals");
    assert!(matches!(held, lock_core::Outcome::Applied(_)), "{held:?}");

    // A connection reset before anything was forwarded: not sent.
    let (proxy, fresh) = proxied(&store);
    proxy.fail_next(ScriptedFault::ResetBeforeForwarding, 1);
    let error = timeout(
        LIMIT,
        fresh.put(&LockKey::new("other"), Expect::Vacant, acquire_write("b")),
    )
    .await
    .expect("bounded")
    .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert_eq!(store.get(&LockKey::new("other")).await.unwrap(), None);
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_holder(store, via, &proxy).await;
}

/// The pool keeps its connections open: a fifth of the requests fail, on open
/// connections and new ones, half before PostgreSQL saw them and half after
/// it answered.
#[tokio::test]
async fn a_fifth_of_requests_fail_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_store().await else {
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
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
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
    let (proxy, via) = proxied(&store);
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
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::reader_writer_under_faults(store, via, &proxy, faults).await;
}

/// A crashed holder's lock is taken over by a fresh process the first time it
/// looks once the lease has passed on the server's clock, in one refused
/// "if vacant" write (which returns the record and its age) and one takeover:
/// no lease of watching.
#[tokio::test]
async fn a_fresh_process_takes_a_crashed_holders_lock_by_the_servers_clock() {
    let Some(store) = fresh_store().await else {
        return;
    };
    assert_eq!(store.capabilities().clock, lock_core::StoreClock::Age);
    let lease = Duration::from_millis(1000);
    let crashed = client(store.clone(), "crashed", lease);
    let detached = crashed
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    let written = Instant::now();
    // A fresh process's one attempt, and the calls it made.
    let attempt = |owner: &'static str| {
        let counted = FaultyStore::new(store.clone(), 5);
        let fresh = LockClient::builder(counted.clone())
            .owner(owner)
            .lease(lease)
            .build()
            .unwrap();
        async move {
            let got = timeout(LIMIT, fresh.try_acquire("job", AcquireOptions::new()))
                .await
                .expect("bounded")
                .unwrap();
            (got, counted.calls(), fresh)
        }
    };
    let (young, calls, _) = attempt("early").await;
    assert!(young.is_none(), "a record younger than its lease is busy");
    assert_eq!(calls, 1);
    // Past lease × (1 + drift) since the write, with room for the statement.
    tokio::time::sleep_until(written + lease.mul_f64(1.01) + Duration::from_millis(50)).await;
    let started = Instant::now();
    let (taken, calls, fresh) = attempt("cron").await;
    let taken = taken.expect("the lease has passed on the server's clock");
    // At once, not after watching the record for lease × 1.01.
    assert!(started.elapsed() < lease, "{:?}", started.elapsed());
    assert_eq!(calls, 2, "one refused write and the takeover");
    assert_eq!(taken.fence(), Fence(detached.fence().get() + 1));
    assert_eq!(taken.took_over().unwrap().owner, "crashed");
    drop(detached);
    taken.release().await.unwrap();
    fresh.shutdown().await.unwrap();
    crashed.shutdown().await.unwrap();
}

/// A partitioned reader of a reader-writer lock stops trusting its read
/// before a writer going direct is admitted.
#[tokio::test]
async fn a_partitioned_reader_is_lost_before_a_writer_going_direct_is_admitted() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_reader(store, via, &proxy).await;
}

/// A release's `NOTIFY` wakes a waiter of another store (its own pool and
/// listening connection) at once.
#[tokio::test]
async fn an_announced_release_wakes_a_waiter_of_another_store_at_once() {
    let Some(store) = fresh_store().await else {
        return;
    };
    assert!(store.capabilities().announces_releases);
    let other = same_table(&store, &url().unwrap(), |b| b);
    drills::announced_hand_off(store, other).await;
}

/// A store on a pool or connection of the caller's own cannot listen (a
/// pool drops notifications): it says so, and its waiters poll.
#[tokio::test]
async fn a_store_on_the_callers_own_connection_does_not_claim_to_listen() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let connection = support::connect(&url().unwrap()).await;
    let own = PostgresStore::builder(store.table())
        .build_with_client(std::sync::Arc::new(connection))
        .unwrap();
    assert!(!own.capabilities().announces_releases);
    assert!(own.release_feed().is_none());
    let quiet = same_table(&store, &url().unwrap(), |b| b.announce_releases(false));
    assert!(!quiet.capabilities().announces_releases);
}

/// A table name too long for `<table>:released` (PostgreSQL's channels are
/// at most 63 bytes) still releases, and announces on a shorter channel; a
/// key too long to announce (over NOTIFY's 8,000-byte payload) still
/// releases, unannounced.
#[tokio::test]
async fn long_table_names_and_long_keys_release_and_announce_where_they_can() {
    let Some(url) = url() else {
        return;
    };
    let mut table = format!("l{}", uuid::Uuid::new_v4().simple()).repeat(2);
    table.truncate(60);
    assert!(table.len() > 55, "{table}");
    let store = PostgresStore::builder(&table).build_from_url(&url).unwrap();
    store.create_schema().await.unwrap();
    let result = lock_testkit::cases::releases_are_announced_where_the_store_says_so(
        std::sync::Arc::new(store.clone()),
    )
    .await;
    assert!(result.is_ok(), "{result:?}");
    let key = lock_core::LockKey::with_sort("\u{1}".repeat(1024), "\u{1}".repeat(1000));
    let holder = client(store, "holder", Duration::from_secs(5));
    let guard = holder.acquire(key, AcquireOptions::new()).await.unwrap();
    guard.release().await.unwrap();
    holder.shutdown().await.unwrap();
}
