//! What inspection returns: [`LockInfo`] and [`LockPage`].

use std::time::Duration;

use crate::{Cursor, Fence, LockKey, LockRecord};

/// A lock as stored, for inspection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock.
    pub key: LockKey,
    /// Owner name of the last writer.
    pub owner: String,
    /// Fence of the latest acquisition.
    pub fence: Fence,
    /// Lease the holder promised.
    pub lease: Duration,
    /// Whether the lock is released (vacant).
    pub released: bool,
    /// Data stored with the lock.
    pub data: Option<Vec<u8>>,
    /// Whether this client holds it right now (under this exact record version).
    pub held_by_this_client: bool,
    /// The record version, for scripts that release by version.
    pub version: String,
}

impl LockInfo {
    pub(crate) fn from_record(record: LockRecord, held_by_this_client: bool) -> Self {
        Self {
            key: record.key,
            owner: record.owner,
            fence: record.fence,
            lease: record.lease,
            released: record.released,
            data: record.data,
            held_by_this_client,
            version: record.rvn.as_str().to_owned(),
        }
    }
}

/// One page of [`LockInfo`]s.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LockPage {
    /// The locks.
    pub locks: Vec<LockInfo>,
    /// Cursor of the next page, if any.
    pub next: Option<Cursor>,
}
