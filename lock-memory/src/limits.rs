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

/// Refuse a record larger than the item limit (measured by [`record_size`],
/// plus the data the write keeps).
pub(crate) fn check_size(
    caps: &Capabilities,
    key: &LockKey,
    new: &NewRecord,
    kept_data: usize,
) -> Result<(), StoreError> {
    Ok(caps.check_record_size(key, record_size(key, new) + kept_data)?)
}
