//! Running the conformance cases: [`run_case`], [`run_all`] and the
//! [`conformance_suite!`](crate::conformance_suite) macro.

use std::future::Future;
use std::sync::Arc;

use lock_core::ConditionalStore;

use crate::{CaseResult, StoreFactory};

/// Run one case against a fresh store from `factory`, cleaning up after a pass.
///
/// # Panics
///
/// When the factory fails or the case fails, with the case's name and the reason:
/// this is what a `#[test]` reports.
pub async fn run_case<F, C, Fut>(factory: &F, name: &str, case: C)
where
    F: StoreFactory + ?Sized,
    C: FnOnce(Arc<dyn ConditionalStore>) -> Fut,
    Fut: Future<Output = CaseResult>,
{
    let fresh = match factory.create().await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => {
            eprintln!("SKIPPED: conformance case {name}: the factory has no store to test");
            return;
        }
        Err(e) => panic!("conformance case {name}: the factory failed: {e}"),
    };
    if let Err(e) = case(fresh.store.clone()).await {
        panic!("conformance case {name} failed on {:?}: {e}", fresh.store);
    }
    fresh.finish().await;
}

/// Names of every conformance case, in the order [`run_all`] runs them.
pub const CASES: &[&str] = &[
    "get_of_a_missing_key",
    "put_vacant_on_a_new_key",
    "put_vacant_on_a_released_key",
    "put_vacant_on_a_held_key_is_rejected",
    "put_version_match_and_mismatch",
    "fence_kept_on_heartbeat_and_release",
    "delete_with_both_expectations",
    "list_pages_through_every_record",
    "compare_and_set_race",
    "oversized_input_is_invalid_and_writes_nothing",
    "sort_keys_are_independent_locks",
];

/// Run every case in turn, each on its own fresh store (for adapters that prefer
/// one test to one test per case).
pub async fn run_all<F: StoreFactory + ?Sized>(factory: &F) {
    use crate::cases::*;
    run_case(factory, CASES[0], get_of_a_missing_key).await;
    run_case(factory, CASES[1], put_vacant_on_a_new_key).await;
    run_case(factory, CASES[2], put_vacant_on_a_released_key).await;
    run_case(factory, CASES[3], put_vacant_on_a_held_key_is_rejected).await;
    run_case(factory, CASES[4], put_version_match_and_mismatch).await;
    run_case(factory, CASES[5], fence_kept_on_heartbeat_and_release).await;
    run_case(factory, CASES[6], delete_with_both_expectations).await;
    run_case(factory, CASES[7], list_pages_through_every_record).await;
    run_case(factory, CASES[8], compare_and_set_race).await;
    run_case(
        factory,
        CASES[9],
        oversized_input_is_invalid_and_writes_nothing,
    )
    .await;
    run_case(factory, CASES[10], sort_keys_are_independent_locks).await;
}

/// Expand into one `#[tokio::test]` per conformance case, each building its store
/// with the given factory expression (evaluated once per test).
///
/// The calling crate needs `tokio` (features `macros`, `rt-multi-thread`) among
/// its dev-dependencies.
///
/// ```ignore
/// mod conformance {
///     lock_testkit::conformance_suite!(my_crate::MyFactory::new());
/// }
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($factory:expr) => {
        $crate::conformance_suite!($factory;
            get_of_a_missing_key,
            put_vacant_on_a_new_key,
            put_vacant_on_a_released_key,
            put_vacant_on_a_held_key_is_rejected,
            put_version_match_and_mismatch,
            fence_kept_on_heartbeat_and_release,
            delete_with_both_expectations,
            list_pages_through_every_record,
            compare_and_set_race,
            oversized_input_is_invalid_and_writes_nothing,
            sort_keys_are_independent_locks,
        );
    };
    ($factory:expr; $($case:ident),+ $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::run_case(&factory, stringify!($case), $crate::cases::$case).await;
            }
        )+
    };
}
