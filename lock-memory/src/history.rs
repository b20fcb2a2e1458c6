//! The operation history: the calls a [`MemoryStore`](crate::MemoryStore) served,
//! in the order they took effect, with their arguments, times and results; the
//! last [`DEFAULT_HISTORY_CAPACITY`] of them unless configured otherwise.

use std::collections::VecDeque;

use lock_core::{
    Cursor, Expect, KeyedWrite, LockKey, LockRecord, ManyOutcome, NewRecord, Outcome, Page,
    StoreError, StoreErrorKind,
};
use tokio::time::Instant;

/// How many calls a [`MemoryStore`](crate::MemoryStore)'s history, and how many
/// events a [`FaultyStore`](crate::FaultyStore)'s record of faults, keep unless
/// configured otherwise: the last 10,000, the oldest dropped first.
///
/// That is far more than any single test makes, and bounds the memory of a
/// long-running store (a benchmark, a soak, a demo left running) to a few MiB for
/// records without data. Change it with
/// [`MemoryStoreBuilder::history_capacity`](crate::MemoryStoreBuilder::history_capacity)
/// or [`FaultyStore::with_history_capacity`](crate::FaultyStore::with_history_capacity);
/// `0` turns the history off.
pub const DEFAULT_HISTORY_CAPACITY: usize = 10_000;

/// The last `capacity` items pushed, oldest dropped first; nothing at all with
/// capacity 0.
#[derive(Debug)]
pub(crate) struct Bounded<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T: Clone> Bounded<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        // No allocation up front: the capacity may be `usize::MAX` ("keep
        // everything"), and most stores see far fewer calls than the default.
        Self {
            items: VecDeque::new(),
            capacity,
        }
    }

    /// Whether anything is kept: callers skip building entries when not.
    pub(crate) fn keeps(&self) -> bool {
        self.capacity > 0
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keep at most `capacity` items from now on, dropping the oldest if there
    /// are more already.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        let excess = self.items.len().saturating_sub(capacity);
        self.items.drain(..excess);
    }

    pub(crate) fn push(&mut self, item: T) {
        if self.capacity == 0 {
            return;
        }
        if self.items.len() >= self.capacity {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    pub(crate) fn to_vec(&self) -> Vec<T> {
        self.items.iter().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
    }
}

/// Which store method was called (lock-core's [`StoreOp`](lock_core::layer::StoreOp),
/// which the layers of every store share).
pub use lock_core::layer::StoreOp as Op;

/// One call, with its arguments (owned copies).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Call {
    /// `get(key)`
    Get {
        /// The key read.
        key: LockKey,
    },
    /// `put(key, expect, new)`
    Put {
        /// The key written.
        key: LockKey,
        /// The condition.
        expect: Expect,
        /// The record asked for.
        new: NewRecord,
    },
    /// `delete(key, expect)`
    Delete {
        /// The key deleted.
        key: LockKey,
        /// The condition.
        expect: Expect,
    },
    /// `list(partition, cursor, limit)`
    List {
        /// The partition filter.
        partition: Option<String>,
        /// Where the page started.
        cursor: Option<Cursor>,
        /// The page size asked for.
        limit: usize,
    },
    /// [`put_many`](lock_core::ConditionalStore::put_many): several writes,
    /// all or none.
    PutMany {
        /// The writes, in the request's order.
        writes: Vec<KeyedWrite>,
    },
}

impl Call {
    /// The method called.
    pub fn op(&self) -> Op {
        match self {
            Call::Get { .. } => Op::Get,
            Call::Put { .. } => Op::Put,
            Call::Delete { .. } => Op::Delete,
            Call::List { .. } => Op::List,
            Call::PutMany { .. } => Op::PutMany,
        }
    }

    /// The key, for `get`, `put` and `delete`.
    pub fn key(&self) -> Option<&LockKey> {
        match self {
            Call::Get { key } | Call::Put { key, .. } | Call::Delete { key, .. } => Some(key),
            Call::List { .. } | Call::PutMany { .. } => None,
        }
    }

    /// The condition of a `put` or `delete`.
    pub fn expect(&self) -> Option<&Expect> {
        match self {
            Call::Put { expect, .. } | Call::Delete { expect, .. } => Some(expect),
            Call::Get { .. } | Call::List { .. } | Call::PutMany { .. } => None,
        }
    }

    /// The record a `put` asked for.
    pub fn new_record(&self) -> Option<&NewRecord> {
        match self {
            Call::Put { new, .. } => Some(new),
            _ => None,
        }
    }
}

/// What a call returned, as an owned summary.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CallResult {
    /// `get` found this record (or nothing).
    Found(Option<LockRecord>),
    /// The write applied: for `put` the record stored, for `delete` the record
    /// deleted.
    Applied(LockRecord),
    /// The write was rejected; the current record as returned to the caller
    /// (`None` when the key was absent, or when the store is configured not to
    /// return it).
    Rejected(Option<LockRecord>),
    /// `list` returned a page.
    Listed {
        /// The keys on the page, in order.
        keys: Vec<LockKey>,
        /// The cursor of the next page, if any.
        next: Option<Cursor>,
    },
    /// `put_many` applied every write: the records stored, in order.
    AppliedMany(Vec<LockRecord>),
    /// `put_many` wrote nothing: the write at `index` was rejected, with the
    /// current record as returned to the caller.
    RejectedAt {
        /// Which write.
        index: usize,
        /// The current record under its key.
        current: Option<LockRecord>,
    },
    /// The call failed; nothing was written.
    Failed {
        /// The kind of error.
        kind: StoreErrorKind,
        /// Its message.
        message: String,
    },
}

impl CallResult {
    pub(crate) fn of_get(result: &Result<Option<LockRecord>, StoreError>) -> Self {
        match result {
            Ok(found) => CallResult::Found(found.clone()),
            Err(error) => Self::of_error(error),
        }
    }

    pub(crate) fn of_write(result: &Result<Outcome, StoreError>) -> Self {
        match result {
            Ok(Outcome::Applied(record)) => CallResult::Applied(record.clone()),
            Ok(Outcome::Rejected { current }) => CallResult::Rejected(current.clone()),
            Err(error) => Self::of_error(error),
        }
    }

    pub(crate) fn of_many(result: &Result<ManyOutcome, StoreError>) -> Self {
        match result {
            Ok(ManyOutcome::Applied(records)) => CallResult::AppliedMany(records.clone()),
            Ok(ManyOutcome::Rejected { index, current }) => CallResult::RejectedAt {
                index: *index,
                current: current.clone(),
            },
            Err(error) => Self::of_error(error),
        }
    }

    pub(crate) fn of_list(result: &Result<Page, StoreError>) -> Self {
        match result {
            Ok(page) => CallResult::Listed {
                keys: page
                    .records
                    .iter()
                    .map(|record| record.key.clone())
                    .collect(),
                next: page.next.clone(),
            },
            Err(error) => Self::of_error(error),
        }
    }

    fn of_error(error: &StoreError) -> Self {
        CallResult::Failed {
            kind: error.kind(),
            message: error.message().to_owned(),
        }
    }

    /// The kind of error, when the call failed.
    pub fn error_kind(&self) -> Option<StoreErrorKind> {
        match self {
            CallResult::Failed { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// One entry of the history.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct HistoryEntry {
    /// Position among every call the store served, from 0. It keeps counting
    /// across [`clear_history`](crate::MemoryStore::clear_history), across entries
    /// dropped because the history is full, and while the history is off, so it
    /// identifies a call for good: compare `seq`s, not positions in
    /// [`history`](crate::MemoryStore::history), which shift as old entries are
    /// dropped. Entries are in the order the calls took effect (their
    /// linearization order).
    pub seq: u64,
    /// Tokio time when the call was made.
    pub started: Instant,
    /// Tokio time when it returned. The in-memory store never waits, so in paused
    /// time this equals `started`.
    pub finished: Instant,
    /// The call.
    pub call: Call,
    /// Its result.
    pub result: CallResult,
}

impl HistoryEntry {
    /// The method called.
    pub fn op(&self) -> Op {
        self.call.op()
    }

    /// True for `put`.
    pub fn is_put(&self) -> bool {
        self.op() == Op::Put
    }

    /// True for `put` and `delete`.
    pub fn is_write(&self) -> bool {
        self.op().is_write()
    }

    /// True for `get` and `list`.
    pub fn is_read(&self) -> bool {
        self.op().is_read()
    }

    /// The key, for `get`, `put` and `delete`.
    pub fn key(&self) -> Option<&LockKey> {
        self.call.key()
    }

    /// The condition of a `put` or `delete`.
    pub fn expect(&self) -> Option<&Expect> {
        self.call.expect()
    }

    /// The owner a `put` wrote as.
    pub fn writer(&self) -> Option<&str> {
        self.call.new_record().map(|new| new.owner.as_str())
    }

    /// When the call was made.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// True when a write applied.
    pub fn applied(&self) -> bool {
        matches!(self.result, CallResult::Applied(_))
    }
}
