//! A complete, small store adapter, and the conformance suite run against it.
//!
//! `VersionedMap` keeps records in a map behind a mutex, the way an adapter for a
//! real database maps each call onto one conditional statement. It is the worked
//! example of `docs/adapters.md`.
//!
//! ```sh
//! cargo run -p lock-testkit --example adapter
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, Expect, Fence, FenceUpdate, FencesAfterDeletion,
    LockKey, LockRecord, NewRecord, Outcome, Page, StoreError,
};
use lock_testkit::{FreshStore, StoreFactory};

/// A conditional store over a map: every call takes the mutex once, so each is
/// atomic and linearizable.
#[derive(Debug, Default)]
pub struct VersionedMap {
    records: Mutex<BTreeMap<LockKey, LockRecord>>,
}

const MAX_KEY: usize = 256;
const MAX_DATA: usize = 64 * 1024;

fn check_key(key: &LockKey) -> Result<(), StoreError> {
    let sort_bad = key
        .sort()
        .is_some_and(|s| s.is_empty() || s.len() > MAX_KEY);
    if key.partition().is_empty() || key.partition().len() > MAX_KEY || sort_bad {
        return Err(StoreError::invalid(format!(
            "lock {key}: keys must be 1 to {MAX_KEY} bytes"
        )));
    }
    Ok(())
}

/// Whether `expect` holds for the stored record.
fn holds(expect: &Expect, current: Option<&LockRecord>) -> bool {
    match (expect, current) {
        (Expect::Vacant, None) => true,
        (Expect::Vacant, Some(record)) => record.released,
        (Expect::Version(rvn), Some(record)) => record.rvn == *rvn,
        (Expect::Version(_), None) => false,
    }
}

impl VersionedMap {
    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<LockKey, LockRecord>> {
        // Every mutation is one insert or remove: a poisoned map is still whole.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ConditionalStore for VersionedMap {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        check_key(key)?;
        Ok(self.records().get(key).cloned())
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        // Refuse bad input before anything is written.
        check_key(key)?;
        if new.data.bytes().is_some_and(|d| d.len() > MAX_DATA) {
            return Err(StoreError::invalid(format!(
                "lock {key}: data is limited to {MAX_DATA} bytes"
            )));
        }
        let mut records = self.records();
        let current = records.get(key);
        if !holds(&expect, current) {
            // Return the record that failed the condition: saves the client a read.
            return Ok(Outcome::Rejected {
                current: current.cloned(),
            });
        }
        // The store computes the fence, in the same atomic step as the write,
        // and keeps, replaces or clears the data as the write says.
        let data = new.data.apply(current.and_then(|r| r.data.clone()));
        let fence = match (new.fence, current) {
            // A record created where none is (never written, or deleted), or
            // one that carries no fence (0): the clock's floor, so a deleted
            // key's fences go on above those a holder paused across the
            // deletion still carries.
            (FenceUpdate::Next, None) => Fence::clock_floor(),
            (FenceUpdate::Next, Some(r)) if r.fence == Fence(0) => Fence::clock_floor(),
            (FenceUpdate::Next, Some(r)) => Fence(r.fence.0 + 1),
            (FenceUpdate::Keep, Some(r)) => r.fence,
            (FenceUpdate::Keep, None) => Fence(0),
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
            // A store with a clock reports each record's age on reads
            // (`WriteTime::Ago`); this one has none.
            written: None,
        };
        records.insert(key.clone(), record.clone());
        Ok(Outcome::Applied(record))
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        check_key(key)?;
        let mut records = self.records();
        let current = records.get(key);
        if current.is_none() || !holds(&expect, current) {
            return Ok(Outcome::Rejected {
                current: current.cloned(),
            });
        }
        match records.remove(key) {
            Some(record) => Ok(Outcome::Applied(record)),
            None => Ok(Outcome::Rejected { current: None }),
        }
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        // The cursor is the index of the next record; stable because the map is
        // ordered (a real store would use its own continuation token).
        let start: usize = match cursor {
            None => 0,
            Some(Cursor(text)) => text
                .parse()
                .map_err(|_| StoreError::invalid(format!("bad cursor {text:?}")))?,
        };
        let records = self.records();
        let matching: Vec<&LockRecord> = records
            .values()
            .filter(|r| partition.is_none_or(|p| r.key.partition() == p))
            .collect();
        let end = (start + limit.max(1)).min(matching.len());
        Ok(Page {
            records: matching
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|r| (*r).clone())
                .collect(),
            next: (end < matching.len()).then(|| Cursor(end.to_string())),
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
            .with_key_limits(MAX_KEY, MAX_KEY)
            .with_max_record_bytes(MAX_DATA)
            .with_fences_after_deletion(FencesAfterDeletion::ClockFloor)
    }
}

/// A fresh, empty map for each conformance case.
#[derive(Debug)]
pub struct VersionedMapFactory;

#[async_trait]
impl StoreFactory for VersionedMapFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        Ok(Some(FreshStore::new(VersionedMap::default())))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    lock_testkit::run_all(&VersionedMapFactory).await;
    println!(
        "VersionedMap passes all {} conformance cases",
        lock_testkit::CASES.len()
    );
}
