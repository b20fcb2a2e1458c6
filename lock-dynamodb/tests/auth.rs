//! Identity and signing failures against a server that checks every request:
//! the second moto server of `./scripts/test` (`moto_start_auth` in
//! scripts/lib/moto.sh, set up by scripts/lib/moto_auth_setup.py), which checks
//! the access key, the session token, the SigV4 signature and the IAM policy.
//!
//! Each refusal must be `Unauthorized`, not retryable, not ambiguous, one
//! request (nothing retried, by the SDK or the store), answered within a
//! second, with a message naming the code and saying what to set; and a
//! refused write leaves the table as it was.
//!
//! moto answers a refusal as IAM does, HTTP 403 with an XML body
//! (`InvalidClientTokenId`, `SignatureDoesNotMatch`, `AccessDenied`), where
//! DynamoDB answers HTTP 400 with JSON (`UnrecognizedClientException`,
//! `InvalidSignatureException`, `AccessDeniedException`); the JSON codes are
//! covered by the unit tests of `mapping.rs` and by an injected
//! `AccessDeniedException` in tests/dynamodb.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::Credentials;
use lock_core::{
    AcquireOptions, ConditionalStore, Expect, FenceUpdate, LockClient, LockError, LockKey,
    NewRecord, Outcome, Rvn, StoreError, StoreErrorKind,
};
use lock_dynamodb::{DynamoDbStore, Layout, TableOptions};
use support::CallCounter;

/// A refusal must come back within this.
const AT_ONCE: Duration = Duration::from_secs(1);

/// An access key: id, secret, session token.
#[derive(Clone, Debug)]
struct Key {
    id: String,
    secret: String,
    token: Option<String>,
}

impl Key {
    fn new(id: &str, secret: &str, token: Option<&str>) -> Self {
        Key {
            id: id.into(),
            secret: secret.into(),
            token: token.map(Into::into),
        }
    }
    fn with_secret(&self, secret: &str) -> Self {
        Key {
            secret: secret.into(),
            ..self.clone()
        }
    }
    fn with_token(&self, token: Option<&str>) -> Self {
        Key {
            token: token.map(Into::into),
            ..self.clone()
        }
    }
}

/// The server that checks credentials, and the keys made on it.
struct Server {
    endpoint: String,
    /// An IAM user's key, allowed `dynamodb:*`.
    good: Key,
    /// An IAM user's key, allowed to read but denied UpdateItem, PutItem and
    /// DeleteItem.
    denied: Key,
    /// An assumed role's temporary key and session token, allowed `dynamodb:*`.
    role: Key,
}

/// From `LOCK_DYNAMODB_AUTH_ENDPOINT` and `LOCK_AUTH_*` (set by
/// `./scripts/test`); as `support::endpoint`, a test without them fails and
/// says how to run it, unless `LOCK_DYNAMODB_SKIP=1`.
fn server() -> Option<Server> {
    let endpoint = match std::env::var("LOCK_DYNAMODB_AUTH_ENDPOINT") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var("LOCK_DYNAMODB_SKIP").as_deref() == Ok("1") => {
            eprintln!(
                "SKIPPED: LOCK_DYNAMODB_SKIP=1 and no LOCK_DYNAMODB_AUTH_ENDPOINT; this DynamoDB test did not run"
            );
            return None;
        }
        _ => panic!(
            "LOCK_DYNAMODB_AUTH_ENDPOINT is not set. These tests run against a moto server that checks \
             credentials: run ./scripts/test, which starts it (moto_start_auth in scripts/lib/moto.sh) \
             and sets the variable and the LOCK_AUTH_* keys (or set LOCK_DYNAMODB_SKIP=1 to skip them explicitly)."
        ),
    };
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set; moto_start_auth (scripts/lib/moto.sh) sets it with LOCK_DYNAMODB_AUTH_ENDPOINT")
        })
    };
    Some(Server {
        endpoint,
        good: Key::new(
            &var("LOCK_AUTH_GOOD_KEY"),
            &var("LOCK_AUTH_GOOD_SECRET"),
            None,
        ),
        denied: Key::new(
            &var("LOCK_AUTH_DENIED_KEY"),
            &var("LOCK_AUTH_DENIED_SECRET"),
            None,
        ),
        role: Key::new(
            &var("LOCK_AUTH_ROLE_KEY"),
            &var("LOCK_AUTH_ROLE_SECRET"),
            Some(&var("LOCK_AUTH_ROLE_TOKEN")),
        ),
    })
}

impl Server {
    /// A store on `table` signing with `key`, counting the requests it sends.
    fn store(&self, table: &str, key: &Key) -> (DynamoDbStore, CallCounter) {
        let counter = CallCounter::default();
        let credentials =
            Credentials::new(&key.id, &key.secret, key.token.clone(), None, "auth-tests");
        let store = DynamoDbStore::builder(table)
            .layout(Layout::native())
            .interceptor(counter.clone())
            .build_with_config(
                support::sdk_config(&self.endpoint).credentials_provider(credentials),
            )
            .expect("valid store configuration");
        (store, counter)
    }

    /// A fresh table, created with the good key; its store.
    async fn table(&self) -> DynamoDbStore {
        let (store, _) = self.store(&support::table_name("auth"), &self.good);
        store
            .create_table(TableOptions::default())
            .await
            .expect("the good key creates a table");
        store
    }
}

fn write(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(10),
        released: false,
        fence: FenceUpdate::Next,
        data: lock_core::DataUpdate::Keep,
        expires_at: None,
    }
}

/// Run `call`, returning its result and how long it took.
async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let result = call.await;
    (result, started.elapsed())
}

/// `result` is the refusal this file is about: `Unauthorized`, not retryable,
/// not ambiguous, within a second, after exactly the requests `calls` (one,
/// or for a store's first listing the `DescribeTable` of its key-schema check
/// and then the `Scan`: nothing retried), its message naming `code` and
/// containing each of `says`.
#[track_caller]
fn refused<T: std::fmt::Debug>(
    what: &str,
    (result, took): (Result<T, StoreError>, Duration),
    counter: &CallCounter,
    calls: &[&str],
    code: &str,
    says: &[&str],
) -> StoreError {
    let error = result.expect_err(what);
    let shown = error.to_string();
    eprintln!("{what}: refused in {took:?}: {shown}");
    assert_eq!(
        error.kind(),
        StoreErrorKind::Unauthorized,
        "{what}: {shown}"
    );
    assert!(!error.is_retryable(), "{what}: {shown}");
    assert!(!error.is_ambiguous(), "{what}: {shown}");
    assert!(took < AT_ONCE, "{what} took {took:?}: {shown}");
    assert_eq!(counter.calls(), calls, "{what}: nothing retried");
    counter.reset();
    assert!(
        shown.contains(&format!("HTTP 403 {code}: ")),
        "{what}: names the code: {shown}"
    );
    for part in says {
        assert!(shown.contains(part), "{what}: says {part:?}: {shown}");
    }
    // Not the message for an endpoint that is not DynamoDB.
    assert!(!shown.contains("DynamoDB endpoint"), "{what}: {shown}");
    error
}

/// A key the server refuses before looking at any policy is refused for
/// writes and reads alike, and writes nothing.
async fn refused_everywhere(server: &Server, key: &Key, what: &str, code: &str, says: &[&str]) {
    let good = server.table().await;
    let (store, counter) = server.store(good.table(), key);
    let job = LockKey::new("job");
    refused(
        &format!("{what}: UpdateItem"),
        timed(store.put(&job, Expect::Vacant, write("a"))).await,
        &counter,
        &["UpdateItem"],
        code,
        says,
    );
    refused(
        &format!("{what}: GetItem"),
        timed(store.get(&job)).await,
        &counter,
        &["GetItem"],
        code,
        says,
    );
    refused(
        &format!("{what}: Scan"),
        timed(store.list(None, None, 10)).await,
        &counter,
        &["DescribeTable", "Scan"],
        code,
        says,
    );
    assert_eq!(
        good.get(&job).await.unwrap(),
        None,
        "{what}: nothing written"
    );
}

#[tokio::test]
async fn the_good_keys_work() {
    // Before any refusal means anything: this server accepts the SDK's
    // signatures, for a long-term key and for temporary credentials.
    let Some(server) = server() else { return };
    let good = server.table().await;
    let job = LockKey::new("job");
    let record = match good.put(&job, Expect::Vacant, write("a")).await.unwrap() {
        Outcome::Applied(record) => record,
        other => panic!("{other:?}"),
    };
    assert_eq!(good.get(&job).await.unwrap().as_ref(), Some(&record));
    let (role, counter) = server.store(good.table(), &server.role);
    assert_eq!(role.get(&job).await.unwrap(), Some(record.clone()));
    let page = role.list(None, None, 10).await.unwrap();
    assert_eq!(page.records.len(), 1);
    assert!(matches!(
        role.delete(&job, Expect::Version(record.rvn.clone()))
            .await
            .unwrap(),
        Outcome::Applied(_)
    ));
    assert_eq!(
        counter.calls(),
        ["GetItem", "DescribeTable", "Scan", "DeleteItem"]
    );
    // The reader can read.
    let (reader, _) = server.store(good.table(), &server.denied);
    assert_eq!(reader.get(&job).await.unwrap(), None);
}

#[tokio::test]
async fn an_unknown_access_key_is_refused_at_once() {
    let Some(server) = server() else { return };
    // DynamoDB: UnrecognizedClientException.
    let unknown = Key::new("AKIAUNKNOWNUNKNOWN00", "no-such-secret", None);
    refused_everywhere(
        &server,
        &unknown,
        "unknown access key",
        "InvalidClientTokenId",
        &[
            "not recognised",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        ],
    )
    .await;
}

#[tokio::test]
async fn the_wrong_secret_is_refused_at_once() {
    let Some(server) = server() else { return };
    // DynamoDB: InvalidSignatureException.
    let says = ["signature does not match", "AWS_SECRET_ACCESS_KEY"];
    let wrong = server.good.with_secret("not-the-secret");
    refused_everywhere(
        &server,
        &wrong,
        "wrong secret",
        "SignatureDoesNotMatch",
        &says,
    )
    .await;
    let wrong = server.role.with_secret("not-the-secret");
    refused_everywhere(
        &server,
        &wrong,
        "temporary key, wrong secret",
        "SignatureDoesNotMatch",
        &says,
    )
    .await;
}

#[tokio::test]
async fn a_session_token_that_does_not_belong_to_the_key_is_refused_at_once() {
    let Some(server) = server() else { return };
    let says = ["not recognised", "AWS_SESSION_TOKEN"];
    // A long-term key sent with a session token (AWS_SESSION_TOKEN left over
    // from another identity).
    let stray = server.good.with_token(Some("left-over-session-token"));
    refused_everywhere(
        &server,
        &stray,
        "long-term key with a session token",
        "InvalidClientTokenId",
        &says,
    )
    .await;
    // Temporary credentials with another session's token, or none.
    let wrong = server.role.with_token(Some("another-session-token"));
    refused_everywhere(
        &server,
        &wrong,
        "temporary key, wrong token",
        "InvalidClientTokenId",
        &says,
    )
    .await;
    let missing = server.role.with_token(None);
    refused_everywhere(
        &server,
        &missing,
        "temporary key, no token",
        "InvalidClientTokenId",
        &says,
    )
    .await;
}

#[tokio::test]
async fn a_key_the_policy_denies_writes_is_refused_writes_and_reads_work() {
    let Some(server) = server() else { return };
    // DynamoDB: AccessDeniedException.
    let good = server.table().await;
    let (reader, counter) = server.store(good.table(), &server.denied);
    let says = ["IAM policy", "UpdateItem", "identity in use"];

    let vacant = LockKey::new("vacant");
    refused(
        "denied UpdateItem on a vacant key",
        timed(reader.put(&vacant, Expect::Vacant, write("reader"))).await,
        &counter,
        &["UpdateItem"],
        "AccessDenied",
        &says,
    );
    assert_eq!(good.get(&vacant).await.unwrap(), None, "nothing written");

    // A lock someone else holds: the reader sees it, and can neither take it
    // over nor delete it.
    let held = LockKey::new("held");
    let record = match good.put(&held, Expect::Vacant, write("a")).await.unwrap() {
        Outcome::Applied(record) => record,
        other => panic!("{other:?}"),
    };
    let (seen, took) = timed(reader.get(&held)).await;
    assert_eq!(seen.unwrap().as_ref(), Some(&record));
    assert!(took < AT_ONCE, "{took:?}");
    assert_eq!(reader.list(None, None, 10).await.unwrap().records.len(), 1);
    counter.reset();
    refused(
        "denied UpdateItem on a held key",
        timed(reader.put(&held, Expect::Version(record.rvn.clone()), write("reader"))).await,
        &counter,
        &["UpdateItem"],
        "AccessDenied",
        &says,
    );
    refused(
        "denied DeleteItem",
        timed(reader.delete(&held, Expect::Version(record.rvn.clone()))).await,
        &counter,
        &["DeleteItem"],
        "AccessDenied",
        &["IAM policy", "DeleteItem"],
    );
    assert_eq!(
        good.get(&held).await.unwrap().as_ref(),
        Some(&record),
        "the record is as it was"
    );
}

#[tokio::test]
async fn the_lock_client_fails_at_once_without_retrying() {
    let Some(server) = server() else { return };
    let good = server.table().await;
    let unknown = Key::new("AKIAUNKNOWNUNKNOWN00", "no-such-secret", None);
    for (what, key) in [
        ("unknown access key", unknown),
        ("wrong secret", server.good.with_secret("not-the-secret")),
        ("denied writes", server.denied.clone()),
    ] {
        let (store, counter) = server.store(good.table(), &key);
        let client = LockClient::builder(store)
            .owner("worker")
            .lease(Duration::from_secs(10))
            .build()
            .unwrap();
        // A single attempt, and an acquire with a wait budget: neither waits
        // or tries again.
        for (how, options) in [
            ("try_acquire", None),
            (
                "acquire with a 10 s budget",
                Some(AcquireOptions::new().wait(Duration::from_secs(10))),
            ),
        ] {
            let started = Instant::now();
            let error = match options {
                None => client
                    .try_acquire("job", AcquireOptions::new())
                    .await
                    .map(|_| ())
                    .unwrap_err(),
                Some(options) => client
                    .acquire("job", options)
                    .await
                    .map(|_| ())
                    .unwrap_err(),
            };
            let took = started.elapsed();
            let cause = std::error::Error::source(&error).map(ToString::to_string);
            eprintln!("{what}, {how}: failed in {took:?}: {error}: {cause:?}");
            assert!(!error.is_retryable(), "{what}, {how}: {error:?}");
            assert!(took < AT_ONCE, "{what}, {how} took {took:?}");
            match &error {
                LockError::Store { source, .. } => {
                    assert_eq!(source.kind(), StoreErrorKind::Unauthorized, "{source}")
                }
                other => panic!("{what}, {how}: {other:?}"),
            }
            assert_eq!(counter.calls(), ["UpdateItem"], "{what}, {how}");
            counter.reset();
        }
        client.shutdown().await.unwrap();
    }
    assert_eq!(good.get(&LockKey::new("job")).await.unwrap(), None);
}
