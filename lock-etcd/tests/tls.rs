//! TLS as etcd users configure it, on a member the test starts with the
//! throw-away certificates `./scripts/test` makes: the CA file and a client
//! certificate from the URL, and what is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, ConditionalStore, Fence, LockKey, StoreErrorKind};
use lock_etcd::{EtcdStoreBuilder, Timeouts};
use support::{LIMIT, client, start_tls_member};
use tokio::time::timeout;

/// A store from `url`, with short timeouts (a refused handshake fails fast).
async fn store(url: &str) -> lock_etcd::EtcdStore {
    EtcdStoreBuilder::from_url(url)
        .unwrap()
        .timeouts(Timeouts::default().with_request(Duration::from_secs(2)))
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_client_certificate_and_ca_from_the_url_lock_and_others_are_refused() {
    let Some((member, tls)) = start_tls_member().await else {
        return;
    };
    let file = |name: &str| tls.join(name).display().to_string();
    let good = format!(
        "etcds://{}/locks?cacert={}&cert={}&key={}",
        member.endpoint,
        file("ca.crt"),
        file("client.crt"),
        file("client.key")
    );
    // The member may take a moment to serve after it listens.
    let store_ok = store(&good).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while store_ok.get(&LockKey::new("job")).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TLS member never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder = client(store_ok, "holder", Duration::from_secs(5));
    let guard = timeout(LIMIT, holder.acquire("job", AcquireOptions::new()))
        .await
        .expect("bounded")
        .unwrap();
    assert!(guard.fence() > Fence(0));
    guard.release().await.unwrap();
    holder.shutdown().await.unwrap();

    // A CA that did not sign the member's certificate: refused, nothing sent.
    let wrong_ca = good.replace(&file("ca.crt"), &file("other-ca.crt"));
    let error = store(&wrong_ca)
        .await
        .get(&LockKey::new("job"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    // No client certificate where the member asks for one: refused.
    let anonymous = format!(
        "etcds://{}/locks?cacert={}",
        member.endpoint,
        file("ca.crt")
    );
    let error = store(&anonymous)
        .await
        .get(&LockKey::new("job"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Unauthorized
        ),
        "{error}"
    );
    // A plain connection to a TLS member fails too.
    let plain = format!("etcd://{}/locks", member.endpoint);
    assert!(store(&plain).await.get(&LockKey::new("job")).await.is_err());
}

#[tokio::test]
async fn a_certificate_file_that_cannot_be_read_is_refused_when_the_store_is_made() {
    let error = EtcdStoreBuilder::from_url("etcds://localhost:2379/x?cacert=/no/such/ca.pem")
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(error, lock_etcd::StoreConfigError::Tls { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("/no/such/ca.pem"), "{error}");
}
