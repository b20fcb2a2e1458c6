//! Behaviour of the lock client over the in-memory store, in paused tokio time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreReply};
use lock_core::{
    AcquireOptions, ConditionalStore, ConfigError, DataUpdate, Expect, Fence, FenceUpdate,
    LeaseState, LockClient, LockError, LockKey, LostReason, NewRecord, Outcome, Rvn,
};
use lock_memory::{Fault, FaultyStore, MemoryStore, Op};
use support::{LEASE, client, wait};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn uncontended_acquire_of_a_new_key_is_one_write() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(store.calls(), 1, "history: {:?}", store.history());
    assert_eq!(store.writes(), 1);
    assert_eq!(guard.fence(), Fence(1));
    assert!(guard.is_safe());
    guard.release().await.unwrap();
    assert_eq!(store.writes(), 2);
}

#[tokio::test(start_paused = true)]
async fn acquire_of_a_released_key_is_one_write_and_fence_plus_one() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    for expected in 1..=5u64 {
        let before = store.calls();
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        assert_eq!(store.calls() - before, 1);
        assert_eq!(guard.fence(), Fence(expected));
        guard.release().await.unwrap();
        let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
        assert!(record.released);
        assert_eq!(record.fence, Fence(expected), "release keeps the fence");
    }
}

#[tokio::test(start_paused = true)]
async fn try_acquire_of_a_held_lock_is_none_and_a_timeout_names_the_holder() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "alice");
    let b = client(store.clone(), "bob");
    let _guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert!(
        b.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let started = Instant::now();
    let error = b
        .acquire("job", wait(Duration::from_secs(3)))
        .await
        .unwrap_err();
    match error {
        LockError::AcquireTimeout {
            key,
            holder,
            waited,
        } => {
            assert_eq!(key, LockKey::new("job"));
            assert_eq!(holder.as_deref(), Some("alice"));
            assert!(waited >= Duration::from_secs(3), "{waited:?}");
            assert!(started.elapsed() < Duration::from_secs(4));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

/// A waiting acquire tells its observer what each of its own store calls
/// showed, and makes no extra call for it: one observation per rejected
/// attempt or poll, none for the write that took the lock.
#[tokio::test(start_paused = true)]
async fn a_wait_observer_sees_each_record_the_acquire_learns_and_costs_no_read() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "alice");
    // bob's calls are counted on a store of his own (alice heartbeats meanwhile).
    let bobs = FaultyStore::new(store.clone(), 0);
    let b = client(bobs.clone(), "bob");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let options = wait(Duration::from_secs(10)).on_wait(move |info| {
        record
            .lock()
            .unwrap()
            .push(info.map(|info| (info.owner.clone(), info.fence, info.released)));
    });
    let waiting = tokio::spawn(async move { b.acquire("job", options).await });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    guard.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("bounded")
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence(), Fence(2));
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 2, "{seen:?}");
    assert!(
        seen.iter().all(
            |s| s.as_ref() == Some(&("alice".to_owned(), Fence(1), false))
                || s.as_ref().is_some_and(|s| s.2)
        ),
        "{seen:?}"
    );
    // bob's calls: the observed replies, plus the write that took the lock.
    assert_eq!(bobs.calls(), seen.len() + 1, "{seen:?}");
}

/// The holder crashed (its store is unreachable, so it never writes again); the
/// waiter must wait lease × (1 + drift) from its first sight of the record.
#[tokio::test(start_paused = true)]
async fn takeover_happens_after_lease_times_one_plus_drift_and_never_earlier() {
    let store = MemoryStore::new();
    let holder_store = FaultyStore::new(store.clone(), 7);
    let holder = client(holder_store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let first_rvn = store.get(&LockKey::new("job")).await.unwrap().unwrap().rvn;
    holder_store.set_unavailable(true);

    let started = Instant::now();
    let taken = waiter
        .acquire("job", wait(Duration::from_secs(60)))
        .await
        .unwrap();
    let waited = started.elapsed();
    let takeover = LEASE.mul_f64(1.01);
    assert!(
        waited >= takeover,
        "took over after {waited:?}, before {takeover:?}"
    );
    assert!(
        waited < takeover + Duration::from_millis(100),
        "took over late: {waited:?}"
    );
    assert_eq!(taken.fence(), Fence(2));
    // The takeover was conditional on the RVN the waiter had watched all along.
    let takeover_put = store
        .history()
        .into_iter()
        .rfind(|entry| entry.is_put())
        .unwrap();
    assert_eq!(takeover_put.expect(), Some(&Expect::Version(first_rvn)));
    // By then the crashed holder had stopped trusting its lease.
    assert!(matches!(guard.state(), LeaseState::Lost { .. }));
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_released_lock_is_taken_within_one_refresh_period() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let guard = b
            .acquire("job", wait(Duration::from_secs(60)))
            .await
            .unwrap();
        (Instant::now(), guard.fence(), b, guard)
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (acquired_at, fence, _b, _guard) = waiter.await.unwrap();
    assert!(acquired_at - released_at <= Duration::from_millis(500));
    assert_eq!(fence, Fence(2));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_keep_the_lock_for_many_leases() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let error = b.acquire("job", wait(LEASE * 10)).await.unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert!(guard.is_safe());
    assert_eq!(guard.fence(), Fence(1));
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!(record.owner, "a");
    assert_eq!(record.fence, Fence(1), "heartbeats keep the fence");
    let heartbeats = store
        .history()
        .iter()
        .filter(|entry| entry.is_put() && entry.writer() == Some("a"))
        .count();
    // 100 s of heartbeats every 2 s (the first one spread a little earlier).
    assert!((49..=52).contains(&heartbeats), "{heartbeats} heartbeats");
}

/// With the store unreachable for the holder, its guard goes in danger, then lost,
/// and both happen before the earliest instant a waiter may take over.
#[tokio::test(start_paused = true)]
async fn outage_puts_the_guard_in_danger_then_lost_before_a_waiter_can_take_over() {
    let store = MemoryStore::new();
    let holder_store = FaultyStore::new(store.clone(), 11);
    let holder = client(holder_store.clone(), "holder");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let acquired = Instant::now();
    holder_store.set_unavailable(true);
    // Watched from before the danger (and `lost()` from within it too):
    // `lost()` waits through the danger for the loss, `until_unsafe()` does not.
    let watch = |lost: bool| {
        let watched = if lost {
            boxed_watch(guard.until_ended())
        } else {
            boxed_watch(guard.until_unsafe())
        };
        tokio::spawn(async move { (watched.await, Instant::now()) })
    };
    let (lost_watch, unsafe_watch) = (watch(true), watch(false));

    let waiter = client(store.clone(), "waiter");
    let waiting = tokio::spawn(async move {
        let guard = waiter
            .acquire("job", wait(Duration::from_secs(60)))
            .await
            .unwrap();
        (Instant::now(), waiter, guard)
    });

    let mut danger_at = None;
    let mut lost_at = None;
    let mut lost_in_danger = None;
    while lost_at.is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        match guard.state() {
            LeaseState::Safe { .. } => assert!(
                danger_at.is_none(),
                "danger is not left without a heartbeat"
            ),
            LeaseState::InDanger { .. } => {
                if danger_at.is_none() {
                    lost_in_danger = Some(watch(true));
                }
                danger_at.get_or_insert(Instant::now());
            }
            LeaseState::Lost { reason } => {
                assert_eq!(reason, LostReason::Expired);
                lost_at = Some(Instant::now());
            }
        }
    }
    let (taken_at, _waiter, taken) = waiting.await.unwrap();
    let danger_at = danger_at.unwrap() - acquired;
    let lost_at = lost_at.unwrap() - acquired;
    let taken_at = taken_at - acquired;
    // safe time = 10 s × 0.99 − 0.5 s = 9.4 s
    assert!(
        danger_at >= Duration::from_millis(9400) && danger_at < Duration::from_millis(9420),
        "{danger_at:?}"
    );
    assert!(
        lost_at >= LEASE && lost_at < LEASE + Duration::from_millis(20),
        "{lost_at:?}"
    );
    assert!(taken_at >= LEASE.mul_f64(1.01), "{taken_at:?}");
    assert!(lost_at < taken_at);
    assert_eq!(taken.fence(), Fence(2));
    let reason = tokio::time::timeout(LEASE, guard.until_ended())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Expired);
    let (reason, at) = unsafe_watch.await.unwrap();
    assert_eq!(reason, LostReason::InDanger);
    assert!(at - acquired >= Duration::from_millis(9400) && at - acquired <= danger_at);
    for watched in [lost_watch, lost_in_danger.unwrap()] {
        let (reason, at) = watched.await.unwrap();
        assert_eq!(reason, LostReason::Expired);
        assert!(at - acquired >= LEASE && at - acquired <= lost_at);
    }
}

/// A watch future, boxed so that `lost()` and `until_unsafe()` share a type.
fn boxed_watch(
    future: impl std::future::Future<Output = LostReason> + Send + 'static,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = LostReason> + Send>> {
    Box::pin(future)
}

#[tokio::test(start_paused = true)]
async fn a_stolen_lock_is_detected_at_the_next_heartbeat() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let key = LockKey::new("job");
    let current = store.get(&key).await.unwrap().unwrap();
    // An operator force-takes the lock.
    let outcome = store
        .put(
            &key,
            Expect::Version(current.rvn),
            NewRecord {
                owner: "mallory".into(),
                rvn: Rvn::fresh(),
                lease: LEASE,
                released: false,
                fence: FenceUpdate::Next,
                data: lock_core::DataUpdate::Keep,
                expires_at: None,
            },
        )
        .await
        .unwrap();
    assert!(matches!(outcome, Outcome::Applied(_)));
    let stolen_at = Instant::now();
    let reason = tokio::time::timeout(LEASE, guard.until_ended())
        .await
        .unwrap();
    assert_eq!(
        reason,
        LostReason::Stolen {
            owner: Some("mallory".into())
        }
    );
    assert!(
        stolen_at.elapsed() <= Duration::from_secs(2),
        "seen within one heartbeat period"
    );
    assert!(!guard.is_safe());
    // The lost guard's release does not touch the thief's record.
    let error = guard.release().await.unwrap_err();
    assert!(matches!(error, LockError::Lost { .. }), "{error:?}");
    assert_eq!(store.get(&key).await.unwrap().unwrap().owner, "mallory");
    // And this client may acquire the key again later.
    assert!(
        a.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn fences_strictly_increase_across_acquire_release_takeover_and_retries() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 3);
    let a = client(faulty.clone(), "a");
    let b = client(store.clone(), "b");
    let mut fences = Vec::new();

    let g = a.acquire("job", AcquireOptions::new()).await.unwrap();
    fences.push(g.fence());
    g.release().await.unwrap();

    // An ambiguous acquire that applied, then a retried one that did not.
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    let g = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap();
    fences.push(g.fence());
    g.release().await.unwrap();
    faulty.script(Op::Put, Fault::AmbiguousNotApplied);
    faulty.script(Op::Put, Fault::Throttled);
    let g = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap();
    fences.push(g.fence());

    // Crash and takeover.
    faulty.set_unavailable(true);
    let t = b
        .acquire("job", wait(Duration::from_secs(60)))
        .await
        .unwrap();
    fences.push(t.fence());
    drop(g);
    t.release().await.unwrap();
    faulty.set_unavailable(false);
    let g = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap();
    fences.push(g.fence());

    assert_eq!(
        fences,
        vec![Fence(1), Fence(2), Fence(3), Fence(4), Fence(5)],
        "fences: {fences:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn ambiguous_acquire_that_applied_is_recognised_as_ours() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 1);
    let a = client(faulty.clone(), "a");
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.fence(), Fence(1));
    assert!(guard.is_safe());
    // One write, then a read that found our RVN: no second acquisition.
    assert_eq!(store.writes(), 1, "{:?}", store.history());
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!(record.owner, "a");
    assert_eq!(record.fence, Fence(1));
}

/// The first write applies, and its caller hears only, `late` after
/// sending it, that its outcome is unknown: a reply lost on the way back.
#[derive(Debug)]
struct AppliesThenLosesTheReply {
    late: Duration,
    left: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl StoreLayer for AppliesThenLosesTheReply {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        let first = matches!(call, StoreCall::Put { .. })
            && self
                .left
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |left| left.checked_sub(1),
                )
                .is_ok();
        let reply = call.send(next).await;
        if first {
            tokio::time::sleep(self.late).await;
            return Err(lock_core::StoreError::ambiguous("the reply was lost"));
        }
        reply
    }
}

/// An acquire whose write applied but whose reply was lost, 3 s after the
/// send: the read that finds the write ours (by its RVN) starts the lease
/// at the write's send, not at the read's reply, so the holder's safe time
/// has already lost the 3 s (it would outlive a waiter's count otherwise).
#[tokio::test(start_paused = true)]
async fn an_ambiguous_acquire_found_ours_counts_its_lease_from_the_send() {
    let late = Duration::from_secs(3);
    let store = MemoryStore::new();
    let layer = AppliesThenLosesTheReply {
        late,
        left: std::sync::atomic::AtomicUsize::new(1),
    };
    let a = client(Layered::new(layer, store.clone()), "a");
    let sent = Instant::now();
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(store.writes(), 1, "resolved as ours, not written again");
    assert!(sent.elapsed() >= late, "{:?}", sent.elapsed());
    // Safe time: 10 s × 0.99 − 0.5 s = 9.4 s from the send.
    let from_the_send = Duration::from_millis(9_400).saturating_sub(sent.elapsed());
    match guard.state() {
        LeaseState::Safe { remaining } => assert!(
            remaining <= from_the_send,
            "{remaining:?} of safe time left, {from_the_send:?} counted from the send"
        ),
        other => panic!("held and safe: {other:?}"),
    }
    guard.release().await.unwrap();
}

/// The first write applies and its reply is lost; every read answers
/// `read_late` after it read.
#[derive(Debug)]
struct LostReplyThenSlowReads {
    read_late: Duration,
    lost: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl StoreLayer for LostReplyThenSlowReads {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        let put = matches!(call, StoreCall::Put { .. });
        let get = matches!(call, StoreCall::Get { .. });
        let reply = call.send(next).await;
        if put && !self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(lock_core::StoreError::ambiguous("the reply was lost"));
        }
        if get {
            tokio::time::sleep(self.read_late).await;
        }
        reply
    }
}

/// An acquire that learns its lost write applied only after that write's
/// lease (from its send) is no longer safe does not hold it as it is: it
/// writes afresh on top of it (a new fence), so the guard it returns is
/// safe, and a waiter that watched the old record meanwhile is fenced off.
#[tokio::test(start_paused = true)]
async fn an_ambiguous_acquire_found_ours_too_late_to_trust_is_acquired_afresh() {
    let store = MemoryStore::new();
    let layer = LostReplyThenSlowReads {
        // Past the safe time of 9.4 s.
        read_late: Duration::from_millis(9_600),
        lost: std::sync::atomic::AtomicBool::new(false),
    };
    let a = client(Layered::new(layer, store.clone()), "a");
    let guard = tokio::time::timeout(
        Duration::from_secs(60),
        a.acquire("job", AcquireOptions::new()),
    )
    .await
    .expect("bounded")
    .unwrap();
    assert!(guard.is_safe(), "{:?}", guard.state());
    assert_eq!(
        guard.fence(),
        Fence(2),
        "written afresh on its own old write"
    );
    assert_eq!(store.writes(), 2, "{:?}", store.history());
    guard.release().await.unwrap();
}

/// A reentrant acquire shares the acquisition only while the holder trusts
/// it: never once its lease is in danger (heartbeats failing, not yet
/// marked lost), and never while its release is on the way. Either would
/// hand out a guard that is already unsafe, or one whose lock is about to
/// be let go.
#[tokio::test(start_paused = true)]
async fn a_reentrant_acquire_never_shares_a_lock_it_no_longer_trusts() {
    let reentrant = || AcquireOptions::new().reentrant(true).wait(Duration::ZERO);
    let bounded = Duration::from_secs(30);

    // In danger: the store stopped answering, the lease's safe time is over.
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 7);
    let a = client(faulty.clone(), "a");
    let first = a.acquire("job", reentrant()).await.unwrap();
    faulty.set_unavailable(true);
    tokio::time::sleep(Duration::from_millis(9_500)).await;
    assert!(
        matches!(first.state(), LeaseState::InDanger { .. }),
        "{:?}",
        first.state()
    );
    let again = tokio::time::timeout(bounded, a.acquire("job", reentrant()))
        .await
        .expect("bounded");
    if let Ok(shared) = &again {
        assert!(
            shared.is_safe(),
            "a reentrant acquire handed out an unsafe guard"
        );
    }

    // Being released: the release's write is on the way (answered in 2 s).
    let store = support::Delayed::new(MemoryStore::new());
    let b = client(store.clone(), "b");
    let first = b.acquire("job", reentrant()).await.unwrap();
    let fence = first.fence();
    store.delay_writes(Duration::from_secs(2));
    let releasing = tokio::spawn(first.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = tokio::time::timeout(
        bounded,
        b.acquire("job", reentrant().wait(Duration::from_secs(5))),
    )
    .await
    .expect("bounded")
    .unwrap();
    assert!(
        again.fence() > fence,
        "the lock being released was shared (fence {}) instead of acquired anew",
        again.fence()
    );
    releasing.await.unwrap().unwrap();
    again.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn ambiguous_acquire_that_did_not_apply_is_retried() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 2);
    let a = client(faulty.clone(), "a");
    faulty.script(Op::Put, Fault::AmbiguousNotApplied);
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.fence(), Fence(1), "the first write never applied");
    assert_eq!(store.writes(), 1);
}

#[tokio::test(start_paused = true)]
async fn ambiguous_heartbeat_is_resolved_whether_it_applied_or_not() {
    for fault in [Fault::AmbiguousApplied, Fault::AmbiguousNotApplied] {
        let store = MemoryStore::new();
        let faulty = FaultyStore::new(store.clone(), 5);
        let a = client(faulty.clone(), "a");
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        faulty.script(Op::Put, fault.clone());
        // Run through several heartbeats; the lock must stay ours and safe.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(guard.is_safe(), "{fault:?}: {:?}", guard.state());
        }
        let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
        assert_eq!(record.owner, "a");
        assert_eq!(record.fence, Fence(1));
        guard.release().await.unwrap();
        assert!(
            store
                .get(&LockKey::new("job"))
                .await
                .unwrap()
                .unwrap()
                .released
        );
    }
}

#[tokio::test(start_paused = true)]
async fn with_lock_cancels_the_work_when_the_lease_is_in_danger() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 9);
    let a = client(faulty.clone(), "a");
    let started = Instant::now();
    let progress = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = progress.clone();
    let faults = faulty.clone();
    let run = a.with_lock("job", AcquireOptions::new(), |lock| async move {
        assert_eq!(lock.fence(), Fence(1));
        faults.set_unavailable(true);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    // The work never ends on its own: only the lease can end it.
    let result = tokio::time::timeout(LEASE * 2, run)
        .await
        .expect("with_lock ended the work");
    let elapsed = started.elapsed();
    match result {
        Err(LockError::Lost { reason, .. }) => assert_eq!(reason, LostReason::InDanger),
        other => panic!("expected a lost-lock error, got {other:?}"),
    }
    assert!(
        elapsed >= Duration::from_millis(9400) && elapsed < Duration::from_millis(9500),
        "{elapsed:?}"
    );
    let steps = progress.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        progress.load(std::sync::atomic::Ordering::SeqCst),
        steps,
        "work kept running"
    );
}

#[tokio::test(start_paused = true)]
async fn with_lock_returns_the_value_and_releases() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let value = a
        .with_lock("job", AcquireOptions::new(), |lock| async move {
            lock.fence().get() + 41
        })
        .await
        .unwrap();
    assert_eq!(value, 42);
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
    assert!(a.held_keys().is_empty());
}

#[tokio::test(start_paused = true)]
async fn reentrant_acquire_shares_the_acquisition() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let first = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let error = a
        .acquire("job", AcquireOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::AlreadyHeld { .. }), "{error:?}");
    let writes = store.writes();
    let second = a
        .acquire("job", AcquireOptions::new().reentrant(true))
        .await
        .unwrap();
    assert_eq!(store.writes(), writes, "a reentrant acquire writes nothing");
    assert_eq!(second.fence(), first.fence());
    first.release().await.unwrap();
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert!(!record.released, "the second guard still holds it");
    second.release().await.unwrap();
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
}

#[tokio::test(start_paused = true)]
async fn only_if_exists_refuses_a_missing_lock_and_takes_a_released_one() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let error = a
        .acquire("job", AcquireOptions::new().only_if_exists(true))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::NotFound { .. }), "{error:?}");
    assert_eq!(store.writes(), 0);
    assert!(store.get(&LockKey::new("job")).await.unwrap().is_none());
    a.acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let guard = a
        .acquire("job", AcquireOptions::new().only_if_exists(true))
        .await
        .unwrap();
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_everything_and_refuses_later_calls() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let mut guards = Vec::new();
    for name in ["a", "b", "c", "d"] {
        guards.push(a.acquire(name, AcquireOptions::new()).await.unwrap());
    }
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.released.len(), 4);
    assert!(report.failed.is_empty() && report.timed_out.is_empty());
    for name in ["a", "b", "c", "d"] {
        assert!(
            store
                .get(&LockKey::new(name))
                .await
                .unwrap()
                .unwrap()
                .released
        );
    }
    assert!(matches!(
        a.acquire("e", AcquireOptions::new()).await,
        Err(LockError::Shutdown)
    ));
    assert!(matches!(a.shutdown().await, Err(LockError::Shutdown)));
    assert!(matches!(
        guards[0].state(),
        LeaseState::Lost {
            reason: LostReason::Released
        }
    ));
    let writes = store.writes();
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_eq!(store.writes(), writes, "already released by shutdown");
}

/// A memory store, a view of it with faults drawn from `seed`, and client
/// "a" on that view.
fn on_faulty(seed: u64) -> (MemoryStore, FaultyStore<MemoryStore>, LockClient) {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), seed);
    let a = client(faulty.clone(), "a");
    (store, faulty, a)
}

/// The record of `name` in `store`, which must exist.
async fn record_of(store: &MemoryStore, name: &str) -> lock_core::LockRecord {
    store.get(&LockKey::new(name)).await.unwrap().unwrap()
}

/// A release that gave up (the store unreachable until past the lease's end)
/// returns its error and leaves the record held; `shutdown()`, the store
/// back, releases it by its version and counts it.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_again_a_lock_whose_release_failed() {
    let (store, faulty, a) = on_faulty(3);
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let fence = guard.fence();
    faulty.set_unavailable(true);
    let started = Instant::now();
    let failed = tokio::time::timeout(Duration::from_secs(60), guard.release())
        .await
        .expect("a release gives up");
    assert!(matches!(failed, Err(LockError::Store { .. })), "{failed:?}");
    assert!(started.elapsed() >= LEASE, "it tried until the lease's end");
    faulty.set_unavailable(false);
    assert!(!record_of(&store, "job").await.released, "left held");
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.released, [LockKey::new("job")], "{report:?}");
    assert!(report.failed.is_empty() && report.timed_out.is_empty());
    let record = record_of(&store, "job").await;
    assert!(record.released, "{record:?}");
    assert_eq!(record.fence, fence, "a release keeps the fence");
}

/// The same for a dropped guard, whose release runs in the background and
/// fails there, and for one left to delete on release: shutdown deletes it.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_again_a_dropped_guard_whose_background_release_failed() {
    let (store, faulty, a) = on_faulty(4);
    let kept = a.acquire("kept", AcquireOptions::new()).await.unwrap();
    let deleted = a
        .acquire("deleted", AcquireOptions::new().delete_on_release(true))
        .await
        .unwrap();
    faulty.set_unavailable(true);
    drop(kept);
    drop(deleted);
    // Past every retry of the background releases.
    tokio::time::sleep(LEASE * 3).await;
    faulty.set_unavailable(false);
    assert!(!record_of(&store, "kept").await.released, "left held");
    assert!(!record_of(&store, "deleted").await.released, "left held");
    let mut report = a.shutdown().await.unwrap();
    report.released.sort();
    assert_eq!(
        report.released,
        [LockKey::new("deleted"), LockKey::new("kept")],
        "{report:?}"
    );
    assert!(record_of(&store, "kept").await.released);
    assert_eq!(store.get(&LockKey::new("deleted")).await.unwrap(), None);
}

/// What shutdown releases again is conditional on the version the release
/// left: a record another client took over meanwhile is not touched.
#[tokio::test(start_paused = true)]
async fn shutdown_leaves_alone_a_lock_taken_over_since_its_release_failed() {
    let (store, faulty, a) = on_faulty(5);
    let b = client(store.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    faulty.set_unavailable(true);
    let _ = guard.release().await.unwrap_err();
    let taken = b
        .acquire("job", wait(Duration::from_secs(60)))
        .await
        .unwrap();
    faulty.set_unavailable(false);
    let before = record_of(&store, "job").await;
    assert_eq!((before.owner.as_str(), before.released), ("b", false));
    let writes = store.writes();
    a.shutdown().await.unwrap();
    assert!(store.writes() > writes, "shutdown tried");
    assert_eq!(
        record_of(&store, "job").await,
        before,
        "b's record untouched"
    );
    assert!(taken.is_safe());
    b.shutdown().await.unwrap();
}

/// A lock released within its min hold whose final write failed: shutdown,
/// still within the min hold, writes the final write again (held to the min
/// hold's end, no longer), not a release.
#[tokio::test(start_paused = true)]
async fn shutdown_within_a_min_hold_keeps_a_lock_whose_final_write_failed_held_to_its_end() {
    let (store, faulty, a) = on_faulty(8);
    let min_hold = Duration::from_secs(60);
    let started = Instant::now();
    let guard = a
        .acquire("job", AcquireOptions::new().min_hold(min_hold))
        .await
        .unwrap();
    faulty.set_unavailable(true);
    let _ = guard.release().await.unwrap_err();
    faulty.set_unavailable(false);
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.released, [LockKey::new("job")], "{report:?}");
    let record = record_of(&store, "job").await;
    assert!(!record.released, "held to the min hold's end: {record:?}");
    assert!(
        record.rvn.final_until().is_some(),
        "a final write: {record:?}"
    );
    let rest = min_hold - started.elapsed();
    assert!(
        record.lease <= rest && record.lease + Duration::from_secs(1) >= rest,
        "held for the rest of the min hold ({rest:?}): {record:?}"
    );
}

/// An acquire that gave up with a write in flight whose clean-up failed too
/// (the store unreachable throughout): shutdown releases that write again.
#[tokio::test(start_paused = true)]
async fn shutdown_releases_again_an_abandoned_acquisition_whose_clean_up_failed() {
    let (store, faulty, a) = on_faulty(6);
    // Applied, its reply lost; then nothing answers.
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    for _ in 0..100 {
        faulty.script(Op::Put, Fault::Unavailable);
        faulty.script(Op::Get, Fault::Unavailable);
    }
    let acquire = a.acquire("job", wait(Duration::from_secs(1)));
    let failed = tokio::time::timeout(Duration::from_secs(60), acquire)
        .await
        .expect("the acquire gives up");
    assert!(failed.is_err(), "{failed:?}");
    tokio::time::sleep(LEASE * 3).await;
    assert!(
        faulty.scripted() > 0,
        "still unreachable: {}",
        faulty.scripted()
    );
    faulty.clear_script();
    assert!(!record_of(&store, "job").await.released, "left held");
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.released, [LockKey::new("job")], "{report:?}");
    assert!(record_of(&store, "job").await.released);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_guard_releases_in_the_background() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    drop(guard);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
    assert!(a.held_keys().is_empty());
    let writes = store.writes();
    tokio::time::sleep(LEASE).await;
    assert_eq!(store.writes(), writes, "no heartbeats after drop");
}

#[tokio::test(start_paused = true)]
async fn data_is_stored_readable_and_updatable() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a
        .acquire("job", AcquireOptions::new().data(b"v1".to_vec()))
        .await
        .unwrap();
    let info = b.get_lock("job").await.unwrap().unwrap();
    assert_eq!(info.data.as_deref(), Some(&b"v1"[..]));
    assert_eq!(info.owner, "a");
    assert!(!info.held_by_this_client);
    assert!(
        a.get_lock("job")
            .await
            .unwrap()
            .unwrap()
            .held_by_this_client
    );
    guard.set_data(b"v2".to_vec()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let info = b.get_lock("job").await.unwrap().unwrap();
    assert_eq!(
        info.data.as_deref(),
        Some(&b"v2"[..]),
        "heartbeats keep the data"
    );
    assert_eq!(guard.data().as_deref(), Some(&b"v2"[..]));
}

#[tokio::test(start_paused = true)]
async fn sort_keys_are_separate_locks_and_list_pages_through_them() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let mut guards = Vec::new();
    for shard in 0..7 {
        guards.push(
            a.acquire(
                LockKey::with_sort("tenant", format!("shard-{shard}")),
                AcquireOptions::new(),
            )
            .await
            .unwrap(),
        );
    }
    guards.push(a.acquire("other", AcquireOptions::new()).await.unwrap());
    assert!(guards.iter().all(|g| g.fence() == Fence(1)));
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = a
            .list_locks(
                lock_core::ListOptions::new()
                    .partition("tenant")
                    .limit(3)
                    .cursor(cursor),
            )
            .await
            .unwrap();
        assert!(page.locks.len() <= 3);
        seen.extend(page.locks.into_iter().map(|info| {
            assert!(info.held_by_this_client);
            info.key
        }));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert!(seen.iter().all(|key| key.partition() == "tenant"));
}

#[tokio::test(start_paused = true)]
async fn every_invalid_config_is_a_typed_error() {
    let build = |f: fn(lock_core::LockClientBuilder) -> lock_core::LockClientBuilder| {
        f(LockClient::builder(MemoryStore::new()).lease(LEASE))
            .build()
            .unwrap_err()
    };
    type Check = fn(&ConfigError) -> bool;
    let cases: Vec<(LockError, Check)> = vec![
        (build(|b| b.lease(Duration::ZERO)), |e| {
            matches!(e, ConfigError::ZeroLease)
        }),
        (build(|b| b.heartbeat_period(Duration::ZERO)), |e| {
            matches!(e, ConfigError::ZeroHeartbeat)
        }),
        (build(|b| b.heartbeat_period(LEASE)), |e| {
            matches!(e, ConfigError::HeartbeatTooSlow { .. })
        }),
        (
            build(|b| b.heartbeat_period(Duration::from_millis(9400))),
            |e| matches!(e, ConfigError::HeartbeatTooSlow { .. }),
        ),
        (build(|b| b.refresh_period(Duration::ZERO)), |e| {
            matches!(e, ConfigError::ZeroRefresh)
        }),
        (build(|b| b.max_clock_drift(-0.1)), |e| {
            matches!(e, ConfigError::BadDrift { .. })
        }),
        (build(|b| b.max_clock_drift(0.5)), |e| {
            matches!(e, ConfigError::BadDrift { .. })
        }),
        (build(|b| b.max_clock_drift(f64::NAN)), |e| {
            matches!(e, ConfigError::BadDrift { .. })
        }),
        (build(|b| b.safety_margin(LEASE)), |e| {
            matches!(e, ConfigError::NoSafeTime { .. })
        }),
        (build(|b| b.heartbeat_rate_limit(0)), |e| {
            matches!(e, ConfigError::ZeroRateLimit)
        }),
        (build(|b| b.owner("  ")), |e| {
            matches!(e, ConfigError::EmptyOwner)
        }),
    ];
    for (error, check) in cases {
        match &error {
            LockError::InvalidConfig(config) => assert!(check(config), "{error}"),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    // The defaults are valid, including for a short lease.
    LockClient::builder(MemoryStore::new()).build().unwrap();
    LockClient::builder(MemoryStore::new())
        .lease(Duration::from_millis(100))
        .build()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_invalid_input_is_a_typed_error_and_writes_nothing() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let big = vec![0u8; 500 * 1024];
    let keys_and_data: Vec<(LockKey, Option<Vec<u8>>)> = vec![
        (LockKey::new(""), None),
        (LockKey::with_sort("p", ""), None),
        (LockKey::new("x".repeat(2049)), None),
        (LockKey::with_sort("p", "y".repeat(1025)), None),
        (LockKey::new("job"), Some(big)),
    ];
    for (key, data) in keys_and_data {
        let mut options = AcquireOptions::new();
        if let Some(data) = data {
            options = options.data(data);
        }
        let error = a.acquire(key.clone(), options).await.unwrap_err();
        assert!(
            matches!(error, LockError::InvalidInput { .. }),
            "{key:?}: {error:?}"
        );
    }
    assert_eq!(store.calls(), 0, "{:?}", store.history());
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let error = guard.set_data(vec![0u8; 500 * 1024]).await.unwrap_err();
    assert!(matches!(error, LockError::InvalidInput { .. }), "{error:?}");
    assert_eq!(store.writes(), 1);
}

#[tokio::test(start_paused = true)]
async fn store_errors_that_cannot_be_retried_end_the_acquire_with_a_typed_error() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 4);
    let a = client(faulty.clone(), "a");
    faulty.script(Op::Put, Fault::Error(lock_core::StoreErrorKind::NotFound));
    let error = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap_err();
    match error {
        LockError::Store { source, .. } => {
            assert_eq!(source.kind(), lock_core::StoreErrorKind::NotFound)
        }
        other => panic!("{other:?}"),
    }
    // Throttling is retried within the budget.
    faulty.script(Op::Put, Fault::Throttled);
    faulty.script(Op::Put, Fault::Throttled);
    let guard = a
        .acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(guard.fence(), Fence(1));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_are_rate_limited_and_spread() {
    let store = MemoryStore::new();
    let a = LockClient::builder(store.clone())
        .owner("a")
        .lease(LEASE)
        .heartbeat_period(Duration::from_secs(2))
        .heartbeat_rate_limit(10)
        .build()
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..10 {
        guards.push(
            a.acquire(format!("k{i}"), AcquireOptions::new())
                .await
                .unwrap(),
        );
    }
    store.clear_history();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let starts: Vec<Instant> = store
        .history()
        .iter()
        .map(|entry| entry.started())
        .collect();
    assert!(starts.len() >= 90, "{} heartbeats", starts.len());
    for pair in starts.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(99),
            "{:?}",
            pair[1] - pair[0]
        );
    }
    assert!(guards.iter().all(|g| g.is_safe()));
}

/// A store that accepts a write and never answers must not hold a release (or a
/// heartbeat) past its deadline: the call is abandoned as ambiguous.
#[tokio::test(start_paused = true)]
async fn a_hanging_store_does_not_hold_release_past_its_deadline() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 5);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // Every write from now on hangs for an hour.
    for _ in 0..1000 {
        faulty.script(Op::Put, Fault::Delay(Duration::from_secs(3600)));
    }
    let started = Instant::now();
    let error = guard.release().await.unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(&error, LockError::Store { source, .. } if source.is_ambiguous()),
        "{error:?}"
    );
    // The release deadline is the end of the lease (later than four backoff
    // ceilings here): it tried until then and not a moment longer.
    assert_eq!(waited, LEASE, "release gave up at {waited:?}");
    assert!(a.held_keys().is_empty());
}

// ---------------------------------------------------------------- detach and release by version

#[tokio::test(start_paused = true)]
async fn a_detached_lock_is_not_heartbeaten_and_is_taken_over_after_its_lease() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a
        .acquire("job", AcquireOptions::new().data(b"state".to_vec()))
        .await
        .unwrap();
    // The view's version follows the record's, heartbeat after heartbeat.
    let first = guard.version();
    assert_eq!(
        store.get(&LockKey::new("job")).await.unwrap().unwrap().rvn,
        first
    );
    tokio::time::sleep(guard.heartbeat_period() + Duration::from_millis(100)).await;
    let beaten = guard.version();
    assert_ne!(beaten, first, "a heartbeat writes a new version");
    assert_eq!(
        store.get(&LockKey::new("job")).await.unwrap().unwrap().rvn,
        beaten
    );
    let detached = guard.detach().await.unwrap();
    assert_eq!(detached.version(), &beaten);
    assert_eq!(detached.key(), &LockKey::new("job"));
    assert_eq!(detached.fence(), Fence(1));
    assert_eq!(detached.owner(), "a");
    assert_eq!(detached.lease(), LEASE);
    assert_eq!(
        detached.data(),
        Some(b"state".to_vec()),
        "the data goes with it"
    );
    assert!(detached.remaining() > Duration::ZERO && detached.remaining() <= LEASE);
    assert!(a.held_keys().is_empty(), "a detached lock is forgotten");
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!(&record.rvn, detached.version());
    assert!(!record.released, "detach does not release");

    // No heartbeat for several periods: the record keeps its version.
    let writes = store.writes();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(store.writes(), writes, "history: {:?}", store.history());

    // A waiter takes it over once the lease (× 1.01) has passed unchanged.
    let started = Instant::now();
    let taken = b
        .acquire("job", wait(Duration::from_secs(30)))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= LEASE.mul_f64(1.01),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(taken.fence(), Fence(2));
    // The same client may acquire the key again once it detached it.
    taken.release().await.unwrap();
    a.acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_version_releases_a_lock_detached_by_another_client() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let admin = client(store.clone(), "admin");
    let detached = a
        .acquire("job", AcquireOptions::new().data(b"payload".to_vec()))
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    let released = admin
        .release_version("job", detached.version())
        .await
        .unwrap();
    assert_eq!(released.owner, "a");
    assert_eq!(released.fence, Fence(1));
    assert_eq!(released.version, detached.version().as_str());
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert!(record.released);
    assert_eq!(record.fence, Fence(1), "release keeps the fence");
    assert_eq!(record.owner, "admin", "the owner names the writer");
    assert_eq!(
        record.data.as_deref(),
        Some(&b"payload"[..]),
        "and the data"
    );
    // Vacant at once: the next acquisition is one write with the next fence.
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.fence(), Fence(2));
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn release_version_of_a_changed_record_is_not_owned_and_writes_nothing() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let admin = client(store.clone(), "admin");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let first = store.get(&LockKey::new("job")).await.unwrap().unwrap().rvn;
    // A heartbeat writes a new version.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = store.writes();
    let error = admin.release_version("job", &first).await.unwrap_err();
    assert!(
        matches!(&error, LockError::NotOwned { owner: Some(o), .. } if o == "a"),
        "{error:?}"
    );
    assert_eq!(store.writes(), writes, "nothing was written");
    assert!(guard.is_safe());
    guard.release().await.unwrap();
    // Released since: vacant, so no owner is named.
    let error = admin.release_version("job", &first).await.unwrap_err();
    assert!(
        matches!(&error, LockError::NotOwned { owner: None, .. }),
        "{error:?}"
    );
    // Absent key: same.
    let error = admin
        .release_version("nothing", &Rvn::fresh())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::NotOwned { owner: None, .. }),
        "{error:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn force_release_frees_a_held_lock_and_its_holder_learns_it_is_lost() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let admin = client(store.clone(), "admin");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let released = admin.force_release("job").await.unwrap().unwrap();
    assert_eq!((released.owner.as_str(), released.fence), ("a", Fence(1)));
    assert!(!released.released, "it reports the record it released");
    // The holder's next heartbeat finds the record changed.
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.until_ended())
        .await
        .unwrap();
    assert_eq!(
        reason,
        LostReason::Stolen {
            owner: Some("admin".into())
        }
    );
    assert!(a.held_keys().is_empty());
    // Nothing to release now.
    assert_eq!(admin.force_release("job").await.unwrap(), None);
    assert_eq!(admin.force_release("never-taken").await.unwrap(), None);
    let guard = admin.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.fence(), Fence(2));
}

/// Before the first `times` conditional writes it forwards, writes the
/// record once more as its holder would: a heartbeat landing between a
/// read and the write that depends on it.
#[derive(Debug)]
struct HeartbeatsFirst {
    times: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl StoreLayer for HeartbeatsFirst {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        if let StoreCall::Put {
            key,
            expect: Expect::Version(_),
            ..
        } = &call
            && self
                .times
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |left| left.checked_sub(1),
                )
                .is_ok()
            && let Some(current) = next.get(key).await?
        {
            let heartbeat = NewRecord {
                owner: current.owner.clone(),
                rvn: Rvn::fresh(),
                lease: current.lease,
                released: false,
                fence: FenceUpdate::Keep,
                data: DataUpdate::Keep,
                expires_at: None,
            };
            next.put(key, Expect::Version(current.rvn), heartbeat)
                .await?;
        }
        call.send(next).await
    }
}

#[tokio::test(start_paused = true)]
async fn force_release_reads_again_when_the_holder_heartbeats_between_its_read_and_write() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let _guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let racing = Layered::new(
        HeartbeatsFirst {
            times: std::sync::atomic::AtomicUsize::new(2),
        },
        store.clone(),
    );
    let admin = client(racing, "admin");
    // Two heartbeats land between a read and its write: the release still
    // happens, on the version read the third time.
    let released = admin.force_release("job").await.unwrap().unwrap();
    assert_eq!((released.owner.as_str(), released.fence), ("a", Fence(1)));
    let now = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert!(now.released, "{now:?}");
    assert_eq!(now.owner, "admin");
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_release_by_version_is_resolved_by_rvn() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 11);
    let a = client(store.clone(), "a");
    let admin = client(faulty.clone(), "admin");
    let detached = detached_job(&a).await;
    // The release applies and its answer is lost; the retry must not read the
    // new version as "someone else's".
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    admin
        .release_version("job", detached.version())
        .await
        .unwrap();
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
    // Throttled and ambiguous-but-not-applied writes are retried.
    let detached = detached_job(&a).await;
    faulty.script(Op::Put, Fault::Throttled);
    faulty.script(Op::Put, Fault::AmbiguousNotApplied);
    admin
        .release_version("job", detached.version())
        .await
        .unwrap();
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert!(record.released);
    assert_eq!(record.fence, Fence(2));
}

#[tokio::test(start_paused = true)]
async fn a_release_by_version_backs_off_between_retries_and_gives_up_after_its_window() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 13);
    let a = client(store.clone(), "a");
    let admin = client(faulty.clone(), "admin");
    let detached = detached_job(&a).await;
    // Two failed reads, then the store answers: the release waits out the
    // backoff in between (at least half of 50 ms, then half of 100 ms).
    faulty.script(Op::Get, Fault::Unavailable);
    faulty.script(Op::Get, Fault::Throttled);
    let started = Instant::now();
    admin
        .release_version("job", detached.version())
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(75), "{took:?}");
    assert!(took <= Duration::from_millis(150), "{took:?}");
    // A store that stays down: the release gives up with the store's error
    // once its retry window (four pauses at the 2 s ceiling) has passed.
    let detached = detached_job(&a).await;
    faulty.set_unavailable(true);
    let calls = faulty.calls();
    let started = Instant::now();
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        admin.release_version("job", detached.version()),
    )
    .await
    .expect("a release by version ends")
    .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(&error, LockError::Store { source, .. } if source.kind() == lock_core::StoreErrorKind::Unavailable),
        "{error:?}"
    );
    assert!(
        took >= Duration::from_secs(8) - Duration::from_millis(1) && took <= Duration::from_secs(9),
        "{took:?}"
    );
    assert!(
        faulty.calls() - calls <= 16,
        "{} calls",
        faulty.calls() - calls
    );
}

#[tokio::test(start_paused = true)]
async fn release_version_of_a_lock_this_client_holds_ends_its_guard() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let rvn = store.get(&LockKey::new("job")).await.unwrap().unwrap().rvn;
    a.release_version("job", &rvn).await.unwrap();
    assert_eq!(
        guard.state(),
        LeaseState::Lost {
            reason: LostReason::Released
        }
    );
    assert!(a.held_keys().is_empty());
    // Releasing the guard afterwards is a no-op.
    guard.release().await.unwrap();
}

/// A store whose first write applies but loses its reply, and whose reads all
/// fail: the client cannot learn that it holds the lock.
fn first_write_lost_and_reads_failing() -> (MemoryStore, FaultyStore<MemoryStore>) {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 7)
        .with_read_faults(lock_memory::FaultConfig::NONE.with_unavailable(1.0));
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    (store, faulty)
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_gives_up_on_an_ambiguous_write_releases_it() {
    // The acquire's write applies but its reply is lost, and every read fails, so
    // the client never learns it holds the lock. When it gives up it must not
    // leave the lock held for a lease with nobody heartbeating it.
    let (store, faulty) = first_write_lost_and_reads_failing();
    let a = client(faulty.clone(), "a");
    let error = a
        .acquire("job", wait(Duration::from_secs(1)))
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::Store { .. }), "{error:?}");
    let report = a.shutdown().await.unwrap();
    assert!(report.failed.is_empty() && report.timed_out.is_empty());
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(
        record.released,
        "the abandoned acquisition is still held: {record:?}"
    );
    assert_eq!((record.owner.as_str(), record.fence), ("a", Fence(1)));

    // A waiter then gets it at once, with the next fence.
    let b = client(store.clone(), "b");
    let guard = b
        .try_acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_acquire_releases_a_write_that_may_have_applied() {
    let (store, faulty) = first_write_lost_and_reads_failing();
    let a = client(faulty.clone(), "a");
    let cancelled =
        tokio::time::timeout(Duration::from_secs(2), a.acquire("job", wait(LEASE))).await;
    assert!(cancelled.is_err(), "the acquire should still be resolving");
    assert!(!store.record(&LockKey::new("job")).unwrap().released);
    // Let the background release run.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(record.released, "{record:?}");
    // An acquire whose writes were all rejected leaves nothing to clean up.
    let b = client(store.clone(), "b");
    let guard = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let c = client(store.clone(), "c");
    let writes = store.writes();
    assert!(
        c.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    c.shutdown().await.unwrap();
    assert_eq!(store.writes() - writes, 1, "{:?}", store.history());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_acquire_cancelled_while_its_write_is_in_flight_releases_it() {
    let store = MemoryStore::new();
    let slow = Scripted {
        reply_delay: Duration::from_secs(5),
        ..Scripted::new(store.clone())
    };
    let a = client(slow, "a");
    let cancelled = tokio::time::timeout(
        Duration::from_secs(1),
        a.acquire("job", AcquireOptions::new()),
    )
    .await;
    assert!(cancelled.is_err());
    // The write applied; the client never saw the reply. Its clean-up (whose own
    // reply is slow too) releases it.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(record.released, "{record:?}");
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failing_heartbeat_backs_off_between_attempts() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 9);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // Every write from now on times out without applying.
    faulty.set_write_faults(lock_memory::FaultConfig::NONE.with_ambiguous_not_applied(1.0));
    let before = faulty.calls();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let attempts = faulty.calls() - before;
    // First heartbeat due at about 1.5-2 s; then backoff from 50 ms doubling to 2 s:
    // a handful of attempts in 6 s, not hundreds.
    assert!(
        (2..=12).contains(&attempts),
        "{attempts} heartbeat attempts in 6 s"
    );
    assert!(guard.is_safe() || matches!(guard.state(), LeaseState::InDanger { .. }));
    faulty.clear_faults();
    faulty.set_write_faults(lock_memory::FaultConfig::NONE);
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_retries_even_an_error_that_is_final_for_other_writes() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 21);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // The first heartbeat is refused as unauthorized (a credential rotating),
    // the next attempt goes through: the lock is kept.
    faulty.script(
        Op::Put,
        Fault::Error(lock_core::StoreErrorKind::Unauthorized),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(faulty.scripted(), 0, "the scripted refusal was used");
    assert!(guard.is_safe(), "{:?}", guard.state());
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_or_data_update_refused_for_good_fails_at_once_with_the_stores_error() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 22);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    faulty.script(
        Op::Put,
        Fault::Error(lock_core::StoreErrorKind::Unauthorized),
    );
    let started = Instant::now();
    let error = guard.set_data("x").await.unwrap_err();
    assert!(
        matches!(&error, LockError::Store { source, .. } if source.kind() == lock_core::StoreErrorKind::Unauthorized),
        "{error:?}"
    );
    assert!(guard.is_safe(), "a refused update leaves the lock held");
    faulty.script(
        Op::Put,
        Fault::Error(lock_core::StoreErrorKind::Unauthorized),
    );
    let error = guard.release().await.unwrap_err();
    assert!(
        matches!(&error, LockError::Store { source, .. } if source.kind() == lock_core::StoreErrorKind::Unauthorized),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "no retries");
}

/// Acquire "job" and detach it: held in the store, heartbeated by nobody.
async fn detached_job(client: &LockClient) -> lock_core::DetachedLock {
    client
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap()
}

/// Forwards to a memory store, except as scripted:
/// * a put applies at once but its reply takes `reply_delay` to come back (a
///   request already on the wire);
/// * a write to a held record of `panic_on` (a heartbeat or release) panics;
/// * its `n`th put (from 1) applies and then reports a rejection without the
///   current record (`bare_rejection_at`), as a store that retried a write
///   internally and saw its own first attempt might; with it, the store claims
///   no current record on conflicts.
#[derive(Debug)]
struct Scripted {
    inner: MemoryStore,
    puts: std::sync::atomic::AtomicUsize,
    reply_delay: Duration,
    panic_on: Option<LockKey>,
    bare_rejection_at: Option<usize>,
}

impl Scripted {
    fn new(inner: MemoryStore) -> Self {
        Self {
            inner,
            puts: std::sync::atomic::AtomicUsize::new(0),
            reply_delay: Duration::ZERO,
            panic_on: None,
            bare_rejection_at: None,
        }
    }
}

#[async_trait::async_trait]
impl StoreLayer for Scripted {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        let StoreCall::Put { key, expect, .. } = &call else {
            return call.send(next).await;
        };
        let n = self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if self.panic_on.as_ref() == Some(*key) && matches!(expect, Expect::Version(_)) {
            panic!("scripted store panics on a write to held {key}");
        }
        let outcome = call.send(next).await;
        if !self.reply_delay.is_zero() {
            tokio::time::sleep(self.reply_delay).await;
        }
        if self.bare_rejection_at == Some(n) {
            return Ok(Outcome::Rejected { current: None }.into());
        }
        outcome
    }
    fn capabilities(&self, _inner: lock_core::Capabilities) -> lock_core::Capabilities {
        lock_core::Capabilities::default()
            .with_returns_current_on_conflict(self.bare_rejection_at.is_none())
    }
}

lock_core::store_via_layer!(impl[] for Scripted, |this| (this, &this.inner as &dyn ConditionalStore));

#[tokio::test(start_paused = true)]
async fn a_heartbeat_that_panics_loses_the_lock_and_others_keep_beating() {
    let store = MemoryStore::new();
    let scripted = Scripted {
        panic_on: Some(LockKey::new("job")),
        ..Scripted::new(store.clone())
    };
    let a = client(scripted, "a");
    let job = a.acquire("job", AcquireOptions::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other = a.acquire("other", AcquireOptions::new()).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), job.until_ended())
        .await
        .expect("the lock whose heartbeat panicked is lost, not silently unheartbeaten");
    assert_eq!(reason, LostReason::Expired);
    assert_eq!(a.held_keys(), [LockKey::new("other")]);
    // The task lives on: the other lock is heartbeaten for many leases.
    tokio::time::sleep(LEASE * 3).await;
    assert!(other.is_safe(), "{:?}", other.state());
    other.release().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_rejection_without_the_record_is_read_back_and_an_applied_write_recognised() {
    let store = MemoryStore::new();
    let scripted = Scripted {
        bare_rejection_at: Some(1),
        ..Scripted::new(store.clone())
    };
    let a = client(scripted, "a");
    let started = Instant::now();
    // The write applied; the store said "rejected" without the record. The read
    // back shows this write's RVN: it is ours, at once, not a holder to wait out.
    let guard = a
        .acquire("job", wait(Duration::from_secs(1)))
        .await
        .unwrap();
    assert_eq!(guard.fence(), Fence(1));
    assert!(Instant::now() - started < Duration::from_millis(100));
    let record = store.record(&LockKey::new("job")).unwrap();
    assert_eq!(record.owner, "a");
    guard.release().await.unwrap();
    assert!(store.record(&LockKey::new("job")).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn releasing_a_stale_guard_keeps_the_newer_acquisition_of_its_key() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let admin = client(store.clone(), "admin");
    let stale = a.acquire("job", AcquireOptions::new()).await.unwrap();
    admin.force_release("job").await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), stale.until_ended())
        .await
        .unwrap();
    let fresh = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(fresh.fence(), Fence(2));
    assert!(matches!(stale.release().await, Err(LockError::Lost { .. })));
    // The newer acquisition is still held, shared by a reentrant acquire, and
    // still heartbeaten.
    assert_eq!(a.held_keys(), [LockKey::new("job")]);
    let shared = a
        .acquire("job", AcquireOptions::new().reentrant(true))
        .await
        .unwrap();
    assert_eq!(shared.fence(), Fence(2));
    tokio::time::sleep(LEASE * 3).await;
    assert!(fresh.is_safe(), "{:?}", fresh.state());
    drop(shared);
    fresh.release().await.unwrap();
}

#[test]
fn a_client_outliving_its_runtime_restarts_heartbeats_for_every_held_lock() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let store = MemoryStore::new();
    let first = paused();
    let (a, early) = first.block_on(async {
        let a = client(store.clone(), "a");
        let early = a.acquire("early", AcquireOptions::new()).await.unwrap();
        (a, early)
    });
    // The heartbeat task dies with its runtime.
    drop(first);
    let acquired = store.record(&LockKey::new("early")).unwrap().rvn;
    let second = paused();
    second.block_on(async {
        let late = a.acquire("late", AcquireOptions::new()).await.unwrap();
        // Still scheduled (its first heartbeat is due 1.5 to 2 s after it was
        // taken): the restart leaves it to beat then, not at once.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(store.record(&LockKey::new("early")).unwrap().rvn, acquired);
        tokio::time::sleep(LEASE * 3).await;
        assert!(late.is_safe(), "{:?}", late.state());
        assert!(early.is_safe(), "{:?}", early.state());
        early.release().await.unwrap();
        late.release().await.unwrap();
        a.shutdown().await.unwrap();
    });
}

#[test]
fn a_heartbeat_in_flight_when_its_runtime_ends_is_scheduled_again_by_the_next_task() {
    let paused = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    };
    let store = support::Delayed::new(MemoryStore::new());
    let first = paused();
    let (a, early) = first.block_on(async {
        let a = client(store.clone(), "a");
        let early = a.acquire("early", AcquireOptions::new()).await.unwrap();
        // Its first heartbeat goes within 2 s and takes 1 s to answer: at
        // 2.2 s it is on the wire, out of the schedule.
        store.delay_writes(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(2200)).await;
        (a, early)
    });
    // The heartbeat task, and the heartbeat in flight, die with the runtime.
    drop(first);
    store.delay_writes(Duration::ZERO);
    let second = paused();
    second.block_on(async {
        let late = a.acquire("late", AcquireOptions::new()).await.unwrap();
        tokio::time::sleep(LEASE * 3).await;
        assert!(early.is_safe(), "{:?}", early.state());
        assert!(late.is_safe(), "{:?}", late.state());
        early.release().await.unwrap();
        late.release().await.unwrap();
        a.shutdown().await.unwrap();
    });
}

/// Puts `store` served for `key`.
fn puts_for(store: &MemoryStore, key: &str) -> usize {
    let key = LockKey::new(key);
    store
        .history()
        .iter()
        .filter(|entry| entry.op() == Op::Put && entry.key() == Some(&key))
        .count()
}

#[tokio::test(start_paused = true)]
async fn an_acquire_leaves_another_locks_heartbeat_in_flight_alone() {
    let store = support::Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let early = a.acquire("early", AcquireOptions::new()).await.unwrap();
    // Its first heartbeat goes within 2 s and takes 5 s to answer.
    store.delay_writes(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(puts_for(&store.inner, "early"), 2);
    store.delay_writes(Duration::ZERO);
    let late = a.acquire("late", AcquireOptions::new()).await.unwrap();
    // The heartbeat task serving "early" goes on: its heartbeat is neither
    // cut short nor sent again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(puts_for(&store.inner, "early"), 2);
    tokio::time::sleep(LEASE * 2).await;
    assert!(early.is_safe(), "{:?}", early.state());
    early.release().await.unwrap();
    late.release().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_stops_a_heartbeat_being_retried_and_writes_next() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 43);
    let a = client(faulty.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // The first heartbeat (within 2 s) meets an outage and is retried.
    faulty.set_unavailable(true);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(100)).await;
    faulty.set_unavailable(false);
    tokio::time::timeout(Duration::from_secs(5), release)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The heartbeat gave way at its next attempt: after the acquire, the only
    // write to reach the store is the release.
    assert_eq!(puts_for(&store, "job"), 2, "{:?}", store.history());
    assert!(store.record(&LockKey::new("job")).unwrap().released);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_queued_behind_a_data_write_gives_way_to_a_release_begun_meanwhile() {
    let store = support::Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // A data write from 1.4 s to 2.4 s; the first heartbeat falls due within
    // 2 s and waits for it; at 2.2 s a release begins, and waits too.
    tokio::time::sleep(Duration::from_millis(1400)).await;
    store.delay_writes(Duration::from_secs(1));
    let writer = guard.clone();
    let data = tokio::spawn(async move { writer.set_data("d").await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    store.delay_writes(Duration::ZERO);
    let release = tokio::spawn(guard.release());
    tokio::time::timeout(Duration::from_secs(5), data)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), release)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // The heartbeat found the lock being released when its turn came, and
    // wrote nothing: acquire, data, release.
    assert_eq!(
        puts_for(&store.inner, "job"),
        3,
        "{:?}",
        store.inner.history()
    );
    assert!(store.inner.record(&LockKey::new("job")).unwrap().released);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_acquire_cancelled_during_a_retried_write_releases_it() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let slow = Scripted {
        reply_delay: Duration::from_secs(5),
        ..Scripted::new(store.clone())
    };
    let a = client(slow, "a");
    let waiting = tokio::spawn(async move {
        // First write rejected (b holds it), its reply 5 s late; then a read, and
        // a second write once b has released, whose reply is 5 s late too.
        let result = tokio::time::timeout(
            Duration::from_secs(7),
            a.acquire("job", wait(Duration::from_secs(60))),
        )
        .await;
        (a, result.is_err())
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    held.release().await.unwrap();
    let (a, cancelled) = waiting.await.unwrap();
    assert!(
        cancelled,
        "the acquire was still waiting for its second reply"
    );
    let taken = store.record(&LockKey::new("job")).unwrap();
    assert_eq!(taken.owner, "a", "the second write applied: {taken:?}");
    // The cancelled acquire's clean-up releases that write.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(record.released, "{record:?}");
    assert_eq!(record.fence, Fence(2));
    a.shutdown().await.unwrap();
}

// ---- Data with the lock ------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_acquire_keeps_the_data_the_previous_holder_left_unless_told_otherwise() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    guard.set_data("checkpoint 1").await.unwrap();
    // Released with a final checkpoint, in the release's own write.
    let writes = store.writes();
    let view = guard.view();
    guard.release_with_data("checkpoint 2").await.unwrap();
    assert_eq!(
        store.writes() - writes,
        1,
        "one write releases and stores the data"
    );
    assert_eq!(
        view.data().as_deref(),
        Some(&b"checkpoint 2"[..]),
        "a view kept past the release shows the data the release left"
    );

    // The next holder finds it, with no read before the acquire to race with.
    let guard = b.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.data().as_deref(), Some(&b"checkpoint 2"[..]));
    let record = store.record(&LockKey::new("job")).unwrap();
    assert_eq!(record.data.as_deref(), Some(&b"checkpoint 2"[..]));
    guard.release().await.unwrap();

    // Replace and clear are explicit.
    let guard = b
        .acquire("job", AcquireOptions::new().data("fresh"))
        .await
        .unwrap();
    assert_eq!(guard.data().as_deref(), Some(&b"fresh"[..]));
    guard.release().await.unwrap();
    let kept = store.record(&LockKey::new("job")).unwrap();
    assert_eq!(
        kept.data.as_deref(),
        Some(&b"fresh"[..]),
        "a release keeps it"
    );
    let guard = b
        .acquire("job", AcquireOptions::new().clear_data())
        .await
        .unwrap();
    assert_eq!(guard.data(), None);
    guard.clear_data().await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(store.record(&LockKey::new("job")).unwrap().data, None);
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holders_checkpoint_is_found_by_whoever_takes_over() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    guard.set_data(b"step 41 of 90".to_vec()).await.unwrap();
    // a stops heartbeating without releasing (crashes).
    let _ = guard.detach().await.unwrap();
    let b = client(store.clone(), "b");
    let taken = tokio::time::timeout(Duration::from_secs(600), b.acquire("job", wait(LEASE * 3)))
        .await
        .unwrap()
        .unwrap();
    let previous = taken.took_over().expect("a takeover");
    assert_eq!(previous.data.as_deref(), Some(&b"step 41 of 90"[..]));
    assert_eq!(taken.data().as_deref(), Some(&b"step 41 of 90"[..]));
    assert_eq!(taken.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn with_lock_work_can_update_the_data_through_its_view() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let result = a
        .with_lock("job", AcquireOptions::new(), |view| async move {
            for step in 1..=3u8 {
                view.set_data(vec![step]).await?;
            }
            Ok::<_, LockError>(view.data())
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result, Some(vec![3]));
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(record.released);
    assert_eq!(
        record.data,
        Some(vec![3]),
        "the release kept the last checkpoint"
    );
}

#[tokio::test(start_paused = true)]
async fn a_release_with_data_is_written_even_when_a_local_task_waits() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let next = {
        let a = a.clone();
        tokio::spawn(async move { a.acquire("job", wait(LEASE)).await })
    };
    tokio::task::yield_now().await;
    guard.release_with_data("for the next task").await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(60), next)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.data().as_deref(), Some(&b"for the next task"[..]));
    assert_eq!(next.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn data_over_the_store_limit_is_refused_on_release_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let writes = store.writes();
    let error = guard
        .release_with_data(vec![0u8; 500 * 1024])
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::InvalidInput { .. }), "{error}");
    assert_eq!(store.writes(), writes, "nothing written with the data");
    // The guard is gone: the lock is released without the data, not left
    // held (and heartbeated) with no guard.
    assert!(a.held_keys().is_empty(), "{:?}", a.held_keys());
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.released, vec![LockKey::new("job")], "{report:?}");
    assert!(store.record(&LockKey::new("job")).unwrap().released);
}

// ---- A lease per acquire -----------------------------------------------------

#[tokio::test(start_paused = true)]
async fn one_client_holds_a_short_and_a_long_lock_each_with_its_own_lease() {
    let store = MemoryStore::new();
    // The client's lease is 10 s (heartbeat every 2 s, margin 0.5 s).
    let a = client(store.clone(), "a");
    let leader = a
        .acquire(
            "leader",
            AcquireOptions::new().lease(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    let batch = a
        .acquire(
            "batch",
            AcquireOptions::new().lease(Duration::from_secs(600)),
        )
        .await
        .unwrap();
    let record = |key: &str| store.record(&LockKey::new(key)).unwrap();
    assert_eq!(record("leader").lease, Duration::from_secs(3));
    assert_eq!(record("batch").lease, Duration::from_secs(600));

    // Each is heartbeaten for its own lease: the 3 s lock every 0.6 s (the
    // client's 2 s per 10 s), the 600 s lock every 120 s.
    let (leader_rvn, batch_rvn) = (record("leader").rvn, record("batch").rvn);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(leader.is_safe() && batch.is_safe());
    assert_ne!(
        record("leader").rvn,
        leader_rvn,
        "the short lock was heartbeaten"
    );
    assert_eq!(record("batch").rvn, batch_rvn, "the long lock not yet");
    assert_eq!(
        record("leader").lease,
        Duration::from_secs(3),
        "heartbeats keep its lease"
    );
    assert!(
        batch.remaining() > Duration::from_secs(500),
        "{:?}",
        batch.remaining()
    );

    // A waiter waits out the lease in the record: 3 s × 1.01 for the leader
    // lock, not the 10 s of either client.
    let _ = leader.detach().await.unwrap();
    let b = client(store.clone(), "b");
    let started = Instant::now();
    let taken = tokio::time::timeout(
        Duration::from_secs(600),
        b.acquire("leader", wait(Duration::from_secs(60))),
    )
    .await
    .unwrap()
    .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(3030) && waited < Duration::from_secs(5),
        "took over after {waited:?}"
    );
    assert_eq!(taken.fence(), Fence(2));
}

#[tokio::test(start_paused = true)]
async fn a_per_acquire_lease_that_breaks_the_clients_rules_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    for (lease, expected) in [
        (Duration::ZERO, "greater than zero"),
        // The client's explicit margin (0.5 s) leaves no safe time.
        (Duration::from_millis(400), "safe"),
        (Duration::from_secs(400 * 24 * 3600), "longest"),
    ] {
        let error = a
            .acquire("job", AcquireOptions::new().lease(lease))
            .await
            .unwrap_err();
        assert!(
            matches!(error, LockError::InvalidConfig(_)),
            "{lease:?}: {error}"
        );
        assert!(error.to_string().contains(expected), "{lease:?}: {error}");
    }
    assert_eq!(store.calls(), 0, "nothing was sent");
}

// ---- Listing -----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn list_all_streams_every_lock_fetching_page_by_page() {
    use futures_util::{StreamExt, TryStreamExt};
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let mut guards = Vec::new();
    for key in ["a1", "a2", "a3", "a4", "a5"] {
        guards.push(a.acquire(key, AcquireOptions::new()).await.unwrap());
    }
    for sort in ["x", "y"] {
        guards.push(
            a.acquire(LockKey::with_sort("p", sort), AcquireOptions::new())
                .await
                .unwrap(),
        );
    }
    let reads = store.calls();
    let all: Vec<_> = a
        .list_all(lock_core::ListOptions::new().limit(2))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(all.len(), 7);
    assert!(all.iter().all(|info| info.held_by_this_client));
    assert_eq!(store.calls() - reads, 4, "pages of 2: 4 list calls");
    let partition: Vec<_> = a
        .list_all(lock_core::ListOptions::new().partition("p").limit(1))
        .try_collect()
        .await
        .unwrap();
    let keys: Vec<String> = partition.iter().map(|info| info.key.to_string()).collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(keys.iter().all(|key| key.starts_with('p')), "{keys:?}");

    // Read lazily: taking one record fetches one page.
    let before = store.calls();
    let first = a
        .list_all(lock_core::ListOptions::new().limit(2))
        .next()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.calls() - before, 1);
    assert!(first.held_by_this_client);

    // A failing page ends the stream with its error.
    let faulty = FaultyStore::new(store.clone(), 11);
    let b = client(faulty.clone(), "b");
    faulty.set_unavailable(true);
    let items: Vec<_> = b.list_all(lock_core::ListOptions::new()).collect().await;
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(LockError::List { .. })), "{items:?}");
}

#[tokio::test(start_paused = true)]
async fn release_with_data_from_an_inner_reentrant_guard_stores_it_for_the_last_release() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let outer = a
        .acquire("job", AcquireOptions::new().reentrant(true))
        .await
        .unwrap();
    let inner = a
        .acquire("job", AcquireOptions::new().reentrant(true))
        .await
        .unwrap();
    inner
        .release_with_data("from the inner guard")
        .await
        .unwrap();
    assert!(outer.is_safe(), "the outer guard still holds the lock");
    assert_eq!(outer.data().as_deref(), Some(&b"from the inner guard"[..]));
    outer.release().await.unwrap();
    let record = store.record(&LockKey::new("job")).unwrap();
    assert!(record.released);
    assert_eq!(record.data.as_deref(), Some(&b"from the inner guard"[..]));
}

#[tokio::test(start_paused = true)]
async fn release_with_data_is_refused_where_the_release_deletes_the_record() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire("job", AcquireOptions::new().delete_on_release(true))
        .await
        .unwrap();
    let writes = store.writes();
    let error = guard.release_with_data("lost").await.unwrap_err();
    assert!(matches!(error, LockError::InvalidInput { .. }), "{error}");
    assert!(error.to_string().contains("set_data"), "{error}");
    assert_eq!(store.writes(), writes, "nothing written before the refusal");
    // The guard is gone: the lock is released (deleted) in the background.
    a.shutdown().await.unwrap();
    assert!(store.record(&LockKey::new("job")).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_lock_with_its_own_lease_reports_its_own_timing() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire("job", AcquireOptions::new().lease(Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(guard.lease(), Duration::from_secs(60));
    assert_eq!(guard.timing().lease, Duration::from_secs(60));
    assert_eq!(guard.heartbeat_period(), Duration::from_secs(12));
    assert_eq!(a.timing().lease, LEASE);
    assert!(
        guard.remaining() > a.timing().safe_time(),
        "{:?}",
        guard.remaining()
    );
}

/// A store that breaks the contract: it refuses every write conditional on a
/// version, and answers with the record carrying that very version (as a
/// table whose version attribute the store cannot compare might).
#[derive(Debug)]
struct RefusesVersions;

#[async_trait::async_trait]
impl StoreLayer for RefusesVersions {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        if let StoreCall::Put {
            key,
            expect: Expect::Version(_),
            ..
        } = &call
        {
            // A round trip's worth of time, so a loop of them lets the clock move.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let current = next.get(key).await?;
            return Ok(Outcome::Rejected { current }.into());
        }
        call.send(next).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_refuses_the_version_it_shows_ends_the_acquire_with_an_error() {
    let store = MemoryStore::new();
    // Held and no longer heartbeaten: a takeover is due after the lease.
    support::dead_holder(&store, "job", AcquireOptions::new()).await;
    let broken = client(Layered::new(RefusesVersions, store.clone()), "b");
    let ended = tokio::time::timeout(
        Duration::from_secs(120),
        broken.acquire("job", wait(Duration::from_secs(30))),
    )
    .await;
    let error = ended
        .expect("the acquire ends instead of rewriting the takeover forever")
        .unwrap_err();
    assert!(
        matches!(&error, LockError::Store { source, .. } if source.kind() == lock_core::StoreErrorKind::Other
            && source.message().contains("version")),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!(record.owner, "dead", "nothing was written");
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_while_watched_is_not_reported_as_taken_over() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // b watches a live holder (and remembers it as the one a takeover would
    // replace), then a releases: b writes on the released record's version.
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.acquire("job", wait(Duration::from_secs(30)).only_if_exists(true))
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    guard.release().await.unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(taken.fence(), Fence(2));
    assert!(
        taken.took_over().is_none(),
        "a released lock was not taken over: {:?}",
        taken.took_over()
    );
    taken.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_write_that_surely_failed_is_sent_again_without_a_read() {
    for fault in [Fault::Throttled, Fault::Unavailable] {
        let store = MemoryStore::new();
        let faulty = FaultyStore::new(store.clone(), 41);
        let a = client(faulty.clone(), "a");
        faulty.script(Op::Put, fault.clone());
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        assert_eq!(
            store.reads(),
            0,
            "{fault:?}: nothing to resolve, so no read"
        );
        assert_eq!(store.writes(), 1, "{fault:?}");
        guard.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn an_ambiguous_acquire_that_did_not_apply_on_a_vacant_key_writes_again() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 42);
    let a = client(faulty.clone(), "a");
    // Lost before it reached the store: the read finds no record at all.
    faulty.script(Op::Put, Fault::AmbiguousNotApplied);
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(guard.fence(), Fence(1));
    assert_eq!((store.reads(), store.writes()), (1, 1));
    guard.release().await.unwrap();
}

/// Refuses every write on a vacant key while showing it vacant (absent, or
/// with `released`, a released record), a round trip (1 ms) later: as a key
/// other waiters keep winning and releasing looks.
#[derive(Debug, Default)]
struct AlwaysBeaten {
    puts: Arc<std::sync::Mutex<Vec<Instant>>>,
    released: bool,
}

#[async_trait::async_trait]
impl StoreLayer for AlwaysBeaten {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        if let StoreCall::Put {
            expect: Expect::Vacant,
            ..
        } = &call
        {
            self.puts.lock().unwrap().push(Instant::now());
            tokio::time::sleep(Duration::from_millis(1)).await;
            let current = self.released.then(|| lock_core::LockRecord {
                key: LockKey::new("job"),
                owner: "winner".into(),
                rvn: Rvn::fresh(),
                lease: LEASE,
                released: true,
                fence: Fence(7),
                data: None,
                expires_at: None,
                written: None,
            });
            return Ok(Outcome::Rejected { current }.into());
        }
        call.send(next).await
    }
}

#[tokio::test(start_paused = true)]
async fn an_acquire_racing_for_a_vacant_key_retries_three_times_at_once_then_paces_itself() {
    for released in [false, true] {
        let store = MemoryStore::new();
        let layer = AlwaysBeaten {
            released,
            ..AlwaysBeaten::default()
        };
        let puts = layer.puts.clone();
        let a = client(Layered::new(layer, store.clone()), "a");
        let started = Instant::now();
        let error = tokio::time::timeout(
            Duration::from_secs(60),
            a.acquire("job", wait(Duration::from_secs(3))),
        )
        .await
        .expect("the acquire ends at its budget")
        .unwrap_err();
        assert!(
            matches!(error, LockError::AcquireTimeout { .. }),
            "{error:?}"
        );
        let puts: Vec<Duration> = puts
            .lock()
            .unwrap()
            .iter()
            .map(|at| at.duration_since(started))
            .collect();
        // The first write and three quick retries, one round trip apart; then
        // one write per jittered refresh period (250 to 500 ms), the last at the
        // end of the budget.
        assert!(puts.len() >= 4 + 5 && puts.len() <= 4 + 12, "{puts:?}");
        assert!(puts[3] < Duration::from_millis(10), "{puts:?}");
        let (last, paced) = puts[3..].split_last().unwrap();
        for pair in paced.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_millis(250), "{puts:?}");
        }
        assert!(*last <= Duration::from_secs(3), "{puts:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lock_due_before_the_heartbeat_tasks_timer_wakes_it() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    // The task's timer is armed for the first lock's heartbeat (1.5 to 2 s).
    let long = a.acquire("long", AcquireOptions::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // A 2 s lease heartbeats every 0.4 s: due long before that timer fires.
    let short = a
        .acquire("short", AcquireOptions::new().lease(Duration::from_secs(2)))
        .await
        .unwrap();
    let first = store.record(&LockKey::new("short")).unwrap().rvn;
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_ne!(
        store.record(&LockKey::new("short")).unwrap().rvn,
        first,
        "heartbeaten within its own period"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(short.is_safe(), "{:?}", short.state());
    short.release().await.unwrap();
    long.release().await.unwrap();
}

// ---- The rest of the client's surface ---------------------------------------

#[tokio::test(start_paused = true)]
async fn the_clients_settings_read_back() {
    let a = client(MemoryStore::new(), "a");
    assert_eq!(a.owner(), "a");
    assert_eq!(a.lease(), LEASE);
    assert_eq!(a.heartbeat_period(), Duration::from_secs(2));
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn clear_data_removes_the_stored_data() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire("job", AcquireOptions::new().data("checkpoint"))
        .await
        .unwrap();
    guard.clear_data().await.unwrap();
    assert_eq!(guard.data(), None);
    assert_eq!(store.record(&LockKey::new("job")).unwrap().data, None);
    guard.release().await.unwrap();
}

/// Answers every listing with one page whose next cursor is the one it was
/// given: a store that would page forever.
#[derive(Debug)]
struct RepeatsCursor;

#[async_trait::async_trait]
impl StoreLayer for RepeatsCursor {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        if let StoreCall::List { cursor, .. } = &call {
            // A round trip: a client that pages forever lets time pass, so the
            // test's timeout fires instead of the test spinning.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let again = cursor.clone().unwrap_or(lock_core::Cursor("start".into()));
            return Ok(StoreReply::Page(lock_core::Page {
                records: Vec::new(),
                next: Some(again),
            }));
        }
        call.send(next).await
    }
}

#[tokio::test(start_paused = true)]
async fn listing_stops_with_an_error_when_the_store_hands_back_its_cursor() {
    use futures_util::StreamExt;
    let a = client(Layered::new(RepeatsCursor, MemoryStore::new()), "a");
    let listed: Vec<_> = tokio::time::timeout(
        Duration::from_secs(5),
        a.list_all(lock_core::ListOptions::new())
            .collect::<Vec<_>>(),
    )
    .await
    .expect("the listing ends");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        matches!(&listed[0], Err(LockError::List { .. })),
        "{listed:?}"
    );
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_reports_only_the_releases_still_running() {
    let store = support::Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let done = a.acquire("done", AcquireOptions::new()).await.unwrap();
    let stuck = a.acquire("stuck", AcquireOptions::new()).await.unwrap();
    // Released in the background at once.
    drop(done);
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Released in the background, its reply 60 s late: past the shutdown.
    store.delay_writes(Duration::from_secs(60));
    drop(stuck);
    let report = a.shutdown().await.unwrap();
    assert_eq!(report.timed_out, [LockKey::new("stuck")], "{report:?}");
}

#[test]
fn dropping_the_last_handle_stops_the_clients_tasks() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        let a = client(MemoryStore::new(), "a");
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        guard.release().await.unwrap();
        let metrics = tokio::runtime::Handle::current().metrics();
        assert!(metrics.num_alive_tasks() > 0, "the heartbeat task runs");
        a.shutdown().await.unwrap();
        drop(a);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(metrics.num_alive_tasks(), 0);
    });
}

/// Says the store takes keys of at most 8 and 6 bytes and records of at most
/// 24 (key, sort key, owner and data), whatever the store below takes: the
/// client's own check is all that refuses.
#[derive(Debug)]
struct SmallLimits;

#[async_trait::async_trait]
impl StoreLayer for SmallLimits {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, lock_core::StoreError> {
        call.send(next).await
    }
    fn capabilities(&self, inner: lock_core::Capabilities) -> lock_core::Capabilities {
        inner.with_key_limits(8, 6).with_max_record_bytes(24)
    }
}

#[tokio::test(start_paused = true)]
async fn inputs_at_the_stores_limits_are_taken_and_one_byte_more_is_refused_unwritten() {
    let store = MemoryStore::new();
    let a = client(Layered::new(SmallLimits, store.clone()), "a");
    let takes = |key: LockKey, data: usize| {
        let a = a.clone();
        async move {
            let options = AcquireOptions::new().data(vec![b'x'; data]);
            a.acquire(key, options).await
        }
    };
    // At each limit: taken.
    for (key, data) in [
        (LockKey::new("abcdefgh"), 0),
        (LockKey::with_sort("k", "sorted"), 0),
        // key 1 + sort 1 + owner 1 + data 21 = 24 bytes.
        (LockKey::with_sort("k", "s"), 21),
    ] {
        let guard = takes(key.clone(), data).await;
        let guard = guard.unwrap_or_else(|error| panic!("{key} with {data} bytes: {error}"));
        guard.release().await.unwrap();
    }
    // One byte more: refused before anything reaches the store.
    let calls = store.calls();
    for (key, data) in [
        (LockKey::new("abcdefghi"), 0),
        (LockKey::with_sort("k", "sorted!"), 0),
        (LockKey::with_sort("k", "s"), 22),
    ] {
        let refused = takes(key.clone(), data).await;
        assert!(
            matches!(refused, Err(LockError::InvalidInput { .. })),
            "{key} with {data} bytes: {refused:?}"
        );
    }
    assert_eq!(store.calls(), calls);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_release_rejected_on_a_vacant_key_reads_nothing_when_the_store_says_so() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // Someone deletes the record: the release is refused, with no record, by
    // a store that returns the current record on conflict: the key is vacant.
    let rvn = store.record(&LockKey::new("job")).unwrap().rvn;
    ConditionalStore::delete(&store, &LockKey::new("job"), Expect::Version(rvn))
        .await
        .unwrap();
    let reads = store.reads();
    let _ = guard.release().await;
    assert_eq!(store.reads(), reads, "{:?}", store.history());
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lease_of_exactly_a_year_is_taken_and_a_second_more_refused() {
    assert_eq!(lock_core::MAX_LEASE, Duration::from_secs(365 * 24 * 3600));
    let year = LockClient::builder(MemoryStore::new())
        .lease(lock_core::MAX_LEASE)
        .build();
    assert!(year.is_ok(), "{year:?}");
    let more = LockClient::builder(MemoryStore::new())
        .lease(lock_core::MAX_LEASE + Duration::from_secs(1))
        .build();
    assert!(
        matches!(
            more,
            Err(LockError::InvalidConfig(ConfigError::LeaseTooLong { .. }))
        ),
        "{more:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_refresh_is_a_quarter_of_a_short_lease() {
    // Lease 2 s, refresh unset: a quarter of it, 0.5 s. The default wait is
    // lease × 1.01 + refresh = 2.52 s.
    let store = MemoryStore::new();
    let holder = client(store.clone(), "holder");
    let held = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiter = LockClient::builder(store.clone())
        .owner("waiter")
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = Instant::now();
    let busy = waiter.acquire("job", AcquireOptions::new()).await;
    assert!(
        matches!(busy, Err(LockError::AcquireTimeout { .. })),
        "{busy:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_millis(2520));
    held.release().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_client_without_an_owner_is_named_after_its_host_and_a_random_suffix() {
    let store = MemoryStore::new();
    let a = LockClient::builder(store.clone()).build().unwrap();
    let b = LockClient::builder(store.clone()).build().unwrap();
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() {
        "localhost".to_owned()
    } else {
        host
    };
    for client in [&a, &b] {
        let suffix = client
            .owner()
            .strip_prefix(&format!("{host}-"))
            .unwrap_or_else(|| panic!("{} names its host {host}", client.owner()));
        assert_eq!(suffix.len(), 8, "{}", client.owner());
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{suffix}");
    }
    assert_ne!(a.owner(), b.owner(), "two clients of one host differ");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[test]
fn options_with_observers_are_equal_only_with_the_same_observer() {
    let options = AcquireOptions::new().on_wait(|_| {});
    assert_eq!(options.clone(), options, "a clone shares its observer");
    assert_ne!(
        AcquireOptions::new().on_wait(|_| {}),
        options,
        "another observer, however alike"
    );
    assert_ne!(AcquireOptions::new(), options);
    assert!(
        format!("{options:?}").contains("WaitObserver"),
        "{options:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn data_update_spells_out_what_an_acquire_does_to_the_data() {
    assert_eq!(
        AcquireOptions::new().data_update(DataUpdate::Replace(b"x".to_vec())),
        AcquireOptions::new().data(b"x".to_vec())
    );
    assert_eq!(
        AcquireOptions::new().data_update(DataUpdate::Clear),
        AcquireOptions::new().clear_data()
    );
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let replace = AcquireOptions::new().data_update(DataUpdate::Replace(b"x".to_vec()));
    a.acquire("job", replace)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let keep = AcquireOptions::new()
        .data(b"y".to_vec())
        .data_update(DataUpdate::Keep);
    let guard = a.acquire("job", keep).await.unwrap();
    assert_eq!(guard.data(), Some(b"x".to_vec()), "kept");
    guard.release().await.unwrap();
    let clear = AcquireOptions::new().data_update(DataUpdate::Clear);
    let guard = a.acquire("job", clear).await.unwrap();
    assert_eq!(guard.data(), None, "cleared");
    guard.release().await.unwrap();
    a.shutdown().await.unwrap();
}
