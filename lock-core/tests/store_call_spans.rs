//! Every store call is a `store_call` span with its key, operation, outcome
//! and latency. In a test binary of its own: tracing caches each callsite's
//! interest for the whole process, and a test on another thread that reaches
//! the store-call span first, with no subscriber, can leave it cached as
//! "never" while this test's scoped subscriber starts (it failed about once
//! in 40 runs beside the metrics tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::time::Duration;

use lock_core::AcquireOptions;
use lock_memory::MemoryStore;
use support::client;

/// Run `test` to its end on a current-thread runtime with paused time, on
/// this thread (so the thread-local subscriber sees it).
fn paused(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test);
}

/// The `store_call` spans a subscriber saw: each one's fields as text.
#[derive(Clone, Default)]
struct StoreCallSpans(
    std::sync::Arc<std::sync::Mutex<Vec<std::collections::BTreeMap<String, String>>>>,
);

struct Fields<'a>(&'a mut std::collections::BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for StoreCallSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() != "store_call" {
            return;
        }
        let mut fields = std::collections::BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span
                .extensions_mut()
                .get_mut::<std::collections::BTreeMap<String, String>>()
        {
            values.record(&mut Fields(fields));
        }
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span
                .extensions()
                .get::<std::collections::BTreeMap<String, String>>()
        {
            self.0.lock().unwrap().push(fields.clone());
        }
    }
}

#[test]
fn every_store_call_is_a_span_with_its_key_operation_outcome_and_latency() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = StoreCallSpans::default();
    let subscriber = tracing_subscriber::registry()
        .with(spans.clone())
        .with(tracing_subscriber::filter::LevelFilter::DEBUG);
    tracing::subscriber::with_default(subscriber, || {
        paused(async {
            let store = support::Delayed::new(MemoryStore::new());
            store.delay_writes(Duration::from_millis(30));
            let a = client(store.clone(), "a");
            let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
            let b = client(store.clone(), "b");
            assert!(
                b.try_acquire("job", AcquireOptions::new())
                    .await
                    .unwrap()
                    .is_none()
            );
            guard.release().await.unwrap();
            a.shutdown().await.unwrap();
            b.shutdown().await.unwrap();
        });
    });
    let spans = spans.0.lock().unwrap().clone();
    let outcomes: Vec<(&str, &str, &str)> = spans
        .iter()
        .map(|f| (f["op"].as_str(), f["key"].as_str(), f["outcome"].as_str()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("Put", "job", "applied"),
            ("Put", "job", "rejected"),
            ("Put", "job", "applied")
        ],
        "{spans:?}"
    );
    for fields in &spans {
        let latency: f64 = fields["latency_ms"].parse().unwrap();
        assert!((latency - 30.0).abs() < 1.0, "{fields:?}");
    }
}
