//! Shared set-up of the object-store tests: an `ObjectStore` wrapper that
//! counts requests and scripts failures, stores on the in-memory object store
//! and on moto's S3 (started by `./scripts/test`), and fresh-store factories
//! for the conformance suite.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use lock_core::{LockClient, StoreError};
use lock_object_store::BucketStore;
use lock_object_store::object_store::memory::InMemory;
use lock_object_store::object_store::path::Path;
use lock_object_store::object_store::{
    self, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use lock_testkit::{Cleanup, FreshStore, StoreFactory};

pub mod proxied;
pub mod stale_put;

/// What the wrapper does to the next PUT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PutFault {
    /// Apply it, then report a lost reply (a timeout).
    LoseReply,
    /// Apply it, then send it again, as an HTTP client retrying after a lost
    /// reply does: the second, refused, is what the caller sees.
    SendTwice,
    /// Refuse it as S3's 409 `ConditionalRequestConflict` does, applying
    /// nothing.
    Conflict,
    /// Apply it, then fail as a retry of it would, with a 403: what a store
    /// that retries can report for a write that applied.
    AppliedThenDenied,
    /// Refuse it with a 404, applying nothing: what a service answers to
    /// `If-Match` on an object deleted meanwhile.
    NotFound,
}

/// Requests seen by a [`Counting`] store.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Requests {
    pub gets: usize,
    pub puts: usize,
    pub lists: usize,
}

/// An `ObjectStore` that counts requests and fails PUTs on command.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn ObjectStore>,
    gets: AtomicUsize,
    puts: AtomicUsize,
    lists: AtomicUsize,
    faults: std::sync::Mutex<Vec<PutFault>>,
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

impl Counting {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            gets: AtomicUsize::new(0),
            puts: AtomicUsize::new(0),
            lists: AtomicUsize::new(0),
            faults: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The requests so far.
    pub fn requests(&self) -> Requests {
        Requests {
            gets: self.gets.load(Ordering::SeqCst),
            puts: self.puts.load(Ordering::SeqCst),
            lists: self.lists.load(Ordering::SeqCst),
        }
    }

    /// The requests `f` makes.
    pub async fn during<T>(&self, f: impl std::future::Future<Output = T>) -> (T, Requests) {
        let before = self.requests();
        let out = f.await;
        let after = self.requests();
        (
            out,
            Requests {
                gets: after.gets - before.gets,
                puts: after.puts - before.puts,
                lists: after.lists - before.lists,
            },
        )
    }

    /// Fail the next PUT this way.
    pub fn fail_next_put(&self, fault: PutFault) {
        self.faults.lock().unwrap().push(fault);
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        let fault = self.faults.lock().unwrap().pop();
        match fault {
            None => self.inner.put_opts(location, payload, opts).await,
            Some(PutFault::LoseReply) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(object_store::Error::Generic {
                    store: "Counting",
                    source: "the reply was lost (a timeout)".into(),
                })
            }
            Some(PutFault::SendTwice) => {
                self.inner
                    .put_opts(location, payload.clone(), opts.clone())
                    .await?;
                self.puts.fetch_add(1, Ordering::SeqCst);
                self.inner.put_opts(location, payload, opts).await
            }
            Some(PutFault::AppliedThenDenied) => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(object_store::Error::PermissionDenied {
                    path: location.to_string(),
                    source: "403 on the retry".into(),
                })
            }
            Some(PutFault::NotFound) => Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "404 on If-Match".into(),
            }),
            Some(PutFault::Conflict) => Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "409 ConditionalRequestConflict".into(),
            }),
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// A store on a fresh in-memory object store, counted.
pub fn memory_store() -> (BucketStore, Arc<Counting>) {
    let counting = Counting::new(Arc::new(InMemory::new()));
    let store = BucketStore::builder()
        .build_with_store(counting.clone(), "locks")
        .expect("valid store configuration");
    (store, counting)
}

/// A second store on `store`'s objects (its own remembered versions): another
/// process.
pub fn another_process(store: &BucketStore) -> BucketStore {
    BucketStore::builder()
        .build_with_store(store.object_store().clone(), store.prefix().as_ref())
        .expect("valid store configuration")
}

/// moto's address, from `LOCK_S3_ENDPOINT` (set by `./scripts/test`). Without
/// it the test fails and says how to run it, unless `LOCK_S3_SKIP=1` asks to
/// skip, which is printed.
pub fn s3_endpoint() -> Option<String> {
    lock_testkit::server_from_env("LOCK_S3_ENDPOINT", "LOCK_S3_SKIP", "S3 (moto)")
}

/// The bucket every S3 test uses (each under a prefix of its own).
pub const BUCKET: &str = "lock-tests";

/// A prefix no other test uses.
pub fn fresh_prefix() -> String {
    format!("t-{}", uuid::Uuid::new_v4().simple())
}

/// A store on moto's S3 under `prefix`, reaching it at `endpoint`, with
/// `timeout` per request.
pub fn s3_store_at(endpoint: &str, prefix: &str, timeout: Duration) -> BucketStore {
    BucketStore::builder()
        .option("aws_endpoint", endpoint)
        .option("aws_allow_http", "true")
        .option("aws_region", "us-east-1")
        .option("aws_access_key_id", "testing")
        .option("aws_secret_access_key", "testing")
        .request_timeout(timeout)
        .connect_timeout(Duration::from_millis(500))
        .build_from_url(&format!("s3://{BUCKET}/{prefix}"))
        .expect("valid store configuration")
}

/// A store on moto's S3 under a fresh prefix.
pub async fn fresh_s3_store() -> Option<BucketStore> {
    let endpoint = s3_endpoint()?;
    lock_testkit::moto_bucket(&endpoint, BUCKET).expect("the test bucket");
    Some(s3_store_at(
        &endpoint,
        &fresh_prefix(),
        Duration::from_secs(5),
    ))
}

/// Azurite's blob endpoint (`http://127.0.0.1:PORT`), from
/// `LOCK_AZURITE_ENDPOINT` (set by `./scripts/test`, which starts Azurite and
/// makes the container [`CONTAINER`]). Without it the test fails and says how
/// to run it, unless `LOCK_AZURITE_SKIP=1` asks to skip, which is printed.
pub fn azurite_endpoint() -> Option<String> {
    lock_testkit::server_from_env(
        "LOCK_AZURITE_ENDPOINT",
        "LOCK_AZURITE_SKIP",
        "Azure Blob (Azurite)",
    )
}

/// The container `./scripts/test` makes on Azurite.
pub const CONTAINER: &str = "lock-tests";

/// Azurite's well-known development account and key (public, in Azure's
/// documentation of the emulator).
const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A store on Azurite under `prefix`, reaching it at `endpoint`, with
/// `timeout` per request.
pub fn azure_store_at(endpoint: &str, prefix: &str, timeout: Duration) -> BucketStore {
    BucketStore::builder()
        .option("azure_storage_account_name", AZURITE_ACCOUNT)
        .option("azure_storage_account_key", AZURITE_KEY)
        .option(
            "azure_storage_endpoint",
            format!("{}/{AZURITE_ACCOUNT}", endpoint.trim_end_matches('/')),
        )
        .option("azure_allow_http", "true")
        .request_timeout(timeout)
        .connect_timeout(Duration::from_millis(500))
        .build_from_url(&format!("az://{CONTAINER}/{prefix}"))
        .expect("valid store configuration")
}

/// A store on Azurite under a fresh prefix.
pub fn fresh_azure_store() -> Option<BucketStore> {
    let endpoint = azurite_endpoint()?;
    Some(azure_store_at(
        &endpoint,
        &fresh_prefix(),
        Duration::from_secs(5),
    ))
}

/// Fresh prefixes on Azurite for the conformance suite.
pub struct AzureFactory;

#[async_trait]
impl StoreFactory for AzureFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        Ok(fresh_azure_store().map(FreshStore::new))
    }
}

/// Fresh in-memory stores for the conformance suite.
pub struct MemoryFactory;

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        Ok(Some(FreshStore::new(memory_store().0)))
    }
}

/// Fresh prefixes on moto's S3 for the conformance suite.
pub struct S3Factory;

#[async_trait]
impl StoreFactory for S3Factory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        let Some(store) = fresh_s3_store().await else {
            return Ok(None);
        };
        Ok(Some(FreshStore {
            store: Arc::new(store),
            cleanup: Cleanup::none(),
        }))
    }
}

/// A client on `store` owned by `owner`, with a short lease.
pub fn client(store: BucketStore, owner: &str, lease: Duration) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(lease)
        .build()
        .expect("valid client configuration")
}
