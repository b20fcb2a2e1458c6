//! This client's half of `./scripts/bench-vs-python`: the same scenarios as
//! `lock-bench/python/bench.py` runs with python-dynamodb-lock, against the same
//! DynamoDB endpoint (`LOCK_DYNAMODB_ENDPOINT`; credentials and region from the
//! environment). Prints one JSON object.
//!
//! ```text
//! side_by_side uncontended SECONDS [native|python]
//!     acquire + release of one key, over and over, for SECONDS
//! side_by_side contended SECONDS WORKERS SECTION_MS [POLL_MS]
//!     WORKERS clients (one SDK client each) hand one key to each other: each
//!     holds it for a critical section of SECTION_MS, releases it, and waits until
//!     another worker has held it before it asks again, so every acquisition is
//!     a hand-off to a client that was already waiting. POLL_MS sets the
//!     waiters' poll period (default: the client's own, 1 s).
//! ```
//!
//! Client CPU is this process's time on a CPU (user + system) during the
//! measured loop, from `/proc/self/task/*/schedstat`; everything runs on one
//! thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lock_bench::BenchError;
use lock_core::{AcquireOptions, LockClient, LockError};
use lock_dynamodb::{DynamoDbStore, Layout};

const KEY: &str = "bench-key";

async fn store(endpoint: &str, layout: Layout) -> Result<DynamoDbStore, BenchError> {
    let table = lock_bench::unique_table(&format!("bench-rust-{}", layout.preset_name()));
    lock_bench::fresh_dynamodb_store(endpoint, &table, layout, None).await
}

async fn uncontended(
    endpoint: &str,
    seconds: f64,
    layout: Layout,
) -> Result<serde_json::Value, BenchError> {
    let layout_name = layout.preset_name();
    let store = store(endpoint, layout).await?;
    let client = LockClient::builder(store.clone())
        .owner("rust-bench")
        .build()?;
    // Warm up: connection, first request.
    for _ in 0..5 {
        client
            .acquire(KEY, AcquireOptions::new())
            .await?
            .release()
            .await?;
    }
    let cpu_before = lock_bench::threads_cpu()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut cycles: u64 = 0;
    let (mut acquires, mut releases) = (Vec::new(), Vec::new());
    while Instant::now() < deadline {
        let started = Instant::now();
        let guard = client.acquire(KEY, AcquireOptions::new()).await?;
        let acquired = Instant::now();
        guard.release().await?;
        acquires.push((acquired - started).as_secs_f64() * 1e3);
        releases.push(acquired.elapsed().as_secs_f64() * 1e3);
        cycles += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = (lock_bench::threads_cpu()? - cpu_before).as_secs_f64();
    client.shutdown().await?;
    store.delete_table(Duration::from_secs(10)).await?;
    Ok(serde_json::json!({
        "library": "lease-lock (Rust)",
        "scenario": "uncontended",
        "layout": layout_name,
        "cycles": cycles,
        "seconds": elapsed,
        "per_second": cycles as f64 / elapsed,
        "cpu_s": cpu,
        "cpu_ms_per_op": cpu * 1e3 / cycles.max(1) as f64,
        "acquire_p50_ms": lock_bench::quantile(&mut acquires, 0.5),
        "acquire_p99_ms": lock_bench::quantile(&mut acquires, 0.99),
        "release_p50_ms": lock_bench::quantile(&mut releases, 0.5),
        "release_p99_ms": lock_bench::quantile(&mut releases, 0.99),
        "added_rtt_ms": added_rtt_ms(),
    }))
}

/// The round-trip time `./scripts/bench-vs-python --distance` added in front of
/// the endpoint (a label for the report; the proxy adds it).
fn added_rtt_ms() -> Option<f64> {
    std::env::var("BENCH_ADDED_RTT_MS").ok()?.parse().ok()
}

#[derive(Debug, Default)]
struct Shared {
    /// Worker (1-based) that held the key last; 0 before the first.
    last_holder: AtomicU64,
    changed: tokio::sync::Notify,
    in_section: AtomicBool,
    violations: AtomicU64,
    sections: AtomicU64,
    /// When the last holder began to release (ns since start; 0 = none).
    release_started: AtomicU64,
    handoffs: std::sync::Mutex<Vec<f64>>,
}

async fn worker(
    id: u64,
    client: LockClient,
    shared: Arc<Shared>,
    start: Instant,
    deadline: Instant,
    section: Duration,
    poll: Option<Duration>,
) -> Result<(), BenchError> {
    let mut first = true;
    loop {
        // Wait until another worker has held the key since we released it.
        while !first && shared.last_holder.load(Ordering::Acquire) == id {
            let notified = shared.changed.notified();
            if shared.last_holder.load(Ordering::Acquire) != id {
                break;
            }
            if tokio::time::timeout_at(deadline.into(), notified)
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        first = false;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        let mut options = AcquireOptions::new().wait(deadline - now);
        if let Some(poll) = poll {
            options = options.refresh_period(poll);
        }
        let guard = match client.acquire(KEY, options).await {
            Ok(guard) => guard,
            Err(LockError::AcquireTimeout { .. }) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        // The critical section.
        if shared.in_section.swap(true, Ordering::AcqRel) {
            shared.violations.fetch_add(1, Ordering::Relaxed);
        }
        let acquired = start.elapsed().as_nanos() as u64;
        let released = shared.release_started.load(Ordering::Acquire);
        if released > 0 && acquired > released && Instant::now() < deadline {
            let mut handoffs = shared
                .handoffs
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            handoffs.push((acquired - released) as f64 / 1e6);
        }
        shared.last_holder.store(id, Ordering::Release);
        shared.changed.notify_waiters();
        tokio::time::sleep(section).await;
        if Instant::now() < deadline {
            shared.sections.fetch_add(1, Ordering::Relaxed);
        }
        shared.in_section.store(false, Ordering::Release);
        shared
            .release_started
            .store(start.elapsed().as_nanos() as u64, Ordering::Release);
        guard.release().await?;
    }
}

async fn contended(
    endpoint: &str,
    seconds: f64,
    workers: u64,
    section: Duration,
    poll: Option<Duration>,
) -> Result<serde_json::Value, BenchError> {
    let first = store(endpoint, Layout::native()).await?;
    let mut clients = Vec::new();
    for id in 1..=workers {
        // One SDK client per worker, as separate processes would have.
        let store = DynamoDbStore::builder(first.table())
            .endpoint_url(endpoint)
            .build_from_env()
            .await?;
        let client = LockClient::builder(store)
            .owner(format!("rust-worker-{id}"))
            .build()?;
        client
            .acquire(KEY, AcquireOptions::new())
            .await?
            .release()
            .await?;
        clients.push(client);
    }
    let shared = Arc::new(Shared::default());
    let cpu_before = lock_bench::threads_cpu()?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for (id, client) in (1..).zip(clients.iter().cloned()) {
        tasks.spawn(worker(
            id,
            client,
            shared.clone(),
            start,
            deadline,
            section,
            poll,
        ));
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    let elapsed = seconds;
    let cpu = (lock_bench::threads_cpu()? - cpu_before).as_secs_f64();
    for client in &clients {
        client.shutdown().await?;
    }
    first.delete_table(Duration::from_secs(10)).await?;
    let sections = shared.sections.load(Ordering::Relaxed);
    let mut handoffs = shared
        .handoffs
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    let mean = handoffs.iter().sum::<f64>() / handoffs.len().max(1) as f64;
    Ok(serde_json::json!({
        "library": "lease-lock (Rust)",
        "scenario": "contended",
        "workers": workers,
        "poll_ms": poll.map(|p| p.as_secs_f64() * 1e3),
        "section_ms": section.as_secs_f64() * 1e3,
        "sections": sections,
        "seconds": elapsed,
        "per_second": sections as f64 / elapsed,
        "handoffs": handoffs.len(),
        "handoff_mean_ms": mean,
        "handoff_median_ms": lock_bench::median(&mut handoffs),
        "violations": shared.violations.load(Ordering::Relaxed),
        "cpu_s": cpu,
        "cpu_ms_per_op": cpu * 1e3 / sections.max(1) as f64,
    }))
}

fn usage() -> BenchError {
    "usage: side_by_side uncontended SECONDS [native|python] | contended SECONDS WORKERS SECTION_MS [POLL_MS]"
        .into()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BenchError> {
    let endpoint = lock_bench::dynamodb_endpoint()
        .ok_or("LOCK_DYNAMODB_ENDPOINT is not set (./scripts/bench-vs-python sets it)")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.get(1).ok_or_else(usage)?.parse()?;
    let result = match args[0].as_str() {
        "uncontended" => {
            let layout = match args.get(2).map(String::as_str) {
                None | Some("native") => Layout::native(),
                Some("python") => Layout::python_dynamodb_lock(),
                Some(_) => return Err(usage()),
            };
            uncontended(&endpoint, seconds, layout).await?
        }
        "contended" => {
            let workers: u64 = args.get(2).ok_or_else(usage)?.parse()?;
            let section: f64 = args.get(3).ok_or_else(usage)?.parse()?;
            let section = Duration::from_secs_f64(section / 1e3);
            let poll = match args.get(4) {
                Some(ms) => Some(Duration::from_secs_f64(ms.parse::<f64>()? / 1e3)),
                None => None,
            };
            contended(&endpoint, seconds, workers, section, poll).await?
        }
        _ => return Err(usage()),
    };
    println!("{result}");
    Ok(())
}
