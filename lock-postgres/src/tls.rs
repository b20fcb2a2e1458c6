//! TLS to PostgreSQL with libpq's meanings of `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey`, through rustls: the settings are taken out of the
//! connection string (tokio-postgres knows only `disable`, `prefer` and
//! `require`), merged with the builder's, and turned into a connector.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::StoreConfigError;

/// How a connection uses TLS: libpq's `sslmode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, without checking its certificate;
    /// plain otherwise (libpq's default).
    #[default]
    Prefer,
    /// TLS or no connection; the certificate is checked only when root
    /// certificates are given (then as [`VerifyCa`](Self::VerifyCa)).
    Require,
    /// TLS, and the server's certificate must chain to a root certificate.
    VerifyCa,
    /// TLS, the certificate must chain to a root certificate and name the
    /// host connected to.
    VerifyFull,
}

impl SslMode {
    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(value: &str) -> Result<Self, StoreConfigError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` tries plain first and TLS after a refusal; a
            // pool cannot retry a connection that way.
            "allow" => {
                return Err(tls_error(
                    "sslmode=allow is not supported (libpq's \"without TLS, then with it\" cannot be \
                     done by a connection pool): use sslmode=prefer (TLS whenever the server offers it) \
                     or sslmode=disable"
                        .to_owned(),
                ));
            }
            other => {
                return Err(tls_error(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                )));
            }
        })
    }
}

/// Where the server's certificate must chain to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RootCertificates {
    /// The certificates in this PEM file (libpq's `sslrootcert=path`).
    File(PathBuf),
    /// The system's trusted roots (libpq's `sslrootcert=system`).
    System,
}

/// The TLS settings of a connection, from its string and the builder.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub mode: Option<SslMode>,
    pub roots: Option<RootCertificates>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl TlsSettings {
    /// `other`'s settings where it has them, these elsewhere.
    pub fn overridden_by(self, other: &TlsSettings) -> TlsSettings {
        TlsSettings {
            mode: other.mode.or(self.mode),
            roots: other.roots.clone().or(self.roots),
            client_cert: other.client_cert.clone().or(self.client_cert),
            client_key: other.client_key.clone().or(self.client_key),
        }
    }

    /// The mode in effect: as set, or `prefer`; with the system's roots,
    /// `verify-full` (libpq's rule since version 16).
    pub fn mode(&self) -> SslMode {
        match (self.mode, &self.roots) {
            (Some(mode), _) => mode,
            (None, Some(RootCertificates::System)) => SslMode::VerifyFull,
            (None, _) => SslMode::default(),
        }
    }

    /// These settings for a connection to `hosts`: libpq ignores `sslmode`
    /// on Unix sockets, so a configuration of sockets only goes without TLS;
    /// a configuration without host names (`hostaddr` only) has no name to
    /// send or check, so a mode that must use TLS is refused.
    pub fn for_hosts(
        mut self,
        hosts: &[tokio_postgres::config::Host],
    ) -> Result<TlsSettings, StoreConfigError> {
        use tokio_postgres::config::Host;
        let names = hosts.iter().any(|host| matches!(host, Host::Tcp(_)));
        let sockets = hosts.iter().any(|host| !matches!(host, Host::Tcp(_)));
        if !names && sockets {
            self.mode = Some(SslMode::Disable);
        } else if !names {
            match self.mode() {
                SslMode::Disable => {}
                SslMode::Prefer => self.mode = Some(SslMode::Disable),
                mode => {
                    return Err(tls_error(format!(
                        "sslmode={} needs a host name (host=...), the name TLS sends and checks; \
                         hostaddr alone has none",
                        mode.name()
                    )));
                }
            }
        }
        Ok(self)
    }

    /// Refuse what libpq refuses: the system's roots with a mode that does
    /// not check the host name (any public certificate chains to them).
    fn check(&self) -> Result<(), StoreConfigError> {
        let mode = self.mode();
        if self.roots == Some(RootCertificates::System) && mode != SslMode::VerifyFull {
            return Err(tls_error(format!(
                "sslrootcert=system needs sslmode=verify-full (it is {}): any publicly trusted \
                 certificate chains to the system's roots, so only the host name check tells \
                 the server apart",
                mode.name()
            )));
        }
        Ok(())
    }

    /// The mode tokio-postgres negotiates with: whether TLS is tried and
    /// whether it is required (the checks are the connector's).
    pub fn negotiation(&self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Negotiate;
        match self.mode() {
            SslMode::Disable => Negotiate::Disable,
            SslMode::Prefer => Negotiate::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Negotiate::Require,
        }
    }

    /// The connector, or `None` for `disable`. Reads the certificate files
    /// now, so a missing or unreadable one is said when the store is built.
    pub fn connector(&self) -> Result<Option<MakeRustlsConnect>, StoreConfigError> {
        self.check()?;
        let mode = self.mode();
        if mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|error| tls_error(format!("TLS set-up: {error}")))?;
        // Roots given, or (for `require`, as libpq) found in the default
        // file, are checked against, as `verify-ca` at least: given roots are
        // never ignored. Without roots, `prefer` and `require` check nothing.
        let roots = match (mode, &self.roots) {
            (_, Some(roots)) => Some(load_roots(roots)?),
            (SslMode::Prefer, None) => None,
            (SslMode::Require, None) => match default_roots_file() {
                Some(file) => Some(load_roots(&file)?),
                None => None,
            },
            (_, None) => Some(load_roots(&default_roots(mode)?)?),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            None => Arc::new(AnyCertificate(provider.signature_verification_algorithms)),
            Some(roots) => {
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|error| tls_error(format!("the root certificates: {error}")))?;
                if mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyName(webpki))
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.client_cert, &self.client_key) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let certs = read_certificates(cert, "sslcert")?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|error| tls_error(format!("sslkey {}: {error}", key.display())))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|error| tls_error(format!("the client certificate: {error}")))?
            }
            _ => {
                return Err(tls_error(
                    "a client certificate needs both sslcert and sslkey".to_owned(),
                ));
            }
        };
        Ok(Some(MakeRustlsConnect::new(config)))
    }
}

/// Take the TLS settings out of a connection string: a URL's query
/// parameters, or a keyword string's `key=value` pairs. Returns the string
/// without them, for tokio-postgres, and the settings.
pub(crate) fn split(connection: &str) -> Result<(String, TlsSettings), StoreConfigError> {
    let mut settings = TlsSettings::default();
    let mut take = |key: &str, value: String| -> Result<bool, StoreConfigError> {
        match key {
            "sslmode" => settings.mode = Some(SslMode::parse(&value)?),
            "sslrootcert" if value == "system" => settings.roots = Some(RootCertificates::System),
            "sslrootcert" => settings.roots = Some(RootCertificates::File(value.into())),
            "sslcert" => settings.client_cert = Some(value.into()),
            "sslkey" => settings.client_key = Some(value.into()),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if connection.starts_with("postgres://") || connection.starts_with("postgresql://") {
        // As tokio-postgres reads a URL: the credentials end at the first
        // `@`, and the query starts at the first `?` after them (a password
        // may hold a `?`).
        let credentials_end = connection.find('@').map_or(0, |at| at + 1);
        let query_start = connection[credentials_end..]
            .find('?')
            .map(|at| credentials_end + at);
        match query_start.map(|at| (&connection[..at], &connection[at + 1..])) {
            None => connection.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|pair| !pair.is_empty()) {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(key, percent_decode(value)?)? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (key, value, text) in keywords(connection)? {
            if !take(key, value)? {
                kept.push(text);
            }
        }
        kept.join(" ")
    };
    Ok((rest, settings))
}

/// A keyword string's pairs: (key, value unquoted, the pair's own text).
fn keywords(connection: &str) -> Result<Vec<(&str, String, &str)>, StoreConfigError> {
    let mut pairs = Vec::new();
    let mut rest = connection.trim_start();
    while !rest.is_empty() {
        let start = rest;
        let Some((key, after)) = rest.split_once('=') else {
            return Err(tls_error(format!(
                "the connection string has {rest:?} where key=value was expected"
            )));
        };
        let key = key.trim();
        let after = after.trim_start();
        let mut value = String::new();
        let consumed;
        if let Some(quoted) = after.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '\'' => {
                        end = Some(i);
                        break;
                    }
                    c => value.push(c),
                }
            }
            let Some(end) = end else {
                return Err(tls_error(
                    "the connection string has an unterminated quote".to_owned(),
                ));
            };
            consumed = &quoted[end + 1..];
        } else {
            // Up to the first whitespace not escaped by a backslash.
            let mut chars = after.char_indices();
            let mut end = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    c if c.is_whitespace() => {
                        end = i;
                        break;
                    }
                    c => value.push(c),
                }
            }
            consumed = &after[end..];
        }
        let text = &start[..start.len() - consumed.len()];
        pairs.push((key, value, text.trim()));
        rest = consumed.trim_start();
    }
    Ok(pairs)
}

fn percent_decode(value: &str) -> Result<String, StoreConfigError> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = value
                    .get(i + 1..i + 3)
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or_else(|| {
                        tls_error(format!(
                            "the connection string has a bad escape in {value:?}"
                        ))
                    })?;
                out.push(hex);
                i += 3;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
        .map_err(|_| tls_error(format!("the connection string's {value:?} is not UTF-8")))
}

/// `~/.postgresql/root.crt`, if there is one.
fn default_roots_file() -> Option<RootCertificates> {
    std::env::var_os("HOME")
        .map(|home| Path::new(&home).join(".postgresql").join("root.crt"))
        .filter(|file| file.is_file())
        .map(RootCertificates::File)
}

/// libpq's default root certificate file, `~/.postgresql/root.crt`, when a
/// mode that checks the chain was given none.
fn default_roots(mode: SslMode) -> Result<RootCertificates, StoreConfigError> {
    default_roots_file().ok_or_else(|| {
        let mode = match mode {
            SslMode::VerifyCa => "verify-ca",
            _ => "verify-full",
        };
        tls_error(format!(
            "sslmode={mode} checks the server's certificate against root certificates: \
             set sslrootcert=/path/to/root.crt (or sslrootcert=system for the system's), \
             or put them in ~/.postgresql/root.crt"
        ))
    })
}

fn load_roots(roots: &RootCertificates) -> Result<RootCertStore, StoreConfigError> {
    let mut store = RootCertStore::empty();
    let certificates = match roots {
        RootCertificates::File(file) => read_certificates(file, "sslrootcert")?,
        RootCertificates::System => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map(|error| format!(": {error}"))
                    .unwrap_or_default();
                return Err(tls_error(format!(
                    "sslrootcert=system found no root certificates on this system{why}"
                )));
            }
            found.certs
        }
    };
    let (_, unusable) = store.add_parsable_certificates(certificates);
    if store.is_empty() {
        return Err(tls_error(format!(
            "the root certificates hold no usable certificate ({unusable} unusable)"
        )));
    }
    Ok(store)
}

fn read_certificates(
    file: &Path,
    setting: &str,
) -> Result<Vec<CertificateDer<'static>>, StoreConfigError> {
    let certificates = CertificateDer::pem_file_iter(file)
        .and_then(|certificates| certificates.collect::<Result<Vec<_>, _>>())
        .map_err(|error| tls_error(format!("{setting} {}: {error}", file.display())))?;
    if certificates.is_empty() {
        return Err(tls_error(format!(
            "{setting} {}: no PEM certificate in it",
            file.display()
        )));
    }
    Ok(certificates)
}

fn tls_error(reason: String) -> StoreConfigError {
    StoreConfigError::Tls { reason }
}

/// `prefer`, and `require` without roots: encrypted, whoever the server is
/// (libpq's meaning: these modes protect against eavesdropping only). The
/// handshake's signatures are still checked.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked, the name the certificate is for is
/// not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tls_settings_are_taken_out_of_a_url() {
        let (rest, settings) = split(
            "postgres://u:p@db:5432/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&sslcert=/c.pem&sslkey=/k.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/app?application_name=x");
        assert_eq!(settings.mode, Some(SslMode::VerifyFull));
        assert_eq!(
            settings.roots,
            Some(RootCertificates::File("/etc/ca.pem".into()))
        );
        assert_eq!(settings.client_cert, Some("/c.pem".into()));
        assert_eq!(settings.client_key, Some("/k.pem".into()));
        let (rest, settings) = split("postgresql://db/app?sslrootcert=system").unwrap();
        assert_eq!(rest, "postgresql://db/app");
        assert_eq!(settings.roots, Some(RootCertificates::System));
        assert_eq!(settings.mode(), SslMode::VerifyFull, "libpq's rule");
        // A `?` in the password is the password's.
        let (rest, settings) =
            split("postgres://app:pa?ss@db/app?sslmode=require&application_name=x").unwrap();
        assert_eq!(rest, "postgres://app:pa?ss@db/app?application_name=x");
        assert_eq!(settings.mode, Some(SslMode::Require));
        // A `+` is a `+`.
        let (_, settings) = split("postgres://db/app?sslrootcert=/ca+bundle.pem").unwrap();
        assert_eq!(
            settings.roots,
            Some(RootCertificates::File("/ca+bundle.pem".into()))
        );
    }

    #[test]
    fn tls_settings_are_taken_out_of_a_keyword_string() {
        let (rest, settings) =
            split("host=db user=u password='a b\\'c' sslmode=verify-ca sslrootcert='/my ca.pem' dbname=app")
                .unwrap();
        assert_eq!(rest, "host=db user=u password='a b\\'c' dbname=app");
        assert_eq!(settings.mode, Some(SslMode::VerifyCa));
        assert_eq!(
            settings.roots,
            Some(RootCertificates::File("/my ca.pem".into()))
        );
        // An escaped space in an unquoted value is part of it.
        let (rest, settings) = split("host=db password=a\\ b sslmode=require").unwrap();
        assert_eq!(rest, "host=db password=a\\ b");
        assert_eq!(settings.mode, Some(SslMode::Require));
    }

    #[test]
    fn bad_tls_settings_are_refused_saying_what_to_change() {
        for (connection, says) in [
            (
                "postgres://db/app?sslmode=allow",
                "sslmode=allow is not supported",
            ),
            ("host=db sslmode=allow", "use sslmode=prefer"),
            ("postgres://db/app?sslmode=sometimes", "not one of"),
            ("postgres://db/app?sslrootcert=%ZZ", "bad escape"),
            ("host=db sslmode='verify-full", "unterminated quote"),
        ] {
            let error = split(connection).unwrap_err();
            assert!(error.to_string().contains(says), "{connection}: {error}");
        }
        let missing = TlsSettings {
            mode: Some(SslMode::VerifyFull),
            roots: Some(RootCertificates::File("/nonexistent/root.crt".into())),
            ..TlsSettings::default()
        };
        let Err(error) = missing.connector() else {
            panic!("a missing root certificate file is refused");
        };
        assert!(
            error
                .to_string()
                .contains("sslrootcert /nonexistent/root.crt"),
            "{error}"
        );
        let weak = TlsSettings {
            mode: Some(SslMode::Require),
            roots: Some(RootCertificates::System),
            ..TlsSettings::default()
        };
        let Err(error) = weak.connector() else {
            panic!("the system's roots without the host name check are refused");
        };
        assert!(
            error.to_string().contains("needs sslmode=verify-full"),
            "{error}"
        );
        let half = TlsSettings {
            mode: Some(SslMode::Require),
            client_cert: Some("/c.pem".into()),
            ..TlsSettings::default()
        };
        let Err(error) = half.connector() else {
            panic!("a certificate without its key is refused");
        };
        assert!(
            error.to_string().contains("both sslcert and sslkey"),
            "{error}"
        );
    }

    #[test]
    fn sockets_go_without_tls_and_a_hostaddr_alone_cannot_require_it() {
        use tokio_postgres::config::Host;
        let sockets = [Host::Unix("/var/run/postgresql".into())];
        let settings = TlsSettings {
            mode: Some(SslMode::VerifyFull),
            ..TlsSettings::default()
        };
        assert_eq!(
            settings.clone().for_hosts(&sockets).unwrap().mode(),
            SslMode::Disable
        );
        assert_eq!(
            TlsSettings::default().for_hosts(&[]).unwrap().mode(),
            SslMode::Disable
        );
        let error = settings.clone().for_hosts(&[]).unwrap_err();
        assert!(error.to_string().contains("needs a host name"), "{error}");
        let names = [Host::Tcp("db".into())];
        assert_eq!(
            settings.for_hosts(&names).unwrap().mode(),
            SslMode::VerifyFull
        );
    }

    #[test]
    fn builder_settings_override_the_strings() {
        let from_url = TlsSettings {
            mode: Some(SslMode::Require),
            roots: Some(RootCertificates::System),
            ..TlsSettings::default()
        };
        let from_builder = TlsSettings {
            mode: Some(SslMode::VerifyFull),
            ..TlsSettings::default()
        };
        let merged = from_url.overridden_by(&from_builder);
        assert_eq!(merged.mode, Some(SslMode::VerifyFull));
        assert_eq!(merged.roots, Some(RootCertificates::System));
    }
}
