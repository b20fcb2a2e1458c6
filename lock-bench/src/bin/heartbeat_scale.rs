//! Heartbeat scale: one client holding thousands of locks on a memory store with
//! simulated latency (a `FaultyStore` that only delays, 3–8 ms per call).
//!
//! ```sh
//! cargo run -p lock-bench --release --bin heartbeat_scale            # 1,000 and 10,000 locks
//! cargo run -p lock-bench --release --bin heartbeat_scale -- 50000   # any counts
//! STORE=dynamodb cargo run -p lock-bench --release --bin heartbeat_scale  # through the AWS SDK
//! STORE=postgres LOCK_POSTGRES_URL=postgres://... cargo run -p lock-bench --release --bin heartbeat_scale
//! ```
//!
//! With `STORE=dynamodb` the locks are held through the real `DynamoDbStore`
//! (the AWS SDK's whole request path) against `lock_bench::canned`, a responder
//! in another process whose CPU is not counted, instead of the memory store.
//! With `STORE=postgres` they are held through `PostgresStore` on a fresh table
//! of the server at `LOCK_POSTGRES_URL` (the server's CPU is not counted).
//!
//! Each count runs in a fresh child process (so resident memory starts clean),
//! with the default timings (lease 20 s, heartbeat every 5 s; `LEASE_SECS`
//! changes the lease). Figures:
//!
//! * CPU: the process's time on a CPU (user + system, from
//!   `/proc/self/task/*/schedstat`) over two full heartbeat periods, while
//!   the program does nothing but hold the locks. It includes the in-process
//!   store, the latency simulation and the recorder, so it is an upper bound for
//!   the heartbeat task itself.
//! * Lateness: each heartbeat is due one period after the previous one of its
//!   lock was sent (that is the client's schedule); the recorder, which sees each
//!   call as it is sent, takes `sent − due` from every lock's second heartbeat on.
//! * Memory: resident set growth from before the first acquire to the end,
//!   divided by the number of locks; a second child that only writes the same
//!   records into a bare memory store gives the store's share.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_bench::{BenchError, CallKind, Histogram};
use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreReply};
use lock_core::{
    AcquireOptions, ConditionalStore, Expect, FenceUpdate, LockClient, LockGuard, LockKey,
    NewRecord, Rvn, StoreError,
};
use lock_memory::{FaultConfig, FaultyStore, MemoryStore};
use tokio::time::Instant;

const LATENCY: (Duration, Duration) = (Duration::from_millis(3), Duration::from_millis(8));
const CONCURRENT_ACQUIRES: usize = 64;
const KEY_PREFIX: &str = "heartbeat-scale-lock-";
const OWNER: &str = "bench-host-0123abcd";

/// Sees every call as it is sent; records heartbeat lateness per lock.
#[derive(Debug)]
struct Recorder {
    start: Instant,
    period: Duration,
    /// Per lock: when its last write was sent (ns since `start`, 0 = never).
    last: Vec<AtomicU64>,
    /// Per lock: whether that write was a heartbeat.
    last_was_beat: Vec<AtomicBool>,
    lateness: Histogram,
    beats: AtomicU64,
    rejected: AtomicU64,
}

impl Recorder {
    fn index(&self, key: &LockKey) -> Option<usize> {
        key.partition().strip_prefix(KEY_PREFIX)?.parse().ok()
    }

    fn saw(&self, key: &LockKey, kind: CallKind) {
        let Some(i) = self.index(key) else { return };
        let (Some(last), Some(was_beat)) = (self.last.get(i), self.last_was_beat.get(i)) else {
            return;
        };
        let now = self.start.elapsed().as_nanos() as u64;
        let beat = kind == CallKind::Heartbeat;
        if beat {
            self.beats.fetch_add(1, Ordering::Relaxed);
            let previous = last.load(Ordering::Relaxed);
            if previous > 0 && was_beat.load(Ordering::Relaxed) {
                let due = previous + self.period.as_nanos() as u64;
                match now.checked_sub(due) {
                    Some(late) => self.lateness.record(Duration::from_nanos(late)),
                    None => self.lateness.record_early(),
                }
            }
        }
        last.store(now, Ordering::Relaxed);
        was_beat.store(beat, Ordering::Relaxed);
    }
}

#[async_trait]
impl StoreLayer for Recorder {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let StoreCall::Put { key, expect, new } = &call else {
            return call.send(next).await;
        };
        self.saw(key, CallKind::of_put(expect, new));
        let result = call.send(next).await;
        if matches!(&result, Ok(reply) if reply.is_rejected()) {
            self.rejected.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

fn key(i: usize) -> LockKey {
    LockKey::new(format!("{KEY_PREFIX}{i:06}"))
}

fn lease() -> Duration {
    let secs = std::env::var("LEASE_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(20.0);
    Duration::from_secs_f64(secs)
}

/// A memory store without a history: the calls it would record are not the
/// client's memory or CPU, which is what this benchmark measures.
fn bare_store() -> MemoryStore {
    MemoryStore::builder().history_capacity(0).build()
}

/// Where the locks are held: `STORE=dynamodb` (the AWS SDK against the canned
/// responder in another process), `STORE=postgres` (a PostgreSQL server at
/// `LOCK_POSTGRES_URL`), or the memory store with simulated latency (the
/// default).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Memory,
    DynamoDb,
    Postgres,
}

fn backend() -> Backend {
    match std::env::var("STORE").as_deref() {
        Ok("dynamodb") => Backend::DynamoDb,
        Ok("postgres") => Backend::Postgres,
        _ => Backend::Memory,
    }
}

async fn run(locks: usize) -> Result<serde_json::Value, BenchError> {
    match backend() {
        Backend::DynamoDb => {
            let responder = lock_bench::canned::spawn_child("--serve-canned")?;
            let store = lock_bench::canned::store(&responder.endpoint)?;
            run_on(locks, store).await
        }
        Backend::Postgres => {
            let url = lock_bench::postgres_url().ok_or("STORE=postgres needs LOCK_POSTGRES_URL")?;
            let table = lock_bench::unique_table("beats").replace('-', "_");
            let store = lock_bench::fresh_postgres_store(&url, &table).await?;
            run_on(locks, store).await
        }
        Backend::Memory => {
            // Neither the store's history nor the injector's record of events is kept.
            let faulty = FaultyStore::new(bare_store(), 7)
                .with_history_capacity(0)
                .with_faults(FaultConfig::NONE.with_delay(LATENCY.0, LATENCY.1));
            run_on(locks, faulty).await
        }
    }
}

async fn run_on<S: ConditionalStore>(
    locks: usize,
    store: S,
) -> Result<serde_json::Value, BenchError> {
    let lease = lease();
    let period = lease / 4;
    let recorder = Arc::new(Layered::new(
        Recorder {
            start: Instant::now(),
            period,
            last: (0..locks).map(|_| AtomicU64::new(0)).collect(),
            last_was_beat: (0..locks).map(|_| AtomicBool::new(false)).collect(),
            lateness: Histogram::new(Duration::from_micros(100), 200_000),
            beats: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        },
        store,
    ));
    let client = LockClient::builder_shared(recorder.clone())
        .owner(OWNER)
        .lease(lease)
        .heartbeat_period(period)
        .build()?;
    // Warm the runtime, the client and the allocator up with one batch of
    // acquisitions of other keys, released again, so that the transient memory
    // of a batch (tasks, timers) is already in the allocator's pool.
    let mut warm = tokio::task::JoinSet::new();
    for i in 0..CONCURRENT_ACQUIRES.min(locks) {
        let client = client.clone();
        warm.spawn(async move {
            let guard = client
                .acquire(format!("warm-up-{i}"), AcquireOptions::new())
                .await?;
            guard.release().await
        });
    }
    while let Some(joined) = warm.join_next().await {
        joined??;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let rss_before = lock_bench::resident_bytes()?;
    let acquire_start = Instant::now();
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks);
    let mut next = 0;
    while next < locks {
        let end = (next + CONCURRENT_ACQUIRES).min(locks);
        let mut batch = tokio::task::JoinSet::new();
        for i in next..end {
            let client = client.clone();
            batch.spawn(async move { client.acquire(key(i), AcquireOptions::new()).await });
        }
        while let Some(joined) = batch.join_next().await {
            guards.push(joined??);
        }
        next = end;
    }
    let acquire_end = Instant::now();
    let rss_acquired = lock_bench::resident_bytes()?;

    // The first heartbeats fall in the last quarter of the first period; measure
    // CPU over the two periods after every lock's first heartbeat.
    tokio::time::sleep_until(acquire_end + period).await;
    let beats_before = recorder.layer().beats.load(Ordering::Relaxed);
    let cpu_before = lock_bench::threads_cpu()?;
    let window_start = Instant::now();
    tokio::time::sleep(period * 2).await;
    let window = window_start.elapsed();
    let cpu = lock_bench::threads_cpu()? - cpu_before;
    let beats_in_window = recorder.layer().beats.load(Ordering::Relaxed) - beats_before;
    // Let the third round finish, so every lock contributes two lateness samples.
    tokio::time::sleep(period / 4).await;
    let rss_end = lock_bench::resident_bytes()?;
    let lost = guards.iter().filter(|guard| !guard.is_safe()).count();

    let h = &recorder.layer().lateness;
    let core_fraction = cpu.as_secs_f64() / window.as_secs_f64();
    let per_lock = |rss: u64| rss.saturating_sub(rss_before) as f64 / locks as f64;
    drop(guards);
    Ok(serde_json::json!({
        "locks": locks,
        "lease_s": lease.as_secs_f64(),
        "period_s": period.as_secs_f64(),
        "latency_ms": [LATENCY.0.as_secs_f64() * 1e3, LATENCY.1.as_secs_f64() * 1e3],
        "acquire_s": (acquire_end - acquire_start).as_secs_f64(),
        "window_s": window.as_secs_f64(),
        "beats_in_window": beats_in_window,
        "cpu_s": cpu.as_secs_f64(),
        "core_fraction": core_fraction,
        "cpu_us_per_beat": cpu.as_secs_f64() * 1e6 / beats_in_window.max(1) as f64,
        "lateness_samples": h.count(),
        "early_samples": h.early(),
        "lateness_p50_ms": h.quantile(0.5).as_secs_f64() * 1e3,
        "lateness_p99_ms": h.quantile(0.99).as_secs_f64() * 1e3,
        "lateness_max_ms": h.max().as_secs_f64() * 1e3,
        "rejected": recorder.layer().rejected.load(Ordering::Relaxed),
        "lost": lost,
        "rss_per_lock_acquired_b": per_lock(rss_acquired),
        "rss_per_lock_b": per_lock(rss_end),
    }))
}

/// The store's share of the memory: the same records written straight into a
/// bare memory store.
async fn store_only(locks: usize) -> Result<serde_json::Value, BenchError> {
    let memory = bare_store();
    let rss_before = lock_bench::resident_bytes()?;
    for i in 0..locks {
        let new = NewRecord {
            owner: OWNER.into(),
            rvn: Rvn::fresh(),
            lease: lease(),
            released: false,
            fence: FenceUpdate::Next,
            data: lock_core::DataUpdate::Keep,
            expires_at: None,
        };
        memory.put(&key(i), Expect::Vacant, new).await?;
    }
    let rss = lock_bench::resident_bytes()?;
    Ok(serde_json::json!({
        "locks": locks,
        "store_rss_per_lock_b": rss.saturating_sub(rss_before) as f64 / locks as f64,
    }))
}

fn child(mode: &str, locks: usize) -> Result<serde_json::Value, BenchError> {
    let output = std::process::Command::new(std::env::current_exe()?)
        .args([mode, &locks.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("{mode} {locks} failed: {}", output.status).into());
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn number(value: &serde_json::Value, field: &str) -> f64 {
    value[field].as_f64().unwrap_or(f64::NAN)
}

fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve-canned") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        return runtime.block_on(lock_bench::canned::serve_child());
    }
    if let [mode, locks] = args.as_slice()
        && (mode == "--child" || mode == "--store-only")
    {
        let locks: usize = locks.parse()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let result = runtime.block_on(async {
            if mode == "--child" {
                run(locks).await
            } else {
                store_only(locks).await
            }
        })?;
        println!("{result}");
        return Ok(());
    }
    let counts: Vec<usize> = if args.is_empty() {
        vec![1_000, 10_000]
    } else {
        args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?
    };
    // Through a real client library every heartbeat is a request on the wire:
    // the goal there is a quarter of a core (0.1 ms of CPU per request at
    // 2,000/s).
    let core_goal = if backend() == Backend::Memory {
        0.1
    } else {
        0.25
    };
    let store = match backend() {
        Backend::DynamoDb => {
            "DynamoDB store (AWS SDK) against the canned responder in another process".to_owned()
        }
        Backend::Postgres => "PostgreSQL store (tokio-postgres) against a local server".to_owned(),
        Backend::Memory => format!(
            "memory store with {}–{} ms latency per call",
            LATENCY.0.as_millis(),
            LATENCY.1.as_millis()
        ),
    };
    println!(
        "Heartbeat scale: one client, current-thread runtime, {store}, lease {:?} ({})",
        lease(),
        lock_bench::machine()
    );
    println!();
    println!(
        "| locks | heartbeats/s | CPU, % of a core | CPU per heartbeat | lateness p50 | p99 | max | p99 / period | memory per lock (client + store) | store's share | lost | goal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for locks in counts {
        let r = child("--child", locks)?;
        // Through a server the records live there, not here.
        let s = if backend() != Backend::Memory {
            serde_json::json!({ "store_rss_per_lock_b": 0.0 })
        } else {
            child("--store-only", locks)?
        };
        let period_ms = number(&r, "period_s") * 1e3;
        let p99 = number(&r, "lateness_p99_ms");
        let core = number(&r, "core_fraction");
        let per_lock = number(&r, "rss_per_lock_b");
        let store = number(&s, "store_rss_per_lock_b");
        let met = p99 < period_ms * 0.1
            && core < core_goal
            && per_lock < 2048.0
            && number(&r, "lost") == 0.0;
        println!(
            "| {locks} | {:.0} | {:.1} % | {:.1} µs | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} % | {:.0} B | {:.0} B | {} | {} |",
            number(&r, "beats_in_window") / number(&r, "window_s"),
            core * 100.0,
            number(&r, "cpu_us_per_beat"),
            number(&r, "lateness_p50_ms"),
            p99,
            number(&r, "lateness_max_ms"),
            p99 / period_ms * 100.0,
            per_lock,
            store,
            r["lost"],
            if met { "met" } else { "MISSED" },
        );
        eprintln!("raw: {r}\nraw: {s}");
    }
    println!();
    println!(
        "Goal: p99 lateness under 10 % of the period, under {:.0} % of a core, under 2 KiB per lock, none lost.",
        core_goal * 100.0
    );
    Ok(())
}
