//! [`MemoryStore`]: a linearizable in-process [`ConditionalStore`].

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, Expect, Fence, FenceUpdate, LockKey, LockRecord,
    NewRecord, Outcome, Page, StoreError,
};
use tokio::time::Instant;

use crate::history::{Call, CallResult, HistoryEntry};
use crate::{MemoryStoreBuilder, cursor, limits};

/// A linearizable, strongly consistent in-process lock store.
///
/// * Every call takes one mutex for its whole effect (and never awaits), so calls
///   are atomic and totally ordered; a read sees every write that returned before
///   it.
/// * [`list`](ConditionalStore::list) returns records in [`LockKey`] order (by
///   partition, then no sort key before any sort key, then sort key), in pages with
///   an opaque cursor.
/// * Released records are kept, so fences keep increasing across release;
///   `delete` forgets a key's fence history.
/// * Every call, including refused ones, is recorded in the
///   [`history`](Self::history), in the order the calls took effect.
/// * Clones share the same records and history, so a test can keep a handle while
///   clients use another.
///
/// Limits (item size, key lengths) and whether a rejection carries the current
/// record are set with [`MemoryStore::builder`].
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Mutex<State>>,
    caps: Capabilities,
}

#[derive(Default)]
struct State {
    records: BTreeMap<LockKey, LockRecord>,
    history: Vec<HistoryEntry>,
    next_seq: u64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("MemoryStore")
            .field("records", &state.records.len())
            .field("calls", &state.history.len())
            .field("capabilities", &self.caps)
            .finish()
    }
}

impl MemoryStore {
    /// An empty store with the default (DynamoDB-like) limits; see
    /// [`MemoryStoreBuilder`].
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configure limits and behaviours before building a store.
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder::default()
    }

    pub(crate) fn from_capabilities(caps: Capabilities) -> Self {
        Self {
            shared: Arc::new(Mutex::new(State::default())),
            caps,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write (every
        // mutation is a single insert or remove), so a poisoned lock is still sound.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A copy of every record, keyed and ordered by [`LockKey`]. Not recorded in the
    /// history.
    pub fn snapshot(&self) -> BTreeMap<LockKey, LockRecord> {
        self.state().records.clone()
    }

    /// Every record, in key order. Not recorded in the history.
    pub fn records(&self) -> Vec<LockRecord> {
        self.state().records.values().cloned().collect()
    }

    /// The record under `key`, if any. Not recorded in the history.
    pub fn record(&self, key: &LockKey) -> Option<LockRecord> {
        self.state().records.get(key).cloned()
    }

    /// Every call served since the last [`clear_history`](Self::clear_history),
    /// in the order the calls took effect.
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.state().history.clone()
    }

    /// Forget the history and so reset the counters (the records stay; sequence
    /// numbers keep counting).
    pub fn clear_history(&self) {
        self.state().history.clear();
    }

    /// Calls served since the last [`clear_history`](Self::clear_history),
    /// including refused and rejected ones.
    pub fn calls(&self) -> usize {
        self.state().history.len()
    }

    /// `put` and `delete` calls served (applied, rejected or refused) since the
    /// last [`clear_history`](Self::clear_history).
    pub fn writes(&self) -> usize {
        self.count(HistoryEntry::is_write)
    }

    /// `get` and `list` calls served since the last
    /// [`clear_history`](Self::clear_history).
    pub fn reads(&self) -> usize {
        self.count(HistoryEntry::is_read)
    }

    /// Writes that applied since the last [`clear_history`](Self::clear_history).
    pub fn applied_writes(&self) -> usize {
        self.count(HistoryEntry::applied)
    }

    fn count(&self, pred: impl Fn(&HistoryEntry) -> bool) -> usize {
        self.state()
            .history
            .iter()
            .filter(|entry| pred(entry))
            .count()
    }

    fn record_call(state: &mut State, started: Instant, call: Call, result: CallResult) {
        let seq = state.next_seq;
        state.next_seq += 1;
        state.history.push(HistoryEntry {
            seq,
            started,
            finished: Instant::now(),
            call,
            result,
        });
    }

    fn rejected(&self, current: Option<&LockRecord>) -> Outcome {
        Outcome::Rejected {
            current: current
                .filter(|_| self.caps.returns_current_on_conflict)
                .cloned(),
        }
    }

    fn apply_put(
        &self,
        records: &mut BTreeMap<LockKey, LockRecord>,
        key: &LockKey,
        expect: &Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        limits::check_key(&self.caps, key)?;
        limits::check_size(&self.caps, key, &new)?;
        let current = records.get(key);
        if !holds(expect, current) {
            return Ok(self.rejected(current));
        }
        let previous = current.map_or(Fence(0), |record| record.fence);
        let fence = match new.fence {
            FenceUpdate::Next => previous.get().checked_add(1).map(Fence).ok_or_else(|| {
                StoreError::invalid(format!("lock {key}: the fence cannot go past u64::MAX"))
            })?,
            FenceUpdate::Keep => previous,
        };
        let record = LockRecord {
            key: key.clone(),
            owner: new.owner,
            rvn: new.rvn,
            lease: new.lease,
            released: new.released,
            fence,
            data: new.data,
            expires_at: new.expires_at,
        };
        records.insert(key.clone(), record.clone());
        Ok(Outcome::Applied(record))
    }

    fn apply_delete(
        &self,
        records: &mut BTreeMap<LockKey, LockRecord>,
        key: &LockKey,
        expect: &Expect,
    ) -> Result<Outcome, StoreError> {
        limits::check_key(&self.caps, key)?;
        // There is nothing to delete on an absent key, whatever the condition.
        match records.get(key) {
            Some(current) if holds(expect, Some(current)) => Ok(records
                .remove(key)
                .map_or_else(|| self.rejected(None), Outcome::Applied)),
            current => Ok(self.rejected(current)),
        }
    }

    fn page(
        &self,
        records: &BTreeMap<LockKey, LockRecord>,
        partition: Option<&str>,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        if limit == 0 {
            return Err(StoreError::invalid(
                "a listing page needs a limit of at least 1",
            ));
        }
        if let Some(partition) = partition {
            limits::check_partition(&self.caps, partition)?;
        }
        let start = match (cursor, partition) {
            (Some(cursor), _) => Bound::Excluded(cursor::decode(cursor)?),
            // `LockKey::new(p)` sorts before every key of partition `p`.
            (None, Some(partition)) => Bound::Included(LockKey::new(partition)),
            (None, None) => Bound::Unbounded,
        };
        let mut matching = records
            .range((start, Bound::Unbounded))
            .map(|(_, record)| record)
            .skip_while(|record| partition.is_some_and(|p| record.key.partition() < p))
            .take_while(|record| partition.is_none_or(|p| record.key.partition() == p));
        let page: Vec<LockRecord> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        let next = match page.last() {
            Some(last) if more => Some(cursor::encode(&last.key)),
            _ => None,
        };
        Ok(Page {
            records: page,
            next,
        })
    }
}

/// Whether `expect` holds for the current record.
fn holds(expect: &Expect, current: Option<&LockRecord>) -> bool {
    match (expect, current) {
        (Expect::Vacant, None) => true,
        (Expect::Vacant, Some(record)) => record.released,
        (Expect::Version(rvn), Some(record)) => record.rvn == *rvn,
        (Expect::Version(_), None) => false,
    }
}

#[async_trait]
impl ConditionalStore for MemoryStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let started = Instant::now();
        let mut state = self.state();
        let result = limits::check_key(&self.caps, key).map(|()| state.records.get(key).cloned());
        let summary = CallResult::of_get(&result);
        Self::record_call(&mut state, started, Call::Get { key: key.clone() }, summary);
        result
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let started = Instant::now();
        let call = Call::Put {
            key: key.clone(),
            expect: expect.clone(),
            new: new.clone(),
        };
        let mut state = self.state();
        let result = self.apply_put(&mut state.records, key, &expect, new);
        Self::record_call(&mut state, started, call, CallResult::of_write(&result));
        result
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let started = Instant::now();
        let mut state = self.state();
        let result = self.apply_delete(&mut state.records, key, &expect);
        let call = Call::Delete {
            key: key.clone(),
            expect,
        };
        Self::record_call(&mut state, started, call, CallResult::of_write(&result));
        result
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let started = Instant::now();
        let mut state = self.state();
        let result = self.page(&state.records, partition, cursor.as_ref(), limit);
        let call = Call::List {
            partition: partition.map(str::to_owned),
            cursor,
            limit,
        };
        Self::record_call(&mut state, started, call, CallResult::of_list(&result));
        result
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }
}
