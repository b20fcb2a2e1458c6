//! Fences checked at the resource, for `lease_lock.fencing` and the stores'
//! fenced writes: the same rules and expressions as the Rust crates (lock
//! keys named as `LockKey` prints them, a reader-writer lock's reads and
//! writes under its write lock's key, the DynamoDB condition and update of
//! `lock_dynamodb::ItemFence`, the PostgreSQL function of
//! `lock_postgres::FenceGuard`, the object metadata of
//! `lock_object_store::FencedObjects`), so Python and Rust writers of one
//! resource agree.

use lock_core::fencing::admit;
use lock_core::{Fence, LockKey};
use lock_dynamodb::ItemFence;
use pyo3::prelude::*;

use crate::election::Leadership;
use crate::errors;
use crate::lock::Lock;

/// The lock's key and fence of `lock`: a held `Lock` (a read of a
/// reader-writer lock: the write lock's key and the writer fence), a
/// `Leadership` (its lock's), or anything with a `key` (as fences name it:
/// a printed key, refused if no key prints so) and a `fence`, as
/// `fencing.FenceToken`.
pub(crate) fn key_and_fence(lock: &Bound<'_, PyAny>) -> PyResult<(LockKey, Fence)> {
    if let Ok(held) = lock.cast::<Lock>() {
        return Ok(held.borrow().fence_identity());
    }
    // Its `key` is the partition alone, not a printed key.
    if let Ok(leadership) = lock.cast::<Leadership>() {
        return Ok(leadership.borrow().fence_identity());
    }
    let key: String = lock.getattr("key")?.extract()?;
    let fence: u64 = lock.getattr("fence")?.extract()?;
    Ok((parsed(lock.py(), &key)?, Fence(fence)))
}

/// The key that prints as `printed` (a `FenceToken`'s key, a name a
/// resource kept), or `InvalidInput` saying why no key does.
fn parsed(py: Python<'_>, printed: &str) -> PyResult<LockKey> {
    LockKey::parse(printed).map_err(|error| errors::invalid_input(py, error.to_string()))
}

/// The key of `lock`'s lock as fences name it (`partition`, or
/// `partition/sort`, `%` and `/` in either part escaped; for a read or
/// write of a reader-writer lock its write lock's), and its fence (a
/// read's: the writer fence it was admitted with).
#[pyfunction]
pub(crate) fn _fence_of(lock: PyRef<'_, Lock>) -> (String, u64) {
    let (key, fence) = lock.fence_identity();
    (key.to_string(), fence.get())
}

/// The name fences give the lock with partition key `key` and sort key
/// `sort` (as `LockKey` prints it).
#[pyfunction]
#[pyo3(signature = (key, sort=None))]
pub(crate) fn _fence_key(key: &str, sort: Option<&str>) -> String {
    match sort {
        Some(sort) => LockKey::with_sort(key, sort).to_string(),
        None => LockKey::new(key).to_string(),
    }
}

/// The condition and update expression of a DynamoDB write fenced with
/// `fence` of the lock named `lock_key`, joined with the request's own
/// `condition` and `update` (an update expression only when `updating`),
/// the placeholders' names, and their values: the fence (a number, as
/// text) and the lock's key.
#[pyfunction]
#[pyo3(signature = (resource, lock_key, fence, fence_attribute, lock_attribute, condition, update, updating))]
#[allow(clippy::too_many_arguments)] // a private call of the Python layer
pub(crate) fn _dynamodb_fence(
    py: Python<'_>,
    resource: &str,
    lock_key: &str,
    fence: u64,
    fence_attribute: &str,
    lock_attribute: &str,
    condition: Option<&str>,
    update: Option<&str>,
    updating: bool,
) -> PyResult<DynamoDbFence> {
    let key = parsed(py, lock_key)?;
    let item = ItemFence::new(resource, &key, Fence(fence))
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
        fence_value: (values[0].0.to_owned(), fence.to_string()),
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
/// `current_fence` of the lock named `current_lock` refusing `fence` of
/// the lock named `lock_key` (the rule of `lock_core::fencing`); return if
/// it admits it.
#[pyfunction]
pub(crate) fn _check_fence(
    py: Python<'_>,
    resource: &str,
    current_lock: &str,
    current_fence: u64,
    lock_key: &str,
    fence: u64,
) -> PyResult<()> {
    admit(
        resource,
        Some((current_lock, Fence(current_fence))),
        lock_key,
        Fence(fence),
    )
    .map_err(|refused| errors::fence_refused(py, &refused))
}

/// The fence function's arguments for `fence` of the lock named `lock_key`
/// and `resource`, checked as the Rust `FenceGuard::admit` checks them
/// before sending: the fence as a `bigint`.
#[pyfunction]
pub(crate) fn _postgres_fence_arguments(
    py: Python<'_>,
    resource: &str,
    lock_key: &str,
    fence: u64,
) -> PyResult<i64> {
    let key = parsed(py, lock_key)?;
    lock_postgres::fence::check_arguments(resource, &key, Fence(fence))
        .map_err(|refused| errors::fence_refused(py, &refused))
}
