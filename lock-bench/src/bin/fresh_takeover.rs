//! How long a fresh process (a cron run, a Lambda invocation, `lockctl run
//! --wait 0s`) takes to get a lock whose holder crashed, once the holder's
//! lease has run out: by watching the record (the rule that needs no clock),
//! against by the time the store proves (the store's clock on PostgreSQL; the
//! writer's wall clock on DynamoDB and `Last-Modified` in a bucket, with a
//! declared bound on how far clocks differ).
//!
//! Each round, two holders take a lock each and crash (heartbeats stop, the
//! record stays). When the store's rule would allow the takeover (the lease
//! × 1.01 after the holder's write, plus the bound and a bucket's one-second
//! granularity), two fresh clients start at once, one per rule, each on its
//! own lock: how long from its start to its lock, and in how many store
//! calls (its acquire's: the release is not counted). On PostgreSQL (`LOCK_POSTGRES_URL`), DynamoDB
//! (`LOCK_DYNAMODB_ENDPOINT`) and S3 (`LOCK_S3_ENDPOINT`), each where its
//! variable is set; `./scripts/bench-takeover` starts moto and a PostgreSQL
//! cluster and sets them.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin fresh_takeover
//! ```

use std::sync::Arc;
use std::time::Duration;

use lock_bench::{BenchError, CountingStore, machine};
use lock_core::{AcquireOptions, ConditionalStore, LockClient};
use tokio::time::Instant;

/// The crashed holders' lease.
const LEASE: Duration = Duration::from_secs(2);
/// The clock bound the wall-clock rule is given.
const BOUND: Duration = Duration::from_millis(200);
/// Rounds per store.
const ROUNDS: usize = 5;

/// What one fresh client did.
struct Taken {
    waited: Duration,
    calls: u64,
}

/// A lock on `store` held by a client that then crashed; when it wrote.
async fn crashed_holder(
    store: Arc<dyn ConditionalStore>,
    key: &str,
) -> Result<Instant, BenchError> {
    let holder = LockClient::builder_shared(store)
        .owner("crashed")
        .lease(LEASE)
        .build()?;
    let guard = holder.acquire(key, AcquireOptions::new()).await?;
    let written = Instant::now();
    // Heartbeats stop, the record stays: as a process killed.
    drop(guard.detach().await?);
    Ok(written)
}

/// A fresh client's acquire of `key` (waiting as long as it takes), with the
/// store-time rule on or off.
async fn fresh(
    store: Arc<dyn ConditionalStore>,
    key: &str,
    rule: bool,
    bounded: bool,
) -> Result<Taken, BenchError> {
    let counted = CountingStore::new(store);
    let mut builder = LockClient::builder(counted.clone())
        .owner(if rule {
            "fresh-store-time"
        } else {
            "fresh-watching"
        })
        .lease(LEASE)
        .use_store_clock(rule);
    if rule && bounded {
        builder = builder.max_clock_difference(BOUND);
    }
    let client = builder.build()?;
    let started = Instant::now();
    let guard = client
        .acquire(key, AcquireOptions::new().wait(LEASE * 3))
        .await?;
    let waited = started.elapsed();
    let calls = counted.counts().total();
    guard.release().await?;
    client.shutdown().await?;
    Ok(Taken { waited, calls })
}

/// `ROUNDS` rounds on `store`; `after_lease` is how long after the lease the
/// store's rule allows the takeover.
async fn measure(
    name: &str,
    store: Arc<dyn ConditionalStore>,
    after_lease: Duration,
    bounded: bool,
) -> Result<String, BenchError> {
    let mut watching = Vec::new();
    let mut store_time = Vec::new();
    for round in 0..ROUNDS {
        let (a, b) = (format!("watch-{round}"), format!("time-{round}"));
        let written = crashed_holder(store.clone(), &a).await?;
        crashed_holder(store.clone(), &b).await?;
        tokio::time::sleep_until(written + LEASE.mul_f64(1.01) + after_lease).await;
        let (off, on) = tokio::join!(
            fresh(store.clone(), &a, false, bounded),
            fresh(store.clone(), &b, true, bounded)
        );
        watching.push(off?);
        store_time.push(on?);
    }
    let p50 = |taken: &mut Vec<Taken>| {
        taken.sort_by_key(|t| t.waited);
        let middle = &taken[taken.len() / 2];
        (middle.waited, middle.calls)
    };
    let (off, off_calls) = p50(&mut watching);
    let (on, on_calls) = p50(&mut store_time);
    // The fresh clients started this long after the holder's last write.
    let start = LEASE.mul_f64(1.01) + after_lease;
    let s = |d: Duration| format!("{:.2} s", d.as_secs_f64());
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    Ok(format!(
        "| {name} | {} | {} ({off_calls} calls) | {} ({on_calls} calls) | {} | {} |",
        s(start),
        s(off),
        ms(on),
        s(start + off),
        s(start + on),
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BenchError> {
    println!(
        "a fresh process's acquire of a crashed holder's lock (lease {} s), median of {ROUNDS}, {}",
        LEASE.as_secs(),
        machine()
    );
    println!();
    println!(
        "| store (rule) | fresh process starts, after the last write | its acquire, watching | its acquire, by store time | lock taken after the last write, watching | by store time |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    if let Some(url) = lock_bench::postgres_url() {
        let table = lock_bench::unique_table("takeover").replace('-', "_");
        let store = lock_bench::fresh_postgres_store(&url, &table).await?;
        let row = measure(
            "PostgreSQL (the server's clock)",
            Arc::new(store),
            Duration::ZERO,
            false,
        )
        .await?;
        println!("{row}");
    }
    if let Some(endpoint) = lock_bench::dynamodb_endpoint() {
        let table = lock_bench::unique_table("takeover");
        let store = lock_bench::fresh_dynamodb_store(
            &endpoint,
            &table,
            lock_dynamodb::Layout::native(),
            None,
        )
        .await?;
        let row = measure(
            "DynamoDB on moto (writer's clock, bound 200 ms)",
            Arc::new(store),
            BOUND,
            true,
        )
        .await?;
        println!("{row}");
    }
    if let Some(endpoint) = lock_bench::s3_endpoint() {
        let store = lock_bench::fresh_bucket_store(&endpoint, None)?;
        let row = measure(
            "S3 on moto (Last-Modified, bound 200 ms)",
            Arc::new(store),
            BOUND + Duration::from_secs(1),
            true,
        )
        .await?;
        println!("{row}");
    }
    Ok(())
}
