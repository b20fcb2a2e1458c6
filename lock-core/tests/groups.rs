//! Several locks all or nothing (`LockClient::acquire_all`): in one atomic
//! request where the store can and every key is free, otherwise one fixed
//! order so overlapping sets never deadlock; nothing left held after a
//! failure (faults and ambiguous replies included); the group safe only while
//! every member is. The in-memory store, with and without atomic writes, in
//! paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, Fence, LockClient, LockError, LockKey, LostReason};
use lock_memory::{Fault, FaultConfig, FaultyStore, MemoryStore, Op};
use support::{LEASE, client, wait};
use tokio::time::{Instant, sleep, timeout};

const PATIENCE: Duration = Duration::from_secs(600);

/// A memory store that writes one key per request, as an object store does:
/// sets are taken key by key.
fn one_by_one() -> MemoryStore {
    MemoryStore::builder().atomic_writes(None).build()
}

/// Both kinds of store.
fn stores() -> [(&'static str, MemoryStore); 2] {
    [("atomic", MemoryStore::new()), ("one by one", one_by_one())]
}

/// Whether `store` holds `key` for `owner` (a record not released).
fn held_by(store: &MemoryStore, key: &str, owner: &str) -> bool {
    store
        .record(&LockKey::new(key))
        .is_some_and(|record| !record.released && record.owner == owner)
}

#[tokio::test(start_paused = true)]
async fn a_set_is_taken_in_key_order_each_key_with_its_fence_and_released_together() {
    for (kind, store) in stores() {
        a_set_is_taken_and_released(kind, store).await;
    }
}

async fn a_set_is_taken_and_released(kind: &str, store: MemoryStore) {
    let a = client(store.clone(), "a");
    // A key held and released before: its fence is ahead of the others'.
    a.acquire("b", AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let group = a
        .acquire_all(["c", "b", "a", "b"], AcquireOptions::new())
        .await
        .unwrap();
    let keys: Vec<&str> = group.keys().map(|key| key.partition()).collect();
    assert_eq!(keys, ["a", "b", "c"], "{kind}: sorted, duplicates once");
    assert_eq!(group.taken_at_once(), kind == "atomic", "{kind}");
    let fences: Vec<(String, Fence)> = group
        .fences()
        .map(|(key, fence)| (key.to_string(), fence))
        .collect();
    assert_eq!(
        fences,
        [
            ("a".to_owned(), Fence(1)),
            ("b".to_owned(), Fence(2)),
            ("c".to_owned(), Fence(1))
        ]
    );
    assert!(group.is_safe());
    // Held across leases: each member heartbeats.
    sleep(LEASE * 3).await;
    assert!(group.is_safe());
    assert_eq!(group.guard(&LockKey::new("b")).unwrap().fence(), Fence(2));
    group.release().await.unwrap();
    for key in ["a", "b", "c"] {
        assert!(!held_by(&store, key, "a"), "{key} released");
    }
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn overlapping_sets_asked_in_opposite_orders_never_deadlock() {
    // Every reply 10 ms late, so the clients' acquires interleave; one key
    // per request, so the order is what keeps them apart.
    let store = support::Delayed::new(one_by_one());
    store.delay_writes(Duration::from_millis(10));
    store.delay_reads(Duration::from_millis(10));
    let clients: Vec<LockClient> = (0..4)
        .map(|i| {
            client(
                lock_core::layer::Layered::new(store.clone(), store.inner.clone()),
                &format!("c{i}"),
            )
        })
        .collect();
    let sets = [
        vec!["x", "y", "z"],
        vec!["z", "y", "x"],
        vec!["y", "x"],
        vec!["z", "x"],
    ];
    let mut tasks = Vec::new();
    for (client, set) in clients.iter().cloned().zip(sets) {
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0;
            for _ in 0..5 {
                let group = client
                    .acquire_all(set.clone(), wait(LEASE * 10))
                    .await
                    .unwrap();
                assert!(group.is_safe());
                sleep(Duration::from_millis(300)).await;
                group.release().await.unwrap();
                rounds += 1;
            }
            rounds
        }));
    }
    for task in tasks {
        let rounds = timeout(PATIENCE, task).await.expect("no deadlock").unwrap();
        assert_eq!(rounds, 5);
    }
    for client in clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_key_held_elsewhere_fails_the_set_within_its_budget_and_leaves_nothing_held() {
    // On a store with atomic writes, the one request is refused first.
    for (kind, store) in stores() {
        a_held_key_fails_the_set(kind, store).await;
    }
}

async fn a_held_key_fails_the_set(kind: &str, store: MemoryStore) {
    let other = client(store.clone(), "other");
    let held = other.acquire("m", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let error = a
        .acquire_all(["a", "m", "z"], wait(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::AcquireTimeout { key, holder: Some(holder), .. }
            if key.partition() == "m" && holder == "other"),
        "{kind}: {error:?}"
    );
    // One budget for the set: "a" was taken at once, "m" waited what was left.
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(
        !held_by(&store, "a", "a"),
        "the key taken first is released"
    );
    assert!(store.record(&LockKey::new("z")).is_none(), "never tried");
    assert!(held.is_safe());
    other.shutdown().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_faults_and_lost_replies_a_failed_set_leaves_nothing_held() {
    for seed in 0..40 {
        let store = if seed % 2 == 0 {
            MemoryStore::new()
        } else {
            one_by_one()
        };
        let faulty = FaultyStore::new(store.clone(), seed).with_write_faults(
            FaultConfig::NONE
                .with_ambiguous_applied(0.3)
                .with_ambiguous_not_applied(0.2)
                .with_unavailable(0.2),
        );
        let blocker = client(store.clone(), "blocker");
        let held = blocker.acquire("k3", AcquireOptions::new()).await.unwrap();
        let a = LockClient::builder(faulty.clone())
            .owner("a")
            .lease(LEASE)
            .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
            .build()
            .unwrap();
        let result = timeout(
            PATIENCE,
            a.acquire_all(["k1", "k2", "k3", "k4"], wait(Duration::from_secs(1))),
        )
        .await
        .expect("bounded");
        assert!(result.is_err(), "seed {seed}: k3 is held elsewhere");
        // The releases (of writes that applied though their replies were lost
        // too) finish within the client's shutdown; then nothing is held.
        faulty.set_write_faults(FaultConfig::NONE);
        a.shutdown().await.unwrap();
        for key in ["k1", "k2", "k4"] {
            assert!(!held_by(&store, key, "a"), "seed {seed}: {key} left held");
        }
        assert!(held.is_safe());
        blocker.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn the_group_is_unsafe_as_soon_as_one_member_is() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let group = a
        .acquire_all(["p", "q"], AcquireOptions::new())
        .await
        .unwrap();
    let unsafe_ = group.until_unsafe();
    // An operator forces "q" away: its next heartbeat finds the record
    // changed.
    let thief = client(store.clone(), "thief");
    thief.force_release("q").await.unwrap();
    let reason = timeout(PATIENCE, unsafe_).await.expect("noticed");
    assert!(!group.is_safe());
    assert!(group.guard(&LockKey::new("p")).unwrap().is_safe());
    assert!(
        matches!(reason, LostReason::Stolen { .. } | LostReason::Released),
        "{reason:?}"
    );
    drop(group);
    a.shutdown().await.unwrap();
    thief.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_free_set_on_a_store_with_atomic_writes_is_one_request() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let keys: Vec<String> = (0..10).map(|i| format!("key-{i:02}")).collect();
    let before = store.writes();
    let group = a
        .acquire_all(keys.clone(), AcquireOptions::new())
        .await
        .unwrap();
    assert!(group.taken_at_once());
    assert_eq!(store.writes() - before, 1, "one request for ten keys");
    assert_eq!(store.reads(), 0, "and no read");
    assert!(group.fences().all(|(_, fence)| fence == Fence(1)));
    // Each member heartbeats on its own, as any lock.
    sleep(LEASE * 2).await;
    assert!(group.is_safe());
    let other = client(store.clone(), "other");
    assert!(
        other
            .try_acquire("key-05", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    group.release().await.unwrap();
    for key in &keys {
        assert!(!held_by(&store, key, "a"), "{key}");
    }
    a.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_set_with_a_held_key_falls_back_to_one_by_one_and_waits_for_it() {
    let store = MemoryStore::new();
    let other = client(store.clone(), "other");
    let held = other.acquire("y", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    let taking = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire_all(["x", "y", "z"], wait(LEASE * 3)).await })
    };
    sleep(Duration::from_secs(2)).await;
    assert!(!taking.is_finished());
    assert!(held_by(&store, "x", "a"), "x taken in order, y waited for");
    assert!(store.record(&LockKey::new("z")).is_none(), "z not yet");
    held.release().await.unwrap();
    let group = timeout(PATIENCE, taking).await.unwrap().unwrap().unwrap();
    assert!(!group.taken_at_once());
    assert_eq!(
        group.fences().map(|(_, fence)| fence).collect::<Vec<_>>(),
        [Fence(1), Fence(2), Fence(1)]
    );
    group.release().await.unwrap();
    a.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_request_is_resolved_by_reading_the_keys() {
    // Applied, reply lost: the keys carry the request's versions, so the set
    // is held, taken at once.
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 1);
    faulty.script(Op::PutMany, Fault::AmbiguousApplied);
    let a = client(faulty.clone(), "a");
    let group = a
        .acquire_all(["p", "q"], AcquireOptions::new())
        .await
        .unwrap();
    assert!(group.taken_at_once());
    assert_eq!(
        group.fences().map(|(_, fence)| fence).collect::<Vec<_>>(),
        [Fence(1), Fence(1)]
    );
    group.release().await.unwrap();
    a.shutdown().await.unwrap();

    // Not applied, timed out: the keys are free, and taken one by one.
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 2);
    faulty.script(Op::PutMany, Fault::AmbiguousNotApplied);
    let a = client(faulty.clone(), "a");
    let group = a
        .acquire_all(["p", "q"], AcquireOptions::new())
        .await
        .unwrap();
    assert!(!group.taken_at_once());
    assert_eq!(
        group.fences().map(|(_, fence)| fence).collect::<Vec<_>>(),
        [Fence(1), Fence(1)]
    );
    group.release().await.unwrap();
    a.shutdown().await.unwrap();
    for key in ["p", "q"] {
        assert!(!held_by(&store, key, "a"), "{key}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_request_whose_write_applied_leaves_nothing_held() {
    // The request applies and its reply comes 5 s later; the acquire is
    // dropped meanwhile: the writes are released by version.
    let store = support::Delayed::new(MemoryStore::new());
    store.delay_writes(Duration::from_secs(5));
    let a = client(
        lock_core::layer::Layered::new(store.clone(), store.inner.clone()),
        "a",
    );
    let dropped = timeout(
        Duration::from_secs(1),
        a.acquire_all(["p", "q"], AcquireOptions::new()),
    )
    .await;
    assert!(dropped.is_err(), "still waiting for the reply");
    for key in ["p", "q"] {
        assert!(
            held_by(&store.inner, key, "a"),
            "{key}: the request applied"
        );
    }
    a.shutdown().await.unwrap();
    for key in ["p", "q"] {
        assert!(!held_by(&store.inner, key, "a"), "{key} left held");
    }
}
