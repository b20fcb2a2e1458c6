//! The Redis store on the Redis Cluster of three primaries `./scripts/test`
//! starts: the conformance suite, the client end to end across partitions
//! (each in its own slot), listing every lock, and an announced hand-off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{AcquireOptions, ConditionalStore, Fence, LockKey, StoreError};
use lock_redis::RedisStore;
use lock_testkit::{FreshStore, StoreFactory, drills};
use support::{LIMIT, client, prefix, store_at};
use tokio::time::timeout;

/// The cluster (one node's URL), from `LOCK_REDIS_CLUSTER_URL`.
fn cluster_url() -> Option<String> {
    lock_testkit::server_from_env("LOCK_REDIS_CLUSTER_URL", "LOCK_REDIS_SKIP", "Redis Cluster")
}

async fn fresh_cluster_store() -> Option<RedisStore> {
    let url = cluster_url()?;
    Some(store_at(&url, &prefix("cluster")).await)
}

#[derive(Clone, Copy, Debug)]
struct ClusterFactory;

#[async_trait]
impl StoreFactory for ClusterFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        Ok(fresh_cluster_store().await.map(FreshStore::new))
    }
}

mod conformance {
    lock_testkit::conformance_suite!(super::ClusterFactory);
}

/// Locks of many partitions (so many slots, on all three primaries): taken,
/// heartbeaten, listed together and released; a set of keys of several
/// partitions is taken key by key (no script spans slots).
#[tokio::test]
async fn locks_in_every_slot_are_taken_listed_and_released() {
    let Some(store) = fresh_cluster_store().await else {
        return;
    };
    assert!(store.is_cluster());
    assert_eq!(store.capabilities().atomic_writes, None);
    let holder = client(store.clone(), "holder", Duration::from_secs(3));
    let mut guards = Vec::new();
    for i in 0..20 {
        let key = LockKey::with_sort(format!("p{i}"), "job");
        guards.push(
            timeout(LIMIT, holder.acquire(key, AcquireOptions::new()))
                .await
                .expect("bounded")
                .unwrap(),
        );
    }
    // Past a heartbeat or two, every lock still safe.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(guards.iter().all(|guard| guard.is_safe()));
    let mut listed = Vec::new();
    let mut cursor = None;
    for _ in 0..20 {
        let page = store.list(None, cursor, 7).await.unwrap();
        listed.extend(page.records.into_iter().map(|record| record.key));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    listed.sort();
    let mut expected: Vec<LockKey> = (0..20)
        .map(|i| LockKey::with_sort(format!("p{i}"), "job"))
        .collect();
    expected.sort();
    assert_eq!(listed, expected);
    for guard in guards {
        guard.release().await.unwrap();
    }
    let set: Vec<LockKey> = (0..5).map(|i| LockKey::new(format!("set-{i}"))).collect();
    let group = timeout(LIMIT, holder.acquire_all(set, AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert!(!group.taken_at_once(), "no script spans slots");
    assert!(group.fences().all(|(_, fence)| fence == Fence(1)));
    group.release().await.unwrap();
    holder.shutdown().await.unwrap();
}

/// Waiting for replicas, which a cluster store cannot do, is refused before
/// anything is written.
#[tokio::test]
async fn waiting_for_replicas_is_refused_on_a_cluster() {
    let Some(url) = cluster_url() else {
        return;
    };
    let error = RedisStore::builder(&url, "x")
        .wait_for_replicas(1, Duration::from_secs(1))
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, lock_redis::StoreConfigError::WaitInCluster { .. }),
        "{error}"
    );
}

#[tokio::test]
async fn an_announced_release_wakes_a_waiter_of_another_store_at_once() {
    let Some(store) = fresh_cluster_store().await else {
        return;
    };
    let other = store_at(&cluster_url().unwrap(), store.prefix()).await;
    drills::announced_hand_off(store, other).await;
}
