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
//! | `AccessDeniedException`, `UnrecognizedClientException`, bad signature or token (and the IAM/STS spellings `AccessDenied`, `InvalidClientTokenId`, `SignatureDoesNotMatch`, `ExpiredToken`) | `Unauthorized` |
//! | HTTP 401 or 403 without a DynamoDB error code | `Unauthorized`; the code and message are read from the body when it is a query-protocol XML error (`<Code>`, `<Message>`) |
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
        _ if auth_problem(code).is_some() => StoreErrorKind::Unauthorized,
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

/// What an authentication or authorization error code says is wrong, in
/// DynamoDB's JSON spelling or the IAM/STS (query protocol) one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AuthProblem {
    /// The access key (or the session token that goes with it) is not known.
    UnknownKey,
    /// The signature does not match: the wrong secret key, or a bad clock.
    Signature,
    /// The session token has expired.
    Expired,
    /// The credentials are valid; the IAM policy does not allow the call.
    Denied,
    /// Refused, with no more said.
    Other,
}

fn auth_problem(code: &str) -> Option<AuthProblem> {
    Some(match code {
        "UnrecognizedClientException"
        | "InvalidClientTokenId"
        | "MissingAuthenticationTokenException"
        | "MissingAuthenticationToken" => AuthProblem::UnknownKey,
        "InvalidSignatureException" | "SignatureDoesNotMatch" | "IncompleteSignatureException" => {
            AuthProblem::Signature
        }
        "ExpiredTokenException" | "ExpiredToken" => AuthProblem::Expired,
        "AccessDeniedException" | "AccessDenied" => AuthProblem::Denied,
        "NotAuthorized" | "AuthFailure" => AuthProblem::Other,
        _ => return None,
    })
}

/// The `<Code>` and `<Message>` of a query-protocol XML error body (what IAM,
/// STS and emulators send; DynamoDB itself answers in JSON). Not an XML
/// parser: the first element of each name, with the five predefined entities
/// decoded.
fn xml_error(body: &[u8]) -> Option<(String, Option<String>)> {
    let body = std::str::from_utf8(body).ok()?.trim_start();
    if !body.starts_with('<') {
        return None;
    }
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = body.find(&open)? + open.len();
        let end = start + body[start..].find(&format!("</{name}>"))?;
        let text = body[start..end]
            .trim()
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&");
        // A message is one line in ours; a body may hold anything.
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let text = match text.char_indices().nth(300) {
            Some((cut, _)) => format!("{}...", &text[..cut]),
            None => text,
        };
        (!text.is_empty()).then_some(text)
    };
    let code = element("Code")?;
    // A code is one word; anything else is not an error document we know.
    if code.contains(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '#'))) {
        return None;
    }
    Some((code, element("Message")))
}

/// A service error's code and message: the SDK's, or for an HTTP 401/403
/// without one, those of an XML error body (which the DynamoDB client cannot
/// parse). The flag says they came from the body.
fn service_code(
    inner: &impl ProvideErrorMetadata,
    raw: &HttpResponse,
) -> (Option<String>, Option<String>, bool) {
    let status = raw.status().as_u16();
    if inner.code().is_none()
        && (status == 401 || status == 403)
        && let Some((code, message)) = raw.body().bytes().and_then(xml_error)
    {
        return (Some(code), message, true);
    }
    (
        inner.code().map(str::to_owned),
        inner.message().map(str::to_owned),
        false,
    )
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
///
/// The SDK's own error types cannot say this: its connector reports a refused
/// connection and a connection reset after sending alike (`ConnectorError`
/// kind "io"), and the field that would record "never connected" is private and
/// never set. Its connector itself tells them apart with hyper-util's
/// `is_connect()`, as this does (the closed-port test guards the pairing of
/// versions). A connect *timeout* is reported like a read timeout and stays
/// ambiguous for a write: conservative, and short (the connect timeout).
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
            classify_service(
                service_code(service.err(), service.raw()).0.as_deref(),
                status,
                access,
            )
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
            let status = service.raw().status().as_u16();
            // A code read from the body is the HTTP status's: say which.
            let (code, message, from_body) = service_code(service.err(), service.raw());
            let code = code.map(|code| match from_body {
                true => format!("HTTP {status} {code}"),
                false => code,
            });
            match (code, message) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code,
                (None, _) if status == 401 || status == 403 => format!(
                    "HTTP {status} without an error code: a proxy in the way, or an endpoint URL that is not DynamoDB?"
                ),
                _ => format!(
                    "HTTP {status} without a DynamoDB error: is the endpoint URL a DynamoDB endpoint?"
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
        StoreErrorKind::Unauthorized => {
            let problem = match err {
                SdkError::ServiceError(service) => service_code(service.err(), service.raw())
                    .0
                    .and_then(|code| auth_problem(code.rsplit('#').next().unwrap_or(&code))),
                _ => None,
            };
            unauthorized_message(problem, operation, table, &detail)
        }
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

/// The IAM actions the store's lock operations call (acquire, heartbeat,
/// release, reads, listings): the first policy of docs/dynamodb.md.
/// `tests/iam_policy.rs` checks this list, and the policy, against the SDK
/// calls this crate makes.
const ACTIONS: &str = "GetItem, UpdateItem, DeleteItem, Query, Scan and DescribeTable";

/// The IAM actions `create_table` and `validate_table` call: the second policy
/// of docs/dynamodb.md (checked the same way).
const TABLE_ACTIONS: &str = "CreateTable, UpdateTimeToLive, DescribeTable and DescribeTimeToLive";

/// What to allow after `operation` was refused: a table-management call needs
/// the table actions, `DeleteTable` only itself, anything else the lock
/// operations' actions.
fn actions_for(operation: &str) -> &'static str {
    match operation {
        "CreateTable" | "UpdateTimeToLive" | "DescribeTable" | "DescribeTimeToLive" => {
            TABLE_ACTIONS
        }
        "DeleteTable" => "DeleteTable",
        _ => ACTIONS,
    }
}

/// What was refused, why, and what to set or allow, by what the code says.
fn unauthorized_message(
    problem: Option<AuthProblem>,
    operation: &str,
    table: &str,
    detail: &str,
) -> String {
    let actions = actions_for(operation);
    match problem {
        Some(AuthProblem::UnknownKey) => format!(
            "{operation} on DynamoDB table {table:?} was refused: the credentials are not recognised ({detail}). \
             Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to a valid key pair and AWS_SESSION_TOKEN \
             only with the temporary credentials it was issued with (unset it for a long-term key), \
             or choose a profile with AWS_PROFILE"
        ),
        Some(AuthProblem::Signature) => format!(
            "{operation} on DynamoDB table {table:?} was refused: the request signature does not match ({detail}). \
             Set AWS_SECRET_ACCESS_KEY (or the profile's aws_secret_access_key) to the secret of the access key in use, \
             and check that this host's clock is right"
        ),
        Some(AuthProblem::Expired) => format!(
            "{operation} on DynamoDB table {table:?} was refused: the session token has expired ({detail}). \
             Renew the temporary credentials (`aws sso login`, assume the role again) and set AWS_SESSION_TOKEN \
             with them, or choose a profile with AWS_PROFILE that renews them"
        ),
        Some(AuthProblem::Denied) => format!(
            "{operation} on DynamoDB table {table:?} was refused by the IAM policy ({detail}). \
             Allow {actions} on the table to the identity in use (see docs/dynamodb.md)"
        ),
        Some(AuthProblem::Other) | None => format!(
            "{operation} on DynamoDB table {table:?} was refused for lack of valid credentials or permissions ({detail}). \
             Check the credentials (environment, profile, role) and that the IAM policy allows \
             {actions} on the table (see docs/dynamodb.md)"
        ),
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
    #![allow(clippy::unwrap_used)]
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
    fn identity_and_signing_codes_are_unauthorized_in_either_spelling() {
        for (code, problem) in [
            ("UnrecognizedClientException", AuthProblem::UnknownKey),
            ("InvalidClientTokenId", AuthProblem::UnknownKey),
            (
                "MissingAuthenticationTokenException",
                AuthProblem::UnknownKey,
            ),
            ("InvalidSignatureException", AuthProblem::Signature),
            ("SignatureDoesNotMatch", AuthProblem::Signature),
            ("IncompleteSignatureException", AuthProblem::Signature),
            ("ExpiredTokenException", AuthProblem::Expired),
            ("ExpiredToken", AuthProblem::Expired),
            ("AccessDeniedException", AuthProblem::Denied),
            ("AccessDenied", AuthProblem::Denied),
            ("NotAuthorized", AuthProblem::Other),
        ] {
            assert_eq!(auth_problem(code), Some(problem), "{code}");
            for status in [400, 403] {
                for access in [Access::Read, Access::Write] {
                    assert_eq!(
                        classify_service(Some(code), status, access),
                        StoreErrorKind::Unauthorized,
                        "{code} {status}"
                    );
                }
            }
            let prefixed = format!("com.amazonaws.dynamodb.v20120810#{code}");
            assert_eq!(
                classify_service(Some(&prefixed), 400, Access::Write),
                StoreErrorKind::Unauthorized
            );
        }
        assert_eq!(auth_problem("ValidationException"), None);
        // No code at all: the status decides.
        assert_eq!(
            classify_service(None, 403, Access::Write),
            StoreErrorKind::Unauthorized
        );
        assert_eq!(
            classify_service(None, 401, Access::Read),
            StoreErrorKind::Unauthorized
        );
    }

    /// What moto (and IAM, STS) answer a refused request with.
    const MOTO_403: &str = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<ErrorResponse><Errors><Error>\
        <Code>InvalidClientTokenId</Code><Message>The security token included in the request is invalid.</Message>\
        <Type>Sender</Type></Error></Errors></ErrorResponse>";

    #[test]
    fn the_code_and_message_of_an_xml_error_body() {
        assert_eq!(
            xml_error(MOTO_403.as_bytes()),
            Some((
                "InvalidClientTokenId".into(),
                Some("The security token included in the request is invalid.".into())
            ))
        );
        // STS's layout, entities, a message over several lines.
        let sts = "  <ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n<Error>\
            <Type>Sender</Type><Code>AccessDenied</Code>\n<Message>User: arn:aws:iam::1:user/a &amp; b\n\
            is not authorized to perform: dynamodb:UpdateItem &lt;here&gt;</Message></Error></ErrorResponse>";
        assert_eq!(
            xml_error(sts.as_bytes()),
            Some((
                "AccessDenied".into(),
                Some(
                    "User: arn:aws:iam::1:user/a & b is not authorized to perform: dynamodb:UpdateItem <here>"
                        .into()
                )
            ))
        );
        assert_eq!(
            xml_error(b"<Error><Code>AccessDenied</Code></Error>"),
            Some(("AccessDenied".into(), None))
        );
        // A long message is cut.
        let long = format!(
            "<Code>AccessDenied</Code><Message>{}</Message>",
            "x".repeat(5000)
        );
        let (_, message) = xml_error(long.as_bytes()).unwrap();
        assert_eq!(message.unwrap().chars().count(), 303);
        // Not an error document: JSON, HTML, a code that is not a word, no code.
        for body in [
            r#"{"__type":"AccessDeniedException","message":"no"}"#,
            "<html><body><h1>403 Forbidden</h1></body></html>",
            "<Error><Code>Access denied, go away</Code></Error>",
            "<Error><Code></Code></Error>",
            "<Error><Code>AccessDenied",
            "",
        ] {
            assert_eq!(xml_error(body.as_bytes()), None, "{body}");
        }
        assert_eq!(xml_error(&[0xff, 0xfe, b'<']), None);
    }

    fn refused(status: u16, body: &str) -> StoreError {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        use aws_smithy_types::error::ErrorMetadata;
        // What the client makes of a body it cannot parse: no code, no message.
        let err = UpdateItemError::generic(ErrorMetadata::builder().build());
        let raw = HttpResponse::new(
            status.try_into().unwrap(),
            aws_smithy_types::body::SdkBody::from(body),
        );
        let layout = Layout::native();
        let ctx = Context {
            operation: "UpdateItem",
            table: "locks",
            layout: &layout,
        };
        map_sdk_error(SdkError::service_error(err, raw), Access::Write, ctx)
    }

    #[test]
    fn a_403_with_an_xml_error_says_its_code_and_what_to_set() {
        let error = refused(403, MOTO_403);
        assert_eq!(error.kind(), StoreErrorKind::Unauthorized);
        assert!(!error.is_retryable() && !error.is_ambiguous());
        let message = error.message();
        assert!(
            message.contains(
                "(HTTP 403 InvalidClientTokenId: The security token included in the request is invalid.)"
            ),
            "{message}"
        );
        assert!(message.contains("AWS_ACCESS_KEY_ID"), "{message}");
        assert!(!message.contains("DynamoDB endpoint"), "{message}");

        let signature = MOTO_403
            .replace("InvalidClientTokenId", "SignatureDoesNotMatch")
            .replace("The security token", "The signature");
        let message = refused(403, &signature).message().to_owned();
        assert!(
            message.contains("HTTP 403 SignatureDoesNotMatch")
                && message.contains("AWS_SECRET_ACCESS_KEY"),
            "{message}"
        );
        let denied = MOTO_403.replace("InvalidClientTokenId", "AccessDenied");
        let message = refused(403, &denied).message().to_owned();
        assert!(
            message.contains("HTTP 403 AccessDenied") && message.contains("IAM policy"),
            "{message}"
        );

        // A 403 whose body says nothing: still Unauthorized, and the message
        // does not pretend to know the code.
        let error = refused(403, "<html><body>Forbidden</body></html>");
        assert_eq!(error.kind(), StoreErrorKind::Unauthorized);
        assert!(
            error.message().contains("HTTP 403 without an error code"),
            "{}",
            error.message()
        );
        // Only 401/403 bodies are read: a 501 stays "not DynamoDB".
        let error = refused(
            501,
            &MOTO_403.replace("InvalidClientTokenId", "NotImplemented"),
        );
        assert_eq!(error.kind(), StoreErrorKind::Other);
        assert!(
            error
                .message()
                .contains("is the endpoint URL a DynamoDB endpoint"),
            "{}",
            error.message()
        );
    }

    #[test]
    fn a_denied_call_names_the_actions_of_its_policy() {
        for lock_call in [
            "GetItem",
            "UpdateItem",
            "DeleteItem (release)",
            "Query",
            "Scan",
        ] {
            assert_eq!(actions_for(lock_call), ACTIONS, "{lock_call}");
        }
        for table_call in [
            "CreateTable",
            "UpdateTimeToLive",
            "DescribeTable",
            "DescribeTimeToLive",
        ] {
            assert_eq!(actions_for(table_call), TABLE_ACTIONS, "{table_call}");
        }
        assert_eq!(actions_for("DeleteTable"), "DeleteTable");
        let message = unauthorized_message(
            Some(AuthProblem::Denied),
            "CreateTable",
            "locks",
            "HTTP 400 AccessDeniedException",
        );
        assert!(
            message.contains(
                "Allow CreateTable, UpdateTimeToLive, DescribeTable and DescribeTimeToLive on the table"
            ),
            "{message}"
        );
        let message = unauthorized_message(None, "UpdateItem", "locks", "HTTP 403");
        assert!(
            message.contains(
                "allows GetItem, UpdateItem, DeleteItem, Query, Scan and DescribeTable on the table"
            ),
            "{message}"
        );
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
