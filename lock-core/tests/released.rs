//! Waiters woken by the store: where a store announces releases
//! (`ConditionalStore::release_feed`), a waiter in another client tries at
//! once instead of at its next poll; an announcement is only a hint, and
//! polling goes on. Paused time, on the memory store announcing as a store
//! that notifies does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, Capabilities, ConditionalStore, Fence, LockClient, LockKey};
use lock_memory::MemoryStore;
use tokio::time::Instant;

/// A poll period long enough that a hand-off at the next poll is plain.
const POLL: Duration = Duration::from_secs(1);

fn client(store: MemoryStore, owner: &str) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(Duration::from_secs(10))
        .refresh_period(POLL)
        .build()
        .unwrap()
}

fn store(announce: bool) -> MemoryStore {
    MemoryStore::builder().announce_releases(announce).build()
}

/// How long after `holder`'s release a waiter of another client gets the
/// lock, and with which fence.
async fn hand_off(store: MemoryStore) -> (Duration, Fence) {
    let holder = client(store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = tokio::spawn(async move {
        let taken = waiter
            .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
            .await
            .unwrap();
        (Instant::now(), taken.fence(), waiter, taken)
    });
    // Past the waiter's first look, between two of its polls.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (taken_at, fence, _waiter, _taken) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap();
    (taken_at - released, fence)
}

#[tokio::test(start_paused = true)]
async fn an_announced_release_is_taken_at_once_and_an_unannounced_one_at_the_next_poll() {
    let (announced, fence) = hand_off(store(true)).await;
    assert_eq!(fence, Fence(2));
    assert!(announced < Duration::from_millis(5), "{announced:?}");
    let (polled, fence) = hand_off(store(false)).await;
    assert_eq!(fence, Fence(2));
    assert!(
        polled >= Duration::from_millis(50) && polled <= POLL,
        "without announcements, the next poll: {polled:?}"
    );
}

/// One write: the announced waiter tries "vacant" at once, without reading
/// first.
#[tokio::test(start_paused = true)]
async fn an_announced_waiter_tries_with_one_write() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    guard.release().await.unwrap();
    let before = store.calls();
    let released_writes = store.writes();
    let taken = waiting.await.unwrap().unwrap();
    // The release's write was counted before; the waiter's calls since: one
    // write, no read.
    assert_eq!(store.calls() - before, 1, "{:?}", store.history());
    assert_eq!(store.writes() - released_writes, 1);
    taken.release().await.unwrap();
}

/// A false announcement (the lock is still held) costs one refused write:
/// the waiter keeps waiting, the holder keeps its lock and stays safe, and
/// the lock is taken when it is really released.
#[tokio::test(start_paused = true)]
async fn a_false_announcement_costs_one_refused_write_and_takes_nothing() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let writes = store.writes();
    store.announce_release(&LockKey::new("job"));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(store.writes() - writes, 1, "one refused write");
    assert!(!waiting.is_finished());
    assert!(guard.is_safe());
    let record = store.get(&LockKey::new("job")).await.unwrap().unwrap();
    assert_eq!((record.owner.as_str(), record.released), ("holder", false));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!waiting.is_finished(), "still waiting: the holder is alive");
    guard.release().await.unwrap();
    let taken = waiting.await.unwrap().unwrap();
    assert_eq!(taken.fence(), Fence(2));
    taken.release().await.unwrap();
}

/// A waiter for one lock is not woken by the release of another.
#[tokio::test(start_paused = true)]
async fn a_release_of_another_lock_wakes_nobody_else() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let other = holder
        .acquire("other", AcquireOptions::new())
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let calls = store.calls();
    other.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        store.calls() - calls,
        1,
        "the release only: {:?}",
        store.history()
    );
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

/// A semaphore's waiter of another client takes a permit freed by an
/// announced release at once.
#[tokio::test(start_paused = true)]
async fn a_semaphore_waiter_takes_an_announced_permit_at_once() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let waiter = client(store.clone(), "waiter");
    let held = holder.semaphore("pool", 1).unwrap();
    let permit = held.acquire(AcquireOptions::new()).await.unwrap();
    let waiting = tokio::spawn({
        let semaphore = waiter.semaphore("pool", 1).unwrap();
        async move {
            let permit = semaphore
                .acquire(AcquireOptions::new().wait(Duration::from_secs(60)))
                .await
                .unwrap();
            (Instant::now(), permit)
        }
    });
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let released = Instant::now();
    permit.release().await.unwrap();
    let (taken_at, permit) = waiting.await.unwrap();
    assert!(
        taken_at - released < Duration::from_millis(5),
        "{:?}",
        taken_at - released
    );
    permit.release().await.unwrap();
}

#[test]
fn a_store_says_whether_it_announces_releases() {
    assert!(store(true).capabilities().announces_releases);
    assert!(store(true).release_feed().is_some());
    assert!(!store(false).capabilities().announces_releases);
    assert!(store(false).release_feed().is_none());
    assert!(!Capabilities::default().announces_releases);
}
