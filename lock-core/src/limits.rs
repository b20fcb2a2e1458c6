//! The limits a store states in its [`Capabilities`]: how long a key may be,
//! whether it may have a sort key, how large a record may grow. Checked one
//! way, with one set of messages, by the client before it writes anything
//! and by every store before it sends anything (a store used on its own
//! refuses the same input).

use crate::{Capabilities, LockKey, StoreError};

/// A key or a record a store cannot hold. Each message says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// The partition key is empty.
    #[error("the partition key is empty; give it at least one byte")]
    EmptyPartitionKey,
    /// The partition key is longer than the store allows.
    #[error("the partition key is {bytes} bytes; this store allows at most {max}")]
    PartitionKeyTooLong {
        /// Its length in UTF-8 bytes.
        bytes: usize,
        /// The store's limit.
        max: usize,
    },
    /// The key has a sort key and the store (or its table) has none.
    #[error("lock {key}: this store has no sort keys; use a key without one")]
    SortKeyUnsupported {
        /// The key refused.
        key: LockKey,
    },
    /// The sort key is empty.
    #[error(
        "lock {key}: the sort key is empty; use a key without a sort key, or give it at least one byte"
    )]
    EmptySortKey {
        /// The key refused.
        key: LockKey,
    },
    /// The sort key is longer than the store allows.
    #[error("the sort key is {bytes} bytes; this store allows at most {max}")]
    SortKeyTooLong {
        /// Its length in UTF-8 bytes.
        bytes: usize,
        /// The store's limit.
        max: usize,
    },
    /// The record would be larger than the store allows.
    #[error(
        "lock {key}: the record takes {bytes} bytes; this store allows at most {max} (store less data with the lock)"
    )]
    RecordTooLarge {
        /// The lock's key.
        key: LockKey,
        /// The record's size as the store measures it.
        bytes: usize,
        /// The store's limit.
        max: usize,
    },
}

impl From<LimitError> for StoreError {
    /// An [`Invalid`](crate::StoreErrorKind::Invalid) store error with the
    /// limit's message: not retried.
    fn from(error: LimitError) -> Self {
        StoreError::invalid(error.to_string())
    }
}

impl Capabilities {
    /// The most readers a reader-writer lock on this store may have
    /// ([`LockClient::rw_lock`](crate::LockClient::rw_lock)). Each reader holds
    /// a record of its own, which a waiting writer reads on every poll: with
    /// sort keys one query reads a page of them, so up to
    /// [`MAX_PERMITS`](crate::MAX_PERMITS); without, each is a request of its
    /// own, so 100.
    pub fn max_readers(&self) -> u32 {
        if self.sort_keys {
            crate::MAX_PERMITS
        } else {
            100
        }
    }

    /// A partition key this store can hold (also a listing's partition
    /// filter): not empty, not longer than
    /// [`max_partition_key_bytes`](Self::max_partition_key_bytes).
    pub fn check_partition(&self, partition: &str) -> Result<(), LimitError> {
        if partition.is_empty() {
            return Err(LimitError::EmptyPartitionKey);
        }
        if partition.len() > self.max_partition_key_bytes {
            return Err(LimitError::PartitionKeyTooLong {
                bytes: partition.len(),
                max: self.max_partition_key_bytes,
            });
        }
        Ok(())
    }

    /// A key this store can hold: its partition key, and a sort key only
    /// where the store has them, not empty and not too long.
    ///
    /// ```
    /// use lock_core::{Capabilities, LimitError, LockKey};
    ///
    /// let caps = Capabilities::default().with_key_limits(8, 8);
    /// assert!(caps.check_key(&LockKey::new("orders")).is_ok());
    /// assert!(matches!(
    ///     caps.check_key(&LockKey::new("a-much-longer-key")),
    ///     Err(LimitError::PartitionKeyTooLong { bytes: 17, max: 8 })
    /// ));
    /// ```
    pub fn check_key(&self, key: &LockKey) -> Result<(), LimitError> {
        self.check_partition(key.partition())?;
        let Some(sort) = key.sort() else {
            return Ok(());
        };
        if !self.sort_keys {
            return Err(LimitError::SortKeyUnsupported { key: key.clone() });
        }
        if sort.is_empty() {
            return Err(LimitError::EmptySortKey { key: key.clone() });
        }
        if sort.len() > self.max_sort_key_bytes {
            return Err(LimitError::SortKeyTooLong {
                bytes: sort.len(),
                max: self.max_sort_key_bytes,
            });
        }
        Ok(())
    }

    /// A record of `bytes` (as the store measures its records) under `key`
    /// fits [`max_record_bytes`](Self::max_record_bytes).
    pub fn check_record_size(&self, key: &LockKey, bytes: usize) -> Result<(), LimitError> {
        if bytes > self.max_record_bytes {
            return Err(LimitError::RecordTooLarge {
                key: key.clone(),
                bytes,
                max: self.max_record_bytes,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Capabilities {
        Capabilities::default()
            .with_sort_keys(true)
            .with_key_limits(3, 4)
            .with_max_record_bytes(10)
    }

    #[test]
    fn each_limit_is_refused_at_one_past_it_and_accepted_at_it() {
        let caps = caps();
        assert_eq!(caps.check_partition(""), Err(LimitError::EmptyPartitionKey));
        assert_eq!(caps.check_partition("abc"), Ok(()));
        assert_eq!(
            caps.check_partition("abcd"),
            Err(LimitError::PartitionKeyTooLong { bytes: 4, max: 3 })
        );
        assert_eq!(caps.check_key(&LockKey::with_sort("k", "abcd")), Ok(()));
        assert_eq!(
            caps.check_key(&LockKey::with_sort("k", "abcde")),
            Err(LimitError::SortKeyTooLong { bytes: 5, max: 4 })
        );
        let empty = LockKey::with_sort("k", "");
        assert_eq!(
            caps.check_key(&empty),
            Err(LimitError::EmptySortKey { key: empty.clone() })
        );
        let key = LockKey::new("k");
        assert_eq!(caps.check_record_size(&key, 10), Ok(()));
        assert_eq!(
            caps.check_record_size(&key, 11),
            Err(LimitError::RecordTooLarge {
                key,
                bytes: 11,
                max: 10
            })
        );
    }

    #[test]
    fn a_sort_key_is_refused_where_the_store_has_none() {
        let caps = caps().with_sort_keys(false);
        let key = LockKey::with_sort("k", "s");
        assert_eq!(
            caps.check_key(&key),
            Err(LimitError::SortKeyUnsupported { key: key.clone() })
        );
        let Err(limit) = caps.check_key(&key) else {
            panic!("a sort key was accepted by a store without them");
        };
        let refused = StoreError::from(limit);
        assert_eq!(refused.kind(), crate::StoreErrorKind::Invalid);
        assert!(
            refused.to_string().contains("use a key without one"),
            "{refused}"
        );
    }
}
