//! Heartbeats when the store cannot take them all: a write-capacity limit (a token
//! bucket, as DynamoDB throttles) or the client's own rate limit. Heartbeats go out
//! earliest deadline first, a lock nearer the end of its safe time never waits
//! behind later ones, no more locks are lost than the capacity forces, and every
//! lock lost was reported in danger first (never a false "safe").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{AcquireOptions, LockClient, LockKey, LostReason, Timing};
use lock_memory::{Fault, FaultyStore, MemoryStore, Op, WriteCapacity};
use tokio::time::Instant;

/// The client's default timings: lease 20 s, heartbeat every 5 s, safe time
/// 20 × 0.99 − 2 = 17.8 s.
const LEASE: Duration = Duration::from_secs(20);
const PERIOD: Duration = Duration::from_secs(5);
/// Locks held by the client in the capacity tests: heartbeat demand 2,000
/// writes a second.
const LOCKS: usize = 10_000;

/// What happened to each lock of one run.
struct Run {
    locks: usize,
    /// The locks reported no longer safe, by index, with when and why.
    unsafe_at: HashMap<usize, (Instant, LostReason)>,
    /// The locks lost by the end.
    lost: usize,
    /// Every write that reached the store, by lock index.
    applied: HashMap<usize, Vec<Instant>>,
    start: Instant,
    end: Instant,
    timing: Timing,
}

/// `locks` locks held by one client with the default timings for `leases`
/// leases, the store taking `capacity` × the heartbeat demand (locks / 5 s) in
/// writes a second, with a one-second burst.
async fn hold_under_capacity(locks: usize, capacity: f64, leases: u32) -> Run {
    let store = MemoryStore::builder().history_capacity(0).build();
    let faulty = FaultyStore::new(store, 7).with_history_capacity(4_000_000);
    let client = LockClient::builder(faulty.clone())
        .owner("holder")
        .build()
        .unwrap();
    let mut guards = Vec::with_capacity(locks);
    for i in 0..locks {
        guards.push(
            client
                .acquire(format!("lock-{i}"), AcquireOptions::new())
                .await
                .unwrap(),
        );
    }
    let demand = locks as f64 / PERIOD.as_secs_f64();
    faulty.clear_faults();
    faulty.set_write_capacity(Some(WriteCapacity::new(
        capacity * demand,
        capacity * demand,
    )));
    let start = Instant::now();
    let unsafe_at = Arc::new(Mutex::new(HashMap::new()));
    for (i, guard) in guards.iter().enumerate() {
        let until = guard.until_unsafe();
        let unsafe_at = unsafe_at.clone();
        tokio::spawn(async move {
            let reason = until.await;
            unsafe_at
                .lock()
                .unwrap()
                .insert(i, (Instant::now(), reason));
        });
    }
    tokio::time::sleep(LEASE * leases).await;
    let end = Instant::now();
    let lost = guards
        .iter()
        .filter(|guard| matches!(guard.state(), lock_core::LeaseState::Lost { .. }))
        .count();
    let index: HashMap<LockKey, usize> = (0..locks)
        .map(|i| (LockKey::new(format!("lock-{i}")), i))
        .collect();
    let mut applied: HashMap<usize, Vec<Instant>> = HashMap::new();
    for event in faulty.faults() {
        if event.op == Op::Put && event.fault == Fault::Pass {
            let key = event.key.as_ref().unwrap();
            applied.entry(index[key]).or_default().push(event.at);
        }
    }
    let timing = client.timing();
    drop(guards);
    let unsafe_at = std::mem::take(&mut *unsafe_at.lock().unwrap());
    Run {
        locks,
        unsafe_at,
        lost,
        applied,
        start,
        end,
        timing,
    }
}

impl Run {
    /// From the store's side: a lock that was never reported unsafe had its record
    /// renewed within every safe time; one reported unsafe was, up to the report.
    /// A lock said to be safe while its record went unrenewed past the safe time
    /// would be a false "safe".
    fn assert_never_falsely_safe(&self) {
        let safe_time = self.timing.safe_time();
        for lock in 0..self.locks {
            let until = self.unsafe_at.get(&lock).map_or(self.end, |(at, _)| *at);
            let writes = self.applied.get(&lock).map_or(&[][..], Vec::as_slice);
            // The acquire's write, before the capacity was set, was at or before
            // the start.
            let mut last = self.start;
            for &write in writes.iter().take_while(|&&write| write <= until) {
                assert!(
                    write - last <= safe_time,
                    "lock {lock}: said safe, but its record went unrenewed from {:?} to {:?}",
                    last - self.start,
                    write - self.start
                );
                last = write;
            }
            if until < self.end {
                assert!(
                    until - last <= safe_time,
                    "lock {lock}: reported unsafe only {:?} after its last renewal",
                    until - last
                );
            } else {
                assert!(
                    self.end - last <= safe_time,
                    "lock {lock}: said safe at the end, last renewed {:?} before",
                    self.end - last
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn with_capacity_a_tenth_above_the_heartbeat_demand_no_lock_is_lost() {
    let run = hold_under_capacity(LOCKS, 1.1, 10).await;
    run.assert_never_falsely_safe();
    assert_eq!(run.lost, 0);
    // The pace keeps up with the demand (2,000 a second, more than one per
    // millisecond timer tick): locks are renewed about every period, not later.
    let mut gaps: Vec<Duration> = run
        .applied
        .values()
        .flat_map(|writes| writes.windows(2).map(|pair| pair[1] - pair[0]))
        .collect();
    gaps.sort();
    let p99 = gaps[gaps.len() * 99 / 100];
    assert!(p99 <= Duration::from_secs(6), "renewal gap p99 {p99:?}");
    assert!(
        run.unsafe_at.is_empty(),
        "{} locks fell in danger, the first: {:?}",
        run.unsafe_at.len(),
        run.unsafe_at.iter().min_by_key(|(_, (at, _))| *at)
    );
}

#[tokio::test(start_paused = true)]
async fn with_half_the_capacity_heartbeats_slow_down_and_no_lock_is_lost() {
    // Half the demand still renews every lock every 10 s, within its 17.8 s safe
    // time: the capacity forces no loss, so none may happen.
    let run = hold_under_capacity(LOCKS, 0.5, 10).await;
    run.assert_never_falsely_safe();
    assert_eq!(run.lost, 0);
    assert!(
        run.unsafe_at.is_empty(),
        "{} locks fell in danger, the first: {:?}",
        run.unsafe_at.len(),
        run.unsafe_at.iter().min_by_key(|(_, (at, _))| *at)
    );
}

#[tokio::test(start_paused = true)]
async fn with_a_fifth_of_the_capacity_no_more_locks_are_lost_than_it_forces() {
    // 400 writes a second, a burst of 400. The 10,000 locks, taken together, are
    // first due 3.75–5 s later (the first heartbeat is jittered by a quarter
    // period) and expire at 20 s: in between the store takes at most
    // 400 + 400 × 16.25 = 6,900 heartbeats, so at least 3,100 locks must go, and
    // the 6,900 left fit (400 × 20 = 8,000 can be renewed within a lease). Every
    // lock lost was first reported in danger.
    let run = hold_under_capacity(LOCKS, 0.2, 10).await;
    run.assert_never_falsely_safe();
    let forced = LOCKS - 6_900;
    assert!(run.lost >= forced, "{} lost", run.lost);
    assert!(
        run.lost <= forced + LOCKS / 20,
        "{} locks lost; the capacity forces {forced}",
        run.lost
    );
    for (lock, (_, reason)) in &run.unsafe_at {
        assert_eq!(
            *reason,
            LostReason::InDanger,
            "lock {lock} was lost without being reported in danger first"
        );
    }
}

/// Under the client's own rate limit, a short-lease lock due at the same time as
/// many long-lease ones goes first: it is nearest its deadline.
#[tokio::test(start_paused = true)]
async fn under_a_rate_limit_the_lock_nearest_its_deadline_heartbeats_first() {
    let store = MemoryStore::new();
    let client = LockClient::builder(store.clone())
        .owner("holder")
        .lease(Duration::from_secs(60))
        .heartbeat_rate_limit(1)
        .build()
        .unwrap();
    let mut long = Vec::new();
    for i in 0..10 {
        long.push(
            client
                .acquire(format!("long-{i}"), AcquireOptions::new())
                .await
                .unwrap(),
        );
    }
    // Lease 6 s: a heartbeat every 1.5 s, safe for 5.34 s after each.
    let short = client
        .acquire("short", AcquireOptions::new().lease(Duration::from_secs(6)))
        .await
        .unwrap();
    let danger = short.until_unsafe();
    // The ten long locks are due together at 15 s; with one heartbeat a second,
    // the short lock must not wait behind them.
    let outcome = tokio::time::timeout(Duration::from_secs(120), danger).await;
    assert!(
        outcome.is_err(),
        "the short lock fell {outcome:?} while long locks heartbeat"
    );
    assert!(long.iter().all(|guard| guard.is_safe()));
}

/// One lock, a store that throttles its heartbeat three times: the heartbeat
/// goes again as one write's retries would (50, 100, 200 ms apart), not a
/// second later, and the lock never leaves its safe time.
#[tokio::test(start_paused = true)]
async fn a_throttled_heartbeat_of_a_lone_lock_is_retried_with_backoff() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store, 3);
    let client = LockClient::builder(faulty.clone())
        .owner("holder")
        .lease(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = client.acquire("lone", AcquireOptions::new()).await.unwrap();
    let danger = guard.until_unsafe();
    faulty.clear_faults();
    for _ in 0..3 {
        faulty.script(Op::Put, Fault::Throttled);
    }
    // The first heartbeat is due within the first 0.5 s (lease / 4).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let puts: Vec<(Instant, Fault)> = faulty
        .faults()
        .into_iter()
        .filter(|event| event.op == Op::Put)
        .map(|event| (event.at, event.fault))
        .collect();
    assert!(puts.len() >= 4, "{puts:?}");
    assert_eq!(
        puts[..4]
            .iter()
            .map(|(_, fault)| fault.clone())
            .collect::<Vec<_>>(),
        [
            Fault::Throttled,
            Fault::Throttled,
            Fault::Throttled,
            Fault::Pass
        ]
    );
    let gaps: Vec<Duration> = puts[..4]
        .windows(2)
        .map(|pair| pair[1].0 - pair[0].0)
        .collect();
    assert_eq!(
        gaps,
        [
            Duration::from_millis(50),
            Duration::from_millis(100),
            Duration::from_millis(200)
        ]
    );
    assert!(guard.is_safe());
    let outcome = tokio::time::timeout(Duration::from_secs(10), danger).await;
    assert!(outcome.is_err(), "fell {outcome:?}");
}

/// Under the client's rate limit, heartbeats whose safe times end at the same
/// instant go in the order they fell due: the order they go in without a limit.
#[tokio::test(start_paused = true)]
async fn under_a_rate_limit_heartbeats_due_together_go_in_the_order_they_fell_due() {
    let free = first_heartbeats(None).await;
    let limited = first_heartbeats(Some(1)).await;
    assert_eq!(limited, free);
}

/// The order of the first heartbeats of ten locks taken at one instant (so safe
/// until one instant), by a client with `rate_limit`.
async fn first_heartbeats(rate_limit: Option<u32>) -> Vec<LockKey> {
    // One seed for both runs: the same jitter, so the same order of falling due.
    fastrand::seed(29);
    let store = MemoryStore::new();
    let mut builder = LockClient::builder(store.clone())
        .owner("holder")
        .lease(Duration::from_secs(60));
    if let Some(rate) = rate_limit {
        builder = builder.heartbeat_rate_limit(rate);
    }
    let client = builder.build().unwrap();
    let mut guards = Vec::new();
    for i in 0..10 {
        guards.push(
            client
                .acquire(format!("lock-{i}"), AcquireOptions::new())
                .await
                .unwrap(),
        );
    }
    // Lease 60 s: the first heartbeats fall due between 11.25 and 15 s; at one a
    // second, most of them wait for a slot.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let mut order: Vec<LockKey> = Vec::new();
    for entry in store.history().into_iter().skip(guards.len()) {
        if let Some(key) = entry.key()
            && entry.op() == Op::Put
            && !order.contains(key)
        {
            order.push(key.clone());
        }
    }
    assert_eq!(order.len(), guards.len(), "{order:?}");
    for guard in guards {
        guard.release().await.unwrap();
    }
    client.shutdown().await.unwrap();
    order
}
