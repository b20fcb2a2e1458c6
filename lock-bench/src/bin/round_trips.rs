//! Store round trips per lock operation, counted by `CountingStore`: on the
//! memory store, on each DynamoDB layout when `LOCK_DYNAMODB_ENDPOINT` points
//! at a DynamoDB endpoint (moto), on PostgreSQL when `LOCK_POSTGRES_URL`
//! names a server, and in an S3 bucket when `LOCK_S3_ENDPOINT` points at moto
//! (`./scripts/bench-vs-python --round-trips` starts them all). A
//! PostgreSQL store call is one statement sent in one flight: one round trip;
//! an object-store call is one or two HTTP requests (counted).
//!
//! ```sh
//! cargo run -p lock-bench --release --bin round_trips
//! ```
//!
//! Prints one Markdown table: rows are operations, columns are stores, each cell
//! the calls that operation made.

use std::time::Duration;

use lock_bench::{BenchError, CallKind, CountingStore, Counts, HttpCalls};
use lock_core::{
    AcquireOptions, ConditionalStore, Expect, FenceUpdate, LockClient, LockKey, NewRecord, Rvn,
};
use lock_dynamodb::Layout;
use lock_memory::MemoryStore;

const OPERATIONS: [&str; 7] = [
    "acquire, new key",
    "release",
    "acquire, released key",
    "acquire, held key (conflict)",
    "heartbeat (calls per heartbeat)",
    "takeover of an expired lock (whole acquire)",
    "takeover write itself",
];

struct Column {
    name: String,
    cells: Vec<String>,
    ok: bool,
}

fn client<S: ConditionalStore + Clone>(
    store: &CountingStore<S>,
    owner: &str,
) -> Result<LockClient, BenchError> {
    Ok(LockClient::builder(store.clone()).owner(owner).build()?)
}

/// What the client asked the store for, and (DynamoDB) what went on the wire.
fn cell(counts: &Counts, wire: Option<(&HttpCalls, usize)>) -> String {
    match wire {
        Some((calls, from)) => format!("{counts}; HTTP: {}", calls.summary_since(from)),
        None => counts.to_string(),
    }
}

async fn measure<S: ConditionalStore + Clone>(
    name: &str,
    store: CountingStore<S>,
    wire: Option<HttpCalls>,
) -> Result<Column, BenchError> {
    let mut cells = Vec::new();
    let mut ok = true;
    let mark = || wire.as_ref().map_or(0, HttpCalls::len);
    let wired = |from: usize| wire.as_ref().map(|calls| (calls, from));
    // What the store says one write may cost on the wire (two requests where
    // a write on an unseen object version reads it first).
    let most = usize::from(store.capabilities().requests.write_on_unseen);
    let one_write = |counts: &Counts, from: usize, cells: &mut Vec<String>, ok: &mut bool| {
        *ok &= counts.total() == 1 && counts.writes() == 1;
        if let Some(calls) = &wire {
            *ok &= calls.len() - from <= most;
        }
        cells.push(cell(counts, wired(from)));
    };
    let alice = client(&store, "alice")?;
    let bob = client(&store, "bob")?;
    let key = "round-trips";

    let (before, from) = (store.counts(), mark());
    let guard = alice.acquire(key, AcquireOptions::new()).await?;
    one_write(&store.counts().since(&before), from, &mut cells, &mut ok);

    let (before, from) = (store.counts(), mark());
    guard.release().await?;
    one_write(&store.counts().since(&before), from, &mut cells, &mut ok);

    let (before, from) = (store.counts(), mark());
    let guard = alice.acquire(key, AcquireOptions::new()).await?;
    one_write(&store.counts().since(&before), from, &mut cells, &mut ok);

    let (before, from) = (store.counts(), mark());
    let none = bob.try_acquire(key, AcquireOptions::new()).await?;
    let conflict = store.counts().since(&before);
    ok &= none.is_none() && conflict.reads() == 0;
    one_write(&conflict, from, &mut cells, &mut ok);
    guard.release().await?;

    // Heartbeats: a short lease so that several beats fit in two seconds.
    let beater = LockClient::builder(store.clone())
        .owner("beater")
        .lease(Duration::from_secs(3))
        .heartbeat_period(Duration::from_millis(400))
        .build()?;
    let guard = beater.acquire("heartbeats", AcquireOptions::new()).await?;
    let (before, from) = (store.counts(), mark());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let beats = store.counts().since(&before);
    let n = beats.of(CallKind::Heartbeat);
    ok &= n > 0 && beats.total() == n;
    cells.push(format!(
        "{:.2} ({}){}",
        beats.total() as f64 / n.max(1) as f64,
        beats,
        wire.as_ref()
            .map(|calls| format!("; HTTP: {}", calls.summary_since(from)))
            .unwrap_or_default()
    ));
    guard.release().await?;
    beater.shutdown().await?;

    // Takeover: a record whose holder crashed (written straight into the store, not
    // counted), lease 1 s; bob waits for it, polling every 200 ms.
    let stale = LockKey::new("crashed-holder");
    store
        .inner()
        .put(
            &stale,
            Expect::Vacant,
            NewRecord {
                owner: "crashed".into(),
                rvn: Rvn::fresh(),
                lease: Duration::from_secs(1),
                released: false,
                fence: FenceUpdate::Next,
                data: lock_core::DataUpdate::Keep,
                expires_at: None,
            },
        )
        .await?;
    let (before, from) = (store.counts(), mark());
    let guard = bob
        .acquire(
            stale,
            AcquireOptions::new()
                .wait(Duration::from_secs(5))
                .refresh_period(Duration::from_millis(200)),
        )
        .await?;
    let takeover = store.counts().since(&before);
    cells.push(cell(&takeover, wired(from)));
    let writes = takeover.writes();
    ok &= takeover.of(CallKind::Takeover) == 1 && writes == 2;
    cells.push(format!("{} put takeover", takeover.of(CallKind::Takeover)));
    guard.release().await?;
    alice.shutdown().await?;
    bob.shutdown().await?;
    Ok(Column {
        name: name.into(),
        cells,
        ok,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BenchError> {
    let mut columns = vec![measure("memory", CountingStore::new(MemoryStore::new()), None).await?];
    match lock_bench::dynamodb_endpoint() {
        Some(endpoint) => {
            for layout in [
                Layout::native(),
                Layout::python_dynamodb_lock(),
                Layout::java_lock_client(),
            ] {
                let name = format!("dynamodb {}", layout.preset_name());
                let table = lock_bench::unique_table(&format!("rt-{}", layout.preset_name()));
                let calls = HttpCalls::default();
                let store = lock_bench::fresh_dynamodb_store(
                    &endpoint,
                    &table,
                    layout,
                    Some(calls.clone()),
                )
                .await?;
                columns.push(measure(&name, CountingStore::new(store.clone()), Some(calls)).await?);
                store.delete_table(Duration::from_secs(10)).await?;
            }
        }
        None => eprintln!(
            "LOCK_DYNAMODB_ENDPOINT is not set: counting on the memory store only \
             (./scripts/bench-vs-python --round-trips starts moto and counts every layout)"
        ),
    }
    match lock_bench::postgres_url() {
        Some(url) => {
            let table = lock_bench::unique_table("rt").replace('-', "_");
            let store = lock_bench::fresh_postgres_store(&url, &table).await?;
            columns.push(measure("postgres", CountingStore::new(store), None).await?);
        }
        None => eprintln!("LOCK_POSTGRES_URL is not set: no PostgreSQL column"),
    }
    match lock_bench::s3_endpoint() {
        Some(endpoint) => {
            let calls = HttpCalls::default();
            let store = lock_bench::fresh_bucket_store(&endpoint, Some(calls.clone()))?;
            columns
                .push(measure("s3 (object store)", CountingStore::new(store), Some(calls)).await?);
        }
        None => eprintln!("LOCK_S3_ENDPOINT is not set: no object-store column"),
    }
    println!("Store calls per operation ({}):\n", lock_bench::machine());
    print!("| operation |");
    for column in &columns {
        print!(" {} |", column.name);
    }
    println!();
    println!("|---|{}", "---|".repeat(columns.len()));
    for (row, operation) in OPERATIONS.iter().enumerate() {
        print!("| {operation} |");
        for column in &columns {
            print!(" {} |", column.cells[row]);
        }
        println!();
    }
    println!();
    for column in &columns {
        println!(
            "{}: {}",
            column.name,
            if column.ok {
                "goal met: one store call per state change, conflicts without a read, \
                 no more requests than the store's capabilities say"
            } else {
                "GOAL MISSED: see the table"
            }
        );
    }
    Ok(())
}
