//! AWS credentials from a boto3 session, asked for again as they near their
//! expiry, so temporary credentials (a role, SSO) keep working past their
//! first hour: the session refreshes them as boto3 does for its own clients.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use pyo3::prelude::*;

/// The longest the SDK keeps credentials before asking the session again,
/// even when the session says they do not expire (so credentials changed in
/// the session are picked up).
const ASK_AGAIN: Duration = Duration::from_secs(15 * 60);

/// Credentials of a `boto3.Session` (or a `botocore` session).
#[derive(Debug)]
pub(crate) struct SessionCredentials {
    // Shared by reference count, so handing it to another thread needs no
    // GIL (a `Py` clone does).
    session: Arc<Py<PyAny>>,
}

impl SessionCredentials {
    pub(crate) fn new(session: Py<PyAny>) -> Self {
        Self {
            session: Arc::new(session),
        }
    }

    /// Ask the session, on a thread that may wait for the GIL: one of the
    /// blocking pool's, never the runtime's worker, which sends heartbeats.
    async fn load(&self) -> Result<Credentials, CredentialsError> {
        let session = self.session.clone();
        tokio::task::spawn_blocking(move || Python::attach(|py| read(py, &session)))
            .await
            .map_err(CredentialsError::provider_error)?
    }
}

fn read(py: Python<'_>, session: &Py<PyAny>) -> Result<Credentials, CredentialsError> {
    let session = session.bind(py);
    let credentials = session
        .call_method0("get_credentials")
        .map_err(|error| CredentialsError::provider_error(error.to_string()))?;
    if credentials.is_none() {
        return Err(CredentialsError::not_loaded(
            "the boto3 session has no credentials: configure them for the session (profile, environment, role)",
        ));
    }
    // botocore's RefreshableCredentials refreshes here when they are close to
    // expiring.
    let frozen = credentials
        .call_method0("get_frozen_credentials")
        .map_err(|error| CredentialsError::provider_error(error.to_string()))?;
    let field = |name: &str| -> Result<Option<String>, CredentialsError> {
        frozen
            .getattr(name)
            .and_then(|value| value.extract::<Option<String>>())
            .map_err(|error| CredentialsError::provider_error(error.to_string()))
    };
    let (Some(access_key), Some(secret_key)) = (field("access_key")?, field("secret_key")?) else {
        return Err(CredentialsError::not_loaded(
            "the boto3 session's credentials have no access key or secret key",
        ));
    };
    let token = field("token")?;
    let mut expiry = SystemTime::now() + ASK_AGAIN;
    // RefreshableCredentials know their expiry (botocore keeps it in
    // `_expiry_time`, an aware datetime); static credentials have none.
    let expires = credentials
        .getattr("_expiry_time")
        .and_then(|at| at.call_method0("timestamp"))
        .and_then(|seconds| seconds.extract::<f64>())
        .ok()
        .and_then(|seconds| Duration::try_from_secs_f64(seconds.max(0.0)).ok());
    if let Some(since_epoch) = expires {
        expiry = expiry.min(SystemTime::UNIX_EPOCH + since_epoch);
    }
    Ok(Credentials::new(
        access_key,
        secret_key,
        token,
        Some(expiry),
        "boto3-session",
    ))
}

impl ProvideCredentials for SessionCredentials {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.load())
    }
}
