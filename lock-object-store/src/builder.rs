//! [`BucketStoreBuilder`]: a [`BucketStore`] from a URL (`s3://bucket/prefix`,
//! `gs://…`, `az://…`) with the service's usual environment and options, or
//! from an `ObjectStore` of the user's own.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreScheme};

use crate::errors::StoreConfigError;
use crate::layout::{Layout, MAX_PREFIX_BYTES};
use crate::store::{BucketStore, DEFAULT_REMEMBERED};

/// A service's builder: its environment, then the URL, the client settings
/// every service gets (timeouts, no retries), then the options, which win.
/// (A macro: the three builders share these methods but no trait.)
macro_rules! configured {
    ($self:ident, $builder:ty, $key:ty, $service:literal, $url:expr) => {{
        let mut builder = <$builder>::from_env()
            .with_url($url)
            .with_retry(Self::no_retries());
        for (key, value) in $self.client_settings() {
            builder = builder.with_config(<$key>::Client(key), value);
        }
        for (key, value) in &$self.options {
            let parsed: $key =
                key.to_ascii_lowercase()
                    .parse()
                    .map_err(|_| StoreConfigError::UnknownOption {
                        key: key.clone(),
                        service: $service,
                    })?;
            builder = builder.with_config(parsed, value);
        }
        builder
    }};
}

/// Configures a [`BucketStore`]; made by [`BucketStore::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until built"]
pub struct BucketStoreBuilder {
    options: Vec<(String, String)>,
    request_timeout: Duration,
    connect_timeout: Duration,
    remembered: usize,
}

impl Default for BucketStoreBuilder {
    fn default() -> Self {
        Self {
            options: Vec::new(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            remembered: DEFAULT_REMEMBERED,
        }
    }
}

impl BucketStore {
    /// A builder with the defaults: requests time out after 5 s (2 s to
    /// connect) and are never retried by the HTTP client (the lock client
    /// retries, and resolves a write whose reply was lost by its RVN); the
    /// object versions of the 10,000 most recently used keys are remembered.
    pub fn builder() -> BucketStoreBuilder {
        BucketStoreBuilder::default()
    }
}

impl BucketStoreBuilder {
    /// One of `object_store`'s configuration keys for the URL's service, as
    /// its builders take them (`aws_endpoint`, `aws_region`,
    /// `aws_allow_http`, `google_service_account`,
    /// `azure_storage_account_name`, …). Applied after the environment, so an
    /// option wins over an environment variable.
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.push((key.into(), value.into()));
        self
    }

    /// How long one request may take before the client stops waiting (a
    /// write then is ambiguous). Default 5 s.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long connecting may take. Default 2 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How many keys' object versions are remembered, so a write on a record
    /// this store wrote or read is one request. Default 10,000; at least 1.
    pub fn remembered_versions(mut self, keys: usize) -> Self {
        self.remembered = keys;
        self
    }

    /// A store at `url`: `s3://bucket/prefix` (also `s3a://` and
    /// `https://…amazonaws.com/…`), `gs://bucket/prefix`,
    /// `az://container/prefix` (also `azure://`, `abfs://`,
    /// `https://account.blob.core.windows.net/container/prefix`), or
    /// `memory:///prefix` (one process only, for tests). Credentials, region
    /// and endpoint come from the service's environment variables (`AWS_*`,
    /// `GOOGLE_*`, `AZURE_*`), then from [`option`](Self::option)s.
    ///
    /// Refused, sending nothing: stores that cannot make conditional updates
    /// (`file://`, plain `http://`), S3 with `aws_conditional_put` set to
    /// `disabled`, and services this build leaves out.
    pub fn build_from_url(self, url: &str) -> Result<BucketStore, StoreConfigError> {
        self.check()?;
        let parsed = url::Url::parse(url).map_err(|e| StoreConfigError::InvalidUrl {
            url: url.to_owned(),
            reason: format!(
                "{e}; write it as s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
            ),
        })?;
        let (scheme, prefix) = ObjectStoreScheme::parse(&parsed).map_err(|e| {
            StoreConfigError::InvalidUrl {
                url: url.to_owned(),
                reason: format!("{e}; write it as s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"),
            }
        })?;
        let refuse = |reason: &str| {
            Err(StoreConfigError::NoConditionalWrites {
                url: url.to_owned(),
                reason: reason.to_owned(),
            })
        };
        let objects: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::Memory => Arc::new(object_store::memory::InMemory::new()),
            #[cfg(feature = "aws")]
            ObjectStoreScheme::AmazonS3 => Arc::new(self.s3(url)?),
            #[cfg(feature = "gcp")]
            ObjectStoreScheme::GoogleCloudStorage => Arc::new(self.gcs(url)?),
            #[cfg(feature = "azure")]
            ObjectStoreScheme::MicrosoftAzure => Arc::new(self.azure(url)?),
            ObjectStoreScheme::Local => {
                return refuse(
                    "a local directory cannot update a file conditionally (object_store's LocalFileSystem has no PutMode::Update); use an S3, GCS or Azure bucket",
                );
            }
            ObjectStoreScheme::Http => {
                return refuse(
                    "plain HTTP (WebDAV) has no conditional PUT in object_store; use an S3, GCS or Azure bucket",
                );
            }
            #[allow(unreachable_patterns)] // when every service is built in
            _ => {
                return refuse(
                    "this build leaves out the service (enable lock-object-store's aws, gcp or azure feature)",
                );
            }
        };
        let location = url.trim_end_matches('/').to_owned();
        // S3's ETag is the body's MD5; the others change on every write.
        let unique_versions = !matches!(scheme, ObjectStoreScheme::AmazonS3);
        self.finish(objects, prefix, location, true, unique_versions)
    }

    /// A store on `objects`, an `ObjectStore` of the caller's own (its own
    /// retries and timeouts apply; the defaults of object_store's builders
    /// retry for up to three minutes, longer than a lease), with the locks
    /// under `prefix`. Since such a store may send a PUT again after an
    /// attempt that applied, every failed write through it is reported
    /// ambiguous (the lock client then reads to learn the outcome); give it
    /// `RetryConfig { max_retries: 0, .. }` and a request timeout well inside
    /// the lease. It must make conditional writes
    /// ([`PutMode::Create`](object_store::PutMode::Create) and
    /// [`PutMode::Update`](object_store::PutMode::Update)) and read its own
    /// writes: check it once with
    /// [`BucketStore::validate_bucket`](crate::BucketStore::validate_bucket).
    pub fn build_with_store(
        self,
        objects: Arc<dyn ObjectStore>,
        prefix: &str,
    ) -> Result<BucketStore, StoreConfigError> {
        self.check()?;
        let path = Path::parse(prefix).map_err(|e| StoreConfigError::InvalidPrefix {
            prefix: prefix.to_owned(),
            reason: e.to_string(),
        })?;
        let location = format!("{objects}/{path}");
        self.finish(objects, path, location, false, false)
    }

    fn check(&self) -> Result<(), StoreConfigError> {
        if self.request_timeout.is_zero() {
            return Err(StoreConfigError::ZeroTimeout { which: "request" });
        }
        if self.connect_timeout.is_zero() {
            return Err(StoreConfigError::ZeroTimeout { which: "connect" });
        }
        Ok(())
    }

    fn finish(
        self,
        objects: Arc<dyn ObjectStore>,
        prefix: Path,
        location: String,
        sends_once: bool,
        unique_versions: bool,
    ) -> Result<BucketStore, StoreConfigError> {
        if prefix.as_ref().len() > MAX_PREFIX_BYTES {
            return Err(StoreConfigError::InvalidPrefix {
                prefix: prefix.to_string(),
                reason: format!(
                    "{} bytes; at most {MAX_PREFIX_BYTES}, so that every lock's path fits S3's 1,024-byte key limit",
                    prefix.as_ref().len()
                ),
            });
        }
        let remembered = NonZeroUsize::new(self.remembered).unwrap_or(NonZeroUsize::MIN);
        Ok(BucketStore::from_parts(
            objects,
            Layout::new(prefix),
            location,
            remembered,
            sends_once,
            unique_versions,
        ))
    }

    /// The client settings every service gets: a request timeout, a connect
    /// timeout, and no retries inside the HTTP client.
    fn client_settings(&self) -> [(object_store::ClientConfigKey, String); 2] {
        use object_store::ClientConfigKey as K;
        [
            (
                K::Timeout,
                format!("{}ms", self.request_timeout.as_millis()),
            ),
            (
                K::ConnectTimeout,
                format!("{}ms", self.connect_timeout.as_millis()),
            ),
        ]
    }

    fn no_retries() -> object_store::RetryConfig {
        object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        }
    }

    #[cfg(feature = "aws")]
    fn s3(&self, url: &str) -> Result<object_store::aws::AmazonS3, StoreConfigError> {
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
        let builder = configured!(self, AmazonS3Builder, AmazonS3ConfigKey, "Amazon S3", url);
        if builder
            .get_config_value(&AmazonS3ConfigKey::S3Express)
            .is_some_and(|value| value.eq_ignore_ascii_case("true"))
        {
            return Err(StoreConfigError::NoConditionalWrites {
                url: url.to_owned(),
                reason: "S3 Express One Zone directory buckets list objects in no order, and paging through locks needs the order; use a general purpose bucket".into(),
            });
        }
        let conditional = builder.get_config_value(&AmazonS3ConfigKey::ConditionalPut);
        if conditional
            .as_deref()
            .is_some_and(|value| value.eq_ignore_ascii_case("disabled"))
        {
            return Err(StoreConfigError::NoConditionalWrites {
                url: url.to_owned(),
                reason: "aws_conditional_put is `disabled`: locks need conditional PUTs (If-None-Match, If-Match); remove the setting (S3 and most S3-compatible services make them)".into(),
            });
        }
        builder
            .build()
            .map_err(|source| StoreConfigError::Builder { source })
    }

    #[cfg(feature = "gcp")]
    fn gcs(&self, url: &str) -> Result<object_store::gcp::GoogleCloudStorage, StoreConfigError> {
        use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
        let builder = configured!(
            self,
            GoogleCloudStorageBuilder,
            GoogleConfigKey,
            "Google Cloud Storage",
            url
        );
        builder
            .build()
            .map_err(|source| StoreConfigError::Builder { source })
    }

    #[cfg(feature = "azure")]
    fn azure(&self, url: &str) -> Result<object_store::azure::MicrosoftAzure, StoreConfigError> {
        use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
        let builder = configured!(
            self,
            MicrosoftAzureBuilder,
            AzureConfigKey,
            "Azure Blob Storage",
            url
        );
        builder
            .build()
            .map_err(|source| StoreConfigError::Builder { source })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        BucketStore::builder()
            .build_from_url(url)
            .expect_err(url)
            .to_string()
    }

    #[test]
    fn stores_without_conditional_updates_are_refused_when_built() {
        assert!(refused("file:///tmp/locks").contains("LocalFileSystem"));
        assert!(refused("http://example.com/locks").contains("HTTP"));
        let disabled = BucketStore::builder()
            .option("aws_region", "us-east-1")
            .option("aws_conditional_put", "disabled")
            .build_from_url("s3://bucket/locks")
            .unwrap_err();
        assert!(
            matches!(disabled, StoreConfigError::NoConditionalWrites { .. }),
            "{disabled}"
        );
        let express = BucketStore::builder()
            .option("aws_region", "us-east-1")
            .option("aws_s3_express", "true")
            .build_from_url("s3://bucket--use1-az4--x-s3/locks")
            .unwrap_err();
        assert!(express.to_string().contains("in no order"), "{express}");
    }

    #[test]
    fn bad_urls_options_and_settings_say_what_to_change() {
        assert!(refused("not a url").contains("s3://bucket/prefix"));
        assert!(refused("ftp://host/x").contains("s3://bucket/prefix"));
        let unknown = BucketStore::builder()
            .option("aws_no_such_thing", "1")
            .build_from_url("s3://bucket/locks")
            .unwrap_err();
        assert!(
            matches!(unknown, StoreConfigError::UnknownOption { .. }),
            "{unknown}"
        );
        for (url, service) in [
            ("gs://bucket/locks", "Google Cloud Storage"),
            ("az://container/locks", "Azure Blob Storage"),
        ] {
            let unknown = BucketStore::builder()
                .option("aws_region", "us-east-1")
                .build_from_url(url)
                .unwrap_err();
            assert!(
                matches!(unknown, StoreConfigError::UnknownOption { service: s, .. } if s == service),
                "{url}: {unknown}"
            );
        }
        let zero = BucketStore::builder()
            .request_timeout(Duration::ZERO)
            .build_from_url("memory:///locks")
            .unwrap_err();
        assert!(matches!(
            zero,
            StoreConfigError::ZeroTimeout { which: "request" }
        ));
        let long = format!("memory:///{}", "p".repeat(MAX_PREFIX_BYTES + 1));
        assert!(refused(&long).contains("1,024-byte"));
    }

    #[test]
    fn the_prefix_comes_from_the_url() {
        let store = BucketStore::builder()
            .option("aws_region", "eu-west-1")
            .build_from_url("s3://bucket/locks/prod/")
            .unwrap();
        assert_eq!(store.prefix().as_ref(), "locks/prod");
        assert_eq!(store.url(), "s3://bucket/locks/prod");
        let root = BucketStore::builder().build_from_url("memory:///").unwrap();
        assert_eq!(root.prefix().as_ref(), "");
    }
}
