//! The etcd backend of the lease-lock library: a
//! [`ConditionalStore`](lock_core::ConditionalStore) on etcd v3, over gRPC
//! (tonic). The API's code is generated from etcd's `.proto` files and kept
//! in the crate, so building it needs no `protoc`.
//!
//! * **One key per lock** under a prefix: `{prefix}/r/{partition}/-`, or
//!   `{prefix}/r/{partition}/s{sort}` with a sort key, each part
//!   percent-escaped. The value is the record as JSON, key included.
//! * **Every state change is one transaction** comparing the key's
//!   `mod_revision` with the one the store last saw (or `create_revision ==
//!   0` for a key taken to be absent), which writes the new record when it
//!   holds and reads the current one when it does not: a conflict costs no
//!   extra request. The fence is the previous record's + 1, computed by the
//!   store on exactly the revision it compares, so it is atomic; a record
//!   created where none is (a new key, or one deleted) starts at the clock's
//!   floor ([`Fence::clock_floor`](lock_core::Fence::clock_floor)), so fences
//!   keep rising across a deletion
//!   ([`FencesAfterDeletion::ClockFloor`](lock_core::FencesAfterDeletion::ClockFloor)).
//! * **Reads are linearizable** (etcd's default; never serializable reads
//!   from a member's local state), so the store is linearizable per key:
//!   etcd orders every request through Raft.
//! * **No etcd leases are attached**: a lease's expiry would delete the key
//!   on etcd's schedule, not the protocol's. A lock's lease is the client's,
//!   as on every store; a released record is kept, so fences rise by one per
//!   acquisition.
//! * **Several keys in one transaction** (`put_many`, up to 64 keys).
//! * Requests are **never retried** by the store; a write without a reply
//!   is ambiguous, and the lock client resolves it by RVN. After a request
//!   that timed out (or that its caller stopped waiting for), the next one
//!   goes on a new connection: a connection whose packets vanish would hang
//!   every request on it for minutes.
//!
//! The repository's `docs/etcd.md` has the argument, permissions, TLS and
//! compaction, and when to choose etcd.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_etcd::EtcdStoreBuilder;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = EtcdStoreBuilder::from_url("etcd://10.0.0.1:2379,10.0.0.2:2379/locks")?
//!     .connect()
//!     .await?;
//! let client = LockClient::builder(store).lease(Duration::from_secs(20)).build()?;
//! let guard = client
//!     .acquire("nightly-report", AcquireOptions::new().wait(Duration::from_secs(60)))
//!     .await?;
//! println!("fence {}", guard.fence());
//! guard.release().await?;
//! client.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Error mapping
//!
//! | etcd | [`StoreErrorKind`](lock_core::StoreErrorKind) |
//! | --- | --- |
//! | the comparison fails | not an error: `Outcome::Rejected` with the current record |
//! | no connection to any member (refused, unreachable) | `Unavailable`: nothing was sent |
//! | `ResourceExhausted` ("too many requests") | `Throttled` |
//! | a timeout, a leader change, a connection lost after sending | writes: `Ambiguous`; reads: `Unavailable` |
//! | `PermissionDenied`, `Unauthenticated` | `Unauthorized`, saying what to grant |
//! | `InvalidArgument` (a request over `--max-request-bytes`, a transaction over `--max-txn-ops`) | `Invalid` |
//! | a value under the prefix that is not a lock record | `Other`, naming the key |
#![deny(missing_docs)]

/// The etcd guide (docs/etcd.md), compiled as a doctest so it cannot drift
/// from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/etcd.md")]
pub struct GuideDoctests;

mod builder;
mod errors;
mod layout;
mod revisions;
mod store;
mod value;
mod wire;

pub use builder::{EtcdStoreBuilder, Timeouts};
pub use errors::StoreConfigError;
pub use store::EtcdStore;
