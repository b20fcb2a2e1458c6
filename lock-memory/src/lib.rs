//! A deterministic in-process store for the lease-lock protocol, with fault
//! injection and an operation history, for testing locking code without a
//! database.
//!
//! * [`MemoryStore`] is a linearizable, strongly consistent
//!   [`ConditionalStore`](lock_core::ConditionalStore): one mutex around an
//!   ordered map, the same conditional-write semantics as the DynamoDB store
//!   (vacant-or-version conditions, store-computed fences, the current record on
//!   conflict), the same limits by default, and a [`history`](MemoryStore::history)
//!   of its calls so a test can assert what the client did ("an uncontended
//!   acquire is exactly one write").
//! * [`FaultyStore`] wraps **any** store and, from a seed, throttles, fails,
//!   delays, or applies a write and loses the response; faults can also be
//!   [scripted](FaultyStore::script) call by call, and the store can be switched
//!   off for outage tests.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{
//!     ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockKey, NewRecord, Outcome, Rvn,
//! };
//! use lock_memory::{Fault, FaultyStore, MemoryStore, Op};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::StoreError> {
//! let store = MemoryStore::new();
//! let key = LockKey::new("leader");
//! let acquire = |owner: &str| NewRecord {
//!     owner: owner.into(),
//!     rvn: Rvn::fresh(),
//!     lease: Duration::from_secs(10),
//!     released: false,
//!     fence: FenceUpdate::Next,
//!     data: DataUpdate::Keep,
//!     expires_at: None,
//! };
//!
//! // A vacant key is taken in one conditional write; the store computes the fence.
//! let Outcome::Applied(held) = store.put(&key, Expect::Vacant, acquire("alice")).await? else {
//!     panic!("the key was vacant");
//! };
//! assert_eq!(held.fence, Fence(1));
//!
//! // A second acquirer is rejected and sees the holder without another read.
//! let outcome = store.put(&key, Expect::Vacant, acquire("bob")).await?;
//! assert_eq!(outcome, Outcome::Rejected { current: Some(held.clone()) });
//! assert_eq!((store.writes(), store.reads()), (2, 0));
//!
//! // Through the fault injector, a takeover applies but its response is lost.
//! let faulty = FaultyStore::new(store.clone(), 42);
//! faulty.script(Op::Put, Fault::AmbiguousApplied);
//! let error = faulty.put(&key, Expect::Version(held.rvn), acquire("bob")).await.unwrap_err();
//! assert!(error.is_ambiguous());
//! let current = store.record(&key).expect("the write applied");
//! assert_eq!((current.owner.as_str(), current.fence), ("bob", Fence(2)));
//! # Ok(())
//! # }
//! ```
//!
//! # The history is bounded
//!
//! The history keeps the last [`DEFAULT_HISTORY_CAPACITY`] (10,000) calls, the
//! oldest dropped first, so a store that serves millions of calls (a benchmark, a
//! soak, a long simulation) does not grow without end; the fault injector's
//! record of [`faults`](FaultyStore::faults) likewise. Set another capacity with
//! [`MemoryStoreBuilder::history_capacity`] or
//! [`FaultyStore::with_history_capacity`]; `0` turns recording off entirely (no
//! copies of the arguments are made), which is what benchmarks want. The
//! counters ([`calls`](MemoryStore::calls), [`writes`](MemoryStore::writes), ...)
//! count every call whatever the history keeps, and every entry's
//! [`seq`](HistoryEntry::seq) numbers it among all calls, so code that
//! identifies entries by `seq` is not confused by the ones dropped.
//!
//! ```
//! use lock_core::{ConditionalStore, LockKey};
//! use lock_memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::StoreError> {
//! let store = MemoryStore::builder().history_capacity(2).build();
//! for _ in 0..3 {
//!     store.get(&LockKey::new("leader")).await?;
//! }
//! let kept: Vec<u64> = store.history().iter().map(|entry| entry.seq).collect();
//! assert_eq!((kept, store.calls()), (vec![1, 2], 3));
//!
//! let silent = MemoryStore::builder().history_capacity(0).build();
//! silent.get(&LockKey::new("leader")).await?;
//! assert!(silent.history().is_empty());
//! assert_eq!(silent.reads(), 1);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod builder;
mod capacity;
mod cursor;
mod faults;
mod faulty;
mod fenced;
mod history;
mod limits;
mod store;
mod store_clock;

pub use builder::{DEFAULT_ATOMIC_WRITES, MemoryStoreBuilder};
pub use capacity::WriteCapacity;
pub use faults::{Fault, FaultConfig, FaultEvent, FaultSource};
pub use faulty::FaultyStore;
pub use fenced::{FenceRefused, FencedResource};
pub use history::{Call, CallResult, DEFAULT_HISTORY_CAPACITY, HistoryEntry, Op};
pub use limits::{RECORD_OVERHEAD_BYTES, record_size};
pub use store::MemoryStore;
