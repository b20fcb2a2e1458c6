//! lock-dynamodb against a real DynamoDB emulator (moto, started by
//! `./scripts/test`). Every test makes its own table, so they run in parallel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TimeToLiveStatus,
};
use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockClient,
    LockError, LockKey, NewRecord, Outcome, Rvn, StoreErrorKind,
};
use lock_dynamodb::{DynamoDbStore, Layout, TableError, TableOptions, Timeouts};
use lock_memory::FaultyStore;
use support::{
    CallCounter, FaultInjector, HttpFault, client, fresh_store, fresh_store_with, same_table,
};
use tokio::sync::Barrier;

fn write(owner: &str, released: bool, fence: FenceUpdate) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(10),
        released,
        fence,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

fn applied(outcome: Outcome) -> lock_core::LockRecord {
    match outcome {
        Outcome::Applied(record) => record,
        other => panic!("expected the write to apply, got {other:?}"),
    }
}

async fn raw_item(
    store: &DynamoDbStore,
    key: &[(&str, &str)],
) -> Option<HashMap<String, AttributeValue>> {
    let mut request = store
        .client()
        .get_item()
        .table_name(store.table())
        .consistent_read(true);
    for (name, value) in key {
        request = request.key(*name, AttributeValue::S((*value).into()));
    }
    request.send().await.unwrap().item().cloned()
}

// ---------------------------------------------------------------- the emulator itself

/// Writers per trial of the create race below. As many as the conformance
/// suite's `compare_and_set_race`: against `moto_server`, 12 writers found a
/// second winner about four times as often as 6 or 8 did.
const RACE_WRITERS: usize = 12;
/// Trials of the create race (`LOCK_EMULATOR_TRIALS` overrides it).
const RACE_TRIALS: usize = 100;

/// A strongly consistent read of `key` in the race's table.
async fn race_read(
    sdk: &aws_sdk_dynamodb::Client,
    table: &str,
    key: &str,
) -> Result<Option<HashMap<String, AttributeValue>>, String> {
    let output = sdk
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|error| format!("read of {key}: {}", DisplayErrorContext(&error)))?;
    Ok(output.item().cloned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Create {
    Won,
    Refused,
}

/// Every test here takes the store's conditional writes to be atomic, as they are
/// on DynamoDB: of several writers creating one key, exactly one wins, and nobody
/// sees the item half-written. moto's own server does not guarantee it (each
/// request runs on its own thread and `UpdateItem` checks its condition and writes
/// in separate steps), which is why `./scripts/test` serves moto one request at a
/// time (docs/testing.md). Against plain `moto_server` this race finds a second
/// winner in about one trial in 50 (one in six when moto's Python threads are
/// made to switch more often), so most runs fail; behind the lock none has.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_conditional_creates_of_one_key_have_exactly_one_winner() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let trials = std::env::var("LOCK_EMULATOR_TRIALS")
        .ok()
        .map(|n| n.parse::<usize>().expect("LOCK_EMULATOR_TRIALS is a count"))
        .unwrap_or(RACE_TRIALS);
    let sdk = aws_sdk_dynamodb::Client::from_conf(
        support::sdk_config(&endpoint)
            // One attempt per write: a retried create would be refused by its own
            // first attempt, and every error that is not a refusal must show.
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_secs(5))
                    .build(),
            )
            .build(),
    );
    let table = support::table_name("race");
    sdk.create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();

    // Trials with other than one winner (and who won), and trials in which a
    // concurrent reader saw the item before it had its owner.
    let mut not_one_winner = Vec::new();
    let mut half_written = Vec::new();
    for trial in 0..trials {
        let key = format!("key-{trial}");
        // Every writer and the reader send their request once all are ready, so
        // the requests reach the server together.
        let start = Arc::new(Barrier::new(RACE_WRITERS + 1));
        let writers: Vec<_> = (0..RACE_WRITERS)
            .map(|writer| {
                let (sdk, table, key, start) =
                    (sdk.clone(), table.clone(), key.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    // A third of the writers start at once, the others 1 or 2 ms
                    // later (about one request's service time), so that requests
                    // also arrive while others are half-way through.
                    tokio::time::sleep(Duration::from_millis(writer as u64 % 3)).await;
                    let result = sdk
                        .update_item()
                        .table_name(table)
                        .key("pk", AttributeValue::S(key))
                        .update_expression("SET #owner = :me")
                        .condition_expression("attribute_not_exists(pk)")
                        .expression_attribute_names("#owner", "owner")
                        .expression_attribute_values(":me", AttributeValue::S(format!("w{writer}")))
                        .send()
                        .await;
                    match result {
                        Ok(_) => Ok(Create::Won),
                        Err(error)
                            if error.as_service_error().is_some_and(
                                UpdateItemError::is_conditional_check_failed_exception,
                            ) =>
                        {
                            Ok(Create::Refused)
                        }
                        Err(error) => {
                            Err(format!("writer w{writer}: {}", DisplayErrorContext(&error)))
                        }
                    }
                })
            })
            .collect();
        let reader = {
            let (sdk, table, key, start) = (sdk.clone(), table.clone(), key.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                let mut owners = Vec::new();
                for _ in 0..3 {
                    if let Some(item) = race_read(&sdk, &table, &key).await? {
                        owners.push(item.get("owner").cloned());
                    }
                }
                Ok::<_, String>(owners)
            })
        };
        let (outcomes, seen) = tokio::time::timeout(Duration::from_secs(10), async {
            let mut outcomes = Vec::new();
            for writer in writers {
                outcomes.push(writer.await.unwrap());
            }
            (outcomes, reader.await.unwrap())
        })
        .await
        .unwrap_or_else(|_| panic!("trial {trial} did not finish within 10 s"));
        let outcomes: Vec<Create> = outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|error| panic!("trial {trial}: {error}")))
            .collect();
        let seen = seen.unwrap_or_else(|error| panic!("trial {trial}: {error}"));

        let winners: Vec<String> = (0..RACE_WRITERS)
            .filter(|&w| outcomes[w] == Create::Won)
            .map(|w| format!("w{w}"))
            .collect();
        if seen.iter().any(Option::is_none) {
            half_written.push(trial);
        }
        if let [winner] = winners.as_slice() {
            let stored =
                tokio::time::timeout(Duration::from_secs(10), race_read(&sdk, &table, &key))
                    .await
                    .expect("the read answers within 10 s")
                    .unwrap();
            assert_eq!(
                stored.as_ref().and_then(|item| item.get("owner")),
                Some(&AttributeValue::S(winner.clone())),
                "trial {trial}: the stored item is the winner's"
            );
        } else {
            not_one_winner.push((trial, winners));
        }
    }
    println!(
        "{trials} trials of {RACE_WRITERS} concurrent conditional creates of one key: \
         {} without exactly one winner, {} in which a reader saw an item without its owner",
        not_one_winner.len(),
        half_written.len()
    );
    assert!(
        not_one_winner.is_empty(),
        "of {trials} trials, these had other than one winner (trial, winners): {not_one_winner:?}"
    );
    assert!(
        half_written.is_empty(),
        "of {trials} trials, in these a reader saw the item holding only its key: {half_written:?}"
    );
    sdk.delete_table().table_name(&table).send().await.unwrap();
}

// ---------------------------------------------------------------- store operations
// (Each operation's outcomes on every layout are the conformance suite's, below.)

#[tokio::test]
async fn the_stored_item_has_the_documented_attributes() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let key = LockKey::new("job");
    let mut new = write("a", false, FenceUpdate::Next);
    new.data = DataUpdate::Replace(vec![1, 2, 3]);
    new.expires_at = Some(4_000_000_000);
    let before = epoch_ms();
    applied(store.put(&key, Expect::Vacant, new.clone()).await.unwrap());
    let after = epoch_ms();
    let item = raw_item(&store, &[("lock_key", "job")]).await.unwrap();
    assert_eq!(item.get("owner"), Some(&AttributeValue::S("a".into())));
    assert_eq!(
        item.get("rvn"),
        Some(&AttributeValue::S(new.rvn.as_str().into()))
    );
    assert_eq!(
        item.get("lease_ms"),
        Some(&AttributeValue::N("10000".into()))
    );
    assert_eq!(item.get("released"), Some(&AttributeValue::Bool(false)));
    // A new item's first fence: the clock's floor (microseconds).
    let Some(AttributeValue::N(fence)) = item.get("fence") else {
        panic!("{item:?}")
    };
    assert!(
        fence.parse::<u64>().unwrap() > 1_700_000_000_000_000,
        "{fence}"
    );
    assert_eq!(
        item.get("data"),
        Some(&AttributeValue::B(vec![1, 2, 3].into()))
    );
    assert_eq!(
        item.get("expires_at"),
        Some(&AttributeValue::N("4000000000".into()))
    );
    // The writer's wall clock, read while the request was built.
    let Some(AttributeValue::S(written)) = item.get("written_at") else {
        panic!("no written_at: {item:?}");
    };
    let (written, rvn) = written.split_once(' ').unwrap();
    assert_eq!(rvn, new.rvn.as_str(), "the stamp names its version");
    let written: u128 = written.parse().unwrap();
    assert!(
        (before..=after).contains(&written),
        "{before} ≤ {written} ≤ {after}"
    );
    assert_eq!(item.len(), 9, "{item:?}");
    // Read back one millisecond later than stored: never before the write.
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        read.written,
        Some(lock_core::WriteTime::At(
            std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(written).unwrap() + 1)
        ))
    );
}

fn epoch_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[tokio::test]
async fn list_pages_with_scan_and_queries_one_partition() {
    let Some(store) = fresh_store(Layout::native().with_sort_key("sort_key")).await else {
        return;
    };
    let mut keys = Vec::new();
    for p in ["a", "b", "c"] {
        for s in 0..4 {
            let key = LockKey::with_sort(p, format!("s{s}"));
            applied(
                store
                    .put(&key, Expect::Vacant, write("o", false, FenceUpdate::Next))
                    .await
                    .unwrap(),
            );
            keys.push(key);
        }
    }
    let plain = LockKey::new("b");
    applied(
        store
            .put(&plain, Expect::Vacant, write("o", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    keys.push(plain.clone());

    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = store.list(None, cursor, 5).await.unwrap();
        assert!(page.records.len() <= 5);
        pages += 1;
        seen.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert!(pages >= 3, "13 records in pages of 5");
    seen.sort();
    keys.sort();
    assert_eq!(seen, keys);

    let mut in_b = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(Some("b"), cursor, 2).await.unwrap();
        in_b.extend(page.records.into_iter().map(|r| r.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    in_b.sort();
    let mut expected: Vec<_> = keys
        .iter()
        .filter(|k| k.partition() == "b")
        .cloned()
        .collect();
    expected.sort();
    assert_eq!(in_b, expected);
    assert!(
        in_b.contains(&plain),
        "a key without sort key is listed under its partition"
    );
}

/// The store conformance suite of lock-testkit, once per layout.
mod conformance {
    mod native {
        lock_testkit::conformance_suite!(crate::support::TableFactory(
            lock_dynamodb::Layout::native()
        ));
    }
    mod native_with_sort_key {
        lock_testkit::conformance_suite!(crate::support::TableFactory(
            lock_dynamodb::Layout::native().with_sort_key("sort_key")
        ));
    }
    mod python_dynamodb_lock {
        lock_testkit::conformance_suite!(crate::support::TableFactory(
            lock_dynamodb::Layout::python_dynamodb_lock()
        ));
    }
    mod java_lock_client {
        lock_testkit::conformance_suite!(crate::support::TableFactory(
            lock_dynamodb::Layout::java_lock_client()
        ));
    }
}

#[tokio::test]
async fn oversized_keys_and_items_are_refused_before_anything_is_sent() {
    let counter = CallCounter::default();
    let Some(store) = fresh_store_with(Layout::native().with_sort_key("sk"), |b| {
        b.interceptor(counter.clone())
    })
    .await
    else {
        return;
    };
    counter.reset();
    let cases = [
        (LockKey::new("p".repeat(2049)), DataUpdate::Keep),
        (LockKey::with_sort("p", "s".repeat(1025)), DataUpdate::Keep),
        (LockKey::new(""), DataUpdate::Keep),
        (
            LockKey::new("p"),
            DataUpdate::Replace(vec![0u8; 400 * 1024]),
        ),
    ];
    for (key, data) in cases {
        let mut new = write("a", false, FenceUpdate::Next);
        new.data = data;
        let error = store.put(&key, Expect::Vacant, new).await.unwrap_err();
        assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
    }
    assert_eq!(counter.calls(), Vec::<String>::new(), "nothing was sent");
    // The limits themselves are accepted.
    let key = LockKey::with_sort("p".repeat(2048), "s".repeat(1024));
    applied(
        store
            .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    assert_eq!(store.get(&LockKey::new("p")).await.unwrap(), None);
}

#[tokio::test]
async fn a_bad_listing_cursor_is_invalid() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let error = store
        .list(None, Some(lock_core::Cursor("garbage".into())), 10)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid);
}

// ---------------------------------------------------------------- round trips

#[tokio::test]
async fn acquire_of_a_new_and_of_a_released_key_is_one_call_and_conflicts_cost_no_read() {
    let counter = CallCounter::default();
    let Some(store) = fresh_store_with(Layout::native(), |b| b.interceptor(counter.clone())).await
    else {
        return;
    };
    let a = client(store.clone(), "a", Duration::from_secs(10));
    counter.reset();
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(counter.calls(), ["UpdateItem"], "acquire of a new key");
    // A new item's first fence is the clock's floor (the key's item may
    // have been deleted since an earlier holder's: a time to live).
    let first = guard.fence();
    assert!(first > Fence(1_700_000_000_000_000), "{first}");

    counter.reset();
    let b = client(store.clone(), "b", Duration::from_secs(10));
    let error = b
        .acquire("job", AcquireOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    match error {
        LockError::AcquireTimeout { holder, .. } => assert_eq!(holder.as_deref(), Some("a")),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        counter.calls(),
        ["UpdateItem"],
        "a conflict returns the holder, no read"
    );

    counter.reset();
    guard.release().await.unwrap();
    assert_eq!(counter.calls(), ["UpdateItem"], "release");

    counter.reset();
    let again = b.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(counter.calls(), ["UpdateItem"], "acquire of a released key");
    assert_eq!(again.fence(), Fence(first.get() + 1));
    again.release().await.unwrap();
}

// ---------------------------------------------------------------- layouts

/// An item deleted behind the store's back (DynamoDB's time to live, a
/// release that deletes, a `DeleteItem` by hand): the key's next fence is
/// higher than every fence it had, so a holder paused across the deletion
/// is refused at a fenced resource.
#[tokio::test]
async fn fences_keep_rising_after_the_item_is_deleted_by_hand() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let before = Fence::floor_at(std::time::SystemTime::now());
    let (_, next) = lock_testkit::scenarios::fences_rise_after_a_deletion_by_hand(
        &store,
        &LockKey::new("cleaned"),
        async {
            store
                .client()
                .delete_item()
                .table_name(store.table())
                .key(
                    store.layout().partition_key(),
                    AttributeValue::S("cleaned".into()),
                )
                .send()
                .await
                .unwrap();
        },
    )
    .await;
    assert!(next >= before, "the clock's floor: {next}");
}

/// What python-dynamodb-lock 0.9 writes for key `job` (its
/// `_add_new_lock_to_dynamodb`): a 1 s lease, its `additional_attributes`
/// as the item's own attributes.
async fn put_python_item(
    store: &DynamoDbStore,
    owner: &str,
    rvn: &str,
    additional: &[(&str, AttributeValue)],
) {
    let mut request = store
        .client()
        .put_item()
        .table_name(store.table())
        .item("lock_key", AttributeValue::S("job".into()))
        .item("sort_key", AttributeValue::S("-".into()))
        .item("owner_name", AttributeValue::S(owner.into()))
        .item("lease_duration", AttributeValue::N("1.0".into()))
        .item("record_version_number", AttributeValue::S(rvn.into()))
        .item("expiry_time", AttributeValue::N("4000000000".into()));
    for (name, value) in additional {
        request = request.item(*name, value.clone());
    }
    request.send().await.unwrap();
}

#[tokio::test]
async fn python_layout_writes_what_python_dynamodb_lock_reads_and_deletes_on_release() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    let a = client(store.clone(), "rust-worker", Duration::from_millis(1500));
    let guard = a
        .acquire(LockKey::new("job"), AcquireOptions::new())
        .await
        .unwrap();
    let item = raw_item(&store, &[("lock_key", "job"), ("sort_key", "-")])
        .await
        .unwrap();
    assert_eq!(
        item.get("owner_name"),
        Some(&AttributeValue::S("rust-worker".into()))
    );
    assert_eq!(
        item.get("lease_duration"),
        Some(&AttributeValue::N("1.5".into()))
    );
    assert!(matches!(
        item.get("record_version_number"),
        Some(AttributeValue::S(_))
    ));
    let Some(AttributeValue::N(expiry)) = item.get("expiry_time") else {
        panic!("{item:?}")
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let expiry: u64 = expiry.parse().unwrap();
    assert!(
        expiry > now + 3000 && expiry <= now + 3601,
        "{expiry} vs {now}"
    );
    guard.release().await.unwrap();
    assert_eq!(
        raw_item(&store, &[("lock_key", "job"), ("sort_key", "-")]).await,
        None,
        "python releases by deleting"
    );

    // Sort keys are the Python library's sort_key.
    let guard = a
        .acquire(LockKey::with_sort("job", "shard-1"), AcquireOptions::new())
        .await
        .unwrap();
    assert!(
        raw_item(&store, &[("lock_key", "job"), ("sort_key", "shard-1")])
            .await
            .is_some()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_lock_written_by_python_dynamodb_lock_is_honoured_then_taken_over() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    put_python_item(&store, "python-host-1234", "0f8e6c3a-python", &[]).await;
    let rust = client(store.clone(), "rust", Duration::from_secs(5));
    let info = rust.get_lock("job").await.unwrap().unwrap();
    assert_eq!(info.owner, "python-host-1234");
    assert_eq!(info.lease, Duration::from_secs(1));
    assert_eq!(info.fence, Fence(0), "the Python library writes no fence");
    assert!(!info.released);

    let error = rust
        .acquire("job", AcquireOptions::new().wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { holder: Some(ref h), .. } if h == "python-host-1234"),
        "{error:?}"
    );

    // The Python holder stops heartbeating: after its lease (1 s × 1.01) it is
    // taken over, conditionally on its RVN.
    let started = tokio::time::Instant::now();
    let guard = rust
        .acquire("job", AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1010),
        "{:?}",
        started.elapsed()
    );
    assert!(guard.took_over().is_some());
    // The Python library's item carried no fence: the clock's floor.
    assert!(
        guard.fence() > Fence(1_700_000_000_000_000),
        "{}",
        guard.fence()
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn data_as_attributes_are_the_items_own_attributes_replaced_on_takeover_kept_by_heartbeats() {
    let counter = CallCounter::default();
    let layout = Layout::python_dynamodb_lock().with_data_as_attributes();
    let Some(store) = fresh_store_with(layout, |b| b.interceptor(counter.clone())).await else {
        return;
    };
    let key = [("lock_key", "job"), ("sort_key", "-")];
    // A python-dynamodb-lock holder with additional_attributes, then crashed.
    put_python_item(
        &store,
        "python-host",
        "rvn-python",
        &[
            ("job_id", AttributeValue::S("42".into())),
            ("tries", AttributeValue::N("7".into())),
        ],
    )
    .await;
    let rust = client(store.clone(), "rust", Duration::from_secs(2));
    let info = rust.get_lock("job").await.unwrap().unwrap();
    let read: serde_json::Value = serde_json::from_slice(&info.data.unwrap()).unwrap();
    assert_eq!(
        read,
        serde_json::json!({"job_id": {"S": "42"}, "tries": {"N": "7"}}),
        "every attribute the layout does not name is data"
    );

    // The takeover replaces the whole record, as python-dynamodb-lock's PutItem
    // does: none of the crashed holder's attributes survive.
    counter.reset();
    let data = br#"{"job_id": {"S": "43"}, "note": {"M": {"by": {"S": "rust"}}}}"#.to_vec();
    let guard = rust
        .acquire(
            "job",
            AcquireOptions::new()
                .wait(Duration::from_secs(10))
                .data(data),
        )
        .await
        .unwrap();
    assert!(guard.took_over().is_some());
    assert_eq!(
        counter.calls().last().map(String::as_str),
        Some("UpdateItem")
    );
    let calls = counter.calls();
    assert_eq!(
        calls[calls.len().saturating_sub(3)..],
        ["GetItem", "GetItem", "UpdateItem"],
        "the last poll, then the read of the attributes to remove, then the takeover: {calls:?}"
    );
    let item = raw_item(&store, &key).await.unwrap();
    assert_eq!(item.get("job_id"), Some(&AttributeValue::S("43".into())));
    assert!(!item.contains_key("tries"), "{item:?}");
    assert!(!item.contains_key("data"), "{item:?}");
    // The crashed Python holder's item had no fence: the clock's floor.
    assert_eq!(
        item.get("fence"),
        Some(&AttributeValue::N(guard.fence().get().to_string()))
    );
    assert!(guard.fence() > Fence(1_700_000_000_000_000));
    let Some(AttributeValue::M(note)) = item.get("note") else {
        panic!("{item:?}")
    };
    assert_eq!(note.get("by"), Some(&AttributeValue::S("rust".into())));

    // Heartbeats keep them, in one write each.
    let rvn = item.get("record_version_number").cloned();
    counter.reset();
    let mut reads = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            reads += 1;
            let now = raw_item(&store, &key).await.unwrap();
            if now.get("record_version_number") != rvn.as_ref() {
                assert_eq!(now.get("job_id"), Some(&AttributeValue::S("43".into())));
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    let calls = counter.calls();
    assert_eq!(
        calls.iter().filter(|call| *call == "GetItem").count(),
        reads,
        "a heartbeat reads nothing (the GetItems are the test's): {calls:?}"
    );
    // A write on a version the item no longer has is rejected by the read,
    // with the current record, and writes nothing.
    let stale = NewRecord {
        data: DataUpdate::Replace(br#"{"x": {"S": "y"}}"#.to_vec()),
        ..write("intruder", false, FenceUpdate::Next)
    };
    counter.reset();
    let outcome = store
        .put(
            &LockKey::new("job"),
            Expect::Version(Rvn::from_stored("rvn-python")),
            stale,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, Outcome::Rejected { current: Some(ref r) } if r.owner == "rust"),
        "{outcome:?}"
    );
    assert_eq!(counter.calls(), ["GetItem"]);
    assert!(!raw_item(&store, &key).await.unwrap().contains_key("x"));
    guard.release().await.unwrap();
    assert_eq!(raw_item(&store, &key).await, None);

    // Acquiring an absent key with data is one write.
    counter.reset();
    let guard = rust
        .acquire(
            "job",
            AcquireOptions::new().data(br#"{"blob": {"B": "aGk="}}"#.to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(counter.calls(), ["UpdateItem"]);
    let item = raw_item(&store, &key).await.unwrap();
    assert_eq!(
        item.get("blob"),
        Some(&AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(
            b"hi".to_vec()
        )))
    );
    guard.release().await.unwrap();

    // Data that is not attribute values, or that names the layout's own
    // attributes, is refused before anything is sent.
    for bad in [&b"checkpoint 1"[..], br#"{"owner_name": {"S": "x"}}"#] {
        counter.reset();
        let error = rust
            .acquire("job", AcquireOptions::new().data(bad.to_vec()))
            .await
            .unwrap_err();
        assert!(matches!(error, LockError::InvalidInput { .. }), "{error:?}");
        assert!(counter.calls().is_empty(), "{:?}", counter.calls());
    }
    assert_eq!(raw_item(&store, &key).await, None);
    rust.shutdown().await.unwrap();
}

#[tokio::test]
async fn data_as_attributes_with_released_records_kept_keeps_fences_rising() {
    let counter = CallCounter::default();
    let layout = Layout::python_dynamodb_lock()
        .with_released("released", lock_dynamodb::ReleasedEncoding::Bool)
        .with_release_mode(lock_dynamodb::ReleaseMode::MarkReleased)
        .with_data_as_attributes();
    let Some(store) = fresh_store_with(layout, |b| b.interceptor(counter.clone())).await else {
        return;
    };
    let key = [("lock_key", "job"), ("sort_key", "-")];
    let rust = client(store.clone(), "rust", Duration::from_secs(10));
    let data = br#"{"job_id": {"S": "42"}}"#.to_vec();
    let guard = rust
        .acquire("job", AcquireOptions::new().data(data.clone()))
        .await
        .unwrap();
    let first = guard.fence();

    // A release keeps the record, without its data attributes (read first).
    counter.reset();
    guard.release().await.unwrap();
    assert_eq!(counter.calls(), ["GetItem", "UpdateItem"]);
    let item = raw_item(&store, &key).await.unwrap();
    assert_eq!(item.get("released"), Some(&AttributeValue::Bool(true)));
    assert!(!item.contains_key("job_id"), "{item:?}");
    assert!(
        !item.contains_key("expiry_time"),
        "a kept released record has no time to live, which would reset its fence: {item:?}"
    );

    // Acquiring the released key is one write, and the fence goes on rising.
    counter.reset();
    let guard = rust
        .acquire("job", AcquireOptions::new().data(data))
        .await
        .unwrap();
    assert_eq!(counter.calls(), ["UpdateItem"]);
    assert_eq!(guard.fence(), Fence(first.get() + 1));
    let item = raw_item(&store, &key).await.unwrap();
    assert_eq!(item.get("job_id"), Some(&AttributeValue::S("42".into())));

    // Data cannot be left in a released record: refused, nothing written.
    counter.reset();
    let error = guard
        .release_with_data(br#"{"result": {"S": "ok"}}"#.to_vec())
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::InvalidInput { .. }), "{error:?}");
    assert!(
        counter.calls().iter().all(|call| call != "UpdateItem"),
        "{:?}",
        counter.calls()
    );
    rust.shutdown().await.unwrap();
}

#[tokio::test]
async fn java_layout_round_trips_and_honours_java_records() {
    let Some(store) = fresh_store(Layout::java_lock_client()).await else {
        return;
    };
    // A record as the Java client writes it, held.
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("key", AttributeValue::S("held".into()))
        .item("ownerName", AttributeValue::S("java-host".into()))
        .item("leaseDuration", AttributeValue::S("20000".into()))
        .item(
            "recordVersionNumber",
            AttributeValue::S("java-rvn-1".into()),
        )
        .item("data", AttributeValue::B(b"java data".to_vec().into()))
        .send()
        .await
        .unwrap();
    // And one it released (isReleased = "1").
    store
        .client()
        .put_item()
        .table_name(store.table())
        .item("key", AttributeValue::S("free".into()))
        .item("ownerName", AttributeValue::S("java-host".into()))
        .item("leaseDuration", AttributeValue::S("20000".into()))
        .item(
            "recordVersionNumber",
            AttributeValue::S("java-rvn-2".into()),
        )
        .item("isReleased", AttributeValue::S("1".into()))
        .send()
        .await
        .unwrap();
    let rust = client(store.clone(), "rust", Duration::from_secs(5));
    let held = rust.get_lock("held").await.unwrap().unwrap();
    assert_eq!(
        (held.owner.as_str(), held.lease, held.data.as_deref()),
        (
            "java-host",
            Duration::from_secs(20),
            Some(&b"java data"[..])
        )
    );
    assert!(
        rust.try_acquire("held", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );

    let guard = rust.acquire("free", AcquireOptions::new()).await.unwrap();
    assert!(guard.took_over().is_none());
    let item = raw_item(&store, &[("key", "free")]).await.unwrap();
    assert_eq!(
        item.get("ownerName"),
        Some(&AttributeValue::S("rust".into()))
    );
    assert_eq!(
        item.get("leaseDuration"),
        Some(&AttributeValue::S("5000".into()))
    );
    assert_eq!(
        item.get("isReleased"),
        None,
        "held: the Java client sees no isReleased"
    );
    let fence = guard.fence();
    guard.release().await.unwrap();
    let item = raw_item(&store, &[("key", "free")]).await.unwrap();
    assert_eq!(item.get("isReleased"), Some(&AttributeValue::S("1".into())));
    assert_eq!(
        item.get("fence"),
        Some(&AttributeValue::N(fence.get().to_string()))
    );
}

// ---------------------------------------------------------------- tables

#[tokio::test]
async fn create_table_sets_keys_billing_and_ttl_and_validate_accepts_it() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    let report = store.validate_table().await.unwrap();
    assert_eq!(report.ttl_attribute.as_deref(), Some("expiry_time"));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let description = store
        .client()
        .describe_table()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    let table = description.table().unwrap();
    assert_eq!(
        table.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    let ttl = store
        .client()
        .describe_time_to_live()
        .table_name(store.table())
        .send()
        .await
        .unwrap();
    assert_eq!(
        ttl.time_to_live_description()
            .and_then(|d| d.time_to_live_status()),
        Some(&TimeToLiveStatus::Enabled)
    );
    // Creating it again says so.
    assert!(matches!(
        store.create_table(TableOptions::default()).await,
        Err(TableError::AlreadyExists { .. })
    ));
}

#[tokio::test]
async fn a_missing_table_names_the_table_and_how_to_create_it() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let store = DynamoDbStore::builder("no-such-table")
        .build_with_config(support::sdk_config(&endpoint))
        .unwrap();
    match store.validate_table().await {
        Err(TableError::NotFound { table, hint }) => {
            assert_eq!(table, "no-such-table");
            assert!(
                hint.contains("create-table --table-name no-such-table"),
                "{hint}"
            );
        }
        other => panic!("{other:?}"),
    }
    let error = store.get(&LockKey::new("k")).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::NotFound);
    assert!(
        error.message().contains("\"no-such-table\""),
        "{}",
        error.message()
    );
    assert!(
        error.message().contains("create_table"),
        "{}",
        error.message()
    );
    let error = store
        .put(
            &LockKey::new("k"),
            Expect::Vacant,
            write("a", false, FenceUpdate::Next),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::NotFound);
    let client = client(store, "a", Duration::from_secs(5));
    let error = client
        .acquire("k", AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(!error.is_retryable());
    // One line per layer: the lock error says its part, the store error its
    // own (table, what to do, the service's code and message), then the SDK's
    // own errors; ours do not repeat each other and nothing carries raw HTTP.
    let mut layers = vec![error.to_string()];
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        layers.push(cause.to_string());
        source = cause.source();
    }
    eprintln!("{layers:#?}");
    assert_eq!(layers[0], "store error on lock k", "{layers:#?}");
    assert!(layers[1].contains("no-such-table"), "{layers:#?}");
    assert!(
        layers
            .iter()
            .any(|layer| layer.contains("ResourceNotFoundException")),
        "{layers:#?}"
    );
    assert!(!layers[0].contains(layers[1].as_str()), "{layers:#?}");
    for layer in &layers {
        assert!(!layer.contains('\n'), "one line: {layer}");
        assert!(
            !layer.contains("headers") && !layer.contains("HTTP/") && !layer.contains("x-amz"),
            "{layer}"
        );
    }
    let total: usize = layers.iter().map(String::len).sum();
    assert!(
        total < 800,
        "{total} characters along the chain: {layers:#?}"
    );
}

#[tokio::test]
async fn a_table_with_the_wrong_key_schema_is_refused_precisely() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let sdk = aws_sdk_dynamodb::Client::from_conf(support::sdk_config(&endpoint).build());
    let name = support::id_table(&sdk, "wrong").await;
    let store = DynamoDbStore::builder(&name)
        .build_with_config(support::sdk_config(&endpoint))
        .unwrap();
    match store.validate_table().await {
        Err(TableError::KeySchemaMismatch {
            table,
            expected,
            found,
        }) => {
            assert_eq!(table, name);
            assert_eq!(expected, "lock_key (S, HASH)");
            assert_eq!(found, "id (S, HASH)");
        }
        other => panic!("{other:?}"),
    }
    // Every operation fails the same way, listing included (a scan of such a
    // table finds no lock records and would have returned an empty page).
    // The error keeps DynamoDB's words; the mismatch is its typed source.
    let explains = |error: &lock_core::StoreError| {
        assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
        let mismatch =
            std::error::Error::source(error).and_then(|source| source.downcast_ref::<TableError>());
        match mismatch {
            Some(TableError::KeySchemaMismatch {
                table,
                expected,
                found,
                ..
            }) => {
                assert_eq!(table, &name);
                assert_eq!(expected, "lock_key (S, HASH)");
                assert_eq!(found, "id (S, HASH)");
            }
            other => panic!("{error}: {other:?}"),
        }
    };
    explains(&store.list(None, None, 10).await.unwrap_err());
    explains(&store.list(Some("k"), None, 10).await.unwrap_err());
    explains(&store.get(&LockKey::new("k")).await.unwrap_err());
    explains(
        &store
            .put(
                &LockKey::new("k"),
                Expect::Vacant,
                write("a", false, FenceUpdate::Next),
            )
            .await
            .unwrap_err(),
    );
    let locks = client(store.clone(), "a", Duration::from_secs(5));
    let error = locks.acquire("k", AcquireOptions::new()).await.unwrap_err();
    assert!(matches!(error, LockError::InvalidInput { .. }), "{error:?}");
    assert!(!error.is_retryable());
    // A sort key the layout does not know about is a mismatch too.
    let python = DynamoDbStore::builder(support::table_name("py"))
        .layout(Layout::python_dynamodb_lock())
        .build_with_config(support::sdk_config(&endpoint))
        .unwrap();
    python
        .create_table(TableOptions::default().enable_ttl(false))
        .await
        .unwrap();
    let native_view = DynamoDbStore::builder(python.table())
        .build_with_config(support::sdk_config(&endpoint))
        .unwrap();
    assert!(matches!(
        native_view.validate_table().await,
        Err(TableError::KeySchemaMismatch { .. })
    ));
    // Without TTL the python layout (which writes expiry times) gets a warning.
    let report = python.validate_table().await.unwrap();
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    python.delete_table(Duration::from_secs(10)).await.unwrap();
    assert!(matches!(
        python.validate_table().await,
        Err(TableError::NotFound { .. })
    ));
}

#[tokio::test]
async fn bad_store_configuration_is_a_typed_error() {
    let config = || support::sdk_config("http://127.0.0.1:9");
    assert!(matches!(
        DynamoDbStore::builder("x").build_with_config(config()),
        Err(lock_dynamodb::StoreConfigError::InvalidTableName { .. })
    ));
    assert!(matches!(
        DynamoDbStore::builder("locks")
            .layout(Layout::native().with_owner("rvn"))
            .build_with_config(config()),
        Err(lock_dynamodb::StoreConfigError::DuplicateAttribute { .. })
    ));
    assert!(matches!(
        DynamoDbStore::builder("locks")
            .timeouts(Timeouts::default().with_attempt(Duration::ZERO))
            .build_with_config(config()),
        Err(lock_dynamodb::StoreConfigError::ZeroTimeout { which: "attempt" })
    ));
}

// ---------------------------------------------------------------- error mapping

#[tokio::test]
async fn throttling_is_retryable_and_nothing_was_written() {
    let faults = FaultInjector::default();
    let Some(store) = fresh_store_with(Layout::native(), |b| b.interceptor(faults.clone())).await
    else {
        return;
    };
    let key = LockKey::new("job");
    faults.script("UpdateItem", HttpFault::ThrottleBeforeApply);
    let error = store
        .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Throttled, "{error}");
    assert!(error.is_retryable() && !error.is_ambiguous());
    assert_eq!(store.get(&key).await.unwrap(), None);

    // The client retries through it: one throttle costs one more call.
    let a = client(store.clone(), "a", Duration::from_secs(5));
    faults.script("UpdateItem", HttpFault::ThrottleBeforeApply);
    let guard = a
        .acquire("job", AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(
        guard.fence(),
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .fence
    );
    guard.release().await.unwrap();

    faults.script("UpdateItem", HttpFault::AccessDenied);
    let error = store
        .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(
        error.message().contains("IAM policy"),
        "{}",
        error.message()
    );
}

#[tokio::test]
async fn a_server_error_after_the_write_is_ambiguous_and_the_client_recognises_its_write() {
    let faults = FaultInjector::default();
    let counter = CallCounter::default();
    let Some(store) = fresh_store_with(Layout::native(), |b| {
        b.interceptor(faults.clone()).interceptor(counter.clone())
    })
    .await
    else {
        return;
    };
    let key = LockKey::new("job");
    faults.script("UpdateItem", HttpFault::ServerErrorAfterApply);
    let new = write("a", false, FenceUpdate::Next);
    let error = store
        .put(&key, Expect::Vacant, new.clone())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().rvn,
        new.rvn,
        "it did apply"
    );
    assert_eq!(
        counter
            .calls()
            .iter()
            .filter(|c| *c == "UpdateItem")
            .count(),
        1,
        "the SDK did not retry the conditional write"
    );

    // Through the client: the acquire's response is lost; it finds its own RVN.
    let a = client(store.clone(), "b", Duration::from_secs(5));
    let other = LockKey::new("other");
    faults.script("UpdateItem", HttpFault::ServerErrorAfterApply);
    let guard = a
        .acquire(
            other.clone(),
            AcquireOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let stored = store.get(&other).await.unwrap().unwrap();
    assert!(guard.took_over().is_none(), "not a second acquisition");
    assert_eq!((stored.owner.as_str(), stored.fence), ("b", guard.fence()));
    // A heartbeat whose response is lost, then the release: still ours.
    faults.script("UpdateItem", HttpFault::ServerErrorAfterApply);
    guard.set_data(b"x".to_vec()).await.unwrap();
    guard.release().await.unwrap();
    assert!(store.get(&other).await.unwrap().unwrap().released);
}

#[tokio::test]
async fn timeouts_are_ambiguous_for_writes_and_unreachable_servers_are_unavailable() {
    // A server that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = format!("http://{}", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let timeouts = Timeouts::default()
        .with_attempt(Duration::from_millis(300))
        .with_operation(Duration::from_secs(2));
    let store = DynamoDbStore::builder("locks")
        .timeouts(timeouts)
        .read_attempts(1)
        .build_with_config(support::sdk_config(&silent))
        .unwrap();
    let key = LockKey::new("k");
    let error = store
        .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    let error = store.get(&key).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    hold.abort();

    // Nothing listens: the write was never sent.
    let closed = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", socket.local_addr().unwrap())
    };
    let store = DynamoDbStore::builder("locks")
        .timeouts(timeouts)
        .build_with_config(support::sdk_config(&closed))
        .unwrap();
    let error = store
        .put(&key, Expect::Vacant, write("a", false, FenceUpdate::Next))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
}

// ---------------------------------------------------------------- the client end to end

#[tokio::test]
async fn end_to_end_heartbeats_takeover_release_and_shutdown() {
    let Some(store) = fresh_store(Layout::native()).await else {
        return;
    };
    let lease = Duration::from_millis(1000);
    // The holder reaches the table through a switch that can cut it off.
    let link = FaultyStore::new(same_table(&store, |b| b), 1);
    let holder = LockClient::builder(link.clone())
        .owner("holder")
        .lease(lease)
        .heartbeat_period(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let first = store.get(&LockKey::new("job")).await.unwrap().unwrap();

    // Heartbeats keep it across several leases.
    tokio::time::sleep(lease * 3).await;
    assert!(guard.is_safe(), "{:?}", guard.state());
    let later = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!((later.owner.as_str(), later.fence), ("holder", first.fence));
    assert_ne!(later.rvn, first.rvn, "heartbeats wrote new versions");

    // The holder "crashes" (cut off from the table); a waiter takes over.
    let waiter = client(store.clone(), "waiter", lease);
    link.set_unavailable(true);
    let started = tokio::time::Instant::now();
    let taken = waiter
        .acquire("job", AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(started.elapsed() >= lease, "{:?}", started.elapsed());
    assert_eq!(taken.fence(), Fence(first.fence.get() + 1));
    assert!(
        !guard.is_safe(),
        "the cut-off holder no longer trusts its lease"
    );
    link.set_unavailable(false);
    drop(guard);

    // Shutdown releases what the waiter holds.
    let other = waiter
        .acquire("other", AcquireOptions::new())
        .await
        .unwrap();
    let report = waiter.shutdown().await.unwrap();
    assert_eq!(report.released.len(), 2, "{report:?}");
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
    assert!(
        store
            .get(&LockKey::new("other"))
            .await
            .unwrap()
            .unwrap()
            .released
    );
    assert!(matches!(
        waiter.acquire("job", AcquireOptions::new()).await,
        Err(LockError::Shutdown)
    ));
    drop((taken, other));
    holder.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- python-dynamodb-lock itself

/// The virtual environment's Python with python-dynamodb-lock installed (set by
/// `./scripts/test` as `LOCK_PYTHON`).
fn python() -> Option<String> {
    match std::env::var("LOCK_PYTHON") {
        Ok(path) if !path.is_empty() => Some(path),
        _ if std::env::var("LOCK_DYNAMODB_SKIP").as_deref() == Ok("1") => None,
        _ => panic!(
            "LOCK_PYTHON is not set: run ./scripts/test, which installs python-dynamodb-lock into .venv \
             (or set LOCK_DYNAMODB_SKIP=1 to skip the DynamoDB tests explicitly)"
        ),
    }
}

fn python_lock(
    store: &DynamoDbStore,
    mode: &str,
    key: &str,
    wait_secs: &str,
) -> tokio::process::Command {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/lock.py");
    let mut command = tokio::process::Command::new(python().expect("checked by the caller"));
    command
        .arg(script)
        .arg(mode)
        .arg(key)
        .env(
            "ENDPOINT",
            support::endpoint().expect("checked by the caller"),
        )
        .env("TABLE", store.table())
        .env("WAIT", wait_secs)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn python_try(store: &DynamoDbStore, key: &str, wait_secs: &str) -> serde_like::Outcome {
    let output = python_lock(store, "try", key, wait_secs)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_like::parse(&String::from_utf8_lossy(&output.stdout))
}

/// Just enough parsing of the script's one-line JSON answers.
mod serde_like {
    #[derive(Debug, PartialEq, Eq)]
    pub enum Outcome {
        Acquired,
        Refused(String),
    }
    pub fn parse(stdout: &str) -> Outcome {
        let first = stdout.lines().next().unwrap_or_default();
        if first.contains(r#""acquired": true"#) {
            Outcome::Acquired
        } else if let Some(rest) = first.split(r#""code": ""#).nth(1) {
            Outcome::Refused(rest.trim_end_matches(['"', '}']).to_owned())
        } else {
            panic!("unexpected answer from the python script: {stdout:?}")
        }
    }
}

#[tokio::test]
async fn python_dynamodb_lock_and_this_client_exclude_each_other() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    if python().is_none() {
        return;
    }
    let rust = client(store.clone(), "rust-worker", Duration::from_secs(10));

    // Rust holds: the Python library waits and times out.
    let guard = rust.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(
        python_try(&store, "job", "1").await,
        serde_like::Outcome::Refused("ACQUIRE_TIMEOUT".into())
    );
    // Rust releases (deletes, as python does): the Python library gets it at once.
    guard.release().await.unwrap();
    assert_eq!(
        python_try(&store, "job", "1").await,
        serde_like::Outcome::Acquired
    );
    assert_eq!(
        store.get(&LockKey::new("job")).await.unwrap(),
        None,
        "python released it"
    );

    // Python holds: this client is refused and names the Python owner.
    let mut holder = python_lock(&store, "hold", "job", "1").spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
        .await
        .unwrap();
    assert_eq!(serde_like::parse(&line), serde_like::Outcome::Acquired);
    match rust.acquire("job", AcquireOptions::new()).await {
        Err(LockError::AcquireTimeout { holder, .. }) => {
            assert_eq!(holder.as_deref(), Some("python-worker"))
        }
        other => panic!("{other:?}"),
    }
    // It lets go; this client takes the lock within a refresh period or two.
    let mut stdin = holder.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"\n")
        .await
        .unwrap();
    let guard = rust
        .acquire("job", AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(holder.wait().await.unwrap().success());
    assert_eq!(guard.owner(), "rust-worker");
    guard.release().await.unwrap();
    rust.shutdown().await.unwrap();
}

#[test]
fn a_configuration_without_a_region_is_refused_when_the_store_is_built() {
    let config = aws_sdk_dynamodb::config::Builder::new()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest());
    let error = lock_dynamodb::DynamoDbStore::builder("locks")
        .build_with_config(config)
        .unwrap_err();
    assert_eq!(error, lock_dynamodb::StoreConfigError::NoRegion);
    assert!(error.to_string().contains("AWS_REGION"), "{error}");
}

#[tokio::test]
async fn a_ttl_expiry_never_falls_inside_the_lease_written_with_it() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A two-hour lease held without heartbeats (lockctl acquire --lease 2h):
    // the preset's "now + 1 h" would let DynamoDB delete it inside its lease.
    let key = LockKey::new("batch");
    let new = NewRecord {
        lease: Duration::from_secs(2 * 3600),
        ..write("a", false, FenceUpdate::Next)
    };
    applied(store.put(&key, Expect::Vacant, new).await.unwrap());
    let item = store
        .client()
        .get_item()
        .table_name(store.table())
        .key("lock_key", AttributeValue::S("batch".into()))
        .key("sort_key", AttributeValue::S("-".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    let expiry: u64 = match item.get("expiry_time") {
        Some(AttributeValue::N(n)) => n.parse().unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        expiry >= now + 2 * 2 * 3600 + 600,
        "expiry {} s after now",
        expiry - now
    );
    // A short lease keeps the preset's hour.
    let short = LockKey::new("short");
    applied(
        store
            .put(&short, Expect::Vacant, write("a", false, FenceUpdate::Next))
            .await
            .unwrap(),
    );
    let record = store.get(&short).await.unwrap().unwrap();
    let expiry = record.expires_at.unwrap();
    assert!(
        (now + 3600..now + 3700).contains(&expiry),
        "{}",
        expiry - now
    );
}

#[test]
fn a_python_layout_without_its_expiry_attribute_is_refused() {
    for layout in [
        Layout::python_dynamodb_lock().without_expires_at(),
        Layout::python_dynamodb_lock().with_default_expiry(None),
    ] {
        assert_eq!(
            layout.validate(),
            Err(lock_dynamodb::StoreConfigError::PythonNeedsExpiry)
        );
    }
}

#[tokio::test]
async fn a_store_on_the_users_client_keeps_its_settings_but_never_resends_a_conditional_write() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let table = fresh_store(Layout::native()).await.unwrap();
    // The application's own client: retries on (5 attempts), its own
    // interceptors (a call counter, and a fault: the first UpdateItem applies
    // and then answers HTTP 500, which the SDK's retries would re-send).
    let calls = CallCounter::default();
    let faults = FaultInjector::default();
    faults.script("UpdateItem", HttpFault::ServerErrorAfterApply);
    let config = support::sdk_config(&endpoint)
        .retry_config(RetryConfig::standard().with_max_attempts(5))
        .interceptor(calls.clone())
        .interceptor(faults.clone())
        .build();
    let users = aws_sdk_dynamodb::Client::from_conf(config);
    let store = DynamoDbStore::builder(table.table())
        .build_from_client(&users)
        .unwrap();
    let client = client(store, "a", Duration::from_secs(5));
    let guard = client.acquire("job", AcquireOptions::new()).await.unwrap();
    assert!(guard.took_over().is_none());
    let sent = calls.calls();
    let updates = sent.iter().filter(|call| *call == "UpdateItem").count();
    // One write, resolved by a read as ours; never re-sent by the SDK.
    assert_eq!(updates, 1, "{sent:?}");
    assert!(sent.iter().any(|call| call == "GetItem"), "{sent:?}");
    guard.release().await.unwrap();
}

#[test]
fn a_lock_without_data_costs_one_write_unit_per_write_on_every_layout() {
    let owner = "ip-10-0-123-45.eu-west-1.compute.internal-worker-7-1a2b3c4d5e6f";
    let key = LockKey::with_sort("p".repeat(100), "s".repeat(60));
    for layout in [
        Layout::native().with_sort_key("sk"),
        Layout::python_dynamodb_lock(),
        Layout::java_lock_client().with_sort_key("sortKey"),
    ] {
        let store = DynamoDbStore::builder("locks")
            .layout(layout.clone())
            .build_with_config(
                aws_sdk_dynamodb::config::Builder::new()
                    .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                    .region(aws_sdk_dynamodb::config::Region::new("us-east-1")),
            )
            .unwrap();
        for (released, fence) in [
            (false, FenceUpdate::Next),
            (false, FenceUpdate::Keep),
            (true, FenceUpdate::Keep),
        ] {
            let mut new = write(owner, released, fence);
            new.lease = Duration::from_secs(365 * 24 * 3600);
            let size = store.item_size(&key, &new).unwrap();
            assert!(
                size <= 1024,
                "{}: a write without data is {size} bytes, over one write unit",
                layout.preset_name()
            );
        }
    }
}

/// A client that declared how far hosts' clocks may differ, made afresh (a
/// cron run, a Lambda invocation): its one attempt, and the calls it made.
async fn bounded_fresh_attempt(
    store: &DynamoDbStore,
    owner: &str,
    lease: Duration,
    bound: Option<Duration>,
) -> (Option<lock_core::LockGuard>, usize) {
    let counted = FaultyStore::new(store.clone(), 9);
    let mut builder = lock_core::LockClient::builder(counted.clone())
        .owner(owner)
        .lease(lease);
    if let Some(bound) = bound {
        builder = builder.max_clock_difference(bound);
    }
    let fresh = builder.build().unwrap();
    let got = tokio::time::timeout(
        Duration::from_secs(30),
        fresh.try_acquire("job", AcquireOptions::new()),
    )
    .await
    .expect("bounded")
    .unwrap();
    (got, counted.calls())
}

/// With a declared clock bound, a fresh process takes a crashed holder's
/// lock once `written + lease × (1 + drift) + bound` has passed on its wall
/// clock, in one refused write and one takeover, on every layout; without
/// one it watches the record, as before.
#[tokio::test]
async fn with_a_clock_bound_a_fresh_process_takes_a_crashed_holders_lock_by_the_written_time() {
    let lease = Duration::from_millis(1000);
    let bound = Duration::from_millis(200);
    for layout in [
        Layout::native(),
        Layout::python_dynamodb_lock(),
        Layout::java_lock_client(),
    ] {
        let name = layout.preset_name();
        let Some(store) = fresh_store(layout).await else {
            return;
        };
        assert!(
            matches!(
                store.capabilities().clock,
                lock_core::StoreClock::Wall { .. }
            ),
            "{name}"
        );
        let crashed = client(store.clone(), "crashed", lease);
        let detached = crashed
            .acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .detach()
            .await
            .unwrap();
        // No write of the holder's comes after this (its heartbeats stopped).
        let last_write = tokio::time::Instant::now();
        let (young, _) = bounded_fresh_attempt(&store, "early", lease, Some(bound)).await;
        assert!(young.is_none(), "{name}: a young record is busy");
        tokio::time::sleep_until(
            last_write + lease.mul_f64(1.01) + bound + Duration::from_millis(20),
        )
        .await;
        let (watching, _) = bounded_fresh_attempt(&store, "watcher", lease, None).await;
        assert!(
            watching.is_none(),
            "{name}: without a bound the record is watched"
        );
        let (taken, calls) = bounded_fresh_attempt(&store, "cron", lease, Some(bound)).await;
        let taken = taken.unwrap_or_else(|| panic!("{name}: not taken over"));
        assert_eq!(calls, 2, "{name}: one refused write and the takeover");
        assert_eq!(taken.took_over().unwrap().owner, "crashed", "{name}");
        assert!(taken.fence() > detached.fence(), "{name}");
        taken.release().await.unwrap();
        crashed.shutdown().await.unwrap();
    }
}

/// A record written by python-dynamodb-lock carries no write time: a client
/// with a clock bound watches it for its lease, as any waiter.
#[tokio::test]
async fn a_record_without_a_write_time_is_watched_even_with_a_clock_bound() {
    let Some(store) = fresh_store(Layout::python_dynamodb_lock()).await else {
        return;
    };
    put_python_item(&store, "python-host-1234", "0f8e6c3a-python", &[]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (got, _) = bounded_fresh_attempt(
        &store,
        "cron",
        Duration::from_secs(1),
        Some(Duration::from_millis(100)),
    )
    .await;
    assert!(
        got.is_none(),
        "no write time: nothing proves the record old"
    );
}

/// The Java client heartbeats (and takes over released locks) with an
/// `UpdateItem` that knows nothing of the write-time attribute: the stamp a
/// version of ours left stays, beside the Java client's new RVN. It is not
/// believed, so a live Java holder is never taken over by it.
#[tokio::test]
async fn a_stamp_left_beside_another_writers_version_is_not_believed() {
    let Some(store) = fresh_store(Layout::java_lock_client()).await else {
        return;
    };
    let lease = Duration::from_millis(1000);
    let ours = client(store.clone(), "ours", lease);
    let detached = ours
        .acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    // A Java client's heartbeat: a new RVN and owner, the rest left alone.
    store
        .client()
        .update_item()
        .table_name(store.table())
        .key("key", AttributeValue::S("job".into()))
        .update_expression("SET recordVersionNumber = :rvn, ownerName = :owner")
        .expression_attribute_values(":rvn", AttributeValue::S("java-rvn-2".into()))
        .expression_attribute_values(":owner", AttributeValue::S("java-host".into()))
        .send()
        .await
        .unwrap();
    let item = raw_item(&store, &[("key", "job")]).await.unwrap();
    assert!(
        item.contains_key("writtenAt"),
        "the old stamp stays: {item:?}"
    );
    tokio::time::sleep(lease * 2).await;
    let (got, _) =
        bounded_fresh_attempt(&store, "cron", lease, Some(Duration::from_millis(100))).await;
    assert!(
        got.is_none(),
        "the Java holder's version has no stamp of its own"
    );
    assert!(
        store
            .get(&LockKey::new("job"))
            .await
            .unwrap()
            .unwrap()
            .written
            .is_none()
    );
    drop(detached);
    ours.shutdown().await.unwrap();
}
