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

/// The conformance cases, listed once: [`CASES`], [`run_all`] and
/// [`conformance_suite!`](crate::conformance_suite) are all made from this list
/// (`$then` is one of this crate's exported macros, given the list after its own
/// arguments).
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($then:ident { $($args:tt)* }) => {
        $crate::$then! { $($args)* ;
            get_of_a_missing_key,
            put_vacant_on_a_new_key,
            put_vacant_on_a_released_key,
            put_vacant_on_a_held_key_is_rejected,
            put_version_match_and_mismatch,
            fence_kept_on_heartbeat_and_release,
            data_is_kept_replaced_and_cleared,
            delete_with_both_expectations,
            fences_rise_across_a_deletion,
            list_pages_through_every_record,
            compare_and_set_race,
            oversized_input_is_invalid_and_writes_nothing,
            sort_keys_are_independent_locks,
            write_times_are_never_later_than_the_write,
            put_many_is_all_or_nothing,
            reader_writer_lock_readers_share_and_writers_are_alone,
            all_or_nothing_leaves_nothing_held,
            releases_are_announced_where_the_store_says_so,
        }
    };
}

/// [`CASES`] and [`run_all`] from the case list.
#[doc(hidden)]
#[macro_export]
macro_rules! __cases_and_run_all {
    ( ; $($case:ident),+ $(,)?) => {
        /// Names of every conformance case, in the order [`run_all`] runs them.
        pub const CASES: &[&str] = &[$(stringify!($case)),+];

        /// Run every case in turn, each on its own fresh store (for adapters that
        /// prefer one test to one test per case).
        pub async fn run_all<F: StoreFactory + ?Sized>(factory: &F) {
            $(
                run_case(factory, stringify!($case), $crate::cases::$case).await;
            )+
        }
    };
}

__conformance_cases!(__cases_and_run_all {});

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
        $crate::__conformance_cases!(conformance_suite { $factory });
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
