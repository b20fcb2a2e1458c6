//! Scenarios on a real store that need several handles on it, each with
//! connections (and remembered versions) of its own, as separate processes
//! have: what the conformance suite, with its one store, cannot show. The
//! stores on S3, Azure, etcd, Redis and Valkey run them (PostgreSQL and
//! DynamoDB have race tests of their own, with more kinds of race); each
//! panics with what went wrong, as a test does.
//!
//! * [`racing_writers`]: stores of their own race for one key, round after
//!   round; exactly one wins each race with the right fence, and every loser
//!   is shown the winner.
//! * [`client_end_to_end`]: the lock client acquires, heartbeats, is taken
//!   over by a client on another handle after its lease, and releases.
//! * [`fences_rise_after_a_deletion_by_hand`]: a key's record deleted behind
//!   the store's back (each store's own way: a `DELETE`, `DeleteItem`,
//!   `etcdctl del`, an object removed) and created again gets a fence above
//!   every fence the key had.

use std::time::Duration;

use lock_core::{AcquireOptions, ConditionalStore, Expect, Fence, LockClient, LockKey, Outcome};
use tokio::time::Instant;

use crate::drills::bounded;
use crate::records::{acquire_write, applied, release_of};

/// `writers` (handles on the same data as `store`, each with its own
/// connections and remembered versions) race for one key in `trials` trials:
/// a new key, and every other trial a released one that every writer has
/// read (so each compares the same version). Exactly one wins each race, with
/// fence 1 on a new key and 2 on a released one; every loser is shown the
/// winner's record in its refusal; `store` reads the winner afterwards.
pub async fn racing_writers<S>(store: &S, writers: &[S], trials: usize)
where
    S: ConditionalStore + Clone + 'static,
{
    assert!(writers.len() >= 2, "a race needs two writers or more");
    for trial in 0..trials {
        let key = LockKey::new(format!("race-{trial}"));
        let released = trial % 2 == 1;
        // The fence the race's winner must get: one more than the released
        // record's, or a new key's first fence (checked by the conformance
        // case put_vacant_on_a_new_key).
        let mut expected = None;
        if released {
            let first = match bounded(
                "a first write",
                store.put(&key, Expect::Vacant, acquire_write("x")),
            )
            .await
            {
                Ok(Outcome::Applied(first)) => first,
                other => panic!("trial {trial}: a new key was not vacant: {other:?}"),
            };
            expected = Some(Fence(first.fence.get() + 1));
            bounded(
                "the release",
                store.put(&key, Expect::Version(first.rvn.clone()), release_of(&first)),
            )
            .await
            .unwrap_or_else(|error| panic!("trial {trial}: the release: {error}"));
            for writer in writers {
                bounded("a writer's read", writer.get(&key))
                    .await
                    .unwrap_or_else(|error| panic!("trial {trial}: a writer's read: {error}"));
            }
        }
        let racing: Vec<_> = writers
            .iter()
            .enumerate()
            .map(|(i, writer)| {
                let (writer, key) = (writer.clone(), key.clone());
                tokio::spawn(async move {
                    writer
                        .put(&key, Expect::Vacant, acquire_write(&format!("w{i}")))
                        .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut shown = Vec::new();
        for writer in racing {
            match bounded("a racing write", writer).await {
                Ok(Ok(Outcome::Applied(record))) => winners.push(record),
                Ok(Ok(Outcome::Rejected { current })) => shown.push(current),
                Ok(Err(error)) => panic!("trial {trial}: a racing write failed: {error}"),
                Err(error) => panic!("trial {trial}: a racing writer panicked: {error}"),
            }
        }
        assert_eq!(winners.len(), 1, "trial {trial}: {winners:?}");
        let winner = &winners[0];
        if let Some(expected) = expected {
            assert_eq!(winner.fence, expected, "trial {trial}");
        }
        for current in &shown {
            assert_eq!(
                current.as_ref(),
                Some(winner),
                "trial {trial}: a loser was shown another record"
            );
        }
        let read = bounded("the read after the race", store.get(&key))
            .await
            .unwrap_or_else(|error| panic!("trial {trial}: the read: {error}"));
        assert_eq!(read.as_ref(), Some(winner), "trial {trial}");
    }
}

/// A client on `store` acquires and heartbeats (new versions, still safe),
/// then stops heartbeating (detached, as a crashed holder does); a client on
/// `other` takes over after the lease with the next fence and sees whom it
/// replaced, and its release keeps a released record with that fence.
///
/// The taking client judges the lease by its own clock, never the store's,
/// so the takeover comes a lease or more after the detach on every store.
pub async fn client_end_to_end<S>(store: S, other: S)
where
    S: ConditionalStore + Clone,
{
    let lease = Duration::from_secs(2);
    let holder = LockClient::builder(store.clone())
        .owner("holder")
        .lease(lease)
        .build()
        .unwrap_or_else(|error| panic!("the holder's client: {error}"));
    let waiter = LockClient::builder(other)
        .owner("waiter")
        .lease(lease)
        .use_store_clock(false)
        .build()
        .unwrap_or_else(|error| panic!("the waiter's client: {error}"));
    let key = LockKey::new("job");
    let read = |what: &'static str| {
        let (store, key) = (store.clone(), key.clone());
        async move {
            bounded(what, store.get(&key))
                .await
                .unwrap_or_else(|error| panic!("{what}: {error}"))
                .unwrap_or_else(|| panic!("{what}: no record"))
        }
    };

    let guard = bounded(
        "the holder's acquire",
        holder.acquire(key.clone(), AcquireOptions::new()),
    )
    .await
    .unwrap_or_else(|error| panic!("the holder's acquire: {error}"));
    let first_fence = guard.fence();
    let first = read("the first read").await;
    tokio::time::sleep(lease).await;
    let later = read("the read a lease later").await;
    assert_ne!(later.rvn, first.rvn, "heartbeats wrote new versions");
    assert!(guard.is_safe(), "{:?}", guard.state());

    let detached = bounded("the detach", guard.detach())
        .await
        .unwrap_or_else(|error| panic!("the detach: {error}"));
    let started = Instant::now();
    let taken = bounded(
        "the waiter's acquire",
        waiter.acquire(
            key.clone(),
            AcquireOptions::new().wait(Duration::from_secs(20)),
        ),
    )
    .await
    .unwrap_or_else(|error| panic!("the waiter's acquire: {error}"));
    assert!(started.elapsed() >= lease, "{:?}", started.elapsed());
    assert_eq!(taken.fence(), Fence(first_fence.get() + 1));
    assert_eq!(
        taken.took_over().map(|t| (t.owner.as_str(), t.fence)),
        Some(("holder", first_fence))
    );
    drop(detached);
    bounded("the waiter's release", taken.release())
        .await
        .unwrap_or_else(|error| panic!("the waiter's release: {error}"));
    let record = read("the read after the release").await;
    assert!(record.released, "{record:?}");
    assert_eq!(record.fence, Fence(first_fence.get() + 1));
    for (who, client) in [("holder", holder), ("waiter", waiter)] {
        bounded("a shutdown", client.shutdown())
            .await
            .unwrap_or_else(|error| panic!("the {who}'s shutdown: {error}"));
    }
}

/// A key acquired and taken over twice on `store`, its record then deleted
/// by `delete` (behind the store's back: a time to live, a lifecycle rule, a
/// clean-up by hand), and acquired again: the new fence must be above every
/// fence the key had, which a holder paused across the deletion still
/// carries. Returns the highest fence before the deletion and the new one.
pub async fn fences_rise_after_a_deletion_by_hand<S, D>(
    store: &S,
    key: &LockKey,
    delete: D,
) -> (Fence, Fence)
where
    S: ConditionalStore,
    D: std::future::Future<Output = ()>,
{
    let put = |expect: Expect, owner: &'static str| {
        bounded("a write", store.put(key, expect, acquire_write(owner)))
    };
    let mut held = applied(
        put(Expect::Vacant, "a")
            .await
            .unwrap_or_else(|error| panic!("the first acquire: {error}")),
    );
    for owner in ["b", "c"] {
        held = applied(
            put(Expect::Version(held.rvn.clone()), owner)
                .await
                .unwrap_or_else(|error| panic!("a takeover: {error}")),
        );
    }
    bounded("the deletion", delete).await;
    let read = bounded("the read after the deletion", store.get(key))
        .await
        .unwrap_or_else(|error| panic!("the read after the deletion: {error}"));
    assert_eq!(read, None, "the record is still there after its deletion");
    let next = applied(
        put(Expect::Vacant, "d")
            .await
            .unwrap_or_else(|error| panic!("the acquire after the deletion: {error}")),
    );
    assert!(
        next.fence > held.fence,
        "fence {} after a deleted record's {}: a holder paused across the deletion would be admitted",
        next.fence,
        held.fence
    );
    (held.fence, next.fence)
}
