//! [`MemoryStoreBuilder`]: the limits and behaviours of a [`MemoryStore`].

use lock_core::{AtomicWrites, Capabilities, FencesAfterDeletion, StoreClock};

use crate::{DEFAULT_HISTORY_CAPACITY, MemoryStore};

/// The default [`MemoryStoreBuilder::atomic_writes`]: DynamoDB's
/// `TransactWriteItems` limits.
pub const DEFAULT_ATOMIC_WRITES: AtomicWrites = AtomicWrites::new(100, 4 * 1024 * 1024);

/// Configures a [`MemoryStore`]; start from [`MemoryStore::builder`].
///
/// The defaults are DynamoDB's: partition keys up to 2048 bytes, sort keys up to
/// 1024 bytes, records up to 400 KiB (measured by [`record_size`](crate::record_size)),
/// a rejected write returns the current record, and up to 100 keys (4 MiB) are
/// written in one atomic request. Whatever is configured here is
/// what [`capabilities`](lock_core::ConditionalStore::capabilities) reports. The
/// history keeps the last [`DEFAULT_HISTORY_CAPACITY`] calls (10,000); see
/// [`history_capacity`](Self::history_capacity).
#[derive(Clone, Debug)]
pub struct MemoryStoreBuilder {
    caps: Capabilities,
    history_capacity: usize,
    clock_rate: Option<f64>,
}

impl Default for MemoryStoreBuilder {
    fn default() -> Self {
        Self {
            // The store always keeps released records, whatever the defaults
            // say, remembers deleted records' fences, and writes several keys
            // at once as DynamoDB does.
            caps: Capabilities::default()
                .with_keeps_released_records(true)
                .with_fences_after_deletion(FencesAfterDeletion::Remembered)
                .with_atomic_writes(Some(DEFAULT_ATOMIC_WRITES)),
            history_capacity: DEFAULT_HISTORY_CAPACITY,
            clock_rate: None,
        }
    }
}

impl MemoryStoreBuilder {
    /// Keep the last `calls` calls in the [`history`](MemoryStore::history)
    /// (default [`DEFAULT_HISTORY_CAPACITY`], 10,000); when it is full, the oldest
    /// entry is dropped for each new one.
    ///
    /// `0` turns the history off: no call is recorded, and its arguments are not
    /// even copied, which is what a benchmark or a long simulation wants.
    /// `usize::MAX` keeps every call. Whatever the capacity, the counters
    /// ([`calls`](MemoryStore::calls), [`writes`](MemoryStore::writes),
    /// [`reads`](MemoryStore::reads), [`applied_writes`](MemoryStore::applied_writes))
    /// count every call, and each entry's [`seq`](crate::HistoryEntry::seq)
    /// numbers it among all the calls served, dropped ones included.
    pub fn history_capacity(mut self, calls: usize) -> Self {
        self.history_capacity = calls;
        self
    }

    /// The largest record, in bytes as [`record_size`](crate::record_size)
    /// measures it (default 400 KiB).
    pub fn max_record_bytes(mut self, bytes: usize) -> Self {
        self.caps = self.caps.with_max_record_bytes(bytes);
        self
    }

    /// The longest partition key and sort key, in UTF-8 bytes (default 2048 and
    /// 1024).
    pub fn key_limits(mut self, partition: usize, sort: usize) -> Self {
        self.caps = self.caps.with_key_limits(partition, sort);
        self
    }

    /// Whether keys may have a sort key (default `true`). Without, a key with a sort
    /// key is refused as `Invalid`.
    pub fn sort_keys(mut self, allowed: bool) -> Self {
        self.caps = self.caps.with_sort_keys(allowed);
        self
    }

    /// Whether a rejected write carries the current record (default `true`). With
    /// `false`, every rejection carries `current: None`, like a store that cannot
    /// return the record in the same round trip, so the client has to read it.
    pub fn returns_current_on_conflict(mut self, returns: bool) -> Self {
        self.caps = self.caps.with_returns_current_on_conflict(returns);
        self
    }

    /// Keep a clock, as PostgreSQL does, running at `rate` × tokio time (1.0:
    /// true time; 1.01: 1 % fast, a fault): every record a read returns
    /// carries its age on that clock
    /// ([`WriteTime::Ago`](lock_core::WriteTime::Ago)), and the store reports
    /// [`StoreClock::Age`], so clients take over a record whose lease has
    /// passed on the store's clock the first time they read it. Off by
    /// default. A rate that is not a positive number counts as 1.0.
    /// [`MemoryStore::step_store_clock`] steps the clock forward.
    pub fn store_clock(mut self, rate: f64) -> Self {
        let rate = if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            1.0
        };
        self.clock_rate = Some(rate);
        self.caps = self.caps.with_clock(StoreClock::Age);
        self
    }

    /// How many keys (and bytes, as [`record_size`](crate::record_size)
    /// adds them up) one [`put_many`](lock_core::ConditionalStore::put_many)
    /// writes at once: by default 100 keys and 4 MiB, DynamoDB's limits;
    /// `None` for a store without atomic writes, which refuses every
    /// `put_many` (so clients take several locks one by one).
    pub fn atomic_writes(mut self, limits: Option<AtomicWrites>) -> Self {
        self.caps = self.caps.with_atomic_writes(limits);
        self
    }

    /// Announce every release to waiters in other clients, as a store that
    /// notifies does (PostgreSQL's `NOTIFY`, an etcd watch, Redis pub/sub):
    /// [`ConditionalStore::release_feed`](lock_core::ConditionalStore::release_feed)
    /// returns a feed, and each applied write of a released record is
    /// announced on it (default off: waiters poll).
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.caps = self.caps.with_announces_releases(announce);
        self
    }

    /// The capabilities the store will report and enforce.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// An empty store with this configuration.
    pub fn build(self) -> MemoryStore {
        MemoryStore::from_parts(self.caps, self.history_capacity, self.clock_rate)
    }
}
