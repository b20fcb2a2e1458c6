//! Records to and from rows: what a key and a record look like as column
//! values, the checks made before anything is sent, and reading a row back.

use std::time::Duration;

use lock_core::{
    Capabilities, DataUpdate, Fence, FenceUpdate, LockKey, LockRecord, NewRecord, Rvn, StoreClock,
    StoreError, WriteTime,
};
use tokio_postgres::Row;

/// Longest partition key, in UTF-8 bytes. Both key columns share one B-tree
/// index entry, which PostgreSQL caps at about 2,700 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 1024;
/// Longest sort key, in UTF-8 bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;
/// Largest record, in bytes: key, owner, RVN, data and the fixed columns.
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// What the fixed-width columns weigh (lease, released, fence, expiry).
const FIXED_BYTES: usize = 8 + 1 + 8 + 8;

/// The sort key column's value: `''` stands for "no sort key", which is why an
/// empty sort key is refused.
pub(crate) fn sort_column(key: &LockKey) -> &str {
    key.sort().unwrap_or("")
}

/// The table's key and record limits.
pub(crate) fn limits() -> Capabilities {
    Capabilities::default()
        .with_sort_keys(true)
        .with_key_limits(MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES)
        .with_max_record_bytes(MAX_RECORD_BYTES)
        .with_clock(StoreClock::Age)
}

/// Refuse a key the table cannot hold, before anything is sent.
pub(crate) fn check_key(key: &LockKey) -> Result<(), StoreError> {
    limits().check_key(key)?;
    no_nul("partition key", key.partition())?;
    no_nul("sort key", sort_column(key))
}

/// PostgreSQL's `text` cannot hold a NUL character.
fn no_nul(what: &str, value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::invalid(format!(
            "the {what} contains a NUL character, which PostgreSQL text cannot store"
        )));
    }
    Ok(())
}

/// The values a write sends, checked.
#[derive(Debug)]
pub(crate) struct WriteValues<'a> {
    pub(crate) owner: &'a str,
    pub(crate) rvn: &'a str,
    pub(crate) lease_ms: i64,
    pub(crate) released: bool,
    pub(crate) next_fence: bool,
    /// 0 keep, 1 replace, 2 clear (see the statements).
    pub(crate) data_mode: i32,
    pub(crate) data: Option<&'a [u8]>,
    pub(crate) expires_at: Option<i64>,
}

impl<'a> WriteValues<'a> {
    /// Check `new` against the table's limits; nothing is sent when this fails.
    pub(crate) fn check(key: &LockKey, new: &'a NewRecord) -> Result<Self, StoreError> {
        check_key(key)?;
        no_nul("owner name", &new.owner)?;
        no_nul("record version", new.rvn.as_str())?;
        let lease_ms = i64::try_from(new.lease.as_millis())
            .map_err(|_| StoreError::invalid("the lease is too long to store in milliseconds"))?;
        let expires_at = new
            .expires_at
            .map(|at| {
                i64::try_from(at).map_err(|_| {
                    StoreError::invalid(format!("the expiry time {at} does not fit a bigint"))
                })
            })
            .transpose()?;
        let (data_mode, data) = match &new.data {
            DataUpdate::Keep => (0, None),
            DataUpdate::Replace(bytes) => (1, Some(bytes.as_slice())),
            DataUpdate::Clear => (2, None),
        };
        let size = key.partition().len()
            + sort_column(key).len()
            + new.owner.len()
            + new.rvn.as_str().len()
            + data.map_or(0, <[u8]>::len)
            + FIXED_BYTES;
        limits().check_record_size(key, size)?;
        Ok(Self {
            owner: &new.owner,
            rvn: new.rvn.as_str(),
            lease_ms,
            released: new.released,
            next_fence: new.fence == FenceUpdate::Next,
            data_mode,
            data,
            expires_at,
        })
    }
}

/// Read a record from a row whose columns start at `first` in the order of
/// [`COLUMNS`](crate::sql::COLUMNS), followed by the record's age.
pub(crate) fn record(row: &Row, first: usize) -> Result<LockRecord, StoreError> {
    let column = |offset: usize| first + offset;
    let get = |error: tokio_postgres::Error| {
        StoreError::other(format!(
            "a row of the lock table could not be read ({error}); run validate_schema"
        ))
    };
    let partition: String = row.try_get(column(0)).map_err(get)?;
    let sort: String = row.try_get(column(1)).map_err(get)?;
    let owner: String = row.try_get(column(2)).map_err(get)?;
    let rvn: String = row.try_get(column(3)).map_err(get)?;
    let lease_ms: i64 = row.try_get(column(4)).map_err(get)?;
    let released: bool = row.try_get(column(5)).map_err(get)?;
    let fence: i64 = row.try_get(column(6)).map_err(get)?;
    let data: Option<Vec<u8>> = row.try_get(column(7)).map_err(get)?;
    let expires_at: Option<i64> = row.try_get(column(8)).map_err(get)?;
    // The age on the server's clock; a clock stepped back since the write
    // makes it negative, which proves nothing.
    let age_us: Option<i64> = row.try_get(column(9)).map_err(get)?;
    let key = if sort.is_empty() {
        LockKey::new(partition)
    } else {
        LockKey::with_sort(partition, sort)
    };
    let negative = |what: &str| {
        StoreError::other(format!(
            "the record of {key} has a negative {what}; it was not written by this store"
        ))
    };
    Ok(LockRecord {
        owner,
        rvn: Rvn::from_stored(rvn),
        lease: Duration::from_millis(u64::try_from(lease_ms).map_err(|_| negative("lease"))?),
        released,
        fence: Fence(u64::try_from(fence).map_err(|_| negative("fence"))?),
        data,
        expires_at: expires_at
            .map(u64::try_from)
            .transpose()
            .map_err(|_| negative("expiry"))?,
        written: age_us
            .map(|us| WriteTime::Ago(Duration::from_micros(u64::try_from(us).unwrap_or(0)))),
        key,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use lock_core::StoreErrorKind;

    fn new(owner: &str, data: DataUpdate) -> NewRecord {
        NewRecord {
            owner: owner.into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(20),
            released: false,
            fence: FenceUpdate::Next,
            data,
            expires_at: None,
        }
    }

    #[test]
    fn keys_the_table_cannot_hold_are_invalid() {
        for key in [
            LockKey::new(""),
            LockKey::with_sort("a", ""),
            LockKey::new("a\0b"),
            LockKey::with_sort("a", "b\0"),
            LockKey::new("x".repeat(MAX_PARTITION_KEY_BYTES + 1)),
            LockKey::with_sort("a", "x".repeat(MAX_SORT_KEY_BYTES + 1)),
        ] {
            let error = check_key(&key).unwrap_err();
            assert_eq!(error.kind(), StoreErrorKind::Invalid, "{key:?}: {error}");
        }
        check_key(&LockKey::with_sort(
            "x".repeat(MAX_PARTITION_KEY_BYTES),
            "y".repeat(MAX_SORT_KEY_BYTES),
        ))
        .unwrap();
    }

    #[test]
    fn oversized_records_and_nul_owners_are_invalid() {
        let key = LockKey::new("job");
        let big = new("me", DataUpdate::Replace(vec![0; MAX_RECORD_BYTES]));
        assert_eq!(
            WriteValues::check(&key, &big).unwrap_err().kind(),
            StoreErrorKind::Invalid
        );
        let nul = new("m\0e", DataUpdate::Keep);
        assert!(
            WriteValues::check(&key, &nul)
                .unwrap_err()
                .to_string()
                .contains("NUL")
        );
        let fine = new("me", DataUpdate::Replace(vec![1; 1000]));
        let values = WriteValues::check(&key, &fine).unwrap();
        assert_eq!((values.data_mode, values.lease_ms), (1, 20_000));
    }
}
