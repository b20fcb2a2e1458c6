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

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sort {
            Some(sort) => write!(f, "{}/{}", self.partition, sort),
            None => f.write_str(&self.partition),
        }
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
