//! What the in-memory store accepts: key and record size limits, and how a
//! record's size is measured.

use lock_core::{Capabilities, LockKey, NewRecord, StoreError};

/// Bytes every record is charged beyond its strings and data: attribute names and
/// the fixed-size fields (lease, fence, released flag, expiry), roughly as a
/// DynamoDB item would spend them.
pub const RECORD_OVERHEAD_BYTES: usize = 64;

/// The size the store charges for writing `new` under `key`: the UTF-8 bytes of
/// the partition key, sort key, owner and RVN, the data bytes the write stores,
/// and [`RECORD_OVERHEAD_BYTES`]. (The store adds the data a write keeps
/// before comparing with the limit.) A write whose size exceeds
/// [`Capabilities::max_record_bytes`] is refused as
/// [`Invalid`](lock_core::StoreErrorKind::Invalid).
pub fn record_size(key: &LockKey, new: &NewRecord) -> usize {
    key.partition().len()
        + key.sort().map_or(0, str::len)
        + new.owner.len()
        + new.rvn.as_str().len()
        + new.data.bytes().map_or(0, <[u8]>::len)
        + RECORD_OVERHEAD_BYTES
}

/// Refuse an empty or oversized key, or a sort key the store does not take.
pub(crate) fn check_key(caps: &Capabilities, key: &LockKey) -> Result<(), StoreError> {
    check_partition(caps, key.partition())?;
    let Some(sort) = key.sort() else {
        return Ok(());
    };
    if !caps.sort_keys {
        return Err(StoreError::invalid(format!(
            "lock {key}: this store is configured without sort keys"
        )));
    }
    if sort.is_empty() {
        return Err(StoreError::invalid(format!(
            "lock {key}: the sort key is empty"
        )));
    }
    if sort.len() > caps.max_sort_key_bytes {
        return Err(StoreError::invalid(format!(
            "the sort key is {} bytes; this store allows at most {}",
            sort.len(),
            caps.max_sort_key_bytes
        )));
    }
    Ok(())
}

/// Refuse an empty or oversized partition key (also used for the list filter).
pub(crate) fn check_partition(caps: &Capabilities, partition: &str) -> Result<(), StoreError> {
    if partition.is_empty() {
        return Err(StoreError::invalid("the partition key is empty"));
    }
    if partition.len() > caps.max_partition_key_bytes {
        return Err(StoreError::invalid(format!(
            "the partition key is {} bytes; this store allows at most {}",
            partition.len(),
            caps.max_partition_key_bytes
        )));
    }
    Ok(())
}

/// Refuse a record larger than the item limit.
pub(crate) fn check_size(
    caps: &Capabilities,
    key: &LockKey,
    new: &NewRecord,
    kept_data: usize,
) -> Result<(), StoreError> {
    let size = record_size(key, new) + kept_data;
    if size > caps.max_record_bytes {
        return Err(StoreError::invalid(format!(
            "lock {key}: the record takes {size} bytes (key, owner, RVN, data and \
             {RECORD_OVERHEAD_BYTES} bytes of overhead); this store allows at most {}",
            caps.max_record_bytes
        )));
    }
    Ok(())
}
