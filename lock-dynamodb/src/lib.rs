//! The DynamoDB backend of the lease-lock library: a
//! [`ConditionalStore`](lock_core::ConditionalStore) on one DynamoDB table, with
//! table creation and validation, and layouts that interoperate with
//! python-dynamodb-lock and AWS's Java `AmazonDynamoDBLockClient`.
//!
//! * Every state change is **one** conditional write. Acquiring a vacant lock is
//!   one `UpdateItem` that increments the fence with `ADD` under the condition
//!   "absent or released"; takeover, heartbeat and release are one write
//!   conditional on the record version number. A conflict returns the current item
//!   in the same call (`ReturnValuesOnConditionCheckFailure = ALL_OLD`).
//! * Reads are strongly consistent; conditional writes are never retried by the
//!   SDK (the lock client retries them and resolves ambiguous ones by RVN); every
//!   call has connect, attempt and operation timeouts ([`Timeouts`]).
//! * DynamoDB errors are classified for the client: throttled, ambiguous (the
//!   write may have applied), unavailable, not found (naming the table and how to
//!   create it), unauthorized, invalid. See [`mapping`](crate#error-mapping).
//! * Keys and items are checked against DynamoDB's limits before anything is
//!   sent.
//!
//! ```no_run
//! use std::time::Duration;
//! use lock_core::{AcquireOptions, LockClient};
//! use lock_dynamodb::{DynamoDbStore, Layout, TableOptions};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Region, credentials and endpoint (AWS_ENDPOINT_URL) from the environment.
//! let store = DynamoDbStore::builder("locks")
//!     .layout(Layout::native())
//!     .build_from_env()
//!     .await?;
//! if let Err(error) = store.validate_table().await {
//!     eprintln!("{error}; creating it");
//!     store.create_table(TableOptions::default()).await?;
//! }
//! let client = LockClient::builder(store).lease(Duration::from_secs(20)).build()?;
//! // Waits up to lease × 1.01 + 1 s by default: long enough to take over a crashed holder.
//! let guard = client.acquire("nightly-report", AcquireOptions::new()).await?;
//! println!("fence {}", guard.fence());
//! guard.release().await?;
//! client.shutdown().await?; // before main returns
//! # Ok(())
//! # }
//! ```
//!
//! # Error mapping
//!
//! | DynamoDB / SDK | [`StoreErrorKind`](lock_core::StoreErrorKind) |
//! | --- | --- |
//! | `ConditionalCheckFailedException` | not an error: `Outcome::Rejected` with the current item |
//! | `ProvisionedThroughputExceededException`, `ThrottlingException`, `RequestLimitExceeded` | `Throttled` |
//! | HTTP 5xx, attempt or operation timeout, connection reset after sending | writes: `Ambiguous`; reads: `Unavailable` |
//! | failure to connect (nothing was sent) | `Unavailable` |
//! | `ResourceNotFoundException` | `NotFound`, naming the table and how to create it |
//! | `AccessDeniedException`, `UnrecognizedClientException`, a bad signature or session token, missing credentials | `Unauthorized`, the message saying what to set |
//! | `ValidationException` (item too large, key too long, ...) | `Invalid` |
//!
//! The table layouts, IAM policy, costs and migration guides are in
//! `docs/dynamodb.md` of the repository.
#![deny(missing_docs)]

/// The DynamoDB guide's code (docs/dynamodb.md), compiled as doctests so it
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/dynamodb.md")]
pub struct DynamoDbGuideDoctests;

/// The README's examples (its first one builds a DynamoDB store), compiled as
/// doctests: the DynamoDB example compiles only, the in-process one runs.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The recipes (docs/recipes.md), compiled as doctests: the DynamoDB code
/// compiles only, the code on the in-process store runs.
#[cfg(doctest)]
#[doc = include_str!("../../docs/recipes.md")]
pub struct RecipesDoctests;

mod attributes;
mod errors;
pub mod fence;
mod item;
mod layout;
mod mapping;
mod store;
mod table;

pub use errors::{StoreConfigError, TableError};
pub use fence::{FailedItem, Fenced, ItemFence};
pub use item::{MAX_ITEM_BYTES, MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES};
pub use layout::{Layout, LeaseEncoding, ReleaseMode, ReleasedEncoding};
pub use lock_core::FenceRefused;
pub use store::{DynamoDbStore, DynamoDbStoreBuilder, Timeouts};
pub use table::{Billing, TableOptions, TableReport};
