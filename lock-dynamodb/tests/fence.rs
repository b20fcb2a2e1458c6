//! Fences checked at the user's own items, on the DynamoDB emulator: a stale
//! holder's put, update, delete and transaction are refused and leave the
//! newer holder's write; another lock's fence is refused; an item written
//! before fencing takes a fence; racing writers never have a lower fence
//! admitted after a higher one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod support;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, TransactWriteItem, Update};
use lock_core::{AcquireOptions, Fence, FenceRefused, LockClient, LockKey};
use lock_dynamodb::fence::failed_transaction_item;
use lock_dynamodb::{FailedItem, Fenced, ItemFence, Layout};

/// A fresh table of the user's own (key `id`).
async fn user_table(sdk: &Client) -> String {
    support::id_table(sdk, "orders").await
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// The item `id` of `table`, consistently read.
async fn item(sdk: &Client, table: &str, id: &str) -> Option<HashMap<String, AttributeValue>> {
    sdk.get_item()
        .table_name(table)
        .key("id", s(id))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

/// Two holders of lock `orders` one after the other, on the emulator's lock
/// table: the first's fence (stale once the second holds) and the second's.
async fn two_fences(key: &LockKey) -> Option<(Fence, Fence)> {
    let store = support::fresh_store(Layout::native()).await?;
    let client = LockClient::builder(store)
        .lease(Duration::from_secs(5))
        .build()
        .unwrap();
    let first = client
        .acquire(key.clone(), AcquireOptions::new())
        .await
        .unwrap();
    let stale = first.fence();
    first.release().await.unwrap();
    let second = client
        .acquire(key.clone(), AcquireOptions::new())
        .await
        .unwrap();
    let fresh = second.fence();
    second.release().await.unwrap();
    client.shutdown().await.unwrap();
    assert!(stale < fresh);
    Some((stale, fresh))
}

fn sdk() -> Option<Client> {
    let endpoint = support::endpoint()?;
    Some(Client::from_conf(support::sdk_config(&endpoint).build()))
}

#[tokio::test]
async fn a_stale_holders_put_update_delete_and_transaction_are_refused() {
    let Some(sdk) = sdk() else { return };
    let key = LockKey::new("orders");
    let (stale, fresh) = two_fences(&key).await.unwrap();
    let table = user_table(&sdk).await;
    let newer = ItemFence::new("order 42", &key, fresh).unwrap();
    let older = ItemFence::new("order 42", &key, stale).unwrap();

    // The newer holder writes; its fence is on the item.
    sdk.put_item()
        .table_name(&table)
        .item("id", s("42"))
        .item("status", s("shipped"))
        .fenced(&newer)
        .send()
        .await
        .unwrap();
    let written = item(&sdk, &table, "42").await.unwrap();
    assert_eq!(written["fence"], AttributeValue::N(fresh.get().to_string()));
    assert_eq!(written["fence_lock"], s("orders"));

    // The stale holder's put: refused, and told as stale.
    let put = sdk
        .put_item()
        .table_name(&table)
        .item("id", s("42"))
        .item("status", s("cancelled"))
        .fenced(&older)
        .send()
        .await
        .unwrap_err();
    let refused = older.refusal(put.as_service_error().and_then(FailedItem::failed_item));
    assert!(
        matches!(refused, Some(FenceRefused::Stale { highest, .. }) if highest == fresh),
        "{refused:?}"
    );

    // Its update, with a SET of its own.
    let update = sdk
        .update_item()
        .table_name(&table)
        .key("id", s("42"))
        .update_expression("SET #status = :status")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":status", s("cancelled"))
        .fenced(&older)
        .send()
        .await
        .unwrap_err();
    let refused = older.refusal(update.as_service_error().and_then(FailedItem::failed_item));
    assert!(
        matches!(refused, Some(FenceRefused::Stale { .. })),
        "{refused:?}"
    );

    // Its delete.
    let delete = sdk
        .delete_item()
        .table_name(&table)
        .key("id", s("42"))
        .fenced(&older)
        .send()
        .await
        .unwrap_err();
    let refused = older.refusal(delete.as_service_error().and_then(FailedItem::failed_item));
    assert!(
        matches!(refused, Some(FenceRefused::Stale { .. })),
        "{refused:?}"
    );

    // Its transaction: an update of the item beside another item's put.
    let stale_update = Update::builder()
        .table_name(&table)
        .key("id", s("42"))
        .update_expression("SET #status = :status")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":status", s("cancelled"))
        .fenced(&older)
        .build()
        .unwrap();
    let other = aws_sdk_dynamodb::types::Put::builder()
        .table_name(&table)
        .item("id", s("audit-1"))
        .build()
        .unwrap();
    let transaction = sdk
        .transact_write_items()
        .transact_items(TransactWriteItem::builder().put(other).build())
        .transact_items(TransactWriteItem::builder().update(stale_update).build())
        .send()
        .await
        .unwrap_err();
    let failed = transaction
        .as_service_error()
        .and_then(|error| failed_transaction_item(error, 1));
    assert!(
        matches!(older.refusal(failed), Some(FenceRefused::Stale { .. })),
        "{transaction:?}"
    );
    assert!(
        item(&sdk, &table, "audit-1").await.is_none(),
        "nothing of the transaction applied"
    );

    // The item is the newer holder's write.
    let kept = item(&sdk, &table, "42").await.unwrap();
    assert_eq!(kept["status"], s("shipped"));
    assert_eq!(kept["fence"], AttributeValue::N(fresh.get().to_string()));

    // The newer holder goes on writing with its fence (equal is admitted),
    // through an update merged with its own condition.
    sdk.update_item()
        .table_name(&table)
        .key("id", s("42"))
        .condition_expression("#status = :was")
        .update_expression("SET #status = :status")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":was", s("shipped"))
        .expression_attribute_values(":status", s("delivered"))
        .fenced(&newer)
        .send()
        .await
        .unwrap();
    // Its own condition failing is not a fence refusal.
    let own = sdk
        .update_item()
        .table_name(&table)
        .key("id", s("42"))
        .condition_expression("#status = :was")
        .update_expression("SET #status = :status")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":was", s("shipped"))
        .expression_attribute_values(":status", s("lost"))
        .fenced(&newer)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        newer.refusal(own.as_service_error().and_then(FailedItem::failed_item)),
        None
    );
    assert_eq!(
        item(&sdk, &table, "42").await.unwrap()["status"],
        s("delivered")
    );
}

#[tokio::test]
async fn another_locks_fence_is_refused_and_an_item_without_a_fence_takes_one() {
    let Some(sdk) = sdk() else { return };
    let table = user_table(&sdk).await;
    // An item written before fencing was adopted.
    sdk.put_item()
        .table_name(&table)
        .item("id", s("7"))
        .item("status", s("new"))
        .send()
        .await
        .unwrap();
    let orders = ItemFence::new("order 7", &LockKey::new("orders"), Fence(3)).unwrap();
    sdk.update_item()
        .table_name(&table)
        .key("id", s("7"))
        .update_expression("SET #status = :status")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":status", s("paid"))
        .fenced(&orders)
        .send()
        .await
        .unwrap();
    let invoices = ItemFence::new("order 7", &LockKey::new("invoices"), Fence(9)).unwrap();
    let error = sdk
        .put_item()
        .table_name(&table)
        .item("id", s("7"))
        .fenced(&invoices)
        .send()
        .await
        .unwrap_err();
    match invoices.refusal(error.as_service_error().and_then(FailedItem::failed_item)) {
        Some(FenceRefused::OtherLock {
            fenced_by,
            presented_by,
            ..
        }) => assert_eq!(
            (fenced_by.as_str(), presented_by.as_str()),
            ("orders", "invoices")
        ),
        other => panic!("expected another lock's fence to be refused, got {other:?}"),
    }
    let kept = item(&sdk, &table, "7").await.unwrap();
    assert_eq!(kept["status"], s("paid"));
    // Renamed attributes, for a table that uses `fence` for its own.
    let renamed = ItemFence::new("order 8", &LockKey::new("orders"), Fence(2))
        .unwrap()
        .with_attributes("lock_fence", "lock_key")
        .unwrap();
    sdk.put_item()
        .table_name(&table)
        .item("id", s("8"))
        .item("fence", s("a picket fence"))
        .fenced(&renamed)
        .send()
        .await
        .unwrap();
    let eight = item(&sdk, &table, "8").await.unwrap();
    assert_eq!(eight["fence"], s("a picket fence"));
    assert_eq!(eight["lock_fence"], AttributeValue::N("2".into()));
}

/// Writers with interleaved fences race for one item: every admitted
/// update saw a fence no higher than its own before it (so no lower fence
/// was ever admitted after a higher one), and the item ends with the
/// highest fence's write.
#[tokio::test]
async fn racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one() {
    let Some(sdk) = sdk() else { return };
    let table = user_table(&sdk).await;
    let key = LockKey::new("orders");
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..24_u64 {
        let (sdk, table, key) = (sdk.clone(), table.clone(), key.clone());
        writers.spawn(async move {
            // Fences 1..=12, each twice, in an interleaved order.
            let fence = Fence(1 + (writer * 7) % 12);
            let fenced = ItemFence::new("order 1", &key, fence).unwrap();
            let written = sdk
                .update_item()
                .table_name(&table)
                .key("id", s("1"))
                .update_expression("SET #by = :by")
                .expression_attribute_names("#by", "written_by")
                .expression_attribute_values(":by", AttributeValue::N(fence.get().to_string()))
                .return_values(ReturnValue::AllOld)
                .fenced(&fenced)
                .send()
                .await;
            match written {
                Ok(output) => {
                    let before = output
                        .attributes
                        .and_then(|old| old.get("fence").cloned())
                        .map(|fence| match fence {
                            AttributeValue::N(n) => n.parse::<u64>().unwrap(),
                            other => panic!("{other:?}"),
                        });
                    Some((fence, before))
                }
                Err(error) => {
                    let failed = error.as_service_error().and_then(FailedItem::failed_item);
                    assert!(
                        matches!(fenced.refusal(failed), Some(FenceRefused::Stale { .. })),
                        "fence {fence}: {error:?}"
                    );
                    None
                }
            }
        });
    }
    let mut admitted = Vec::new();
    while let Some(result) = writers.join_next().await {
        if let Some(write) = result.unwrap() {
            admitted.push(write);
        }
    }
    for (fence, before) in &admitted {
        assert!(
            before.is_none_or(|before| before <= fence.get()),
            "fence {fence} admitted after fence {before:?}"
        );
    }
    let last = item(&sdk, &table, "1").await.unwrap();
    assert_eq!(last["fence"], AttributeValue::N("12".into()));
    assert_eq!(last["written_by"], AttributeValue::N("12".into()));
    assert!(admitted.iter().any(|(fence, _)| *fence == Fence(12)));
}
