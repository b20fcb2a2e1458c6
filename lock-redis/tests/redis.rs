//! The Redis backend on the server `./scripts/test` starts: the conformance
//! suite, racing writers, fences that survive deletion and expiry, ages on
//! the server's clock, errors, the client end to end, the shared fault
//! drills through a TCP fault proxy, and the checks made when a store
//! connects, on servers the tests start themselves.
//!
//! Compiled twice: as the test binary `redis` it runs on Redis, and as a
//! module of the test binary `valkey` (`tests/valkey.rs`) on Valkey, each on
//! the server `./scripts/test` started for it and servers of its own started
//! with the same binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, Expect, Fence, LockKey, NewRecord, Outcome, StoreClock,
    StoreErrorKind, WriteTime,
};
use lock_redis::{RedisStore, StoreConfigError, Timeouts};
use lock_testkit::proxy::{FaultProxy, ProxyMode};
use lock_testkit::records::{acquire_write, applied, heartbeat_of, release_of};
use lock_testkit::{drills, scenarios};
use support::{LIMIT, client, command, fresh_store, start_server, store_at, url};
use tokio::time::{Instant, timeout};

mod conformance {
    lock_testkit::conformance_suite!(super::support::PrefixFactory);
}

/// A store on `store`'s prefix reaching Redis through a new fault proxy.
async fn proxied(store: &RedisStore) -> (FaultProxy, RedisStore) {
    let url = url().expect("the store was made, so there is a server");
    let proxy = FaultProxy::start(&url.replace("redis://", "")).unwrap();
    let via = store_at(&format!("redis://{}", proxy.addr()), store.prefix()).await;
    (proxy, via)
}

/// The fence floor outlives a released record that expired, and a record
/// deleted (delete-on-release, `lockctl release --force`): the next
/// holder's fence is still higher, so a holder paused across the deletion
/// is refused at a fenced resource.
#[tokio::test]
async fn fences_keep_rising_after_a_released_record_expires_and_after_a_delete() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let key = LockKey::with_sort("jobs", "a");
    let first = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("a"))
            .await
            .unwrap(),
    );
    assert_eq!(first.fence, Fence(1));
    applied(
        store
            .delete(&key, Expect::Version(first.rvn.clone()))
            .await
            .unwrap(),
    );
    assert_eq!(store.get(&key).await.unwrap(), None);
    let restarted = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("b"))
            .await
            .unwrap(),
    );
    assert_eq!(
        restarted.fence,
        Fence(2),
        "the fences go on above the deleted record's"
    );
    applied(
        store
            .put(
                &key,
                Expect::Version(restarted.rvn.clone()),
                release_of(&restarted),
            )
            .await
            .unwrap(),
    );
    let second = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("b"))
            .await
            .unwrap(),
    );
    assert_eq!(second.fence, Fence(3));

    // Released with an expiry time one second ahead: Redis removes the
    // record, and the fence goes on from the floor.
    let in_a_second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let release = NewRecord {
        expires_at: Some(in_a_second),
        ..release_of(&second)
    };
    applied(
        store
            .put(&key, Expect::Version(second.rvn.clone()), release)
            .await
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.get(&key).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the released record never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An expired record leaves the listing too.
    assert!(store.list(None, None, 10).await.unwrap().records.is_empty());
    let third = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("c"))
            .await
            .unwrap(),
    );
    assert_eq!(
        third.fence,
        Fence(4),
        "the floor outlived the expired record"
    );
    // A held record never expires, whatever expiry time it carries.
    let ttl = command(&url().unwrap(), &["PTTL", &store.record_key(&key)]).await;
    assert_eq!(ttl, lock_redis::redis::Value::Int(-1));
}

/// Reads carry the record's age on the server's clock, so a fresh process
/// takes a crashed holder's lock at its first look once the lease has
/// passed: one refused write and the takeover.
#[tokio::test]
async fn a_fresh_process_takes_a_crashed_holders_lock_by_the_servers_clock() {
    let Some(store) = fresh_store().await else {
        return;
    };
    assert_eq!(store.capabilities().clock, StoreClock::Age);
    let key = LockKey::new("job");
    let record = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("a"))
            .await
            .unwrap(),
    );
    assert_eq!(record.written, Some(WriteTime::Ago(Duration::ZERO)));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let Some(WriteTime::Ago(age)) = store.get(&key).await.unwrap().unwrap().written else {
        panic!("a read says how old the record is");
    };
    assert!(
        age >= Duration::from_millis(250) && age < Duration::from_secs(5),
        "{age:?}"
    );

    let lease = Duration::from_millis(800);
    let crashed = client(store.clone(), "crashed", lease);
    let detached = crashed
        .acquire("crash", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    tokio::time::sleep(lease.mul_f64(1.02) + Duration::from_millis(100)).await;
    let fresh = client(store.clone(), "fresh", lease);
    let started = Instant::now();
    let taken = timeout(LIMIT, fresh.try_acquire("crash", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap()
        .expect("the lease has passed on the server's clock");
    assert!(started.elapsed() < lease, "{:?}", started.elapsed());
    assert_eq!(taken.fence(), Fence(2));
    drop(detached);
    taken.release().await.unwrap();
    fresh.shutdown().await.unwrap();
    crashed.shutdown().await.unwrap();
}

/// A record's age is the reading node's `TIME` minus the writing node's
/// stamp: moved to a node whose clock is ahead (a failover, a slot
/// migration, a restore: `DUMP`/`RESTORE` here), every record would look
/// that much older, and a fresh process would take a live holder's lock at
/// once. An age is only computed on the node that wrote the record; on
/// another, the record's age is unknown and a fresh client watches it for a
/// lease.
#[tokio::test]
async fn a_fresh_client_on_a_node_whose_clock_is_ahead_does_not_take_a_live_lock() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let lease = Duration::from_secs(10);
    let holder = client(store.clone(), "holder", lease);
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let key = LockKey::new("job");
    let record_key = store.record_key(&key);
    let ahead = Duration::from_secs(60);
    let (node, faked) = match support::start_server_ahead(ahead).await {
        Some(node) => (node, true),
        // Debian's redis-server does not start under libfaketime: a node of
        // the same clock, and the stamp moved back by as much, give the
        // reading node the same difference.
        None => (start_server(&[]).await.unwrap(), false),
    };
    support::copy_key(&url().unwrap(), &node.url(), &record_key).await;
    if faked {
        let skew = support::server_millis(&node.url()).await
            - support::server_millis(&url().unwrap()).await;
        assert!(skew > 50_000, "the node's clock is ahead: {skew} ms");
    } else {
        eprintln!("faketime could not start this binary: the copy's stamp is moved back instead");
        let stamp: String = lock_redis::redis::from_redis_value(
            command(&node.url(), &["HGET", &record_key, "t"]).await,
        )
        .unwrap();
        let moved = stamp.parse::<u64>().unwrap() - 60_000;
        command(&node.url(), &["HSET", &record_key, "t", &moved.to_string()]).await;
    }
    let on_node = store_at(&node.url(), store.prefix()).await;
    let fresh = client(on_node.clone(), "fresh", lease);
    let taken = timeout(LIMIT, fresh.try_acquire("job", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert!(
        taken.is_none(),
        "a fresh client on a node {ahead:?} ahead took a live holder's lock at once"
    );
    // The record read there has no age: it was written on another node.
    assert_eq!(on_node.get(&key).await.unwrap().unwrap().written, None);
    assert!(guard.is_safe());
    guard.release().await.unwrap();
    fresh.shutdown().await.unwrap();
    holder.shutdown().await.unwrap();
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
    for _ in 0..10 {
        let page = store.list(Some("p"), cursor, 2).await.unwrap();
        assert!(page.records.len() <= 2);
        seen.extend(page.records.into_iter().map(|r| r.key));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
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
async fn a_store_not_reached_is_refused_when_made_and_a_lost_server_is_unavailable() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let error = RedisStore::builder("redis://127.0.0.1:9", "x")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, StoreConfigError::Connect { .. }), "{error}");
    // A server that goes away after the store was made: nothing was sent.
    let Some(mut own) = start_server(&[]).await else {
        return;
    };
    let lost = store_at(&own.url(), store.prefix()).await;
    own.kill();
    let error = timeout(
        LIMIT,
        lost.put(&LockKey::new("job"), Expect::Vacant, acquire_write("a")),
    )
    .await
    .expect("bounded")
    .unwrap_err();
    assert!(
        matches!(
            error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Ambiguous
        ),
        "{error}"
    );
}

/// A script's reply lost is ambiguous; the partition's registration before
/// a lock's first write is not (the lock's write was not sent).
#[tokio::test]
async fn a_write_whose_reply_is_lost_is_ambiguous() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    let key = LockKey::with_sort("jobs", "a");
    via.get(&key).await.unwrap();
    proxy.lose_next_replies(1);
    let error = timeout(LIMIT, via.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert!(
        error.to_string().contains("register the partition"),
        "{error}"
    );
    assert_eq!(
        store.get(&key).await.unwrap(),
        None,
        "the lock's write was not sent"
    );
    // Once a write registered the partition, the next is the script alone.
    via.put(
        &LockKey::with_sort("jobs", "c"),
        Expect::Vacant,
        acquire_write("c"),
    )
    .await
    .unwrap();
    let key = LockKey::with_sort("jobs", "b");
    proxy.lose_next_replies(1);
    let error = timeout(LIMIT, via.put(&key, Expect::Vacant, acquire_write("a")))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().owner, "a");
    // The next request goes on a new connection and is answered.
    assert!(via.get(&key).await.unwrap().is_some());
}

/// A connection whose packets vanish is not used again once a request on
/// it timed out or was abandoned.
#[tokio::test]
async fn after_a_timeout_or_an_abandoned_request_the_next_goes_on_a_new_connection() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let redis_url = url().unwrap();
    let proxy = FaultProxy::start(&redis_url.replace("redis://", "")).unwrap();
    let via = support::store_with(&format!("redis://{}", proxy.addr()), store.prefix(), |b| {
        b.timeouts(Timeouts::default().with_request(Duration::from_millis(500)))
    })
    .await;
    let key = LockKey::new("job");
    via.get(&key).await.unwrap();
    proxy.set(ProxyMode::Blackhole);
    let error = timeout(LIMIT, via.get(&key))
        .await
        .expect("bounded")
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    proxy.set(ProxyMode::Pass);
    let read = timeout(Duration::from_millis(400), via.get(&key)).await;
    assert!(matches!(read, Ok(Ok(None))), "{read:?}");

    proxy.set(ProxyMode::Blackhole);
    let abandoned = timeout(Duration::from_millis(100), via.get(&key)).await;
    assert!(abandoned.is_err(), "{abandoned:?}");
    proxy.set(ProxyMode::Pass);
    let read = timeout(Duration::from_millis(400), via.get(&key)).await;
    assert!(matches!(read, Ok(Ok(None))), "{read:?}");
}

#[tokio::test]
async fn a_set_of_free_keys_is_taken_in_one_script() {
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
    group.release().await.unwrap();
    holder.shutdown().await.unwrap();
}

/// A release is published on the store's channel, naming the lock.
#[tokio::test]
async fn a_release_is_announced_on_the_channel() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let client_ = lock_redis::redis::Client::open(url().unwrap()).unwrap();
    let mut pubsub = client_.get_async_pubsub().await.unwrap();
    pubsub.subscribe(store.release_channel()).await.unwrap();
    let key = LockKey::with_sort("jobs", "a b");
    let held = applied(
        store
            .put(&key, Expect::Vacant, acquire_write("a"))
            .await
            .unwrap(),
    );
    store
        .put(&key, Expect::Version(held.rvn.clone()), release_of(&held))
        .await
        .unwrap();
    use futures_util::StreamExt as _;
    let message = timeout(LIMIT, pubsub.on_message().next())
        .await
        .expect("bounded")
        .unwrap();
    let payload: String = message.get_payload().unwrap();
    assert_eq!(payload, "jobs/sa%20b");
}

#[tokio::test]
async fn a_server_that_evicts_or_refuses_scripts_is_refused_and_acl_users_lock() {
    let Some(evicting) = start_server(&["--maxmemory-policy", "allkeys-lru"]).await else {
        return;
    };
    let error = RedisStore::builder(evicting.url(), "x")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(error, StoreConfigError::Evicts { .. }), "{error}");
    assert!(error.to_string().contains("noeviction"), "{error}");

    let Some(acl) = start_server(&[]).await else {
        return;
    };
    command(
        &acl.url(),
        &[
            "ACL",
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-@scripting",
        ],
    )
    .await;
    let url = format!("redis://noscripts:pw@127.0.0.1:{}", acl.port);
    let error = RedisStore::builder(&url, "x").connect().await.unwrap_err();
    assert!(
        matches!(error, StoreConfigError::ScriptsRefused { .. }),
        "{error}"
    );
    assert!(!error.to_string().contains(":pw@"), "{error}");
    let wrong = format!("redis://noscripts:wrong@127.0.0.1:{}", acl.port);
    let error = RedisStore::builder(&wrong, "x")
        .connect()
        .await
        .unwrap_err();
    match &error {
        StoreConfigError::Connect { source, .. } => {
            assert_eq!(source.kind(), StoreErrorKind::Unauthorized, "{error}")
        }
        other => panic!("{other}"),
    }

    // The user of docs/redis.md's Permissions (read from the doc) locks,
    // releases and lists.
    support::create_documented_user(&acl.url()).await;
    let url = format!("redis://locks:secret@127.0.0.1:{}", acl.port);
    let store = RedisStore::builder(&url, "locks").connect().await.unwrap();
    let holder = client(store.clone(), "holder", Duration::from_secs(5));
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(store.list(None, None, 10).await.unwrap().records.len(), 1);
    guard.release().await.unwrap();
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    applied(
        store
            .delete(&LockKey::new("job"), Expect::Version(record.rvn))
            .await
            .unwrap(),
    );
    holder.shutdown().await.unwrap();
    // A user who may not publish the release: the release is refused before
    // anything is written (a script keeps what it wrote before failing).
    command(
        &acl.url(),
        &[
            "ACL",
            "SETUSER",
            "mute",
            "on",
            ">secret",
            "~locks:*",
            "resetchannels",
            "+@scripting",
            "+hgetall",
            "+hget",
            "+hset",
            "+hdel",
            "+del",
            "+expireat",
            "+zadd",
            "+zrem",
            "+zrange",
            "+publish",
            "+time",
            "+ping",
            "+info",
        ],
    )
    .await;
    let mute_url = format!("redis://mute:secret@127.0.0.1:{}", acl.port);
    let mute = RedisStore::builder(&mute_url, "locks")
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("muted");
    let held = applied(
        mute.put(&key, Expect::Vacant, acquire_write("a"))
            .await
            .unwrap(),
    );
    let error = mute
        .put(&key, Expect::Version(held.rvn.clone()), release_of(&held))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(error.to_string().contains("publish"), "{error}");
    let after = mute.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (after.rvn, after.released),
        (held.rvn, false),
        "nothing was written"
    );

    // Outside its keys: refused, saying what to grant.
    let elsewhere = RedisStore::builder(&url, "other").connect().await.unwrap();
    let error = elsewhere
        .put(&LockKey::new("job"), Expect::Vacant, acquire_write("a"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");

    let Some(cluster) = start_server(&["--cluster-enabled", "yes"]).await else {
        return;
    };
    // A lone cluster node serves no slot: refused, saying so.
    let error = RedisStore::builder(cluster.url(), "x")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreConfigError::ClusterNotReady { .. }),
        "{error}"
    );
}

/// With `wait_for_replicas`, a write a replica acknowledged is applied; once
/// the replica is gone, a write is ambiguous (applied on the primary only).
#[tokio::test]
async fn waiting_for_a_replica_confirms_writes_and_is_ambiguous_without_it() {
    let Some(primary) = start_server(&[]).await else {
        return;
    };
    let port = primary.port.to_string();
    let Some(mut replica) = start_server(&["--replicaof", "127.0.0.1", &port]).await else {
        return;
    };
    let store = support::store_with(&primary.url(), "acks", |b| {
        b.wait_for_replicas(1, Duration::from_secs(2))
    })
    .await;
    let key = LockKey::new("job");
    // The replica may still be syncing: the first writes may wait it out.
    let deadline = Instant::now() + LIMIT;
    let held = loop {
        match store.put(&key, Expect::Vacant, acquire_write("a")).await {
            Ok(outcome) => break applied(outcome),
            Err(error) if error.is_ambiguous() && Instant::now() < deadline => {
                let _ = store.delete(&key, Expect::Vacant).await;
                if let Some(record) = store.get(&key).await.unwrap() {
                    let _ = store.delete(&key, Expect::Version(record.rvn)).await;
                }
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert!(held.fence.get() >= 1, "{held:?}");
    // A write waiting for replicas holds up nobody else's requests: its WAIT
    // is on a connection of its own.
    let write = tokio::spawn({
        let (store, key, held) = (store.clone(), key.clone(), held.clone());
        async move {
            store
                .put(&key, Expect::Version(held.rvn.clone()), heartbeat_of(&held))
                .await
        }
    });
    replica.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read = timeout(
        Duration::from_millis(500),
        store.get(&LockKey::new("other")),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(None))),
        "a read waited behind a WAIT: {read:?}"
    );
    let heartbeat = write.await.unwrap();
    let held = match heartbeat {
        Ok(Outcome::Applied(record)) => record,
        Err(error) if error.is_ambiguous() => {
            // Applied on the primary only: this store does not show it as
            // it is until the replica acknowledges it; a store that does not
            // wait for replicas reads it.
            let read = store.get(&key).await.unwrap_err();
            assert_eq!(read.kind(), StoreErrorKind::Unavailable, "{read}");
            let plain = store_at(&primary.url(), "acks").await;
            plain.get(&key).await.unwrap().unwrap()
        }
        other => panic!("{other:?}"),
    };
    let started = Instant::now();
    let error = store
        .put(&key, Expect::Version(held.rvn.clone()), release_of(&held))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    assert!(error.to_string().contains("0 of 1 replicas"), "{error}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        store.get(&key).await.unwrap().unwrap().released,
        "applied on the primary"
    );
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let (proxy, via) = proxied(&store).await;
    drills::partitioned_holder(store, via, &proxy).await;
}

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

/// `wait_for_replicas` protects the lock, not only the store call: with the
/// only replica detached (`REPLICAOF NO ONE`, as a partition or an operator
/// would), writes still apply on the primary but no replica acknowledges
/// them. Heartbeats then no longer extend the holder's trust (its lease runs
/// out as in an outage), and an acquire fails rather than hand out a fence
/// that the detached node, promoted, hands out again.
#[tokio::test]
async fn with_wait_for_replicas_a_write_no_replica_acknowledged_is_not_trusted() {
    let Some(primary) = start_server(&[]).await else {
        return;
    };
    let port = primary.port.to_string();
    let Some(replica) = start_server(&["--replicaof", "127.0.0.1", &port]).await else {
        return;
    };
    let prefix = support::prefix("unreplicated");
    let store = support::store_with(&primary.url(), &prefix, |b| {
        b.wait_for_replicas(1, Duration::from_millis(300))
    })
    .await;
    // The replica may still be syncing: wait until a write is acknowledged.
    let deadline = Instant::now() + LIMIT;
    for attempt in 0.. {
        let scratch = LockKey::new(format!("scratch-{attempt}"));
        let write = store
            .put(&scratch, Expect::Vacant, acquire_write("s"))
            .await;
        if matches!(write, Ok(Outcome::Applied(_))) {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lease = Duration::from_secs(3);
    let holder = client(store.clone(), "holder", lease);
    let guard = timeout(LIMIT, holder.acquire("held", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    command(&replica.url(), &["REPLICAOF", "NO", "ONE"]).await;

    // Heartbeats apply on the primary only: the lease runs out.
    let detached = Instant::now();
    while guard.is_safe() {
        assert!(
            detached.elapsed() < lease * 2,
            "heartbeats no replica acknowledged kept the lease safe for {:?}",
            detached.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    eprintln!(
        "unsafe {:?} after the replica was detached",
        detached.elapsed()
    );

    // An acquire no replica acknowledged fails.
    let started = Instant::now();
    let acquire = timeout(LIMIT, holder.acquire("fresh", AcquireOptions::new()))
        .await
        .expect("bounded");
    eprintln!("the acquire returned after {:?}", started.elapsed());
    // The detached node, as a promoted replica would, hands out fence 1 of
    // this lock too: the primary's acquire must not be trusted.
    let on_detached = store_at(&replica.url(), &prefix).await;
    let other = client(on_detached, "other", lease);
    let elsewhere = timeout(LIMIT, other.acquire("fresh", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert_eq!(elsewhere.fence(), Fence(1));
    match &acquire {
        Err(error) => {
            let mut chain = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                chain.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            assert!(chain.contains("replicas"), "the error says why: {chain}");
        }
        Ok(guard) => panic!(
            "acquired with fence {} though no replica acknowledged it, and the detached node gave fence {} too",
            guard.fence(),
            elsewhere.fence()
        ),
    }
    // The failed acquire's write, applied on the primary, is released in
    // the background: nobody is left waiting on a lock whose holder thinks
    // it failed.
    let plain = store_at(&primary.url(), &prefix).await;
    let deadline = Instant::now() + LIMIT;
    loop {
        let record = plain.get(&LockKey::new("fresh")).await.unwrap();
        if record.as_ref().is_none_or(|record| record.released) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the failed acquire's write was left held: {record:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A write whose caller stopped waiting during its WAIT may have
    // applied: not trusted either.
    let abandoned = LockKey::new("abandoned");
    let cut = timeout(
        Duration::from_millis(100),
        store.put(&abandoned, Expect::Vacant, acquire_write("a")),
    )
    .await;
    assert!(cut.is_err(), "WAIT lasts 300 ms without a replica: {cut:?}");
    let read = store.get(&abandoned).await;
    assert!(
        matches!(&read, Err(error) if error.kind() == StoreErrorKind::Unavailable),
        "a read showed an abandoned write no replica acknowledged: {read:?}"
    );

    drop(acquire);
    drop(guard);
    elsewhere.release().await.unwrap();
    let _ = timeout(LIMIT, other.shutdown()).await;
    let _ = timeout(LIMIT, holder.shutdown()).await;

    // Attached again, the replica gets and acknowledges the abandoned
    // write: from then on this store shows it.
    command(&replica.url(), &["REPLICAOF", "127.0.0.1", &port]).await;
    let deadline = Instant::now() + LIMIT;
    let record = loop {
        match store.get(&abandoned).await {
            Ok(record) => break record,
            Err(error)
                if error.kind() == StoreErrorKind::Unavailable && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("{error}"),
        }
    };
    assert_eq!(record.map(|record| record.owner), Some("a".to_owned()));
    let replicated: Vec<String> = lock_redis::redis::from_redis_value(
        command(
            &replica.url(),
            &["HMGET", &store.record_key(&abandoned), "o"],
        )
        .await,
    )
    .unwrap();
    assert_eq!(replicated, ["a"], "the replica has it");
}

/// A release published on the channel wakes a waiter on another connection
/// at once.
#[tokio::test]
async fn an_announced_release_wakes_a_waiter_of_another_store_at_once() {
    let Some(store) = fresh_store().await else {
        return;
    };
    assert!(store.capabilities().announces_releases);
    let other = store_at(&url().unwrap(), store.prefix()).await;
    drills::announced_hand_off(store, other).await;
}

/// The user docs/redis.md documents (its very `ACL SETUSER` line) is woken
/// by a release announced on the channel, not only by its next poll: it may
/// `SUBSCRIBE` to the channel.
#[tokio::test]
async fn the_documented_user_is_woken_by_an_announced_release() {
    let Some(server) = start_server(&[]).await else {
        return;
    };
    support::create_documented_user(&server.url()).await;
    let url = format!("redis://locks:secret@127.0.0.1:{}", server.port);
    let holder = store_at(&url, "locks").await;
    let waiter = store_at(&url, "locks").await;
    let feed = waiter.release_feed().unwrap();
    let mut watch = feed.subscribe();
    // The waiter's store listens on the channel...
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counts: Vec<lock_redis::redis::Value> = lock_redis::redis::from_redis_value(
            command(&server.url(), &["PUBSUB", "NUMSUB", "locks:released"]).await,
        )
        .unwrap();
        let listening: i64 = lock_redis::redis::from_redis_value(counts[1].clone()).unwrap();
        if listening > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the documented user never subscribed to locks:released ({} SUBSCRIBE refused)",
            support::rejected_calls(&server.url(), "subscribe").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and hears the holder's release.
    let key = LockKey::new("job");
    let held = applied(
        holder
            .put(&key, Expect::Vacant, acquire_write("a"))
            .await
            .unwrap(),
    );
    applied(
        holder
            .put(&key, Expect::Version(held.rvn.clone()), release_of(&held))
            .await
            .unwrap(),
    );
    timeout(
        Duration::from_secs(5),
        watch.released(|released| *released == key),
    )
    .await
    .expect("the release was announced to the waiter's store");
    assert_eq!(support::rejected_calls(&server.url(), "subscribe").await, 0);
}

/// A user who may not `SUBSCRIBE`: the store says so once (a warning) and
/// tries again only after a long pause, not every 0.5–1 s for as long as it
/// lives; waiters keep polling.
#[tokio::test]
async fn a_store_that_may_not_listen_does_not_retry_every_second() {
    let Some(server) = start_server(&[]).await else {
        return;
    };
    let mut words = support::documented_user();
    words.retain(|word| word != "+subscribe");
    words[2] = "deaf".into();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    command(&server.url(), &words).await;
    let url = format!("redis://deaf:secret@127.0.0.1:{}", server.port);
    // The test's runtime is on this one thread: the listener logs here.
    let logs = support::Logs::default();
    let _logging = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(logs.clone())
            .with_max_level(tracing::Level::WARN)
            .finish(),
    );
    let store = store_at(&url, "locks").await;
    let feed = store.release_feed().unwrap();
    let watch = feed.subscribe();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let refused = support::rejected_calls(&server.url(), "subscribe").await;
    assert_eq!(
        refused, 1,
        "SUBSCRIBE refused {refused} times in 4 s: the store should try once, then wait"
    );
    let logged = logs.text();
    assert_eq!(
        logged.matches("may not SUBSCRIBE").count(),
        1,
        "one warning: {logged}"
    );
    assert!(logged.contains("WARN"), "{logged}");
    // Waiters still take a released lock, at their next poll.
    let holder = client(store.clone(), "holder", Duration::from_secs(5));
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    guard.release().await.unwrap();
    let again = timeout(LIMIT, holder.acquire("job", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    again.release().await.unwrap();
    drop((watch, feed));
    holder.shutdown().await.unwrap();
}

/// Once nobody holds a store's release feed, its listener closes its
/// subscribed connection, even on a channel where nothing is released.
#[tokio::test]
async fn a_dropped_stores_listener_closes_its_connection() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let subscribed = || async {
        let clients = command(&url().unwrap(), &["CLIENT", "LIST"]).await;
        let lock_redis::redis::Value::VerbatimString { text, .. } = clients else {
            let text: String = lock_redis::redis::from_redis_value(clients).unwrap();
            return text.lines().filter(|line| line.contains(" sub=1")).count();
        };
        text.lines().filter(|line| line.contains(" sub=1")).count()
    };
    let before = subscribed().await;
    let feed = store.release_feed().unwrap();
    let watch = feed.subscribe();
    let deadline = Instant::now() + LIMIT;
    while subscribed().await <= before {
        assert!(Instant::now() < deadline, "the listener never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop((watch, feed, store));
    let deadline = Instant::now() + Duration::from_secs(10);
    while subscribed().await > before {
        assert!(
            Instant::now() < deadline,
            "the listener kept its connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An expiry time past what `EXPIREAT` takes is refused before anything is
/// sent (the script would fail after its first write).
#[tokio::test]
async fn an_expiry_redis_cannot_take_is_refused_and_writes_nothing() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let key = LockKey::new("far");
    let new = NewRecord {
        expires_at: Some(u64::MAX),
        ..acquire_write("a")
    };
    let error = store.put(&key, Expect::Vacant, new).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
    assert_eq!(store.get(&key).await.unwrap(), None);
}

/// Timeouts as long as `Duration::MAX` are taken without a panic; a replica
/// wait longer than a day is refused before anything is written.
#[tokio::test]
async fn the_longest_timeouts_are_taken_without_a_panic() {
    let error = RedisStore::builder("redis://127.0.0.1:9", "x")
        .wait_for_replicas(1, Duration::MAX)
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreConfigError::InvalidReplicaAcks { .. }),
        "{error}"
    );
    let Some(store) = fresh_store().await else {
        return;
    };
    let slow = support::store_with(&url().unwrap(), store.prefix(), |b| {
        b.timeouts(
            Timeouts::default()
                .with_connect(Duration::MAX)
                .with_request(Duration::MAX),
        )
        .wait_for_replicas(1, Duration::from_secs(60))
    })
    .await;
    // No replica: the write applies on the primary and its WAIT lasts a
    // minute; the caller's own deadline ends the wait.
    let waited = timeout(
        Duration::from_millis(300),
        slow.put(&LockKey::new("slow"), Expect::Vacant, acquire_write("a")),
    )
    .await;
    assert!(waited.is_err(), "{waited:?}");
}

/// Eight stores of their own race for one key, thirty times: a new key and a
/// released one. Exactly one wins each race, with the right fence; every
/// loser is shown the winner's record by the same script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let url = url().unwrap();
    let mut writers = Vec::new();
    for _ in 0..8 {
        writers.push(store_at(&url, store.prefix()).await);
    }
    scenarios::racing_writers(&store, &writers, 30).await;
}

#[tokio::test]
async fn the_client_acquires_heartbeats_takes_over_and_releases() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let other = store_at(&url().unwrap(), store.prefix()).await;
    scenarios::client_end_to_end(store, other).await;
}
