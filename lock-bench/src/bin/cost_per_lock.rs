//! What holding locks on DynamoDB costs: the size of each write's item on every
//! table layout (by `DynamoDbStore::item_size`, which sends nothing), the write
//! request units per lock-hour at the lock client's default timings, and what
//! 1, 100 and 10,000 locks held around the clock cost per month in on-demand
//! capacity.
//!
//! ```sh
//! cargo run -p lock-bench --release --bin cost_per_lock
//! ```
//!
//! Prints Markdown tables. The price is an input (`PRICE_PER_MILLION_WRU`,
//! US East (N. Virginia) on-demand, set below); the rest is measured.

use std::time::Duration;

use lock_bench::BenchError;
use lock_core::{DataUpdate, FenceUpdate, LockClient, LockKey, NewRecord, Rvn};
use lock_dynamodb::{DynamoDbStore, Layout};
use lock_memory::MemoryStore;

/// On-demand write request units, US East (N. Virginia), US dollars per
/// million: AWS's DynamoDB pricing page since the on-demand price cut of
/// November 2024 (was 1.25).
const PRICE_PER_MILLION_WRU: f64 = 0.625;

/// Strongly consistent reads (a waiter's poll), same page: per million RRU.
const PRICE_PER_MILLION_RRU: f64 = 0.125;

/// Hours in a month as AWS bills them.
const HOURS_PER_MONTH: f64 = 730.0;

/// One write request unit covers an item of up to this many bytes.
const WRU_BYTES: usize = 1024;

fn write(owner: &str, released: bool, fence: FenceUpdate, data: DataUpdate) -> NewRecord {
    NewRecord {
        owner: owner.to_owned(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released,
        fence,
        data,
        expires_at: None,
    }
}

fn store(layout: Layout) -> Result<DynamoDbStore, BenchError> {
    // Built offline: `item_size` sends nothing.
    let config = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    DynamoDbStore::builder("locks")
        .layout(layout)
        .build_with_config(config)
        .map_err(|error| BenchError::from(format!("store: {error}")))
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(WRU_BYTES).max(1)
}

fn main() -> Result<(), BenchError> {
    // The owner name a default client writes (host name + random suffix),
    // and a realistic key.
    let defaults = LockClient::builder(MemoryStore::new())
        .build()
        .map_err(|error| BenchError::from(format!("client: {error}")))?;
    let owner = defaults.owner().to_owned();
    let heartbeat_period = defaults.heartbeat_period();
    let lease = defaults.lease();
    let key = LockKey::new("nightly-report-eu-west-1");
    println!(
        "owner {owner:?} ({} bytes), key {key} ({} bytes), lease {lease:?}, heartbeat every {heartbeat_period:?}\n",
        owner.len(),
        key.partition().len()
    );

    let layouts = [
        ("native", Layout::native()),
        ("python-dynamodb-lock", Layout::python_dynamodb_lock()),
        ("Java lock client", Layout::java_lock_client()),
    ];
    let data_sizes = [0usize, 200, 900, 4000];
    println!("## Item size per write (bytes, at most) and write units\n");
    print!("| layout | acquire / heartbeat, no data |");
    for size in &data_sizes[1..] {
        print!(" with {size} B of data |");
    }
    println!(" release |");
    println!(
        "| --- | --- |{} --- |",
        " --- |".repeat(data_sizes.len() - 1)
    );
    let mut heartbeat_units = Vec::new();
    for (name, layout) in &layouts {
        let store = store(layout.clone())?;
        let size = |data: usize, released: bool| {
            let data = if data == 0 {
                DataUpdate::Keep
            } else {
                DataUpdate::Replace(vec![b'x'; data])
            };
            store
                .item_size(&key, &write(&owner, released, FenceUpdate::Keep, data))
                .map_err(|error| BenchError::from(format!("{name}: {error}")))
        };
        let bare = size(0, false)?;
        heartbeat_units.push((*name, units(bare)));
        print!("| {name} | {bare} B, {} WRU |", units(bare));
        for data in &data_sizes[1..] {
            let with = size(*data, false)?;
            print!(" {with} B, {} WRU |", units(with));
        }
        let release = size(0, true)?;
        println!(" {release} B, {} WRU |", units(release));
    }

    let writes_per_hour = 3600.0 / heartbeat_period.as_secs_f64();
    println!(
        "\n## Holding locks around the clock (lease {lease:?}, a heartbeat every {heartbeat_period:?}: {writes_per_hour:.0} writes per lock-hour)\n"
    );
    println!(
        "| layout | WRU per lock-hour | 1 lock / month | 100 locks / month | 10,000 locks / month |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (name, units) in heartbeat_units {
        let per_hour = writes_per_hour * units as f64;
        let per_month = per_hour * HOURS_PER_MONTH * PRICE_PER_MILLION_WRU / 1e6;
        println!(
            "| {name} | {per_hour:.0} | ${per_month:.2} | ${:.2} | ${:.0} |",
            per_month * 100.0,
            per_month * 10_000.0
        );
    }
    // A waiter sleeps between half and all of its refresh period (1 s by
    // default) before each poll, 0.75 s on average.
    let polls_per_hour = 3600.0 / 0.75;
    let waiter_month = polls_per_hour * HOURS_PER_MONTH * PRICE_PER_MILLION_RRU / 1e6;
    println!(
        "\nA client waiting for a lock reads it every 0.5-1 s (the refresh period, 1 s by default, jittered): \
         about {polls_per_hour:.0} RRU per waiting hour, ${waiter_month:.2} per month of waiting, around the clock."
    );
    println!(
        "Prices: ${PRICE_PER_MILLION_WRU} per million write and ${PRICE_PER_MILLION_RRU} per million read request units (on-demand, US East), {HOURS_PER_MONTH} hours a month."
    );
    Ok(())
}
