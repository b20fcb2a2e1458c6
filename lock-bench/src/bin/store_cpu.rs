//! Client CPU per request through the real DynamoDB store: one heartbeat-shaped
//! conditional `UpdateItem` after another on a kept-alive connection, against the
//! canned responder (`lock_bench::canned`, in a child process, so its CPU is not
//! counted). Side by side in one run, interleaved in rounds:
//!
//! * `DynamoDbStore::put`: what a heartbeat costs the client;
//! * the bare SDK call the store makes (same request, built by hand, with the
//!   single-attempt override the store applies per call): what the SDK costs,
//!   and what the store adds on top;
//! * the same with the SDK's stalled-stream protection on (the store turns it
//!   off): what that costs.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin store_cpu              # 20,000 requests per variant
//! cargo run -p lock-bench --release --bin store_cpu -- 50000
//! ```
//!
//! CPU is this process's user + system time over each round
//! (`/proc/self/task/*/schedstat`), on a current-thread runtime.

use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use lock_bench::BenchError;
use lock_core::{ConditionalStore, DataUpdate, Expect, FenceUpdate, LockKey, NewRecord, Rvn};
use lock_dynamodb::DynamoDbStore;

const ROUNDS: usize = 5;

fn record(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released: false,
        fence: FenceUpdate::Keep,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

/// One variant's calls, `n` of them: through the store, or the same request
/// built by hand on `client`.
async fn calls(
    variant: &str,
    store: &DynamoDbStore,
    client: &aws_sdk_dynamodb::Client,
    n: usize,
) -> Result<(), BenchError> {
    let key = LockKey::new("bench-lock");
    let layout = store.layout();
    let mut rvn = Rvn::fresh();
    for _ in 0..n {
        let new = record("bench-owner-0123abcd");
        if variant == "store" {
            store
                .put(&key, Expect::Version(rvn.clone()), new.clone())
                .await?;
        } else {
            client
                .update_item()
                .table_name(store.table())
                .key(
                    layout.partition_key(),
                    AttributeValue::S(key.partition().into()),
                )
                .update_expression("SET #owner = :owner, #rvn = :rvn, #lease = :lease")
                .condition_expression("#rvn = :expected")
                .expression_attribute_names("#owner", layout.owner())
                .expression_attribute_names("#rvn", layout.rvn())
                .expression_attribute_names("#lease", layout.lease().0)
                .expression_attribute_values(":owner", AttributeValue::S(new.owner.clone()))
                .expression_attribute_values(":rvn", AttributeValue::S(new.rvn.as_str().into()))
                .expression_attribute_values(":lease", AttributeValue::N("20000".into()))
                .expression_attribute_values(":expected", AttributeValue::S(rvn.as_str().into()))
                .return_values(ReturnValue::AllNew)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .customize()
                .config_override(
                    aws_sdk_dynamodb::config::Builder::default()
                        .retry_config(RetryConfig::disabled()),
                )
                .send()
                .await?;
        }
        rvn = new.rvn;
    }
    Ok(())
}

async fn measure(endpoint: &str, n: usize) -> Result<(), BenchError> {
    let store = lock_bench::canned::store(endpoint)?;
    // The SDK as the store configures it, and with the SDK's default
    // stalled-stream protection (which the store turns off).
    let configured = store.client().clone();
    let protected = aws_sdk_dynamodb::Client::from_conf(
        store
            .client()
            .config()
            .to_builder()
            .stalled_stream_protection(
                aws_sdk_dynamodb::config::StalledStreamProtectionConfig::enabled().build(),
            )
            .build(),
    );
    let variants = ["store", "sdk", "sdk protected"];
    let client_for = |variant: &str| {
        if variant == "sdk protected" {
            &protected
        } else {
            &configured
        }
    };
    // Warm up: connections, identity, endpoint, allocator.
    for variant in variants {
        calls(variant, &store, client_for(variant), 1000).await?;
    }
    let mut cpu = vec![Vec::new(); variants.len()];
    for _ in 0..ROUNDS {
        for (i, variant) in variants.iter().enumerate() {
            let before = lock_bench::threads_cpu()?;
            calls(variant, &store, client_for(variant), n / ROUNDS).await?;
            let used = lock_bench::threads_cpu()? - before;
            cpu[i].push(used.as_secs_f64() * 1e6 / (n / ROUNDS) as f64);
        }
    }
    println!(
        "Client CPU per conditional UpdateItem, kept-alive connection, canned responder in another process; {n} requests per variant in {ROUNDS} interleaved rounds; {}",
        lock_bench::machine()
    );
    println!();
    println!("| path | CPU per request, median of rounds (min–max) | ratio to the bare SDK call |");
    println!("| --- | --- | --- |");
    let sdk = lock_bench::median(&mut cpu[1].clone());
    for (i, variant) in variants.iter().enumerate() {
        let mut rounds = cpu[i].clone();
        let median = lock_bench::median(&mut rounds);
        let min = rounds.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rounds.iter().copied().fold(0.0, f64::max);
        let name = match *variant {
            "store" => "`DynamoDbStore::put` (a heartbeat)",
            "sdk" => "bare SDK `update_item`, the same request, the store's SDK settings",
            _ => "bare SDK `update_item` with the SDK's stalled-stream protection on",
        };
        println!(
            "| {name} | {median:.1} µs ({min:.1}–{max:.1}) | {:.2}× |",
            median / sdk
        );
    }
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve") {
        // The child: serve the canned responder until killed.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        return runtime.block_on(lock_bench::canned::serve_child());
    }
    let n: usize = match args.first() {
        Some(n) => n.parse()?,
        None => 20_000,
    };
    let mut child = lock_bench::canned::spawn_child("--serve")?;
    let endpoint = child.endpoint.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(measure(&endpoint, n));
    child.stop();
    result
}
