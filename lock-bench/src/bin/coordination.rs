//! Leader election and counting semaphores, measured on the memory store (and
//! through DynamoDB when `LOCK_DYNAMODB_ENDPOINT` is set:
//! `./scripts/bench-vs-python` starts moto):
//!
//! * failover: how long the fleet goes without a leader after the leader's
//!   process stops reaching the store (a crash, as the others see it), and
//!   after the leader resigns, beside the bound `lease × (1 + drift) + refresh`;
//! * semaphore: the latency of `acquire` and the store calls per acquire with
//!   1, 8 and 64 waiters (each on its own client, each taking and releasing a
//!   permit in a loop), and 64 tasks of one client.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin coordination
//! ```

use std::time::Duration;

use lock_bench::{BenchError, CountingStore, machine};
use lock_core::{AcquireOptions, ConditionalStore, ElectionOptions, LockClient};
use lock_memory::{FaultyStore, MemoryStore};
use tokio::time::Instant;

/// The lease of every client here: short, so a crash failover takes seconds.
const LEASE: Duration = Duration::from_secs(2);
/// The refresh (poll) period of every client here.
const REFRESH: Duration = Duration::from_millis(100);
/// Failovers measured per row.
const FAILOVERS: usize = 5;
/// The semaphore's permits.
const PERMITS: u32 = 8;
/// How long a holder keeps its permit.
const HOLD: Duration = Duration::from_millis(10);

fn client(store: impl ConditionalStore, owner: &str) -> Result<LockClient, BenchError> {
    Ok(LockClient::builder(store)
        .owner(owner)
        .lease(LEASE)
        .refresh_period(REFRESH)
        .build()?)
}

/// Three candidates on `store`, each on its own faulty view of it; the
/// leader's view is cut (`crash`) or it resigns; the time until another
/// candidate leads, `FAILOVERS` times.
async fn failovers<S>(store: &S, crash: bool) -> Result<Vec<Duration>, BenchError>
where
    S: ConditionalStore + Clone,
{
    let mut times = Vec::new();
    for round in 0..FAILOVERS {
        let key = format!("leader-{round}-{crash}");
        let views: Vec<FaultyStore<S>> =
            (0..3).map(|i| FaultyStore::new(store.clone(), i)).collect();
        let clients: Vec<LockClient> = views
            .iter()
            .enumerate()
            .map(|(i, view)| client(view.clone(), &format!("node-{i}")))
            .collect::<Result<_, _>>()?;
        let mut elections: Vec<Option<lock_core::Election>> = clients
            .iter()
            .map(|client| client.elect(key.as_str(), ElectionOptions::new()).map(Some))
            .collect::<Result<_, _>>()?;
        let leader = loop {
            if let Some(i) = elections
                .iter()
                .position(|e| e.as_ref().is_some_and(lock_core::Election::is_leader))
            {
                break i;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        // Let the followers see the leader's record first, as in a running fleet.
        tokio::time::sleep(LEASE / 2).await;
        let started = Instant::now();
        if crash {
            views[leader].set_unavailable(true);
        } else if let Some(election) = elections[leader].take() {
            election.resign().await?;
        }
        loop {
            let next = elections.iter().enumerate().any(|(i, e)| {
                i != leader && e.as_ref().is_some_and(lock_core::Election::is_leader)
            });
            if next {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(started.elapsed());
        views[leader].set_unavailable(false);
        drop(elections);
        for client in clients {
            let _ = client.shutdown().await;
        }
    }
    Ok(times)
}

fn spread(times: &mut [Duration]) -> String {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{:.0} ms (min {:.0}, max {:.0})",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() - 1])
    )
}

/// `waiters` tasks (on their own clients, or all on one) take a permit of an
/// 8-permit semaphore `rounds` times each, holding it `HOLD`; acquire latency
/// percentiles and store calls per acquire.
async fn semaphore_row<S>(
    store: &S,
    name: &str,
    waiters: usize,
    one_client: bool,
    rounds: usize,
) -> Result<String, BenchError>
where
    S: ConditionalStore + Clone,
{
    let counting = CountingStore::new(store.clone());
    let shared = client(counting.clone(), "shared")?;
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let client = if one_client {
            shared.clone()
        } else {
            let own = client(counting.clone(), &format!("worker-{i}"))?;
            clients.push(own.clone());
            own
        };
        let semaphore = client.semaphore(name, PERMITS)?;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let started = Instant::now();
                let permit = semaphore
                    .acquire(AcquireOptions::new().wait(Duration::from_secs(600)))
                    .await?;
                latencies.push(started.elapsed());
                tokio::time::sleep(HOLD).await;
                permit.release().await?;
            }
            Ok::<_, lock_core::LockError>(latencies)
        }));
    }
    let before = counting.counts();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let calls = counting.counts().since(&before);
    for client in clients {
        let _ = client.shutdown().await;
    }
    let _ = shared.shutdown().await;
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let acquires = latencies.len() as f64;
    Ok(format!(
        "| {waiters}{} | {} | {:.2} ms | {:.1} ms | {:.1} ms | {:.2} | {:.2} | {:.2} |",
        if one_client { " (one client)" } else { "" },
        latencies.len(),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(latencies[latencies.len() - 1]),
        calls.reads() as f64 / acquires,
        calls.writes() as f64 / acquires,
        calls.total() as f64 / acquires,
    ))
}

async fn report<S>(store: &S, title: &str, rounds: usize) -> Result<(), BenchError>
where
    S: ConditionalStore + Clone,
{
    println!("\n### {title}\n");
    let bound = LEASE.mul_f64(1.01) + REFRESH;
    println!(
        "Failover, {FAILOVERS} times each, three candidates, lease {} s, refresh {} ms (bound lease × 1.01 + refresh = {} ms):\n",
        LEASE.as_secs(),
        REFRESH.as_millis(),
        bound.as_millis()
    );
    println!("| event | time until another candidate leads (median) |");
    println!("| --- | --- |");
    println!(
        "| the leader's process stops reaching the store | {} |",
        spread(&mut failovers(store, true).await?)
    );
    println!(
        "| the leader resigns | {} |",
        spread(&mut failovers(store, false).await?)
    );
    println!(
        "\nSemaphore of {PERMITS} permits, each holder keeps its permit {} ms:\n",
        HOLD.as_millis()
    );
    println!(
        "| waiters | acquires | p50 | p99 | max | reads per acquire | writes per acquire | store calls per acquire |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (waiters, one_client) in [(1, false), (8, false), (64, false), (64, true)] {
        let name = format!("pool-{waiters}-{one_client}");
        let rounds = (rounds / waiters).max(2);
        println!(
            "{}",
            semaphore_row(store, &name, waiters, one_client, rounds).await?
        );
    }
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!("Coordination ({})", machine());
    runtime.block_on(async {
        report(&MemoryStore::new(), "Memory store (sort keys)", 400).await?;
        report(
            &MemoryStore::builder().sort_keys(false).build(),
            "Memory store without sort keys",
            400,
        )
        .await?;
        if let Some(endpoint) = lock_bench::dynamodb_endpoint() {
            for (layout, title) in [
                (
                    lock_dynamodb::Layout::native(),
                    "DynamoDB (moto), native layout, no sort key",
                ),
                (
                    lock_dynamodb::Layout::native().with_sort_key("sort_key"),
                    "DynamoDB (moto), native layout with a sort key",
                ),
            ] {
                let table = lock_bench::unique_table("coordination");
                let store =
                    lock_bench::fresh_dynamodb_store(&endpoint, &table, layout, None).await?;
                report(&store, &format!("{title}, at {endpoint}"), 100).await?;
                store.delete_table(Duration::from_secs(10)).await?;
            }
        }
        Ok::<_, BenchError>(())
    })?;
    Ok(())
}
