//! Fences checked at the resource, for `lease_lock.fencing` and the stores'
//! fenced writes: the same rules and expressions as the Rust crates (lock
//! keys named as `LockKey` prints them, the DynamoDB condition and update of
//! `lock_dynamodb::ItemFence`, the PostgreSQL function of
//! `lock_postgres::FenceGuard`, the object metadata of
//! `lock_object_store::FencedObjects`), so Python and Rust writers of one
//! resource agree.

use lock_core::fencing::admit;
use lock_core::{Fence, LockKey};
use lock_dynamodb::ItemFence;
use pyo3::prelude::*;

use crate::errors;
use crate::lock::Lock;

/// The key of `lock`'s lock as fences name it (`partition` or
/// `partition/sort`), and its fence.
fn fence_of(lock: &Lock) -> (LockKey, Fence) {
    let view = lock.view();
    (view.key().clone(), view.fence())
}

/// The condition and update expression of a DynamoDB write fenced with
/// `lock`'s fence, joined with the request's own `condition` and `update`
/// (an update expression only when `updating`), the placeholders' names,
/// and their values: the fence (a number, as text) and the lock's key.
#[pyfunction]
#[pyo3(signature = (resource, lock, fence_attribute, lock_attribute, condition, update, updating))]
#[allow(clippy::too_many_arguments)] // a private call of the Python layer, by keyword
pub(crate) fn _dynamodb_fence(
    py: Python<'_>,
    resource: &str,
    lock: PyRef<'_, Lock>,
    fence_attribute: &str,
    lock_attribute: &str,
    condition: Option<&str>,
    update: Option<&str>,
    updating: bool,
) -> PyResult<DynamoDbFence> {
    let (key, fence) = fence_of(&lock);
    let item = ItemFence::new(resource, &key, fence)
        .and_then(|item| item.with_attributes(fence_attribute, lock_attribute))
        .map_err(|refused| errors::fence_refused(py, &refused))?;
    let values = item.values();
    Ok(DynamoDbFence {
        condition: item.and_condition(condition),
        update: updating.then(|| item.and_update(update)),
        names: item
            .names()
            .iter()
            .map(|(name, attribute)| ((*name).to_owned(), (*attribute).to_owned()))
            .collect(),
        fence_value: (values[0].0.to_owned(), fence.get().to_string()),
        lock_value: (values[1].0.to_owned(), key.to_string()),
    })
}

/// What `_dynamodb_fence` returns: the expressions, the names, and the
/// values' placeholders with the fence (a number, as text) and the lock.
#[derive(IntoPyObject)]
pub(crate) struct DynamoDbFence {
    condition: String,
    update: Option<String>,
    names: Vec<(String, String)>,
    fence_value: (String, String),
    lock_value: (String, String),
}

/// Raise the exception for a resource last written by fence
/// `current_fence` of the lock named `current_lock` refusing `lock`'s
/// fence (the rule of `lock_core::fencing`); return if it admits it.
#[pyfunction]
pub(crate) fn _check_fence(
    py: Python<'_>,
    resource: &str,
    current_lock: &str,
    current_fence: u64,
    lock: PyRef<'_, Lock>,
) -> PyResult<()> {
    let (key, fence) = fence_of(&lock);
    admit(
        resource,
        Some((current_lock, Fence(current_fence))),
        &key.to_string(),
        fence,
    )
    .map_err(|refused| errors::fence_refused(py, &refused))
}

/// The arguments of the PostgreSQL fence function for `lock` and
/// `resource` (the resource, the lock's key, its fence), checked as the
/// Rust `FenceGuard::admit` checks them before sending.
#[pyfunction]
pub(crate) fn _postgres_fence_arguments(
    py: Python<'_>,
    resource: &str,
    lock: PyRef<'_, Lock>,
) -> PyResult<(String, String, i64)> {
    let (key, fence) = fence_of(&lock);
    let checked = lock_postgres::fence::check_arguments(resource, &key, fence)
        .map_err(|refused| errors::fence_refused(py, &refused))?;
    Ok((resource.to_owned(), key.to_string(), checked))
}
