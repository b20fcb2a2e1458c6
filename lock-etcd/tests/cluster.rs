//! etcd clusters each test starts for itself (with the etcd binary
//! `./scripts/test` installs): logins and permissions, and a member stopped
//! while a client holds a lock through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use etcd_client::Permission;
use lock_core::{AcquireOptions, ConditionalStore, Expect, Fence, LockKey, StoreErrorKind};
use lock_etcd::{EtcdStore, StoreConfigError, Timeouts};
use support::{LIMIT, client, start_cluster};
use tokio::time::{Instant, timeout};

/// A store on these members, with requests that time out well inside the
/// tests' leases.
async fn store_on(members: &[&support::Member], prefix: &str) -> EtcdStore {
    EtcdStore::builder(members.iter().map(|m| m.endpoint.clone()), prefix)
        .timeouts(
            Timeouts::default()
                .with_connect(Duration::from_millis(500))
                .with_request(Duration::from_millis(800)),
        )
        .connect()
        .await
        .unwrap()
}

/// Turn etcd's auth on, with a user `app` (password `app-pw`) that may read
/// and write under `prefix` only.
async fn enable_auth(endpoint: &str, prefix: &str) {
    let mut admin = support::raw_client(endpoint).await;
    admin.user_add("root", "root-pw", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.user_add("app", "app-pw", None).await.unwrap();
    admin.role_add("locks").await.unwrap();
    admin
        .role_grant_permission("locks", Permission::read_write(prefix).with_prefix())
        .await
        .unwrap();
    admin.user_grant_role("app", "locks").await.unwrap();
    admin.auth_enable().await.unwrap();
}

/// etcd forgets a login token it has not seen for `--auth-token-ttl`
/// seconds and refuses requests that carry it ("invalid auth token"): the
/// store logs in again and sends the request once more, so a store idle
/// for longer than that keeps working.
#[tokio::test]
async fn a_login_token_etcd_forgot_is_renewed() {
    let Some(members) =
        start_cluster(1, &["--auth-token", "simple", "--auth-token-ttl", "1"]).await
    else {
        return;
    };
    let endpoint = members[0].endpoint.clone();
    enable_auth(&endpoint, "renewed/").await;
    let store = EtcdStore::builder([&endpoint], "renewed")
        .user("app", "app-pw")
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("job");
    let first = store
        .put(&key, Expect::Vacant, support_write())
        .await
        .unwrap();
    let lock_core::Outcome::Applied(first) = first else {
        panic!("a vacant key is written: {first:?}");
    };
    // The server's clock: the token's time to live passes for real.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let read = store.get(&key).await.unwrap();
    assert_eq!(read.map(|record| record.rvn), Some(first.rvn.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = store
        .put(&key, Expect::Version(first.rvn), support_write())
        .await
        .unwrap();
    assert!(
        matches!(second, lock_core::Outcome::Applied(_)),
        "a write after the token expired applies once logged in again: {second:?}"
    );
}

/// A gauge of the member at `endpoint` (its `/metrics` page, on the client
/// port).
fn gauge(endpoint: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut connection = std::net::TcpStream::connect(endpoint).unwrap();
    write!(
        connection,
        "GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n"
    )
    .unwrap();
    let mut page = String::new();
    connection.read_to_string(&mut page).unwrap();
    page.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("{name} on {endpoint}/metrics"))
}

/// A store's watch of release announcements ends with the store: once every
/// handle of it is gone, the member has no watcher left. (The watch's own
/// stream of requests must end: dropping its replies alone would leave the
/// gRPC stream, the member's watcher and the connection behind.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_dropped_leaves_no_watch_behind() {
    let Some(members) = start_cluster(1, &[]).await else {
        return;
    };
    let endpoint = members[0].endpoint.clone();
    let watchers = "etcd_debugging_mvcc_watcher_total";
    let store = store_on(&[&members[0]], "watched").await;
    let holder = client(store.clone(), "holder", Duration::from_secs(5));
    let waiter = client(store.clone(), "waiter", Duration::from_secs(5));
    drop(store);
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    // A waiter that may wait watches the announcements.
    let waiting = tokio::spawn(async move {
        let got = waiter
            .acquire("job", AcquireOptions::new().wait(Duration::from_secs(20)))
            .await;
        (waiter, got)
    });
    let started = Instant::now();
    while gauge(&endpoint, watchers) < 1.0 {
        assert!(started.elapsed() < LIMIT, "the waiter never watched");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    guard.release().await.unwrap();
    let (waiter, got) = timeout(LIMIT, waiting).await.expect("bounded").unwrap();
    got.unwrap().release().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
    drop((holder, waiter));
    let dropped = Instant::now();
    while gauge(&endpoint, watchers) > 0.0 {
        assert!(
            dropped.elapsed() < LIMIT,
            "{} watchers left on the member after every store was dropped",
            gauge(&endpoint, watchers)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With etcd's auth on: a wrong password fails when the store is built, a
/// user may lock under the prefix it was granted, and a write elsewhere is
/// `Unauthorized`, saying what to grant.
#[tokio::test]
async fn a_wrong_password_and_a_prefix_not_granted_are_refused() {
    let Some(members) = start_cluster(1, &[]).await else {
        return;
    };
    let endpoint = members[0].endpoint.clone();
    enable_auth(&endpoint, "granted/").await;

    let error = EtcdStore::builder([&endpoint], "granted")
        .user("app", "wrong")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, StoreConfigError::Login { .. }), "{error}");
    assert!(!format!("{error:?}").contains("wrong"), "{error:?}");

    let url = format!("etcd://app:app-pw@{endpoint}/granted");
    let store = lock_etcd::EtcdStoreBuilder::from_url(&url)
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert!(!store.url().contains("app-pw"), "{}", store.url());
    let holder = client(store, "app", Duration::from_secs(5));
    let guard = timeout(LIMIT, holder.acquire("job", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert!(guard.fence() > Fence(0));
    guard.release().await.unwrap();
    holder.shutdown().await.unwrap();

    let elsewhere = EtcdStore::builder([&endpoint], "other")
        .user("app", "app-pw")
        .connect()
        .await
        .unwrap();
    let error = elsewhere
        .put(&LockKey::new("job"), Expect::Vacant, support_write())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(error.to_string().contains("grant"), "{error}");
}

fn support_write() -> lock_core::NewRecord {
    lock_core::NewRecord {
        owner: "app".into(),
        rvn: lock_core::Rvn::fresh(),
        lease: Duration::from_secs(20),
        released: false,
        fence: lock_core::FenceUpdate::Next,
        data: lock_core::DataUpdate::Keep,
        expires_at: None,
    }
}

/// A client that knows every member keeps its lock when one member is
/// killed mid-hold: its heartbeats go to the others, it stays safe through
/// three leases, and a waiter on the other members never gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_three_members_keeps_its_lock_when_one_is_killed() {
    let Some(mut members) = start_cluster(3, &[]).await else {
        return;
    };
    let lease = Duration::from_secs(3);
    let holder_store = store_on(&members.iter().collect::<Vec<_>>(), "failover").await;
    let waiter_store = store_on(&[&members[1], &members[2]], "failover").await;
    let holder = client(holder_store, "holder", lease);
    let waiter = client(waiter_store.clone(), "waiter", lease);
    let key = LockKey::new("job");
    let guard = timeout(LIMIT, holder.acquire(key.clone(), AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    let before = waiter_store.get(&key).await.unwrap().unwrap();
    members[0].kill();
    let killed = Instant::now();
    while killed.elapsed() < lease * 3 {
        let got = timeout(
            LIMIT,
            waiter.try_acquire(key.clone(), AcquireOptions::new()),
        )
        .await
        .expect("bounded")
        .unwrap();
        assert!(got.is_none(), "the waiter took a lock whose holder kept it");
        assert!(
            guard.is_safe(),
            "lost after {:?}: {:?}",
            killed.elapsed(),
            guard.state()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Read where nothing was killed: one request of the holder's store may
    // still go to the dead member (the lock client retries; a test's read
    // does not).
    let after = waiter_store.get(&key).await.unwrap().unwrap();
    assert_ne!(
        after.rvn, before.rvn,
        "heartbeats went on through the other members"
    );
    assert_eq!(after.owner, "holder");
    guard.release().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

/// A client that knows only one member, killed mid-hold, cannot heartbeat:
/// it says its lease is in danger, and stops calling itself safe before a
/// waiter on the other members takes the lock over with the next fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_only_member_is_killed_is_unsafe_before_a_waiter_takes_over() {
    let Some(mut members) = start_cluster(3, &[]).await else {
        return;
    };
    let lease = Duration::from_secs(3);
    let holder_store = store_on(&[&members[0]], "lost").await;
    let waiter_store = store_on(&[&members[1], &members[2]], "lost").await;
    let holder = client(holder_store, "holder", lease);
    let waiter = client(waiter_store, "waiter", lease);
    let key = LockKey::new("job");
    let guard = timeout(LIMIT, holder.acquire(key.clone(), AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    let watch = guard.until_unsafe();
    members[0].kill();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            let taken = waiter
                .acquire(key, AcquireOptions::new().wait(Duration::from_secs(20)))
                .await;
            (taken, Instant::now())
        }
    });
    timeout(LIMIT, watch)
        .await
        .expect("the holder learns its lease is in danger");
    let unsafe_at = Instant::now();
    assert!(!guard.is_safe());
    let (taken, taken_at) = timeout(LIMIT, waiting).await.expect("bounded").unwrap();
    let taken = taken.unwrap();
    assert!(
        unsafe_at <= taken_at,
        "the waiter took over while the holder was safe"
    );
    assert_eq!(taken.fence(), Fence(guard.fence().get() + 1));
    taken.release().await.unwrap();
    drop(guard);
    waiter.shutdown().await.unwrap();
    let _ = timeout(LIMIT, holder.shutdown()).await;
}
