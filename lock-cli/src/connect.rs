//! Connecting to the lock table: DynamoDB (AWS settings from `aws-config`,
//! overridden by the global options), PostgreSQL (`--store postgres://...`),
//! etcd (`--store etcd://host:port/prefix`), Redis (`--store
//! redis://host:port?prefix=locks`) or a bucket (`--store
//! s3://bucket/prefix`, `gs://...`, `az://...`),
//! and a lock client with the chosen owner and lease.

use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use lock_core::{ConditionalStore, LockClient};
use lock_dynamodb::{DynamoDbStore, Layout, StoreConfigError};
use lock_etcd::{EtcdStore, EtcdStoreBuilder};
use lock_object_store::BucketStore;
use lock_postgres::PostgresStore;
use lock_redis::{RedisStore, RedisStoreBuilder};

use crate::args::{Global, LayoutName};
use crate::exit::CliError;

impl LayoutName {
    /// The `lock-dynamodb` layout.
    pub fn layout(self) -> Layout {
        match self {
            LayoutName::Native => Layout::native(),
            LayoutName::PythonDynamodbLock => Layout::python_dynamodb_lock(),
            LayoutName::Java => Layout::java_lock_client(),
        }
    }

    /// The table the layout's own library uses when none is given.
    pub fn default_table(self) -> &'static str {
        match self {
            LayoutName::Native => "locks",
            LayoutName::PythonDynamodbLock => "DynamoDBLockTable",
            LayoutName::Java => "lockTable",
        }
    }

    /// How the option is spelt on the command line: the layout's name.
    pub fn flag(self) -> &'static str {
        self.layout().preset_name()
    }
}

/// The store the options name.
#[derive(Debug)]
pub enum Backend {
    /// A DynamoDB table.
    DynamoDb(DynamoDbStore),
    /// A PostgreSQL table.
    Postgres(PostgresStore),
    /// A prefix in an S3, GCS or Azure bucket.
    Bucket(BucketStore),
    /// A prefix in etcd.
    Etcd(EtcdStore),
    /// A prefix in Redis or Valkey.
    Redis(RedisStore),
}

/// Which kind of store `--store` names.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StoreKind<'a> {
    /// DynamoDB (the default).
    DynamoDb,
    /// PostgreSQL, by this connection string.
    Postgres(&'a str),
    /// An object store, by this URL.
    Bucket(&'a str),
    /// etcd, by this URL.
    Etcd(&'a str),
    /// Redis or Valkey, by this URL.
    Redis(&'a str),
}

/// The URL schemes of Redis and Valkey lockctl takes.
const REDIS_SCHEMES: [&str; 4] = ["redis://", "rediss://", "valkey://", "valkeys://"];

/// The URL schemes of object stores lockctl takes (`file://` too, so that
/// the store's builder says why a directory cannot hold locks).
const BUCKET_SCHEMES: [&str; 7] = [
    "s3://", "s3a://", "gs://", "az://", "azure://", "abfs://", "file://",
];

impl Global {
    /// The kind of store `--store` names.
    pub fn store_kind(&self) -> Result<StoreKind<'_>, CliError> {
        match self.store.as_deref() {
            None | Some("dynamodb") => Ok(StoreKind::DynamoDb),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(StoreKind::Postgres(url))
            }
            Some(url) if BUCKET_SCHEMES.iter().any(|scheme| url.starts_with(scheme)) => {
                Ok(StoreKind::Bucket(url))
            }
            Some(url) if url.starts_with("etcd://") || url.starts_with("etcds://") => {
                Ok(StoreKind::Etcd(url))
            }
            Some(url) if REDIS_SCHEMES.iter().any(|scheme| url.starts_with(scheme)) => {
                Ok(StoreKind::Redis(url))
            }
            Some(_) => Err(CliError::Usage(
                "--store must be `dynamodb`, a PostgreSQL connection string (postgres://user:password@host:port/database), an etcd URL (etcd://host:port[,host:port...]/prefix), a Redis URL (redis://host:port[/db][?prefix=locks]) or a bucket URL (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix)"
                    .into(),
            )),
        }
    }

    /// The store's name, for messages.
    pub fn store_name(&self) -> &'static str {
        match self.store_kind() {
            Ok(StoreKind::Postgres(_)) => "PostgreSQL",
            Ok(StoreKind::Bucket(_)) => "object store",
            Ok(StoreKind::Etcd(_)) => "etcd",
            Ok(StoreKind::Redis(_)) => "Redis",
            _ => "DynamoDB",
        }
    }

    /// The table name in use.
    pub fn table_name(&self) -> &str {
        self.table
            .as_deref()
            .unwrap_or_else(|| self.layout.default_table())
    }

    /// The store the options name. Sends nothing but what connecting needs
    /// (an etcd login with a user in the URL; Redis's connection and its
    /// checks).
    pub async fn backend(&self) -> Result<Backend, CliError> {
        let kind = self.store_kind()?;
        if kind == StoreKind::DynamoDb {
            return Ok(Backend::DynamoDb(self.dynamodb_store().await?));
        }
        // Options that mean something only elsewhere are refused rather than
        // ignored: a user who passes them expects them to matter.
        let refused = match kind {
            StoreKind::Postgres(_) => [
                (self.region.is_some(), "--region"),
                (self.endpoint_url.is_some(), "--endpoint-url"),
                (self.layout != crate::args::LayoutName::Native, "--layout"),
            ]
            .into_iter()
            .find(|(given, _)| *given)
            .map(|(_, option)| {
                format!("{option} applies to DynamoDB only; leave it out with --store postgres://...")
            }),
            StoreKind::Redis(_) => [
                (self.region.is_some(), "--region"),
                (self.endpoint_url.is_some(), "--endpoint-url"),
                (self.layout != crate::args::LayoutName::Native, "--layout"),
                (self.table.is_some(), "--table"),
            ]
            .into_iter()
            .find(|(given, _)| *given)
            .map(|(_, option)| {
                format!("{option} does not apply to Redis: the URL's prefix= is where the locks are (redis://host:port?prefix=locks)")
            }),
            StoreKind::Etcd(_) => [
                (self.region.is_some(), "--region"),
                (self.endpoint_url.is_some(), "--endpoint-url"),
                (self.layout != crate::args::LayoutName::Native, "--layout"),
                (self.table.is_some(), "--table"),
            ]
            .into_iter()
            .find(|(given, _)| *given)
            .map(|(_, option)| {
                format!("{option} does not apply to etcd: the URL's path is where the locks are (etcd://host:port/prefix)")
            }),
            _ if self.table.is_some() => Some(
                "--table does not apply to a bucket: the URL's path is where the locks are (s3://bucket/prefix)"
                    .to_owned(),
            ),
            _ => (self.layout != crate::args::LayoutName::Native).then(|| {
                "--layout applies to DynamoDB only; leave it out with a bucket URL".to_owned()
            }),
        };
        if let Some(message) = refused {
            return Err(CliError::Usage(message));
        }
        match kind {
            StoreKind::Postgres(url) => Ok(Backend::Postgres(
                PostgresStore::builder(self.table_name()).build_from_url(url)?,
            )),
            StoreKind::Bucket(url) => Ok(Backend::Bucket(self.bucket_store(url)?)),
            StoreKind::Etcd(url) => Ok(Backend::Etcd(
                EtcdStoreBuilder::from_url(url)?.connect().await?,
            )),
            StoreKind::Redis(url) => Ok(Backend::Redis(
                RedisStoreBuilder::from_url(url)?.connect().await?,
            )),
            StoreKind::DynamoDb => Ok(Backend::DynamoDb(self.dynamodb_store().await?)),
        }
    }

    /// The object store at `url`: settings from the service's environment
    /// variables, `--region` and `--endpoint-url` (S3 only) on top.
    fn bucket_store(&self, url: &str) -> Result<BucketStore, CliError> {
        let s3 = url.starts_with("s3://") || url.starts_with("s3a://");
        let mut builder = BucketStore::builder();
        for (given, option) in [
            (self.region.as_ref(), "--region"),
            (self.endpoint_url.as_ref(), "--endpoint-url"),
        ] {
            if given.is_some() && !s3 {
                return Err(CliError::Usage(format!(
                    "{option} applies to S3 only; set the service's own environment variables instead"
                )));
            }
        }
        if let Some(region) = &self.region {
            builder = builder.option("aws_region", region);
        }
        if let Some(endpoint) = &self.endpoint_url {
            builder = builder.option("aws_endpoint", endpoint);
            if endpoint.starts_with("http://") {
                builder = builder.option("aws_allow_http", "true");
            }
        }
        Ok(builder.build_from_url(url)?)
    }

    /// The DynamoDB store on the table, with AWS settings from the environment
    /// and the options. Sends nothing.
    async fn dynamodb_store(&self) -> Result<DynamoDbStore, CliError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        let sdk_config = loader.load().await;
        DynamoDbStore::builder(self.table_name())
            .layout(self.layout.layout())
            .build(&sdk_config)
            .map_err(|error| match error {
                // The store refuses it; here there is one more way to set it.
                StoreConfigError::NoRegion => CliError::Usage(
                    "no AWS region configured: pass --region, set AWS_REGION, or set a region in the AWS profile".into(),
                ),
                other => other.into(),
            })
    }

    /// A lock client on the table, writing `lease` (the client's default when
    /// `None`).
    pub async fn client(&self, lease: Option<Duration>) -> Result<LockClient, CliError> {
        let store: Arc<dyn ConditionalStore> = match self.backend().await? {
            Backend::DynamoDb(store) => Arc::new(store),
            Backend::Postgres(store) => Arc::new(store),
            Backend::Bucket(store) => Arc::new(store),
            Backend::Etcd(store) => Arc::new(store),
            Backend::Redis(store) => Arc::new(store),
        };
        // A command-line tool should fail within seconds: store retries back
        // off to at most 1 s (so an acquire whose answers are lost gives up
        // after 4 s, the client's retry window), and the clean-up at exit
        // waits at most 3 s.
        // A clock-difference bound serves stores whose records carry a write
        // time; on one whose records carry none (etcd) it changes nothing,
        // so it is accepted there, as on the stores that prove ages
        // themselves: one setting (LOCKCTL_MAX_CLOCK_DIFFERENCE in a
        // crontab) serves every store.
        let takes_clock_bound = store.capabilities().clock != lock_core::StoreClock::None;
        let mut builder = LockClient::builder_shared(store)
            .retry_backoff(Duration::from_millis(50), Duration::from_secs(1))
            .shutdown_timeout(Duration::from_secs(3));
        if let Some(owner) = &self.owner {
            builder = builder.owner(owner.clone());
        }
        if let Some(bound) = self.max_clock_difference.filter(|_| takes_clock_bound) {
            builder = builder.max_clock_difference(bound);
        }
        builder = builder.use_store_clock(!self.no_store_clock);
        if let Some(delay) = self.lock_delay {
            builder = builder.lock_delay(delay);
        }
        if let Some(lease) = lease {
            builder = builder.lease(lease);
        }
        Ok(builder.build()?)
    }
}
