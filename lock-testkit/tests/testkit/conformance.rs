//! The conformance suite on the memory store, on the memory store behind the
//! fault injector with the retry layer, and against broken stores that it must
//! fail.

use std::sync::Arc;

use async_trait::async_trait;
use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreReply};
use lock_core::{ConditionalStore, Expect, FenceUpdate, StoreError};
use lock_memory::MemoryStore;
use lock_testkit::{FaultyMemoryFactory, FreshStore, MemoryFactory, StoreFactory, cases};

mod memory {
    lock_testkit::conformance_suite!(lock_testkit::MemoryFactory);
}

mod memory_without_current_on_conflict {
    struct Factory;

    #[async_trait::async_trait]
    impl lock_testkit::StoreFactory for Factory {
        async fn create(&self) -> Result<Option<lock_testkit::FreshStore>, lock_core::StoreError> {
            let store = lock_memory::MemoryStore::builder()
                .returns_current_on_conflict(false)
                .sort_keys(false)
                .key_limits(64, 64)
                .max_record_bytes(1024)
                .build();
            Ok(Some(lock_testkit::FreshStore::new(store)))
        }
    }

    lock_testkit::conformance_suite!(Factory);
}

mod memory_with_store_clock {
    struct Factory;

    #[async_trait::async_trait]
    impl lock_testkit::StoreFactory for Factory {
        async fn create(&self) -> Result<Option<lock_testkit::FreshStore>, lock_core::StoreError> {
            let store = lock_memory::MemoryStore::builder().store_clock(1.0).build();
            Ok(Some(lock_testkit::FreshStore::new(store)))
        }
    }

    lock_testkit::conformance_suite!(Factory);
}

/// The memory store announcing releases, as a store that notifies does.
mod memory_announcing_releases {
    struct Factory;

    #[async_trait::async_trait]
    impl lock_testkit::StoreFactory for Factory {
        async fn create(&self) -> Result<Option<lock_testkit::FreshStore>, lock_core::StoreError> {
            let store = lock_memory::MemoryStore::builder()
                .announce_releases(true)
                .build();
            Ok(Some(lock_testkit::FreshStore::new(store)))
        }
    }

    lock_testkit::conformance_suite!(Factory);
}

/// A store that says it announces releases but never does, or does without
/// saying so, fails the case.
#[tokio::test(start_paused = true)]
async fn a_store_silent_or_unannounced_about_its_releases_fails_the_announcement_case() {
    use lock_core::{
        Capabilities, ConditionalStore, Cursor, Expect, LockKey, LockRecord, NewRecord, Outcome,
        Page, ReleaseFeed, StoreError,
    };
    #[derive(Debug)]
    struct Feed {
        inner: lock_memory::MemoryStore,
        feed: ReleaseFeed,
        says: bool,
    }
    #[async_trait::async_trait]
    impl ConditionalStore for Feed {
        async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
            self.inner.get(key).await
        }
        async fn put(
            &self,
            key: &LockKey,
            expect: Expect,
            new: NewRecord,
        ) -> Result<Outcome, StoreError> {
            self.inner.put(key, expect, new).await
        }
        async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
            self.inner.delete(key, expect).await
        }
        async fn list(
            &self,
            partition: Option<&str>,
            cursor: Option<Cursor>,
            limit: usize,
        ) -> Result<Page, StoreError> {
            self.inner.list(partition, cursor, limit).await
        }
        fn release_feed(&self) -> Option<ReleaseFeed> {
            Some(self.feed.clone())
        }
        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities().with_announces_releases(self.says)
        }
    }
    for says in [true, false] {
        let store: std::sync::Arc<dyn ConditionalStore> = std::sync::Arc::new(Feed {
            inner: lock_memory::MemoryStore::new(),
            feed: ReleaseFeed::manual().0,
            says,
        });
        let result =
            lock_testkit::cases::releases_are_announced_where_the_store_says_so(store).await;
        assert!(result.is_err(), "says {says}: {result:?}");
    }
}

#[tokio::test]
async fn a_store_clock_that_overstates_ages_fails_the_write_time_case() {
    // Running 10 % fast: ages read longer than the time since the send.
    let fast = MemoryStore::builder().store_clock(1.1).build();
    let e = cases::write_times_are_never_later_than_the_write(Arc::new(fast))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("was sent only"), "{e}");
    // A clock that never moves: ages do not grow.
    let stuck = MemoryStore::builder().store_clock(1e-9).build();
    let e = cases::write_times_are_never_later_than_the_write(Arc::new(stuck))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("more than 200 ms after"), "{e}");
}

mod faulty_memory_with_retries {
    lock_testkit::conformance_suite!(lock_testkit::FaultyMemoryFactory::new());
}

#[tokio::test]
async fn run_all_runs_every_case_in_one_test() {
    lock_testkit::run_all(&MemoryFactory).await;
    assert_eq!(lock_testkit::CASES.len(), 18);
    assert!(lock_testkit::CASES.contains(&"data_is_kept_replaced_and_cleared"));
}

#[tokio::test]
async fn the_fault_injector_alone_fails_the_suite() {
    // Without the retry layer, a store that throttles and loses responses must not
    // pass: the cases see the errors.
    let factory = FaultyMemoryFactory {
        seed: 3,
        ..FaultyMemoryFactory::new()
    };
    let faulty =
        lock_memory::FaultyStore::new(MemoryStore::new(), factory.seed).with_faults(factory.faults);
    assert!(cases::compare_and_set_race(Arc::new(faulty)).await.is_err());
}

/// A store that is wrong in one way, to show the cases notice.
#[derive(Debug)]
enum Bug {
    /// Every acquisition gets fence 1.
    FenceNeverIncreases,
    /// A version condition is not checked.
    IgnoresVersions,
    /// Oversized data is stored.
    NoSizeLimit,
    /// Listing drops the last record of every page.
    ListDropsRecords,
    /// A write that keeps the data removes it (the store treats "keep" as
    /// "no data", as this contract once did).
    ForgetsData,
    /// `put_many` is a `put` per key, in turn: the writes before a refused
    /// one stay written.
    PartlyWritten,
}

#[async_trait]
impl StoreLayer for Bug {
    async fn call(
        &self,
        mut call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        if let StoreCall::Put { key, expect, new } = &mut call {
            match self {
                Bug::FenceNeverIncreases => new.fence = FenceUpdate::Keep,
                Bug::IgnoresVersions => {
                    if let (Expect::Version(_), Some(current)) = (&*expect, next.get(key).await?) {
                        *expect = Expect::Version(current.rvn);
                    }
                }
                Bug::NoSizeLimit => {
                    if new.data.bytes().is_some_and(|d| d.len() > 1000) {
                        new.data = lock_core::DataUpdate::Replace(b"truncated".to_vec());
                    }
                }
                Bug::ListDropsRecords | Bug::PartlyWritten => {}
                Bug::ForgetsData => {
                    if new.data == lock_core::DataUpdate::Keep {
                        new.data = lock_core::DataUpdate::Clear;
                    }
                }
            }
        }
        if let (Bug::PartlyWritten, StoreCall::PutMany { writes }) = (self, &call) {
            let mut records = Vec::new();
            for (index, write) in writes.iter().enumerate() {
                match next
                    .put(&write.key, write.expect.clone(), write.new.clone())
                    .await?
                {
                    lock_core::Outcome::Applied(record) => records.push(record),
                    lock_core::Outcome::Rejected { current } => {
                        return Ok(lock_core::ManyOutcome::Rejected { index, current }.into());
                    }
                }
            }
            return Ok(lock_core::ManyOutcome::Applied(records).into());
        }
        let mut reply = call.send(next).await?;
        if let (Bug::ListDropsRecords, Some(page)) = (self, reply.page_mut())
            && page.next.is_some()
        {
            page.records.pop();
        }
        Ok(reply)
    }
}

fn broken(bug: Bug) -> Arc<dyn ConditionalStore> {
    Arc::new(Layered::new(bug, MemoryStore::new()))
}

#[tokio::test]
async fn the_cases_fail_on_broken_stores() {
    let e = cases::put_vacant_on_a_released_key(broken(Bug::FenceNeverIncreases))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("fence"), "{e}");
    assert!(
        cases::compare_and_set_race(broken(Bug::FenceNeverIncreases))
            .await
            .is_err()
    );
    let e = cases::put_version_match_and_mismatch(broken(Bug::IgnoresVersions))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("expected a rejection"), "{e}");
    assert!(
        cases::compare_and_set_race(broken(Bug::IgnoresVersions))
            .await
            .is_err()
    );
    let e = cases::oversized_input_is_invalid_and_writes_nothing(broken(Bug::NoSizeLimit))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Invalid"), "{e}");
    let e = cases::list_pages_through_every_record(broken(Bug::ListDropsRecords))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("listed"), "{e}");
    let e = cases::data_is_kept_replaced_and_cleared(broken(Bug::ForgetsData))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("keeps the data changed it"), "{e}");
    let e = cases::put_many_is_all_or_nothing(broken(Bug::PartlyWritten))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("changed by a refused put_many"),
        "{e}"
    );
}

#[tokio::test]
async fn a_factory_may_skip_and_cleanup_runs_after_a_pass() {
    struct Skip;
    #[async_trait]
    impl StoreFactory for Skip {
        async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
            Ok(None)
        }
    }
    lock_testkit::run_case(&Skip, "skipped", |_| async {
        panic!("a skipped case must not run")
    })
    .await;

    struct Counted(Arc<std::sync::atomic::AtomicUsize>);
    #[async_trait]
    impl StoreFactory for Counted {
        async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
            let counter = self.0.clone();
            Ok(Some(FreshStore::with_cleanup(
                MemoryStore::new(),
                lock_testkit::Cleanup::new(move || async move {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }),
            )))
        }
    }
    let cleaned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    lock_testkit::run_case(
        &Counted(cleaned.clone()),
        "get_of_a_missing_key",
        cases::get_of_a_missing_key,
    )
    .await;
    assert_eq!(cleaned.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The worked example of `docs/adapters.md`.
#[path = "../../examples/adapter.rs"]
#[allow(dead_code)]
mod adapter;

mod worked_example_adapter {
    lock_testkit::conformance_suite!(super::adapter::VersionedMapFactory);
}
