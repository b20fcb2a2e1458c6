//! Counting semaphores over the in-memory store, in paused tokio time: at most
//! `permits` holders, a poll of one read and one write, a crashed holder's
//! permit taken over, tasks of one client queued and woken locally (a permit
//! released while one waits handed to it in one write), and a
//! semaphore opened with the wrong count refused, with and without sort keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, Fence, LockError, LockKey, Permit, Semaphore};
use lock_memory::{MemoryStore, Op};
use support::{LEASE, client, wait};
use tokio::time::{Instant, timeout};

/// The support client's refresh (poll) period.
const REFRESH: Duration = Duration::from_millis(500);

fn stores() -> [(&'static str, MemoryStore); 2] {
    [
        ("sort keys", MemoryStore::new()),
        (
            "no sort keys",
            MemoryStore::builder().sort_keys(false).build(),
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn at_most_permits_holders_and_a_waiter_gets_a_released_permit_at_its_next_poll() {
    for (layout, store) in stores() {
        let clients: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|name| client(store.clone(), name))
            .collect();
        let semaphores: Vec<Semaphore> = clients
            .iter()
            .map(|client| client.semaphore("exports", 3).unwrap())
            .collect();
        let mut permits: Vec<Permit> = Vec::new();
        for semaphore in &semaphores[..3] {
            permits.push(semaphore.acquire(AcquireOptions::new()).await.unwrap());
        }
        let mut slots: Vec<u32> = permits.iter().map(Permit::slot).collect();
        slots.sort_unstable();
        assert_eq!(slots, [0, 1, 2], "{layout}");
        assert!(permits.iter().all(|permit| permit.fence() == Fence(1)));
        // All three held: a fourth holder waits, and gives up at its budget.
        let busy = semaphores[3].acquire(wait(Duration::from_secs(2))).await;
        assert!(
            matches!(busy, Err(LockError::AcquireTimeout { .. })),
            "{layout}: {busy:?}"
        );
        assert!(
            semaphores[3]
                .try_acquire(AcquireOptions::new())
                .await
                .unwrap()
                .is_none()
        );

        let waiter = semaphores[3].clone();
        let waiting = tokio::spawn(async move {
            let permit = waiter.acquire(wait(Duration::from_secs(60))).await;
            (permit, Instant::now())
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Still held through many heartbeats.
        assert!(permits.iter().all(|permit| permit.is_safe()));
        let freed = permits.remove(1);
        let slot = freed.slot();
        freed.release().await.unwrap();
        let released = Instant::now();
        let (taken, at) = timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        let taken = taken.unwrap();
        assert_eq!(taken.slot(), slot, "{layout}");
        assert_eq!(taken.fence(), Fence(2), "{layout}");
        assert!(at - released <= REFRESH, "{layout}: {:?}", at - released);
        drop(taken);
        for permit in permits {
            permit.release().await.unwrap();
        }
        for client in clients {
            client.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_poll_costs_one_partition_read_and_one_write_with_sort_keys_and_a_read_per_slot_without()
{
    for (layout, store, reads) in [
        ("sort keys", MemoryStore::new(), 1),
        // The header once, then one read per slot.
        (
            "no sort keys",
            MemoryStore::builder().sort_keys(false).build(),
            1 + 4,
        ),
    ] {
        let a = client(store.clone(), "a");
        let semaphore = a.semaphore("jobs", 4).unwrap();
        let before = store.history().len();
        let permit = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let calls: Vec<Op> = store.history()[before..]
            .iter()
            .map(|entry| entry.op())
            .collect();
        let writes = calls.iter().filter(|op| **op == Op::Put).count();
        let read = calls.len() - writes;
        // Without sort keys the first poll also writes the header.
        let header = usize::from(layout == "no sort keys");
        assert_eq!((read, writes), (reads, 1 + header), "{layout}: {calls:?}");
        permit.release().await.unwrap();
        a.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_holders_permit_is_taken_over_after_its_lease() {
    for (layout, store) in stores() {
        let dead = client(store.clone(), "dead");
        let crashed = dead.semaphore("exports", 1).unwrap();
        // The holder stops heartbeating without releasing: as a crash.
        let detached = crashed
            .acquire(AcquireOptions::new())
            .await
            .unwrap()
            .detach()
            .await
            .unwrap();
        let b = client(store.clone(), "b");
        let semaphore = b.semaphore("exports", 1).unwrap();
        let started = Instant::now();
        let permit = semaphore.acquire(wait(LEASE * 3)).await.unwrap();
        let waited = started.elapsed();
        assert!(waited >= LEASE.mul_f64(1.01), "{layout}: {waited:?}");
        assert!(
            waited <= LEASE.mul_f64(1.01) + REFRESH * 2,
            "{layout}: {waited:?}"
        );
        assert_eq!(permit.fence(), Fence(2), "{layout}");
        assert_eq!(
            permit.took_over().map(|previous| previous.owner.as_str()),
            Some("dead"),
            "{layout}"
        );
        drop(detached);
        permit.release().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

/// A fresh client's one busy-unless-dead attempt at a semaphore of
/// `permits` (a cron run), and how long it took.
async fn cron_attempt(store: &MemoryStore, run: &str, permits: u32) -> (Option<Permit>, Duration) {
    let cron = client(store.clone(), run);
    let semaphore = cron.semaphore("exports", permits).unwrap();
    let started = Instant::now();
    let taken = timeout(
        LEASE * 3,
        semaphore.try_acquire(AcquireOptions::new().busy_unless_dead(true)),
    )
    .await
    .expect("a busy-unless-dead attempt ends")
    .unwrap();
    (taken, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_skips_live_permit_holders_and_takes_a_crashed_ones_permit() {
    for (layout, store) in stores() {
        // Two live holders: the attempt gives up once both were seen alive
        // (about one heartbeat period, 2 s here), not after a lease.
        let live = client(store.clone(), "live");
        let semaphore = live.semaphore("exports", 2).unwrap();
        let first = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let second = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let (taken, waited) = cron_attempt(&store, "cron-1", 2).await;
        assert!(taken.is_none(), "{layout}: took a live holder's permit");
        assert!(
            waited <= Duration::from_secs(2) + REFRESH * 2,
            "{layout}: {waited:?}"
        );
        // One holder crashes (stops heartbeating without releasing): the
        // next cron run watches its silent permit and takes it over.
        let crashed = second.detach().await.unwrap();
        let (taken, waited) = cron_attempt(&store, "cron-2", 2).await;
        let taken = taken
            .unwrap_or_else(|| panic!("{layout}: the crashed holder's permit was never reclaimed"));
        assert_eq!(taken.key(), crashed.key(), "{layout}");
        assert_eq!(
            taken.took_over().map(|previous| previous.owner.as_str()),
            Some("live"),
            "{layout}"
        );
        assert!(waited >= LEASE.mul_f64(1.01), "{layout}: {waited:?}");
        assert!(
            waited <= LEASE.mul_f64(1.01) + REFRESH * 2,
            "{layout}: {waited:?}"
        );
        // The live one still holds its permit; the semaphore is full again.
        assert!(first.is_safe() && taken.is_safe(), "{layout}");
        let (again, _) = cron_attempt(&store, "cron-3", 2).await;
        assert!(again.is_none(), "{layout}");
        drop(taken);
        drop(first);
    }
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_counts_a_permit_kept_to_the_end_of_its_min_hold_as_busy() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let semaphore = a.semaphore("exports", 1).unwrap();
    let permit = semaphore
        .acquire(AcquireOptions::new().min_hold(Duration::from_secs(60)))
        .await
        .unwrap();
    // Released at once: a final write keeps the permit until the min hold ends.
    permit.release().await.unwrap();
    let (taken, waited) = cron_attempt(&store, "cron", 1).await;
    assert!(taken.is_none());
    assert!(waited <= REFRESH, "{waited:?}");
}

/// A permit released within its min hold is kept by its final write to the
/// end of that min hold, and taken at the waiter's next poll from then on
/// (on its wall clock): not after the final write's lease × (1 + drift) of
/// watching, as a dead holder's would be. The waiter's drift bound is large
/// (40 %) so that the two differ by more than a poll. An acquire of a lock
/// judges the same record the same way.
#[tokio::test(start_paused = true)]
async fn a_permit_released_within_its_min_hold_is_taken_when_the_min_hold_ends() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = lock_core::LockClient::builder(store.clone())
        .owner("b")
        .lease(LEASE)
        .heartbeat_period(Duration::from_secs(2))
        .refresh_period(REFRESH)
        .max_clock_drift(0.4)
        .safety_margin(Duration::from_millis(500))
        .build()
        .unwrap();
    let min_hold = Duration::from_secs(5);
    let permit = a
        .semaphore("exports", 1)
        .unwrap()
        .acquire(AcquireOptions::new().min_hold(min_hold))
        .await
        .unwrap();
    let acquired = Instant::now();
    permit.release().await.unwrap();
    let taken = timeout(
        Duration::from_secs(60),
        b.semaphore("exports", 1)
            .unwrap()
            .acquire(wait(Duration::from_secs(30))),
    )
    .await
    .expect("bounded")
    .unwrap();
    let waited = acquired.elapsed();
    assert!(
        waited >= min_hold,
        "taken before the min hold ended: {waited:?}"
    );
    assert!(
        waited <= min_hold + REFRESH * 2,
        "taken {waited:?} after it was acquired: the min hold ended at {min_hold:?}"
    );
    taken.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn tasks_of_one_client_queue_locally_and_a_release_wakes_the_next_at_once() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let semaphore = a.semaphore("exports", 2).unwrap();
    let first = semaphore.acquire(AcquireOptions::new()).await.unwrap();
    let second = semaphore.acquire(AcquireOptions::new()).await.unwrap();
    // The first waiter polls every 0.5 to 1 s; the second, queued behind it,
    // would poll every 50 to 100 ms if it polled at all.
    let mut waiters = Vec::new();
    for refresh in [Duration::from_secs(1), Duration::from_millis(100)] {
        let semaphore = semaphore.clone();
        waiters.push(tokio::spawn(async move {
            let options = wait(Duration::from_secs(60)).refresh_period(refresh);
            let permit = semaphore.acquire(options).await.unwrap();
            (permit, Instant::now())
        }));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = store.reads();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Only the first polls: at most 5 reads in 2 s, where both would make 20.
    assert!(store.reads() - reads <= 5, "{}", store.reads() - reads);
    // A release on this client wakes the waiting task at once, not at its
    // next poll; a drop too, once its release has ended.
    let mut waiters = waiters.into_iter();
    let mut got = Vec::new();
    first.release().await.unwrap();
    let released = Instant::now();
    let (permit, at) = timeout(Duration::from_secs(5), waiters.next().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        at - released < Duration::from_millis(50),
        "{:?}",
        at - released
    );
    got.push(permit);
    drop(second);
    let dropped = Instant::now();
    let (permit, at) = timeout(Duration::from_secs(5), waiters.next().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        at - dropped < Duration::from_millis(50),
        "{:?}",
        at - dropped
    );
    got.push(permit);
    for permit in got {
        permit.release().await.unwrap();
    }
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_semaphore_opened_with_another_count_is_refused_before_it_writes() {
    for (layout, store) in stores() {
        let a = client(store.clone(), "a");
        let permit = a
            .semaphore("exports", 3)
            .unwrap()
            .acquire(AcquireOptions::new())
            .await
            .unwrap();
        let b = client(store.clone(), "b");
        let writes = store.writes();
        let wrong = b
            .semaphore("exports", 4)
            .unwrap()
            .acquire(AcquireOptions::new())
            .await;
        match wrong {
            Err(LockError::PermitsMismatch {
                name,
                permits,
                found,
            }) => {
                assert_eq!(
                    (name.as_str(), permits, found),
                    ("exports", 4, 3),
                    "{layout}"
                );
            }
            other => panic!("{layout}: {other:?}"),
        }
        assert_eq!(store.writes(), writes, "{layout}: nothing written");
        permit.release().await.unwrap();
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    for permits in [0, lock_core::MAX_PERMITS + 1] {
        let refused = a.semaphore("exports", permits);
        assert!(
            matches!(refused, Err(LockError::InvalidInput { .. })),
            "{permits}: {refused:?}"
        );
    }
    let semaphore = a.semaphore("exports", 2).unwrap();
    let reentrant = semaphore
        .acquire(AcquireOptions::new().reentrant(true))
        .await;
    assert!(
        matches!(reentrant, Err(LockError::InvalidInput { .. })),
        "{reentrant:?}"
    );
    let waiting = semaphore.try_acquire(wait(Duration::from_secs(1))).await;
    assert!(
        matches!(waiting, Err(LockError::InvalidConfig(_))),
        "{waiting:?}"
    );
    assert!(a.semaphore("", 2).is_err());
    // The edges: the most permits, and (with sort keys) a name as long as a
    // partition key may be: the header key, longer, is only for stores
    // without sort keys.
    let most = a.semaphore("exports", lock_core::MAX_PERMITS).unwrap();
    assert_eq!(
        (most.name(), most.permits()),
        ("exports", lock_core::MAX_PERMITS)
    );
    let tight = MemoryStore::builder().key_limits(10, 100).build();
    let b = client(tight.clone(), "b");
    assert!(b.semaphore("ten-bytes!", 3).is_ok());
    assert!(b.semaphore("eleven-byte", 3).is_err());
    b.shutdown().await.unwrap();
    assert_eq!(store.calls(), 0);
    assert!(store.record(&LockKey::new("exports")).is_none());
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_first_openers_with_different_counts_cannot_both_pass() {
    // Without sort keys, the header says the count. Both read it absent (the
    // replies are slow), then both write it: the second write is refused and
    // its opener reads the first one's count.
    let store = support::Delayed::new(MemoryStore::builder().sort_keys(false).build());
    store.delay_reads(Duration::from_millis(100));
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let (four, eight) = (
        a.semaphore("pool", 4).unwrap(),
        b.semaphore("pool", 8).unwrap(),
    );
    let (first, second) = tokio::join!(
        four.acquire(AcquireOptions::new()),
        eight.acquire(AcquireOptions::new()),
    );
    let refused = [&first, &second]
        .iter()
        .filter(|taken| matches!(taken, Err(LockError::PermitsMismatch { .. })))
        .count();
    assert_eq!(refused, 1, "{first:?} {second:?}");
    drop((first, second));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiting_acquire_ends_when_its_client_shuts_down() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let held = a
        .semaphore("pool", 1)
        .unwrap()
        .acquire(AcquireOptions::new())
        .await
        .unwrap();
    let semaphore = b.semaphore("pool", 1).unwrap();
    let waiting = tokio::spawn(async move {
        // Polls at most every 10 s: only the shutdown can end it sooner.
        let options = wait(Duration::MAX).refresh_period(Duration::from_secs(10));
        semaphore.acquire(options).await
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let shut = Instant::now();
    b.shutdown().await.unwrap();
    let ended = timeout(Duration::from_secs(1), waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ended, Err(LockError::Shutdown)), "{ended:?}");
    assert!(
        shut.elapsed() < Duration::from_millis(100),
        "{:?}",
        shut.elapsed()
    );
    held.release().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_invalid_lease_is_refused_at_once_even_when_every_permit_is_held() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let semaphore = a.semaphore("pool", 1).unwrap();
    let held = semaphore.acquire(AcquireOptions::new()).await.unwrap();
    let started = Instant::now();
    let refused = semaphore
        .acquire(wait(Duration::from_secs(30)).lease(Duration::ZERO))
        .await;
    assert!(
        matches!(refused, Err(LockError::InvalidConfig(_))),
        "{refused:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    held.release().await.unwrap();
    a.shutdown().await.unwrap();
}

/// Two permits held by client `a`, and a task of `a` waiting for a third
/// through another handle of the semaphore (the store's counters cleared
/// once it waits).
async fn held_with_a_local_waiter(
    store: &MemoryStore,
    waiter_options: AcquireOptions,
) -> (
    lock_core::LockClient,
    [Permit; 2],
    tokio::task::JoinHandle<(Result<Permit, LockError>, Instant)>,
) {
    let a = client(store.clone(), "a");
    let semaphore = a.semaphore("exports", 2).unwrap();
    let held = [
        semaphore.acquire(AcquireOptions::new()).await.unwrap(),
        semaphore.acquire(AcquireOptions::new()).await.unwrap(),
    ];
    // Another handle of the same semaphore on the same client: it shares the
    // client's queue.
    let another = a.semaphore("exports", 2).unwrap();
    drop(semaphore);
    let waiting = tokio::spawn(async move {
        let permit = another.acquire(waiter_options).await;
        (permit, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.clear_history();
    (a, held, waiting)
}

#[tokio::test(start_paused = true)]
async fn a_permit_released_while_a_task_of_its_client_waits_is_handed_over_in_one_write() {
    for (layout, store) in stores() {
        let options = wait(Duration::from_secs(60)).data(b"second".to_vec());
        let (a, [one, other], waiting) = held_with_a_local_waiter(&store, options).await;
        // The permit of slot 1 goes: the hand-off must carry its slot.
        let (first, second) = if one.slot() == 1 {
            (one, other)
        } else {
            (other, one)
        };
        let slot = first.slot();
        assert_eq!(slot, 1);
        let fence = first.fence();
        let lost = first.until_ended();
        first.release().await.unwrap();
        let released = Instant::now();
        let (permit, at) = timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        let permit = permit.unwrap();
        assert_eq!(at, released, "{layout}: taken at once");
        assert_eq!(permit.slot(), slot, "{layout}");
        assert_eq!(
            permit.fence(),
            Fence(fence.0 + 1),
            "{layout}: the next fence"
        );
        assert_eq!(permit.data(), Some(b"second".to_vec()), "{layout}");
        // No release, no read: the waiter's write on the released version.
        assert_eq!((store.writes(), store.reads()), (1, 0), "{layout}");
        assert_eq!(
            timeout(Duration::from_secs(1), lost).await.unwrap(),
            lock_core::LostReason::Released,
            "{layout}: the old permit is over"
        );
        // The new permit is an ordinary one: heartbeaten, released by a write.
        tokio::time::sleep(LEASE * 2).await;
        assert!(permit.is_safe(), "{layout}");
        permit.release().await.unwrap();
        second.release().await.unwrap();
        let record = store.record(&lock_key(&store, slot)).unwrap();
        assert!(record.released, "{layout}");
        a.shutdown().await.unwrap();
    }
}

fn lock_key(store: &MemoryStore, slot: u32) -> LockKey {
    use lock_core::ConditionalStore;
    let name = format!("permit-{slot:05}-of-2");
    if store.capabilities().sort_keys {
        LockKey::with_sort("exports", name)
    } else {
        LockKey::new(format!("exports#{name}"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_permit_handed_to_a_task_that_left_is_released_by_the_last_to_leave() {
    for (layout, store) in stores() {
        let (a, [first, second], waiting) =
            held_with_a_local_waiter(&store, wait(Duration::from_secs(60))).await;
        let slot = first.slot();
        // Released to the waiter, which is cancelled before it runs again.
        first.release().await.unwrap();
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        // The hand-off nobody took is released in the background, at once:
        // another client takes the permit without waiting for a lease.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let record = store.record(&lock_key(&store, slot)).unwrap();
        assert!(record.released, "{layout}: {record:?}");
        let b = client(store.clone(), "b");
        let taken = b
            .semaphore("exports", 2)
            .unwrap()
            .try_acquire(AcquireOptions::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(taken.slot(), slot, "{layout}");
        taken.release().await.unwrap();
        second.release().await.unwrap();
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_permit_released_with_nobody_waiting_or_with_data_is_written_released() {
    for (layout, store) in stores() {
        let solo = client(store.clone(), "solo");
        let semaphore = solo.semaphore("exports", 2).unwrap();
        let permit = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let slot = permit.slot();
        permit.release().await.unwrap();
        assert!(
            store.record(&lock_key(&store, slot)).unwrap().released,
            "{layout}"
        );
        solo.shutdown().await.unwrap();

        // With data, the release writes it: no hand-off, the waiter polls.
        let (a, [first, second], waiting) =
            held_with_a_local_waiter(&store, wait(Duration::from_secs(60))).await;
        let slot = first.slot();
        first.release_with_data(b"done".to_vec()).await.unwrap();
        let (permit, _) = timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        let permit = permit.unwrap();
        assert_eq!(permit.slot(), slot, "{layout}");
        assert_eq!(permit.data(), Some(b"done".to_vec()), "{layout}: kept");
        assert!(store.reads() >= 1, "{layout}: found by a poll");
        permit.release().await.unwrap();
        second.release().await.unwrap();
        a.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_a_permit_handed_to_a_waiter_that_had_not_taken_it() {
    for (layout, store) in stores() {
        let (a, [first, second], waiting) =
            held_with_a_local_waiter(&store, wait(Duration::from_secs(60))).await;
        let slot = first.slot();
        // The other permit leaves shutdown nothing of its own to wait for.
        let detached = second.detach().await.unwrap();
        // Handed to the waiter, which has not run since.
        first.release().await.unwrap();
        let report = timeout(Duration::from_secs(30), a.shutdown())
            .await
            .unwrap()
            .unwrap();
        // Shutdown waited for the waiter to give the hand-off back, and for
        // its release.
        let record = store.record(&lock_key(&store, slot)).unwrap();
        assert!(record.released, "{layout}: {record:?} ({report:?})");
        let (taken, _) = timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(taken, Err(LockError::Shutdown)),
            "{layout}: {taken:?}"
        );
        drop(detached);
    }
}
