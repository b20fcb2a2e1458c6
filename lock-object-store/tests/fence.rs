//! Fences checked at the user's own objects, on moto's S3, Azurite and in
//! memory: a stale holder's write is refused and the newer one kept;
//! another lock's fence is refused; an object written before fencing takes
//! a fence; bad input is refused before any request; racing writers never
//! have a lower fence admitted after a higher one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use support::stale_put::{
    ContentHashed, Holding, a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused,
};

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, Fence, FenceRefused, LockClient, LockKey};
use lock_object_store::{BucketStore, FencedObjects, ObjectFenceError};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload};
use tokio::time::Instant;

/// A fresh place for the user's objects in the store's bucket.
fn data(store: &BucketStore) -> String {
    format!("data-{}", store.prefix())
}

/// Two holders of `key` one after the other on `store`: the first's fence
/// (stale once the second holds) and the second's.
async fn two_fences(store: &BucketStore, key: &LockKey) -> (Fence, Fence) {
    let client = LockClient::builder(store.clone())
        .lease(Duration::from_secs(5))
        .build()
        .unwrap();
    let first = client
        .acquire(key.clone(), AcquireOptions::new())
        .await
        .unwrap();
    let stale = first.fence();
    first.release().await.unwrap();
    let second = client
        .acquire(key.clone(), AcquireOptions::new())
        .await
        .unwrap();
    let fresh = second.fence();
    second.release().await.unwrap();
    client.shutdown().await.unwrap();
    assert!(stale < fresh);
    (stale, fresh)
}

async fn a_stale_holders_write_is_refused_and_the_newer_one_kept(store: BucketStore) {
    let key = LockKey::new("reports");
    let (stale, fresh) = two_fences(&store, &key).await;
    let objects = store.fenced_objects();
    let path = format!("{}/today.csv", data(&store));
    objects.put(&path, "newer", &key, fresh).await.unwrap();
    match objects.put(&path, "older", &key, stale).await {
        Err(ObjectFenceError::Refused(FenceRefused::Stale {
            presented, highest, ..
        })) => assert_eq!((presented, highest), (stale, fresh)),
        other => panic!("expected the stale fence to be refused, got {other:?}"),
    }
    let (bytes, fence) = objects.get(&path).await.unwrap().unwrap();
    assert_eq!((&bytes[..], fence), (&b"newer"[..], Some(fresh)));
    // The newer holder writes again with its fence.
    objects.put(&path, "newest", &key, fresh).await.unwrap();
    assert_eq!(&objects.get(&path).await.unwrap().unwrap().0[..], b"newest");
}

async fn another_locks_fence_is_refused_and_an_unfenced_object_takes_one(store: BucketStore) {
    let objects = store.fenced_objects();
    let path = format!("{}/ledger.json", data(&store));
    // Written before fencing was adopted.
    store
        .object_store()
        .put_opts(
            &Path::parse(&path).unwrap(),
            PutPayload::from("plain"),
            PutOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(objects.get(&path).await.unwrap().unwrap().1, None);
    let orders = LockKey::with_sort("orders", "é/42");
    objects
        .put(&path, "fenced", &orders, Fence(3))
        .await
        .unwrap();
    match objects
        .put(&path, "other", &LockKey::new("invoices"), Fence(9))
        .await
    {
        Err(ObjectFenceError::Refused(FenceRefused::OtherLock {
            fenced_by,
            presented_by,
            ..
        })) => assert_eq!(
            (fenced_by.as_str(), presented_by.as_str()),
            // The sort key's `/` escaped: the lock `orders/é` under the
            // sort key `42` is another lock, with another name.
            ("orders/é%2F42", "invoices")
        ),
        other => panic!("expected another lock's fence to be refused, got {other:?}"),
    }
    assert_eq!(
        objects.get(&path).await.unwrap().unwrap(),
        (bytes::Bytes::from("fenced"), Some(Fence(3)))
    );
}

async fn bad_input_is_refused_before_any_request(store: BucketStore) {
    let objects = store.fenced_objects();
    let key = LockKey::new("reports");
    let path = format!("{}/x", data(&store));
    let lock_object = store.object_path(&key).to_string();
    let long = format!("{}/{}", data(&store), "x".repeat(1_100));
    for (path, fence, says) in [
        (path.as_str(), 0, "start at 1"),
        ("", 1, "needs a name"),
        ("a//b", 1, "not a valid object path"),
        (long.as_str(), 1, "at most 1024"),
        (lock_object.as_str(), 1, "lock prefix"),
    ] {
        match objects.put(path, "x", &key, Fence(fence)).await {
            Err(ObjectFenceError::Refused(FenceRefused::InvalidInput { reason })) => {
                assert!(reason.contains(says), "{path:?}: {reason}");
            }
            other => panic!("{path:?}: expected bad input to be refused, got {other:?}"),
        }
    }
    assert_eq!(objects.get(&path).await.unwrap(), None, "nothing written");
}

/// Writers with interleaved fences race for one object: a write that began
/// after a higher fence's write had been admitted is always refused, and
/// the object ends with the highest fence's write.
async fn racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one(
    objects: FencedObjects,
    path: String,
) {
    let key = LockKey::new("reports");
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..16_u64 {
        let (objects, path, key) = (objects.clone(), path.clone(), key.clone());
        writers.spawn(async move {
            let fence = Fence(1 + (writer * 5) % 8);
            let began = Instant::now();
            let written = objects
                .put(&path, fence.get().to_string(), &key, fence)
                .await;
            let ended = Instant::now();
            match &written {
                Ok(_) | Err(ObjectFenceError::Refused(FenceRefused::Stale { .. })) => {}
                Err(other) => panic!("fence {fence}: {other}"),
            }
            (fence, began, ended, written.is_ok())
        });
    }
    let mut writes = Vec::new();
    while let Some(write) = writers.join_next().await {
        writes.push(write.unwrap());
    }
    for (fence, _, ended, admitted) in &writes {
        for (later, began, _, later_admitted) in &writes {
            if *admitted && began > ended && later < fence {
                assert!(
                    !later_admitted,
                    "fence {later} admitted after fence {fence} was"
                );
            }
        }
    }
    let (bytes, fence) = objects.get(&path).await.unwrap().unwrap();
    assert_eq!((&bytes[..], fence), (&b"8"[..], Some(Fence(8))));
}

mod s3 {
    use super::*;

    #[tokio::test]
    async fn a_stale_holders_write_is_refused_and_the_newer_one_kept() {
        if let Some(store) = support::fresh_s3_store().await {
            super::a_stale_holders_write_is_refused_and_the_newer_one_kept(store).await;
        }
    }

    #[tokio::test]
    async fn another_locks_fence_is_refused_and_an_unfenced_object_takes_one() {
        if let Some(store) = support::fresh_s3_store().await {
            super::another_locks_fence_is_refused_and_an_unfenced_object_takes_one(store).await;
        }
    }

    /// S3's ETag is the MD5 of the body: the takeover's write of the same
    /// bytes gives the object back the ETag the stale holder read.
    #[tokio::test]
    async fn a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused() {
        if let Some(store) = support::fresh_s3_store().await {
            let holding = Holding::new(store.object_store().clone());
            let objects = FencedObjects::new(holding.clone());
            let path = format!("{}/same-bytes", data(&store));
            super::a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
                holding, objects, &path,
            )
            .await;
        }
    }

    /// The same through the store's own fenced objects (what Python's
    /// `BucketStore.fenced_put` uses).
    #[tokio::test]
    async fn the_bucket_stores_fenced_objects_refuse_a_stale_write_of_the_same_bytes() {
        if let Some(store) = support::fresh_s3_store().await {
            assert!(store.fenced_objects().tags_writes(), "an s3:// store tags");
            let holding = Holding::new(store.object_store().clone());
            let on_holding = lock_object_store::BucketStore::builder()
                .build_with_store(holding.clone(), store.prefix().as_ref())
                .unwrap();
            let path = format!("{}/same-bytes", data(&store));
            super::a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
                holding,
                on_holding.fenced_objects(),
                &path,
            )
            .await;
        }
    }

    #[tokio::test]
    async fn bad_input_is_refused_before_any_request() {
        if let Some(store) = support::fresh_s3_store().await {
            super::bad_input_is_refused_before_any_request(store).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one() {
        if let Some(store) = support::fresh_s3_store().await {
            let path = format!("{}/race", data(&store));
            super::racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one(
                store.fenced_objects(),
                path,
            )
            .await;
        }
    }
}

mod azure {
    use super::*;

    #[tokio::test]
    async fn a_stale_holders_write_is_refused_and_the_newer_one_kept() {
        if let Some(store) = support::fresh_azure_store() {
            super::a_stale_holders_write_is_refused_and_the_newer_one_kept(store).await;
        }
    }

    #[tokio::test]
    async fn another_locks_fence_is_refused_and_an_unfenced_object_takes_one() {
        if let Some(store) = support::fresh_azure_store() {
            super::another_locks_fence_is_refused_and_an_unfenced_object_takes_one(store).await;
        }
    }

    #[tokio::test]
    async fn a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused() {
        if let Some(store) = support::fresh_azure_store() {
            let holding = Holding::new(store.object_store().clone());
            let path = format!("{}/same-bytes", data(&store));
            super::a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
                holding.clone(),
                FencedObjects::new(holding.clone()),
                &path,
            )
            .await;
            // Untagged, as a store built from an az:// URL writes: Azure's
            // ETag changes on every write, also of the same bytes.
            assert!(!store.fenced_objects().tags_writes());
            super::a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
                holding.clone(),
                FencedObjects::new(holding).versions_change_on_every_write(true),
                &format!("{path}-untagged"),
            )
            .await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one() {
        if let Some(store) = support::fresh_azure_store() {
            let path = format!("{}/race", data(&store));
            super::racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one(
                store.fenced_objects(),
                path,
            )
            .await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_in_memory_never_have_a_lower_fence_admitted_after_a_higher_one() {
    let objects = FencedObjects::new(Arc::new(InMemory::new()));
    racing_writers_never_have_a_lower_fence_admitted_after_a_higher_one(objects, "race".to_owned())
        .await;
}

/// In memory, with versions that change on every write (object_store's own
/// `InMemory`) and with ETags that hash the body, as S3's do.
#[tokio::test]
async fn in_memory_a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused() {
    let holding = Holding::new(Arc::new(InMemory::new()));
    a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
        holding.clone(),
        FencedObjects::new(holding),
        "same-bytes",
    )
    .await;
    let hashed = Holding::new(Arc::new(ContentHashed::default()));
    a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
        hashed.clone(),
        FencedObjects::new(hashed),
        "same-bytes",
    )
    .await;
}
