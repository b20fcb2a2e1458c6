//! Core overhead: one acquire + release cycle through `LockClient` on the memory
//! store, against the raw store calls that cycle makes (a vacant put with a fresh
//! RVN and the next fence, then a released put on that RVN keeping the fence).
//!
//! Run with `cargo bench -p lock-bench --bench core_overhead`. Criterion measures
//! both; then both are measured again in interleaved batches (client, raw,
//! client, raw, ...) and the ratio of the medians is printed, so machine noise
//! hits both sides alike.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use lock_core::{
    AcquireOptions, ConditionalStore, Expect, FenceUpdate, LockClient, LockKey, NewRecord, Outcome,
    Rvn,
};
use lock_memory::MemoryStore;
use tokio::runtime::Runtime;

/// Let other tasks (the client's heartbeat task) run this often, on both sides.
const YIELD_EVERY: u64 = 64;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

struct Client {
    client: LockClient,
    key: LockKey,
}

/// A memory store without a history: recording every call (copying its
/// arguments and result) is not what either side of this benchmark measures.
fn store() -> MemoryStore {
    MemoryStore::builder().history_capacity(0).build()
}

impl Client {
    fn new() -> Self {
        Self::with_lease(Duration::from_secs(20))
    }

    fn with_lease(lease: Duration) -> Self {
        let client = LockClient::builder(store())
            .owner("bench-owner")
            .lease(lease)
            .build()
            .unwrap();
        Self {
            client,
            key: LockKey::new("bench-key"),
        }
    }

    async fn cycles(&self, n: u64) -> Duration {
        let start = Instant::now();
        for i in 0..n {
            let guard = self
                .client
                .acquire(self.key.clone(), AcquireOptions::new())
                .await
                .unwrap();
            black_box(guard.fence());
            guard.release().await.unwrap();
            yield_sometimes(i).await;
        }
        start.elapsed()
    }
}

struct Raw {
    store: MemoryStore,
    owner: String,
    lease: Duration,
    key: LockKey,
}

impl Raw {
    fn new() -> Self {
        Self {
            store: store(),
            owner: "bench-owner".into(),
            lease: Duration::from_secs(20),
            key: LockKey::new("bench-key"),
        }
    }

    fn record(&self, rvn: Rvn, released: bool, fence: FenceUpdate) -> NewRecord {
        NewRecord {
            owner: self.owner.clone(),
            rvn,
            lease: self.lease,
            released,
            fence,
            data: lock_core::DataUpdate::Keep,
            expires_at: None,
        }
    }

    async fn cycles(&self, n: u64) -> Duration {
        let start = Instant::now();
        for i in 0..n {
            let rvn = Rvn::fresh();
            let acquired = self
                .store
                .put(
                    &self.key,
                    Expect::Vacant,
                    self.record(rvn.clone(), false, FenceUpdate::Next),
                )
                .await
                .unwrap();
            let Outcome::Applied(record) = acquired else {
                panic!("the key is vacant")
            };
            black_box(record.fence);
            let released = self
                .store
                .put(
                    &self.key,
                    Expect::Version(rvn),
                    self.record(Rvn::fresh(), true, FenceUpdate::Keep),
                )
                .await
                .unwrap();
            assert!(matches!(released, Outcome::Applied(_)));
            yield_sometimes(i).await;
        }
        start.elapsed()
    }
}

async fn yield_sometimes(i: u64) {
    if i % YIELD_EVERY == YIELD_EVERY - 1 {
        tokio::task::yield_now().await;
    }
}

fn criterion_benches(c: &mut Criterion, rt: &Runtime) {
    let client = rt.block_on(async { Client::new() });
    let raw = Raw::new();
    let mut group = c.benchmark_group("acquire_release_cycle");
    group.bench_function("lock_client", |b| {
        b.iter_custom(|iters| rt.block_on(client.cycles(iters)))
    });
    group.bench_function("raw_store_calls", |b| {
        b.iter_custom(|iters| rt.block_on(raw.cycles(iters)))
    });
    group.finish();
}

/// Interleaved batches (client, raw, client with a short lease), ratio of
/// medians.
fn side_by_side(rt: &Runtime) {
    const BATCH: u64 = 20_000;
    const ROUNDS: usize = 15;
    let rss_start = lock_bench::resident_bytes().unwrap_or(0);
    let client = rt.block_on(async { Client::new() });
    // A released lock stays in the heartbeat schedule until its first heartbeat
    // would have been due (lease / 4); with a 1 s lease that schedule stays short.
    let short = rt.block_on(async { Client::with_lease(Duration::from_secs(1)) });
    let raw = Raw::new();
    // Warm up all three.
    rt.block_on(client.cycles(BATCH));
    rt.block_on(short.cycles(BATCH));
    rt.block_on(raw.cycles(BATCH));
    let (mut client_ns, mut raw_ns, mut short_ns) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ratios, mut short_ratios) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let c = rt.block_on(client.cycles(BATCH)).as_nanos() as f64 / BATCH as f64;
        let r = rt.block_on(raw.cycles(BATCH)).as_nanos() as f64 / BATCH as f64;
        let s = rt.block_on(short.cycles(BATCH)).as_nanos() as f64 / BATCH as f64;
        client_ns.push(c);
        raw_ns.push(r);
        short_ns.push(s);
        ratios.push(c / r);
        short_ratios.push(s / r);
    }
    let rss_end = lock_bench::resident_bytes().unwrap_or(0);
    let c = lock_bench::median(&mut client_ns);
    let r = lock_bench::median(&mut raw_ns);
    let s = lock_bench::median(&mut short_ns);
    let ratio = lock_bench::median(&mut ratios);
    let short_ratio = lock_bench::median(&mut short_ratios);
    let (lo, hi) = (ratios[0], ratios[ratios.len() - 1]);
    println!();
    println!(
        "side by side, {ROUNDS} interleaved rounds of {BATCH} cycles ({}):",
        lock_bench::machine()
    );
    println!("  lock_client (lease 20 s) {c:>8.0} ns per acquire + release cycle (median)");
    println!("  lock_client (lease 1 s)  {s:>8.0} ns per cycle (median)");
    println!("  raw_store_calls          {r:>8.0} ns per cycle (2 puts, median)");
    println!(
        "  overhead ratio           {ratio:>8.2}x (median of per-round ratios; range {lo:.2}x to {hi:.2}x; goal <= 1.50x)"
    );
    println!("  overhead ratio, 1 s lease {short_ratio:>7.2}x");
    println!(
        "  resident memory grew by {:.0} MiB during the side-by-side rounds",
        rss_end.saturating_sub(rss_start) as f64 / (1024.0 * 1024.0)
    );
}

fn main() {
    let rt = runtime();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    criterion_benches(&mut c, &rt);
    c.final_summary();
    // `cargo bench -- <filter>` and `--list` runs skip the side-by-side part.
    if std::env::args().skip(1).all(|arg| arg == "--bench") {
        side_by_side(&rt);
    }
}
