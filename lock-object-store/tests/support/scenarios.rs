//! Scenarios every service runs (moto's S3, Azurite): racing stores, the
//! client end to end, and a store reaching the service through a fault proxy.

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockKey, NewRecord,
    Outcome, Rvn,
};
use lock_object_store::BucketStore;
use lock_testkit::proxy::FaultProxy;
use tokio::time::{Instant, timeout};

/// Every wait on a future that might never resolve is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

/// An acquire-shaped write by `owner` (a fresh RVN, the next fence).
pub fn write(owner: &str) -> NewRecord {
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

/// `writers` (each a store of its own, with its own remembered versions, on
/// `store`'s prefix) race for one key in `trials` trials: a new key
/// (`If-None-Match: *`) and a released one every other trial (`If-Match`,
/// every writer having read the released record). Exactly one wins each
/// race, with the right fence; every loser is shown the winner's record.
pub async fn racing_writers(store: &BucketStore, writers: &[BucketStore], trials: usize) {
    for trial in 0..trials {
        let key = LockKey::new(format!("race-{trial}"));
        let released = trial % 2 == 1;
        if released {
            let Outcome::Applied(first) =
                store.put(&key, Expect::Vacant, write("x")).await.unwrap()
            else {
                panic!("trial {trial}: a new key was not vacant");
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
            for writer in writers {
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
        assert_eq!(winner.fence, Fence(if released { 2 } else { 1 }));
        for current in shown {
            assert_eq!(current.as_ref(), Some(winner), "trial {trial}");
        }
        assert_eq!(store.get(&key).await.unwrap().as_ref(), Some(winner));
    }
}

/// A holder on `store` acquires and heartbeats (new versions, still safe),
/// stops heartbeating (detached); a waiter on `other` takes over after the
/// lease with the next fence and sees whom it replaced, and its release
/// keeps a released record with that fence.
pub async fn client_end_to_end(store: BucketStore, other: BucketStore) {
    let lease = Duration::from_secs(2);
    let holder = super::client(store.clone(), "holder", lease);
    let waiter = super::client(other, "waiter", lease);
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
    let started = Instant::now();
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
    assert!(started.elapsed() >= lease, "{:?}", started.elapsed());
    assert_eq!(taken.fence(), Fence(2));
    assert_eq!(
        taken.took_over().map(|t| (t.owner.as_str(), t.fence)),
        Some(("holder", Fence(1)))
    );
    drop(detached);
    taken.release().await.unwrap();
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.released, "{record:?}");
    assert_eq!(record.fence, Fence(2));
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

/// A fault proxy in front of the service at `endpoint`, and a store on
/// `store`'s prefix reaching it through the proxy (made by `at`), with
/// requests that time out well inside the drills' leases.
pub fn proxied(
    endpoint: &str,
    store: &BucketStore,
    at: impl Fn(&str, &str, Duration) -> BucketStore,
) -> (FaultProxy, BucketStore) {
    let upstream = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let proxy = FaultProxy::start(upstream).expect("start the fault proxy");
    let via = at(
        &proxy.url(),
        store.prefix().as_ref(),
        Duration::from_millis(400),
    );
    (proxy, via)
}
