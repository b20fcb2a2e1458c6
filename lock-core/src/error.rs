//! Errors: [`StoreError`] from stores, classified for the protocol, and
//! [`LockError`] for users of the client.

use std::error::Error as StdError;
use std::time::Duration;

use crate::{LockKey, LostReason};

type Source = Box<dyn StdError + Send + Sync + 'static>;

/// What kind of failure a store reported; the client acts on it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store shed load; nothing was applied. Retried with backoff.
    Throttled,
    /// The store could not be reached or failed before applying. Retried.
    Unavailable,
    /// The write may or may not have applied (timeout, lost response). Resolved by
    /// RVN.
    Ambiguous,
    /// The table or namespace does not exist. Not retried.
    NotFound,
    /// The request is invalid (key too long, item too large). Not retried.
    Invalid,
    /// Credentials missing, wrong or without permission. Not retried.
    Unauthorized,
    /// Anything else. Not retried.
    Other,
}

/// An error from a [`ConditionalStore`](crate::ConditionalStore).
#[derive(Debug, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    #[source]
    source: Option<Source>,
}

impl StoreError {
    /// An error of `kind` with a message saying what happened and, where it helps,
    /// what to do.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attach the underlying error (kept in the source chain).
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Shorthand for [`StoreErrorKind::Throttled`].
    pub fn throttled(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Throttled, message)
    }
    /// Shorthand for [`StoreErrorKind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Unavailable, message)
    }
    /// Shorthand for [`StoreErrorKind::Ambiguous`].
    pub fn ambiguous(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Ambiguous, message)
    }
    /// Shorthand for [`StoreErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::NotFound, message)
    }
    /// Shorthand for [`StoreErrorKind::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Invalid, message)
    }
    /// Shorthand for [`StoreErrorKind::Unauthorized`].
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Unauthorized, message)
    }
    /// Shorthand for [`StoreErrorKind::Other`].
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Other, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Worth retrying: throttled, unavailable or ambiguous (the client resolves
    /// ambiguous writes by RVN before it retries them).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            StoreErrorKind::Throttled | StoreErrorKind::Unavailable | StoreErrorKind::Ambiguous
        )
    }

    /// The write may have applied.
    pub fn is_ambiguous(&self) -> bool {
        self.kind == StoreErrorKind::Ambiguous
    }
}

/// A wait as people read it, in whole milliseconds: `1m 30s`, `1s 500ms`,
/// `250ms` (the nanoseconds of a measured wait are noise).
struct Waited(Duration);

impl std::fmt::Display for Waited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let millis = self.0.as_millis();
        let parts = [
            (millis / 3_600_000, "h"),
            (millis / 60_000 % 60, "m"),
            (millis / 1000 % 60, "s"),
            (millis % 1000, "ms"),
        ];
        let mut written = false;
        for (value, unit) in parts {
            if value > 0 {
                write!(f, "{}{value}{unit}", if written { " " } else { "" })?;
                written = true;
            }
        }
        if !written {
            f.write_str("0ms")?;
        }
        Ok(())
    }
}

/// A configuration the client builder refused.
#[derive(Clone, PartialEq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The lease duration is zero.
    #[error("lease duration must be greater than zero")]
    ZeroLease,
    /// Something that runs in the background was started outside a tokio
    /// runtime.
    #[error(
        "{what} runs a background task and needs a tokio runtime: call it from async code run by tokio, or inside Runtime::enter"
    )]
    NoRuntime {
        /// What was called.
        what: &'static str,
    },
    /// The lease is longer than a client may write.
    #[error("lease of {lease:?} is longer than the longest allowed, {max:?}")]
    LeaseTooLong {
        /// The lease asked for.
        lease: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The heartbeat period is zero.
    #[error("heartbeat period must be greater than zero")]
    ZeroHeartbeat,
    /// The refresh (poll) period is zero.
    #[error("refresh period must be greater than zero")]
    ZeroRefresh,
    /// The clock drift bound is not a fraction in `[0, 0.5)`.
    #[error("max clock drift must be a fraction in [0, 0.5), got {drift}")]
    BadDrift {
        /// The refused value.
        drift: f64,
    },
    /// Lease × (1 − drift) − safety margin leaves no safe time.
    #[error(
        "no safe time: lease {lease:?} × (1 − drift {drift}) − safety margin {margin:?} is not positive"
    )]
    NoSafeTime {
        /// Lease duration.
        lease: Duration,
        /// Drift bound.
        drift: f64,
        /// Safety margin.
        margin: Duration,
    },
    /// The heartbeat period is not shorter than the safe time, so the guard would
    /// fall into danger between heartbeats.
    #[error(
        "heartbeat period {heartbeat:?} must be shorter than the safe time {safe:?} (lease × (1 − drift) − safety margin)"
    )]
    HeartbeatTooSlow {
        /// Heartbeat period.
        heartbeat: Duration,
        /// Safe time of one lease.
        safe: Duration,
    },
    /// The heartbeat rate limit is zero.
    #[error("heartbeat rate limit must be at least one heartbeat per second")]
    ZeroRateLimit,
    /// The owner name is empty.
    #[error("owner name must not be empty")]
    EmptyOwner,
    /// A [`max_clock_difference`](crate::LockClientBuilder::max_clock_difference)
    /// was set for a store whose records carry no write time
    /// ([`StoreClock::None`](crate::StoreClock::None)), where it could never
    /// speed up a takeover.
    #[error(
        "max clock difference is set, but this store's records carry no write time: remove the setting"
    )]
    ClockDifferenceWithoutWriteTimes,
    /// The [`lock_delay`](crate::LockClientBuilder::lock_delay) is longer than
    /// a lease may be.
    #[error("lock delay of {delay:?} is longer than the longest allowed, {max:?}")]
    LockDelayTooLong {
        /// The delay asked for.
        delay: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// [`AcquireOptions::max_hold`](crate::AcquireOptions::max_hold) is zero.
    #[error("max hold must be greater than zero (leave it unset for no limit)")]
    ZeroMaxHold,
    /// A min or max hold is longer than a lease may be.
    #[error("a hold of {hold:?} is longer than the longest allowed, {max:?}")]
    HoldTooLong {
        /// The hold asked for.
        hold: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// The min hold is longer than the max hold.
    #[error(
        "min hold {min:?} is longer than max hold {max:?}: shorten the min hold or lengthen the max hold"
    )]
    MinHoldOverMaxHold {
        /// The min hold.
        min: Duration,
        /// The max hold.
        max: Duration,
    },
    /// A min hold keeps the record held after the release, which
    /// delete-on-release would delete.
    #[error(
        "min hold keeps the record after the release, so it cannot be combined with delete-on-release: drop one of them"
    )]
    MinHoldWithDelete,
    /// Delete-on-release was asked of a store that cannot make a delete
    /// conditional ([`Capabilities::conditional_delete`](crate::Capabilities::conditional_delete)):
    /// an unconditional delete could remove the next holder's record.
    #[error(
        "this store cannot delete conditionally, so a release cannot delete the record: leave delete-on-release off (the record stays, marked released)"
    )]
    DeleteNotConditional,
    /// [`try_acquire`](crate::LockClient::try_acquire) was given a wait budget.
    #[error(
        "try_acquire makes one attempt, but the options ask to wait {wait:?}: call acquire to wait, or leave the wait unset"
    )]
    WaitOnTryAcquire {
        /// The budget asked for.
        wait: Duration,
    },
}

/// An error from the [`LockClient`](crate::LockClient) or a
/// [`LockGuard`](crate::LockGuard).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The wait budget ran out while someone else held the lock.
    #[error("lock {key} is held by {}: gave up after waiting {}", holder.as_deref().unwrap_or("nobody (the store kept failing)"), Waited(*waited))]
    AcquireTimeout {
        /// The lock.
        key: LockKey,
        /// Owner name of the holder last seen, if any.
        holder: Option<String>,
        /// How long the client waited.
        waited: Duration,
    },
    /// The lock is not at the version the caller named (for example on
    /// [`LockClient::release_version`](crate::LockClient::release_version)): it
    /// is held by someone else, or vacant; nothing was written.
    #[error("lock {key} is not owned by this client (current owner: {})", owner.as_deref().unwrap_or("none"))]
    NotOwned {
        /// The lock.
        key: LockKey,
        /// The current owner, if any.
        owner: Option<String>,
    },
    /// The lease can no longer be trusted: stolen, expired, or (in `with_lock`) no
    /// heartbeat confirmed within the safe time.
    #[error("lock {key} lost: {reason}")]
    Lost {
        /// The lock.
        key: LockKey,
        /// Why.
        reason: LostReason,
    },
    /// A one-attempt acquire found the lock held, or being acquired, by another
    /// task of this same client. Acquires with a wait budget queue for it instead.
    #[error(
        "lock {key} is held or being acquired by another task of this client; give the acquire a wait budget to queue for it"
    )]
    AlreadyHeld {
        /// The lock.
        key: LockKey,
    },
    /// `only_if_exists` was asked and the lock has no record.
    #[error("lock {key} does not exist and the acquire asked for an existing lock only")]
    NotFound {
        /// The lock.
        key: LockKey,
    },
    /// The client configuration is invalid.
    #[error("invalid lock client configuration: {0}")]
    InvalidConfig(#[from] ConfigError),
    /// A key, data or option is invalid for this store; nothing was written.
    #[error("invalid input: {reason}")]
    InvalidInput {
        /// What is wrong and the limit that applies.
        reason: String,
        /// The store's error, when the store refused the input.
        #[source]
        source: Option<StoreError>,
    },
    /// The store failed in a way retries did not fix, or that is not retryable.
    /// The store's error is the source (`Display` says only this layer's part).
    #[error("store error on lock {key}")]
    Store {
        /// The lock.
        key: LockKey,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// Listing locks failed in the store (the store's error is the source).
    #[error("listing locks{} failed", partition.as_deref().map(|p| format!(" of partition {p}")).unwrap_or_default())]
    List {
        /// The partition listed, if only one.
        partition: Option<String>,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A semaphore was opened with another permit count than its records
    /// (written by clients that opened it with `found`) say; nothing was
    /// written.
    #[error(
        "semaphore {name} has {found} permits in the store, not {permits}: open it with {found} permits, or release and delete all its records before changing the count"
    )]
    PermitsMismatch {
        /// The semaphore.
        name: String,
        /// The count it was opened with.
        permits: u32,
        /// The count its records say.
        found: u32,
    },
    /// A reader-writer lock was opened with another reader count than its
    /// records (written by clients that opened it with `found`) say; nothing
    /// was written.
    #[error(
        "reader-writer lock {name} has {found} reader slots in the store, not {readers}: open it with {found} readers, or release and delete all its records before changing the count"
    )]
    ReadersMismatch {
        /// The lock.
        name: String,
        /// The count it was opened with.
        readers: u32,
        /// The count its records say.
        found: u32,
    },
    /// A reader-writer lock was asked for more readers than the store
    /// allows ([`Capabilities::max_readers`](crate::Capabilities::max_readers));
    /// nothing was written.
    #[error(
        "reader-writer lock {name}: {readers} readers asked for; this store allows 1 to {max} (each is a record a writer reads while it waits)"
    )]
    TooManyReaders {
        /// The lock.
        name: String,
        /// The count asked for.
        readers: u32,
        /// The store's limit.
        max: u32,
    },
    /// The client was shut down.
    #[error("the lock client has been shut down")]
    Shutdown,
}

impl LockError {
    /// Whether the same call may succeed if made again later: the lock was busy
    /// (a timeout, another task of this client holding it) or the store failed in
    /// a way that can pass (throttled, unavailable, an unresolved write). False
    /// for what another attempt cannot change: bad configuration or input, a
    /// missing table, refused credentials, a lost lock, a shut-down client.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::AcquireTimeout { .. } | LockError::AlreadyHeld { .. } => true,
            LockError::Store { source, .. } | LockError::List { source, .. } => {
                source.is_retryable()
            }
            _ => false,
        }
    }

    /// Map a store error on `key`, turning invalid-input errors into
    /// [`LockError::InvalidInput`].
    pub(crate) fn from_store(key: &LockKey, source: StoreError) -> Self {
        if source.kind() == StoreErrorKind::Invalid {
            LockError::InvalidInput {
                reason: format!("the store refused lock {key}: {}", source.message()),
                source: Some(source),
            }
        } else {
            LockError::Store {
                key: key.clone(),
                source,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_acquire_names_the_holder_and_the_wait_in_whole_milliseconds() {
        let error = LockError::AcquireTimeout {
            key: LockKey::new("job"),
            holder: Some("web-1".into()),
            waited: Duration::from_nanos(90_500_000_123),
        };
        assert_eq!(
            error.to_string(),
            "lock job is held by web-1: gave up after waiting 1m 30s 500ms"
        );
        assert_eq!(Waited(Duration::from_nanos(999)).to_string(), "0ms");
        assert_eq!(Waited(Duration::from_secs(7200)).to_string(), "2h");
    }

    #[test]
    fn retryable_errors_are_those_another_attempt_can_change() {
        let key = LockKey::new("k");
        let store = |kind| LockError::Store {
            key: key.clone(),
            source: StoreError::new(kind, "x"),
        };
        assert!(store(StoreErrorKind::Throttled).is_retryable());
        assert!(store(StoreErrorKind::Unavailable).is_retryable());
        assert!(store(StoreErrorKind::Ambiguous).is_retryable());
        assert!(!store(StoreErrorKind::Unauthorized).is_retryable());
        assert!(!store(StoreErrorKind::NotFound).is_retryable());
        let timeout = LockError::AcquireTimeout {
            key: key.clone(),
            holder: None,
            waited: Duration::ZERO,
        };
        assert!(timeout.is_retryable());
        assert!(LockError::AlreadyHeld { key: key.clone() }.is_retryable());
        assert!(!LockError::Shutdown.is_retryable());
        assert!(!LockError::InvalidConfig(ConfigError::ZeroLease).is_retryable());
        let lost = LockError::Lost {
            key,
            reason: LostReason::Expired,
        };
        assert!(!lost.is_retryable());
    }
}
