//! Where each lock lives in Redis's key space. Every key of a partition
//! carries the partition as its hash tag (`{...}`), so in Redis Cluster a
//! lock's record and its fence floor sit in one slot, and one script can
//! read and write both.
//!
//! ```text
//! {prefix}:{partition}:r:-        a lock without a sort key (a hash)
//! {prefix}:{partition}:r:s{sort}  a lock with one
//! {prefix}:{partition}:f          the highest fence each lock of the partition
//!                                 was given (a hash; never expires; a lock's
//!                                 field goes only with a delete of the lock)
//! {prefix}:{partition}:i          the partition's locks (a sorted set of lock parts)
//! {prefix}:partitions             every partition with a lock (a sorted set)
//! {prefix}:released               the channel releases are announced on
//! ```
//!
//! Everything one script touches shares the partition's hash tag; only the
//! partition registry, written before a lock is first written (and never
//! removed from), lives elsewhere.
//!
//! Each key part is percent-encoded except ASCII letters, digits, `-` and
//! `_`, so a part never holds `{`, `}`, `:` or `/`: the mapping is
//! one-to-one and the hash tag is always the partition.

use lock_core::LockKey;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Every byte but ASCII letters, digits, `-` and `_` is escaped.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// Longest partition key in bytes (escaped, at most three times as long).
pub(crate) const MAX_PARTITION_BYTES: usize = 1024;
/// Longest sort key in bytes.
pub(crate) const MAX_SORT_BYTES: usize = 1024;

/// The keys of one store's locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    prefix: String,
}

/// The Redis keys of one lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The record's hash.
    pub record: String,
    /// The partition's fence floors.
    pub fences: String,
    /// The lock within its partition (`-`, or `s` and the escaped sort key):
    /// its field in `fences`.
    pub lock: String,
    /// The partition's index of locks.
    pub index: String,
    /// The escaped partition: its member in the partition registry.
    pub partition: String,
    /// The lock's name across partitions, a listing cursor:
    /// `partition/lock`.
    pub member: String,
}

impl Layout {
    /// Locks under `prefix`, which must hold no `{` or `}` (checked by the
    /// builder).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// The prefix as configured.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of `key`.
    pub fn keys(&self, key: &LockKey) -> LockKeys {
        let partition = escape(key.partition());
        let lock = match key.sort() {
            None => "-".to_owned(),
            Some(sort) => format!("s{}", escape(sort)),
        };
        LockKeys {
            record: format!("{}:{{{partition}}}:r:{lock}", self.prefix),
            fences: format!("{}:{{{partition}}}:f", self.prefix),
            index: self.partition_index(&partition),
            member: format!("{partition}/{lock}"),
            partition,
            lock,
        }
    }

    /// The index of the locks of the partition escaped as `partition`.
    pub fn partition_index(&self, partition: &str) -> String {
        format!("{}:{{{partition}}}:i", self.prefix)
    }

    /// The record key of `lock` (a lock part) in the partition escaped as
    /// `partition`.
    pub fn record_of(&self, partition: &str, lock: &str) -> String {
        format!("{}:{{{partition}}}:r:{lock}", self.prefix)
    }

    /// The registry of every partition with a lock.
    pub fn partitions(&self) -> String {
        format!("{}:partitions", self.prefix)
    }

    /// `partition`, escaped as in the keys.
    pub fn escaped(partition: &str) -> String {
        escape(partition)
    }

    /// The channel releases are published on.
    pub fn channel(&self) -> String {
        format!("{}:released", self.prefix)
    }

    /// The keys of the lock an index member names, or `None` for a member
    /// this layout did not write.
    pub fn keys_of_member(&self, member: &str) -> Option<LockKey> {
        let (partition, lock) = member.split_once('/')?;
        let partition = percent_decode_str(partition).decode_utf8().ok()?;
        if lock == "-" {
            return Some(LockKey::new(partition.into_owned()));
        }
        let sort = percent_decode_str(lock.strip_prefix('s')?)
            .decode_utf8()
            .ok()?;
        Some(LockKey::with_sort(
            partition.into_owned(),
            sort.into_owned(),
        ))
    }
}

fn escape(part: &str) -> String {
    utf8_percent_encode(part, ESCAPED).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_locks_keys_share_the_partition_as_hash_tag() {
        let layout = Layout::new("app:locks");
        let keys = layout.keys(&LockKey::with_sort("a{b}", "c d"));
        assert_eq!(keys.record, "app:locks:{a%7Bb%7D}:r:sc%20d");
        assert_eq!(keys.fences, "app:locks:{a%7Bb%7D}:f");
        assert_eq!(keys.lock, "sc%20d");
        assert_eq!(keys.member, "a%7Bb%7D/sc%20d");
        assert_eq!(keys.index, "app:locks:{a%7Bb%7D}:i");
        assert_eq!(layout.record_of(&keys.partition, &keys.lock), keys.record);
        let bare = layout.keys(&LockKey::new("a{b}"));
        assert_eq!(bare.record, "app:locks:{a%7Bb%7D}:r:-");
        assert_ne!(bare.lock, layout.keys(&LockKey::with_sort("a{b}", "")).lock);
    }

    #[test]
    fn members_map_back_to_their_keys() {
        let layout = Layout::new("x");
        for key in [
            LockKey::new("p/q"),
            LockKey::with_sort("p", "ü/-"),
            LockKey::with_sort("p", ""),
        ] {
            let member = layout.keys(&key).member;
            assert_eq!(layout.keys_of_member(&member), Some(key));
        }
        assert_eq!(layout.keys_of_member("no-slash"), None);
    }
}
