//! Errors of this crate: [`StoreConfigError`] for a store that cannot work as
//! configured, [`BucketError`] for a bucket that cannot hold locks. Store
//! operations return [`lock_core::StoreError`]; [`classify`] says how
//! `object_store`'s errors map onto it.

use std::error::Error as StdError;

use lock_core::{StoreError, StoreErrorKind};

/// A store configuration the builder refused; nothing was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// The URL could not be parsed, or names no bucket.
    #[error("invalid object store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong, and what to change.
        reason: String,
    },
    /// The URL's scheme names a store that cannot make conditional updates
    /// (a local directory, plain HTTP), or one this build leaves out.
    #[error("{url:?}: {reason}")]
    NoConditionalWrites {
        /// The URL as given.
        url: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// An option the service's builder does not know.
    #[error(
        "unknown option {key:?} for {service}: use one of object_store's configuration keys for it (for example aws_endpoint, google_service_account, azure_storage_account_name)"
    )]
    UnknownOption {
        /// The key as given.
        key: String,
        /// The service the URL names.
        service: &'static str,
    },
    /// The prefix is too long or not a valid object path.
    #[error("invalid lock prefix {prefix:?}: {reason}")]
    InvalidPrefix {
        /// The prefix as given.
        prefix: String,
        /// What is wrong.
        reason: String,
    },
    /// A timeout is zero.
    #[error("the {which} timeout must be greater than zero")]
    ZeroTimeout {
        /// Which timeout.
        which: &'static str,
    },
    /// The service's builder refused the configuration (missing bucket,
    /// credentials it cannot use, a bad option value).
    #[error("the object store could not be configured")]
    Builder {
        /// What `object_store` said.
        #[source]
        source: object_store::Error,
    },
}

/// The bucket cannot hold locks: checked by
/// [`BucketStore::validate_bucket`](crate::BucketStore::validate_bucket).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BucketError {
    /// The bucket does not exist, or the credentials may not see it.
    #[error(
        "the bucket of {url} does not exist or cannot be reached with these credentials; create it with the cloud's own tools"
    )]
    Missing {
        /// The store's location.
        url: String,
        /// What the service said.
        #[source]
        source: StoreError,
    },
    /// The service accepted a write it should have refused, or refused one it
    /// should have accepted: it does not make conditional writes, and would let
    /// two holders in.
    #[error(
        "{url} does not make conditional writes: {what}; locks need If-None-Match and If-Match on PUT (S3 since 2024, GCS and Azure Blob), so use another store"
    )]
    NoConditionalWrites {
        /// The store's location.
        url: String,
        /// What the check saw.
        what: String,
    },
    /// The check could not finish.
    #[error("checking {url} failed")]
    Store {
        /// The store's location.
        url: String,
        /// The failure.
        #[source]
        source: StoreError,
    },
}

/// What a call was doing when it failed: a read may be repeated, a write may
/// have applied.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Call {
    Read,
    Write,
}

/// `error` from `object_store`, classified for the protocol. Conditions that
/// failed (`Precondition`, `AlreadyExists`) and absent objects are answers the
/// store handles before it gets here.
pub(crate) fn classify(call: Call, what: &str, error: object_store::Error) -> StoreError {
    use object_store::Error as E;
    let kind = match &error {
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StoreErrorKind::Unauthorized,
        E::InvalidPath { .. } => StoreErrorKind::Invalid,
        E::NotImplemented { .. } | E::NotSupported { .. } => StoreErrorKind::Other,
        E::NotFound { .. } => StoreErrorKind::NotFound,
        _ => match (call, http_kind(&error)) {
            // Refused before a byte was sent: the write did not apply.
            (_, Some(object_store::client::HttpErrorKind::Connect)) => StoreErrorKind::Unavailable,
            (Call::Read, _) => StoreErrorKind::Unavailable,
            // A timeout, a dropped connection, or an error status whose
            // meaning object_store does not expose: the write may have applied.
            (Call::Write, _) => StoreErrorKind::Ambiguous,
        },
    };
    let hint = match kind {
        StoreErrorKind::Unauthorized => {
            "; the credentials need s3:GetObject, s3:PutObject and s3:ListBucket (or the service's equivalents) on the lock prefix"
        }
        StoreErrorKind::Other => {
            "; this object store cannot make the conditional writes locks need"
        }
        StoreErrorKind::NotFound => "; does the bucket exist?",
        _ => "",
    };
    StoreError::new(kind, format!("{what}: {}{hint}", first_line(&error))).with_source(error)
}

/// How the HTTP exchange failed, when it failed below HTTP.
fn http_kind(error: &object_store::Error) -> Option<object_store::client::HttpErrorKind> {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(error) = next {
        if let Some(http) = error.downcast_ref::<object_store::client::HttpError>() {
            return Some(http.kind());
        }
        next = error.source();
    }
    None
}

/// The first layer of `error`'s message (the rest stays in the source chain).
fn first_line(error: &object_store::Error) -> String {
    use object_store::Error as E;
    match error {
        E::Generic { store, .. } => format!("{store} request failed"),
        E::NotFound { path, .. } => format!("{path} not found"),
        E::PermissionDenied { path, .. } => format!("permission denied on {path}"),
        E::Unauthenticated { path, .. } => format!("not authenticated for {path}"),
        E::NotImplemented {
            operation,
            implementer,
        } => {
            format!("{implementer} does not implement {operation}")
        }
        E::NotSupported { .. } => "operation not supported".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn generic() -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: "500 Internal Error".into(),
        }
    }

    #[test]
    fn failures_are_classified_by_what_the_call_was() {
        let cases = [
            (Call::Read, generic(), StoreErrorKind::Unavailable),
            (Call::Write, generic(), StoreErrorKind::Ambiguous),
            (
                Call::Write,
                object_store::Error::PermissionDenied {
                    path: "p".into(),
                    source: "403".into(),
                },
                StoreErrorKind::Unauthorized,
            ),
            (
                Call::Write,
                object_store::Error::NotImplemented {
                    operation: "put_opts".into(),
                    implementer: "LocalFileSystem".into(),
                },
                StoreErrorKind::Other,
            ),
            (
                Call::Read,
                object_store::Error::NotFound {
                    path: "bucket".into(),
                    source: "404".into(),
                },
                StoreErrorKind::NotFound,
            ),
        ];
        for (call, error, kind) in cases {
            let classified = classify(call, "put p", error);
            assert_eq!(classified.kind(), kind, "{classified}");
            assert!(classified.message().starts_with("put p: "), "{classified}");
            assert!(classified.source().is_some());
        }
    }

    #[test]
    fn messages_name_the_failure_and_what_to_do() {
        let invalid = object_store::Error::InvalidPath {
            source: object_store::path::Error::EmptySegment {
                path: "a//b".into(),
            },
        };
        let cases = [
            (
                generic(),
                StoreErrorKind::Ambiguous,
                "put p: S3 request failed",
            ),
            (
                object_store::Error::PermissionDenied {
                    path: "p".into(),
                    source: "403".into(),
                },
                StoreErrorKind::Unauthorized,
                "put p: permission denied on p; the credentials need s3:GetObject",
            ),
            (
                object_store::Error::NotImplemented {
                    operation: "put_opts".into(),
                    implementer: "LocalFileSystem".into(),
                },
                StoreErrorKind::Other,
                "put p: LocalFileSystem does not implement put_opts; this object store cannot make the conditional writes",
            ),
            (invalid, StoreErrorKind::Invalid, "put p: Encountered"),
            (
                object_store::Error::NotFound {
                    path: "bucket".into(),
                    source: "404".into(),
                },
                StoreErrorKind::NotFound,
                "put p: bucket not found; does the bucket exist?",
            ),
        ];
        for (error, kind, says) in cases {
            let classified = classify(Call::Write, "put p", error);
            assert_eq!(classified.kind(), kind, "{classified}");
            assert!(classified.message().starts_with(says), "{classified}");
        }
    }
}
