//! The first hour's rules: an acquire waits by default long enough to take over
//! a crashed holder, `try_acquire` takes options, hold-time limits
//! (`min_hold`, `max_hold`), and a program that returns without `shutdown()`;
//! over the in-memory store, in paused time where time matters.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::layer::{StoreCall, StoreLayer, StoreReply};
use lock_core::{
    AcquireOptions, ConditionalStore, ConfigError, Fence, LeaseState, LockClient, LockError,
    LockKey, LostReason, MAX_LEASE, StoreError,
};
use lock_memory::MemoryStore;
use support::{LEASE, client, dead_holder, wait, waiting};
use tokio::time::{Instant, sleep, timeout};

/// Long enough for anything in these tests to happen, short enough that a
/// regression fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(600);

/// [`client`]'s default wait: lease 10 s × 1.01 + refresh 0.5 s.
const DEFAULT_WAIT: Duration = Duration::from_millis(10_600);

fn record(store: &MemoryStore, key: &str) -> lock_core::LockRecord {
    store.record(&LockKey::new(key)).unwrap()
}

// ---- The default wait ------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn acquire_waits_by_default_long_enough_to_take_over_a_crashed_holder() {
    let store = MemoryStore::new();
    dead_holder(&store, "job", AcquireOptions::new()).await;
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let guard = timeout(PATIENCE, a.acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap();
    let waited = started.elapsed();
    // Takeover after 10 s × 1.01 unchanged, on the next poll.
    assert!(waited >= Duration::from_millis(10_100), "{waited:?}");
    assert!(waited <= DEFAULT_WAIT, "{waited:?}");
    assert_eq!(guard.fence(), Fence(2));
    assert_eq!(guard.took_over().unwrap().owner, "dead");
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_default_wait_gives_up_on_a_live_holder_after_lease_times_drift_plus_refresh() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    let started = Instant::now();
    let error = timeout(PATIENCE, a.acquire("job", AcquireOptions::new()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&error, LockError::AcquireTimeout { holder: Some(holder), .. } if holder == "b"),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), DEFAULT_WAIT);
    assert!(held.is_safe());
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_default_wait_follows_the_acquires_own_lease() {
    let store = MemoryStore::new();
    let long = Duration::from_secs(30);
    dead_holder(&store, "job", AcquireOptions::new().lease(long)).await;
    let a = client(store.clone(), "a");
    // With the client's 10 s lease the default budget is too short for a
    // holder that wrote 30 s...
    let started = Instant::now();
    let error = a.acquire("job", AcquireOptions::new()).await.unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), DEFAULT_WAIT);
    // ...and with the same lease as the holder's it waits long enough
    // (counting from this client's first sighting, 10.6 s ago).
    let guard = a
        .acquire("job", AcquireOptions::new().lease(long))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(30_300));
    assert!(started.elapsed() <= Duration::from_millis(30_300 + 500));
    assert_eq!(guard.lease(), long);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_queued_local_waiter_follows_the_default_wait() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let first = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // A second task of the same client waits in line instead of failing...
    let second = waiting(&a, "job", AcquireOptions::new());
    sleep(Duration::from_secs(3)).await;
    assert!(!second.is_finished());
    first.release().await.unwrap();
    let second = timeout(PATIENCE, second).await.unwrap().unwrap().unwrap();
    assert_eq!(second.fence(), Fence(2));
    // ...and gives up when the default budget runs out.
    let started = Instant::now();
    let error = a.acquire("job", AcquireOptions::new()).await.unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), DEFAULT_WAIT);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_zero_wait_makes_one_attempt() {
    let store = MemoryStore::new();
    let b = client(store.clone(), "b");
    let _held = b.acquire("job", AcquireOptions::new()).await.unwrap();
    let a = client(store.clone(), "a");
    let writes = store.writes();
    let started = Instant::now();
    let error = a.acquire("job", wait(Duration::ZERO)).await.unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(store.writes(), writes + 1, "one attempt, one write");
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn try_acquire_takes_options_and_refuses_a_wait() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let long = Duration::from_secs(30);
    let guard = a
        .try_acquire("job", AcquireOptions::new().lease(long).data("checkpoint"))
        .await
        .unwrap()
        .expect("vacant");
    assert_eq!(guard.lease(), long);
    assert_eq!(
        record(&store, "job").data.as_deref(),
        Some(&b"checkpoint"[..])
    );
    let b = client(store.clone(), "b");
    let started = Instant::now();
    assert!(
        b.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "one attempt");
    let writes = store.writes();
    let error = b
        .try_acquire("job", wait(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            LockError::InvalidConfig(ConfigError::WaitOnTryAcquire { .. })
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("call acquire to wait"),
        "{error}"
    );
    assert_eq!(store.writes(), writes, "nothing written");
    a.shutdown().await.unwrap();
}

// ---- min_hold ----------------------------------------------------------------

const HOLD: Duration = Duration::from_secs(60);

/// A 2 s job on `key` under a min hold of [`HOLD`], released by `client`:
/// when it was acquired.
async fn short_job(client: &LockClient, key: &str) -> Instant {
    let acquired = Instant::now();
    let guard = client
        .acquire(key, AcquireOptions::new().min_hold(HOLD))
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    guard.release().await.unwrap();
    acquired
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_within_its_min_hold_stays_held_by_one_final_write() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire("job", AcquireOptions::new().min_hold(HOLD))
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    let writes = store.writes();
    guard.release().await.unwrap();
    assert_eq!(store.writes(), writes + 1, "one final write");
    let held = record(&store, "job");
    assert!(!held.released, "still held");
    assert_eq!(held.owner, "a");
    assert_eq!(held.fence, Fence(1));
    // Its lease covers the rest of the min hold.
    assert_eq!(held.lease, HOLD - Duration::from_secs(2));
    assert!(held.rvn.final_until().is_some(), "{}", held.rvn);
    assert!(a.held_keys().is_empty());
    // No heartbeat follows.
    sleep(Duration::from_secs(100)).await;
    assert_eq!(store.writes(), writes + 1);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn busy_unless_dead_skips_a_final_record_until_the_min_hold_ends_then_takes_it() {
    let store = MemoryStore::new();
    // Host A's job takes 2 s.
    let a = client(store.clone(), "a");
    let acquired = short_job(&a, "nightly").await;
    a.shutdown().await.unwrap();
    let cron = AcquireOptions::new().busy_unless_dead(true);
    // Host B's timer fires 5 s late, after A's job ended: it skips at once
    // instead of watching the record for a dead holder.
    sleep(Duration::from_secs(3)).await;
    let b = client(store.clone(), "b");
    let started = Instant::now();
    assert!(
        b.try_acquire("nightly", cron.clone())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    // So does a host firing just before the min hold ends.
    sleep(HOLD - Duration::from_secs(1) - acquired.elapsed()).await;
    let c = client(store.clone(), "c");
    assert!(
        c.try_acquire("nightly", cron.clone())
            .await
            .unwrap()
            .is_none()
    );
    // After it, the next run (tomorrow's, or a host far behind) takes it at
    // once: a final record is not a dead holder to wait out.
    sleep(HOLD + Duration::from_secs(1) - acquired.elapsed()).await;
    let d = client(store.clone(), "d");
    let started = Instant::now();
    let next = d
        .try_acquire("nightly", cron)
        .await
        .unwrap()
        .expect("the min hold has ended");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(next.fence(), Fence(2));
    assert_eq!(next.took_over().unwrap().owner, "a");
    for client in [b, c, d] {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_acquire_takes_a_final_record_when_the_min_hold_ends() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let acquired = short_job(&a, "job").await;
    let b = client(store.clone(), "b");
    let next = timeout(PATIENCE, b.acquire("job", wait(Duration::from_secs(120))))
        .await
        .unwrap()
        .unwrap();
    let at = acquired.elapsed();
    assert!(at >= HOLD, "{at:?}");
    assert!(at <= HOLD + Duration::from_millis(500), "{at:?}");
    assert_eq!(next.fence(), Fence(2));
    // The default budget (10.6 s) is shorter than the rest of a min hold: it
    // times out naming the holder.
    next.release().await.unwrap();
    let guard = a
        .acquire("job", AcquireOptions::new().min_hold(HOLD))
        .await
        .unwrap();
    guard.release().await.unwrap();
    let error = b.acquire("job", AcquireOptions::new()).await.unwrap_err();
    assert!(
        matches!(&error, LockError::AcquireTimeout { holder: Some(holder), .. } if holder == "a"),
        "{error:?}"
    );
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_after_its_min_hold_is_released_as_usual() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let guard = a
        .acquire(
            "job",
            AcquireOptions::new().min_hold(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    sleep(Duration::from_secs(6)).await;
    guard.release().await.unwrap();
    let released = record(&store, "job");
    assert!(released.released);
    assert!(released.rvn.final_until().is_none());
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_way_out_of_a_lock_honours_its_min_hold() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let hold = AcquireOptions::new().min_hold(HOLD);
    // A dropped guard.
    drop(a.acquire("dropped", hold.clone()).await.unwrap());
    // with_lock's work ending early.
    a.with_lock("with-lock", hold.clone(), |_| async {})
        .await
        .unwrap();
    // release_with_data: the final write carries the data.
    let guard = a.acquire("with-data", hold.clone()).await.unwrap();
    guard.release_with_data("done").await.unwrap();
    // shutdown.
    let _held = a.acquire("shutdown", hold).await.unwrap();
    let report = a.shutdown().await.unwrap();
    assert!(report.released.contains(&LockKey::new("shutdown")));
    for key in ["dropped", "with-lock", "with-data", "shutdown"] {
        let record = record(&store, key);
        assert!(!record.released, "{key}");
        assert!(record.rvn.final_until().is_some(), "{key}");
    }
    assert_eq!(
        record(&store, "with-data").data.as_deref(),
        Some(&b"done"[..])
    );
}

#[tokio::test(start_paused = true)]
async fn a_min_hold_is_not_handed_to_a_task_of_the_same_client() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let acquired = Instant::now();
    let guard = a
        .acquire(
            "job",
            AcquireOptions::new().min_hold(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let next = waiting(&a, "job", wait(Duration::from_secs(60)));
    sleep(Duration::from_secs(1)).await;
    guard.release().await.unwrap();
    let next = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert!(acquired.elapsed() >= Duration::from_secs(30));
    assert_eq!(next.fence(), Fence(2));
    a.shutdown().await.unwrap();
}

// ---- max_hold ----------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn at_its_max_hold_a_lock_stops_heartbeating_and_is_reported_lost() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let limit = Duration::from_secs(7);
    let acquired = Instant::now();
    let guard = a
        .acquire("job", AcquireOptions::new().max_hold(limit))
        .await
        .unwrap();
    let reason = timeout(PATIENCE, guard.until_ended()).await.unwrap();
    assert_eq!(reason, LostReason::MaxHold { limit });
    assert_eq!(acquired.elapsed(), limit);
    assert_eq!(
        guard.state(),
        LeaseState::Lost {
            reason: LostReason::MaxHold { limit }
        }
    );
    // Heartbeats (every 2 s) stopped at the limit.
    let writes = store.writes();
    sleep(Duration::from_secs(30)).await;
    assert_eq!(store.writes(), writes);
    assert!(a.held_keys().is_empty());
    // Releasing the guard still releases the record.
    guard.release().await.unwrap();
    assert!(record(&store, "job").released);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_lock_cancels_its_work_at_the_max_hold() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let limit = Duration::from_secs(5);
    let started = Instant::now();
    let cancelled = Arc::new(Mutex::new(true));
    let flag = cancelled.clone();
    let error = timeout(
        PATIENCE,
        a.with_lock(
            "job",
            AcquireOptions::new().max_hold(limit),
            |_| async move {
                sleep(Duration::from_secs(60)).await;
                *flag.lock().unwrap() = false;
            },
        ),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(
        matches!(&error, LockError::Lost { reason: LostReason::MaxHold { limit: l }, .. } if *l == limit),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), limit);
    assert!(*cancelled.lock().unwrap());
    a.shutdown().await.unwrap();
    assert!(record(&store, "job").released);
}

#[tokio::test(start_paused = true)]
async fn hold_limits_are_checked_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let second = Duration::from_secs(1);
    let cases = [
        (
            AcquireOptions::new().max_hold(Duration::ZERO),
            "greater than zero",
        ),
        (
            AcquireOptions::new()
                .min_hold(10 * second)
                .max_hold(5 * second),
            "longer than max hold",
        ),
        (
            AcquireOptions::new().min_hold(MAX_LEASE + second),
            "longest allowed",
        ),
        (
            AcquireOptions::new().max_hold(MAX_LEASE + second),
            "longest allowed",
        ),
        (
            AcquireOptions::new()
                .min_hold(5 * second)
                .delete_on_release(true),
            "delete-on-release",
        ),
    ];
    for (options, says) in cases {
        let error = a.acquire("job", options).await.unwrap_err();
        assert!(matches!(error, LockError::InvalidConfig(_)), "{error:?}");
        assert!(error.to_string().contains(says), "{error}");
    }
    assert_eq!(store.writes(), 0, "nothing written");
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn hold_limits_at_their_exact_edges_are_accepted() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let second = Duration::from_secs(1);
    for (key, options) in [
        // A min hold equal to the max hold: the lock is held exactly that long.
        (
            "equal",
            AcquireOptions::new()
                .min_hold(5 * second)
                .max_hold(5 * second),
        ),
        // The longest allowed, for either limit.
        ("longest-min", AcquireOptions::new().min_hold(MAX_LEASE)),
        ("longest-max", AcquireOptions::new().max_hold(MAX_LEASE)),
    ] {
        let guard = a.acquire(key, options).await;
        assert!(guard.is_ok(), "{key}: {:?}", guard.err());
    }
    a.shutdown().await.unwrap();
}

// ---- Leaving main without shutdown() -------------------------------------------

/// Writes take `delay` before they reach the store, so a release that the
/// runtime drops before it has run never applies.
#[derive(Clone, Debug)]
struct SlowWrites {
    inner: MemoryStore,
    delay: Duration,
}

#[async_trait::async_trait]
impl StoreLayer for SlowWrites {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        if matches!(call, StoreCall::Put { .. } | StoreCall::Delete { .. }) {
            sleep(self.delay).await;
        }
        call.send(next).await
    }
}

lock_core::store_via_layer!(impl[] for SlowWrites, |this| (this, &this.inner as &dyn ConditionalStore));

/// What a `#[tokio::main]` program of this flavor leaves in the store when it
/// returns holding a guard, without calling `shutdown()`.
fn main_returning_with_a_guard_held(runtime: tokio::runtime::Runtime) -> lock_core::LockRecord {
    let store = MemoryStore::new();
    let slow = SlowWrites {
        inner: store.clone(),
        delay: Duration::from_millis(20),
    };
    runtime.block_on(async move {
        let client = LockClient::builder(slow)
            .owner("main")
            .lease(LEASE)
            .build()
            .unwrap();
        let guard = client
            .acquire("report", AcquireOptions::new())
            .await
            .unwrap();
        assert_eq!(guard.fence(), Fence(1));
        // `main` returns: the guard, then the client, are dropped.
    });
    drop(runtime);
    let reader = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    reader
        .block_on(store.get(&LockKey::new("report")))
        .unwrap()
        .unwrap()
}

#[test]
fn a_multi_threaded_main_that_returns_holding_a_guard_leaves_the_lock_released() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let record = main_returning_with_a_guard_held(runtime);
    assert!(record.released, "{record:?}");
}

/// Log lines, captured.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_current_thread_main_that_returns_holding_a_guard_warns_naming_the_lock() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let record = tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        main_returning_with_a_guard_held(runtime)
    });
    // Nothing can run the release on a current-thread runtime that is ending:
    // the lock stays held for its lease, and the log says which and why.
    assert!(!record.released, "{record:?}");
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("key=report"), "{log}");
    assert!(log.contains("call LockClient::shutdown"), "{log}");
}
