//! Fencing drills with real processes for the Rust API, on PostgreSQL,
//! DynamoDB (moto) and S3 (moto): holder A (a process of its own, this test
//! binary started again as `fence_drill_worker`) acquires with a 2 s lease
//! and is frozen with SIGSTOP; B (another such process) takes over and
//! writes the resource with its fence; A is resumed and writes with its old
//! fence: refused, and the resource keeps B's write. (`lockctl run` and
//! Python run the same drill in `postgres.rs` and the Python tests.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use lock_core::{AcquireOptions, Fence, FenceRefused, LockClient, LockKey};
use lock_dynamodb::{DynamoDbStore, FailedItem, Fenced, ItemFence, TableOptions};
use lock_object_store::{BucketStore, FencedObjects, ObjectFenceError};
use lock_postgres::{FenceError, PostgresStore};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// The worker's instructions, as JSON, in this variable.
const WORKER: &str = "LOCK_FENCE_DRILL_WORKER";
const LIMIT: Duration = Duration::from_secs(60);
const BUCKET: &str = "lock-tests";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn sdk(endpoint: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(sdk_config(endpoint).build())
}

fn bucket_store(spec: &Value) -> BucketStore {
    BucketStore::builder()
        .option("aws_endpoint", spec["endpoint"].as_str().unwrap())
        .option("aws_allow_http", "true")
        .option("aws_region", "us-east-1")
        .option("aws_access_key_id", "testing")
        .option("aws_secret_access_key", "testing")
        .build_from_url(spec["url"].as_str().unwrap())
        .unwrap()
}

/// The lock client of a worker, on the drill's store.
fn lock_client(spec: &Value) -> LockClient {
    let lease = Duration::from_secs(2);
    match spec["store"].as_str().unwrap() {
        "postgres" => {
            let store = PostgresStore::builder(spec["table"].as_str().unwrap())
                .build_from_url(spec["url"].as_str().unwrap())
                .unwrap();
            LockClient::builder(store).lease(lease).build().unwrap()
        }
        "dynamodb" => {
            let store = DynamoDbStore::builder(spec["table"].as_str().unwrap())
                .build_with_config(sdk_config(spec["endpoint"].as_str().unwrap()))
                .unwrap();
            LockClient::builder(store).lease(lease).build().unwrap()
        }
        _ => LockClient::builder(bucket_store(spec))
            .lease(lease)
            .build()
            .unwrap(),
    }
}

fn sdk_config(endpoint: &str) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "testing", "testing", None, None, "drill",
        ))
        .endpoint_url(endpoint)
}

/// Write the resource as `writer` with `fence` of `key`: `Ok(true)` if
/// written, `Ok(false)` if the fence was refused as stale.
async fn fenced_write(spec: &Value, key: &LockKey, fence: Fence, writer: &str) -> bool {
    let resource = spec["resource"].as_str().unwrap();
    match spec["store"].as_str().unwrap() {
        "postgres" => {
            let url = spec["url"].as_str().unwrap();
            let store = PostgresStore::builder(spec["table"].as_str().unwrap())
                .build_from_url(url)
                .unwrap();
            let guard = store.fence_guard().unwrap();
            let (mut db, connection) =
                lock_postgres::tokio_postgres::connect(url, lock_postgres::tokio_postgres::NoTls)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let transaction = db.transaction().await.unwrap();
            match guard.admit(&transaction, "orders/1", key, fence).await {
                Ok(_) => {}
                Err(FenceError::Refused(FenceRefused::Stale { .. })) => return false,
                Err(other) => panic!("{other}"),
            }
            transaction
                .execute(
                    &format!(
                        "INSERT INTO {resource} (id, writer) VALUES (1, $1) \
                         ON CONFLICT (id) DO UPDATE SET writer = EXCLUDED.writer"
                    ),
                    &[&writer],
                )
                .await
                .unwrap();
            transaction.commit().await.unwrap();
            true
        }
        "dynamodb" => {
            let item = ItemFence::new("order 1", key, fence).unwrap();
            let written = sdk(spec["endpoint"].as_str().unwrap())
                .update_item()
                .table_name(resource)
                .key("id", AttributeValue::S("1".into()))
                .update_expression("SET writer = :w")
                .expression_attribute_values(":w", AttributeValue::S(writer.into()))
                .fenced(&item)
                .send()
                .await;
            match written {
                Ok(_) => true,
                Err(error) => {
                    let failed = error.as_service_error().and_then(FailedItem::failed_item);
                    assert!(
                        matches!(item.refusal(failed), Some(FenceRefused::Stale { .. })),
                        "{error:?}"
                    );
                    false
                }
            }
        }
        _ => match bucket_store(spec)
            .fenced_objects()
            .put(resource, writer.to_owned(), key, fence)
            .await
        {
            Ok(_) => true,
            Err(ObjectFenceError::Refused(FenceRefused::Stale { .. })) => false,
            Err(other) => panic!("{other}"),
        },
    }
}

/// A drill's holder, when this binary is started as one.
#[test]
#[ignore = "a holder process of the drills below, started by them"]
fn fence_drill_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return;
    };
    let spec: Value = serde_json::from_str(&spec).unwrap();
    let file = |name: &str| Path::new(spec["dir"].as_str().unwrap()).join(name);
    let writer = spec["writer"].as_str().unwrap().to_owned();
    runtime().block_on(async {
        let client = lock_client(&spec);
        let guard = client
            .acquire(
                "orders",
                AcquireOptions::new().wait(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        let (key, fence) = (guard.key().clone(), guard.fence());
        std::fs::write(file(&format!("{writer}.ready")), fence.get().to_string()).unwrap();
        while !file("go").exists() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let written = fenced_write(&spec, &key, fence, &writer).await;
        let outcome = if written { "ok" } else { "stale" };
        std::fs::write(file(&format!("{writer}.result")), outcome).unwrap();
        drop(guard);
        let _ = client.shutdown().await;
    });
}

/// Start this binary as a holder named `writer`.
fn holder(spec: &Value, writer: &str) -> std::process::Child {
    let mut spec = spec.clone();
    spec["writer"] = json!(writer);
    Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "fence_drill_worker", "--nocapture"])
        .env(WORKER, spec.to_string())
        .spawn()
        .unwrap()
}

/// The drill on `spec`'s store; the resource's last writer afterwards.
fn drill(spec: Value) -> String {
    let dir = Path::new(spec["dir"].as_str().unwrap()).to_owned();
    let mut a = holder(&spec, "A");
    let a_fence: u64 = support::wait_for_file(&dir.join("A.ready"), LIMIT)
        .parse()
        .unwrap();
    kill(Pid::from_raw(a.id() as i32), Signal::SIGSTOP).unwrap();
    std::fs::write(dir.join("go"), "").unwrap();
    let mut b = holder(&spec, "B");
    let b_fence: u64 = support::wait_for_file(&dir.join("B.ready"), LIMIT)
        .parse()
        .unwrap();
    assert_eq!(support::wait_for_file(&dir.join("B.result"), LIMIT), "ok");
    assert!(b.wait().unwrap().success());
    assert!(b_fence > a_fence, "B's fence {b_fence} after A's {a_fence}");
    kill(Pid::from_raw(a.id() as i32), Signal::SIGCONT).unwrap();
    assert_eq!(
        support::wait_for_file(&dir.join("A.result"), LIMIT),
        "stale",
        "A's late write was refused"
    );
    assert!(a.wait().unwrap().success());
    spec["store"].as_str().unwrap().to_owned()
}

fn scratch(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("fence-drill-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.display().to_string()
}

#[test]
fn postgres_a_frozen_holders_late_write_is_refused() {
    let Some(url) = support::postgres_url() else {
        return;
    };
    let table = format!("drill_{}", uuid::Uuid::new_v4().simple());
    let resource = format!("{table}_orders");
    runtime().block_on(async {
        let store = PostgresStore::builder(&table).build_from_url(&url).unwrap();
        store.create_schema().await.unwrap();
        store.create_fence_guard().await.unwrap();
        let (db, connection) =
            lock_postgres::tokio_postgres::connect(&url, lock_postgres::tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        db.execute(
            &format!("CREATE TABLE {resource} (id int PRIMARY KEY, writer text NOT NULL)"),
            &[],
        )
        .await
        .unwrap();
    });
    drill(json!({
        "store": "postgres", "url": url, "table": table, "resource": resource, "dir": scratch("pg"),
    }));
    let writer: String = runtime().block_on(async {
        let (db, connection) =
            lock_postgres::tokio_postgres::connect(&url, lock_postgres::tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        db.query_one(&format!("SELECT writer FROM {resource} WHERE id = 1"), &[])
            .await
            .unwrap()
            .get(0)
    });
    assert_eq!(writer, "B");
}

#[test]
fn dynamodb_a_frozen_holders_late_write_is_refused() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let table = format!("drill-{}", uuid::Uuid::new_v4().simple());
    let resource = format!("orders-{}", uuid::Uuid::new_v4().simple());
    let client = sdk(&endpoint);
    runtime().block_on(async {
        DynamoDbStore::builder(&table)
            .build_with_config(sdk_config(&endpoint))
            .unwrap()
            .create_table(TableOptions::default())
            .await
            .unwrap();
        client
            .create_table()
            .table_name(&resource)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await
            .unwrap();
    });
    drill(json!({
        "store": "dynamodb", "endpoint": endpoint, "table": table, "resource": resource,
        "dir": scratch("dynamodb"),
    }));
    let item = runtime().block_on(async {
        client
            .get_item()
            .table_name(&resource)
            .key("id", AttributeValue::S("1".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap()
    });
    assert_eq!(item["writer"], AttributeValue::S("B".into()));
}

#[test]
fn s3_a_frozen_holders_late_write_is_refused() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    lock_testkit::moto_bucket(&endpoint, BUCKET).unwrap();
    let prefix = format!("drill-{}", uuid::Uuid::new_v4().simple());
    let spec = json!({
        "store": "bucket", "endpoint": endpoint, "url": format!("s3://{BUCKET}/{prefix}"),
        "resource": format!("data-{prefix}/orders/1"), "dir": scratch("s3"),
    });
    drill(spec.clone());
    let objects: FencedObjects = bucket_store(&spec).fenced_objects();
    let (bytes, _) = runtime()
        .block_on(objects.get(spec["resource"].as_str().unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(&bytes[..], b"B");
}

/// One name for a reader-writer lock's fences on every surface: a writer of
/// the Rust API and `lockctl run --exclusive` (the key and fence its command
/// is given) on one lock write one object in fence order, and a late fence
/// is refused as stale, never as another lock's. A `--shared` run presents
/// the same name, with the last writer's fence.
#[test]
fn rust_and_lockctl_writers_of_one_rw_lock_fence_under_one_name() {
    let Some(env) = support::Env::bucket("rw-fence") else {
        return;
    };
    let target = env.target_args();
    let spec = json!({
        "store": "bucket", "endpoint": env.endpoint, "url": target[1],
        "resource": format!("data-{}/config", uuid::Uuid::new_v4().simple()),
    });
    let rust_writer = |name: &str| {
        runtime().block_on(async {
            let client = lock_client(&spec);
            let lock = client.rw_lock("config", 4).unwrap();
            let write = lock
                .write(AcquireOptions::new().wait(Duration::from_secs(30)))
                .await
                .unwrap();
            let (key, fence) = (write.key().clone(), write.fence());
            assert!(fenced_write(&spec, &key, fence, name).await, "{name}");
            write.release().await.unwrap();
            client.shutdown().await.unwrap();
            (key, fence)
        })
    };
    // What a command under `lockctl run` passes to a fence check: its
    // lock's name (LOCK_FENCE_KEY; LOCK_KEY is all lockctl gave before) and
    // LOCK_FENCE.
    let lockctl = |mode: &str| {
        let seen = env.path(&format!("{mode}.seen"));
        let script = format!(
            "printf '%s %s' \"${{LOCK_FENCE_KEY:-$LOCK_KEY}}\" \"$LOCK_FENCE\" > {}",
            seen.display()
        );
        let out = env.run(&[
            "run",
            "config",
            mode,
            "--readers",
            "4",
            "--wait",
            "30s",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let seen = std::fs::read_to_string(&seen).unwrap();
        let (key, fence) = seen.rsplit_once(' ').unwrap();
        (LockKey::parse(key).unwrap(), Fence(fence.parse().unwrap()))
    };

    let (rust_key, first) = rust_writer("rust-1");
    let (key, fence) = lockctl("--exclusive");
    assert!(fence > first);
    // Admitted after the Rust writer's fence (refused as another lock's
    // before: lockctl named the lock `config`, the Rust writer
    // `config/writer`).
    assert!(runtime().block_on(fenced_write(&spec, &key, fence, "lockctl")));
    assert_eq!(
        key, rust_key,
        "lockctl's writer fences under the Rust writer's name"
    );
    assert_eq!(
        lockctl("--shared"),
        (rust_key.clone(), fence),
        "a reader: the last writer's"
    );
    let (_, third) = rust_writer("rust-2");
    assert!(third > fence);
    // lockctl's writer, late: stale.
    assert!(!runtime().block_on(fenced_write(&spec, &key, fence, "late")));
}
