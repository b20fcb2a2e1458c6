//! [`MemoryStore`]: a linearizable in-process [`ConditionalStore`].

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, DataUpdate, Expect, Fence, FenceUpdate, KeyedWrite,
    LockKey, LockRecord, ManyOutcome, NewRecord, Outcome, Page, StoreError,
};
use tokio::time::Instant;

use crate::history::{Bounded, Call, CallResult, HistoryEntry};
use crate::store_clock::StoreTime;
use crate::{MemoryStoreBuilder, Op, cursor, limits};

/// A linearizable, strongly consistent in-process lock store.
///
/// * Every call takes one mutex for its whole effect (and never awaits), so calls
///   are atomic and totally ordered; a read sees every write that returned before
///   it.
/// * [`list`](ConditionalStore::list) returns records in [`LockKey`] order (by
///   partition, then no sort key before any sort key, then sort key), in pages with
///   an opaque cursor.
/// * Released records are kept, so fences keep increasing across release;
///   after a `delete` the key's next record goes on from the deleted one's
///   fence ([`FencesAfterDeletion::Remembered`](lock_core::FencesAfterDeletion)).
/// * Every call, including refused ones, is recorded in the
///   [`history`](Self::history), in the order the calls took effect; the history
///   keeps the last [`DEFAULT_HISTORY_CAPACITY`](crate::DEFAULT_HISTORY_CAPACITY)
///   (10,000) calls, or as many as
///   [`history_capacity`](MemoryStoreBuilder::history_capacity) says (0: none).
///   The counters ([`calls`](Self::calls), [`writes`](Self::writes), ...) count
///   every call whatever the history keeps.
/// * Clones share the same records and history, so a test can keep a handle while
///   clients use another.
///
/// Limits (item size, key lengths), whether a rejection carries the current
/// record and the history's capacity are set with [`MemoryStore::builder`].
#[derive(Clone)]
pub struct MemoryStore {
    shared: Arc<Mutex<State>>,
    caps: Capabilities,
    /// Whether the history keeps anything; known without the lock, so a store
    /// without history reads no clock and copies no arguments.
    keeps_history: bool,
    /// Where releases are announced, when the store announces them.
    releases: Option<lock_core::ReleaseFeed>,
}

struct State {
    records: BTreeMap<LockKey, LockRecord>,
    /// The fence of every deleted record, so that the key's next record
    /// starts above it (`FencesAfterDeletion::Remembered`): a holder paused
    /// across the deletion still carries that fence.
    floors: BTreeMap<LockKey, Fence>,
    history: Bounded<HistoryEntry>,
    /// Every call since the last `clear_history`, kept apart from the history so
    /// they stay exact when it drops entries or is off.
    counts: Counts,
    next_seq: u64,
    /// The store's clock, when it keeps one: every record read carries its age.
    clock: Option<StoreTime>,
}

#[derive(Clone, Copy, Default)]
struct Counts {
    calls: usize,
    writes: usize,
    reads: usize,
    applied_writes: usize,
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
            .field("calls", &state.counts.calls)
            .field("history", &state.history.len())
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

    pub(crate) fn from_parts(
        caps: Capabilities,
        history_capacity: usize,
        clock_rate: Option<f64>,
    ) -> Self {
        let history = Bounded::new(history_capacity);
        Self {
            keeps_history: history.keeps(),
            shared: Arc::new(Mutex::new(State {
                records: BTreeMap::new(),
                floors: BTreeMap::new(),
                history,
                counts: Counts::default(),
                next_seq: 0,
                clock: clock_rate.map(StoreTime::new),
            })),
            releases: caps
                .announces_releases
                .then(|| lock_core::ReleaseFeed::new(|_| {})),
            caps,
        }
    }

    /// Announce `key` released, as a store that notifies would (nothing
    /// changes in the store): what a false or repeated announcement does to
    /// waiters. A store built without
    /// [`announce_releases`](crate::MemoryStoreBuilder::announce_releases)
    /// has nobody to tell.
    pub fn announce_release(&self, key: &LockKey) {
        if let Some(feed) = &self.releases {
            feed.announce(key.clone());
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

    /// The calls served since the last [`clear_history`](Self::clear_history), in
    /// the order they took effect: all of them, or the most recent
    /// [`history_capacity`](Self::history_capacity) when there were more (empty
    /// when the history is off). Identify an entry by its
    /// [`seq`](HistoryEntry::seq), not by its position here.
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.state().history.to_vec()
    }

    /// How many calls the history keeps (see
    /// [`MemoryStoreBuilder::history_capacity`]); 0 when it is off.
    pub fn history_capacity(&self) -> usize {
        self.state().history.capacity()
    }

    /// Forget the history and reset the counters (the records stay; sequence
    /// numbers keep counting).
    pub fn clear_history(&self) {
        let mut state = self.state();
        state.history.clear();
        state.counts = Counts::default();
    }

    /// Calls served since the last [`clear_history`](Self::clear_history),
    /// including refused and rejected ones, whether or not the history still
    /// holds them.
    pub fn calls(&self) -> usize {
        self.state().counts.calls
    }

    /// `put` and `delete` calls served (applied, rejected or refused) since the
    /// last [`clear_history`](Self::clear_history).
    pub fn writes(&self) -> usize {
        self.state().counts.writes
    }

    /// `get` and `list` calls served since the last
    /// [`clear_history`](Self::clear_history).
    pub fn reads(&self) -> usize {
        self.state().counts.reads
    }

    /// Writes that applied since the last [`clear_history`](Self::clear_history).
    pub fn applied_writes(&self) -> usize {
        self.state().counts.applied_writes
    }

    /// When the call started, if the history keeps calls (a store without
    /// history reads no clock).
    fn started(&self) -> Option<Instant> {
        self.keeps_history.then(Instant::now)
    }

    /// Count one call and, when the history keeps calls (`call` is set: its start
    /// and arguments), record it; `result` is summarised only then.
    fn record_call(
        state: &mut State,
        op: Op,
        applied: bool,
        call: Option<(Instant, Call)>,
        result: impl FnOnce() -> CallResult,
    ) {
        let seq = state.next_seq;
        state.next_seq += 1;
        let counts = &mut state.counts;
        counts.calls += 1;
        if op.is_write() {
            counts.writes += 1;
        } else {
            counts.reads += 1;
        }
        if applied {
            counts.applied_writes += 1;
        }
        if let Some((started, call)) = call {
            state.history.push(HistoryEntry {
                seq,
                started,
                finished: Instant::now(),
                call,
                result: result(),
            });
        }
    }

    fn rejected(&self, current: Option<&LockRecord>) -> Outcome {
        Outcome::Rejected {
            current: current
                .filter(|_| self.caps.returns_current_on_conflict)
                .cloned(),
        }
    }

    /// Step the store's clock forward by `by` (a store built with
    /// [`store_clock`](MemoryStoreBuilder::store_clock); nothing otherwise):
    /// every record reads `by` older at once, as after a server's clock was
    /// stepped. The failure that store-clock takeover documents.
    pub fn step_store_clock(&self, by: std::time::Duration) {
        if let Some(clock) = &mut self.state().clock {
            clock.step(by);
        }
    }

    fn apply_put(
        &self,
        records: &mut BTreeMap<LockKey, LockRecord>,
        floors: &BTreeMap<LockKey, Fence>,
        key: &LockKey,
        expect: &Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        self.caps.check_key(key)?;
        let current = records.get(key);
        // Data the write keeps counts towards the record it leaves.
        let kept = match new.data {
            DataUpdate::Keep => current
                .and_then(|record| record.data.as_ref())
                .map_or(0, Vec::len),
            DataUpdate::Replace(_) | DataUpdate::Clear => 0,
        };
        limits::check_size(&self.caps, key, &new, kept)?;
        if !holds(expect, current) {
            return Ok(self.rejected(current));
        }
        // A deleted key's next acquisition goes on from the fence it had; a
        // write that keeps the fence on no record keeps "no fence" (0).
        // A record with fence 0 carries no fence (a write kept "none"): its
        // acquisition counts as one on no record.
        let previous = match (current, new.fence) {
            (Some(record), FenceUpdate::Next) if record.fence == Fence(0) => {
                floors.get(key).copied().unwrap_or(Fence(0))
            }
            (Some(record), _) => record.fence,
            (None, FenceUpdate::Next) => floors.get(key).copied().unwrap_or(Fence(0)),
            (None, FenceUpdate::Keep) => Fence(0),
        };
        let data = new
            .data
            .apply(current.and_then(|record| record.data.clone()));
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
            data,
            expires_at: new.expires_at,
            written: None,
        };
        records.insert(key.clone(), record.clone());
        Ok(Outcome::Applied(record))
    }

    /// Every write of a `put_many` on a copy of the records, kept only if
    /// each applied: all or nothing, under the one lock of the call.
    fn apply_many(
        &self,
        state: &mut State,
        writes: Vec<KeyedWrite>,
    ) -> Result<ManyOutcome, StoreError> {
        let Some(limits) = self.caps.atomic_writes else {
            return Err(StoreError::invalid(
                "this memory store was built without atomic writes (MemoryStoreBuilder::atomic_writes)",
            ));
        };
        if writes.len() > limits.max_keys {
            return Err(StoreError::invalid(format!(
                "{} writes in one request; this store takes at most {}",
                writes.len(),
                limits.max_keys
            )));
        }
        let mut keys: Vec<&LockKey> = writes.iter().map(|write| &write.key).collect();
        keys.sort();
        if keys.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StoreError::invalid(
                "a key written twice in one request: each key once",
            ));
        }
        let bytes: usize = writes
            .iter()
            .map(|write| crate::record_size(&write.key, &write.new))
            .sum();
        if bytes > limits.max_bytes {
            return Err(StoreError::invalid(format!(
                "the records of one request take {bytes} bytes; this store takes at most {}",
                limits.max_bytes
            )));
        }
        // Applied to a copy of the keys written, then kept all at once.
        let mut scratch: BTreeMap<LockKey, LockRecord> = writes
            .iter()
            .filter_map(|write| {
                state
                    .records
                    .get(&write.key)
                    .map(|record| (write.key.clone(), record.clone()))
            })
            .collect();
        let mut applied = Vec::with_capacity(writes.len());
        for (index, write) in writes.into_iter().enumerate() {
            match self.apply_put(
                &mut scratch,
                &state.floors,
                &write.key,
                &write.expect,
                write.new,
            )? {
                Outcome::Applied(record) => applied.push(record),
                Outcome::Rejected { current } => {
                    let current = current.map(|record| dated(state, record));
                    return Ok(ManyOutcome::Rejected { index, current });
                }
            }
        }
        let mut stored = Vec::with_capacity(applied.len());
        for record in applied {
            state.records.insert(record.key.clone(), record.clone());
            let key = record.key.clone();
            match date_outcome(state, &key, Outcome::Applied(record)) {
                Outcome::Applied(record) => stored.push(record),
                Outcome::Rejected { .. } => {}
            }
        }
        Ok(ManyOutcome::Applied(stored))
    }

    fn apply_delete(
        &self,
        records: &mut BTreeMap<LockKey, LockRecord>,
        floors: &mut BTreeMap<LockKey, Fence>,
        key: &LockKey,
        expect: &Expect,
    ) -> Result<Outcome, StoreError> {
        self.caps.check_key(key)?;
        // There is nothing to delete on an absent key, whatever the condition.
        match records.get(key) {
            Some(current) if holds(expect, Some(current)) => {
                let Some(deleted) = records.remove(key) else {
                    return Ok(self.rejected(None));
                };
                let floor = floors.entry(key.clone()).or_default();
                *floor = (*floor).max(deleted.fence);
                Ok(Outcome::Applied(deleted))
            }
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
            self.caps.check_partition(partition)?;
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

/// `record` as a read returns it: with its age, when the store keeps a clock.
fn dated(state: &State, record: LockRecord) -> LockRecord {
    match &state.clock {
        Some(clock) => clock.dated(record),
        None => record,
    }
}

/// A write's outcome as the caller sees it: an applied record stamped now (age
/// zero), a rejection's current record with its age.
fn date_outcome(state: &mut State, key: &LockKey, outcome: Outcome) -> Outcome {
    let Some(clock) = state.clock.as_mut() else {
        return outcome;
    };
    match outcome {
        Outcome::Applied(record) => {
            clock.stamp(key);
            Outcome::Applied(clock.dated(record))
        }
        Outcome::Rejected { current } => Outcome::Rejected {
            current: current.map(|record| clock.dated(record)),
        },
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
        let started = self.started();
        let mut state = self.state();
        let result = self
            .caps
            .check_key(key)
            .map_err(StoreError::from)
            .map(|()| {
                state
                    .records
                    .get(key)
                    .cloned()
                    .map(|record| dated(&state, record))
            });
        let call = started.map(|at| (at, Call::Get { key: key.clone() }));
        Self::record_call(&mut state, Op::Get, false, call, || {
            CallResult::of_get(&result)
        });
        result
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        // The record is moved into the store: copy the arguments first, if the
        // history keeps them.
        let call = self.started().map(|at| {
            let call = Call::Put {
                key: key.clone(),
                expect: expect.clone(),
                new: new.clone(),
            };
            (at, call)
        });
        let mut guard = self.state();
        let state = &mut *guard;
        let result = self
            .apply_put(&mut state.records, &state.floors, key, &expect, new)
            .map(|outcome| date_outcome(state, key, outcome));
        let applied = matches!(result, Ok(Outcome::Applied(_)));
        Self::record_call(state, Op::Put, applied, call, || {
            CallResult::of_write(&result)
        });
        drop(guard);
        if let (Some(feed), Ok(Outcome::Applied(record))) = (&self.releases, &result)
            && record.released
        {
            feed.announce(key.clone());
        }
        result
    }

    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        let call = self.started().map(|at| {
            let call = Call::PutMany {
                writes: writes.clone(),
            };
            (at, call)
        });
        let mut state = self.state();
        let result = self.apply_many(&mut state, writes);
        let applied = matches!(result, Ok(ManyOutcome::Applied(_)));
        Self::record_call(&mut state, Op::PutMany, applied, call, || {
            CallResult::of_many(&result)
        });
        result
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let started = self.started();
        let mut guard = self.state();
        let state = &mut *guard;
        let result = self.apply_delete(&mut state.records, &mut state.floors, key, &expect);
        let applied = matches!(result, Ok(Outcome::Applied(_)));
        if let Some(clock) = state.clock.as_mut().filter(|_| applied) {
            clock.forget(key);
        }
        let result = result.map(|outcome| match outcome {
            Outcome::Rejected { current } => Outcome::Rejected {
                current: current.map(|record| dated(state, record)),
            },
            applied => applied,
        });
        let call = started.map(|at| {
            let call = Call::Delete {
                key: key.clone(),
                expect,
            };
            (at, call)
        });
        Self::record_call(state, Op::Delete, applied, call, || {
            CallResult::of_write(&result)
        });
        drop(guard);
        // A delete releases too (delete-on-release).
        if let (Some(feed), true) = (&self.releases, applied) {
            feed.announce(key.clone());
        }
        result
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let started = self.started();
        let mut state = self.state();
        let result = self
            .page(&state.records, partition, cursor.as_ref(), limit)
            .map(|mut page| {
                page.records = page
                    .records
                    .into_iter()
                    .map(|record| dated(&state, record))
                    .collect();
                page
            });
        let call = started.map(|at| {
            let call = Call::List {
                partition: partition.map(str::to_owned),
                cursor,
                limit,
            };
            (at, call)
        });
        Self::record_call(&mut state, Op::List, false, call, || {
            CallResult::of_list(&result)
        });
        result
    }

    fn release_feed(&self) -> Option<lock_core::ReleaseFeed> {
        self.releases.clone()
    }

    fn capabilities(&self) -> Capabilities {
        self.caps.clone()
    }
}
