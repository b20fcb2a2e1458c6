//! The object-store backend on Azure Blob Storage's emulator, Azurite
//! (started by `./scripts/test`): the conformance suite, racing writers, the
//! bucket check, the client end to end and the shared fault drills through a
//! TCP fault proxy, with object_store's Azure client (`If-None-Match: *` and
//! `If-Match` on the blob's ETag).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use lock_core::ConditionalStore;
use lock_object_store::BucketStore;
use lock_testkit::drills;
use lock_testkit::proxy::{FaultProxy, ProxyMode};
use lock_testkit::scenarios;
use support::{azure_store_at, azurite_endpoint, fresh_azure_store};

mod conformance {
    lock_testkit::conformance_suite!(crate::support::AzureFactory);
}

/// Eight stores, each with its own remembered versions, race for one key in
/// 30 trials, on new and released keys: exactly one wins each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let endpoint = azurite_endpoint().unwrap();
    let writers: Vec<BucketStore> = (0..8)
        .map(|_| azure_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5)))
        .collect();
    scenarios::racing_writers(&store, &writers, 30).await;
}

#[tokio::test]
async fn the_bucket_check_passes_on_azurite() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    store.validate_bucket().await.unwrap();
    assert!(store.list(None, None, 10).await.unwrap().records.is_empty());
}

#[tokio::test]
async fn the_client_acquires_heartbeats_takes_over_and_releases() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let endpoint = azurite_endpoint().unwrap();
    let other = azure_store_at(&endpoint, store.prefix().as_ref(), Duration::from_secs(5));
    scenarios::client_end_to_end(store, other).await;
}

/// A store on `store`'s prefix reaching Azurite through a new fault proxy.
fn proxied(store: &BucketStore) -> (FaultProxy, BucketStore) {
    let endpoint = azurite_endpoint().expect("the store was made, so there is a server");
    support::proxied::through_proxy(&endpoint, store, azure_store_at)
}

#[tokio::test]
async fn a_partitioned_holder_is_lost_before_a_waiter_going_direct_takes_over() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let (proxy, via) = proxied(&store);
    drills::partitioned_holder(store, via, &proxy).await;
}

/// Azurite keeps connections open: a fifth of the exchanges fail, on open
/// connections and new ones, half before Azurite saw them and half after it
/// answered.
#[tokio::test]
async fn a_fifth_of_requests_fail_under_contention_no_double_holder_nothing_left_held() {
    let Some(store) = fresh_azure_store() else {
        return;
    };
    let (proxy, via) = proxied(&store);
    let faults = ProxyMode::FailSomeExchanges {
        fraction: 0.2,
        seed: drills::drill_seed(),
    };
    drills::contention_under_faults(store, via, &proxy, faults).await;
}
