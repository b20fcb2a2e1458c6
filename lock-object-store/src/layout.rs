//! Where each lock lives in the bucket: one object per key under the store's
//! prefix, the partition and sort key escaped into the path.
//!
//! ```text
//! {prefix}/{partition}/lock.json          a key without a sort key
//! {prefix}/{partition}/sort/{sort}.json   a key with one
//! ```
//!
//! Each key part is percent-encoded except ASCII letters, digits, `-` and
//! `_`, so a part never holds `/` or `.`: the mapping is one-to-one, `lock.json`
//! and `sort/` can never be a part, and a partition's locks are exactly the
//! objects under `{prefix}/{partition}/`.

use lock_core::LockKey;
use object_store::path::{Path, PathPart};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Every byte but ASCII letters, digits, `-` and `_` is escaped.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_');

/// The object name of a key without a sort key.
const UNSORTED: &str = "lock.json";
/// The folder of a partition's sort keys.
const SORTED: &str = "sort";
/// The suffix of a sort key's object.
const SUFFIX: &str = ".json";

/// Longest prefix, in bytes: with the key limits below, the longest escaped
/// path stays within S3's 1,024-byte key limit.
pub(crate) const MAX_PREFIX_BYTES: usize = 100;
/// Longest partition key in bytes (escaped, at most three times as long).
pub(crate) const MAX_PARTITION_BYTES: usize = 140;
/// Longest sort key in bytes.
pub(crate) const MAX_SORT_BYTES: usize = 140;

/// The paths of one store's locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    prefix: Path,
}

impl Layout {
    /// Locks under `prefix` (the bucket's root when empty).
    pub fn new(prefix: Path) -> Self {
        Self { prefix }
    }

    /// The prefix every lock object is under.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The object holding `key`'s record.
    pub fn path(&self, key: &LockKey) -> Path {
        let partition = escape(key.partition());
        match key.sort() {
            None => self.under(&[&partition, UNSORTED]),
            Some(sort) => self.under(&[&partition, SORTED, &format!("{}{SUFFIX}", escape(sort))]),
        }
    }

    /// The folder of every lock of `partition`, or of every lock with `None`.
    pub fn listing(&self, partition: Option<&str>) -> Path {
        match partition {
            None => self.prefix.clone(),
            Some(partition) => self.partition_dir(partition),
        }
    }

    /// Whether `path` is where this layout keeps a lock (listings skip other
    /// objects a user keeps under the prefix).
    pub fn is_lock(&self, path: &Path) -> bool {
        let Some(parts) = path.prefix_match(&self.prefix) else {
            return false;
        };
        let parts: Vec<_> = parts.collect();
        match parts.as_slice() {
            [partition, name] => is_escaped(partition.as_ref()) && name.as_ref() == UNSORTED,
            [partition, folder, name] => {
                is_escaped(partition.as_ref())
                    && folder.as_ref() == SORTED
                    && name.as_ref().strip_suffix(SUFFIX).is_some_and(is_escaped)
            }
            _ => false,
        }
    }

    fn partition_dir(&self, partition: &str) -> Path {
        self.under(&[&escape(partition)])
    }

    /// The prefix and these segments, kept as they are (`Path::join` would
    /// escape the escapes again).
    fn under(&self, segments: &[&str]) -> Path {
        self.prefix
            .parts()
            .chain(segments.iter().map(|segment| {
                // Escaped parts and the layout's names are always valid
                // segments; the fallback escapes, and is never taken.
                PathPart::parse(segment).unwrap_or_else(|_| PathPart::from(*segment))
            }))
            .collect()
    }
}

fn escape(part: &str) -> String {
    utf8_percent_encode(part, ESCAPED).to_string()
}

/// Whether `part` could be an escaped key part.
fn is_escaped(part: &str) -> bool {
    part.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'%')
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn layout(prefix: &str) -> Layout {
        Layout::new(Path::from(prefix))
    }

    #[test]
    fn keys_map_to_one_object_each_under_the_prefix() {
        let layout = layout("locks/prod");
        assert_eq!(
            layout.path(&LockKey::new("orders")).as_ref(),
            "locks/prod/orders/lock.json"
        );
        assert_eq!(
            layout.path(&LockKey::with_sort("orders", "job-1")).as_ref(),
            "locks/prod/orders/sort/job-1.json"
        );
        assert_eq!(
            Layout::new(Path::default())
                .path(&LockKey::new("a"))
                .as_ref(),
            "a/lock.json"
        );
    }

    #[test]
    fn escaping_keeps_keys_apart_and_paths_valid() {
        let layout = layout("p");
        let keys = [
            LockKey::new("a/b"),
            LockKey::new("a%2Fb"),
            LockKey::new("."),
            LockKey::new(".."),
            LockKey::new("lock.json"),
            LockKey::new("sort"),
            LockKey::with_sort("a", "b/c"),
            LockKey::with_sort("a/sort", "c"),
            LockKey::with_sort("a", ""),
            LockKey::with_sort("a", "ü €"),
            LockKey::new("a"),
        ];
        let paths: std::collections::BTreeSet<String> =
            keys.iter().map(|k| layout.path(k).to_string()).collect();
        assert_eq!(paths.len(), keys.len(), "{paths:?}");
        for key in &keys {
            let path = layout.path(key);
            assert_eq!(
                Path::parse(path.as_ref()).ok().as_ref(),
                Some(&path),
                "{key}"
            );
            assert!(layout.is_lock(&path), "{path}");
        }
        assert_eq!(
            layout.path(&LockKey::new("a/b.c")).as_ref(),
            "p/a%2Fb%2Ec/lock.json"
        );
    }

    #[test]
    fn listings_name_a_partition_or_the_prefix() {
        let layout = layout("p");
        assert_eq!(layout.listing(None).as_ref(), "p");
        assert_eq!(layout.listing(Some("a b")).as_ref(), "p/a%20b");
        let path = layout.path(&LockKey::with_sort("a b", "x"));
        assert!(path.prefix_matches(&layout.listing(Some("a b"))));
        assert!(!path.prefix_matches(&layout.listing(Some("a"))));
    }

    #[test]
    fn other_objects_under_the_prefix_are_not_locks() {
        let layout = layout("p");
        for other in [
            "p/readme.txt",
            "p/a/other.json",
            "p/a/sort/b.txt",
            "p/a/sort/b.c.json",
            "p/a/b/lock.json",
            "q/a/lock.json",
            "p/a.b/lock.json",
        ] {
            assert!(!layout.is_lock(&Path::from(other)), "{other}");
        }
    }
}
