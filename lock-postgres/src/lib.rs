//! The PostgreSQL backend of the lease-lock library: a
//! [`ConditionalStore`](lock_core::ConditionalStore) on one table, on
//! `tokio-postgres` with a `deadpool-postgres` pool, with schema creation and
//! validation.
//!
//! * Every state change is **one statement, one round trip**. Acquiring a
//!   vacant or released key is one `INSERT ... ON CONFLICT ... DO UPDATE ...
//!   WHERE released` that steps the fence in the same statement; heartbeat,
//!   release and takeover are one `UPDATE` conditional on the record version
//!   number (RVN), release-by-delete one `DELETE`. A rejected write returns the
//!   row that made its condition fail in the same statement, as DynamoDB's
//!   `ALL_OLD` does, so a conflict costs no extra read.
//! * Statements run in autocommit at PostgreSQL's default READ COMMITTED
//!   level. Each locks the key's row (`FOR UPDATE`) and decides on its latest
//!   committed version, so writers of one key are serialised by the row lock
//!   and the store is linearizable per key (`docs/postgres.md` of the
//!   repository has the argument). Reads go to the server you connect to:
//!   point the store at the primary, never a replica.
//! * No statement is ever retried by the store (the lock client retries and
//!   resolves ambiguous writes by RVN). The server cancels a statement after
//!   the statement timeout; the client stops waiting after the reply timeout
//!   ([`Timeouts`]).
//! * Statements are sent with their parameter types as unnamed statements:
//!   nothing prepared outlives a statement, so transaction-mode poolers
//!   (PgBouncer) need no settings for them.
//!
//! Requires PostgreSQL 14 or later.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_postgres::PostgresStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = PostgresStore::builder("locks")
//!     .build_from_url("postgres://app:secret@db.internal:5432/app")?;
//! store.create_schema().await?; // once, by a role allowed to create tables
//! let client = LockClient::builder(store).lease(Duration::from_secs(20)).build()?;
//! let guard = client
//!     .acquire("nightly-report", AcquireOptions::new().wait(Duration::from_secs(60)))
//!     .await?;
//! println!("fence {}", guard.fence());
//! guard.release().await?;
//! client.shutdown().await?; // before main returns
//! # Ok(())
//! # }
//! ```
//!
//! # Error mapping
//!
//! | PostgreSQL | [`StoreErrorKind`](lock_core::StoreErrorKind) |
//! | --- | --- |
//! | the condition does not hold | not an error: `Outcome::Rejected` with the current row |
//! | no connection (refused, unreachable, the pool's wait or connect timeout) | `Unavailable`: nothing was sent |
//! | `40001` serialization failure, `40P01` deadlock, `55P03` lock not available, `53xxx` insufficient resources, `57014` statement timeout | `Unavailable`: the statement was rolled back |
//! | connection lost after a write was sent, the server shutting down (`57P0x`, `08xxx`), no reply within the reply timeout | writes: `Ambiguous`; reads: `Unavailable` |
//! | `28000`, `28P01` login refused; `42501` permission denied | `Unauthorized`, saying what to set or grant |
//! | `42P01` missing table, `3D000` missing database, `3F000` missing schema | `NotFound`, naming it and how to create it |
//! | key or record over the limits, NUL characters (checked before sending); `22xxx`, `54000` | `Invalid` |
//! | columns of another type, a read-only standby, anything else | `Other` |
//!
//! The schema, the SQL of each operation, the isolation argument, grants,
//! poolers and clean-up are in `docs/postgres.md` of the repository.
#![deny(missing_docs)]

/// The PostgreSQL guide's code (docs/postgres.md), compiled as doctests so it
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/postgres.md")]
pub struct PostgresGuideDoctests;

mod errors;
pub mod fence;
mod notify;
mod row;
mod schema;
mod sql;
mod store;
mod tls;

/// The pool type [`PostgresStoreBuilder::build_with_pool`] takes.
pub use deadpool_postgres;
pub use errors::{SchemaError, StoreConfigError};
pub use fence::{FenceError, FenceGuard};
pub use lock_core::FenceRefused;
pub use row::{MAX_PARTITION_KEY_BYTES, MAX_RECORD_BYTES, MAX_SORT_KEY_BYTES};
pub use store::{PostgresStore, PostgresStoreBuilder, Timeouts};
pub use tls::{RootCertificates, SslMode};
/// The client library the store runs on.
pub use tokio_postgres;
