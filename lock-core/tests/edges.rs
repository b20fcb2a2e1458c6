//! Every way out of a lock, tasks of one client contending for a key, and dead
//! holders taken over by short attempts; over the in-memory store in paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, Fence, FenceUpdate, LockClient, LockError, LockKey,
    LostReason, NewRecord, Rvn,
};
use lock_memory::{FaultyStore, MemoryStore};
use support::{Delayed, LEASE, client, dead_holder, wait, waiting};
use tokio::time::{Instant, timeout};

/// Long enough for anything in these tests to happen, short enough that a
/// regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(600);

fn key(name: &str) -> LockKey {
    LockKey::new(name)
}

// ---- 1. Drop, then acquire again ------------------------------------------

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_and_acquiring_again_on_the_same_client_succeeds() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    for fence in 1..=3 {
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        assert_eq!(guard.fence(), Fence(fence));
        drop(guard);
    }
    // try_acquire waits for the client's own pending release: that is not "busy".
    drop(a.acquire("job", AcquireOptions::new()).await.unwrap());
    let guard = a
        .try_acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .expect("not busy");
    assert_eq!(guard.fence(), Fence(5));
    guard.release().await.unwrap();
    assert!(store.record(&key("job")).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn an_acquire_after_a_drop_waits_for_a_slow_release_then_gets_the_lock() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    drop(guard);
    // The release is on the wire when the acquire starts.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    let again = timeout(PATIENCE, a.acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fence(), Fence(2));
    // The rest of the release's reply, then the acquire's own (1 s).
    assert_eq!(Instant::now() - started, Duration::from_millis(1990));
    let puts = store.puts();
    assert!(puts[puts.len() - 2].new.as_ref().unwrap().released);
    assert_eq!(puts[puts.len() - 1].expect, Some(lock_core::Expect::Vacant));
}

#[tokio::test(start_paused = true)]
async fn an_acquire_right_after_a_drop_is_handed_the_lock_in_one_write() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let rvn = store.inner.record(&key("job")).unwrap().rvn;
    drop(guard);
    let puts = store.puts().len();
    let again = a
        .try_acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .expect("handed over");
    assert_eq!(again.fence(), Fence(2));
    let puts = &store.puts()[puts..];
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(puts[0].expect, Some(lock_core::Expect::Version(rvn)));
}

#[tokio::test(start_paused = true)]
async fn with_lock_retried_after_its_lease_went_in_danger_acquires_again() {
    let faulty = FaultyStore::new(MemoryStore::new(), 1);
    let a = client(faulty.clone(), "a");
    let run = a.with_lock("job", AcquireOptions::new(), |_lock| async {
        // Every heartbeat fails from now on: the lease goes in danger.
        faulty.set_unavailable(true);
        std::future::pending::<()>().await
    });
    let error = timeout(PATIENCE, run).await.unwrap().unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LostReason::InDanger,
                ..
            }
        ),
        "{error:?}"
    );
    faulty.set_unavailable(false);
    let guard = timeout(PATIENCE, a.acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence(), Fence(2), "acquired afresh, not shared");
    guard.release().await.unwrap();
}

// ---- 2. Tasks of one client contend ---------------------------------------

#[tokio::test(start_paused = true)]
async fn tasks_of_one_client_queue_in_order_and_are_handed_the_lock_in_one_write() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let mut tasks = Vec::new();
    for name in ["b", "c", "d"] {
        let client = a.clone();
        tasks.push(tokio::spawn(async move {
            let guard = client
                .acquire("leader", wait(Duration::from_secs(60)))
                .await
                .unwrap();
            let got = (name, guard.fence(), Instant::now());
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(guard.is_safe());
            guard.release().await.unwrap();
            got
        }));
        // Queue in this order.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let calls = store.calls();
    let released = Instant::now();
    leader.release().await.unwrap();
    let mut got = Vec::new();
    for task in tasks {
        got.push(timeout(PATIENCE, task).await.unwrap().unwrap());
    }
    let names: Vec<&str> = got.iter().map(|(name, _, _)| *name).collect();
    assert_eq!(names, ["b", "c", "d"], "FIFO");
    let fences: Vec<Fence> = got.iter().map(|(_, fence, _)| *fence).collect();
    assert_eq!(fences, [Fence(2), Fence(3), Fence(4)]);
    // Handed over at once: no poll, no lease waited out.
    assert!(got[0].2 - released < Duration::from_millis(1));
    // Three hand-offs of one write each, and the last release.
    assert_eq!(store.calls() - calls, 4, "{:?}", store.history());
    let record = store.record(&key("leader")).unwrap();
    assert!(record.released);
    assert_eq!(record.fence, Fence(4));
}

#[tokio::test(start_paused = true)]
async fn a_queued_waiter_times_out_naming_the_holder_and_fail_fast_is_already_held() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let calls = store.calls();
    let started = Instant::now();
    let error = a
        .acquire("leader", wait(Duration::from_secs(3)))
        .await
        .unwrap_err();
    match error {
        LockError::AcquireTimeout { holder, waited, .. } => {
            assert_eq!(holder.as_deref(), Some("a"));
            assert_eq!(waited, Duration::from_secs(3));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(Instant::now() - started, Duration::from_secs(3));
    // Queued inside the client: the store was not polled (heartbeats aside).
    let polls = store
        .history()
        .iter()
        .skip(calls)
        .filter(|entry| !entry.is_write())
        .count();
    assert_eq!(polls, 0);
    let error = a
        .acquire("leader", AcquireOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::AlreadyHeld { .. }), "{error:?}");
    assert!(!error.to_string().contains("reentrant"), "{error}");
    assert!(
        a.try_acquire("leader", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    leader.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_queued_waiter_leaves_the_queue_to_the_next() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let quitter = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let patient = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    quitter.abort();
    leader.release().await.unwrap();
    let guard = timeout(PATIENCE, patient).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(2));
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_holder_hands_the_lock_to_the_next_local_waiter() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let next = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop(leader);
    let guard = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(2));
    assert!(!store.record(&key("leader")).unwrap().released);
    // A waiter of another client sees a held lock and waits.
    let b = client(store.clone(), "b");
    assert!(
        b.try_acquire("leader", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();
    assert!(
        b.try_acquire("leader", AcquireOptions::new())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn a_local_waiter_gets_a_lock_its_holder_lost_to_another_client_by_waiting_normally() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let admin = client(store.clone(), "admin");
    let b = client(store.clone(), "b");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let next = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    admin.force_release("leader").await.unwrap();
    let thief = b.acquire("leader", AcquireOptions::new()).await.unwrap();
    timeout(PATIENCE, leader.until_ended()).await.unwrap();
    // The stale guard's release writes nothing; the waiter now waits for b.
    let writes = store.writes();
    assert!(leader.release().await.is_err());
    assert_eq!(store.writes(), writes);
    tokio::time::sleep(Duration::from_secs(2)).await;
    thief.release().await.unwrap();
    let guard = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(3));
    guard.release().await.unwrap();
}

// ---- 3. A cancelled write that applied is ours -----------------------------

/// "job" held by `a` on `store`, whose `set_data(v2)` applied but whose
/// caller stopped waiting while the reply was on its way.
async fn after_a_cancelled_set_data(store: &Delayed) -> (LockClient, lock_core::LockGuard) {
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    let cancelled = timeout(Duration::from_millis(100), guard.set_data(b"v2".to_vec())).await;
    assert!(cancelled.is_err());
    store.delay_writes(Duration::ZERO);
    (a, guard)
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_set_data_that_applied_is_recognised_as_this_clients_own() {
    let store = Delayed::new(MemoryStore::new());
    let (_a, guard) = after_a_cancelled_set_data(&store).await;
    assert_eq!(
        store.inner.record(&key("job")).unwrap().data.as_deref(),
        Some(&b"v2"[..])
    );
    // Heartbeats resolve it as ours: the lock is kept, for many leases.
    tokio::time::sleep(LEASE * 3).await;
    assert!(guard.is_safe(), "{:?}", guard.state());
    assert_eq!(guard.data().as_deref(), Some(&b"v2"[..]));
    guard.release().await.unwrap();
    assert!(store.inner.record(&key("job")).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn a_release_after_a_cancelled_set_data_that_applied_goes_on_top_of_it() {
    let store = Delayed::new(MemoryStore::new());
    let (_a, guard) = after_a_cancelled_set_data(&store).await;
    // The release expects the version before the cancelled write; the store shows
    // the cancelled write's: it is ours, and the release goes on top of it.
    guard.release().await.unwrap();
    let record = store.inner.record(&key("job")).unwrap();
    assert!(record.released, "{record:?}");
}

// ---- 4. A dropped release, a dropped guard ---------------------------------

#[tokio::test(start_paused = true)]
async fn a_dropped_release_future_still_releases_in_the_background() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    // The first heartbeat is on the wire (it holds the write lock) when the
    // release starts; the caller gives up on the release before it writes.
    tokio::time::sleep(Duration::from_millis(2010)).await;
    let cancelled = timeout(Duration::from_millis(100), guard.release()).await;
    assert!(cancelled.is_err());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let record = store.inner.record(&key("job")).unwrap();
    assert!(record.released, "{record:?}");
    assert!(a.held_keys().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_release_and_delete_future_still_deletes() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(2010)).await;
    let cancelled = timeout(Duration::from_millis(100), guard.release_and_delete()).await;
    assert!(cancelled.is_err());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(store.inner.record(&key("job")).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_honours_delete_on_release() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire("job", AcquireOptions::new().delete_on_release(true))
        .await
        .unwrap();
    drop(guard);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(store.record(&key("job")).is_none());
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_background_releases_and_reports_them() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let dropped = a.acquire("dropped", AcquireOptions::new()).await.unwrap();
    let held = a.acquire("held", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    drop(dropped);
    // Its release is on the wire when shutdown starts.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let report = a.shutdown().await.unwrap();
    let mut released = report.released.clone();
    released.sort();
    assert_eq!(released, [key("dropped"), key("held")], "{report:?}");
    assert!(store.inner.record(&key("dropped")).unwrap().released);
    assert!(store.inner.record(&key("held")).unwrap().released);
    drop(held);
}

// ---- 5. No duration panics -------------------------------------------------

#[tokio::test(start_paused = true)]
async fn waiting_forever_waits_and_does_not_panic() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let forever = timeout(
        Duration::from_secs(3600),
        a.acquire("job", wait(Duration::MAX).refresh_period(Duration::MAX)),
    )
    .await;
    assert!(forever.is_err(), "still waiting for the live holder");
    assert!(held.is_safe());
    // And it takes the lock once released.
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire("job", wait(Duration::MAX)).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    let guard = timeout(PATIENCE, waiter).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn a_record_with_an_enormous_lease_does_not_panic_a_waiter() {
    let store = MemoryStore::new();
    store
        .put(
            &key("job"),
            lock_core::Expect::Vacant,
            NewRecord {
                owner: "someone".into(),
                rvn: Rvn::fresh(),
                lease: Duration::MAX,
                released: false,
                fence: FenceUpdate::Next,
                data: lock_core::DataUpdate::Keep,
                expires_at: None,
            },
        )
        .await
        .unwrap();
    let a = client(store.clone(), "a");
    assert!(
        a.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let error = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::AcquireTimeout { .. }), "{error}");
}

#[tokio::test(start_paused = true)]
async fn durations_that_would_overflow_are_refused_or_saturated() {
    let store = MemoryStore::new();
    let refused = LockClient::builder(store.clone())
        .lease(Duration::MAX)
        .build()
        .unwrap_err();
    assert!(
        matches!(refused, LockError::InvalidConfig(_)),
        "{refused:?}"
    );
    // A client whose other durations are enormous works and never panics.
    let a = LockClient::builder(store.clone())
        .owner("a")
        .lease(LEASE)
        .refresh_period(Duration::MAX)
        .retry_backoff(Duration::MAX, Duration::MAX)
        .shutdown_timeout(Duration::MAX)
        .build()
        .unwrap();
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    tokio::time::sleep(LEASE * 2).await;
    assert!(guard.is_safe());
    drop(guard);
    let report = timeout(PATIENCE, a.shutdown()).await.unwrap().unwrap();
    assert_eq!(report.released, [key("job")]);
}

// ---- 6. A dead holder is taken over by short attempts ---------------------

#[tokio::test(start_paused = true)]
async fn repeated_try_acquire_takes_over_a_dead_holder() {
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let started = Instant::now();
    let a = client(store.clone(), "a");
    let guard = loop {
        if let Some(guard) = a.try_acquire("job", AcquireOptions::new()).await.unwrap() {
            break guard;
        }
        assert!(Instant::now() - started < LEASE * 2, "never taken over");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let waited = Instant::now() - started;
    // lease × (1 + drift) from the first sighting, to the next attempt.
    assert!(waited >= Duration::from_millis(10_100), "{waited:?}");
    assert!(waited <= Duration::from_millis(11_100), "{waited:?}");
    assert_eq!(guard.fence(), Fence(2));
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn short_waits_of_clones_share_what_they_saw_of_a_dead_holder() {
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let mut attempts = 0;
    let guard = loop {
        attempts += 1;
        match a.clone().acquire("job", wait(Duration::from_secs(2))).await {
            Ok(guard) => break guard,
            Err(LockError::AcquireTimeout { holder, .. }) => {
                assert_eq!(holder.as_deref(), Some("dead"));
            }
            Err(other) => panic!("{other:?}"),
        }
        assert!(Instant::now() - started < LEASE * 2, "never taken over");
    };
    assert!(attempts >= 5, "{attempts}");
    assert!(Instant::now() - started <= Duration::from_millis(10_200));
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn a_live_holder_is_not_taken_over_by_short_attempts() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    for _ in 0..40 {
        assert!(
            a.try_acquire("job", AcquireOptions::new())
                .await
                .unwrap()
                .is_none()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(held.is_safe());
    held.release().await.unwrap();
    assert!(
        a.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn a_takeover_says_whom_it_took_over_and_a_vacant_acquire_does_not() {
    let store = MemoryStore::new();
    let dead = client(store.clone(), "dead");
    dead.acquire("job", AcquireOptions::new().data(b"step 3".to_vec()))
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", wait(LEASE * 2)).await.unwrap();
    let previous = guard.took_over().expect("a takeover");
    assert_eq!(previous.owner, "dead");
    assert_eq!(previous.fence, Fence(1));
    assert_eq!(previous.data.as_deref(), Some(&b"step 3"[..]));
    assert_eq!(guard.fence(), Fence(2));
    guard.release().await.unwrap();
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert!(
        guard.took_over().is_none(),
        "a released lock is not a takeover"
    );
    let next = waiting(&a, "job", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    guard.release().await.unwrap();
    let handed = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert!(handed.took_over().is_none(), "a hand-off is not a takeover");
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_gives_up_on_a_live_holder_within_a_heartbeat_period() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let error = timeout(
        PATIENCE,
        a.acquire("job", AcquireOptions::new().busy_unless_dead(true)),
    )
    .await
    .unwrap()
    .unwrap_err();
    let waited = Instant::now() - started;
    match error {
        LockError::AcquireTimeout { holder, .. } => assert_eq!(holder.as_deref(), Some("b")),
        other => panic!("{other:?}"),
    }
    // b heartbeats every 2 s; a polls every 0.25–0.5 s.
    assert!(waited <= Duration::from_millis(2500), "{waited:?}");
    assert!(held.is_safe());
    // A later attempt remembers b's record: b is still writing, so it is busy
    // as soon as b's record has changed again.
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_takes_over_a_dead_holder_in_one_attempt() {
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let guard = timeout(
        PATIENCE,
        a.acquire("job", AcquireOptions::new().busy_unless_dead(true)),
    )
    .await
    .unwrap()
    .unwrap();
    let waited = Instant::now() - started;
    // lease × (1 + drift) from the first sighting, woken at that instant.
    assert_eq!(waited, Duration::from_millis(10_100));
    assert_eq!(guard.took_over().map(|t| t.owner.as_str()), Some("dead"));
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_with_a_budget_waits_past_it_only_while_the_holder_looks_dead() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    // A live holder: the budget applies as usual.
    let started = Instant::now();
    let error = a
        .acquire("job", wait(Duration::from_secs(5)).busy_unless_dead(true))
        .await
        .unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert_eq!(Instant::now() - started, Duration::from_secs(5));
    held.detach().await.unwrap();
    // Now dead: watched past the 5 s budget until it may be taken over.
    let started = Instant::now();
    let guard = a
        .acquire("job", wait(Duration::from_secs(5)).busy_unless_dead(true))
        .await
        .unwrap();
    assert!(Instant::now() - started > Duration::from_secs(5));
    assert_eq!(guard.fence(), Fence(2));
}

// ---- Found in review: hand-offs nobody takes, ambiguous takeovers, a dropped
// detach, shutdown racing acquires --------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_handoff_whose_waiter_is_cancelled_before_taking_it_is_released() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let waiter = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The release picks the waiter and writes nothing; the waiter is cancelled
    // before it runs.
    leader.release().await.unwrap();
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let record = store.record(&key("leader")).unwrap();
    assert!(
        record.released,
        "the orphaned hand-off is released: {record:?}"
    );
    let b = client(store.clone(), "b");
    assert!(
        b.try_acquire("leader", AcquireOptions::new())
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_fails_after_being_handed_the_lock_hands_it_to_the_next_task() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 31);
    let a = client(faulty.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let first = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The first waiter's hand-off write is refused for good (nothing reaches
    // the store); the lock it was handed goes on to the second waiter.
    faulty.script(
        lock_memory::Op::Put,
        lock_memory::Fault::Error(lock_core::StoreErrorKind::Unauthorized),
    );
    let writes = store.writes();
    leader.release().await.unwrap();
    assert!(first.await.unwrap().is_err());
    let guard = timeout(PATIENCE, second).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(2));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        store.writes() - writes,
        1,
        "one write took the handed lock: nothing released it in between"
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_with_a_heartbeat_unresolved_is_written_not_handed_over() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 33);
    let a = client(faulty.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let next = waiting(&a, "leader", wait(Duration::from_secs(60)));
    // The first heartbeat applies and its answer is lost: its version is
    // unresolved while it backs off before trying again.
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    while faulty.scripted() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Released now, the lock cannot be handed over on the version last
    // confirmed (the store holds the unresolved one): it is released, and the
    // waiter takes it at once instead of waiting out a lease.
    let released = Instant::now();
    leader.release().await.unwrap();
    let guard = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "{:?}",
        released.elapsed()
    );
    assert_eq!(guard.fence(), Fence(2));
    assert!(guard.took_over().is_none());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_acquire_does_not_queue_behind_a_release_others_already_wait_for() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    // A release whose write takes a second, and a task already queued for it.
    store.delay_writes(Duration::from_secs(1));
    let queued = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let releasing = tokio::spawn(leader.release_with_data("done"));
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The key is promised to the queued task: a one-attempt acquire says busy
    // at once instead of queueing behind it.
    let started = Instant::now();
    let error = a.acquire("leader", wait(Duration::ZERO)).await.unwrap_err();
    assert!(matches!(error, LockError::AlreadyHeld { .. }), "{error:?}");
    assert_eq!(started.elapsed(), Duration::ZERO);
    releasing.await.unwrap().unwrap();
    store.delay_writes(Duration::ZERO);
    timeout(PATIENCE, queued)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_handoff_whose_first_waiter_is_cancelled_goes_to_the_next_one() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let first = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let second = waiting(&a, "leader", wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let writes = store.writes();
    // The release picks the first waiter and writes nothing; it is cancelled
    // before it runs, and the hand-off stays for the second.
    leader.release().await.unwrap();
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let guard = timeout(PATIENCE, second).await.unwrap().unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(store.writes() - writes, 1, "one write: the second waiter's");
    assert_eq!(guard.fence(), Fence(2));
    guard.release().await.unwrap();
}

/// A dead holder's lock, and client "a" behind a fault injector (seeded with
/// `seed`) whose vacant write is refused (held) and whose takeover applies
/// with its reply lost.
async fn takeover_reply_lost(seed: u64) -> (FaultyStore<MemoryStore>, LockClient) {
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let faulty = FaultyStore::new(store, seed);
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::Pass);
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    let a = client(faulty.clone(), "a");
    (faulty, a)
}

#[tokio::test(start_paused = true)]
async fn a_takeover_whose_reply_was_lost_still_says_whom_it_took_over() {
    let (faulty, a) = takeover_reply_lost(3).await;
    let guard = timeout(PATIENCE, a.acquire("job", wait(LEASE * 2)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence(), Fence(2));
    assert_eq!(faulty.scripted(), 0, "both scripted faults were used");
    assert_eq!(guard.took_over().map(|t| t.owner.as_str()), Some("dead"));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_detach_stops_heartbeats_and_frees_the_key_for_this_client() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(Duration::from_secs(1));
    // A heartbeat is on the wire; the caller stops waiting for the detach.
    tokio::time::sleep(Duration::from_millis(2010)).await;
    assert!(
        timeout(Duration::from_millis(100), guard.detach())
            .await
            .is_err()
    );
    assert!(a.held_keys().is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let puts = store.puts().len();
    tokio::time::sleep(LEASE).await;
    assert_eq!(store.puts().len(), puts, "no heartbeats after the detach");
    store.delay_writes(Duration::ZERO);
    // The detached record is taken over like any dead holder's.
    let again = timeout(PATIENCE, a.acquire("job", wait(LEASE * 2)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_an_acquire_whose_write_is_in_flight_and_its_clean_up() {
    let store = Delayed::new(MemoryStore::new());
    store.delay_writes(Duration::from_secs(1));
    let a = client(store.clone(), "a");
    let acquiring = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire("job", AcquireOptions::new()).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    timeout(PATIENCE, a.shutdown()).await.unwrap().unwrap();
    // The write applied while shutdown ran; the acquire gave it up and its
    // clean-up released it before shutdown returned.
    let record = store.inner.record(&key("job")).unwrap();
    assert!(record.released, "{record:?}");
    let result = acquiring.await.unwrap();
    assert!(matches!(result, Err(LockError::Shutdown)), "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_acquires_waiting_in_the_queue_and_for_other_clients() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let _leader = a.acquire("leader", AcquireOptions::new()).await.unwrap();
    let _other = b.acquire("other", AcquireOptions::new()).await.unwrap();
    let queued = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire("leader", wait(Duration::MAX)).await })
    };
    let polling = {
        let a = a.clone();
        tokio::spawn(async move {
            a.acquire("other", wait(Duration::MAX).refresh_period(Duration::MAX))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = Instant::now();
    timeout(PATIENCE, a.shutdown()).await.unwrap().unwrap();
    assert!(Instant::now() - started < Duration::from_secs(1));
    for task in [queued, polling] {
        let result = timeout(Duration::from_secs(1), task)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(result, Err(LockError::Shutdown)), "{result:?}");
    }
}

// ---- 7. Lost answers: an acquire gives up soon, a release says what happened

#[tokio::test(start_paused = true)]
async fn a_one_attempt_acquire_whose_answers_are_lost_gives_up_soon_and_leaves_nothing_held() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 5);
    // The write applies but its reply is lost, then the store answers nothing.
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    let lease = Duration::from_secs(60);
    let a = LockClient::builder(faulty.clone())
        .owner("a")
        .lease(lease)
        .build()
        .unwrap();
    let unreachable = faulty.clone();
    tokio::spawn(async move {
        // Everything after the first write fails (as when each answer is lost).
        tokio::task::yield_now().await;
        unreachable.set_unavailable(true);
    });
    let started = Instant::now();
    let result = timeout(PATIENCE, a.try_acquire("job", AcquireOptions::new()))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(result.is_err(), "{result:?}");
    // Not a whole lease: the client's retry window (4 × the 2 s backoff cap).
    assert!(took <= Duration::from_secs(10), "gave up after {took:?}");
    // The write that applied is released by the acquire's clean-up once the
    // store answers again; shutdown waits for it.
    faulty.set_unavailable(false);
    let report = timeout(PATIENCE, a.shutdown()).await.unwrap().unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    let record = store.record(&key("job")).unwrap();
    assert!(record.released, "left held: {record:?}");
}

#[tokio::test(start_paused = true)]
async fn a_release_by_version_whose_reply_was_lost_is_not_an_error_once_another_holds_the_lock() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let detached = a
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    // The release applies; its reply is lost; before the client reads the key
    // back, another client acquires it (fence 2).
    let faulty = FaultyStore::new(store.clone(), 6);
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    let releaser = client(faulty.clone(), "operator");
    let b = client(store.clone(), "b");
    let taken = tokio::spawn(async move { b.acquire("job", wait(LEASE)).await });
    let released = timeout(
        PATIENCE,
        releaser.release_version("job", detached.version()),
    )
    .await
    .unwrap();
    let guard = timeout(PATIENCE, taken).await.unwrap().unwrap().unwrap();
    assert_eq!(guard.fence(), Fence(2));
    let info = released.expect("the version is no longer held: not an error");
    assert_eq!(info.fence, Fence(1));
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_reply_was_lost_is_not_stolen_once_another_holds_the_lock() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 7);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let b = client(store.clone(), "b");
    let taken = tokio::spawn(async move { b.acquire("job", wait(LEASE)).await });
    // The release applies, its reply is lost; its next attempt comes after b
    // has taken the free key (fence 2).
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    faulty.script(
        lock_memory::Op::Put,
        lock_memory::Fault::Delay(Duration::from_secs(2)),
    );
    faulty.script(
        lock_memory::Op::Get,
        lock_memory::Fault::Delay(Duration::from_secs(2)),
    );
    let released = timeout(PATIENCE, guard.release()).await.unwrap();
    let taken = timeout(PATIENCE, taken).await.unwrap().unwrap().unwrap();
    assert_eq!(taken.fence(), Fence(2));
    assert!(
        released.is_ok(),
        "a release that applied is not reported as stolen: {released:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_after_a_lapsed_lease_and_a_takeover_is_stolen_even_with_a_heartbeat_unresolved()
{
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 8);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // A heartbeat times out (it stays a candidate), then the store is
    // unreachable for longer than the lease: another client takes over.
    faulty.script(
        lock_memory::Op::Put,
        lock_memory::Fault::AmbiguousNotApplied,
    );
    // Cut the store off right after that heartbeat, before its retry.
    while faulty.scripted() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    faulty.set_unavailable(true);
    let b = client(store.clone(), "b");
    let taken = timeout(PATIENCE, b.acquire("job", wait(LEASE * 3)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence(), Fence(2));
    faulty.set_unavailable(false);
    eprintln!("DEBUG state before release: {:?}", guard.state());
    let released = timeout(PATIENCE, guard.release()).await.unwrap();
    eprintln!("DEBUG released: {released:?}");
    assert!(
        matches!(
            &released,
            Err(LockError::Lost {
                reason: LostReason::Stolen { .. },
                ..
            })
        ),
        "a lease that lapsed and was taken over is stolen, not released: {released:?}"
    );
    let record = store.record(&key("job")).unwrap();
    assert_eq!(
        (record.owner.as_str(), record.fence, record.released),
        ("b", Fence(2), false)
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_unless_dead_takeover_whose_reply_was_lost_is_resolved_not_abandoned() {
    // After watching the dead holder for its lease, the takeover applies and
    // its reply is lost.
    let (faulty, a) = takeover_reply_lost(9).await;
    let guard = timeout(
        PATIENCE,
        a.acquire("job", AcquireOptions::new().busy_unless_dead(true)),
    )
    .await
    .unwrap()
    .expect("read back, the takeover is this client's");
    assert_eq!(faulty.scripted(), 0);
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn shutdown_names_an_abandoned_acquire_write_it_could_not_release() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 10);
    faulty.script(lock_memory::Op::Put, lock_memory::Fault::AmbiguousApplied);
    let a = LockClient::builder(faulty.clone())
        .owner("a")
        .lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let unreachable = faulty.clone();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        unreachable.set_unavailable(true);
    });
    let result = timeout(PATIENCE, a.try_acquire("job", AcquireOptions::new()))
        .await
        .unwrap();
    assert!(result.is_err(), "{result:?}");
    // The store stays down: the write that applied cannot be released, and
    // the report says so instead of saying nothing.
    let report = timeout(PATIENCE, a.shutdown()).await.unwrap().unwrap();
    let named = report.timed_out.contains(&key("job"))
        || report
            .failed
            .iter()
            .any(|(failed, _)| *failed == key("job"));
    assert!(named, "{report:?}");
    assert!(!store.record(&key("job")).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn an_orphaned_handoff_of_a_long_lease_lock_is_released_for_as_long_as_that_lease() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 12);
    // The client's lease is 10 s; this lock's own is 60 s.
    let a = client(faulty.clone(), "a");
    let leader = a
        .acquire(
            "leader",
            AcquireOptions::new().lease(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let waiter = waiting(&a, "leader", wait(Duration::from_secs(120)));
    tokio::time::sleep(Duration::from_millis(10)).await;
    leader.release().await.unwrap();
    // The store is slow as the waiter is cancelled: the orphaned hand-off's
    // clean-up write takes 30 s. It is waited for past the client's 10 s
    // lease, as the record holds the lock for 60 s.
    faulty.script(
        lock_memory::Op::Put,
        lock_memory::Fault::Delay(Duration::from_secs(30)),
    );
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_secs(35)).await;
    let record = store.record(&key("leader")).unwrap();
    assert!(
        record.released,
        "released by the slow clean-up, 30 s in: {record:?}"
    );
}
