//! The object-store backend on Azure Blob Storage's emulator, Azurite
//! (started by `./scripts/test`): the conformance suite, racing writers, the
//! bucket check, the client end to end and the shared fault drills through a
//! TCP fault proxy, with object_store's Azure client (`If-None-Match: *` and
//! `If-Match` on the blob's ETag).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockKey, NewRecord,
    Outcome, Rvn,
};
use lock_object_store::BucketStore;
use lock_testkit::drills;
use lock_testkit::proxy::{FaultProxy, ProxyMode};
use support::{azure_store_at, azurite_endpoint, fresh_azure_store};
use tokio::time::timeout;

mod conformance {
    lock_testkit::conformance_suite!(crate::support::AzureFactory);
}

/// Every wait on a future that might never resolve is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

fn write(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released: false,
        fence: FenceUpdate::Next,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

/// Eight stores (each its own remembered versions) race for one key, in many
/// trials, on a new key and on a released one: exactly one wins, and every
/// loser is shown the winner's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    const WRITERS: usize = 8;
    const TRIALS: usize = 30;
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let endpoint = azurite_endpoint().unwrap();
    let writers: Vec<BucketStore> = (0..WRITERS)
        .map(|_| azure_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5)))
        .collect();
    for trial in 0..TRIALS {
        let key = LockKey::new(format!("race-{trial}"));
        if trial % 2 == 1 {
            let Outcome::Applied(first) =
                store.put(&key, Expect::Vacant, write("x")).await.unwrap()
            else {
                panic!("a new key");
            };
            let release = NewRecord {
                released: true,
                fence: FenceUpdate::Keep,
                ..write("x")
            };
            store
                .put(&key, Expect::Version(first.rvn), release)
                .await
                .unwrap();
            for writer in &writers {
                writer.get(&key).await.unwrap();
            }
        }
        let racing: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(i, writer)| {
                let writer = writer.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    writer
                        .put(&key, Expect::Vacant, write(&format!("w{i}")))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut shown = Vec::new();
        for writer in racing {
            match timeout(LIMIT, writer).await.expect("bounded").unwrap() {
                Outcome::Applied(record) => winners.push(record),
                Outcome::Rejected { current } => shown.push(current),
            }
        }
        assert_eq!(winners.len(), 1, "trial {trial}: {winners:?}");
        let winner = &winners[0];
        assert_eq!(winner.fence, Fence(if trial % 2 == 1 { 2 } else { 1 }));
        for current in shown {
            assert_eq!(current.as_ref(), Some(winner), "trial {trial}");
        }
        assert_eq!(store.get(&key).await.unwrap().as_ref(), Some(winner));
    }
}

#[tokio::test]
async fn the_bucket_check_passes_on_azurite() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    store.validate_bucket().await.unwrap();
    assert!(store.list(None, None, 10).await.unwrap().records.is_empty());
}

#[tokio::test]
async fn the_client_acquires_heartbeats_takes_over_and_releases() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let lease = Duration::from_secs(2);
    let endpoint = azurite_endpoint().unwrap();
    let other = azure_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5));
    let holder = support::client(store.clone(), "holder", lease);
    let waiter = support::client(other, "waiter", lease);
    let key = LockKey::new("job");
    let guard = timeout(LIMIT, holder.acquire(key.clone(), AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert_eq!(guard.fence(), Fence(1));
    let first = store.get(&key).await.unwrap().unwrap();
    tokio::time::sleep(lease).await;
    let later = store.get(&key).await.unwrap().unwrap();
    assert_ne!(later.rvn, first.rvn, "heartbeats wrote new versions");
    assert!(guard.is_safe(), "{:?}", guard.state());
    let detached = guard.detach().await.unwrap();
    let taken = timeout(
        LIMIT,
        waiter.acquire(
            key.clone(),
            AcquireOptions::new().wait(Duration::from_secs(20)),
        ),
    )
    .await
    .expect("bounded")
    .unwrap();
    assert_eq!(taken.fence(), Fence(2));
    drop(detached);
    taken.release().await.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released && record.fence == Fence(2), "{record:?}");
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

/// A fault proxy in front of Azurite, and a store on `store`'s prefix
/// reaching it through the proxy, with requests that time out well inside the
/// drills' leases.
fn proxied(store: &BucketStore) -> (FaultProxy, BucketStore) {
    let endpoint = azurite_endpoint().expect("the store was made, so there is a server");
    let upstream = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let proxy = FaultProxy::start(upstream).expect("start the fault proxy");
    let via = azure_store_at(
        &proxy.url(),
        store.prefix().as_ref(),
        Duration::from_millis(400),
    );
    (proxy, via)
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_holder(store, via, &proxy).await;
}

/// Azurite keeps connections open: a fifth of the exchanges fail, on open
/// connections and new ones, half before Azurite saw them and half after it
/// answered.
#[tokio::test]
async fn a_fifth_of_requests_fail_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::contention_under_faults(store, via, &proxy, faults).await;
}
