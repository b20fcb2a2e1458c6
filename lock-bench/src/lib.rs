//! Benchmarks of the lease-lock workspace, and the small helpers they share.
//!
//! Figures come from the programs of this crate, never from timed tests; every
//! comparison is measured side by side in one run and reported as a ratio. See
//! `docs/performance.md` for the method and the results.
//!
//! * `benches/core_overhead.rs` (criterion): an acquire + release cycle through
//!   [`LockClient`](lock_core::LockClient) on the memory store against the raw
//!   store calls that cycle makes.
//! * `src/bin/round_trips.rs`: store calls per lock operation, counted by
//!   [`CountingStore`], on the memory store, on each DynamoDB layout (moto) and
//!   on PostgreSQL; `src/bin/local_handoff.rs`: the local hand-off on the same.
//! * `src/bin/heartbeat_scale.rs`: one client holding thousands of locks on a
//!   memory store with simulated latency: heartbeat CPU, lateness, memory per lock.
//! * `src/bin/side_by_side.rs` with `python/bench.py`, run by
//!   `./scripts/bench-vs-python`: this client and python-dynamodb-lock on one
//!   moto server (`src/bin/delay_proxy.rs` adds round-trip time in front of it).
//! * `src/bin/throttled_heartbeats.rs`: 10,000 locks on a memory store with a
//!   write-capacity limit, in paused time: who is lost, who falls in danger.
//! * `src/bin/fenced_writes.rs`, run by `./scripts/bench-fencing`: a fenced
//!   write against a plain one on DynamoDB, PostgreSQL and S3.
//! * `src/bin/store_cpu.rs`: client CPU per request through the real DynamoDB
//!   store and the bare SDK, against the [`canned`] responder.
#![deny(missing_docs)]

pub mod canned;

/// The fencing guide's code (docs/fencing.md), compiled as doctests: the
/// code on a server compiles only, the in-memory one runs.
#[cfg(doctest)]
#[doc = include_str!("../../docs/fencing.md")]
pub struct FencingGuideDoctests;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::layer::{StoreCall, StoreLayer, StoreReply};
use lock_core::{ConditionalStore, Expect, FenceUpdate, NewRecord, StoreError};

/// The error type of the bench programs.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// What a store call was for, judged from its arguments.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum CallKind {
    /// `get`.
    Get,
    /// `put(Vacant, fence: Next)`: acquire of a vacant (absent or released) key.
    Acquire,
    /// `put(Version, fence: Next)`: takeover of an expired lock.
    Takeover,
    /// `put(Version, fence: Keep, released: false)`: heartbeat or data update.
    Heartbeat,
    /// `put(Version, fence: Keep, released: true)`: release that keeps the record.
    Release,
    /// Any other `put`.
    OtherPut,
    /// `delete`.
    Delete,
    /// `list`.
    List,
    /// `put_many`: several keys in one request.
    PutMany,
}

impl CallKind {
    /// Every kind, in display order.
    pub const ALL: [CallKind; 9] = [
        CallKind::Get,
        CallKind::Acquire,
        CallKind::Takeover,
        CallKind::Heartbeat,
        CallKind::Release,
        CallKind::OtherPut,
        CallKind::Delete,
        CallKind::List,
        CallKind::PutMany,
    ];

    /// Classify a `put`.
    pub fn of_put(expect: &Expect, new: &NewRecord) -> Self {
        match (expect, new.fence, new.released) {
            (Expect::Vacant, FenceUpdate::Next, false) => CallKind::Acquire,
            (Expect::Version(_), FenceUpdate::Next, false) => CallKind::Takeover,
            (Expect::Version(_), FenceUpdate::Keep, false) => CallKind::Heartbeat,
            (Expect::Version(_), FenceUpdate::Keep, true) => CallKind::Release,
            _ => CallKind::OtherPut,
        }
    }

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::Get => "get",
            CallKind::Acquire => "put acquire",
            CallKind::Takeover => "put takeover",
            CallKind::Heartbeat => "put heartbeat",
            CallKind::Release => "put release",
            CallKind::OtherPut => "put other",
            CallKind::Delete => "delete",
            CallKind::List => "list",
            CallKind::PutMany => "put many",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counts of store calls, by kind, and of rejected writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Counts {
    /// Calls by [`CallKind`] (indexed in [`CallKind::ALL`] order).
    pub by_kind: [u64; 9],
    /// Writes answered with `Rejected`.
    pub rejected: u64,
    /// Calls that returned an error.
    pub errors: u64,
}

impl Counts {
    /// Calls of this kind.
    pub fn of(&self, kind: CallKind) -> u64 {
        self.by_kind[kind.index()]
    }

    /// Every call.
    pub fn total(&self) -> u64 {
        self.by_kind.iter().sum()
    }

    /// Reads (`get`, `list`).
    pub fn reads(&self) -> u64 {
        self.of(CallKind::Get) + self.of(CallKind::List)
    }

    /// Writes (`put`, `delete`).
    pub fn writes(&self) -> u64 {
        self.total() - self.reads()
    }

    /// The calls made between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut by_kind = [0; 9];
        for (i, slot) in by_kind.iter_mut().enumerate() {
            *slot = self.by_kind[i] - earlier.by_kind[i];
        }
        Counts {
            by_kind,
            rejected: self.rejected - earlier.rejected,
            errors: self.errors - earlier.errors,
        }
    }
}

impl fmt::Display for Counts {
    /// For example `2 calls: 1 get, 1 put acquire (1 rejected)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} calls", self.total())?;
        let mut first = true;
        for kind in CallKind::ALL {
            let n = self.of(kind);
            if n > 0 {
                f.write_str(if first { ": " } else { ", " })?;
                write!(f, "{n} {}", kind.name())?;
                first = false;
            }
        }
        if self.rejected > 0 {
            write!(f, " ({} rejected)", self.rejected)?;
        }
        if self.errors > 0 {
            write!(f, " ({} errors)", self.errors)?;
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Counters {
    by_kind: [AtomicU64; 9],
    rejected: AtomicU64,
    errors: AtomicU64,
}

/// A [`ConditionalStore`] wrapper that counts the calls made through it, by
/// [`CallKind`]: one counted call is one round trip to the wrapped store.
///
/// Clones share the counters, so keep one to read them while a client uses
/// another.
#[derive(Clone, Debug)]
pub struct CountingStore<S> {
    inner: S,
    counters: Arc<Counters>,
}

impl<S> CountingStore<S> {
    /// Count the calls made to `inner`.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            counters: Arc::default(),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let mut by_kind = [0; 9];
        for (slot, counter) in by_kind.iter_mut().zip(&self.counters.by_kind) {
            *slot = counter.load(Ordering::Relaxed);
        }
        Counts {
            by_kind,
            rejected: self.counters.rejected.load(Ordering::Relaxed),
            errors: self.counters.errors.load(Ordering::Relaxed),
        }
    }
}

#[async_trait]
impl StoreLayer for Counters {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let kind = match &call {
            StoreCall::Put { expect, new, .. } => CallKind::of_put(expect, new),
            StoreCall::Get { .. } => CallKind::Get,
            StoreCall::Delete { .. } => CallKind::Delete,
            StoreCall::PutMany { .. } => CallKind::PutMany,
            // A listing (the call enum is open to new methods).
            _ => CallKind::List,
        };
        let result = call.send(next).await;
        self.by_kind[kind.index()].fetch_add(1, Ordering::Relaxed);
        match &result {
            Err(_) => self.errors.fetch_add(1, Ordering::Relaxed),
            Ok(reply) if reply.is_rejected() => self.rejected.fetch_add(1, Ordering::Relaxed),
            Ok(_) => 0,
        };
        result
    }
}

lock_core::store_via_layer!(impl[S: ConditionalStore] for CountingStore<S>,
    |this| (&*this.counters, &this.inner as &dyn ConditionalStore));

/// CPU time this process's live threads have spent on a CPU, in nanoseconds, from
/// `/proc/self/task/*/schedstat` (Linux; nanosecond resolution, unlike the clock
/// ticks of `/proc/self/stat`). Threads that have exited are not counted: use it
/// where every thread lives as long as the measurement (the bench programs run on
/// one thread).
pub fn threads_cpu() -> Result<Duration, BenchError> {
    let mut total: u64 = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path().join("schedstat");
        // A thread may exit between listing and reading.
        let Ok(stat) = std::fs::read_to_string(path) else {
            continue;
        };
        let on_cpu: u64 = stat
            .split_whitespace()
            .next()
            .ok_or("malformed schedstat")?
            .parse()?;
        total += on_cpu;
    }
    Ok(Duration::from_nanos(total))
}

/// Resident set size of this process in bytes, from `/proc/self/statm` (Linux).
pub fn resident_bytes() -> Result<u64, BenchError> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or("malformed /proc/self/statm")?
        .parse()?;
    Ok(pages * 4096)
}

/// The machine a figure was measured on: CPU model, logical CPUs, kernel.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cpus} × {cpu}")
}

/// A fixed-resolution histogram of durations (allocated and touched up front, so
/// recording never allocates): `buckets` buckets of `resolution` each, the last
/// one collecting everything longer.
#[derive(Debug)]
pub struct Histogram {
    resolution: Duration,
    buckets: Vec<AtomicU64>,
    negative: AtomicU64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new(resolution: Duration, buckets: usize) -> Self {
        Self {
            resolution,
            buckets: (0..buckets.max(1)).map(|_| AtomicU64::new(0)).collect(),
            negative: AtomicU64::new(0),
        }
    }

    /// Record one sample.
    pub fn record(&self, value: Duration) {
        let index = (value.as_nanos() / self.resolution.as_nanos().max(1)) as usize;
        let index = index.min(self.buckets.len() - 1);
        self.buckets[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Record a sample that came early (counted, and recorded as zero).
    pub fn record_early(&self) {
        self.negative.fetch_add(1, Ordering::Relaxed);
        self.record(Duration::ZERO);
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Samples that came early (recorded as zero).
    pub fn early(&self) -> u64 {
        self.negative.load(Ordering::Relaxed)
    }

    /// The `q` quantile (0..=1), as the upper edge of its bucket.
    pub fn quantile(&self, q: f64) -> Duration {
        let total = self.count();
        if total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            seen += bucket.load(Ordering::Relaxed);
            if seen >= rank {
                return self.resolution * (i as u32 + 1);
            }
        }
        self.resolution * self.buckets.len() as u32
    }

    /// The largest sample, as the upper edge of its bucket.
    pub fn max(&self) -> Duration {
        self.buckets
            .iter()
            .rposition(|b| b.load(Ordering::Relaxed) > 0)
            .map_or(Duration::ZERO, |i| self.resolution * (i as u32 + 1))
    }
}

/// Median and spread of a few repeated measurements.
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// The `q` quantile (0 to 1, nearest rank) of `values`; NaN when empty.
pub fn quantile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((values.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    values[rank.min(values.len() - 1)]
}

/// The DynamoDB endpoint the bench programs use (`LOCK_DYNAMODB_ENDPOINT`, set by
/// `./scripts/bench-vs-python`), if any.
pub fn dynamodb_endpoint() -> Option<String> {
    std::env::var("LOCK_DYNAMODB_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
}

/// The PostgreSQL server to measure, from `LOCK_POSTGRES_URL` (set by
/// `scripts/lib/postgres.sh`, which `./scripts/bench-vs-python` uses).
pub fn postgres_url() -> Option<String> {
    std::env::var("LOCK_POSTGRES_URL")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A `PostgresStore` on a new table (created here) at `url`.
pub async fn fresh_postgres_store(
    url: &str,
    table: &str,
) -> Result<lock_postgres::PostgresStore, BenchError> {
    let store = lock_postgres::PostgresStore::builder(table).build_from_url(url)?;
    store.create_schema().await?;
    Ok(store)
}

/// A table name no other run uses.
pub fn unique_table(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// An SDK interceptor that counts the HTTP requests a
/// [`DynamoDbStore`](lock_dynamodb::DynamoDbStore) sends, by DynamoDB operation
/// name: the round trips on the wire. Clones share the record.
#[derive(Clone, Debug, Default)]
pub struct HttpCalls {
    calls: Arc<std::sync::Mutex<Vec<String>>>,
}

impl HttpCalls {
    /// Requests sent so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True before the first request.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests sent after the first `from`, summarised as for example
    /// `1 UpdateItem, 2 GetItem` (in order of first appearance).
    pub fn summary_since(&self, from: usize) -> String {
        let calls = self.lock();
        let mut names: Vec<(&str, usize)> = Vec::new();
        for name in calls.iter().skip(from) {
            match names.iter_mut().find(|(n, _)| *n == name.as_str()) {
                Some((_, count)) => *count += 1,
                None => names.push((name.as_str(), 1)),
            }
        }
        if names.is_empty() {
            return "none".into();
        }
        names
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl aws_sdk_dynamodb::config::Intercept for HttpCalls {
    fn name(&self) -> &'static str {
        "HttpCalls"
    }

    fn read_before_transmit(
        &self,
        _context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let name = cfg
            .load::<aws_smithy_runtime_api::client::orchestrator::Metadata>()
            .map_or_else(|| "?".to_owned(), |m| m.name().to_owned());
        self.lock().push(name);
        Ok(())
    }
}

/// A [`DynamoDbStore`](lock_dynamodb::DynamoDbStore) on a fresh table of
/// `layout` at `endpoint` (credentials and region from the environment), its
/// HTTP requests counted by `calls`.
pub async fn fresh_dynamodb_store(
    endpoint: &str,
    table: &str,
    layout: lock_dynamodb::Layout,
    calls: Option<HttpCalls>,
) -> Result<lock_dynamodb::DynamoDbStore, BenchError> {
    let mut builder = lock_dynamodb::DynamoDbStore::builder(table)
        .layout(layout)
        .endpoint_url(endpoint);
    if let Some(calls) = calls {
        builder = builder.interceptor(calls);
    }
    let store = builder.build_from_env().await?;
    store
        .create_table(lock_dynamodb::TableOptions::default())
        .await?;
    Ok(store)
}

/// The S3 endpoint to measure the object-store backend on, from
/// `LOCK_S3_ENDPOINT` (moto serves S3 beside DynamoDB: `./scripts/bench-vs-python`
/// sets both).
pub fn s3_endpoint() -> Option<String> {
    std::env::var("LOCK_S3_ENDPOINT")
        .ok()
        .filter(|url| !url.is_empty())
}

/// An `ObjectStore` that records each request it passes on (`GET`, `PUT`,
/// `LIST`) in an [`HttpCalls`]: the object-store backend's round trips.
#[derive(Debug)]
pub struct ObjectRequests {
    inner: Arc<dyn lock_object_store::object_store::ObjectStore>,
    calls: HttpCalls,
}

impl fmt::Display for ObjectRequests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

mod object_requests {
    use futures_util::stream::BoxStream;
    use lock_object_store::object_store::path::Path;
    use lock_object_store::object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    };

    use super::ObjectRequests;

    #[async_trait::async_trait]
    impl ObjectStore for ObjectRequests {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> Result<PutResult> {
            self.calls.lock().push("PUT".into());
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
            self.calls.lock().push("GET".into());
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.calls.lock().push("LIST".into());
            self.inner.list(prefix)
        }
        fn list_with_offset(
            &self,
            prefix: Option<&Path>,
            offset: &Path,
        ) -> BoxStream<'static, Result<ObjectMeta>> {
            self.calls.lock().push("LIST".into());
            self.inner.list_with_offset(prefix, offset)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }
}

/// A [`BucketStore`](lock_object_store::BucketStore) under a fresh prefix
/// of the bucket `lock-bench` on moto's S3 at `endpoint` (the bucket made if
/// absent), its requests counted by `calls`.
pub fn fresh_bucket_store(
    endpoint: &str,
    calls: Option<HttpCalls>,
) -> Result<lock_object_store::BucketStore, BenchError> {
    const BUCKET: &str = "lock-bench";
    lock_testkit::moto_bucket(endpoint, BUCKET)?;
    let url = format!("s3://{BUCKET}/{}", unique_table("run"));
    let builder = lock_object_store::BucketStore::builder()
        .option("aws_endpoint", endpoint)
        .option("aws_allow_http", "true");
    let store = builder.clone().build_from_url(&url)?;
    let Some(calls) = calls else {
        return Ok(store);
    };
    // The same S3 client, wrapped: every request is recorded.
    let counted = ObjectRequests {
        inner: store.object_store().clone(),
        calls,
    };
    Ok(builder.build_with_store(Arc::new(counted), store.prefix().as_ref())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_bucket_upper_edges() {
        let h = Histogram::new(Duration::from_millis(1), 100);
        for ms in 0..100 {
            h.record(Duration::from_micros(ms * 1000 + 500));
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), Duration::from_millis(50));
        assert_eq!(h.quantile(0.99), Duration::from_millis(99));
        assert_eq!(h.max(), Duration::from_millis(100));
        h.record(Duration::from_secs(10));
        assert_eq!(
            h.max(),
            Duration::from_millis(100),
            "clamped to the last bucket"
        );
    }

    #[test]
    fn proc_readings_work_here() {
        if cfg!(target_os = "linux") {
            assert!(threads_cpu().is_ok_and(|cpu| cpu > Duration::ZERO));
            assert!(resident_bytes().is_ok_and(|rss| rss > 0));
        }
    }

    #[test]
    fn counts_display() {
        let mut counts = Counts::default();
        counts.by_kind[CallKind::Acquire.index()] = 1;
        counts.rejected = 1;
        assert_eq!(counts.to_string(), "1 calls: 1 put acquire (1 rejected)");
    }
}
