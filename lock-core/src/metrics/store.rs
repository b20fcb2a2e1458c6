//! The store layer every client puts over its store: each call counted and
//! timed by operation and outcome, in a tracing span with the key, the
//! operation, the outcome and the latency.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tracing::Instrument;

use super::{ClientMetrics, StoreOutcome};
use crate::layer::{StoreCall, StoreLayer, StoreOp, StoreReply};
use crate::{
    ConditionalStore, Cursor, Expect, KeyedWrite, LockKey, LockRecord, ManyOutcome, NewRecord,
    Outcome, Page, StoreError,
};

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
        StoreOp::PutMany => 4,
    }
}

#[async_trait]
impl StoreLayer for StoreMetrics {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let (op, key) = (call.op(), call.key());
        observe(
            &self.metrics,
            op,
            key,
            call.send(next),
            |reply| match reply {
                StoreReply::Outcome(outcome) => written(outcome),
                StoreReply::Many(outcome) => written_many(outcome),
                _ => StoreOutcome::Ok,
            },
        )
        .await
    }
}

/// How a write that reached the store ended.
fn written(outcome: &Outcome) -> StoreOutcome {
    match outcome {
        Outcome::Applied(_) => StoreOutcome::Applied,
        Outcome::Rejected { .. } => StoreOutcome::Rejected,
    }
}

/// How several writes in one request that reached the store ended.
fn written_many(outcome: &ManyOutcome) -> StoreOutcome {
    match outcome {
        ManyOutcome::Applied(_) => StoreOutcome::Applied,
        ManyOutcome::Rejected { .. } => StoreOutcome::Rejected,
    }
}

/// Run one store call (`reply`), counted and timed by `op` and outcome
/// (`outcome` of its reply, or the error's kind), in a `store_call` span.
async fn observe<T>(
    metrics: &ClientMetrics,
    op: StoreOp,
    key: Option<&LockKey>,
    reply: impl Future<Output = Result<T, StoreError>>,
    outcome: impl FnOnce(&T) -> StoreOutcome,
) -> Result<T, StoreError> {
    let span = tracing::debug_span!(
        "store_call",
        op = ?op,
        key = key.map(tracing::field::display),
        outcome = tracing::field::Empty,
        latency_ms = tracing::field::Empty,
    );
    let started = tokio::time::Instant::now();
    let reply = reply.instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let outcome = match &reply {
        Ok(value) => outcome(value),
        Err(error) => StoreOutcome::Error(error.kind()),
    };
    span.record("outcome", outcome.as_str());
    span.record("latency_ms", elapsed.as_secs_f64() * 1000.0);
    metrics.store_call(op_index(op), key, outcome, elapsed);
    reply
}

/// The client's store, every call observed as [`StoreMetrics`] observes
/// them, without the layer's boxed future per call (the client's own calls
/// are its hot path).
#[derive(Debug)]
pub(crate) struct ObservedStore {
    inner: Arc<dyn ConditionalStore>,
    metrics: Arc<ClientMetrics>,
}

impl ObservedStore {
    pub(crate) fn new(inner: Arc<dyn ConditionalStore>, metrics: Arc<ClientMetrics>) -> Self {
        Self { inner, metrics }
    }

    pub(crate) async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let reply = self.inner.get(key);
        observe(&self.metrics, StoreOp::Get, Some(key), reply, |_| {
            StoreOutcome::Ok
        })
        .await
    }

    pub(crate) async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let reply = self.inner.put(key, expect, new);
        observe(&self.metrics, StoreOp::Put, Some(key), reply, written).await
    }

    pub(crate) async fn delete(
        &self,
        key: &LockKey,
        expect: Expect,
    ) -> Result<Outcome, StoreError> {
        let reply = self.inner.delete(key, expect);
        observe(&self.metrics, StoreOp::Delete, Some(key), reply, written).await
    }

    pub(crate) async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let reply = self.inner.list(partition, cursor, limit);
        observe(&self.metrics, StoreOp::List, None, reply, |_| {
            StoreOutcome::Ok
        })
        .await
    }

    pub(crate) async fn put_many(
        &self,
        writes: Vec<KeyedWrite>,
    ) -> Result<ManyOutcome, StoreError> {
        let first = writes.first().map(|write| write.key.clone());
        let reply = self.inner.put_many(writes);
        observe(
            &self.metrics,
            StoreOp::PutMany,
            first.as_ref(),
            reply,
            written_many,
        )
        .await
    }
}
