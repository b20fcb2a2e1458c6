//! The stores a `LockClient` can run on: `MemoryStore`, `DynamoDBStore`,
//! `PostgresStore`, `BucketStore` and `EtcdStore`, with their set-up calls
//! (table, schema, bucket check).

use std::sync::Arc;

use aws_config::{BehaviorVersion, Region};
use lock_core::ConditionalStore;
use lock_dynamodb::{
    DynamoDbStore, Layout, ReleaseMode, ReleasedEncoding, TableError, TableOptions,
};
use lock_memory::FaultyStore;
use lock_postgres::PostgresStore as RustPostgresStore;
use pyo3::BoundObject;
use pyo3::prelude::*;

use crate::convert;
use crate::credentials::SessionCredentials;
use crate::errors;
use crate::runtime::{ProcessRuntime, runtime};

/// What a `LockClient` takes from any store.
pub(crate) struct StoreParts {
    pub(crate) store: Arc<dyn ConditionalStore>,
    pub(crate) runtime: Arc<ProcessRuntime>,
}

/// The store inside `store`, which must be one of this package's stores.
pub(crate) fn parts(py: Python<'_>, store: &Bound<'_, PyAny>) -> PyResult<StoreParts> {
    let built = if let Ok(memory) = store.cast::<MemoryStore>() {
        // Nothing of it lives on a runtime: any process's will do.
        return Ok(StoreParts {
            store: memory.get().store.clone(),
            runtime: runtime()?,
        });
    } else if let Ok(dynamodb) = store.cast::<DynamoDBStore>() {
        dynamodb.get().built.parts()
    } else if let Ok(postgres) = store.cast::<PostgresStore>() {
        postgres.get().built.parts()
    } else if let Ok(bucket) = store.cast::<BucketStore>() {
        bucket.get().built.parts()
    } else if let Ok(etcd) = store.cast::<EtcdStore>() {
        etcd.get().built.parts()
    } else if let Ok(redis) = store.cast::<RedisStore>() {
        redis.get().built.parts()
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "store must be a lease_lock.MemoryStore, DynamoDBStore, PostgresStore, BucketStore, EtcdStore or RedisStore, not {}",
            store.get_type().name()?
        )));
    };
    // A store made before fork() holds connections of the parent's runtime.
    built.runtime.pid().check(py)?;
    Ok(built)
}

/// A store with connections, built on the package's runtime: the Rust store
/// (for its set-up calls), the same store as the client takes it, and that
/// runtime, where its connection pool or SDK client lives.
struct Built<S> {
    store: S,
    shared: Arc<dyn ConditionalStore>,
    runtime: Arc<ProcessRuntime>,
}

impl<S: ConditionalStore + Clone + 'static> Built<S> {
    /// Build a store inside `runtime` (building spawns the store's tasks).
    fn on<E: std::error::Error + 'static>(
        py: Python<'_>,
        runtime: Arc<ProcessRuntime>,
        build: impl FnOnce() -> Result<S, E>,
    ) -> PyResult<Self> {
        let store = {
            let _entered = runtime.handle().enter();
            build().map_err(|error| errors::setup_error(py, &error))?
        };
        Ok(Self {
            shared: Arc::new(store.clone()),
            store,
            runtime,
        })
    }

    fn parts(&self) -> StoreParts {
        StoreParts {
            store: self.shared.clone(),
            runtime: self.runtime.clone(),
        }
    }

    /// Run a set-up call of the store, blocking or as an awaitable.
    fn setup<T, F>(
        &self,
        py: Python<'_>,
        is_async: bool,
        call: impl FnOnce(S) -> F,
    ) -> PyResult<Py<PyAny>>
    where
        T: for<'py> IntoPyObject<'py> + Send + 'static,
        F: std::future::Future<Output = Result<T, SetupFailure>> + Send + 'static,
    {
        run(py, &self.runtime, is_async, call(self.store.clone()))
    }
}

/// Run a set-up call blocking or as an awaitable.
fn run<T, F>(
    py: Python<'_>,
    runtime: &ProcessRuntime,
    is_async: bool,
    future: F,
) -> PyResult<Py<PyAny>>
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
    F: std::future::Future<Output = Result<T, SetupFailure>> + Send + 'static,
{
    let convert = |py: Python<'_>, output: Result<T, SetupFailure>| -> PyResult<Py<PyAny>> {
        match output {
            Ok(value) => Ok(value
                .into_pyobject(py)
                .map_err(Into::into)?
                .into_any()
                .unbind()),
            Err(SetupFailure(error)) => Err(errors::setup_error(py, &*error)),
        }
    };
    runtime.run(py, is_async, future, convert)
}

/// A set-up error of any store, carried to the thread that raises it.
struct SetupFailure(Box<dyn std::error::Error + Send + Sync + 'static>);

impl<E: std::error::Error + Send + Sync + 'static> From<E> for SetupFailure {
    fn from(error: E) -> Self {
        SetupFailure(Box::new(error))
    }
}

/// Locks in this process's memory: for tests of code that uses locks, and
/// for locks between the threads and tasks of one process. Clients made on
/// one `MemoryStore` exclude each other as clients on one table do.
///
/// For tests of what your code does in an outage, `set_unavailable(True)`
/// makes every call fail as an unreachable store would (heartbeats fail, the
/// lease falls into danger, then expires), until `set_unavailable(False)`.
///
/// `clock=True` makes it keep time as PostgreSQL does: every read carries the
/// record's age, so a crashed holder's lock is taken over by whoever looks
/// once its lease has passed, instead of after watching it for a lease.
#[pyclass(module = "lease_lock._native", name = "MemoryStore", frozen)]
#[derive(Debug)]
pub(crate) struct MemoryStore {
    store: Arc<FaultyStore<lock_memory::MemoryStore>>,
}

#[pymethods]
impl MemoryStore {
    #[new]
    #[pyo3(signature = (clock=false))]
    fn new(clock: bool) -> Self {
        let builder = lock_memory::MemoryStore::builder();
        let builder = if clock {
            builder.store_clock(1.0)
        } else {
            builder
        };
        // No faults unless asked: the seed only matters for random faults,
        // which this store never injects.
        Self {
            store: Arc::new(FaultyStore::new(builder.build(), 0)),
        }
    }

    /// Make every call fail as an unreachable store's would (`True`), or
    /// answer again (`False`).
    fn set_unavailable(&self, unavailable: bool) {
        self.store.set_unavailable(unavailable);
    }

    /// The number of lock records stored (held or released).
    fn __len__(&self) -> usize {
        self.store.inner().records().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "MemoryStore(records={})",
            self.store.inner().records().len()
        )
    }
}

/// Locks in a DynamoDB table.
///
/// `layout` is `"native"` (this library's), `"python-dynamodb-lock"` (that
/// library's table: its locks and these exclude each other) or `"java"`
/// (AmazonDynamoDBLockClient's); `partition_key` and `sort_key` rename the
/// key attributes, and `no_sort_key=True` uses a table without a sort key.
/// `expiry_attribute` renames the time-to-live attribute and `expiry` (seconds
/// or `timedelta`) sets how far ahead it is written when the layout writes one
/// on every write (python-dynamodb-lock's: an hour). With
/// `data_as_attributes=True` a lock's data is kept as top-level attributes of
/// the item, the way python-dynamodb-lock keeps `additional_attributes`: a
/// JSON object of DynamoDB attribute values such as `{"job": {"S": "nightly"}}`.
/// `released_attribute` names a `BOOL` attribute that marks a released
/// record, which is then kept rather than deleted, so that fences keep rising
/// across releases (python-dynamodb-lock itself would take such a record
/// for a held lock).
/// AWS settings come from the environment, shared config files and
/// profiles as for boto3, overridden by `region`, `profile` and
/// `endpoint_url`; with `session` (a `boto3.Session`), its credentials and
/// region are used, asked for again as they near their expiry.
#[pyclass(module = "lease_lock._native", name = "DynamoDBStore", frozen)]
pub(crate) struct DynamoDBStore {
    built: Built<DynamoDbStore>,
}

impl std::fmt::Debug for DynamoDBStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDBStore")
            .field("table", &self.built.store.table())
            .finish()
    }
}

/// What a `DynamoDBStore` says about its table's attributes.
struct LayoutChoice<'a> {
    name: &'a str,
    partition_key: Option<String>,
    sort_key: Option<String>,
    no_sort_key: bool,
    expiry_attribute: Option<String>,
    expiry: Option<std::time::Duration>,
    data_as_attributes: bool,
    released_attribute: Option<String>,
}

fn layout(py: Python<'_>, choice: LayoutChoice<'_>) -> PyResult<Layout> {
    let LayoutChoice {
        name,
        partition_key,
        sort_key,
        no_sort_key,
        expiry_attribute,
        expiry,
        data_as_attributes,
        released_attribute,
    } = choice;
    // One vocabulary with Rust and lockctl (lockctl's old `default` and
    // `python` accepted too).
    let mut layout =
        Layout::named(name).map_err(|error| errors::invalid_input(py, error.to_string()))?;
    if let Some(name) = partition_key {
        layout = layout.with_partition_key(name);
    }
    match (sort_key, no_sort_key) {
        (Some(_), true) => {
            return Err(errors::invalid_input(
                py,
                "sort_key names the sort key attribute and no_sort_key=True says there is none: pass one of them",
            ));
        }
        (Some(name), false) => layout = layout.with_sort_key(name),
        (None, true) => layout = layout.without_sort_key(),
        (None, false) => {}
    }
    if let Some(name) = expiry_attribute {
        layout = layout.with_expires_at(name);
    }
    if let Some(expiry) = expiry {
        layout = layout.with_default_expiry(Some(expiry));
    }
    if data_as_attributes {
        layout = layout.with_data_as_attributes();
    }
    if let Some(name) = released_attribute {
        layout = layout
            .with_released(name, ReleasedEncoding::Bool)
            .with_release_mode(ReleaseMode::MarkReleased);
    }
    Ok(layout)
}

#[pymethods]
impl DynamoDBStore {
    #[new]
    #[pyo3(signature = (table, *, layout="native", partition_key=None, sort_key=None, no_sort_key=false, expiry_attribute=None, expiry=None, data_as_attributes=false, released_attribute=None, region=None, endpoint_url=None, profile=None, session=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        table: String,
        layout: &str,
        partition_key: Option<String>,
        sort_key: Option<String>,
        no_sort_key: bool,
        expiry_attribute: Option<String>,
        expiry: Option<&Bound<'_, PyAny>>,
        data_as_attributes: bool,
        released_attribute: Option<String>,
        region: Option<String>,
        endpoint_url: Option<String>,
        profile: Option<String>,
        session: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let layout = self::layout(
            py,
            LayoutChoice {
                name: layout,
                partition_key,
                sort_key,
                no_sort_key,
                expiry_attribute,
                expiry: convert::optional_seconds(py, "expiry", expiry)?,
                data_as_attributes,
                released_attribute,
            },
        )?;
        let region = match (region, &session) {
            (Some(region), _) => Some(region),
            (None, Some(session)) => session.bind(py).getattr("region_name")?.extract()?,
            (None, None) => None,
        };
        let runtime = runtime()?;
        let sdk_config = runtime.block_on(py, async move {
            let mut loader = aws_config::defaults(BehaviorVersion::latest());
            if let Some(region) = region {
                loader = loader.region(Region::new(region));
            }
            if let Some(profile) = profile {
                loader = loader.profile_name(profile);
            }
            if let Some(url) = endpoint_url {
                loader = loader.endpoint_url(url);
            }
            if let Some(session) = session {
                loader = loader.credentials_provider(SessionCredentials::new(session));
            }
            loader.load().await
        })?;
        let built = Built::on(py, runtime, || {
            DynamoDbStore::builder(table)
                .layout(layout)
                .build(&sdk_config)
        })?;
        Ok(Self { built })
    }

    /// The table's name.
    #[getter]
    fn table(&self) -> &str {
        self.built.store.table()
    }

    /// Create the table for this layout (on-demand billing, time to live on
    /// the expiry attribute) and wait until it is active (at most `wait`,
    /// seconds or `timedelta`; default 5 minutes). With `exist_ok=True` an
    /// existing table is validated instead.
    #[pyo3(signature = (*, wait=None, ttl=true, exist_ok=false, is_async=false))]
    fn create_table(
        &self,
        py: Python<'_>,
        wait: Option<&Bound<'_, PyAny>>,
        ttl: bool,
        exist_ok: bool,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let mut options = TableOptions::default().enable_ttl(ttl);
        if let Some(wait) = convert::optional_seconds(py, "wait", wait)? {
            options = options.wait(wait);
        }
        self.built.setup(py, is_async, |store| async move {
            match store.create_table(options).await {
                Ok(_) => Ok(()),
                Err(TableError::AlreadyExists { .. }) if exist_ok => {
                    store.validate_table().await.map(|_| ()).map_err(Into::into)
                }
                Err(error) => Err(error.into()),
            }
        })
    }

    /// Check that the table exists, is active and has this layout's keys;
    /// returns warnings (such as time to live not enabled).
    #[pyo3(signature = (*, is_async=false))]
    fn validate_table(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.built.setup(py, is_async, |store| async move {
            Ok::<_, SetupFailure>(store.validate_table().await?.warnings)
        })
    }

    /// Delete the table and wait until it is gone (at most `wait`, seconds or
    /// `timedelta`; default 5 minutes).
    #[pyo3(signature = (*, wait=None, is_async=false))]
    fn delete_table(
        &self,
        py: Python<'_>,
        wait: Option<&Bound<'_, PyAny>>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let wait = convert::optional_seconds(py, "wait", wait)?
            .unwrap_or(std::time::Duration::from_secs(300));
        self.built.setup(py, is_async, |store| async move {
            Ok::<_, SetupFailure>(store.delete_table(wait).await?)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "DynamoDBStore(table={:?}, layout={:?})",
            self.built.store.table(),
            self.built.store.layout().preset_name()
        )
    }
}

/// Locks in a PostgreSQL table, from a connection URL
/// (`postgres://user:password@host:port/database`). `table` may be
/// schema-qualified (`schema.table`).
#[pyclass(module = "lease_lock._native", name = "PostgresStore", frozen)]
pub(crate) struct PostgresStore {
    built: Built<RustPostgresStore>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.built.store.table())
            .finish()
    }
}

#[pymethods]
impl PostgresStore {
    #[new]
    #[pyo3(signature = (url, *, table="locks", max_connections=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        table: &str,
        max_connections: Option<usize>,
    ) -> PyResult<Self> {
        let mut builder = RustPostgresStore::builder(table);
        if let Some(connections) = max_connections {
            builder = builder.max_connections(connections);
        }
        let built = Built::on(py, runtime()?, || builder.build_from_url(url))?;
        Ok(Self { built })
    }

    /// The table's name.
    #[getter]
    fn table(&self) -> &str {
        self.built.store.table()
    }

    /// Create the table if it does not exist, then validate it.
    #[pyo3(signature = (*, is_async=false))]
    fn create_schema(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.built.setup(py, is_async, |store| async move {
            Ok::<_, SetupFailure>(store.create_schema().await?)
        })
    }

    /// Check the table's columns, key and the role's rights on it.
    #[pyo3(signature = (*, is_async=false))]
    fn validate_schema(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.built.setup(py, is_async, |store| async move {
            Ok::<_, SetupFailure>(store.validate_schema().await?)
        })
    }

    /// The SQL function that admits a fence for a resource, quoted and
    /// qualified as the table is (`"locks_admit_fence"`).
    #[getter]
    fn fence_function(&self, py: Python<'_>) -> PyResult<String> {
        self.built
            .store
            .fence_guard()
            .map(|guard| guard.function().to_owned())
            .map_err(|error| errors::setup_error(py, &error))
    }

    /// Create the fence table and function beside the lock table, if they do
    /// not exist; returns the function's name.
    #[pyo3(signature = (*, is_async=false))]
    fn create_fence_guard(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.built.setup(py, is_async, |store| async move {
            let guard = store.create_fence_guard().await?;
            Ok::<_, SetupFailure>(guard.function().to_owned())
        })
    }

    fn __repr__(&self) -> String {
        format!("PostgresStore(table={:?})", self.built.store.table())
    }
}

/// Locks in an S3, Google Cloud Storage or Azure Blob bucket, one object per
/// lock under the URL's prefix (`s3://bucket/prefix`, `gs://bucket/prefix`,
/// `az://container/prefix`), changed only by conditional PUTs. Settings come
/// from the service's environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`),
/// then from `options` (object_store's configuration keys, such as
/// `aws_endpoint` or `aws_region`), which win.
#[pyclass(module = "lease_lock._native", name = "BucketStore", frozen)]
pub(crate) struct BucketStore {
    built: Built<lock_object_store::BucketStore>,
}

impl std::fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketStore")
            .field("url", &self.built.store.url())
            .finish()
    }
}

/// The pairs of a `Mapping[str, str]` argument (any mapping, not only a
/// `dict`), or a `TypeError` naming the argument.
fn string_mapping(
    py: Python<'_>,
    name: &str,
    mapping: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let Some(mapping) = mapping.filter(|mapping| !mapping.is_none()) else {
        return Ok(Vec::new());
    };
    let is_mapping = py
        .import("collections.abc")?
        .getattr("Mapping")
        .and_then(|abc| mapping.is_instance(&abc))?;
    let wrong = || {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be a mapping of str to str, not {}",
            mapping
                .get_type()
                .name()
                .map(|name| name.to_string())
                .unwrap_or_default()
        ))
    };
    if !is_mapping {
        return Err(wrong());
    }
    let mut pairs = Vec::new();
    for item in mapping.call_method0("items")?.try_iter()? {
        let (key, value): (String, String) = item?.extract().map_err(|_| wrong())?;
        pairs.push((key, value));
    }
    Ok(pairs)
}

#[pymethods]
impl BucketStore {
    #[new]
    #[pyo3(signature = (url, *, options=None, request_timeout=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        options: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut builder = lock_object_store::BucketStore::builder();
        for (key, value) in string_mapping(py, "options", options)? {
            builder = builder.option(key, value);
        }
        if let Some(timeout) = request_timeout {
            builder = builder.request_timeout(convert::seconds(py, "request_timeout", timeout)?);
        }
        let built = Built::on(py, runtime()?, || builder.build_from_url(url))?;
        Ok(Self { built })
    }

    /// Where the locks are: the URL, without a trailing slash.
    #[getter]
    fn url(&self) -> &str {
        self.built.store.url()
    }

    /// Check that the bucket can hold locks: it exists, the credentials may
    /// read, write and list under the prefix, and its PUTs are conditional
    /// (one probe object, removed afterwards).
    #[pyo3(signature = (*, is_async=false))]
    fn validate_bucket(&self, py: Python<'_>, is_async: bool) -> PyResult<Py<PyAny>> {
        self.built.setup(py, is_async, |store| async move {
            Ok::<_, SetupFailure>(store.validate_bucket().await?)
        })
    }

    /// Write `data` to the object `path` (from the bucket's root, outside
    /// the lock prefix) with `lock`'s fence (a held `Lock`, a `Leadership`,
    /// or a `fencing.FenceToken`): refused with `StaleFence` if a
    /// newer holder of the lock wrote it, `OtherLockFence` if another lock's
    /// fence did.
    #[pyo3(signature = (path, data, lock, *, is_async=false))]
    fn fenced_put(
        &self,
        py: Python<'_>,
        path: String,
        data: Vec<u8>,
        lock: &Bound<'_, PyAny>,
        is_async: bool,
    ) -> PyResult<Py<PyAny>> {
        let (key, fence) = crate::fencing::key_and_fence(lock)?;
        let objects = self.built.store.fenced_objects();
        let future = async move { objects.put(&path, data, &key, fence).await.map(|_| ()) };
        self.built.runtime.run(py, is_async, future, |py, written| {
            written
                .map(|()| py.None())
                .map_err(|error| fence_error(py, &error))
        })
    }

    /// The object `path` and the fence that wrote it (`None` if no fenced
    /// write did), or `None` if there is no such object.
    #[pyo3(signature = (path, *, is_async=false))]
    fn fenced_get(&self, py: Python<'_>, path: String, is_async: bool) -> PyResult<Py<PyAny>> {
        let objects = self.built.store.fenced_objects();
        let future = async move { objects.get(&path).await };
        self.built.runtime.run(py, is_async, future, |py, read| {
            let read = read.map_err(|error| fence_error(py, &error))?;
            let object = read.map(|(bytes, fence)| {
                (
                    pyo3::types::PyBytes::new(py, &bytes),
                    fence.map(|fence| fence.get()),
                )
            });
            Ok(object.into_pyobject(py)?.into_any().unbind())
        })
    }

    fn __repr__(&self) -> String {
        format!("BucketStore({:?})", self.built.store.url())
    }
}

/// Locks in etcd v3, one key per lock under the URL's prefix
/// (`etcd://[user:password@]host:port[,host:port...]/prefix`, `etcds://` for
/// TLS, `?cacert=&cert=&key=` naming PEM files as etcdctl's flags do), each
/// change one transaction comparing the key's revision. With a user, the
/// store logs in when it is made, so a wrong password raises here.
#[pyclass(module = "lease_lock._native", name = "EtcdStore", frozen)]
pub(crate) struct EtcdStore {
    built: Built<lock_etcd::EtcdStore>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.built.store.url())
            .finish()
    }
}

#[pymethods]
impl EtcdStore {
    #[new]
    #[pyo3(signature = (url, *, user=None, password=None, request_timeout=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        user: Option<String>,
        password: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut builder = lock_etcd::EtcdStoreBuilder::from_url(url)
            .map_err(|error| errors::setup_error(py, &error))?;
        match (user, password) {
            (Some(user), Some(password)) => builder = builder.user(user, password),
            (None, None) => {}
            _ => {
                return Err(errors::invalid_input(
                    py,
                    "user and password go together: give both, or put them in the URL",
                ));
            }
        }
        if let Some(timeout) = request_timeout {
            let timeout = convert::seconds(py, "request_timeout", timeout)?;
            builder = builder.timeouts(lock_etcd::Timeouts::default().with_request(timeout));
        }
        let runtime = runtime()?;
        let store = runtime
            .block_on(py, builder.connect())?
            .map_err(|error| errors::setup_error(py, &error))?;
        Ok(Self {
            built: Built {
                shared: Arc::new(store.clone()),
                store,
                runtime,
            },
        })
    }

    /// Where the locks are: the URL, its password hidden.
    #[getter]
    fn url(&self) -> &str {
        self.built.store.url()
    }

    /// The prefix every lock key is under.
    #[getter]
    fn prefix(&self) -> &str {
        self.built.store.prefix()
    }

    fn __repr__(&self) -> String {
        format!("EtcdStore({:?})", self.built.store.url())
    }
}

/// Locks in Redis or Valkey, one hash per lock under `prefix`, each change
/// one Lua script. The URL is `redis://[user:password@]host:port[/db]`
/// (`rediss://` for TLS; `?prefix=`, `?cacert=`, `?cert=&key=` in its query
/// as lockctl takes them). Making the store connects and checks the server:
/// scripts allowed, no eviction of keys without expiry; a Redis Cluster
/// node's URL makes a store on the cluster.
#[pyclass(module = "lease_lock._native", name = "RedisStore", frozen)]
pub(crate) struct RedisStore {
    built: Built<lock_redis::RedisStore>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.built.store.url())
            .field("prefix", &self.built.store.prefix())
            .finish()
    }
}

#[pymethods]
impl RedisStore {
    #[new]
    #[pyo3(signature = (url, *, prefix=None, request_timeout=None, wait_for_replicas=None))]
    fn new(
        py: Python<'_>,
        url: &str,
        prefix: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        wait_for_replicas: Option<(u32, Bound<'_, PyAny>)>,
    ) -> PyResult<Self> {
        let mut builder = lock_redis::RedisStoreBuilder::from_url(url)
            .map_err(|error| errors::setup_error(py, &error))?;
        if let Some(prefix) = prefix {
            builder = builder.prefix(prefix);
        }
        if let Some(timeout) = request_timeout {
            let timeout = convert::seconds(py, "request_timeout", timeout)?;
            builder = builder.timeouts(lock_redis::Timeouts::default().with_request(timeout));
        }
        if let Some((replicas, timeout)) = wait_for_replicas {
            let timeout = convert::seconds(py, "wait_for_replicas", &timeout)?;
            builder = builder.wait_for_replicas(replicas, timeout);
        }
        let runtime = runtime()?;
        let store = runtime
            .block_on(py, builder.connect())?
            .map_err(|error| errors::setup_error(py, &error))?;
        Ok(Self {
            built: Built {
                shared: Arc::new(store.clone()),
                store,
                runtime,
            },
        })
    }

    /// The server's URL, its password hidden.
    #[getter]
    fn url(&self) -> &str {
        self.built.store.url()
    }

    /// The prefix every lock key is under.
    #[getter]
    fn prefix(&self) -> &str {
        self.built.store.prefix()
    }

    fn __repr__(&self) -> String {
        format!(
            "RedisStore({:?}, prefix={:?})",
            self.built.store.url(),
            self.built.store.prefix()
        )
    }
}

/// The exception for a fenced object's write or read that failed.
fn fence_error(py: Python<'_>, error: &lock_object_store::ObjectFenceError) -> PyErr {
    match error {
        lock_object_store::ObjectFenceError::Refused(refused) => errors::fence_refused(py, refused),
        // Contention and the service's own failures (network, 5xx) may pass;
        // a missing bucket, refused credentials or a bad path will not.
        lock_object_store::ObjectFenceError::Store { source, .. } => {
            let retryable = matches!(
                source,
                lock_object_store::object_store::Error::Generic { .. }
            );
            errors::fenced_store_error(py, error, retryable)
        }
        other => errors::fenced_store_error(py, other, true),
    }
}
