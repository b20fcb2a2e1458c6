//! Errors of this crate: [`StoreConfigError`] for a store that cannot work as
//! configured. Store operations return [`lock_core::StoreError`];
//! [`classify`] says how etcd's errors map onto it.

use std::time::Duration;

use lock_core::StoreError;

/// A store configuration the builder refused; nothing was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// The URL could not be used.
    #[error(
        "invalid etcd URL {url:?}: {reason}; use etcd://[user:password@]host:port[,host:port...]/prefix (etcds:// for TLS)"
    )]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No endpoint to connect to.
    #[error("no etcd endpoint: give at least one host:port")]
    NoEndpoints,
    /// The prefix is empty or holds what etcd keys of this store cannot.
    #[error("invalid lock prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The refused prefix.
        prefix: String,
        /// What to change.
        reason: String,
    },
    /// A timeout is zero.
    #[error("the {which} timeout must be greater than zero")]
    ZeroTimeout {
        /// Which timeout.
        which: &'static str,
    },
    /// A TLS setting is invalid, or a certificate file it names cannot be read.
    #[error("TLS: {reason}")]
    Tls {
        /// What is wrong, and what to change.
        reason: String,
    },
    /// etcd refused the user name and password, or could not be asked.
    #[error("could not log in to etcd as {user}")]
    Login {
        /// The user.
        user: String,
        /// What etcd said.
        #[source]
        source: StoreError,
    },
    /// The client could not be set up.
    #[error("could not set up the etcd client: {reason}")]
    Client {
        /// What the client library said.
        reason: String,
    },
}

/// What a failed request was: a read may be repeated; a write may have
/// applied unless it never left.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Call {
    Read,
    Write,
}

/// Classify etcd's answer `status` (or the channel's, for a request that
/// got none) for the lock client. `what` says what was asked (`write
/// locks/r/a/-`).
pub(crate) fn classify(call: Call, what: &str, status: tonic::Status) -> StoreError {
    use tonic::Code;
    let message = format!("{what}: {}", describe(&status));
    match status.code() {
        // The request was refused as it stands: nothing applied.
        Code::InvalidArgument | Code::OutOfRange => StoreError::invalid(message).with_source(status),
        // Refused before or while being applied (a store whose login could
        // not be renewed): nothing applied, and the next try may pass.
        Code::FailedPrecondition => StoreError::unavailable(message).with_source(status),
        Code::PermissionDenied | Code::Unauthenticated => StoreError::unauthorized(format!(
            "{message}; grant the user read and write on the lock prefix (etcdctl role grant-permission --prefix)"
        ))
        .with_source(status),
        // "etcdserver: too many requests": refused before it was applied.
        Code::ResourceExhausted => StoreError::throttled(message).with_source(status),
        _ if never_sent(&status) => StoreError::unavailable(message).with_source(status),
        // A timeout, a leader change, a connection lost after sending: the
        // write may have been committed.
        _ => match call {
            Call::Write => StoreError::ambiguous(message).with_source(status),
            Call::Read => StoreError::unavailable(message).with_source(status),
        },
    }
}

/// `status` in one line: its code and etcd's message (tonic's `Display`
/// adds its metadata and details).
pub(crate) fn describe(status: &tonic::Status) -> String {
    if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        format!("{:?}: {}", status.code(), status.message())
    }
}

/// Whether `status` says the request never reached etcd: the connection
/// could not be opened.
fn never_sent(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut source = status.source();
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        source = error.source();
    }
    // tonic names a channel that never connected so (its source is not
    // always kept).
    let text = status.message();
    text.contains("tcp connect error") || text.contains("error trying to connect")
}

/// Whether `status` is the client's own timeout (tonic reports it as
/// `Cancelled`) or a deadline: the request got no answer in time.
pub(crate) fn timed_out(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
    )
}

/// A timeout given to the builder must not be zero.
pub(crate) fn nonzero(which: &'static str, value: Duration) -> Result<(), StoreConfigError> {
    if value.is_zero() {
        Err(StoreConfigError::ZeroTimeout { which })
    } else {
        Ok(())
    }
}
