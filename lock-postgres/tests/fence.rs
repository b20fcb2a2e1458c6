//! Fences admitted at the resource (`lock_postgres::fence`), on the test
//! server: a stale holder's transaction is refused and rolled back, from Rust
//! and from plain SQL; a fence of another lock is refused; bad input is
//! refused before anything is sent; racing writers end with the highest
//! fence's write, and no lower fence is ever admitted after a higher one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod support;

use lock_core::{Fence, FenceRefused, LockKey};
use lock_postgres::{FenceError, FenceGuard, PostgresStore};
use support::{connect, fresh_store, url};

/// A store on a fresh table, its fence guard created, and a table of the
/// test's own that the fenced writes go to.
async fn set_up() -> Option<(PostgresStore, FenceGuard, tokio_postgres::Client, String)> {
    let store = fresh_store().await?;
    let guard = store
        .create_fence_guard()
        .await
        .expect("create the fence guard");
    let client = connect(&url()?).await;
    let writes = format!("writes_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!(
            "CREATE TABLE {writes} (seq bigserial PRIMARY KEY, resource text NOT NULL, fence bigint NOT NULL)"
        ))
        .await
        .unwrap();
    Some((store, guard, client, writes))
}

/// A resource name no other test uses (the fence table is the schema's).
fn resource(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

/// Write `fence`'s row for `resource` in one transaction, admitting the fence
/// first: the transaction commits only if the fence is admitted.
async fn fenced_write(
    client: &mut tokio_postgres::Client,
    guard: &FenceGuard,
    writes: &str,
    resource: &str,
    key: &LockKey,
    fence: u64,
) -> Result<(), FenceError> {
    let transaction = client.transaction().await.unwrap();
    guard
        .admit(&transaction, resource, key, Fence(fence))
        .await?;
    transaction
        .execute(
            &format!("INSERT INTO {writes} (resource, fence) VALUES ($1, $2)"),
            &[&resource, &(fence as i64)],
        )
        .await
        .unwrap();
    transaction.commit().await.unwrap();
    Ok(())
}

async fn fences_written(client: &tokio_postgres::Client, writes: &str, resource: &str) -> Vec<i64> {
    client
        .query(
            &format!("SELECT fence FROM {writes} WHERE resource = $1 ORDER BY seq"),
            &[&resource],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_stale_fence_is_refused_and_its_transaction_rolls_back() {
    let Some((store, guard, mut client, writes)) = set_up().await else {
        return;
    };
    // Created twice: the second call changes nothing and fails nothing.
    assert_eq!(store.create_fence_guard().await.unwrap(), guard);
    let orders = resource("orders");
    let key = LockKey::new("orders");
    fenced_write(&mut client, &guard, &writes, &orders, &key, 5)
        .await
        .unwrap();
    // The same holder writes again with its fence; a later holder's is higher.
    fenced_write(&mut client, &guard, &writes, &orders, &key, 5)
        .await
        .unwrap();
    fenced_write(&mut client, &guard, &writes, &orders, &key, 7)
        .await
        .unwrap();
    let refused = fenced_write(&mut client, &guard, &writes, &orders, &key, 6).await;
    match refused {
        Err(FenceError::Refused(FenceRefused::Stale {
            resource,
            presented,
            highest,
        })) => {
            assert_eq!(
                (resource, presented, highest),
                (orders.clone(), Fence(6), Fence(7))
            );
        }
        other => panic!("expected a stale fence, got {other:?}"),
    }
    assert_eq!(fences_written(&client, &writes, &orders).await, [5, 5, 7]);
}

#[tokio::test]
async fn plain_sql_gets_the_stale_fence_sqlstate() {
    let Some((_store, guard, client, _writes)) = set_up().await else {
        return;
    };
    let orders = resource("orders");
    let call = format!("SELECT {}($1, 'orders', $2)", guard.function());
    client.query(&call, &[&orders, &3_i64]).await.unwrap();
    let error = client.query(&call, &[&orders, &2_i64]).await.unwrap_err();
    let db = error.as_db_error().expect("the function's error");
    assert_eq!(db.code().code(), lock_postgres::fence::STALE_FENCE);
    assert_eq!(db.detail(), Some("3"), "the highest fence admitted");
    assert!(db.message().contains("stale"), "{}", db.message());
}

#[tokio::test]
async fn a_fence_of_another_lock_is_refused() {
    let Some((_store, guard, mut client, writes)) = set_up().await else {
        return;
    };
    let orders = resource("orders");
    fenced_write(
        &mut client,
        &guard,
        &writes,
        &orders,
        &LockKey::new("orders"),
        4,
    )
    .await
    .unwrap();
    let refused = fenced_write(
        &mut client,
        &guard,
        &writes,
        &orders,
        &LockKey::new("invoices"),
        9,
    )
    .await;
    match refused {
        Err(FenceError::Refused(FenceRefused::OtherLock {
            fenced_by,
            presented_by,
            ..
        })) => assert_eq!(
            (fenced_by.as_str(), presented_by.as_str()),
            ("orders", "invoices")
        ),
        other => panic!("expected another lock's fence to be refused, got {other:?}"),
    }
    assert_eq!(fences_written(&client, &writes, &orders).await, [4]);
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let Some((_store, guard, client, _writes)) = set_up().await else {
        return;
    };
    let key = LockKey::new("orders");
    for (resource, fence, says) in [
        (resource("orders"), 0, "fences start at 1"),
        (resource("orders"), u64::MAX, "bigint holds fences up to"),
        (String::new(), 1, "needs a name"),
        ("a\0b".to_owned(), 1, "NUL"),
        ("x".repeat(3_000), 1, "at most 2048"),
    ] {
        let error = guard
            .admit(&client, &resource, &key, Fence(fence))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, FenceError::Refused(FenceRefused::InvalidInput { reason }) if reason.contains(says)),
            "{error}"
        );
    }
    let admitted: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {} WHERE resource = ''", guard.table()),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(admitted, 0);
}

/// Writers with interleaved fences race for one resource: the writes that
/// commit have fences that never go down, and the last is the highest.
#[tokio::test]
async fn racing_writers_never_commit_a_lower_fence_after_a_higher_one() {
    let Some((_store, guard, client, writes)) = set_up().await else {
        return;
    };
    let url = url().unwrap();
    let orders = resource("orders");
    let key = LockKey::new("orders");
    // 1 to 24, interleaved (7 is prime to 24: every fence once).
    let fences: Vec<u64> = (0..24).map(|i| (i * 7) % 24 + 1).collect();
    let mut tasks = Vec::new();
    for fence in fences {
        let (url, guard, writes, orders, key) = (
            url.clone(),
            guard.clone(),
            writes.clone(),
            orders.clone(),
            key.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut client = connect(&url).await;
            match fenced_write(&mut client, &guard, &writes, &orders, &key, fence).await {
                Ok(()) | Err(FenceError::Refused(FenceRefused::Stale { .. })) => {}
                Err(other) => panic!("fence {fence}: {other}"),
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(60), task)
            .await
            .expect("a writer finished")
            .unwrap();
    }
    let written = fences_written(&client, &writes, &orders).await;
    assert!(!written.is_empty());
    assert!(
        written.windows(2).all(|pair| pair[0] <= pair[1]),
        "committed in order of fences: {written:?}"
    );
    let highest: i64 = client
        .query_one(
            &format!("SELECT fence FROM {} WHERE resource = $1", guard.table()),
            &[&orders],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(written.last(), Some(&highest));
}

#[test]
fn a_lock_table_name_without_room_for_the_fence_names_is_refused() {
    let store = PostgresStore::builder(format!("jobs.{}", "t".repeat(52)))
        .build_from_url("postgres://app@localhost/app")
        .unwrap();
    let error = store.fence_guard().unwrap_err();
    assert!(
        matches!(error, lock_postgres::SchemaError::FenceNamesTooLong { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("at most 51"), "{error}");
}
