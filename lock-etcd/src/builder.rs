//! [`EtcdStoreBuilder`]: endpoints, prefix, login, TLS and timeouts, from
//! code or from a URL (`etcd://user:password@host:2379,host2:2379/locks`).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use percent_encoding::percent_decode_str;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::errors::{StoreConfigError, nonzero};
use crate::layout::Layout;
use crate::store::{Connector, EtcdStore};
use crate::wire::{Connection, Endpoints};

/// How often an HTTP/2 ping checks a connection (etcd's default minimum
/// for clients is 5 s; more often gets the connection closed).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Keys whose revisions are remembered, by default.
const DEFAULT_REMEMBERED: usize = 10_000;

/// How long the store waits.
///
/// Keep `request` well below the shortest lease you use: the client can only
/// trust a heartbeat that returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Opening a connection to a member (TCP and TLS).
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

/// Builds an [`EtcdStore`]; start with [`EtcdStore::builder`] or
/// [`EtcdStoreBuilder::from_url`].
#[derive(Clone)]
pub struct EtcdStoreBuilder {
    endpoints: Vec<String>,
    prefix: String,
    user: Option<(String, String)>,
    tls: bool,
    ca_certificate: Option<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
    timeouts: Timeouts,
    remembered: usize,
    announce_releases: bool,
}

impl std::fmt::Debug for EtcdStoreBuilder {
    // The password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStoreBuilder")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("tls", &self.tls)
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// A builder for a store on the etcd members at `endpoints`
    /// (`host:port`, or `http://` / `https://host:port`) keeping its locks
    /// under `prefix` (`locks`, `app/locks`).
    pub fn builder<E: Into<String>>(
        endpoints: impl IntoIterator<Item = E>,
        prefix: impl Into<String>,
    ) -> EtcdStoreBuilder {
        EtcdStoreBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: prefix.into(),
            user: None,
            tls: false,
            ca_certificate: None,
            client_certificate: None,
            timeouts: Timeouts::default(),
            remembered: DEFAULT_REMEMBERED,
            announce_releases: true,
        }
    }
}

impl EtcdStoreBuilder {
    /// A builder from a URL:
    /// `etcd://[user:password@]host:port[,host:port...]/prefix`, or
    /// `etcds://` for TLS. The query may name PEM files as etcdctl's flags
    /// do: `?cacert=/ca.pem&cert=/client.pem&key=/client-key.pem` (`cacert`
    /// alone, or a client certificate, implies TLS). User and password are
    /// percent-decoded.
    pub fn from_url(url: &str) -> Result<Self, StoreConfigError> {
        let invalid = |reason: &str| StoreConfigError::InvalidUrl {
            url: hide_password(url),
            reason: reason.to_owned(),
        };
        let (tls, rest) = if let Some(rest) = url.strip_prefix("etcd://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("etcds://") {
            (true, rest)
        } else {
            return Err(invalid("the scheme must be etcd:// or etcds://"));
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, prefix) = rest
            .split_once('/')
            .ok_or_else(|| invalid("no prefix: add /prefix after the hosts"))?;
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (Some(user), hosts),
            None => (None, authority),
        };
        let endpoints: Vec<String> = hosts
            .split(',')
            .filter(|host| !host.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(invalid("no host: name at least one host:port"));
        }
        if let Some(bad) = endpoints.iter().find(|host| !has_port(host)) {
            return Err(invalid(&format!("{bad:?} has no port: write host:port")));
        }
        let prefix = percent_decode_str(prefix)
            .decode_utf8()
            .map_err(|_| invalid("the prefix is not UTF-8 once decoded"))?
            .into_owned();
        let mut builder = EtcdStore::builder(endpoints, prefix);
        builder.tls = tls;
        if let Some(user) = user {
            let (name, password) = user
                .split_once(':')
                .ok_or_else(|| invalid("a user needs a password: user:password@"))?;
            let decode = |part: &str| {
                percent_decode_str(part)
                    .decode_utf8()
                    .map(|text| text.into_owned())
                    .map_err(|_| invalid("the user or password is not UTF-8 once decoded"))
            };
            builder.user = Some((decode(name)?, decode(password)?));
        }
        let (mut cert, mut key) = (None, None);
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let path = percent_decode_str(value)
                .decode_utf8()
                .map(|text| PathBuf::from(text.as_ref()))
                .map_err(|_| invalid("a file path is not UTF-8 once decoded"))?;
            match name {
                "cacert" => builder = builder.ca_certificate(path),
                "cert" => cert = Some(path),
                "key" => key = Some(path),
                other => {
                    return Err(invalid(&format!(
                        "unknown option {other:?}: the query takes cacert, cert and key"
                    )));
                }
            }
        }
        match (cert, key) {
            (Some(cert), Some(key)) => builder = builder.client_certificate(cert, key),
            (None, None) => {}
            _ => return Err(invalid("cert and key go together: give both files")),
        }
        Ok(builder)
    }

    /// Log in as this etcd user (with etcd's auth enabled). The token is
    /// renewed when etcd says it expired.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Connect with TLS, checking the members' certificates against the
    /// system's roots unless [`ca_certificate`](Self::ca_certificate) names a
    /// file.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Check the members' certificates against this PEM file (etcdctl's
    /// `--cacert`); implies TLS.
    pub fn ca_certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls = true;
        self.ca_certificate = Some(path.into());
        self
    }

    /// Present this client certificate and key (PEM files; etcdctl's
    /// `--cert` and `--key`); implies TLS.
    pub fn client_certificate(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.tls = true;
        self.client_certificate = Some((certificate.into(), key.into()));
        self
    }

    /// Timeouts for every request (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// How many keys' revisions the store remembers (default 10,000), so
    /// that a write on a record it saw is one transaction.
    pub fn remembered_keys(mut self, keys: usize) -> Self {
        self.remembered = keys;
        self
    }

    /// Whether a release also writes `{prefix}/n/{partition}` in its
    /// transaction, which waiters in other processes watch to try at once
    /// (default true). Turn it off where nothing waits, or where the user
    /// may write only `{prefix}/r/`.
    pub fn announce_releases(mut self, announce: bool) -> Self {
        self.announce_releases = announce;
        self
    }

    /// The store. Certificate files are read now; with a user, etcd is asked
    /// for a token now (so a wrong password fails here). Otherwise nothing is
    /// sent until the first request.
    pub async fn connect(self) -> Result<EtcdStore, StoreConfigError> {
        if self.endpoints.is_empty() {
            return Err(StoreConfigError::NoEndpoints);
        }
        let prefix = self.prefix.trim_end_matches('/');
        if prefix.is_empty() {
            return Err(StoreConfigError::InvalidPrefix {
                prefix: self.prefix.clone(),
                reason: "it is empty; name a prefix (locks) so that the locks stay apart from other keys".into(),
            });
        }
        if prefix.contains('\0') {
            return Err(StoreConfigError::InvalidPrefix {
                prefix: self.prefix.clone(),
                reason: "it holds a NUL character".into(),
            });
        }
        nonzero("connect", self.timeouts.connect)?;
        nonzero("request", self.timeouts.request)?;
        let remembered = NonZeroUsize::new(self.remembered).unwrap_or(NonZeroUsize::MIN);
        let scheme = if self.tls { "https" } else { "http" };
        let endpoints: Vec<String> = self
            .endpoints
            .iter()
            .map(|endpoint| {
                if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
                    endpoint.clone()
                } else {
                    format!("{scheme}://{endpoint}")
                }
            })
            .collect();
        let tls = if self.tls {
            Some(self.tls_config()?)
        } else {
            None
        };
        let watch_endpoints = endpoints
            .iter()
            .map(|url| self.endpoint(url, tls.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        // Requests time out; the watch is a stream that stays open.
        let request_endpoints = watch_endpoints
            .iter()
            .map(|endpoint| endpoint.clone().timeout(self.timeouts.request))
            .collect();
        let connector = Connector {
            endpoints: Endpoints(request_endpoints),
            watch_endpoints: Endpoints(watch_endpoints),
            user: self.user.clone(),
            timeout: self.timeouts.connect.saturating_add(self.timeouts.request),
        };
        let connection: Connection = connector.open().await.map_err(|status| match &self.user {
            Some((name, _)) => StoreConfigError::Login {
                user: name.clone(),
                source: crate::errors::classify(crate::errors::Call::Read, "log in", status),
            },
            None => StoreConfigError::Client {
                reason: crate::errors::describe(&status),
            },
        })?;
        let shown = self.endpoints.join(",");
        let url = match &self.user {
            Some((name, _)) => format!("{}://{name}:***@{shown}/{prefix}", self.scheme()),
            None => format!("{}://{shown}/{prefix}", self.scheme()),
        };
        Ok(EtcdStore::from_parts(
            connection,
            connector,
            Layout::new(prefix),
            url,
            remembered,
            self.announce_releases,
        ))
    }

    fn scheme(&self) -> &'static str {
        if self.tls { "etcds" } else { "etcd" }
    }

    /// The endpoint of the member at `url` (`http://` or `https://`): its
    /// connect timeout, HTTP/2 keep-alive and TLS.
    fn endpoint(
        &self,
        url: &str,
        tls: Option<&ClientTlsConfig>,
    ) -> Result<Endpoint, StoreConfigError> {
        let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|error| {
            StoreConfigError::InvalidUrl {
                url: url.to_owned(),
                reason: format!("not a usable address ({error})"),
            }
        })?;
        let endpoint = endpoint
            .connect_timeout(self.timeouts.connect)
            // A connection whose member stopped answering is noticed within
            // a request timeout, idle or not.
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(self.timeouts.request)
            .keep_alive_while_idle(true);
        match (tls, url.starts_with("https://")) {
            (Some(tls), true) => {
                endpoint
                    .tls_config(tls.clone())
                    .map_err(|error| StoreConfigError::Tls {
                        reason: format!("{url}: {error}"),
                    })
            }
            (None, false) => Ok(endpoint),
            (Some(_), false) => Err(StoreConfigError::Tls {
                reason: format!(
                    "{url} is http://, but the store was asked for TLS: write https:// or leave the scheme out"
                ),
            }),
            (None, true) => Err(StoreConfigError::Tls {
                reason: format!(
                    "{url} is https://, but the store was not asked for TLS: use etcds:// or .tls()"
                ),
            }),
        }
    }

    fn tls_config(&self) -> Result<ClientTlsConfig, StoreConfigError> {
        let read = |what: &str, path: &PathBuf| {
            std::fs::read(path).map_err(|error| StoreConfigError::Tls {
                reason: format!("cannot read the {what} {}: {error}", path.display()),
            })
        };
        let mut tls = ClientTlsConfig::new();
        tls = match &self.ca_certificate {
            Some(path) => tls.ca_certificate(Certificate::from_pem(read("CA certificate", path)?)),
            None => tls.with_native_roots(),
        };
        if let Some((certificate, key)) = &self.client_certificate {
            tls = tls.identity(Identity::from_pem(
                read("client certificate", certificate)?,
                read("client key", key)?,
            ));
        }
        Ok(tls)
    }
}

/// Whether `host` ends in `:port` (an IPv6 address in brackets, too).
fn has_port(host: &str) -> bool {
    host.rsplit_once(':').is_some_and(|(name, port)| {
        !name.is_empty() && !name.ends_with(':') && port.parse::<u16>().is_ok()
    })
}

/// `url` with the password replaced by `***`, for messages.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user, _)) => {
            let name = user.split_once(':').map_or(user, |(name, _)| name);
            let at = rest[..authority_end].rfind('@').unwrap_or(0);
            format!("{scheme}://{name}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_url_gives_hosts_user_prefix_and_tls_files() {
        let builder = EtcdStoreBuilder::from_url(
            "etcd://root:p%40ss@10.0.0.1:2379,10.0.0.2:2379/app/locks?cacert=/ca.pem&cert=/c.pem&key=/k.pem",
        )
        .unwrap();
        assert_eq!(builder.endpoints, ["10.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(builder.prefix, "app/locks");
        assert_eq!(builder.user, Some(("root".into(), "p@ss".into())));
        assert!(builder.tls, "a CA file implies TLS");
        assert_eq!(builder.ca_certificate, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            builder.client_certificate,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        let plain = EtcdStoreBuilder::from_url("etcd://127.0.0.1:2379/locks").unwrap();
        assert!(!plain.tls && plain.user.is_none());
        assert!(EtcdStoreBuilder::from_url("etcds://h:1/x").unwrap().tls);
        assert_eq!(
            EtcdStoreBuilder::from_url("etcd://[::1]:2379/x")
                .unwrap()
                .endpoints,
            ["[::1]:2379"]
        );
    }

    #[test]
    fn bad_urls_say_what_to_change_and_never_show_the_password() {
        for (url, says) in [
            ("redis://h:1/x", "scheme"),
            ("etcd://h:1", "no prefix"),
            ("etcd:///x", "no host"),
            ("etcd://h/x", "no port"),
            ("etcd://user@h:1/x", "password"),
            ("etcd://h:1/x?cert=/c.pem", "together"),
            ("etcd://h:1/x?sslmode=on", "unknown option"),
            ("etcd://u:secret@h/x", "no port"),
        ] {
            let error = EtcdStoreBuilder::from_url(url).unwrap_err().to_string();
            assert!(error.contains(says), "{url}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[tokio::test]
    async fn an_empty_prefix_or_zero_timeout_is_refused_before_connecting() {
        let error = EtcdStore::builder(["127.0.0.1:9"], "/")
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(error, StoreConfigError::InvalidPrefix { .. }),
            "{error}"
        );
        let error = EtcdStore::builder(["127.0.0.1:9"], "x")
            .timeouts(Timeouts::default().with_request(Duration::ZERO))
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(
            error,
            StoreConfigError::ZeroTimeout { which: "request" }
        ));
        let error = EtcdStore::builder(Vec::<String>::new(), "x")
            .connect()
            .await
            .unwrap_err();
        assert!(matches!(error, StoreConfigError::NoEndpoints));
    }
}
