//! The evidence that the lock protocol is correct, and the tools to show a new
//! store meets its contract.
//!
//! * **Conformance suite** — [`StoreFactory`] builds a fresh, empty store (with a
//!   [`Cleanup`] guard); [`cases`] holds one `pub async fn` per clause of the
//!   store contract; [`conformance_suite!`] expands into one `#[tokio::test]` per
//!   case. Cases read the store's [`Capabilities`](lock_core::Capabilities) and
//!   check what it claims. `lock-memory` (plain, and behind the fault injector
//!   with [`RetryingStore`]), `lock-dynamodb` (against moto) and `lock-postgres`
//!   (against a real PostgreSQL server) run it.
//! * **Fault injection** — [`FaultyStore`] (from `lock-memory`) wraps any store and,
//!   from a seed, delays, throttles, fails before applying, or applies and loses
//!   the response.
//! * **Simulation** — [`sim`] runs seeded schedules of 2–16 clients with drifting
//!   clocks, crashes, pauses and faults against a fenced resource and checks the
//!   protocol's invariants in true time; [`sim::Breakage`] proves the checks bite.
//! * **Fault proxy** — [`proxy::FaultProxy`] sits between a client and a real
//!   server and partitions, delays, resets or loses replies on command, for
//!   fault drills against the DynamoDB emulator, PostgreSQL and `lockctl`;
//!   [`drills`] are the client drills every backend runs through it.
//! * **Scenarios** — [`scenarios`] need several handles on one real store, as
//!   separate processes have: racing writers, the client end to end;
//!   [`records`] holds the writes store tests make by hand.
//! * **Reference model** — [`model::ModelStore`] is the store contract as a plain
//!   value, for model-based tests of any store.
//!
//! A new adapter runs the suite like this (see `docs/adapters.md`):
//!
//! ```
//! use async_trait::async_trait;
//! use lock_core::StoreError;
//! use lock_memory::MemoryStore;
//! use lock_testkit::{FreshStore, StoreFactory};
//!
//! struct MyFactory;
//!
//! #[async_trait]
//! impl StoreFactory for MyFactory {
//!     async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
//!         Ok(Some(FreshStore::new(MemoryStore::new()))) // your store here
//!     }
//! }
//!
//! // In a test file: `lock_testkit::conformance_suite!(MyFactory);`
//! // or, as one test:
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! lock_testkit::run_all(&MyFactory).await;
//! # }
//! ```
#![deny(missing_docs)]

/// The adapter guide's code (docs/adapters.md), compiled as a doctest so it
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../docs/adapters.md")]
pub struct AdapterGuideDoctests;

pub mod cases;
pub mod drills;
mod env;
mod factory;
pub mod model;
pub mod proxy;
pub mod records;
mod retry;
pub mod scenarios;
pub mod sim;
mod suite;

pub use cases::{CaseError, CaseResult};
pub use env::{moto_bucket, server_from_env};
pub use factory::{Cleanup, FaultyMemoryFactory, FreshStore, MemoryFactory, StoreFactory};
pub use lock_memory::{Fault, FaultConfig, FaultyStore};
pub use retry::RetryingStore;
pub use suite::{CASES, run_all, run_case};
