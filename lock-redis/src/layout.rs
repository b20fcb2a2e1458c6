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
//! {prefix}:index                  every lock, as partition/lock members (a sorted set)
//! {prefix}:released               the channel releases are announced on
//! ```
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
    /// The lock's member in the index: `partition/lock`.
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
            member: format!("{partition}/{lock}"),
            lock,
        }
    }

    /// The index of every lock.
    pub fn index(&self) -> String {
        format!("{}:index", self.prefix)
    }

    /// The channel releases are published on.
    pub fn channel(&self) -> String {
        format!("{}:released", self.prefix)
    }

    /// The index range `[start, end)` of `partition`'s locks, or of all.
    pub fn listing(&self, partition: Option<&str>) -> (String, String) {
        match partition {
            // `/` sorts before `0`: exactly the members `partition/...`.
            Some(partition) => {
                let partition = escape(partition);
                (format!("{partition}/"), format!("{partition}0"))
            }
            None => (String::new(), "\u{7f}".to_owned()),
        }
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
        let bare = layout.keys(&LockKey::new("a{b}"));
        assert_eq!(bare.record, "app:locks:{a%7Bb%7D}:r:-");
        assert_ne!(bare.lock, layout.keys(&LockKey::with_sort("a{b}", "")).lock);
    }

    #[test]
    fn members_map_back_to_their_keys_and_listings_hold_their_partition() {
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
        let (start, end) = layout.listing(Some("p"));
        let inside = |key: LockKey| {
            let member = layout.keys(&key).member;
            member >= start && member < end
        };
        assert!(inside(LockKey::new("p")));
        assert!(inside(LockKey::with_sort("p", "z")));
        assert!(!inside(LockKey::new("pq")));
        assert!(!inside(LockKey::new("p/q")));
    }
}
