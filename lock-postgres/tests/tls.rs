//! TLS to the test cluster (`./scripts/test` starts it with `ssl = on`, a
//! throw-away certificate authority and a server certificate for the name
//! `localhost` only; `LOCK_POSTGRES_TLS_DIR` holds `ca.crt`, `other-ca.crt`,
//! and `client.crt`/`client.key` for the role `lock_cert`). The roles
//! `lock_tls` (password) and `lock_cert` (client certificate) may log in over
//! TLS only, so a login that works proves TLS was used. Each `sslmode` is
//! tried against a matching and a mismatching certificate, as libpq means it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::path::PathBuf;
use std::time::Duration;

use lock_core::AcquireOptions;
use lock_postgres::{PostgresStore, RootCertificates, SslMode};
use support::table_name;

/// The cluster's port and certificate directory, or `None` (with the skip
/// printed) when the PostgreSQL tests are skipped.
fn cluster() -> Option<(String, PathBuf)> {
    support::url()?;
    let port = std::env::var("LOCK_POSTGRES_PORT").expect("./scripts/test sets LOCK_POSTGRES_PORT");
    let dir =
        std::env::var("LOCK_POSTGRES_TLS_DIR").expect("./scripts/test sets LOCK_POSTGRES_TLS_DIR");
    Some((port, PathBuf::from(dir)))
}

/// Connect as `lock_tls` to `host` with these query parameters, and make a
/// table: `Ok` when it worked, the error's text otherwise.
async fn connect(host: &str, port: &str, query: &str) -> Result<(), String> {
    let url = format!("postgres://lock_tls:lock_tls@{host}:{port}/lock_test?{query}");
    try_store(PostgresStore::builder(table_name("tls")).build_from_url(&url)).await
}

async fn try_store(
    store: Result<PostgresStore, lock_postgres::StoreConfigError>,
) -> Result<(), String> {
    let store = store.map_err(|error| error.to_string())?;
    let made = tokio::time::timeout(Duration::from_secs(30), store.create_schema())
        .await
        .expect("a TLS failure is an error, not a hang");
    made.map_err(|error| {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    })
}

fn file(dir: &std::path::Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[tokio::test]
async fn each_sslmode_against_a_matching_and_a_mismatching_certificate() {
    let Some((port, dir)) = cluster() else {
        return;
    };
    let ca = file(&dir, "ca.crt");
    let other = file(&dir, "other-ca.crt");
    // (host, query, works, what the failure says)
    let cases = [
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            true,
            "",
        ),
        // The certificate is for `localhost`, not 127.0.0.1.
        (
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            false,
            "certificate",
        ),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={other}"),
            false,
            "certificate",
        ),
        // verify-ca checks the chain, not the name.
        (
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            true,
            "",
        ),
        (
            "localhost",
            format!("sslmode=verify-ca&sslrootcert={other}"),
            false,
            "certificate",
        ),
        // require encrypts whoever answers, unless given roots (then it checks
        // as verify-ca does).
        ("127.0.0.1", "sslmode=require".to_owned(), true, ""),
        (
            "127.0.0.1",
            format!("sslmode=require&sslrootcert={other}"),
            false,
            "certificate",
        ),
        (
            "127.0.0.1",
            format!("sslmode=require&sslrootcert={ca}"),
            true,
            "",
        ),
        // prefer: TLS when offered (lock_tls may log in with nothing else);
        // roots given are checked, never ignored.
        ("127.0.0.1", "sslmode=prefer".to_owned(), true, ""),
        (
            "127.0.0.1",
            format!("sslmode=prefer&sslrootcert={ca}"),
            true,
            "",
        ),
        (
            "127.0.0.1",
            format!("sslmode=prefer&sslrootcert={other}"),
            false,
            "certificate",
        ),
        ("127.0.0.1", String::new(), true, ""),
        // disable: refused by the server's hostssl-only rule for lock_tls.
        (
            "127.0.0.1",
            "sslmode=disable".to_owned(),
            false,
            "no encryption",
        ),
        // The system's roots do not know the test authority; with them a
        // mode that skips the host name check is refused (libpq's rule).
        (
            "localhost",
            "sslmode=verify-full&sslrootcert=system".to_owned(),
            false,
            "",
        ),
        ("localhost", "sslrootcert=system".to_owned(), false, ""),
        (
            "localhost",
            "sslmode=require&sslrootcert=system".to_owned(),
            false,
            "needs sslmode=verify-full",
        ),
    ];
    for (host, query, works, says) in cases {
        let result = connect(host, &port, &query).await;
        match (&result, works) {
            (Ok(()), true) => {}
            (Err(error), false) => assert!(
                error.to_lowercase().contains(says),
                "{host} ?{query}: {error:?} should say {says:?}"
            ),
            _ => panic!(
                "{host} ?{query}: expected {}, got {result:?}",
                if works { "a connection" } else { "a refusal" }
            ),
        }
    }
}

#[tokio::test]
async fn a_client_certificate_logs_in_where_only_certificates_may() {
    let Some((port, dir)) = cluster() else {
        return;
    };
    let base = format!(
        "postgres://lock_cert@localhost:{port}/lock_test?sslmode=verify-full&sslrootcert={}",
        file(&dir, "ca.crt")
    );
    let with = format!(
        "{base}&sslcert={}&sslkey={}",
        file(&dir, "client.crt"),
        file(&dir, "client.key")
    );
    let store = PostgresStore::builder(table_name("cert"))
        .build_from_url(&with)
        .unwrap();
    try_store(Ok(store.clone())).await.unwrap();
    // A lock through it, end to end.
    let client = support::client(store, "tls-client", Duration::from_secs(2));
    let guard = client.acquire("job", AcquireOptions::new()).await.unwrap();
    guard.release().await.unwrap();
    client.shutdown().await.unwrap();
    // Without the certificate the server refuses the login.
    let error = try_store(PostgresStore::builder(table_name("cert")).build_from_url(&base))
        .await
        .unwrap_err();
    assert!(error.contains("certificate"), "{error}");
}

#[tokio::test]
async fn the_builders_settings_and_a_keyword_string_work_too() {
    let Some((port, dir)) = cluster() else {
        return;
    };
    // The builder overrides the URL's `disable`.
    let store = PostgresStore::builder(table_name("tls"))
        .ssl_mode(SslMode::VerifyFull)
        .root_certificates(RootCertificates::File(dir.join("ca.crt")))
        .build_from_url(&format!(
            "postgres://lock_tls:lock_tls@localhost:{port}/lock_test?sslmode=disable"
        ));
    try_store(store).await.unwrap();
    let keywords = format!(
        "host=localhost port={port} user=lock_tls password=lock_tls dbname=lock_test \
         sslmode=verify-full sslrootcert='{}'",
        file(&dir, "ca.crt")
    );
    try_store(PostgresStore::builder(table_name("tls")).build_from_url(&keywords))
        .await
        .unwrap();
    // A certificate for one role logs in another only with that role's rules:
    // the builder's client certificate is used for lock_cert here.
    let store = PostgresStore::builder(table_name("cert"))
        .client_certificate(dir.join("client.crt"), dir.join("client.key"))
        .build_from_url(&format!(
            "postgres://lock_cert@localhost:{port}/lock_test?sslmode=verify-ca&sslrootcert={}",
            file(&dir, "ca.crt")
        ));
    try_store(store).await.unwrap();
}
