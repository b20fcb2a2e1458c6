//! Several locks at once and reader-writer locks, on real stores:
//!
//! * **Sets.** `acquire_all` of 1, 10 and 100 free keys (DynamoDB takes at
//!   most 100 in one transaction), in one request where the store writes
//!   several keys at once, against the same client taking them one by one
//!   (the store wrapped so that it says it cannot): store calls and latency
//!   of the acquire, median of the rounds, the two ways interleaved.
//! * **Reader-writer locks.** A read and a write of a free lock (calls and
//!   latency), and a writer's hand-off with readers present: three readers of
//!   other clients hold the lock, a writer waits, the readers leave; from the
//!   last reader's release to the writer's admission.
//!
//! On PostgreSQL (`LOCK_POSTGRES_URL`), DynamoDB (`LOCK_DYNAMODB_ENDPOINT`)
//! and S3 (`LOCK_S3_ENDPOINT`), each where its variable is set;
//! `./scripts/bench-sets` starts moto and a PostgreSQL cluster and sets them.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin sets_and_readers
//! ```

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_bench::{BenchError, CountingStore, HttpCalls, machine, median};
use lock_core::layer::{Layered, StoreLayer};
use lock_core::{AcquireOptions, Capabilities, ConditionalStore, LockClient};
use tokio::time::Instant;

/// Rounds per measurement.
const ROUNDS: usize = 5;
/// Set sizes.
const SIZES: [usize; 3] = [1, 10, 100];

/// A store that says it writes one key per request: sets are then taken key
/// by key, as on a store without transactions.
#[derive(Debug)]
struct OneByOne;

#[async_trait]
impl StoreLayer for OneByOne {
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner.with_atomic_writes(None)
    }
}

/// What one measured operation took: milliseconds, store calls.
struct Took {
    ms: f64,
    calls: u64,
}

/// The median of `took`, as "12.3 ms, 4 calls".
fn summary(took: &mut [Took]) -> (f64, u64) {
    let mut ms: Vec<f64> = took.iter().map(|t| t.ms).collect();
    let mut calls: Vec<f64> = took.iter().map(|t| t.calls as f64).collect();
    (median(&mut ms), median(&mut calls) as u64)
}

/// One `acquire_all` of `size` fresh keys on `store` (released after, not
/// measured).
async fn take_set(
    store: Arc<dyn ConditionalStore>,
    http: Option<&HttpCalls>,
    round: &str,
    size: usize,
    one_by_one: bool,
) -> Result<Took, BenchError> {
    let store: Arc<dyn ConditionalStore> = if one_by_one {
        Arc::new(Layered::new(OneByOne, store))
    } else {
        store
    };
    let counted = CountingStore::new(store);
    let client = LockClient::builder(counted.clone())
        .owner("bench")
        .build()?;
    let keys: Vec<String> = (0..size).map(|i| format!("{round}-{i:03}")).collect();
    let before = counted.counts();
    let sent = http.map(HttpCalls::len);
    let started = Instant::now();
    let group = client
        .acquire_all(keys, AcquireOptions::new().wait(Duration::from_secs(30)))
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    // On DynamoDB the HTTP requests (a transaction's records are read back
    // in requests of their own); elsewhere one call is one round trip.
    let calls = match (http, sent) {
        (Some(http), Some(sent)) => (http.len() - sent) as u64,
        _ => counted.counts().since(&before).total(),
    };
    if group.taken_at_once() == one_by_one && size > 1 {
        return Err(BenchError::from(format!(
            "a set of {size} was taken {} one request",
            if one_by_one { "in" } else { "without" }
        )));
    }
    group.release().await?;
    client.shutdown().await?;
    Ok(Took { ms, calls })
}

async fn sets(
    name: &str,
    store: Arc<dyn ConditionalStore>,
    http: Option<&HttpCalls>,
) -> Result<Vec<String>, BenchError> {
    let mut rows = Vec::new();
    for size in SIZES {
        let (mut at_once, mut by_key) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            // Interleaved, so both ways see the same machine.
            let (a, b) = (format!("a{size}-{round}"), format!("b{size}-{round}"));
            at_once.push(take_set(store.clone(), http, &a, size, false).await?);
            by_key.push(take_set(store.clone(), http, &b, size, true).await?);
        }
        let (once_ms, once_calls) = summary(&mut at_once);
        let (key_ms, key_calls) = summary(&mut by_key);
        rows.push(format!(
            "| {name} | {size} | {once_ms:.1} ms, {once_calls} request(s) | {key_ms:.1} ms, {key_calls} request(s) | {:.2}× |",
            key_ms / once_ms
        ));
    }
    Ok(rows)
}

/// A read and a write of a free lock: calls and latency of each.
async fn free_lock(name: &str, store: Arc<dyn ConditionalStore>) -> Result<String, BenchError> {
    let counted = CountingStore::new(store);
    let client = LockClient::builder(counted.clone())
        .owner("bench")
        .build()?;
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let lock = client.rw_lock(format!("free-{round}"), 8)?;
        let before = counted.counts();
        let started = Instant::now();
        let read = lock.read(AcquireOptions::new()).await?;
        reads.push(Took {
            ms: started.elapsed().as_secs_f64() * 1e3,
            calls: counted.counts().since(&before).total(),
        });
        read.release().await?;
        let before = counted.counts();
        let started = Instant::now();
        let write = lock.write(AcquireOptions::new()).await?;
        writes.push(Took {
            ms: started.elapsed().as_secs_f64() * 1e3,
            calls: counted.counts().since(&before).total(),
        });
        write.release().await?;
    }
    client.shutdown().await?;
    let (read_ms, read_calls) = summary(&mut reads);
    let (write_ms, write_calls) = summary(&mut writes);
    Ok(format!(
        "| {name} | {read_ms:.1} ms, {read_calls} calls | {write_ms:.1} ms, {write_calls} calls |"
    ))
}

/// Three readers (each its own client) hold the lock; a writer (another
/// client) waits; the readers leave one after the other: from the last
/// release to the writer's admission.
async fn handoff(name: &str, store: Arc<dyn ConditionalStore>) -> Result<String, BenchError> {
    let mut gaps = Vec::new();
    for round in 0..ROUNDS {
        let lock_name = format!("handoff-{round}");
        let readers: Vec<LockClient> = (0..3)
            .map(|i| {
                LockClient::builder_shared(store.clone())
                    .owner(format!("reader-{i}"))
                    .build()
            })
            .collect::<Result<_, _>>()?;
        let mut reads = Vec::new();
        for reader in &readers {
            reads.push(
                reader
                    .rw_lock(lock_name.clone(), 8)?
                    .read(AcquireOptions::new())
                    .await?,
            );
        }
        let writer = LockClient::builder_shared(store.clone())
            .owner("writer")
            .build()?;
        let lock = writer.rw_lock(lock_name.clone(), 8)?;
        let waiting = tokio::spawn(async move {
            lock.write(AcquireOptions::new())
                .await
                .map(|w| (w, Instant::now()))
        });
        // The writer has taken the write lock and waits for the readers.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut left = Instant::now();
        for read in reads {
            read.release().await?;
            left = Instant::now();
        }
        let (write, admitted) = waiting
            .await
            .map_err(|error| BenchError::from(error.to_string()))??;
        gaps.push(admitted.saturating_duration_since(left).as_secs_f64() * 1e3);
        write.release().await?;
        for client in readers.iter().chain([&writer]) {
            client.shutdown().await?;
        }
    }
    let mut sorted = gaps.clone();
    let p50 = median(&mut sorted);
    let most = gaps.iter().copied().fold(0.0, f64::max);
    Ok(format!("| {name} | {p50:.0} ms | {most:.0} ms |"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BenchError> {
    let mut stores: Vec<(&str, Arc<dyn ConditionalStore>)> = Vec::new();
    let mut http: Option<HttpCalls> = None;
    if let Some(url) = lock_bench::postgres_url() {
        let table = lock_bench::unique_table("sets").replace('-', "_");
        stores.push((
            "PostgreSQL",
            Arc::new(lock_bench::fresh_postgres_store(&url, &table).await?),
        ));
    }
    if let Some(endpoint) = lock_bench::dynamodb_endpoint() {
        let table = lock_bench::unique_table("sets");
        let calls = HttpCalls::default();
        let store = lock_bench::fresh_dynamodb_store(
            &endpoint,
            &table,
            lock_dynamodb::Layout::native().with_sort_key("sort_key"),
            Some(calls.clone()),
        )
        .await?;
        http = Some(calls);
        stores.push(("DynamoDB on moto", Arc::new(store)));
    }
    let bucket =
        match lock_bench::s3_endpoint() {
            Some(endpoint) => Some(Arc::new(lock_bench::fresh_bucket_store(&endpoint, None)?)
                as Arc<dyn ConditionalStore>),
            None => None,
        };
    println!(
        "several locks at once and reader-writer locks, median of {ROUNDS}, {}",
        machine()
    );
    println!();
    println!("| store | keys | in one request | one by one | one by one ÷ one request |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, store) in &stores {
        let http = http.as_ref().filter(|_| name.starts_with("DynamoDB"));
        for row in sets(name, store.clone(), http).await? {
            println!("{row}");
        }
    }
    println!();
    println!("| store | a read of a free lock | a write of a free lock |");
    println!("| --- | --- | --- |");
    for (name, store) in stores
        .iter()
        .map(|(n, s)| (*n, s.clone()))
        .chain(bucket.iter().map(|s| ("S3 on moto", s.clone())))
    {
        println!("{}", free_lock(name, store).await?);
    }
    println!();
    println!("| store | last reader leaves → writer admitted, median | most |");
    println!("| --- | --- | --- |");
    for (name, store) in stores
        .iter()
        .map(|(n, s)| (*n, s.clone()))
        .chain(bucket.iter().map(|s| ("S3 on moto", s.clone())))
    {
        println!("{}", handoff(name, store).await?);
    }
    Ok(())
}
