//! Heartbeats under throttling: one client holding 10,000 locks at the default
//! timings (lease 20 s, a heartbeat every 5 s, safe for 17.8 s) on the in-memory
//! store with a write-capacity limit (a token bucket refilled at a fraction of the
//! heartbeat demand of 2,000 writes a second, bursts of one second's worth), for
//! 10 leases of simulated time.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin throttled_heartbeats            # 1.1, 0.5, 0.2
//! cargo run -p lock-bench --release --bin throttled_heartbeats -- 0.3 0.1 # any fractions
//! ```
//!
//! Time is tokio's paused clock: the figures are the client's scheduling
//! decisions, exact and repeatable, not the machine's speed (CPU is reported
//! apart). For each capacity: locks lost and the floor the capacity forces
//! (capacity × the time between the first heartbeats and the end of the first
//! lease, plus the burst), locks that fell in danger, any lost without being
//! reported in danger first (must be none), requests the store refused, and the
//! time between renewals of a lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_bench::BenchError;
use lock_core::{AcquireOptions, LeaseState, LockClient, LockKey, LostReason};
use lock_memory::{Fault, FaultyStore, MemoryStore, Op, WriteCapacity};
use tokio::time::Instant;

const LOCKS: usize = 10_000;
const PERIOD: Duration = Duration::from_secs(5);
const LEASE: Duration = Duration::from_secs(20);
const LEASES: u32 = 10;

struct Figures {
    capacity: f64,
    lost: usize,
    forced: usize,
    in_danger: usize,
    lost_unannounced: usize,
    applied: usize,
    throttled: usize,
    /// Seconds between two applied writes of one lock.
    gaps: Vec<f64>,
    cpu: Duration,
}

async fn run(capacity: f64) -> Result<Figures, BenchError> {
    let store = MemoryStore::builder().history_capacity(0).build();
    let faulty = FaultyStore::new(store, 1).with_history_capacity(8_000_000);
    let client = LockClient::builder(faulty.clone()).owner("bench").build()?;
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(
            client
                .acquire(format!("lock-{i}"), AcquireOptions::new())
                .await?,
        );
    }
    let per_second = capacity * LOCKS as f64 / PERIOD.as_secs_f64();
    faulty.clear_faults();
    faulty.set_write_capacity(Some(WriteCapacity::new(per_second, per_second)));
    let start = Instant::now();
    let unsafe_at = Arc::new(Mutex::new(HashMap::<usize, LostReason>::new()));
    for (i, guard) in guards.iter().enumerate() {
        let until = guard.until_unsafe();
        let unsafe_at = unsafe_at.clone();
        tokio::spawn(async move {
            let reason = until.await;
            if let Ok(mut seen) = unsafe_at.lock() {
                seen.insert(i, reason);
            }
        });
    }
    let cpu_before = lock_bench::threads_cpu()?;
    tokio::time::sleep(LEASE * LEASES).await;
    let cpu = lock_bench::threads_cpu()? - cpu_before;
    let lost = guards
        .iter()
        .filter(|guard| matches!(guard.state(), LeaseState::Lost { .. }))
        .count();
    let index: HashMap<LockKey, usize> = (0..LOCKS)
        .map(|i| (LockKey::new(format!("lock-{i}")), i))
        .collect();
    let mut last: Vec<Instant> = vec![start; LOCKS];
    let mut gaps = Vec::new();
    let (mut applied, mut throttled) = (0, 0);
    for event in faulty.faults() {
        let Some(&lock) = event.key.as_ref().and_then(|key| index.get(key)) else {
            continue;
        };
        if event.op != Op::Put {
            continue;
        }
        match event.fault {
            Fault::Pass => {
                applied += 1;
                gaps.push((event.at - last[lock]).as_secs_f64());
                last[lock] = event.at;
            }
            Fault::Throttled => throttled += 1,
            _ => {}
        }
    }
    let seen = unsafe_at
        .lock()
        .map(|seen| seen.clone())
        .unwrap_or_default();
    let in_danger = seen
        .values()
        .filter(|reason| **reason == LostReason::InDanger)
        .count();
    let lost_unannounced = seen.len() - in_danger;
    // The first heartbeats come 3.75–5 s after the acquisitions, the first
    // lease ends at 20 s: at most burst + rate × 16.25 s of heartbeats between.
    let reachable = per_second + per_second * (LEASE - PERIOD * 3 / 4).as_secs_f64();
    let forced = LOCKS.saturating_sub(reachable as usize);
    drop(guards);
    client.shutdown().await.ok();
    Ok(Figures {
        capacity,
        lost,
        forced,
        in_danger,
        lost_unannounced,
        applied,
        throttled,
        gaps,
        cpu,
    })
}

fn main() -> Result<(), BenchError> {
    let capacities: Vec<f64> = match std::env::args().skip(1).collect::<Vec<_>>() {
        args if args.is_empty() => vec![1.1, 0.5, 0.2],
        args => args
            .iter()
            .map(|arg| arg.parse::<f64>())
            .collect::<Result<_, _>>()?,
    };
    println!(
        "Heartbeats under throttling: {LOCKS} locks, lease 20 s, heartbeat every 5 s (demand {} writes/s), {LEASES} leases of paused time; {}",
        LOCKS / 5,
        lock_bench::machine()
    );
    println!();
    println!(
        "| capacity | lost | forced by the capacity | fell in danger | lost unannounced | renewals | refused requests | renewal gap p50 / p99 / max | CPU |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for capacity in capacities {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()?;
        let mut f = runtime.block_on(run(capacity))?;
        let requests = f.applied + f.throttled;
        println!(
            "| {:.0} % | {} | {} | {} | {} | {} | {} ({:.1} %) | {:.1} / {:.1} / {:.1} s | {:.2} s |",
            f.capacity * 100.0,
            f.lost,
            f.forced,
            f.in_danger,
            f.lost_unannounced,
            f.applied,
            f.throttled,
            100.0 * f.throttled as f64 / requests.max(1) as f64,
            lock_bench::quantile(&mut f.gaps, 0.5),
            lock_bench::quantile(&mut f.gaps, 0.99),
            lock_bench::quantile(&mut f.gaps, 1.0),
            f.cpu.as_secs_f64(),
        );
    }
    Ok(())
}
