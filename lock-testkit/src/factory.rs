//! [`StoreFactory`]: how the conformance suite gets a fresh, empty store for each
//! case, and gives it back.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{ConditionalStore, StoreError};
use lock_memory::{FaultConfig, FaultyStore, MemoryStore};

use crate::RetryingStore;

type CleanupFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
type CleanupFn = Box<dyn FnOnce() -> CleanupFuture + Send + 'static>;

/// Clean-up for a store a [`StoreFactory`] built: dropping a table, removing a
/// directory. Run by [`FreshStore::finish`] once a case has passed; if a case fails
/// (panics) the guard is dropped without running, so the failing state stays for
/// inspection.
#[must_use = "call FreshStore::finish to clean up"]
pub struct Cleanup(Option<CleanupFn>);

impl Cleanup {
    /// Nothing to clean up (an in-memory store vanishes when dropped).
    pub fn none() -> Self {
        Self(None)
    }

    /// Run `f` to clean up.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self(Some(Box::new(move || Box::pin(f()))))
    }
}

impl fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Cleanup(pending)"
        } else {
            "Cleanup(none)"
        })
    }
}

/// A fresh, empty store and what to do when the case is over.
#[derive(Debug)]
pub struct FreshStore {
    /// The store under test.
    pub store: Arc<dyn ConditionalStore>,
    /// Run after the case passed.
    pub cleanup: Cleanup,
}

impl FreshStore {
    /// A store that needs no clean-up.
    pub fn new(store: impl ConditionalStore) -> Self {
        Self {
            store: Arc::new(store),
            cleanup: Cleanup::none(),
        }
    }

    /// A store with a clean-up step.
    pub fn with_cleanup(store: impl ConditionalStore, cleanup: Cleanup) -> Self {
        Self {
            store: Arc::new(store),
            cleanup,
        }
    }

    /// Run the clean-up.
    pub async fn finish(self) {
        if let Some(cleanup) = self.cleanup.0 {
            cleanup().await;
        }
    }
}

/// Builds a fresh, empty store for every conformance case, so cases never see each
/// other's records and may run in parallel.
///
/// Return `Ok(None)` to skip (for example when an emulator is not configured and
/// the user asked to skip); the suite prints that the case was skipped.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A new, empty store.
    async fn create(&self) -> Result<Option<FreshStore>, StoreError>;
}

/// The in-memory store, with its default (DynamoDB-like) limits.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        Ok(Some(FreshStore::new(MemoryStore::new())))
    }
}

/// The in-memory store behind the seeded fault injector, behind the
/// [`RetryingStore`] that makes it pass: the suite's proof that the retry layer
/// turns throttles, failures and lost responses back into the contract.
#[derive(Clone, Copy, Debug)]
pub struct FaultyMemoryFactory {
    /// Seed of the fault injector (printed by the suite when a case fails).
    pub seed: u64,
    /// Faults on every call.
    pub faults: FaultConfig,
}

impl FaultyMemoryFactory {
    /// Faults of every kind on 15 % of calls each, the seed from `LOCK_FAULT_SEED` or
    /// random.
    pub fn new() -> Self {
        let seed = std::env::var("LOCK_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..));
        Self {
            seed,
            faults: FaultConfig::NONE
                .with_throttle(0.15)
                .with_unavailable(0.15)
                .with_ambiguous_applied(0.15)
                .with_ambiguous_not_applied(0.15),
        }
    }
}

impl Default for FaultyMemoryFactory {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl StoreFactory for FaultyMemoryFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        eprintln!(
            "fault injector seed {} (replay with LOCK_FAULT_SEED={})",
            self.seed, self.seed
        );
        let faulty = FaultyStore::new(MemoryStore::new(), self.seed).with_faults(self.faults);
        Ok(Some(FreshStore::new(RetryingStore::new(faulty))))
    }
}
