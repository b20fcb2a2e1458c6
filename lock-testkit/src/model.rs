//! The store contract as a plain value: a reference model to compare a real store
//! against, reply by reply, in model-based tests.

use std::collections::BTreeMap;

use lock_core::{
    Capabilities, Expect, Fence, FenceUpdate, FencesAfterDeletion, LockKey, LockRecord, NewRecord,
    Outcome, StoreErrorKind,
};

/// A reference model of a [`ConditionalStore`](lock_core::ConditionalStore):
/// a map from key to record with the contract's conditional writes, written for
/// obviousness rather than speed.
///
/// Input checks are limited to what every store must refuse (an empty key, a sort
/// key on a store without sort keys, keys over the capability limits) and data
/// larger than the whole record limit; a test should keep other sizes well inside
/// the limits, since each store measures records its own way.
#[derive(Clone, Debug, Default)]
pub struct ModelStore {
    records: BTreeMap<LockKey, LockRecord>,
    /// The fences of deleted records, for a store that remembers them
    /// ([`FencesAfterDeletion::Remembered`]).
    floors: BTreeMap<LockKey, Fence>,
    caps: Capabilities,
}

impl ModelStore {
    /// An empty model of a store with these capabilities.
    pub fn new(caps: Capabilities) -> Self {
        Self {
            records: BTreeMap::new(),
            floors: BTreeMap::new(),
            caps,
        }
    }

    /// Every record, in key order.
    pub fn records(&self) -> impl Iterator<Item = &LockRecord> {
        self.records.values()
    }

    fn refuses(&self, key: &LockKey, data: Option<&[u8]>) -> bool {
        let partition = key.partition();
        let bad_sort = match key.sort() {
            None => false,
            Some(sort) => {
                !self.caps.sort_keys || sort.is_empty() || sort.len() > self.caps.max_sort_key_bytes
            }
        };
        partition.is_empty()
            || partition.len() > self.caps.max_partition_key_bytes
            || bad_sort
            || data.is_some_and(|d| d.len() > self.caps.max_record_bytes)
    }

    fn holds(current: Option<&LockRecord>, expect: &Expect) -> bool {
        match (expect, current) {
            (Expect::Vacant, None) => true,
            (Expect::Vacant, Some(record)) => record.released,
            (Expect::Version(rvn), Some(record)) => record.rvn == *rvn,
            (Expect::Version(_), None) => false,
        }
    }

    fn rejected(&self, current: Option<&LockRecord>) -> Outcome {
        Outcome::Rejected {
            current: current
                .filter(|_| self.caps.returns_current_on_conflict)
                .cloned(),
        }
    }

    /// What `get` returns.
    pub fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreErrorKind> {
        if self.refuses(key, None) {
            return Err(StoreErrorKind::Invalid);
        }
        Ok(self.records.get(key).cloned())
    }

    /// What `put` returns, applying it when its condition holds.
    pub fn put(
        &mut self,
        key: &LockKey,
        expect: &Expect,
        new: &NewRecord,
    ) -> Result<Outcome, StoreErrorKind> {
        if self.refuses(key, new.data.bytes()) {
            return Err(StoreErrorKind::Invalid);
        }
        let current = self.records.get(key);
        if !Self::holds(current, expect) {
            return Ok(self.rejected(current));
        }
        // A deleted key goes on from its deleted record's fence on a store
        // that remembers it; the model does not predict a clock's floor
        // (FencesAfterDeletion::ClockFloor) and starts such keys at 1.
        // A write that keeps the fence on no record keeps "no fence" (0).
        let fence = match (new.fence, current) {
            (FenceUpdate::Next, Some(current)) if current.fence == Fence(0) => {
                Fence(self.floor(key).0 + 1)
            }
            (FenceUpdate::Next, Some(current)) => Fence(current.fence.0 + 1),
            (FenceUpdate::Next, None) => Fence(self.floor(key).0 + 1),
            (FenceUpdate::Keep, Some(current)) => current.fence,
            (FenceUpdate::Keep, None) => Fence(0),
        };
        let record = LockRecord {
            key: key.clone(),
            owner: new.owner.clone(),
            rvn: new.rvn.clone(),
            lease: new.lease,
            released: new.released,
            fence,
            data: new.data.apply(current.and_then(|r| r.data.clone())),
            expires_at: new.expires_at,
            written: None,
        };
        if record.released && !self.caps.keeps_released_records {
            self.records.remove(key);
            self.remember(key, record.fence);
        } else {
            self.records.insert(key.clone(), record.clone());
        }
        Ok(Outcome::Applied(record))
    }

    /// What `delete` returns, applying it when its condition holds.
    pub fn delete(&mut self, key: &LockKey, expect: &Expect) -> Result<Outcome, StoreErrorKind> {
        if self.refuses(key, None) {
            return Err(StoreErrorKind::Invalid);
        }
        let current = self.records.get(key);
        if current.is_none() || !Self::holds(current, expect) {
            return Ok(self.rejected(current));
        }
        let Some(deleted) = self.records.remove(key) else {
            return Ok(Outcome::Rejected { current: None });
        };
        self.remember(key, deleted.fence);
        Ok(Outcome::Applied(deleted))
    }

    /// A deleted record's fence, kept as the key's floor if higher.
    fn remember(&mut self, key: &LockKey, fence: Fence) {
        let floor = self.floors.entry(key.clone()).or_default();
        *floor = (*floor).max(fence);
    }

    /// Where a key with no record counts its fences from.
    fn floor(&self, key: &LockKey) -> Fence {
        match self.caps.fences_after_deletion {
            FencesAfterDeletion::Remembered => self.floors.get(key).copied().unwrap_or(Fence(0)),
            _ => Fence(0),
        }
    }

    /// The keys a complete listing returns (in key order; stores may list in any
    /// order), optionally of one partition.
    pub fn keys(&self, partition: Option<&str>) -> Vec<LockKey> {
        self.records
            .keys()
            .filter(|k| partition.is_none_or(|p| k.partition() == p))
            .cloned()
            .collect()
    }
}
