//! Fences checked at your own items: a lock's fence added to your
//! `PutItem`, `UpdateItem`, `DeleteItem` or `TransactWriteItems` on the item
//! the lock protects, so that DynamoDB refuses the write of a holder whose
//! lease ran out (paused, partitioned) once the next holder wrote. The write
//! stays one request.
//!
//! [`ItemFence`] is a lock's key and fence (from a held guard); [`Fenced`]
//! adds it to a request builder of aws-sdk-dynamodb:
//!
//! * the condition `attribute_not_exists(fence) OR (fence_lock = :lock AND
//!   fence <= :fence)`, joined with `AND` to a condition the request has;
//! * the item's new fence and lock key, written by the same request (an
//!   `Item`'s attributes for a put, a `SET` for an update);
//! * `ReturnValuesOnConditionCheckFailure = ALL_OLD`, so that a refusal
//!   shows the item, and [`ItemFence::refusal`] can tell a stale fence
//!   from your own condition failing.
//!
//! The rule is [`lock_core::fencing`]'s: an item no fence wrote yet (new,
//! or written before you adopted fencing) takes any fence; after that only
//! the same lock's fence, at least as high as the item's.
//!
//! A delete removes the item's fence with the item: a stale holder could then
//! create it again. Where that matters, mark the item deleted with a fenced
//! update instead (a tombstone that keeps the fence).
//!
//! ```no_run
//! use aws_sdk_dynamodb::types::AttributeValue;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_dynamodb::{DynamoDbStore, FailedItem, Fenced, ItemFence};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let store = DynamoDbStore::builder("locks").build_from_env().await?;
//! # let dynamodb = store.client().clone();
//! let client = LockClient::builder(store).build()?;
//! let guard = client.acquire("orders/42", AcquireOptions::new()).await?;
//! let fence = ItemFence::new("orders/42", guard.key(), guard.fence())?;
//! let written = dynamodb
//!     .update_item()
//!     .table_name("orders")
//!     .key("id", AttributeValue::S("42".into()))
//!     .update_expression("SET #status = :status")
//!     .expression_attribute_names("#status", "status")
//!     .expression_attribute_values(":status", AttributeValue::S("shipped".into()))
//!     .fenced(&fence)
//!     .send()
//!     .await;
//! if let Err(error) = &written {
//!     if let Some(refused) = fence.refusal(error.as_service_error().and_then(FailedItem::failed_item)) {
//!         eprintln!("{refused}: stop, the lock was taken over");
//!     }
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::builders::{DeleteBuilder, PutBuilder, UpdateBuilder};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use lock_core::fencing::{admit, check_input};
use lock_core::{Fence, FenceRefused, LockKey};

/// The attribute an item's fence is kept in, unless renamed.
pub const FENCE_ATTRIBUTE: &str = "fence";
/// The attribute the key of the lock whose fence wrote the item is kept in,
/// unless renamed.
pub const FENCE_LOCK_ATTRIBUTE: &str = "fence_lock";

/// The placeholders the fence's condition and update use (unlikely to meet
/// a request's own).
const NAME_FENCE: &str = "#lease_lock_fence";
const NAME_LOCK: &str = "#lease_lock_fence_lock";
const VALUE_FENCE: &str = ":lease_lock_fence";
const VALUE_LOCK: &str = ":lease_lock_fence_lock";

/// A lock's fence for writes of one item: see the [module docs](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemFence {
    resource: String,
    lock: String,
    fence: Fence,
    fence_attribute: String,
    lock_attribute: String,
}

impl ItemFence {
    /// The fence `fence` of the lock `lock` (a guard's
    /// [`key`](lock_core::LockView::key) and
    /// [`fence`](lock_core::LockView::fence)) for writes of the item named
    /// `resource` (your name for it, used in errors). Refused for fence 0 or
    /// an empty name.
    pub fn new(
        resource: impl Into<String>,
        lock: &LockKey,
        fence: Fence,
    ) -> Result<Self, FenceRefused> {
        let resource = resource.into();
        let lock = lock.to_string();
        check_input(&resource, &lock, fence)?;
        Ok(Self {
            resource,
            lock,
            fence,
            fence_attribute: FENCE_ATTRIBUTE.to_owned(),
            lock_attribute: FENCE_LOCK_ATTRIBUTE.to_owned(),
        })
    }

    /// The same fence kept in other attributes of the item (for a table that
    /// uses `fence` or `fence_lock` for something else). Refused for an
    /// empty name or two equal ones.
    pub fn with_attributes(
        self,
        fence: impl Into<String>,
        lock: impl Into<String>,
    ) -> Result<Self, FenceRefused> {
        let (fence_attribute, lock_attribute) = (fence.into(), lock.into());
        if fence_attribute.is_empty()
            || lock_attribute.is_empty()
            || fence_attribute == lock_attribute
        {
            return Err(FenceRefused::InvalidInput {
                reason: format!(
                    "item {}: the fence's attributes must be two different non-empty names (got {fence_attribute:?} and {lock_attribute:?})",
                    self.resource
                ),
            });
        }
        Ok(Self {
            fence_attribute,
            lock_attribute,
            ..self
        })
    }

    /// The fence.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The condition the write is made under, with its placeholders.
    pub fn condition(&self) -> String {
        format!(
            "(attribute_not_exists({NAME_FENCE}) OR ({NAME_LOCK} = {VALUE_LOCK} AND {NAME_FENCE} <= {VALUE_FENCE}))"
        )
    }

    /// `condition` joined with the fence's condition.
    pub fn and_condition(&self, condition: Option<&str>) -> String {
        match condition.map(str::trim).filter(|c| !c.is_empty()) {
            Some(condition) => format!("({condition}) AND {}", self.condition()),
            None => self.condition(),
        }
    }

    /// `update` (an `UpdateItem` expression) that also writes the fence: its
    /// `SET` clause gains the fence's two attributes, or one is added.
    pub fn and_update(&self, update: Option<&str>) -> String {
        let set = format!("{NAME_FENCE} = {VALUE_FENCE}, {NAME_LOCK} = {VALUE_LOCK}");
        let Some(update) = update.map(str::trim).filter(|u| !u.is_empty()) else {
            return format!("SET {set}");
        };
        // `SET` is a reserved word: an attribute of that name must be a
        // placeholder, so the bare word is always the clause.
        match set_clause(update) {
            Some(at) => format!(
                "{}SET {set}, {}",
                &update[..at],
                update[at + 3..].trim_start()
            ),
            None => format!("SET {set} {update}"),
        }
    }

    /// The placeholders' names.
    pub fn names(&self) -> [(&'static str, &str); 2] {
        [
            (NAME_FENCE, &self.fence_attribute),
            (NAME_LOCK, &self.lock_attribute),
        ]
    }

    /// The placeholders' values.
    pub fn values(&self) -> [(&'static str, AttributeValue); 2] {
        [
            (VALUE_FENCE, AttributeValue::N(self.fence.0.to_string())),
            (VALUE_LOCK, AttributeValue::S(self.lock.clone())),
        ]
    }

    /// The item's attributes that a fenced put writes.
    pub fn item_attributes(&self) -> [(String, AttributeValue); 2] {
        [
            (
                self.fence_attribute.clone(),
                AttributeValue::N(self.fence.0.to_string()),
            ),
            (
                self.lock_attribute.clone(),
                AttributeValue::S(self.lock.clone()),
            ),
        ]
    }

    /// Why a fenced write was refused, judged from the item its condition
    /// failed on (see [`FailedItem`]): `Some` when the fence was refused
    /// (stale, or another lock's), `None` when the item admits the fence
    /// (your own condition failed) or none was returned.
    pub fn refusal(&self, item: Option<&HashMap<String, AttributeValue>>) -> Option<FenceRefused> {
        let item = item?;
        let fence = match item.get(&self.fence_attribute)? {
            AttributeValue::N(number) => Fence(number.parse().ok()?),
            _ => return None,
        };
        let lock = match item.get(&self.lock_attribute) {
            Some(AttributeValue::S(lock)) => lock.as_str(),
            _ => "",
        };
        admit(&self.resource, Some((lock, fence)), &self.lock, self.fence).err()
    }
}

/// Where the bare word `SET` starts a clause of `update`, if it does.
fn set_clause(update: &str) -> Option<usize> {
    let bytes = update.as_bytes();
    (0..bytes.len().saturating_sub(2)).find(|&at| {
        update[at..].len() >= 3
            && update.is_char_boundary(at)
            && update.is_char_boundary(at + 3)
            && update[at..at + 3].eq_ignore_ascii_case("SET")
            && (at == 0 || bytes[at - 1].is_ascii_whitespace())
            && bytes.get(at + 3).is_none_or(u8::is_ascii_whitespace)
    })
}

/// A request builder a fence can be added to: `PutItem`, `UpdateItem` and
/// `DeleteItem`, and the `Put`, `Update` and `Delete` of a
/// `TransactWriteItems`.
pub trait Fenced: Sized {
    /// The request, made under the fence's condition and writing the fence
    /// (see the [module docs](self)).
    #[must_use]
    fn fenced(self, fence: &ItemFence) -> Self;
}

/// Adds the placeholders and asks for the old item on a failed condition.
macro_rules! with_fence_placeholders {
    ($builder:expr, $fence:expr) => {{
        let mut builder = $builder;
        for (name, attribute) in $fence.names() {
            builder = builder.expression_attribute_names(name, attribute);
        }
        for (name, value) in $fence.values() {
            builder = builder.expression_attribute_values(name, value);
        }
        builder
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }};
}

macro_rules! fenced_put {
    ($($builder:ty),*) => {$(
        impl Fenced for $builder {
            fn fenced(self, fence: &ItemFence) -> Self {
                let condition = fence.and_condition(self.get_condition_expression().as_deref());
                let mut builder = self.condition_expression(condition);
                for (name, value) in fence.item_attributes() {
                    builder = builder.item(name, value);
                }
                with_fence_placeholders!(builder, fence)
            }
        }
    )*};
}

macro_rules! fenced_update {
    ($($builder:ty),*) => {$(
        impl Fenced for $builder {
            fn fenced(self, fence: &ItemFence) -> Self {
                let condition = fence.and_condition(self.get_condition_expression().as_deref());
                let update = fence.and_update(self.get_update_expression().as_deref());
                let builder = self.condition_expression(condition).update_expression(update);
                with_fence_placeholders!(builder, fence)
            }
        }
    )*};
}

macro_rules! fenced_delete {
    ($($builder:ty),*) => {$(
        impl Fenced for $builder {
            fn fenced(self, fence: &ItemFence) -> Self {
                // A delete writes no attribute: only the fence's condition.
                let condition = fence.and_condition(self.get_condition_expression().as_deref());
                with_fence_placeholders!(self.condition_expression(condition), fence)
            }
        }
    )*};
}

fenced_put!(PutItemFluentBuilder, PutBuilder);
fenced_update!(UpdateItemFluentBuilder, UpdateBuilder);
fenced_delete!(DeleteItemFluentBuilder, DeleteBuilder);

/// An operation's error that may be a failed condition: the item it failed
/// on, for [`ItemFence::refusal`].
pub trait FailedItem {
    /// The item the condition failed on, if the error is a failed condition
    /// that returned it.
    fn failed_item(&self) -> Option<&HashMap<String, AttributeValue>>;
}

impl FailedItem for PutItemError {
    fn failed_item(&self) -> Option<&HashMap<String, AttributeValue>> {
        match self {
            PutItemError::ConditionalCheckFailedException(failed) => failed.item(),
            _ => None,
        }
    }
}

impl FailedItem for UpdateItemError {
    fn failed_item(&self) -> Option<&HashMap<String, AttributeValue>> {
        match self {
            UpdateItemError::ConditionalCheckFailedException(failed) => failed.item(),
            _ => None,
        }
    }
}

impl FailedItem for DeleteItemError {
    fn failed_item(&self) -> Option<&HashMap<String, AttributeValue>> {
        match self {
            DeleteItemError::ConditionalCheckFailedException(failed) => failed.item(),
            _ => None,
        }
    }
}

/// The item a transaction's write number `index` (from 0, in the order of
/// its `TransactItems`) failed its condition on, if the transaction was
/// cancelled for that.
pub fn failed_transaction_item(
    error: &TransactWriteItemsError,
    index: usize,
) -> Option<&HashMap<String, AttributeValue>> {
    let TransactWriteItemsError::TransactionCanceledException(cancelled) = error else {
        return None;
    };
    let reason = cancelled.cancellation_reasons().get(index)?;
    (reason.code() == Some("ConditionalCheckFailed"))
        .then(|| reason.item())
        .flatten()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fence(n: u64) -> ItemFence {
        ItemFence::new("orders/42", &LockKey::new("orders"), Fence(n))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_condition_and_an_update_gain_the_fences() {
        let f = fence(7);
        assert_eq!(
            f.and_condition(Some("attribute_exists(id)")),
            format!("(attribute_exists(id)) AND {}", f.condition())
        );
        assert_eq!(f.and_condition(Some("  ")), f.condition());
        let set = "#lease_lock_fence = :lease_lock_fence, #lease_lock_fence_lock = :lease_lock_fence_lock";
        assert_eq!(f.and_update(None), format!("SET {set}"));
        assert_eq!(
            f.and_update(Some("set #a = :a REMOVE #b")),
            format!("SET {set}, #a = :a REMOVE #b")
        );
        assert_eq!(
            f.and_update(Some("ADD #n :one  SET #a = :a")),
            format!("ADD #n :one  SET {set}, #a = :a")
        );
        assert_eq!(
            f.and_update(Some("REMOVE #settings")),
            format!("SET {set} REMOVE #settings")
        );
        assert_eq!(set_clause("REMOVE offset"), None);
    }

    #[test]
    fn a_refusal_is_told_from_the_items_fence() {
        let f = fence(7);
        let item = |fence: &str, lock: &str| {
            HashMap::from([
                ("fence".to_owned(), AttributeValue::N(fence.to_owned())),
                ("fence_lock".to_owned(), AttributeValue::S(lock.to_owned())),
            ])
        };
        assert!(matches!(
            f.refusal(Some(&item("8", "orders"))),
            Some(FenceRefused::Stale {
                highest: Fence(8),
                ..
            })
        ));
        assert!(matches!(
            f.refusal(Some(&item("3", "invoices"))),
            Some(FenceRefused::OtherLock { .. })
        ));
        assert_eq!(
            f.refusal(Some(&item("7", "orders"))),
            None,
            "admitted: your condition failed"
        );
        assert_eq!(f.refusal(Some(&HashMap::new())), None, "never fenced");
        assert_eq!(f.refusal(None), None);
    }

    #[test]
    fn bad_input_is_refused_saying_what_to_change() {
        let key = LockKey::new("orders");
        let zero = ItemFence::new("orders/42", &key, Fence(0)).unwrap_err();
        assert!(zero.to_string().contains("start at 1"), "{zero}");
        let nameless = ItemFence::new("", &key, Fence(1)).unwrap_err();
        assert!(nameless.to_string().contains("needs a name"), "{nameless}");
        let same = fence(1).with_attributes("f", "f").unwrap_err();
        assert!(same.to_string().contains("two different"), "{same}");
    }
}
