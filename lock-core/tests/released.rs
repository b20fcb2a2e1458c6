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
use support::Delayed;
use tokio::time::Instant;

/// A poll period long enough that a hand-off at the next poll is plain.
const POLL: Duration = Duration::from_secs(1);

fn client(store: impl ConditionalStore, owner: &str) -> LockClient {
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

/// The waiter's own view of the shared store: every call it makes, and only
/// those, so the holder's heartbeats (jittered, at random instants) are never
/// counted as the waiter's.
fn waiters_view(store: &MemoryStore) -> Delayed {
    Delayed::new(store.clone())
}

/// The writes among `calls`.
fn writes(calls: &[support::Served]) -> usize {
    calls.iter().filter(|call| call.op != "get").count()
}

/// Sleeps in 1 ms steps until `view` has served a read it had not served
/// before: the instant just after one of the waiter's polls (at most 1 ms
/// after it), so its next poll is at least half a poll period minus 1 ms
/// away whatever the jitter drew. The caller must act at once, with no
/// other await in between, for that bound to hold.
async fn just_after_a_poll(view: &Delayed) {
    let seen = view.served().len();
    let polled = async {
        while !view.served()[seen..].iter().any(|call| call.op == "get") {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(POLL * 2, polled)
        .await
        .expect("the waiter polls within two poll periods");
}

/// How long after `holder`'s release a waiter of another client gets the
/// lock, and with which fence. The release comes just after one of the
/// waiter's polls.
async fn hand_off(store: MemoryStore) -> (Duration, Fence) {
    let holder = client(store.clone(), "holder");
    let view = waiters_view(&store);
    let waiter = client(view.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = tokio::spawn(async move {
        let taken = waiter
            .acquire("job", AcquireOptions::new().wait(Duration::from_secs(60)))
            .await
            .unwrap();
        (Instant::now(), taken.fence(), waiter, taken)
    });
    // Past the waiter's first look.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    just_after_a_poll(&view).await;
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
    // The release came at most 1 ms after a poll, and polls are between
    // half and all of the period apart.
    assert!(
        polled >= POLL / 2 - Duration::from_millis(1) && polled <= POLL,
        "without announcements, the next poll: {polled:?}"
    );
}

/// One write: the announced waiter tries "vacant" at once, without reading
/// first.
#[tokio::test(start_paused = true)]
async fn an_announced_waiter_tries_with_one_write() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let view = waiters_view(&store);
    let waiter = client(view.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = support::waiting(&waiter, "job", support::wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    just_after_a_poll(&view).await;
    let before = view.served().len();
    guard.release().await.unwrap();
    let taken = waiting.await.unwrap().unwrap();
    let since = &view.served()[before..];
    assert_eq!(since.len(), 1, "one call: {since:?}");
    assert_eq!(writes(since), 1, "a write, not a read: {since:?}");
    assert_eq!(since[0].expect, Some(lock_core::Expect::Vacant));
    taken.release().await.unwrap();
}

/// A false announcement (the lock is still held) costs one refused write:
/// the waiter keeps waiting, the holder keeps its lock and stays safe, and
/// the lock is taken when it is really released.
#[tokio::test(start_paused = true)]
async fn a_false_announcement_costs_one_refused_write_and_takes_nothing() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let view = waiters_view(&store);
    let waiter = client(view.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let waiting = support::waiting(&waiter, "job", support::wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let before = view.served().len();
    store.announce_release(&LockKey::new("job"));
    // Long enough for several polls: they read, and a poll that finds the
    // holder alive writes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        writes(&view.served()[before..]),
        1,
        "one refused write: {:?}",
        &view.served()[before..]
    );
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

/// A waiter for one lock is not woken by the release of another: released
/// just after one of the waiter's polls, it makes no call at all until its
/// next poll is due (half a period at the earliest), and that poll reads.
#[tokio::test(start_paused = true)]
async fn a_release_of_another_lock_wakes_nobody_else() {
    let store = store(true);
    let holder = client(store.clone(), "holder");
    let view = waiters_view(&store);
    let waiter = client(view.clone(), "waiter");
    let guard = holder.acquire("job", AcquireOptions::new()).await.unwrap();
    let other = holder
        .acquire("other", AcquireOptions::new())
        .await
        .unwrap();
    let waiting = support::waiting(&waiter, "job", support::wait(Duration::from_secs(60)));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    just_after_a_poll(&view).await;
    let before = view.served().len();
    other.release().await.unwrap();
    // At most 1 ms has passed since the poll (paused time moves in whole
    // milliseconds), and the next poll is 500 ms after it at the earliest.
    tokio::time::sleep(POLL / 2 - Duration::from_millis(2)).await;
    let quiet = &view.served()[before..];
    assert!(
        quiet.is_empty(),
        "woken by another lock's release: {quiet:?}"
    );
    tokio::time::sleep(POLL).await;
    let since = &view.served()[before..];
    assert_eq!(writes(since), 0, "the waiter only polled: {since:?}");
    assert!(!since.is_empty(), "and it did poll");
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
