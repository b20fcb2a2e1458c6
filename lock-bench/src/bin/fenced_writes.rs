//! A fenced write against a plain one, per store: latency (p50, p99 and the
//! ratio of medians, the two kinds interleaved in one run) and requests per
//! write. On DynamoDB (`LOCK_DYNAMODB_ENDPOINT`), S3 (`LOCK_S3_ENDPOINT`)
//! and PostgreSQL (`LOCK_POSTGRES_URL`), each where its variable is set;
//! `./scripts/bench-fencing` starts moto and a PostgreSQL
//! cluster and sets them.
//!
//! * DynamoDB: one `UpdateItem` of an item, with and without the fence's
//!   condition and `SET` (`lock_dynamodb::Fenced`).
//! * PostgreSQL: a transaction (`BEGIN`, `UPDATE`, `COMMIT`), with and
//!   without the fence function's call before the `UPDATE`
//!   (`FenceGuard::admit`).
//! * S3: a `PUT` of a small object, against `FencedObjects::put` (a `HEAD`,
//!   then a conditional `PUT`).
//!
//! ```sh
//! cargo run -p lock-bench --release --bin fenced_writes
//! ```

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use lock_bench::{BenchError, machine};
use lock_core::{Fence, LockKey};
use lock_dynamodb::{Fenced, ItemFence};
use lock_object_store::object_store::path::Path;
use lock_object_store::object_store::{ObjectStore, PutOptions, PutPayload};
use lock_object_store::{BucketStore, FencedObjects};
use lock_postgres::PostgresStore;
use tokio::time::Instant;

/// Writes of each kind, interleaved.
const ROUNDS: usize = 300;

/// Latencies of the plain and the fenced writes.
#[derive(Default)]
struct Pair {
    plain: Vec<Duration>,
    fenced: Vec<Duration>,
}

impl Pair {
    fn row(mut self, store: &str, requests: &str) -> String {
        self.plain.sort();
        self.fenced.sort();
        let at = |list: &[Duration], q: f64| list[((list.len() - 1) as f64 * q) as usize];
        let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
        let ratio = at(&self.fenced, 0.5).as_secs_f64() / at(&self.plain, 0.5).as_secs_f64();
        format!(
            "| {store} | {requests} | {} | {} | {} | {} | {ratio:.2}× |",
            ms(at(&self.plain, 0.5)),
            ms(at(&self.plain, 0.99)),
            ms(at(&self.fenced, 0.5)),
            ms(at(&self.fenced, 0.99)),
        )
    }
}

/// Time `plain` and `fenced` writes, interleaved (the order swapped each
/// round, so neither always runs on a warmer connection).
async fn measure<P, F, PF, FF>(mut plain: P, mut fenced: F) -> Result<Pair, BenchError>
where
    P: FnMut(usize) -> PF,
    F: FnMut(usize) -> FF,
    PF: Future<Output = Result<(), BenchError>>,
    FF: Future<Output = Result<(), BenchError>>,
{
    let mut pair = Pair::default();
    for round in 0..ROUNDS + 20 {
        let warm = round >= 20;
        for second in [false, true] {
            let fenced_turn = (round % 2 == 0) == second;
            let started = Instant::now();
            if fenced_turn {
                fenced(round).await?;
            } else {
                plain(round).await?;
            }
            let took = started.elapsed();
            if warm {
                if fenced_turn {
                    pair.fenced.push(took);
                } else {
                    pair.plain.push(took);
                }
            }
        }
    }
    Ok(pair)
}

async fn dynamodb(endpoint: &str) -> Result<String, BenchError> {
    let config = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "testing", "testing", None, None, "bench",
        ))
        .endpoint_url(endpoint)
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let table = format!("fenced-{}", std::process::id());
    client
        .create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await?;
    let key = LockKey::new("orders");
    let update = |id: &'static str, round: usize| {
        client
            .update_item()
            .table_name(&table)
            .key("id", AttributeValue::S(id.into()))
            .update_expression("SET writes = :n")
            .expression_attribute_values(":n", AttributeValue::N(round.to_string()))
    };
    let pair = measure(
        |round| {
            let request = update("plain", round);
            async move {
                request.send().await?;
                Ok(())
            }
        },
        |round| {
            let fence = ItemFence::new("fenced", &key, Fence(round as u64 + 1));
            let request = update("fenced", round);
            async move {
                request.fenced(&fence?).send().await?;
                Ok(())
            }
        },
    )
    .await?;
    client.delete_table().table_name(&table).send().await?;
    Ok(pair.row("DynamoDB (moto), UpdateItem", "1 / 1"))
}

async fn postgres(url: &str) -> Result<String, BenchError> {
    let table = format!("fenced_{}", std::process::id());
    let store = PostgresStore::builder(&table).build_from_url(url)?;
    let guard = store.create_fence_guard().await?;
    let (mut db, connection) =
        lock_postgres::tokio_postgres::connect(url, lock_postgres::tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let rows = format!("{table}_rows");
    db.batch_execute(&format!(
        "CREATE TABLE {rows} (id text PRIMARY KEY, writes bigint NOT NULL);
         INSERT INTO {rows} VALUES ('plain', 0), ('fenced', 0);"
    ))
    .await?;
    let update = format!("UPDATE {rows} SET writes = $1 WHERE id = $2");
    let key = LockKey::new("orders");
    let db = tokio::sync::Mutex::new(&mut db);
    let pair = measure(
        |round| {
            let (db, update) = (&db, &update);
            async move {
                let mut db = db.lock().await;
                let transaction = db.transaction().await?;
                transaction
                    .execute(update.as_str(), &[&(round as i64), &"plain"])
                    .await?;
                transaction.commit().await?;
                Ok(())
            }
        },
        |round| {
            let (db, update, guard, key) = (&db, &update, &guard, &key);
            async move {
                let mut db = db.lock().await;
                let transaction = db.transaction().await?;
                guard
                    .admit(&transaction, "rows/fenced", key, Fence(round as u64 + 1))
                    .await?;
                transaction
                    .execute(update.as_str(), &[&(round as i64), &"fenced"])
                    .await?;
                transaction.commit().await?;
                Ok(())
            }
        },
    )
    .await?;
    db.lock()
        .await
        .batch_execute(&format!(
            "DROP TABLE {rows}; DROP TABLE {table}_fences; DROP FUNCTION {table}_admit_fence"
        ))
        .await?;
    Ok(pair.row("PostgreSQL (local), a transaction", "3 statements / 4"))
}

async fn s3(endpoint: &str) -> Result<String, BenchError> {
    lock_testkit::moto_bucket(endpoint, "lock-bench")?;
    let store = BucketStore::builder()
        .option("aws_endpoint", endpoint)
        .option("aws_allow_http", "true")
        .option("aws_region", "us-east-1")
        .option("aws_access_key_id", "testing")
        .option("aws_secret_access_key", "testing")
        .build_from_url(&format!("s3://lock-bench/fenced-{}", std::process::id()))?;
    let objects: Arc<dyn ObjectStore> = store.object_store().clone();
    let fenced: FencedObjects = store.fenced_objects();
    let plain_path = Path::from(format!("data-{}/plain", std::process::id()));
    let fenced_path = format!("data-{}/fenced", std::process::id());
    let key = LockKey::new("orders");
    let pair = measure(
        |round| {
            let (objects, path) = (&objects, &plain_path);
            async move {
                objects
                    .put_opts(
                        path,
                        PutPayload::from(round.to_string()),
                        PutOptions::default(),
                    )
                    .await?;
                Ok(())
            }
        },
        |round| {
            let (fenced, path, key) = (&fenced, &fenced_path, &key);
            async move {
                fenced
                    .put(path, round.to_string(), key, Fence(round as u64 + 1))
                    .await?;
                Ok(())
            }
        },
    )
    .await?;
    Ok(pair.row("S3 (moto), a small object", "1 PUT / 1 HEAD + 1 PUT"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BenchError> {
    println!(
        "fenced against plain writes, {ROUNDS} of each interleaved, {}",
        machine()
    );
    println!();
    println!(
        "| store, write | requests (plain / fenced) | plain p50 | plain p99 | fenced p50 | fenced p99 | fenced / plain (p50) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    if let Ok(endpoint) = std::env::var("LOCK_DYNAMODB_ENDPOINT") {
        println!("{}", dynamodb(&endpoint).await?);
    }
    if let Ok(url) = std::env::var("LOCK_POSTGRES_URL") {
        println!("{}", postgres(&url).await?);
    }
    if let Ok(endpoint) = std::env::var("LOCK_S3_ENDPOINT") {
        println!("{}", s3(&endpoint).await?);
    }
    Ok(())
}
