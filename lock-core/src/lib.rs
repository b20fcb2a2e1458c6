//! Lease-based distributed locks over any conditional store.
//!
//! `lock-core` is the protocol and the client; it knows no store. A store is
//! anything that implements the small [`ConditionalStore`] trait (a linearizable map
//! with conditional writes): `lock-memory` for tests, `lock-dynamodb` or
//! `lock-postgres` for production, or your own (see `docs/adapters.md`).
//!
//! * [`LockClient`] acquires locks ([`acquire`](LockClient::acquire),
//!   [`try_acquire`](LockClient::try_acquire),
//!   [`with_lock`](LockClient::with_lock)), heartbeats them from one background
//!   task, and releases them ([`shutdown`](LockClient::shutdown) releases all).
//! * Tasks of one process share one client (clones are cheap): acquires of one
//!   key on one client queue inside it, first come first served, and are handed
//!   the lock in one write when the holder releases it. Every way out of a lock
//!   (release, a dropped guard, a dropped release future, shutdown) releases it.
//! * [`LockGuard`] proves a lock is held: its [`Fence`] goes with every write to the
//!   protected resource, [`state`](LockView::state) says whether the lease is still
//!   safe, [`lost`](LockView::lost) is a future that resolves when it is not.
//! * For locks handed between processes: [`LockGuard::detach`] stops
//!   heartbeating without releasing and returns a [`DetachedLock`] with the
//!   record version; [`release_version`](LockClient::release_version) releases a
//!   lock by that version from anywhere, and
//!   [`force_release`](LockClient::force_release) releases whoever holds it.
//! * [`LockClient::elect`] runs a leader election on one key: an [`Election`]
//!   campaigns in the background, publishes its [`Role`], and
//!   [`lead`](Election::lead)s work that is cancelled the moment the
//!   leadership can no longer be trusted.
//! * [`LockClient::semaphore`] bounds parallelism: a [`Semaphore`] of `n`
//!   permits hands out [`Permit`]s, each a held lock on one of its slots.
//! * [`LockClient::rw_lock`] shares a name between many readers or one
//!   writer ([`RwLock`]); [`LockClient::acquire_all`] holds several locks
//!   all or nothing ([`LockGroup`]).
//! * The timing decisions are pure functions in [`timing`]; the protocol is
//!   described in `docs/protocol.md`.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, Fence, LockClient};
//! use lock_memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = MemoryStore::new();
//! let alice = LockClient::builder(store.clone()).owner("alice").build()?;
//! let bob = LockClient::builder(store).owner("bob").build()?;
//!
//! let guard = alice.acquire("leader", AcquireOptions::new()).await?;
//! assert_eq!(guard.fence(), Fence(1));
//! assert!(bob.try_acquire("leader", AcquireOptions::new()).await?.is_none()); // alice holds it
//!
//! guard.release().await?; // the record stays, marked released
//! let guard = bob.acquire("leader", AcquireOptions::new()).await?;
//! assert_eq!(guard.fence(), Fence(2)); // fences keep increasing
//!
//! // Before the program ends: releases what is still held (here, bob's lock).
//! alice.shutdown().await?;
//! bob.shutdown().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

/// The code in docs/ that needs no store but lock-core's and lock-memory's,
/// compiled and run as doctests, so the docs cannot drift from the API (the
/// DynamoDB guide, the README and the recipes are compiled by lock-dynamodb).
#[cfg(doctest)]
#[doc = include_str!("../../docs/safety.md")]
pub struct SafetyDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/protocol.md")]
pub struct ProtocolDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/testing.md")]
pub struct TestingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/cli.md")]
pub struct CliDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/performance.md")]
pub struct PerformanceDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../docs/operations.md")]
pub struct OperationsDoctests;

mod acquire;
mod client;
pub mod clock;
mod config;
mod detached;
mod election;
mod error;
pub mod fencing;
mod group;
mod guard;
mod heartbeat;
mod held;
mod info;
mod key;
mod last_handle;
pub mod layer;
mod leaving;
pub mod limits;
mod lost;
pub mod metrics;
#[cfg(test)]
mod model;
mod options;
mod pacing;
mod protocol;
mod record;
mod registry;
mod release;
pub mod released;
mod replies;
mod retry;
mod rw;
mod semaphore;
mod shared;
mod shutdown_report;
mod sightings;
mod slot;
mod store;
pub mod timing;
mod turns;
mod write;

pub use client::LockClient;
pub use clock::{Clock, DriftingClock, Instant, TokioClock};
pub use config::{LockClientBuilder, MAX_LEASE};
pub use detached::DetachedLock;
pub use election::{Election, ElectionOptions, ElectionWatcher, Leadership, Role};
pub use error::{ConfigError, LockError, StoreError, StoreErrorKind};
pub use fencing::FenceRefused;
pub use group::LockGroup;
pub use guard::{LockGuard, LockView, WorkInProgress};
pub use info::{LockInfo, LockPage};
pub use key::{KeyParseError, LockKey};
pub use limits::LimitError;
pub use lost::LostReason;
pub use options::{AcquireOptions, ListOptions};
pub use record::{DataUpdate, Fence, FenceUpdate, LockRecord, NewRecord, Rvn, Takeover, WriteTime};
pub use released::{ReleaseAnnouncer, ReleaseFeed, ReleaseWatch};
pub use rw::{ReadGuard, ReadView, RwLock, UpgradeFailed, UpgradeableReadGuard, WriteGuard};
pub use semaphore::{MAX_PERMITS, Permit, Semaphore};
pub use shutdown_report::ShutdownReport;
pub use store::{
    AtomicWrites, Capabilities, ConditionalStore, Cursor, Expect, FencesAfterDeletion, KeyedWrite,
    ManyOutcome, Outcome, Page, RequestCosts, StoreClock,
};
pub use timing::{LeaseState, Observation, Timing};

/// What [`store_via_layer!`] expands to needs, reachable from other crates.
#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
}
