//! The protocol's timing rules, each pinned on its own with a store whose replies
//! arrive late (the write applies, the answer comes back after a delay), in
//! paused time: a holder's safe time counts from the *send* of its write, a
//! waiter's count from the *arrival* of the reply it read; and a stale holder's
//! release after a takeover writes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::{AcquireOptions, Expect, Fence, LockError, LockKey, LostReason};
use lock_memory::{FaultyStore, MemoryStore};
use support::{Delayed, LEASE, client, wait};
use tokio::time::{Instant, timeout};

/// `client`'s safe time: 10 s × (1 − 0.01) − 0.5 s.
const SAFE: Duration = Duration::from_millis(9400);
/// `client`'s takeover wait: 10 s × (1 + 0.01).
const TAKEOVER: Duration = Duration::from_millis(10_100);
const DELAY: Duration = Duration::from_secs(3);

fn key() -> LockKey {
    LockKey::new("job")
}

#[tokio::test(start_paused = true)]
async fn an_acquire_is_safe_for_the_safe_time_from_its_send_not_from_its_reply() {
    let store = Delayed::new(MemoryStore::new());
    store.delay_writes(DELAY);
    let a = client(store.clone(), "a");
    let sent = Instant::now();
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    assert_eq!(Instant::now() - sent, DELAY);
    assert_eq!(guard.remaining(), SAFE - DELAY);
    assert_eq!(store.puts()[0].sent, sent);
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_extends_the_lease_from_its_send_not_from_its_reply() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    store.delay_writes(DELAY);
    // Wait for the first heartbeat's reply.
    let puts = || store.puts();
    while puts().len() < 2 || puts()[1].replied > Instant::now() {
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(puts().len() < 5, "{:?}", puts());
    }
    // Let the heartbeat task take the reply that just arrived.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let heartbeat = puts()[1].clone();
    assert!(matches!(heartbeat.expect, Some(Expect::Version(_))));
    // Just after the reply arrived: the lease counts from the send.
    let now = Instant::now();
    let expected = SAFE - (now - heartbeat.sent);
    let remaining = guard.remaining();
    assert!(
        remaining <= expected && expected - remaining < Duration::from_millis(20),
        "remaining {remaining:?}, expected {expected:?}"
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_waiter_counts_from_the_arrival_of_the_reply_it_read() {
    let memory = MemoryStore::new();
    let dead = client(memory.clone(), "dead");
    dead.acquire("job", AcquireOptions::new())
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    // The waiter's replies come back late: the first one it gets (the
    // rejection of its vacant write, carrying the record) arrives DELAY after
    // the store read the record.
    let store = Delayed::new(memory.clone());
    store.delay_writes(DELAY);
    store.delay_reads(DELAY);
    let a = client(store.clone(), "a");
    let guard = timeout(Duration::from_secs(120), a.acquire("job", wait(LEASE * 3)))
        .await
        .unwrap()
        .unwrap();
    let puts = store.puts();
    let first_reply = puts[0].replied;
    let takeover = puts
        .iter()
        .find(|put| {
            put.new.as_ref().is_some_and(|new| !new.released)
                && matches!(put.expect, Some(Expect::Version(_)))
        })
        .expect("a takeover write");
    // Not sent before TAKEOVER has passed since the reply arrived (not since
    // the store read the record), and no later than the end of a poll that was
    // on the wire when that instant came.
    let after = takeover.sent - first_reply;
    assert!(
        after >= TAKEOVER,
        "takeover sent {after:?} after the first reply"
    );
    assert!(
        after <= TAKEOVER + DELAY,
        "takeover sent {after:?} after the first reply"
    );
    // Counting from the store's side of that reply would have been DELAY early.
    assert!(takeover.sent >= puts[0].sent + TAKEOVER + DELAY);
    assert_eq!(guard.fence(), Fence(2));
}

/// `a` holds "job" through a store it can lose; `b` waits on the same records.
async fn taken_over() -> (
    MemoryStore,
    FaultyStore<MemoryStore>,
    lock_core::LockGuard,
    lock_core::LockGuard,
) {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(memory.clone(), 7);
    let a = client(faulty.clone(), "a");
    let b = client(memory.clone(), "b");
    let stale = a.acquire("job", AcquireOptions::new()).await.unwrap();
    // a is partitioned: its heartbeats fail; b takes over after the lease.
    faulty.set_unavailable(true);
    let fresh = timeout(Duration::from_secs(60), b.acquire("job", wait(LEASE * 2)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fresh.fence(), Fence(2));
    let reason = timeout(Duration::from_secs(60), stale.until_ended())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::Expired);
    faulty.set_unavailable(false);
    (memory, faulty, stale, fresh)
}

#[tokio::test(start_paused = true)]
async fn a_stale_holders_release_after_a_takeover_writes_nothing() {
    let (memory, _faulty, stale, fresh) = taken_over().await;
    let before = memory.record(&key()).unwrap();
    let applied = memory.history().iter().filter(|e| e.applied()).count();
    let error = stale.release().await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LostReason::Stolen { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(memory.record(&key()).unwrap(), before);
    let applied_after = memory.history().iter().filter(|e| e.applied()).count();
    assert_eq!(applied_after, applied, "nothing applied");
    assert!(fresh.is_safe());
    fresh.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_stale_holders_release_and_delete_after_a_takeover_writes_nothing() {
    let (memory, _faulty, stale, fresh) = taken_over().await;
    let before = memory.record(&key()).unwrap();
    let applied = memory.history().iter().filter(|e| e.applied()).count();
    assert!(stale.release_and_delete().await.is_err());
    assert_eq!(memory.record(&key()).unwrap(), before);
    let applied_after = memory.history().iter().filter(|e| e.applied()).count();
    assert_eq!(applied_after, applied, "nothing applied");
    assert!(fresh.is_safe());
    fresh.release().await.unwrap();
}
