//! [`RedisStoreBuilder`]: the server's URL, the lock prefix, TLS files,
//! timeouts and replica acknowledgements; and the checks made when the store
//! connects (scripts allowed, no eviction of keys without expiry, not a
//! cluster node).

use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::percent_decode_str;

use crate::errors::{Call, StoreConfigError, classify, hide_password};
use crate::layout::Layout;
use crate::link::{Connector, Link, Target, cluster_client};
use crate::store::RedisStore;

/// How long the store waits.
///
/// Keep `request` well below the shortest lease you use: the client can only
/// trust a heartbeat that returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Opening a connection (TCP, TLS, login).
    pub connect: Duration,
    /// The client stops waiting for a reply this long after sending; a write
    /// without a reply may have applied (ambiguous).
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(1),
            request: Duration::from_millis(2500),
        }
    }
}

impl Timeouts {
    /// Set the connect timeout.
    pub fn with_connect(mut self, timeout: Duration) -> Self {
        self.connect = timeout;
        self
    }
    /// Set how long the client waits for a reply.
    pub fn with_request(mut self, timeout: Duration) -> Self {
        self.request = timeout;
        self
    }
}

/// The longest `wait_for_replicas` timeout: Redis refuses a `WAIT` far in
/// the future, and one longer than a lease protects nothing.
const MAX_REPLICA_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// Wait after every write until this many replicas acknowledged it
/// (`WAIT`); see [`RedisStoreBuilder::wait_for_replicas`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReplicaAcks {
    /// Replicas that must acknowledge.
    pub replicas: u32,
    /// How long to wait for them; then the write counts as ambiguous.
    pub timeout: Duration,
}

/// Builds a [`RedisStore`]; start with [`RedisStore::builder`] or
/// [`RedisStoreBuilder::from_url`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    prefix: String,
    ca_certificate: Option<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
    timeouts: Timeouts,
    replicas: Option<ReplicaAcks>,
    announce_releases: bool,
}

impl std::fmt::Debug for RedisStoreBuilder {
    // The password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &hide_password(&self.url))
            .field("prefix", &self.prefix)
            .field("timeouts", &self.timeouts)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A builder for a store on the Redis (or Valkey) primary at `url`
    /// (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS),
    /// keeping its locks under `prefix` (`locks`, `app:locks`).
    pub fn builder(url: impl Into<String>, prefix: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            prefix: prefix.into(),
            ca_certificate: None,
            client_certificate: None,
            timeouts: Timeouts::default(),
            replicas: None,
            announce_releases: true,
        }
    }
}

impl RedisStoreBuilder {
    /// A builder from a URL that also says where the locks are and how TLS
    /// is checked, as lockctl takes it:
    /// `redis://[user:password@]host:port[/db][?prefix=locks&cacert=/ca.pem&cert=/c.pem&key=/k.pem]`
    /// (`rediss://` for TLS; `valkey://` and `valkeys://` too). The prefix is
    /// `locks` when the query names none.
    pub fn from_url(url: &str) -> Result<Self, StoreConfigError> {
        let invalid = |reason: &str| StoreConfigError::InvalidUrl {
            url: hide_password(url),
            reason: reason.to_owned(),
        };
        let (base, query) = match url.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (url, None),
        };
        let mut prefix = "locks".to_owned();
        let (mut cacert, mut cert, mut key) = (None, None, None);
        let mut kept = Vec::new();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decoded = || {
                percent_decode_str(value)
                    .decode_utf8()
                    .map(|text| text.into_owned())
                    .map_err(|_| invalid("a query value is not UTF-8 once decoded"))
            };
            match name {
                "prefix" => prefix = decoded()?,
                "cacert" => cacert = Some(PathBuf::from(decoded()?)),
                "cert" => cert = Some(PathBuf::from(decoded()?)),
                "key" => key = Some(PathBuf::from(decoded()?)),
                // The client library's own (`protocol=resp3`).
                _ => kept.push(pair),
            }
        }
        let base = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut builder = RedisStore::builder(base, prefix);
        if let Some(path) = cacert {
            builder = builder.ca_certificate(path);
        }
        match (cert, key) {
            (Some(cert), Some(key)) => builder = builder.client_certificate(cert, key),
            (None, None) => {}
            _ => return Err(invalid("cert and key go together: give both files")),
        }
        Ok(builder)
    }

    /// Keep the locks under `prefix` (instead of the one given before, or the
    /// URL's `prefix=`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Check the server's certificate against this PEM file instead of the
    /// system's roots (with `rediss://`).
    pub fn ca_certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_certificate = Some(path.into());
        self
    }

    /// Present this client certificate and key (PEM files; with `rediss://`).
    pub fn client_certificate(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client_certificate = Some((certificate.into(), key.into()));
        self
    }

    /// Timeouts for every request (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// After every write, wait until `replicas` replicas acknowledged it
    /// (`WAIT replicas timeout`), at most `timeout`. A write fewer replicas
    /// acknowledged in time is reported as ambiguous (it applied on the
    /// primary; whether it would survive a failover is unknown), and until
    /// the replicas acknowledge it, a read or a refused write showing it is
    /// `Unavailable`: the lock client, which resolves an ambiguous write by
    /// reading, never holds a lock or extends a lease on a write no `replicas`
    /// replicas acknowledged (an acquire fails; a lease runs out as in an
    /// outage). It does not make replication synchronous, nor choose the
    /// replica a failover promotes: see the crate docs.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some(ReplicaAcks { replicas, timeout });
        self
    }

    /// Whether a release is announced on `{prefix}:released`, for waiters in
    /// other processes (default true).
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }

    /// The store: connects, and checks that the server can hold locks
    /// (nothing is written):
    ///
    /// * it runs the store's scripts (`SCRIPT LOAD`):
    ///   [`StoreConfigError::ScriptsRefused`] otherwise;
    /// * its `maxmemory-policy` never evicts keys without an expiry:
    ///   [`StoreConfigError::Evicts`] otherwise (a server that denies
    ///   `CONFIG GET`, as managed services may, is not asked; in a cluster,
    ///   the node of the URL is asked).
    ///
    /// A Redis Cluster node's URL makes a store on the cluster: each request
    /// goes to its keys' slot's primary, every script's keys share the
    /// partition's hash tag, and several keys of several partitions are
    /// taken one by one (`Capabilities::atomic_writes` is `None`).
    /// [`wait_for_replicas`](Self::wait_for_replicas) and TLS files are
    /// refused there: [`StoreConfigError::WaitInCluster`],
    /// [`StoreConfigError::TlsFilesInCluster`].
    pub async fn connect(self) -> Result<RedisStore, StoreConfigError> {
        let shown = hide_password(&self.url);
        if self.prefix.is_empty() {
            return Err(StoreConfigError::InvalidPrefix {
                prefix: self.prefix,
                reason: "it is empty; name a prefix (locks) so that the locks stay apart from other keys".into(),
            });
        }
        if self.prefix.contains(['{', '}']) {
            return Err(StoreConfigError::InvalidPrefix {
                prefix: self.prefix,
                reason: "it holds { or }, which would change the keys' hash tag; leave them out"
                    .into(),
            });
        }
        for (which, value) in [
            ("connect", self.timeouts.connect),
            ("request", self.timeouts.request),
        ] {
            if value.is_zero() {
                return Err(StoreConfigError::ZeroTimeout { which });
            }
        }
        if let Some(acks) = self.replicas
            && (acks.replicas == 0 || acks.timeout.is_zero() || acks.timeout > MAX_REPLICA_WAIT)
        {
            return Err(StoreConfigError::InvalidReplicaAcks {
                replicas: acks.replicas,
                timeout: acks.timeout,
            });
        }
        // rediss:// through rustls panics unless a crypto provider is
        // chosen; the workspace may link more than one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let invalid = |reason: String| StoreConfigError::InvalidUrl {
            url: shown.clone(),
            reason,
        };
        let client = if self.ca_certificate.is_some() || self.client_certificate.is_some() {
            let read = |what: &str, path: &PathBuf| {
                std::fs::read(path).map_err(|error| {
                    invalid(format!(
                        "cannot read the {what} {}: {error}",
                        path.display()
                    ))
                })
            };
            let root_cert = match &self.ca_certificate {
                Some(path) => Some(read("CA certificate", path)?),
                None => None,
            };
            let client_tls = match &self.client_certificate {
                Some((cert, key)) => Some(redis::ClientTlsConfig {
                    client_cert: read("client certificate", cert)?,
                    client_key: read("client key", key)?,
                }),
                None => None,
            };
            redis::Client::build_with_tls(
                self.url.as_str(),
                redis::TlsCertificates {
                    client_tls,
                    root_cert,
                },
            )
        } else {
            redis::Client::open(self.url.as_str())
        }
        .map_err(|error| invalid(error.to_string()))?;
        let single = Connector {
            target: Target::Single(client.clone()),
            seed: client,
            timeouts: self.timeouts,
        };
        let not_connected = |source| StoreConfigError::Connect {
            url: shown.clone(),
            source,
        };
        let mut connection = single.open().await.map_err(not_connected)?;
        let cluster = check_server(&mut connection, &shown).await?;
        let (connector, connection) = if cluster {
            // A cluster node: the cluster client, found from it, sends each
            // request to its slot's primary.
            if self.replicas.is_some() {
                return Err(StoreConfigError::WaitInCluster { url: shown });
            }
            if self.ca_certificate.is_some() || self.client_certificate.is_some() {
                return Err(StoreConfigError::TlsFilesInCluster { url: shown });
            }
            let client = cluster_client(&self.url, self.timeouts)
                .map_err(|error| invalid(error.to_string()))?;
            let connector = Connector {
                target: Target::Cluster(client),
                ..single
            };
            let connection = connector.open().await.map_err(not_connected)?;
            (connector, connection)
        } else {
            (single, connection)
        };
        let store = RedisStore::from_parts(
            connector,
            connection,
            Layout::new(&self.prefix),
            shown,
            self.replicas,
            self.announce_releases,
        );
        store
            .load_scripts()
            .await
            .map_err(|error| StoreConfigError::ScriptsRefused {
                url: store.url().to_owned(),
                reason: error.to_string(),
            })?;
        Ok(store)
    }
}

/// The server's settings that would break the locks, asked before anything
/// is written; whether it is a Redis Cluster node.
async fn check_server(connection: &mut Link, url: &str) -> Result<bool, StoreConfigError> {
    let connect = |error: redis::RedisError| StoreConfigError::Connect {
        url: url.to_owned(),
        source: classify(Call::Read, "check the server", error),
    };
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(connection)
        .await
        .map_err(connect)?;
    let cluster = info.lines().any(|line| line.trim() == "cluster_enabled:1");
    if cluster {
        // A node of a cluster that is not serving every slot (not joined
        // yet, or lost a primary) would refuse some locks' requests.
        let state: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(connection)
            .await
            .map_err(connect)?;
        if !state.lines().any(|line| line.trim() == "cluster_state:ok") {
            return Err(StoreConfigError::ClusterNotReady {
                url: url.to_owned(),
            });
        }
    }
    // Managed services may deny CONFIG: then the policy is the operator's
    // to check (the docs say so).
    let policy: Result<Vec<String>, _> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(connection)
        .await;
    if let Ok(pair) = policy
        && let Some(policy) = pair.get(1)
        && policy.starts_with("allkeys-")
    {
        return Err(StoreConfigError::Evicts {
            url: url.to_owned(),
            policy: policy.clone(),
        });
    }
    Ok(cluster)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_the_prefix_and_tls_files_and_keeps_the_clients_options() {
        let builder = RedisStoreBuilder::from_url(
            "rediss://app:p%40ss@cache:6380/2?prefix=app%3Alocks&cacert=/ca.pem&cert=/c.pem&key=/k.pem&protocol=resp3",
        )
        .unwrap();
        assert_eq!(builder.prefix, "app:locks");
        assert_eq!(
            builder.url,
            "rediss://app:p%40ss@cache:6380/2?protocol=resp3"
        );
        assert_eq!(builder.ca_certificate, Some(PathBuf::from("/ca.pem")));
        assert!(builder.client_certificate.is_some());
        assert!(!format!("{builder:?}").contains("p%40ss"));
        let plain = RedisStoreBuilder::from_url("redis://127.0.0.1:6379").unwrap();
        assert_eq!(plain.prefix, "locks");
        assert!(RedisStoreBuilder::from_url("redis://h:1/?cert=/c.pem").is_err());
    }

    #[tokio::test]
    async fn bad_settings_are_refused_before_connecting() {
        for (prefix, says) in [("", "empty"), ("a{b}", "hash tag")] {
            let error = RedisStore::builder("redis://127.0.0.1:9", prefix)
                .connect()
                .await
                .unwrap_err();
            assert!(error.to_string().contains(says), "{error}");
        }
        let error = RedisStore::builder("redis://127.0.0.1:9", "x")
            .timeouts(Timeouts::default().with_request(Duration::ZERO))
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(
            error,
            StoreConfigError::ZeroTimeout { which: "request" }
        ));
        let error = RedisStore::builder("http://127.0.0.1:9", "x")
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(error, StoreConfigError::InvalidUrl { .. }),
            "{error}"
        );
        let error = RedisStore::builder("redis://u:secret@127.0.0.1:9", "x")
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(error, StoreConfigError::Connect { .. }), "{error}");
        assert!(
            !format!("{error} {error:?}").contains("secret"),
            "{error:?}"
        );
    }
}
