//! Taking over a crashed holder's lock by time the store proves, instead of
//! watching the record for `lease × (1 + drift)`: by the store's own clock
//! (`WriteTime::Ago`, the in-memory store keeping one as PostgreSQL does) and
//! by wall clocks within a declared bound (`WriteTime::At`, as DynamoDB
//! stamps writes). Paused tokio time, edges to the millisecond, clocks skewed
//! within and beyond their bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreReply};
use lock_core::{
    AcquireOptions, Capabilities, Clock, ConditionalStore, ConfigError, DriftingClock, Fence,
    LockClient, LockError, LockKey, LockRecord, StoreClock, StoreError, WriteTime,
};
use lock_memory::{FaultyStore, FenceRefused, FencedResource, MemoryStore};
use support::{LEASE, client, dead_holder};
use tokio::time::{Instant, advance, timeout};

/// Long enough for anything here to happen; a regression fails, never hangs.
const PATIENCE: Duration = Duration::from_secs(600);

/// The support client's takeover time: lease 10 s × (1 + 1 % drift).
const TAKEOVER: Duration = Duration::from_millis(10_100);

const TICK: Duration = Duration::from_millis(1);

fn clocked_store() -> MemoryStore {
    MemoryStore::builder().store_clock(1.0).build()
}

/// A fresh process's one attempt (a cron run, `lockctl run --wait 0s`): what
/// it got and how many calls it made.
async fn fresh_attempt(store: &MemoryStore, owner: &str) -> (Option<lock_core::LockGuard>, usize) {
    let fresh = client(store.clone(), owner);
    let calls = store.calls();
    let got = timeout(PATIENCE, fresh.try_acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap();
    (got, store.calls() - calls)
}

// ---- The store's clock -------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_fresh_client_takes_a_crashed_holders_lock_in_one_read_and_one_write_once_its_lease_has_passed_on_the_store_clock()
 {
    let store = clocked_store();
    assert_eq!(store.capabilities().clock, StoreClock::Age);
    dead_holder(&store, "job", AcquireOptions::new()).await;
    // One tick before: busy, in one call (the refused "if vacant" write).
    advance(TAKEOVER - TICK).await;
    let (got, calls) = fresh_attempt(&store, "early").await;
    assert!(got.is_none());
    assert_eq!(calls, 1);
    // At the edge: taken over at once, the refused write carrying the record
    // and its age, then the takeover.
    advance(TICK).await;
    let (got, calls) = fresh_attempt(&store, "cron").await;
    let guard = got.expect("the lease has passed on the store's clock");
    assert_eq!(calls, 2);
    assert_eq!(guard.fence(), Fence(2));
    assert_eq!(guard.took_over().unwrap().owner, "dead");
}

#[tokio::test(start_paused = true)]
async fn with_the_store_clock_turned_off_a_fresh_client_watches_the_record_for_a_whole_lease() {
    let store = clocked_store();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    advance(LEASE * 6).await;
    let watcher = LockClient::builder(store.clone())
        .owner("watcher")
        .lease(LEASE)
        .refresh_period(Duration::from_millis(500))
        .use_store_clock(false)
        .build()
        .unwrap();
    assert!(
        watcher
            .try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let started = Instant::now();
    let guard = timeout(
        PATIENCE,
        watcher.acquire("job", AcquireOptions::new().wait(LEASE * 3)),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(started.elapsed() >= TAKEOVER - Duration::from_millis(500));
    assert_eq!(guard.took_over().unwrap().owner, "dead");
    watcher.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_first_saw_a_young_record_takes_it_over_by_its_age_not_its_first_sighting() {
    let store = clocked_store();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    advance(Duration::from_secs(4)).await;
    let waiter = client(store.clone(), "waiter");
    let started = Instant::now();
    let guard = timeout(
        PATIENCE,
        waiter.acquire("job", AcquireOptions::new().wait(LEASE * 3)),
    )
    .await
    .unwrap()
    .unwrap();
    // Seen 4 s old: taken over 6.1 s later, not 10.1 s.
    assert_eq!(started.elapsed(), TAKEOVER - Duration::from_secs(4));
    assert_eq!(guard.fence(), Fence(2));
    waiter.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_live_holders_heartbeats_keep_its_record_young_on_the_store_clock() {
    let store = clocked_store();
    let holder = client(store.clone(), "holder");
    let held = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    for _ in 0..5 {
        // Slept, not advanced: the holder's heartbeats run on time.
        tokio::time::sleep(LEASE).await;
        let (got, _) = fresh_attempt(&store, "fresh").await;
        assert!(got.is_none(), "a heartbeaten lock is never taken over");
        assert!(held.is_safe());
    }
    holder.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_watches_a_crashed_holders_record_only_for_what_is_left_of_its_lease() {
    let store = clocked_store();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    advance(Duration::from_secs(3)).await;
    let cron = client(store.clone(), "cron");
    let started = Instant::now();
    let guard = timeout(
        PATIENCE,
        cron.try_acquire("job", AcquireOptions::new().busy_unless_dead(true)),
    )
    .await
    .unwrap()
    .unwrap()
    .expect("a dead holder's lock is taken over");
    assert_eq!(started.elapsed(), TAKEOVER - Duration::from_secs(3));
    assert_eq!(guard.took_over().unwrap().owner, "dead");
    cron.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_fresh_client_takes_a_crashed_holders_permit_once_its_lease_has_passed_on_the_store_clock()
 {
    let store = clocked_store();
    let dead = client(store.clone(), "dead");
    let _detached = dead
        .semaphore("exports", 2)
        .unwrap()
        .acquire(AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    let alive = client(store.clone(), "alive");
    let kept = alive
        .semaphore("exports", 2)
        .unwrap()
        .acquire(AcquireOptions::new())
        .await
        .unwrap();
    tokio::time::sleep(TAKEOVER - TICK).await;
    let early = client(store.clone(), "early");
    let none = early
        .semaphore("exports", 2)
        .unwrap()
        .try_acquire(AcquireOptions::new())
        .await
        .unwrap();
    assert!(none.is_none());
    tokio::time::sleep(TICK).await;
    let cron = client(store.clone(), "cron");
    let permit = cron
        .semaphore("exports", 2)
        .unwrap()
        .try_acquire(AcquireOptions::new())
        .await
        .unwrap()
        .expect("the crashed holder's permit");
    assert_eq!(permit.took_over().unwrap().owner, "dead");
    assert!(kept.is_safe());
    alive.shutdown().await.unwrap();
    cron.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_new_candidate_leads_at_once_when_the_crashed_leaders_lease_has_passed_on_the_store_clock()
 {
    let store = clocked_store();
    let to_old = FaultyStore::new(store.clone(), 3);
    let old = client(to_old.clone(), "old");
    let old_leadership = old
        .elect("leader", lock_core::ElectionOptions::new())
        .unwrap()
        .leadership()
        .await
        .unwrap();
    // The leader's process is cut off: its heartbeats stop, its record stays.
    to_old.set_unavailable(true);
    advance(TAKEOVER).await;
    assert!(!old_leadership.is_safe());
    let new = client(store.clone(), "new");
    let election = new
        .elect("leader", lock_core::ElectionOptions::new())
        .unwrap();
    let started = Instant::now();
    let leadership = timeout(PATIENCE, election.leadership())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(leadership.fence() > old_leadership.fence());
    drop(leadership);
    new.shutdown().await.unwrap();
}

/// A holder whose heartbeats stop reaching the store, on the slowest clock the
/// drift bound allows (so it trusts its lease longest in true time), against
/// a store clock and a waiter clock as fast as the bound allows, with every
/// reply late: the waiter takes the lock once the holder has stopped trusting
/// it, never before, and as soon as the store's clock allows.
#[tokio::test(start_paused = true)]
async fn the_holder_stops_trusting_its_lease_before_a_store_clock_takeover_at_the_drift_bound() {
    // Replies at once: taken over within a few ticks of the lease's end.
    holder_against_store_clock_takeover(Duration::ZERO, LEASE + TICK * 5).await;
    // Every reply 300 ms late. The waiter's first reply came 300 ms after the
    // write, proving it no older than the write: it may take over 300 ms after
    // the lease, learns so on the reply to a read then in flight (300 ms), and
    // its takeover's reply takes 300 ms more.
    holder_against_store_clock_takeover(
        Duration::from_millis(300),
        LEASE + Duration::from_millis(900) + TICK * 10,
    )
    .await;
}

async fn holder_against_store_clock_takeover(late: Duration, within: Duration) {
    let drift = 0.01;
    let store = MemoryStore::builder().store_clock(1.0 + drift).build();
    let to_holder = FaultyStore::new(store.clone(), 7);
    let replies_late = support::Delayed::new(store.clone());
    replies_late.delay_writes(late);
    replies_late.delay_reads(late);
    let holder = LockClient::builder(to_holder.clone())
        .owner("holder")
        .lease(LEASE)
        .max_clock_drift(drift)
        .safety_margin(Duration::ZERO)
        .clock(Arc::new(DriftingClock::new(1.0 - drift)))
        .build()
        .unwrap();
    let held = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let sent = Instant::now();
    to_holder.set_unavailable(true);
    let waiter = LockClient::builder(Layered::new(replies_late.clone(), store.clone()))
        .owner("waiter")
        .lease(LEASE)
        .refresh_period(Duration::from_millis(1))
        .max_clock_drift(drift)
        .clock(Arc::new(DriftingClock::new(1.0 + drift)))
        .build()
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire("job", AcquireOptions::new().wait(LEASE * 3))
                .await
        }
    });
    let mut was_safe_until = sent;
    while !waiting.is_finished() {
        if held.is_safe() {
            was_safe_until = Instant::now();
        }
        tokio::time::sleep(TICK).await;
        assert!(sent.elapsed() < PATIENCE);
    }
    let taken = waiting.await.unwrap().unwrap();
    let taken_at = Instant::now();
    assert!(!held.is_safe());
    assert!(
        taken_at > was_safe_until,
        "{late:?} late: taken over at {:?}, holder safe until {:?}",
        taken_at - sent,
        was_safe_until - sent
    );
    assert!(
        taken_at - sent <= within,
        "{late:?} late: taken over at {:?}",
        taken_at - sent
    );
    assert!(
        was_safe_until - sent >= LEASE - TICK * 2,
        "{:?}",
        was_safe_until - sent
    );
    assert_eq!(taken.fence(), Fence(2));
    drop(taken);
    waiter.shutdown().await.unwrap();
}

/// The failure store-clock takeover documents: the store's clock stepped
/// forward during a lease. A fresh client takes a live holder's lock early;
/// both trust it for a while; the fence refuses the old holder at the
/// resource.
#[tokio::test(start_paused = true)]
async fn a_store_clock_stepped_forward_takes_a_live_holders_lock_early_and_its_fence_refuses_the_old_holder()
 {
    let store = clocked_store();
    let holder = client(store.clone(), "holder");
    let to_holder = FaultyStore::new(store.clone(), 11);
    let partitioned = client(to_holder.clone(), "partitioned");
    let old = partitioned
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap();
    to_holder.set_unavailable(true);
    advance(Duration::from_secs(1)).await;
    store.step_store_clock(Duration::from_secs(30));
    let (got, _) = fresh_attempt(&store, "fresh").await;
    let new = got.expect("a stepped store clock makes a young record look dead");
    assert!(old.is_safe(), "the old holder still trusts its lease");
    let resource = FencedResource::new();
    let key = LockKey::new("job");
    resource.write("report", &key, new.fence(), "new").unwrap();
    let refused = resource.write("report", &key, old.fence(), "old");
    assert!(
        matches!(refused, Err(FenceRefused::Stale { .. })),
        "{refused:?}"
    );
    assert_eq!(resource.read("report"), Some(("new", new.fence())));
    drop(new);
    drop(old);
    holder.shutdown().await.unwrap();
}

// ---- Wall clocks within a declared bound -------------------------------------

/// A wall clock `offset` ahead of (or behind) true time, on tokio's paused
/// monotonic clock.
#[derive(Debug)]
struct SkewedWall {
    base: (Instant, SystemTime),
    offset: i64,
}

impl SkewedWall {
    /// `offset_ms` ahead of the wall clock that read `base.1` at `base.0`.
    fn new(base: (Instant, SystemTime), offset_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            base,
            offset: offset_ms,
        })
    }

    fn at(&self, now: Instant) -> SystemTime {
        let true_wall = self.base.1 + (now - self.base.0);
        let by = Duration::from_millis(self.offset.unsigned_abs());
        if self.offset >= 0 {
            true_wall + by
        } else {
            true_wall - by
        }
    }
}

impl Clock for SkewedWall {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> lock_core::clock::Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }

    fn wall_now(&self) -> SystemTime {
        self.at(Instant::now())
    }
}

/// Stamps every applied write with its writer's wall clock, as the DynamoDB
/// store does on the writer's host, and returns the stamp with every record
/// read ([`WriteTime::At`]).
#[derive(Debug, Default)]
struct WriterStamps {
    clocks: HashMap<String, Arc<SkewedWall>>,
    stamps: Mutex<HashMap<LockKey, SystemTime>>,
}

impl WriterStamps {
    fn date(&self, record: &mut LockRecord) {
        if let Some(at) = self.stamps.lock().unwrap().get(&record.key) {
            record.written = Some(WriteTime::At(*at));
        }
    }
}

#[async_trait::async_trait]
impl StoreLayer for WriterStamps {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let writer = match &call {
            StoreCall::Put { new, .. } => self.clocks.get(&new.owner).map(|clock| clock.wall_now()),
            _ => None,
        };
        let mut reply = call.send(next).await?;
        if let (Some(stamp), Some(applied)) = (writer, reply.applied()) {
            let key = applied.key.clone();
            self.stamps.lock().unwrap().insert(key, stamp);
        }
        match &mut reply {
            StoreReply::Record(Some(record)) => self.date(record),
            StoreReply::Outcome(outcome) => match outcome {
                lock_core::Outcome::Applied(record) => self.date(record),
                lock_core::Outcome::Rejected {
                    current: Some(record),
                } => self.date(record),
                _ => {}
            },
            StoreReply::Page(page) => page.records.iter_mut().for_each(|r| self.date(r)),
            _ => {}
        }
        Ok(reply)
    }

    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner.with_clock(StoreClock::Wall {
            granularity: Duration::from_millis(1),
        })
    }
}

const BOUND: Duration = Duration::from_secs(1);

/// A store whose writes are stamped with their writer's wall clock, a
/// holder ("dead", true wall clock) that took `job` on it and crashed, and
/// the wall clock of the fresh processes ("fresh"), `ahead_ms` ahead of the
/// holder's (behind when negative).
async fn stamped_crash(
    ahead_ms: i64,
) -> (
    Arc<Layered<WriterStamps, MemoryStore>>,
    Arc<SkewedWall>,
    lock_core::DetachedLock,
) {
    let base = (
        Instant::now(),
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    );
    let holder_clock = SkewedWall::new(base, 0);
    let fresh_clock = SkewedWall::new(base, ahead_ms);
    let stamps = WriterStamps {
        clocks: HashMap::from([
            ("dead".to_owned(), holder_clock.clone()),
            ("fresh".to_owned(), fresh_clock.clone()),
        ]),
        ..WriterStamps::default()
    };
    let store = Arc::new(Layered::new(stamps, MemoryStore::new()));
    let dead = LockClient::builder(store.clone())
        .owner("dead")
        .lease(LEASE)
        .clock(holder_clock)
        .build()
        .unwrap();
    let detached = dead
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    (store, fresh_clock, detached)
}

/// A holder whose wall clock is true writes and crashed; fresh processes whose
/// wall clocks are `ahead_ms` ahead of it (behind when negative), trusting
/// [`BOUND`], try once each: one tick before `after` (counted from the
/// holder's write) the lock is busy, at `after` it is taken over.
async fn wall_takeover_edge(ahead_ms: i64, after: Duration) {
    let (store, fresh_clock, detached) = stamped_crash(ahead_ms).await;
    let written = Instant::now();
    let attempt = || async {
        // A new process each time: nothing remembered from an earlier look.
        let fresh = LockClient::builder(store.clone())
            .owner("fresh")
            .lease(LEASE)
            .max_clock_drift(0.01)
            .max_clock_difference(BOUND)
            .clock(fresh_clock.clone())
            .build()
            .unwrap();
        fresh
            .try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
    };
    advance(after - TICK).await;
    assert!(
        attempt().await.is_none(),
        "ahead by {ahead_ms} ms: taken over one tick before {after:?}"
    );
    advance(TICK).await;
    let guard = attempt()
        .await
        .unwrap_or_else(|| panic!("ahead by {ahead_ms} ms: not taken over at {after:?}"));
    assert_eq!(written.elapsed(), after);
    assert_eq!(guard.took_over().unwrap().owner, "dead");
    assert!(guard.fence() > detached.fence());
}

/// The holder's safe time with the support client's timings: lease × 0.99 −
/// 0.5 s margin.
const HOLDER_SAFE: Duration = Duration::from_millis(9_400);

#[tokio::test(start_paused = true)]
async fn wall_clocks_within_the_bound_take_over_at_written_plus_lease_plus_bound_on_the_takers_clock()
 {
    // written + lease × (1 + drift) + bound on the fresh client's clock:
    // true time 10.1 s + 1 s − how far ahead it is.
    for (ahead_ms, after_ms) in [
        (-1_000, 12_100),
        (0, 11_100),
        (999, 10_101),
        (1_000, 10_100),
    ] {
        let after = Duration::from_millis(after_ms);
        wall_takeover_edge(ahead_ms, after).await;
        assert!(after >= TAKEOVER, "never before a watching waiter would");
    }
}

#[tokio::test(start_paused = true)]
async fn a_wall_clock_ahead_by_more_than_the_bound_takes_over_early_by_the_excess() {
    // Just over the bound: one tick before a watching waiter would.
    wall_takeover_edge(1_001, TAKEOVER - TICK).await;
    // Far over: while the holder may still trust its lease, the failure the
    // docs state (fences still refuse the old holder at the resource).
    let early = TAKEOVER - Duration::from_secs(1);
    wall_takeover_edge(2_000, early).await;
    assert!(early < HOLDER_SAFE);
}

#[tokio::test(start_paused = true)]
async fn without_a_declared_bound_wall_stamps_are_not_trusted() {
    let (store, _, _detached) = stamped_crash(0).await;
    advance(LEASE * 5).await;
    let fresh = LockClient::builder(store.clone())
        .owner("fresh")
        .lease(LEASE)
        .build()
        .unwrap();
    let got = fresh
        .try_acquire("job", AcquireOptions::new())
        .await
        .unwrap();
    assert!(got.is_none(), "a wall stamp alone proves nothing");
}

#[tokio::test]
async fn a_clock_bound_for_a_store_whose_records_carry_no_write_time_is_refused() {
    let error = LockClient::builder(MemoryStore::new())
        .max_clock_difference(BOUND)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            error,
            LockError::InvalidConfig(ConfigError::ClockDifferenceWithoutWriteTimes)
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("remove the setting"), "{error}");
}

// ---- Lock delay ----------------------------------------------------------------

const DELAY: Duration = Duration::from_secs(3);

fn delayed_client(store: &MemoryStore, owner: &str) -> LockClient {
    LockClient::builder(store.clone())
        .owner(owner)
        .lease(LEASE)
        .refresh_period(Duration::from_millis(500))
        .lock_delay(DELAY)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_lock_delay_leaves_a_silent_holders_lock_alone_that_much_longer() {
    // By the store's clock: a fresh process's attempt one tick before the
    // lease and the delay have passed is refused, at the edge it takes over.
    let store = clocked_store();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    advance(TAKEOVER + DELAY - TICK).await;
    let early = delayed_client(&store, "early");
    assert!(
        early
            .try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    advance(TICK).await;
    let on_time = delayed_client(&store, "on-time");
    let guard = on_time
        .try_acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .expect("taken over once the lease and the delay have passed");
    assert_eq!(guard.took_over().unwrap().owner, "dead");

    // By watching: a waiter takes over lease × (1 + drift) + delay after its
    // first sighting, within its default wait.
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let waiter = delayed_client(&store, "waiter");
    let started = Instant::now();
    let guard = timeout(PATIENCE, waiter.acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started.elapsed(), TAKEOVER + DELAY);
    assert_eq!(guard.took_over().unwrap().owner, "dead");
}

#[tokio::test(start_paused = true)]
async fn a_lock_delay_does_not_hold_back_a_released_lock_or_a_permit_past_it() {
    let store = clocked_store();
    let holder = delayed_client(&store, "holder");
    holder
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let next = delayed_client(&store, "next");
    assert!(
        next.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_some(),
        "a released lock is taken at once"
    );
    // A crashed holder's permit: left alone for the delay too.
    let dead = client(store.clone(), "dead");
    let _detached = dead
        .semaphore("exports", 1)
        .unwrap()
        .acquire(AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    advance(TAKEOVER + DELAY - TICK).await;
    let early = delayed_client(&store, "early");
    let none = early
        .semaphore("exports", 1)
        .unwrap()
        .try_acquire(AcquireOptions::new())
        .await
        .unwrap();
    assert!(none.is_none());
    advance(TICK).await;
    let late = delayed_client(&store, "late");
    let permit = late
        .semaphore("exports", 1)
        .unwrap()
        .try_acquire(AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(permit.unwrap().took_over().unwrap().owner, "dead");
}

#[tokio::test]
async fn a_lock_delay_longer_than_a_lease_may_be_is_refused() {
    let error = LockClient::builder(MemoryStore::new())
        .lock_delay(lock_core::MAX_LEASE + Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            error,
            LockError::InvalidConfig(ConfigError::LockDelayTooLong { .. })
        ),
        "{error:?}"
    );
}
