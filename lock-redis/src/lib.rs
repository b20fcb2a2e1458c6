//! The Redis and Valkey backend of the lease-lock library: a
//! [`ConditionalStore`](lock_core::ConditionalStore) on one primary or a
//! Redis Cluster, through the `redis` crate.
//!
//! * **One hash per lock** under a prefix (`{prefix}:{partition}:r:-`, or
//!   `…:r:s{sort}` with a sort key); the partition is the keys' hash tag,
//!   so on a Redis Cluster every script's keys share a slot (a cluster
//!   node's URL makes a cluster store; several keys of several partitions
//!   are then taken one by one).
//! * **Every state change is one Lua script**, which Redis runs atomically:
//!   it checks the condition (the record's RVN, or vacant), computes the
//!   fence and writes, or returns the current record. Reads are scripts too,
//!   so each record comes with its age on the server's clock (`TIME`): a
//!   crashed holder's lock is taken over at the first look once its lease
//!   has passed on that clock, as on PostgreSQL. The age is only computed on
//!   the node that stamped the record (its `run_id`, kept in the record):
//!   after a failover, a slot migration or a restore, another node's clock
//!   could be ahead by any amount, so there the age is unknown and a waiter
//!   watches the record for a lease.
//! * **Fences never restart on Redis's schedule**: the highest fence each
//!   lock was given is kept in `{prefix}:{partition}:f`, which never expires,
//!   and every new fence is one more than the highest of the record's and
//!   that floor. Redis expiry is used for one thing only: a released record
//!   given an expiry time may vanish, and its fence stays in the floor. A
//!   `delete` (delete-on-release, `lockctl release --force`) or a `DEL` of
//!   the record by hand leaves the floor too, so fences keep rising across
//!   any deletion of a record
//!   ([`FencesAfterDeletion::Remembered`](lock_core::FencesAfterDeletion::Remembered));
//!   only deleting the floors themselves, or losing them in a failover,
//!   starts a lock's fences again.
//! * **Several keys in one script** (`put_many`, up to 100 keys; not on a
//!   cluster).
//! * **Releases are announced** on `{prefix}:released` (`PUBLISH` in the
//!   release's script).
//! * Requests are **never retried** by the store; a write without a reply is
//!   ambiguous, and the lock client resolves it by RVN. After a request that
//!   got no answer, the next one goes on a new connection.
//!
//! # Replication
//!
//! On a single primary every acknowledged write survives as long as the
//! server's data does (with persistence, as it is configured). Replication
//! is asynchronous: a failover can promote a replica that lacks writes the
//! old primary acknowledged, so a lock can be held twice and a fence handed
//! out twice (and a fenced resource admits both holders' writes: fencing
//! assumes the store never grants one fence twice).
//! [`RedisStoreBuilder::wait_for_replicas`] makes every write wait for
//! `WAIT n`: a write fewer replicas acknowledged is ambiguous, and the store
//! does not let the client trust it (hold the lock, extend a lease) until
//! `n` replicas acknowledge it, even when a read of the primary shows it. A
//! failover to one of those replicas then keeps every lock a client trusts;
//! a failover to a replica that had not acknowledged (Sentinel may promote
//! one after a partition) can still lose a write. Redlock (locks on several
//! independent primaries, trusted on a majority) is not used: its safety
//! rests on bounded clock drift and process pauses, and it gives no
//! monotonic fence. The repository's `docs/redis.md` has the argument.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_redis::RedisStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder("redis://cache.internal:6379", "locks")
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
//! | Redis | [`StoreErrorKind`](lock_core::StoreErrorKind) |
//! | --- | --- |
//! | the condition does not hold | not an error: `Outcome::Rejected` with the current record |
//! | no connection (refused, unreachable) | `Unavailable`: nothing was sent |
//! | `READONLY`, `LOADING`, `MASTERDOWN`, `OOM`, `BUSY`, `TRYAGAIN` | `Unavailable`: the script did not run |
//! | a timeout, a connection lost after sending, `WAIT` short of replicas | writes: `Ambiguous`; reads: `Unavailable` |
//! | `NOAUTH`, `WRONGPASS`, `NOPERM` | `Unauthorized`, saying what to grant |
//! | a record under the prefix this version cannot read | `Other` |
#![deny(missing_docs)]

/// The Redis guide (docs/redis.md), compiled as a doctest so it cannot
/// drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/redis.md")]
pub struct GuideDoctests;

mod builder;
mod errors;
mod layout;
mod link;
mod record;
mod scripts;
mod store;

pub use builder::{RedisStoreBuilder, ReplicaAcks, Timeouts};
pub use errors::StoreConfigError;
/// The client library the store runs on.
pub use redis;
pub use store::RedisStore;
