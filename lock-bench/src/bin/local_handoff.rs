//! Local hand-off latency on the memory store (and through DynamoDB when
//! `LOCK_DYNAMODB_ENDPOINT` is set, S3 when `LOCK_S3_ENDPOINT` is, PostgreSQL
//! when `LOCK_POSTGRES_URL` is: `./scripts/bench-vs-python` starts them):
//! how long from a holder's
//! `release()` until the next task waiting for the key holds it, when both tasks
//! share one client (queued inside the client, handed the lock in one write),
//! side by side in one run with the same hand-off between two clients (the
//! waiter polls the store) and with one task's uncontended acquire + release.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin local_handoff
//! ```
//!
//! Prints one Markdown table of latencies (p50, p99, max) and the ratios.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_bench::{BenchError, Histogram, machine};
use lock_core::{AcquireOptions, LockClient};
use lock_memory::MemoryStore;
use tokio::time::Instant;

/// Hand-offs (or cycles) measured per row.
const ROUNDS: usize = 20_000;
/// Rounds between two clients: each one waits for a poll.
const POLLED_ROUNDS: usize = 200;
/// Histogram buckets of 100 ns, up to 100 ms.
const RESOLUTION: Duration = Duration::from_nanos(100);
const BUCKETS: usize = 1_000_000;
/// The polling waiter's refresh period.
const POLL: Duration = Duration::from_millis(10);

/// Rounds of each row through DynamoDB (every hand-off is a round trip).
const DYNAMODB_ROUNDS: usize = 400;
/// Polled rounds through DynamoDB.
const DYNAMODB_POLLED_ROUNDS: usize = 100;

fn client<S: lock_core::ConditionalStore + Clone>(
    store: &S,
    owner: &str,
) -> Result<LockClient, BenchError> {
    Ok(LockClient::builder(store.clone())
        .owner(owner)
        .lease(Duration::from_secs(20))
        .refresh_period(POLL)
        .build()?)
}

/// Two tasks hand "job" back and forth `rounds` times: each waits until the
/// other holds it, then asks for it (so it is waiting when the other releases)
/// and records the time from the other's release call until its own acquire
/// returned.
async fn ping_pong(a: LockClient, b: LockClient, rounds: usize) -> Result<Histogram, BenchError> {
    let latencies = Arc::new(Histogram::new(RESOLUTION, BUCKETS));
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let (holder, _) = tokio::sync::watch::channel(usize::MAX);
    let holder = Arc::new(holder);
    let mut tasks = Vec::new();
    for (me, client) in [a, b].into_iter().enumerate() {
        let (latencies, released_at, holder) =
            (latencies.clone(), released_at.clone(), holder.clone());
        tasks.push(tokio::spawn(async move {
            let other = 1 - me;
            let mut turns = holder.subscribe();
            for round in 0..rounds / 2 {
                if me == 1 || round > 0 {
                    turns.wait_for(|now| *now == other).await?;
                }
                let held = client
                    .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
                    .await?;
                let released = released_at.lock().map_or(None, |mut at| at.take());
                if let Some(released) = released {
                    latencies.record(released.elapsed());
                }
                holder.send_replace(me);
                // Let the other task get to its acquire before releasing.
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
                if let Ok(mut at) = released_at.lock() {
                    *at = Some(Instant::now());
                }
                held.release().await?;
            }
            Ok::<_, BenchError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(Arc::into_inner(latencies).unwrap_or_else(|| Histogram::new(RESOLUTION, 1)))
}

async fn uncontended(client: LockClient, rounds: usize) -> Result<Histogram, BenchError> {
    let latencies = Histogram::new(RESOLUTION, BUCKETS);
    for _ in 0..rounds {
        let started = Instant::now();
        client
            .acquire("solo", AcquireOptions::new())
            .await?
            .release()
            .await?;
        latencies.record(started.elapsed());
    }
    Ok(latencies)
}

fn row(name: &str, histogram: &Histogram, base: Duration) -> String {
    let p50 = histogram.quantile(0.5);
    format!(
        "| {name} | {} | {:?} | {:?} | {:?} | {:.2}× |",
        histogram.count(),
        p50,
        histogram.quantile(0.99),
        histogram.max(),
        p50.as_secs_f64() / base.as_secs_f64().max(1e-9),
    )
}

/// The three rows on `store`: a local hand-off, a hand-off between two
/// clients, and one task's uncontended cycle.
async fn rows<S: lock_core::ConditionalStore + Clone>(
    store: &S,
    rounds: usize,
    polled_rounds: usize,
    title: &str,
) -> Result<(), BenchError> {
    let one = client(store, "one")?;
    let solo = uncontended(one.clone(), rounds).await?;
    let local = ping_pong(one.clone(), one.clone(), rounds).await?;
    let two = client(store, "two")?;
    let polled = ping_pong(one.clone(), two.clone(), polled_rounds).await?;
    one.shutdown().await?;
    two.shutdown().await?;
    let base = local.quantile(0.5);
    println!("{title} ({}):\n", machine());
    println!("| from release() to the next holder | n | p50 | p99 | max | p50 / local hand-off |");
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "{}",
        row(
            "two tasks of one client (hand-off, one write)",
            &local,
            base
        )
    );
    println!(
        "{}",
        row(
            &format!("two clients, waiter polling every {POLL:?} (jittered)"),
            &polled,
            base
        )
    );
    println!(
        "{}",
        row(
            "for scale: one task's acquire + release, uncontended",
            &solo,
            base
        )
    );
    println!();
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        rows(
            &MemoryStore::new(),
            ROUNDS,
            POLLED_ROUNDS,
            "Local hand-off on the memory store",
        )
        .await?;
        if let Some(endpoint) = lock_bench::dynamodb_endpoint() {
            let table = lock_bench::unique_table("handoff");
            let store = lock_bench::fresh_dynamodb_store(
                &endpoint,
                &table,
                lock_dynamodb::Layout::native(),
                None,
            )
            .await?;
            rows(
                &store,
                DYNAMODB_ROUNDS,
                DYNAMODB_POLLED_ROUNDS,
                &format!("Local hand-off through DynamoDB at {endpoint} (native layout)"),
            )
            .await?;
            store.delete_table(Duration::from_secs(10)).await?;
        }
        if let Some(endpoint) = lock_bench::s3_endpoint() {
            let store = lock_bench::fresh_bucket_store(&endpoint, None)?;
            rows(
                &store,
                DYNAMODB_ROUNDS,
                DYNAMODB_POLLED_ROUNDS,
                &format!("Local hand-off through S3 at {endpoint} (object store, moto)"),
            )
            .await?;
        }
        if let Some(url) = lock_bench::postgres_url() {
            let table = lock_bench::unique_table("handoff").replace('-', "_");
            let store = lock_bench::fresh_postgres_store(&url, &table).await?;
            rows(
                &store,
                DYNAMODB_ROUNDS,
                DYNAMODB_POLLED_ROUNDS,
                "Local hand-off through PostgreSQL (a local server, one connection per statement from a pool)",
            )
            .await?;
        }
        Ok(())
    })
}
