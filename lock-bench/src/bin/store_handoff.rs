//! Waiters woken by the store, and the new stores beside the others:
//!
//! * **Hand-off between two processes.** A holder (this process) releases a
//!   lock a waiter in a child process is waiting for, polling every second;
//!   from the holder's `release()` to the waiter's acquire returning, with
//!   and without the store's announcements (the waiter's store built with
//!   announcements off), on PostgreSQL (`NOTIFY`), etcd (a watch) and Redis
//!   (pub/sub). The release comes at a random point of the waiter's poll
//!   period. Both processes read the same clock (`CLOCK_REALTIME` of one
//!   host).
//! * **A cycle on each store.** An uncontended acquire + release of one key,
//!   over and over on one task: store calls per cycle, latency (p50, p99)
//!   and this process's CPU per cycle, on PostgreSQL, etcd, Redis and
//!   DynamoDB (moto), one after the other in one run.
//!
//! Each store where its variable is set: `LOCK_POSTGRES_URL`,
//! `LOCK_ETCD_ENDPOINT`, `LOCK_REDIS_URL`, `LOCK_DYNAMODB_ENDPOINT`;
//! `./scripts/bench-handoff` starts them all and sets them.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin store_handoff
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_bench::{BenchError, CountingStore, machine, quantile, threads_cpu};
use lock_core::{AcquireOptions, ConditionalStore, LockClient};
use tokio::time::Instant;

/// Hand-offs per configuration.
const HANDOFFS: usize = 30;
/// Cycles per store.
const CYCLES: usize = 300;
/// The waiter's poll period.
const POLL: Duration = Duration::from_secs(1);

/// Microseconds since the epoch on this host's clock: comparable between
/// the two processes.
fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_micros())
        .unwrap_or_default()
}

/// The store `name` on the server its variable names, under `prefix`, with
/// or without announcements; `None` when the variable is not set.
async fn store(
    name: &str,
    prefix: &str,
    announce: bool,
) -> Result<Option<Arc<dyn ConditionalStore>>, BenchError> {
    Ok(match name {
        "postgres" => match std::env::var("LOCK_POSTGRES_URL") {
            Ok(url) => {
                // A table name: letters, digits and '_'.
                let store = lock_postgres::PostgresStore::builder(prefix.replace('-', "_"))
                    .announce_releases(announce)
                    .build_from_url(&url)?;
                store.create_schema().await?;
                Some(Arc::new(store))
            }
            Err(_) => None,
        },
        "etcd" => match std::env::var("LOCK_ETCD_ENDPOINT") {
            Ok(endpoint) => Some(Arc::new(
                lock_etcd::EtcdStore::builder([endpoint], prefix)
                    .announce_releases(announce)
                    .connect()
                    .await?,
            )),
            Err(_) => None,
        },
        "redis" => match std::env::var("LOCK_REDIS_URL") {
            Ok(url) => Some(Arc::new(
                lock_redis::RedisStore::builder(url, prefix)
                    .announce_releases(announce)
                    .connect()
                    .await?,
            )),
            Err(_) => None,
        },
        "dynamodb" => match lock_bench::dynamodb_endpoint() {
            Some(endpoint) => Some(Arc::new(
                lock_bench::fresh_dynamodb_store(
                    &endpoint,
                    prefix,
                    lock_dynamodb::Layout::native(),
                    None,
                )
                .await?,
            )),
            None => None,
        },
        other => return Err(format!("no store {other}").into()),
    })
}

/// The child: wait for the lock each time the holder says so, and report
/// when it was taken.
async fn waiter(name: &str, prefix: &str, announce: bool) -> Result<(), BenchError> {
    let Some(store) = store(name, prefix, announce).await? else {
        return Err(format!("{name}: no server").into());
    };
    let client = LockClient::builder_shared(store)
        .owner("waiter")
        .lease(Duration::from_secs(10))
        .refresh_period(POLL)
        .build()?;
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line?;
        if line == "quit" {
            break;
        }
        // "go": start waiting; say so, then report when the lock is taken.
        writeln!(stdout, "waiting")?;
        stdout.flush()?;
        let guard = client
            .acquire(
                "handoff",
                AcquireOptions::new().wait(Duration::from_secs(30)),
            )
            .await?;
        let taken = now_micros();
        guard.release().await?;
        writeln!(stdout, "{taken}")?;
        stdout.flush()?;
    }
    client.shutdown().await?;
    Ok(())
}

/// Hand-offs to a waiter in a child process: milliseconds from `release()`
/// to the waiter's acquire, `HANDOFFS` of them.
async fn handoffs(name: &str, announce: bool) -> Result<Option<Vec<f64>>, BenchError> {
    let prefix = lock_bench::unique_table("handoff");
    let Some(store) = store(name, &prefix, true).await? else {
        return Ok(None);
    };
    let holder = LockClient::builder_shared(store)
        .owner("holder")
        .lease(Duration::from_secs(10))
        .build()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--waiter",
            name,
            &prefix,
            if announce { "on" } else { "off" },
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_child = child.stdin.take().ok_or("no stdin")?;
    let mut from_child = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut millis = Vec::with_capacity(HANDOFFS);
    for _ in 0..HANDOFFS {
        let guard = holder
            .acquire(
                "handoff",
                AcquireOptions::new().wait(Duration::from_secs(30)),
            )
            .await?;
        writeln!(to_child, "go")?;
        to_child.flush()?;
        let said = from_child.next().ok_or("the waiter ended")??;
        if said != "waiting" {
            return Err(format!("the waiter said {said:?}").into());
        }
        // Its first look, then a random point of its poll period.
        tokio::time::sleep(Duration::from_millis(200) + POLL.mul_f64(fastrand::f64())).await;
        let released = now_micros();
        guard.release().await?;
        let taken: u128 = from_child.next().ok_or("the waiter ended")??.parse()?;
        millis.push(taken.saturating_sub(released) as f64 / 1000.0);
    }
    writeln!(to_child, "quit")?;
    drop(to_child);
    child.wait()?;
    holder.shutdown().await?;
    Ok(Some(millis))
}

/// Acquire + release cycles on one task: calls per cycle, latency and CPU.
async fn cycles(name: &str) -> Result<Option<(f64, f64, f64, f64)>, BenchError> {
    let prefix = lock_bench::unique_table("cycle");
    let Some(store) = store(name, &prefix, false).await? else {
        return Ok(None);
    };
    let counting = Arc::new(CountingStore::new(store));
    let client = LockClient::builder_shared(counting.clone())
        .owner("cycler")
        .lease(Duration::from_secs(10))
        .build()?;
    // Warm up: connections, caches, the key's first write.
    for _ in 0..10 {
        client
            .acquire("cycle", AcquireOptions::new())
            .await?
            .release()
            .await?;
    }
    let calls_before = counting.counts().total();
    let cpu_before = threads_cpu()?;
    let mut millis = Vec::with_capacity(CYCLES);
    for _ in 0..CYCLES {
        let started = Instant::now();
        client
            .acquire("cycle", AcquireOptions::new())
            .await?
            .release()
            .await?;
        millis.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let cpu = threads_cpu()?.saturating_sub(cpu_before);
    let calls = counting.counts().total() - calls_before;
    client.shutdown().await?;
    Ok(Some((
        calls as f64 / CYCLES as f64,
        quantile(&mut millis, 0.5),
        quantile(&mut millis, 0.99),
        cpu.as_secs_f64() * 1e6 / CYCLES as f64,
    )))
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--waiter") {
        let (name, prefix, announce) = match &args[2..] {
            [name, prefix, announce] => (name, prefix, announce == "on"),
            _ => return Err("--waiter STORE PREFIX on|off".into()),
        };
        return waiter(name, prefix, announce).await;
    }
    println!("{}", machine());
    println!(
        "\nHand-off between two processes (waiter polls every {POLL:?}; {HANDOFFS} hand-offs each; ms from release() to the waiter's acquire)"
    );
    println!("| store | announced p50 | p99 | polling p50 | p99 |");
    println!("| --- | --- | --- | --- | --- |");
    for name in ["postgres", "etcd", "redis"] {
        let (Some(mut on), Some(mut off)) =
            (handoffs(name, true).await?, handoffs(name, false).await?)
        else {
            println!("| {name} | (no server) | | | |");
            continue;
        };
        println!(
            "| {name} | {:.1} | {:.1} | {:.0} | {:.0} |",
            quantile(&mut on, 0.5),
            quantile(&mut on, 0.99),
            quantile(&mut off, 0.5),
            quantile(&mut off, 0.99)
        );
    }
    println!("\nAn uncontended acquire + release on one task ({CYCLES} cycles each)");
    println!("| store | store calls per cycle | p50 ms | p99 ms | client CPU per cycle |");
    println!("| --- | --- | --- | --- | --- |");
    for name in ["postgres", "etcd", "redis", "dynamodb"] {
        match cycles(name).await? {
            Some((calls, p50, p99, cpu)) => {
                println!("| {name} | {calls:.1} | {p50:.2} | {p99:.2} | {cpu:.0} µs |")
            }
            None => println!("| {name} | (no server) | | | |"),
        }
    }
    Ok(())
}
