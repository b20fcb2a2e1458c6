//! Errors of this crate: [`StoreConfigError`] for a store that cannot work as
//! configured. Store operations return [`lock_core::StoreError`];
//! [`classify`] says how Redis's errors map onto it.

use lock_core::StoreError;
use redis::{ErrorKind, ServerErrorKind};

/// A store configuration the builder refused, or a server that cannot hold
/// locks; nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// The URL could not be used.
    #[error(
        "invalid Redis URL {url:?}: {reason}; use redis://[user:password@]host:port[/db] (rediss:// for TLS)"
    )]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The prefix is empty or holds a character the keys cannot.
    #[error("invalid lock prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The refused prefix.
        prefix: String,
        /// What to change.
        reason: String,
    },
    /// `wait_for_replicas` with no replica, or a timeout of zero or over a
    /// day.
    #[error(
        "wait_for_replicas({replicas}, {timeout:?}): wait for at least one replica, for more than zero and at most a day"
    )]
    InvalidReplicaAcks {
        /// The replicas asked for.
        replicas: u32,
        /// The timeout asked for.
        timeout: std::time::Duration,
    },
    /// A timeout is zero.
    #[error("the {which} timeout must be greater than zero")]
    ZeroTimeout {
        /// Which timeout.
        which: &'static str,
    },
    /// The server could not be reached, or refused the login.
    #[error("could not connect to Redis at {url}")]
    Connect {
        /// Where, its password hidden.
        url: String,
        /// What went wrong.
        #[source]
        source: StoreError,
    },
    /// The server refuses the scripts every state change runs (scripting
    /// disabled, or `EVAL`/`EVALSHA`/`SCRIPT` denied to this user).
    #[error(
        "Redis at {url} refuses Lua scripts ({reason}); the store needs EVAL, EVALSHA and SCRIPT LOAD (ACL: +@scripting)"
    )]
    ScriptsRefused {
        /// Where, its password hidden.
        url: String,
        /// What the server said.
        reason: String,
    },
    /// The server may evict keys that hold no expiry: a held lock, or a
    /// fence floor, could vanish.
    #[error(
        "Redis at {url} has maxmemory-policy {policy}, which may evict held locks and fence floors; set noeviction (or a volatile-* policy)"
    )]
    Evicts {
        /// Where, its password hidden.
        url: String,
        /// The policy found.
        policy: String,
    },
    /// `wait_for_replicas` on a Redis Cluster, which this version does not
    /// support.
    #[error(
        "Redis at {url} is a Redis Cluster node; wait_for_replicas is supported on one primary only: leave it out, or point the store at a standalone primary"
    )]
    WaitInCluster {
        /// Where, its password hidden.
        url: String,
    },
    /// A Redis Cluster node whose cluster does not serve every slot
    /// (`cluster_state` is not `ok`).
    #[error(
        "Redis at {url} is a node of a Redis Cluster that is not ready (cluster_state is not ok): assign every slot to a primary (redis-cli --cluster create, or fix), then connect again"
    )]
    ClusterNotReady {
        /// Where, its password hidden.
        url: String,
    },
    /// TLS files on a Redis Cluster, which this version does not support.
    #[error(
        "Redis at {url} is a Redis Cluster node; CA and client certificate files are supported on one primary only (rediss:// with the system's roots works on a cluster)"
    )]
    TlsFilesInCluster {
        /// Where, its password hidden.
        url: String,
    },
}

/// What a failed request was: a read may be repeated; a write may have
/// applied unless it never left.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Call {
    Read,
    Write,
}

/// Classify an error of the Redis client for the lock client. `what` says
/// what was asked (`write locks:{a}:r:-`).
pub(crate) fn classify(call: Call, what: &str, error: redis::RedisError) -> StoreError {
    let message = format!("{what}: {error}");
    let code = error.code().unwrap_or_default().to_owned();
    let text = error.to_string();
    // Raised by the store's own scripts, before their first write.
    let ours = text.contains("lock-redis:");
    match error.kind() {
        // Refused before the script ran: nothing was written.
        ErrorKind::Server(
            ServerErrorKind::ReadOnly
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::MasterDown
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::NoScript,
        ) => StoreError::unavailable(message).with_source(error),
        _ if matches!(code.as_str(), "OOM" | "BUSY") => {
            StoreError::unavailable(message).with_source(error)
        }
        ErrorKind::AuthenticationFailed => StoreError::unauthorized(message).with_source(error),
        // Denied before the script ran (the command, or the keys it names),
        // or by the store's own check before its first write. A denial from
        // inside a script without that check (Redis 6) may follow a write:
        // below.
        _ if code == "NOPERM"
            && (ours
                || call == Call::Read
                || text.contains("'evalsha'")
                || text.contains("keys used as arguments")) =>
        {
            StoreError::unauthorized(format!(
                "{message}; grant the user the scripting commands, the commands the scripts run and the prefix's keys (docs/redis.md, Permissions)"
            ))
            .with_source(error)
        }
        _ if matches!(code.as_str(), "NOAUTH" | "WRONGPASS") => {
            StoreError::unauthorized(message).with_source(error)
        }
        _ if ours => StoreError::invalid(message).with_source(error),
        // Any other failure of a write script may have come after a write
        // (Redis keeps what a failed script wrote): the client resolves it.
        ErrorKind::Server(_) | ErrorKind::Extension if call == Call::Write => {
            StoreError::ambiguous(message).with_source(error)
        }
        ErrorKind::Server(_) | ErrorKind::Extension => {
            StoreError::other(message).with_source(error)
        }
        ErrorKind::InvalidClientConfig => StoreError::invalid(message).with_source(error),
        // The client's own failures: for a write, one after it was sent (the
        // cluster client drops a request's reply on an internal failure)
        // may have applied.
        ErrorKind::Client if call == Call::Write => {
            StoreError::ambiguous(message).with_source(error)
        }
        ErrorKind::Client => StoreError::unavailable(message).with_source(error),
        // The connection could not be opened: nothing was sent.
        _ if error.is_connection_refusal() => StoreError::unavailable(message).with_source(error),
        // A timeout, a dropped connection: the script may have run.
        _ => match call {
            Call::Write => StoreError::ambiguous(message).with_source(error),
            Call::Read => StoreError::unavailable(message).with_source(error),
        },
    }
}

/// `url` with the password replaced by `***`, for messages.
pub(crate) fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = &rest[..at];
            let name = user.split_once(':').map_or("", |(name, _)| name);
            format!("{scheme}://{name}:***{}", &rest[at..])
        }
        None => url.to_owned(),
    }
}
