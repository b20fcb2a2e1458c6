//! A store reaching the service (moto's S3, Azurite) through a fault proxy,
//! for the shared drills.

use std::time::Duration;

use lock_object_store::BucketStore;
use lock_testkit::proxy::FaultProxy;

/// Every wait on a future that might never resolve is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

/// A fault proxy in front of the service at `endpoint`, and a store on
/// `store`'s prefix reaching it through the proxy (made by `at`), with
/// requests that time out well inside the drills' leases.
pub fn through_proxy(
    endpoint: &str,
    store: &BucketStore,
    at: impl Fn(&str, &str, Duration) -> BucketStore,
) -> (FaultProxy, BucketStore) {
    let upstream = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let proxy = FaultProxy::start(upstream).expect("start the fault proxy");
    let via = at(
        &proxy.url(),
        store.prefix().as_ref(),
        Duration::from_millis(400),
    );
    (proxy, via)
}
