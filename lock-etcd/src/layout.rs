//! Where each lock lives in etcd's key space: one key per lock under the
//! store's prefix, the partition and sort key escaped into it.
//!
//! ```text
//! {prefix}/r/{partition}/-        a key without a sort key
//! {prefix}/r/{partition}/s{sort}  a key with one
//! ```
//!
//! Each key part is percent-encoded except ASCII letters, digits, `-` and
//! `_`, so a part never holds `/`: the mapping is one-to-one, and a
//! partition's locks are exactly the keys under `{prefix}/r/{partition}/`.

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
    /// The prefix as configured, without a trailing `/`.
    prefix: String,
}

impl Layout {
    /// Locks under `prefix` (`locks`, `app/locks`); a trailing `/` is dropped.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// The prefix as configured.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The etcd key holding `key`'s record.
    pub fn key(&self, key: &LockKey) -> String {
        let partition = escape(key.partition());
        match key.sort() {
            None => format!("{}/r/{partition}/-", self.prefix),
            Some(sort) => format!("{}/r/{partition}/s{}", self.prefix, escape(sort)),
        }
    }

    /// The key range `[start, end)` of every lock of `partition`, or of every
    /// lock with `None`.
    pub fn listing(&self, partition: Option<&str>) -> (String, String) {
        let start = match partition {
            None => format!("{}/r/", self.prefix),
            Some(partition) => format!("{}/r/{}/", self.prefix, escape(partition)),
        };
        // The prefixes end in `/`; `0` is the byte after it, so the range is
        // exactly the keys that start with the prefix.
        let mut end = start.clone();
        end.pop();
        end.push('0');
        (start, end)
    }
}

impl Layout {
    /// The announcement of `key`'s release: the key waiters watch, and the
    /// value that names the lock within its partition.
    pub fn announcement(&self, key: &LockKey) -> (String, String) {
        let lock = match key.sort() {
            None => "-".to_owned(),
            Some(sort) => format!("s{}", escape(sort)),
        };
        (
            format!("{}/n/{}", self.prefix, escape(key.partition())),
            lock,
        )
    }

    /// Where announcements are: the prefix waiters watch.
    pub fn announcements(&self) -> String {
        format!("{}/n/", self.prefix)
    }

    /// The lock an announcement (its key and value) names, if this layout
    /// wrote it.
    pub fn announced(&self, key: &str, value: &str) -> Option<LockKey> {
        let partition = key.strip_prefix(&self.announcements())?;
        let partition = percent_decode_str(partition).decode_utf8().ok()?;
        if value == "-" {
            return Some(LockKey::new(partition.into_owned()));
        }
        let sort = percent_decode_str(value.strip_prefix('s')?)
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
    fn keys_map_one_to_one_under_the_prefix() {
        let layout = Layout::new("app/locks/");
        assert_eq!(layout.key(&LockKey::new("jobs")), "app/locks/r/jobs/-");
        assert_eq!(
            layout.key(&LockKey::with_sort("a/b", "c d")),
            "app/locks/r/a%2Fb/sc%20d"
        );
        // No sort key and an empty sort key are different locks.
        assert_ne!(
            layout.key(&LockKey::new("p")),
            layout.key(&LockKey::with_sort("p", ""))
        );
        // A partition that looks like another's path stays its own.
        assert_ne!(
            layout.key(&LockKey::with_sort("a", "b")),
            layout.key(&LockKey::new("a/sb"))
        );
    }

    #[test]
    fn an_announcement_names_its_lock() {
        let layout = Layout::new("x");
        for key in [
            LockKey::new("a/b"),
            LockKey::with_sort("a", "ü c"),
            LockKey::with_sort("a", ""),
        ] {
            let (at, value) = layout.announcement(&key);
            assert!(at.starts_with(&layout.announcements()));
            assert_eq!(layout.announced(&at, &value), Some(key));
        }
        assert_eq!(layout.announced("x/r/a/-", "-"), None);
        let (start, end) = layout.listing(None);
        let (at, _) = layout.announcement(&LockKey::new("a"));
        assert!(!(at >= start && at < end), "announcements are not listed");
    }

    #[test]
    fn a_partition_listing_holds_its_own_keys_only() {
        let layout = Layout::new("x");
        let (start, end) = layout.listing(Some("a"));
        let inside = |key: &str| key >= start.as_str() && key < end.as_str();
        assert!(inside(&layout.key(&LockKey::new("a"))));
        assert!(inside(&layout.key(&LockKey::with_sort("a", "zz"))));
        assert!(!inside(&layout.key(&LockKey::new("ab"))));
        assert!(!inside(&layout.key(&LockKey::new("a-"))));
        let (start, end) = layout.listing(None);
        let all = |key: &str| key >= start.as_str() && key < end.as_str();
        assert!(all(&layout.key(&LockKey::new("ab"))));
    }
}
