//! The DynamoDB store on a second DynamoDB-compatible server, dynalite
//! (started by `./scripts/test`, `LOCK_DYNALITE_ENDPOINT`), which lacks two
//! things DynamoDB has: the time-to-live API (`UpdateTimeToLive` is an
//! unknown operation) and the old item on a failed condition (it ignores
//! `ReturnValuesOnConditionCheckFailure`). The store works on it with no
//! option set: the table is created without time to live and says so, a
//! conflict is resolved with one consistent read, and the conformance suite
//! and the client's contention hold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, DataUpdate, Expect, FenceUpdate, LockError, LockKey,
    NewRecord, Outcome, Rvn,
};
use lock_dynamodb::{DynamoDbStore, DynamoDbStoreBuilder, Layout, TableOptions};
use support::{CallCounter, client, sdk_config, table_name};

fn endpoint() -> Option<String> {
    lock_testkit::server_from_env(
        "LOCK_DYNALITE_ENDPOINT",
        "LOCK_DYNALITE_SKIP",
        "DynamoDB-compatible (dynalite)",
    )
}

/// A store on a fresh dynalite table of `layout`, not created yet.
fn store_with(
    layout: Layout,
    configure: impl FnOnce(DynamoDbStoreBuilder) -> DynamoDbStoreBuilder,
) -> Option<DynamoDbStore> {
    let endpoint = endpoint()?;
    let builder = DynamoDbStore::builder(table_name("compatible")).layout(layout);
    Some(
        configure(builder)
            .build_with_config(sdk_config(&endpoint))
            .unwrap(),
    )
}

async fn created(layout: Layout) -> Option<DynamoDbStore> {
    let store = store_with(layout, |b| b)?;
    store.create_table(TableOptions::default()).await.unwrap();
    Some(store)
}

fn record(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released: false,
        fence: FenceUpdate::Next,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

#[tokio::test]
async fn a_table_is_created_without_time_to_live_and_the_reports_say_so() {
    let Some(store) = store_with(Layout::native(), |b| b) else {
        return;
    };
    let report = store.create_table(TableOptions::default()).await.unwrap();
    assert_eq!(report.ttl_attribute, None);
    assert_eq!(report.warnings.len(), 1, "{report:?}");
    assert!(
        report.warnings[0].contains("no time-to-live API")
            && report.warnings[0].contains("not cleaned up"),
        "{report:?}"
    );
    // The table is there and fits, time to live off (dynalite describes it
    // as disabled).
    let validated = store.validate_table().await.unwrap();
    assert_eq!(validated.ttl_attribute, None);
    store.delete_table(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn a_conflict_answered_without_the_old_item_is_read_once() {
    let calls = CallCounter::default();
    let Some(store) = store_with(Layout::native(), |b| b.interceptor(calls.clone())) else {
        return;
    };
    store.create_table(TableOptions::default()).await.unwrap();
    let key = LockKey::new("job");
    let Outcome::Applied(held) = store.put(&key, Expect::Vacant, record("a")).await.unwrap() else {
        panic!("a vacant key is taken");
    };
    calls.reset();
    // Rejected: the server sends no item back, the store reads it.
    let outcome = store.put(&key, Expect::Vacant, record("b")).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Rejected {
            current: Some(held.clone())
        }
    );
    assert_eq!(calls.calls(), ["UpdateItem", "GetItem"]);
    // The same for a version that is not the record's, and for a release.
    calls.reset();
    let stale = Expect::Version(Rvn::fresh());
    let outcome = store.put(&key, stale.clone(), record("b")).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Rejected {
            current: Some(held.clone())
        }
    );
    let outcome = store.delete(&key, stale).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Rejected {
            current: Some(held)
        }
    );
    assert_eq!(
        calls.calls(),
        ["UpdateItem", "GetItem", "DeleteItem", "GetItem"]
    );
    // On an absent key the read finds nothing.
    let outcome = store
        .put(
            &LockKey::new("absent"),
            Expect::Version(Rvn::fresh()),
            record("b"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected { current: None });
    store.delete_table(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn clients_exclude_each_other_and_name_the_holder() {
    let Some(store) = created(Layout::native().with_sort_key("sort_key")).await else {
        return;
    };
    let a = client(store.clone(), "a", Duration::from_secs(2));
    let b = client(store.clone(), "b", Duration::from_secs(2));
    let held = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert!(
        b.try_acquire("job", AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let error = b
        .acquire(
            "job",
            AcquireOptions::new().wait(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::AcquireTimeout { holder: Some(holder), .. } if holder == "a"),
        "{error:?}"
    );
    // Heartbeats hold it past the lease; a release hands it over.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(held.is_safe(), "{:?}", held.state());
    let fence = held.fence();
    held.release().await.unwrap();
    let taken = b
        .acquire("job", AcquireOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(taken.fence() > fence);
    taken.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    store.delete_table(Duration::from_secs(10)).await.unwrap();
}

/// A fresh dynalite table per conformance case.
struct DynaliteTables(Layout);

#[async_trait::async_trait]
impl lock_testkit::StoreFactory for DynaliteTables {
    async fn create(&self) -> Result<Option<lock_testkit::FreshStore>, lock_core::StoreError> {
        let Some(store) = created(self.0.clone()).await else {
            return Ok(None);
        };
        let doomed = store.clone();
        let cleanup = lock_testkit::Cleanup::new(move || async move {
            let _ = doomed.delete_table(Duration::from_secs(10)).await;
        });
        Ok(Some(lock_testkit::FreshStore::with_cleanup(store, cleanup)))
    }
}

/// The store conformance suite on dynalite, with and without a sort key.
mod conformance {
    mod native {
        lock_testkit::conformance_suite!(crate::DynaliteTables(lock_dynamodb::Layout::native()));
    }
    mod native_with_sort_key {
        lock_testkit::conformance_suite!(crate::DynaliteTables(
            lock_dynamodb::Layout::native().with_sort_key("sort_key")
        ));
    }
}
