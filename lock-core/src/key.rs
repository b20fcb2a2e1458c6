//! Lock keys: a partition key plus an optional sort key.

use std::fmt;
use std::sync::Arc;

/// The name of one lock: a partition key and, for fine-grained locks that share a
/// partition, an optional sort key.
///
/// Keys are plain strings; the store decides how long they may be (see
/// [`Capabilities`](crate::Capabilities)). The client rejects empty keys before any
/// write with [`LockError::InvalidInput`](crate::LockError::InvalidInput).
///
/// Cloning is cheap (the strings are shared): the client keeps a key in several
/// places for every held lock.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey {
    partition: Arc<str>,
    sort: Option<Arc<str>>,
}

impl LockKey {
    /// A key with only a partition key.
    pub fn new(partition: impl Into<String>) -> Self {
        Self {
            partition: Arc::from(partition.into()),
            sort: None,
        }
    }

    /// A key with a partition key and a sort key (a fine-grained lock under the
    /// partition).
    pub fn with_sort(partition: impl Into<String>, sort: impl Into<String>) -> Self {
        Self {
            partition: Arc::from(partition.into()),
            sort: Some(Arc::from(sort.into())),
        }
    }

    /// The partition key.
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// The sort key, if any.
    pub fn sort(&self) -> Option<&str> {
        self.sort.as_deref()
    }
}

/// Prints the key as fences name its lock: `partition`, or `partition/sort`
/// for a lock under a sort key, with every `%` in either part written `%25`
/// and every `/` written `%2F`. Two keys print alike only when they are
/// equal: `LockKey::new("a/b")` prints `a%2Fb`, `LockKey::with_sort("a", "b")`
/// prints `a/b`. A key with neither character prints as its parts joined.
/// [`parse`](LockKey::parse) reads the printed form back.
///
/// ```
/// use lock_core::LockKey;
///
/// assert_eq!(LockKey::new("orders").to_string(), "orders");
/// assert_eq!(LockKey::with_sort("jobs", "export").to_string(), "jobs/export");
/// assert_eq!(LockKey::new("jobs/export").to_string(), "jobs%2Fexport");
/// ```
impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, &self.partition)?;
        if let Some(sort) = &self.sort {
            f.write_str("/")?;
            write_escaped(f, sort)?;
        }
        Ok(())
    }
}

/// `part` with `%` and `/` escaped: the one `/` left in a printed key is then
/// the separator, and a `%` always starts an escape.
fn write_escaped(f: &mut fmt::Formatter<'_>, part: &str) -> fmt::Result {
    let mut rest = part;
    while let Some(at) = rest.find(['%', '/']) {
        f.write_str(&rest[..at])?;
        f.write_str(if rest[at..].starts_with('%') {
            "%25"
        } else {
            "%2F"
        })?;
        rest = &rest[at + 1..];
    }
    f.write_str(rest)
}

/// A printed key that no [`LockKey`] prints as (see
/// [`LockKey::parse`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{printed:?} is not a printed lock key: {reason} (a lock key prints as `partition` or `partition/sort`, with `%` written %25 and `/` written %2F inside either part)"
)]
pub struct KeyParseError {
    /// The text given.
    pub printed: String,
    /// What is wrong with it.
    pub reason: String,
}

impl LockKey {
    /// The key that prints as `printed` (its [`Display`](fmt::Display) form,
    /// as fences name locks): the inverse of `to_string()`, for a key that
    /// comes back as text (an environment variable, a fence kept at a
    /// resource, a Python `FenceToken`). Refused when no key prints so: more
    /// than one unescaped `/`, or a `%` not followed by `25` or `2F`.
    ///
    /// ```
    /// use lock_core::LockKey;
    ///
    /// assert_eq!(LockKey::parse("jobs/export")?, LockKey::with_sort("jobs", "export"));
    /// assert_eq!(LockKey::parse("jobs%2Fexport")?, LockKey::new("jobs/export"));
    /// assert!(LockKey::parse("a/b/c").is_err());
    /// # Ok::<(), lock_core::KeyParseError>(())
    /// ```
    pub fn parse(printed: &str) -> Result<Self, KeyParseError> {
        let refuse = |reason: &str| KeyParseError {
            printed: printed.to_owned(),
            reason: reason.to_owned(),
        };
        let (partition, sort) = match printed.split_once('/') {
            None => (printed, None),
            Some((_, sort)) if sort.contains('/') => {
                return Err(refuse("it has more than one unescaped /"));
            }
            Some((partition, sort)) => (partition, Some(sort)),
        };
        let partition = unescape(partition).ok_or_else(|| refuse(UNESCAPED_PERCENT))?;
        match sort {
            None => Ok(Self::new(partition)),
            Some(sort) => {
                let sort = unescape(sort).ok_or_else(|| refuse(UNESCAPED_PERCENT))?;
                Ok(Self::with_sort(partition, sort))
            }
        }
    }
}

const UNESCAPED_PERCENT: &str = "a % is not followed by 25 or 2F";

/// `part` with the escapes of [`write_escaped`] undone; `None` for a `%`
/// that starts no escape (no key prints one).
fn unescape(part: &str) -> Option<String> {
    let mut out = String::with_capacity(part.len());
    let mut rest = part;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        out.push(match escape {
            "%25" => '%',
            "%2F" => '/',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

impl std::str::FromStr for LockKey {
    type Err = KeyParseError;

    /// [`LockKey::parse`].
    fn from_str(printed: &str) -> Result<Self, KeyParseError> {
        Self::parse(printed)
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockKey({self})")
    }
}

impl From<&str> for LockKey {
    fn from(partition: &str) -> Self {
        Self::new(partition)
    }
}

impl From<String> for LockKey {
    fn from(partition: String) -> Self {
        Self::new(partition)
    }
}

impl From<(&str, &str)> for LockKey {
    fn from((partition, sort): (&str, &str)) -> Self {
        Self::with_sort(partition, sort)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_with_a_slash_and_a_sort_key_print_apart() {
        // Fences name a lock by its printed key: two locks with their own
        // fence counters must never print alike.
        assert_ne!(
            LockKey::new("a/b").to_string(),
            LockKey::with_sort("a", "b").to_string()
        );
        assert_ne!(
            LockKey::with_sort("a/b", "c").to_string(),
            LockKey::with_sort("a", "b/c").to_string()
        );
        // Keys without the special characters print as they always did, so
        // the resources they fenced keep admitting them.
        assert_eq!(LockKey::new("orders").to_string(), "orders");
        assert_eq!(
            LockKey::with_sort("jobs", "export").to_string(),
            "jobs/export"
        );
        assert_eq!(LockKey::new("config#writer").to_string(), "config#writer");
    }

    #[test]
    fn every_key_prints_as_something_parse_reads_back() {
        let keys = [
            LockKey::new("a"),
            LockKey::new("a/b"),
            LockKey::new("100%"),
            LockKey::new("%2F"),
            LockKey::new(""),
            LockKey::new("é/ü%"),
            LockKey::with_sort("a", "b"),
            LockKey::with_sort("a/b", "c/d"),
            LockKey::with_sort("", ""),
            LockKey::with_sort("%25", "/"),
        ];
        for key in keys {
            let printed = key.to_string();
            assert_eq!(LockKey::parse(&printed), Ok(key.clone()), "{printed}");
            assert_eq!(
                printed.matches('/').count(),
                usize::from(key.sort().is_some())
            );
        }
        assert_eq!(LockKey::new("%2F").to_string(), "%252F");
        assert_eq!(LockKey::new("a/b").to_string(), "a%2Fb");
    }

    #[test]
    fn what_no_key_prints_is_refused_saying_why() {
        for (printed, says) in [
            ("a/b/c", "more than one unescaped /"),
            ("50%", "not followed by 25 or 2F"),
            ("a%2fb", "not followed by 25 or 2F"),
            ("a/%4", "not followed by 25 or 2F"),
            ("%é", "not followed by 25 or 2F"),
        ] {
            let refused = LockKey::parse(printed).unwrap_err();
            assert_eq!(refused.printed, printed);
            assert!(refused.to_string().contains(says), "{refused}");
        }
    }
}
