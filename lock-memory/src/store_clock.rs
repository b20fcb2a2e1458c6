//! The clock a [`MemoryStore`](crate::MemoryStore) can keep, to report each
//! record's age as PostgreSQL does
//! ([`StoreClock::Age`](lock_core::StoreClock::Age)), with the faults a real
//! server's clock can have: a rate off true time, a forward step.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::{LockKey, LockRecord, WriteTime};
use tokio::time::Instant;

/// The store's clock: tokio time × `rate` since `base`, plus every step.
#[derive(Debug)]
pub(crate) struct StoreTime {
    base: Instant,
    rate: f64,
    stepped: Duration,
    /// The store clock's reading when each key's current record was written.
    stamps: HashMap<LockKey, Duration>,
}

impl StoreTime {
    /// A clock running at `rate` × tokio time (1.0: true time), from now.
    pub(crate) fn new(rate: f64) -> Self {
        Self {
            base: Instant::now(),
            rate,
            stepped: Duration::ZERO,
            stamps: HashMap::new(),
        }
    }

    fn now(&self) -> Duration {
        Duration::try_from_secs_f64(self.base.elapsed().as_secs_f64() * self.rate)
            .unwrap_or(Duration::MAX)
            .saturating_add(self.stepped)
    }

    /// Move the clock forward at once, as a server's clock stepped by hand or
    /// by NTP.
    pub(crate) fn step(&mut self, by: Duration) {
        self.stepped = self.stepped.saturating_add(by);
    }

    /// `key`'s record was written now.
    pub(crate) fn stamp(&mut self, key: &LockKey) {
        let now = self.now();
        self.stamps.insert(key.clone(), now);
    }

    /// `key`'s record is gone.
    pub(crate) fn forget(&mut self, key: &LockKey) {
        self.stamps.remove(key);
    }

    /// `record` as a read returns it: with its age on this clock.
    pub(crate) fn dated(&self, mut record: LockRecord) -> LockRecord {
        if let Some(stamp) = self.stamps.get(&record.key) {
            record.written = Some(WriteTime::Ago(self.now().saturating_sub(*stamp)));
        }
        record
    }
}
