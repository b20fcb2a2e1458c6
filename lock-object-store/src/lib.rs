//! The object-store backend of the lease-lock library: a
//! [`ConditionalStore`](lock_core::ConditionalStore) on Amazon S3, Google
//! Cloud Storage or Azure Blob Storage, through the conditional writes the
//! `object_store` crate speaks to all three (`PutMode::Create` and
//! `PutMode::Update`).
//!
//! * **One object per lock** under a prefix: `{prefix}/{partition}/lock.json`,
//!   or `{prefix}/{partition}/sort/{sort}.json` with a sort key, each part
//!   percent-escaped. The body is the record as JSON, key included.
//! * **Every write is one conditional PUT**: a vacant key is created with
//!   `If-None-Match: *`; every other write is made with `If-Match` on the
//!   ETag (and version, where the service has one) of the object the
//!   expected record was stored as. The store remembers the version of each
//!   record it wrote or read, so a heartbeat, a release and an acquire after
//!   a read are one request; a write on a record it has not seen reads it
//!   first ([`RequestCosts::VERSIONED_OBJECTS`](lock_core::RequestCosts)).
//! * **A refused write is followed by one GET** (S3 does not return the
//!   current object), which also recognises this store's own write when the
//!   HTTP client sent it twice. A 409 `ConditionalRequestConflict` (S3, when
//!   writes of one object race) is treated the same way: not applied.
//! * **Release keeps a released record**, so fences keep rising. `delete`
//!   is refused: `object_store` cannot make a delete conditional
//!   (`Capabilities::conditional_delete` is false, and the client refuses
//!   delete-on-release before acquiring).
//! * Requests time out after 5 s and are **never retried by the HTTP
//!   client**: the lock client retries with its own backoff and deadline.
//!
//! Linearizability rests on each service's strong read-after-write
//! consistency and atomic conditional writes: the repository's
//! `docs/object-store.md` has the argument per service, the request costs
//! next to DynamoDB's, lifecycle rules for old lock objects, and when to
//! choose a bucket.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_object_store::BucketStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // "s3://my-bucket/locks" in production; memory:// runs anywhere.
//! let store = BucketStore::builder().build_from_url("memory:///locks")?;
//! store.validate_bucket().await?; // once: the bucket makes conditional writes
//! let client = LockClient::builder(store.clone())
//!     .lease(Duration::from_secs(20))
//!     .build()?;
//! let guard = client
//!     .acquire("nightly-report", AcquireOptions::new().wait(Duration::from_secs(5)))
//!     .await?;
//! println!("fence {}", guard.fence());
//! guard.release().await?;
//! client.shutdown().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

/// The guide (docs/object-store.md), compiled as a doctest so it cannot drift
/// from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/object-store.md")]
pub struct GuideDoctests;

mod body;
mod bucket;
mod builder;
mod errors;
pub mod fence;
mod layout;
mod store;
mod versions;

pub use builder::BucketStoreBuilder;
pub use errors::{BucketError, StoreConfigError};
pub use fence::{FencedObjects, ObjectFenceError};
pub use lock_core::FenceRefused;
pub use object_store;
pub use store::BucketStore;
