//! The store layer every client puts over its store: each call counted and
//! timed by operation and outcome, in a tracing span with the key, the
//! operation, the outcome and the latency.

use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use super::{ClientMetrics, StoreOutcome};
use crate::layer::{StoreCall, StoreLayer, StoreOp, StoreReply};
use crate::{ConditionalStore, Outcome, StoreError};

/// A [`StoreLayer`] that counts and times every call (`lock_store_calls_total`,
/// `lock_store_call_seconds`) and wraps it in a `store_call` tracing span
/// (debug level) with its key, operation, outcome and latency. Every
/// [`LockClient`](crate::LockClient) puts one over its store; over a store
/// used without a client, wrap it with [`Layered`](crate::layer::Layered):
///
/// ```
/// use lock_core::layer::Layered;
/// use lock_core::metrics::StoreMetrics;
/// # use lock_core::{Capabilities, ConditionalStore, Cursor, Expect, LockKey, LockRecord, NewRecord, Outcome, Page, StoreError};
/// # #[derive(Debug)] struct MyStore;
/// # #[async_trait::async_trait]
/// # impl ConditionalStore for MyStore {
/// #     async fn get(&self, _: &LockKey) -> Result<Option<LockRecord>, StoreError> { Ok(None) }
/// #     async fn put(&self, _: &LockKey, _: Expect, _: NewRecord) -> Result<Outcome, StoreError> { unimplemented!() }
/// #     async fn delete(&self, _: &LockKey, _: Expect) -> Result<Outcome, StoreError> { unimplemented!() }
/// #     async fn list(&self, _: Option<&str>, _: Option<Cursor>, _: usize) -> Result<Page, StoreError> { Ok(Page::default()) }
/// # }
/// let store = Layered::new(StoreMetrics::new(), MyStore);
/// # let _ = store;
/// ```
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    metrics: Arc<ClientMetrics>,
}

impl StoreMetrics {
    /// Handles registered with the recorder installed now, without key labels.
    pub fn new() -> Self {
        Self::with(Arc::new(ClientMetrics::new(false)))
    }

    pub(crate) fn with(metrics: Arc<ClientMetrics>) -> Self {
        Self { metrics }
    }
}

impl Default for StoreMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn op_index(op: StoreOp) -> usize {
    match op {
        StoreOp::Get => 0,
        StoreOp::Put => 1,
        StoreOp::Delete => 2,
        StoreOp::List => 3,
    }
}

#[async_trait]
impl StoreLayer for StoreMetrics {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let op = call.op();
        let key = call.key();
        let span = tracing::debug_span!(
            "store_call",
            op = ?op,
            key = key.map(tracing::field::display),
            outcome = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = tokio::time::Instant::now();
        let reply = call.send(next).instrument(span.clone()).await;
        let elapsed = started.elapsed();
        let outcome = match &reply {
            Ok(StoreReply::Outcome(Outcome::Applied(_))) => StoreOutcome::Applied,
            Ok(StoreReply::Outcome(Outcome::Rejected { .. })) => StoreOutcome::Rejected,
            Ok(_) => StoreOutcome::Ok,
            Err(error) => StoreOutcome::Error(error.kind()),
        };
        span.record("outcome", outcome.as_str());
        span.record("latency_ms", elapsed.as_secs_f64() * 1000.0);
        self.metrics.store_call(op_index(op), key, outcome, elapsed);
        reply
    }
}
