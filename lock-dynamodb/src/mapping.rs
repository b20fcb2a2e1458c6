//! How DynamoDB and SDK errors become [`StoreError`]s the lock client acts on.
//!
//! | DynamoDB / SDK | kind |
//! | --- | --- |
//! | `ConditionalCheckFailedException` | not an error: [`Outcome::Rejected`](lock_core::Outcome) with the current item |
//! | `ProvisionedThroughputExceededException`, `ThrottlingException`, `RequestLimitExceeded`, `LimitExceededException` | `Throttled` |
//! | `TransactionConflictException`, `ReplicatedWriteConflictException` | `Unavailable` (the write was refused, not applied) |
//! | HTTP 501 or 505 without a DynamoDB error code (a server that is not DynamoDB) | `Other`: not retried |
//! | HTTP 5xx (`InternalServerError`, `ServiceUnavailable`, ...) | writes: `Ambiguous`; reads: `Unavailable` |
//! | operation or attempt timeout, connection reset or a broken response after the request was sent | writes: `Ambiguous`; reads: `Unavailable` |
//! | failure while connecting (refused, DNS, connect timeout, TLS handshake) | `Unavailable` (nothing was sent) |
//! | `ResourceNotFoundException` | `NotFound`, naming the table and how to create it |
//! | `AccessDeniedException`, `UnrecognizedClientException`, bad signature or token | `Unauthorized` |
//! | credentials that could not be loaded (none configured, expired SSO token, failing `credential_process`), in any SDK error variant | `Unauthorized`: nothing was sent |
//! | `ValidationException`, `ItemCollectionSizeLimitExceededException`, `SerializationException` | `Invalid` |
//! | anything else | `Other` |
//!
//! Every message names the operation and the table and says in a few words what
//! the SDK reported (a service error's code and message); the SDK error itself,
//! with its whole context, is kept as the source, so `Display` stays one line
//! per layer and never carries raw HTTP.

use std::error::Error as StdError;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use lock_core::{StoreError, StoreErrorKind};

use crate::Layout;

/// Whether a failed call could have changed the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Access {
    /// A read (`GetItem`, `Scan`, `Query`, `DescribeTable`): never half-applied.
    Read,
    /// A conditional write: a failure after sending may have applied.
    Write,
}

/// Names the call in messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Context<'a> {
    pub(crate) operation: &'static str,
    pub(crate) table: &'a str,
    pub(crate) layout: &'a Layout,
}

/// Classify a service error by its code and HTTP status.
pub(crate) fn classify_service(code: Option<&str>, status: u16, access: Access) -> StoreErrorKind {
    let code = code.unwrap_or_default();
    // Some codes come with a namespace prefix (`com.amazonaws.dynamodb.v20120810#...`).
    let code = code.rsplit('#').next().unwrap_or(code);
    match code {
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "Throttling"
        | "RequestLimitExceeded"
        | "LimitExceededException" => StoreErrorKind::Throttled,
        "TransactionConflictException" | "ReplicatedWriteConflictException" => {
            StoreErrorKind::Unavailable
        }
        "ResourceNotFoundException" => StoreErrorKind::NotFound,
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "MissingAuthenticationToken"
        | "ExpiredTokenException"
        | "InvalidClientTokenId"
        | "NotAuthorized"
        | "AuthFailure" => StoreErrorKind::Unauthorized,
        "ValidationException"
        | "ItemCollectionSizeLimitExceededException"
        | "SerializationException" => StoreErrorKind::Invalid,
        // "Not implemented" / "version not supported": the server does not
        // speak this API at all (it is not DynamoDB); nothing was applied and
        // asking again will not help.
        "" if status == 501 || status == 505 => StoreErrorKind::Other,
        _ if status >= 500 => transport_kind(access, false),
        _ if status == 401 || status == 403 => StoreErrorKind::Unauthorized,
        _ => StoreErrorKind::Other,
    }
}

/// The kind of a failure that is not a decided service error.
fn transport_kind(access: Access, before_send: bool) -> StoreErrorKind {
    match access {
        Access::Read => StoreErrorKind::Unavailable,
        Access::Write if before_send => StoreErrorKind::Unavailable,
        Access::Write => StoreErrorKind::Ambiguous,
    }
}

/// True when the error chain shows the connection was never established, so the
/// request cannot have been sent.
fn failed_before_sending(err: &(dyn StdError + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(e) = err.downcast_ref::<hyper_util::client::legacy::Error>()
            && e.is_connect()
        {
            return true;
        }
        if let Some(e) = err.downcast_ref::<std::io::Error>()
            && matches!(
                e.kind(),
                ErrorKind::ConnectionRefused
                    | ErrorKind::AddrNotAvailable
                    | ErrorKind::NetworkUnreachable
                    | ErrorKind::HostUnreachable
            )
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// True when credentials could not be loaded.
fn is_credentials_error(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(err) = next {
        if err
            .downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
            .is_some()
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// Map an SDK error (other than a conditional check failure, which the caller
/// handles) to a [`StoreError`].
pub(crate) fn map_sdk_error<E>(
    err: SdkError<E, HttpResponse>,
    access: Access,
    ctx: Context<'_>,
) -> StoreError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    // Credentials that could not be loaded (none configured, an expired SSO
    // token, a failing credential_process) stop the request before it is
    // signed, whatever variant the SDK wraps them in (a dispatch failure,
    // usually): never sent, never worth retrying.
    if is_credentials_error(&err) {
        let message = credentials_message(&err, ctx);
        return StoreError::new(StoreErrorKind::Unauthorized, message).with_source(err);
    }
    let kind = match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            classify_service(service.err().code(), status, access)
        }
        SdkError::ConstructionFailure(_) => StoreErrorKind::Other,
        SdkError::DispatchFailure(dispatch) => {
            if dispatch.is_user() {
                StoreErrorKind::Other
            } else {
                transport_kind(access, failed_before_sending(&err))
            }
        }
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => transport_kind(access, false),
        _ => transport_kind(access, false),
    };
    let message = message_for(kind, &err, access, ctx);
    StoreError::new(kind, message).with_source(err)
}

/// The SDK error in a few words: a service error's code and message, otherwise
/// what failed ("dispatch failure", "timeout", ...). The error itself, with its
/// whole context, stays in the source chain (and in `Debug`), so `Display` never
/// carries raw HTTP.
fn summary<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match err {
        SdkError::ServiceError(service) => {
            let inner = service.err();
            match (inner.code(), inner.message()) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code.to_owned(),
                _ => format!(
                    "HTTP {} without a DynamoDB error: is the endpoint URL a DynamoDB endpoint?",
                    service.raw().status().as_u16()
                ),
            }
        }
        other => other.to_string(),
    }
}

/// What to set when no credentials could be loaded: the first line of the
/// provider's own explanation (the chain holds the rest).
fn credentials_message(err: &(dyn StdError + 'static), ctx: Context<'_>) -> String {
    let mut reason = None;
    let mut next = Some(err);
    while let Some(err) = next {
        if err
            .downcast_ref::<aws_credential_types::provider::error::CredentialsError>()
            .is_some()
        {
            reason = Some(err.to_string());
            break;
        }
        next = err.source();
    }
    let reason = reason.unwrap_or_default();
    let reason = reason.lines().next().unwrap_or_default();
    format!(
        "{} on DynamoDB table {:?}: no AWS credentials could be loaded ({reason}). \
         Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, choose a profile with AWS_PROFILE \
         (for SSO profiles, run `aws sso login` first), or run where an instance or task role applies",
        ctx.operation, ctx.table
    )
}

fn message_for<E>(
    kind: StoreErrorKind,
    err: &SdkError<E, HttpResponse>,
    access: Access,
    ctx: Context<'_>,
) -> String
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    let Context {
        operation, table, ..
    } = ctx;
    let detail = summary(err);
    match kind {
        StoreErrorKind::NotFound => format!(
            "{operation}: DynamoDB table {table:?} was not found ({detail}). {}",
            create_table_hint(table, ctx.layout)
        ),
        StoreErrorKind::Unauthorized => format!(
            "{operation} on DynamoDB table {table:?} was refused for lack of valid credentials or permissions ({detail}). \
             Check the credentials (environment, profile, role) and that the IAM policy allows \
             GetItem, PutItem, UpdateItem, DeleteItem, Scan, Query, DescribeTable and DescribeTimeToLive on the table \
             (see docs/dynamodb.md)"
        ),
        StoreErrorKind::Throttled => format!(
            "{operation} on DynamoDB table {table:?} was throttled; nothing was applied ({detail})"
        ),
        StoreErrorKind::Ambiguous => format!(
            "{operation} on DynamoDB table {table:?} failed after the request was sent; the write may or may not have applied ({detail})"
        ),
        StoreErrorKind::Unavailable if access == Access::Write => format!(
            "{operation} on DynamoDB table {table:?} failed before the write was applied ({detail})"
        ),
        StoreErrorKind::Unavailable => {
            format!("{operation} on DynamoDB table {table:?} failed ({detail})")
        }
        StoreErrorKind::Invalid => {
            format!("DynamoDB refused {operation} on table {table:?} as invalid ({detail})")
        }
        _ => format!("{operation} on DynamoDB table {table:?} failed ({detail})"),
    }
}

/// How to create the table for `layout`, for messages.
pub(crate) fn create_table_hint(table: &str, layout: &Layout) -> String {
    let mut definitions = format!("AttributeName={},AttributeType=S", layout.partition_key());
    let mut schema = format!("AttributeName={},KeyType=HASH", layout.partition_key());
    if let Some(sort) = layout.sort_key() {
        definitions.push_str(&format!(" AttributeName={sort},AttributeType=S"));
        schema.push_str(&format!(" AttributeName={sort},KeyType=RANGE"));
    }
    format!(
        "Create it with DynamoDbStore::create_table, or: aws dynamodb create-table --table-name {table} \
         --attribute-definitions {definitions} --key-schema {schema} --billing-mode PAY_PER_REQUEST \
         (layout {}; see docs/dynamodb.md)",
        layout.preset_name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_codes() {
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
            "com.amazonaws.dynamodb.v20120810#ThrottlingException",
        ] {
            assert_eq!(
                classify_service(Some(code), 400, Access::Write),
                StoreErrorKind::Throttled,
                "{code}"
            );
        }
    }

    #[test]
    fn server_errors_are_ambiguous_for_writes_only() {
        assert_eq!(
            classify_service(Some("InternalServerError"), 500, Access::Write),
            StoreErrorKind::Ambiguous
        );
        assert_eq!(
            classify_service(None, 503, Access::Write),
            StoreErrorKind::Ambiguous
        );
        assert_eq!(
            classify_service(Some("InternalServerError"), 500, Access::Read),
            StoreErrorKind::Unavailable
        );
    }

    #[test]
    fn a_server_that_does_not_implement_the_api_is_not_retried() {
        for status in [501, 505] {
            assert_eq!(
                classify_service(None, status, Access::Write),
                StoreErrorKind::Other
            );
            assert_eq!(
                classify_service(None, status, Access::Read),
                StoreErrorKind::Other
            );
        }
        // A gateway's 502/503/504 may come after the write reached DynamoDB.
        assert_eq!(
            classify_service(None, 504, Access::Write),
            StoreErrorKind::Ambiguous
        );
    }

    #[test]
    fn other_codes() {
        let kind = |code| classify_service(Some(code), 400, Access::Write);
        assert_eq!(kind("ResourceNotFoundException"), StoreErrorKind::NotFound);
        assert_eq!(kind("AccessDeniedException"), StoreErrorKind::Unauthorized);
        assert_eq!(
            kind("UnrecognizedClientException"),
            StoreErrorKind::Unauthorized
        );
        assert_eq!(kind("ValidationException"), StoreErrorKind::Invalid);
        assert_eq!(
            kind("TransactionConflictException"),
            StoreErrorKind::Unavailable
        );
        assert_eq!(kind("SomethingNew"), StoreErrorKind::Other);
    }

    #[test]
    fn hint_names_table_and_keys() {
        let hint = create_table_hint("Locks", &Layout::python_dynamodb_lock());
        assert!(hint.contains("--table-name Locks"), "{hint}");
        assert!(
            hint.contains("AttributeName=sort_key,KeyType=RANGE"),
            "{hint}"
        );
    }
}
