//! Store layers: what `StoreOp`, `StoreReply` and the default `StoreLayer`
//! tell a layer's author, and what a layer that answers with the wrong kind of
//! reply turns into.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreOp, StoreReply};
use lock_core::{
    ConditionalStore, DataUpdate, Expect, FenceUpdate, LockKey, NewRecord, Outcome, Page, Rvn,
    StoreError, StoreErrorKind,
};
use lock_memory::MemoryStore;

fn record(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(10),
        released: false,
        fence: FenceUpdate::Next,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

#[test]
fn reads_and_writes_are_told_apart() {
    for (op, write) in [
        (StoreOp::Get, false),
        (StoreOp::List, false),
        (StoreOp::Put, true),
        (StoreOp::Delete, true),
    ] {
        assert_eq!(op.is_write(), write, "{op:?}");
        assert_eq!(op.is_read(), !write, "{op:?}");
    }
}

/// Records every reply it passes on, as the layer's helpers see it.
#[derive(Clone, Debug, Default)]
struct Notes {
    seen: Arc<Mutex<Vec<(StoreOp, bool, bool)>>>,
}

#[async_trait::async_trait]
impl StoreLayer for Notes {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let op = call.op();
        let mut reply = call.send(next).await?;
        let rejected = reply.is_rejected();
        let has_outcome = reply.outcome_mut().is_some();
        self.seen.lock().unwrap().push((op, rejected, has_outcome));
        Ok(reply)
    }
}

#[tokio::test]
async fn a_reply_says_whether_it_is_a_rejected_write_and_lends_its_outcome() {
    let notes = Notes::default();
    let store = Layered::new(notes.clone(), MemoryStore::new());
    let key = LockKey::new("job");
    store.put(&key, Expect::Vacant, record("a")).await.unwrap();
    store.put(&key, Expect::Vacant, record("b")).await.unwrap();
    store.get(&key).await.unwrap();
    store.list(None, None, 10).await.unwrap();
    assert_eq!(
        *notes.seen.lock().unwrap(),
        [
            (StoreOp::Put, false, true),
            (StoreOp::Put, true, true),
            (StoreOp::Get, false, false),
            (StoreOp::List, false, false),
        ]
    );
}

/// Changes the outcome of every write in place: an applied write is reported
/// as rejected (as a layer that simulates a lost reply might).
#[derive(Debug)]
struct RejectEverything;

#[async_trait::async_trait]
impl StoreLayer for RejectEverything {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let mut reply = call.send(next).await?;
        if let Some(outcome) = reply.outcome_mut() {
            *outcome = Outcome::Rejected { current: None };
        }
        Ok(reply)
    }
}

#[tokio::test]
async fn an_outcome_changed_in_place_is_what_the_caller_gets() {
    let inner = MemoryStore::new();
    let store = Layered::new(RejectEverything, inner.clone());
    let key = LockKey::new("job");
    let outcome = store.put(&key, Expect::Vacant, record("a")).await.unwrap();
    assert_eq!(outcome, Outcome::Rejected { current: None });
    assert!(inner.record(&key).is_some(), "the write itself applied");
}

/// Answers every call with the reply of another method.
#[derive(Debug)]
struct WrongReply;

#[async_trait::async_trait]
impl StoreLayer for WrongReply {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let reply = call.send(next).await?;
        Ok(match reply {
            StoreReply::Record(_) => StoreReply::Page(Page {
                records: Vec::new(),
                next: None,
            }),
            StoreReply::Outcome(_) => StoreReply::Record(None),
            StoreReply::Page(_) | StoreReply::Many(_) => {
                StoreReply::Outcome(Outcome::Rejected { current: None })
            }
        })
    }
}

#[tokio::test]
async fn a_reply_of_the_wrong_kind_is_an_error_naming_it_and_ambiguous_for_a_write() {
    let store = Layered::new(WrongReply, MemoryStore::new());
    let key = LockKey::new("job");

    let error = store.get(&key).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Other);
    assert!(
        error
            .to_string()
            .contains("a store layer answered Get with a page"),
        "{error}"
    );

    let error = store.list(None, None, 10).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Other);
    assert!(
        error
            .to_string()
            .contains("a store layer answered List with an outcome"),
        "{error}"
    );

    for error in [
        store
            .put(&key, Expect::Vacant, record("a"))
            .await
            .unwrap_err(),
        store.delete(&key, Expect::Vacant).await.unwrap_err(),
    ] {
        assert!(error.is_ambiguous(), "the store below may have applied it");
        assert!(error.to_string().contains("with a record"), "{error}");
    }
}

#[derive(Debug)]
struct PassThrough;
impl StoreLayer for PassThrough {}

#[test]
fn a_layer_that_says_nothing_of_capabilities_passes_the_inner_stores_through() {
    let inner = MemoryStore::builder()
        .sort_keys(false)
        .returns_current_on_conflict(false)
        .max_record_bytes(1234)
        .build();
    let store = Layered::new(PassThrough, inner.clone());
    assert_eq!(store.capabilities(), inner.capabilities());
    assert_ne!(store.capabilities(), lock_core::Capabilities::default());
}
