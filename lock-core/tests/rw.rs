//! Reader-writer locks (`LockClient::rw_lock`): readers share, a writer is
//! alone, a waiting writer holds new readers back, crashed readers and
//! writers are cleared after their lease and never before, readers carry the
//! writer fence, upgradeable reads, bad input refused before anything is
//! written, and never a writer beside a reader under faults and late replies.
//! The in-memory store, in paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{AcquireOptions, Fence, LockClient, LockError, LockView, ReadView, RwLock};
use lock_memory::{FaultConfig, FaultyStore, FencedResource, MemoryStore};
use support::{LEASE, client, wait};
use tokio::time::{Instant, sleep, timeout};

const PATIENCE: Duration = Duration::from_secs(600);
const REFRESH: Duration = Duration::from_millis(500);

fn stores() -> [(&'static str, MemoryStore); 2] {
    [
        ("sort keys", MemoryStore::new()),
        (
            "no sort keys",
            MemoryStore::builder().sort_keys(false).build(),
        ),
    ]
}

/// The write lock's record of `lock`, as stored.
fn writer_record(store: &MemoryStore, lock: &RwLock) -> Option<lock_core::LockRecord> {
    store.record(lock.writer_key())
}

#[tokio::test(start_paused = true)]
async fn readers_share_and_a_waiting_writer_holds_new_readers_back() {
    for (layout, store) in stores() {
        let clients: Vec<LockClient> = ["a", "b", "c", "d"]
            .iter()
            .map(|name| client(store.clone(), name))
            .collect();
        let locks: Vec<RwLock> = clients
            .iter()
            .map(|client| client.rw_lock("config", 4).unwrap())
            .collect();
        let first = locks[0].read(AcquireOptions::new()).await.unwrap();
        let second = locks[1].read(AcquireOptions::new()).await.unwrap();
        assert!(first.is_safe() && second.is_safe(), "{layout}");
        assert_eq!(first.fence(), Fence(0), "{layout}: no writer ever");
        assert_ne!(first.slot_index(), second.slot_index(), "{layout}");

        let writer = {
            let lock = locks[2].clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let guard = lock.write(wait(LEASE * 3)).await;
                (guard, started.elapsed())
            })
        };
        sleep(Duration::from_secs(1)).await;
        assert!(!writer.is_finished(), "{layout}: two readers inside");
        let record = writer_record(&store, &locks[2]).expect("the writer's intent");
        assert!(!record.released && record.owner == "c", "{layout}");
        // A writer waits: a new reader is not let in.
        assert!(
            locks[3]
                .try_read(AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "{layout}: a new reader passed a waiting writer"
        );
        let reader = {
            let lock = locks[3].clone();
            tokio::spawn(async move { lock.read(wait(LEASE * 3)).await })
        };
        first.release().await.unwrap();
        sleep(Duration::from_secs(1)).await;
        assert!(!writer.is_finished(), "{layout}: one reader still inside");
        let left = Instant::now();
        second.release().await.unwrap();
        let (guard, _) = timeout(PATIENCE, writer).await.unwrap().unwrap();
        let guard = guard.unwrap();
        assert!(
            left.elapsed() <= REFRESH * 2,
            "{layout}: the writer saw the last reader leave at its next poll"
        );
        assert!(guard.is_safe(), "{layout}");
        assert_eq!(guard.fence(), Fence(1), "{layout}");
        // Held across leases: heartbeats.
        sleep(LEASE * 2).await;
        assert!(guard.is_safe(), "{layout}");
        assert!(
            !reader.is_finished(),
            "{layout}: no reader beside the writer"
        );
        guard.release_with_data("version 7").await.unwrap();
        let read = timeout(PATIENCE, reader).await.unwrap().unwrap().unwrap();
        assert_eq!(read.fence(), Fence(1), "{layout}: the last writer's fence");
        assert_eq!(read.writer_data().as_deref(), Some(&b"version 7"[..]));
        read.release().await.unwrap();
        for client in clients {
            client.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_writer_waits_for_another_writer_and_readers_for_both() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let b = client(store.clone(), "b");
    let lock_a = a.rw_lock("config", 2).unwrap();
    let lock_b = b.rw_lock("config", 2).unwrap();
    let first = lock_a.write(AcquireOptions::new()).await.unwrap();
    assert!(
        lock_b
            .try_write(AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        lock_b
            .try_read(AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        lock_b
            .try_upgradeable_read(AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    let started = Instant::now();
    let error = lock_b
        .write(wait(Duration::from_secs(2)))
        .await
        .unwrap_err();
    assert!(
        matches!(error, LockError::AcquireTimeout { .. }),
        "{error:?}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(2),
        "its budget, no more"
    );
    // The timed-out writer left nothing held.
    for record in store.records() {
        assert!(record.owner != "b" || record.released, "{record:?}");
    }
    let next = {
        let lock = lock_b.clone();
        tokio::spawn(async move { lock.write(wait(LEASE * 3)).await })
    };
    sleep(Duration::from_secs(1)).await;
    first.release().await.unwrap();
    let second = timeout(PATIENCE, next).await.unwrap().unwrap().unwrap();
    assert_eq!(second.fence(), Fence(2));
    second.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A client whose store stops answering once `crash` is called: its
/// heartbeats fail and its records stay as they were, as a crashed process's.
fn crashable(store: &MemoryStore, owner: &str) -> (LockClient, FaultyStore<MemoryStore>) {
    let faulty = FaultyStore::new(store.clone(), 7);
    (client(faulty.clone(), owner), faulty)
}

#[tokio::test(start_paused = true)]
async fn a_crashed_readers_slot_is_cleared_after_its_lease_and_never_before() {
    for (layout, store) in stores() {
        let (dead, crash) = crashable(&store, "dead");
        let read = dead
            .rw_lock("config", 3)
            .unwrap()
            .read(AcquireOptions::new())
            .await
            .unwrap();
        let view = read.view();
        crash.set_unavailable(true);
        let b = client(store.clone(), "b");
        let lock = b.rw_lock("config", 3).unwrap();
        let started = Instant::now();
        let writer = lock.write(wait(LEASE * 3)).await.unwrap();
        let waited = started.elapsed();
        // Never before the crashed reader's lease is over as the writer
        // saw it; then at the next poll.
        assert!(waited >= LEASE.mul_f64(1.01), "{layout}: {waited:?}");
        assert!(
            waited <= LEASE.mul_f64(1.01) + REFRESH * 2,
            "{layout}: {waited:?}"
        );
        assert!(
            !view.is_safe(),
            "{layout}: the crashed reader no longer trusts its read"
        );
        // Its slot was cleared by a write of the writer's.
        let slots: Vec<_> = store
            .records()
            .into_iter()
            .filter(|record| {
                record.owner == "dead" && !record.key.to_string().ends_with("#readers")
            })
            .collect();
        assert!(slots.is_empty(), "{layout}: {slots:?}");
        writer.release().await.unwrap();
        drop(read);
        b.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_writer_is_cleared_by_readers_with_the_next_fence_and_refused_by_the_resource() {
    for (layout, store) in stores() {
        let (dead, crash) = crashable(&store, "dead");
        let write = dead
            .rw_lock("config", 3)
            .unwrap()
            .write(AcquireOptions::new())
            .await
            .unwrap();
        assert_eq!(write.fence(), Fence(1), "{layout}");
        let resource = FencedResource::new();
        let lock = write.key().clone();
        resource
            .write("settings", &lock, write.fence(), "old")
            .unwrap();
        let zombie = write.guard().view();
        crash.set_unavailable(true);

        let b = client(store.clone(), "b");
        let started = Instant::now();
        let read = b
            .rw_lock("config", 3)
            .unwrap()
            .read(wait(LEASE * 3))
            .await
            .unwrap();
        let waited = started.elapsed();
        assert!(waited >= LEASE.mul_f64(1.01), "{layout}: {waited:?}");
        assert!(
            waited <= LEASE.mul_f64(1.01) + REFRESH * 2,
            "{layout}: {waited:?}"
        );
        assert!(!zombie.is_safe(), "{layout}");
        assert_eq!(
            read.fence(),
            Fence(2),
            "{layout}: cleared with the next fence"
        );
        // The reader's fenced read raises the resource's floor: the crashed
        // writer, come back, is refused.
        let value = resource
            .read_fenced("settings", &lock, read.fence())
            .unwrap();
        assert_eq!(value, Some("old"), "{layout}");
        assert!(
            resource
                .write("settings", &lock, Fence(1), "zombie")
                .is_err(),
            "{layout}: the crashed writer's write after the readers came in"
        );
        read.release().await.unwrap();
        drop(write);
        b.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_reader_that_outlived_a_writer_is_refused_by_the_resource() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let lock = a.rw_lock("config", 3).unwrap();
    let key = lock.writer_key().clone();
    let resource = FencedResource::new();
    let writer = lock.write(AcquireOptions::new()).await.unwrap();
    resource.write("settings", &key, writer.fence(), 1).unwrap();
    writer.release().await.unwrap();
    let stale = lock.read(AcquireOptions::new()).await.unwrap();
    assert_eq!(
        resource.read_fenced("settings", &key, stale.fence()),
        Ok(Some(1))
    );
    // Paused past its lease, its slot cleared, a writer in and out:
    let fence = stale.fence();
    drop(stale);
    let writer = lock.write(AcquireOptions::new()).await.unwrap();
    resource.write("settings", &key, writer.fence(), 2).unwrap();
    writer.release().await.unwrap();
    assert!(resource.read_fenced("settings", &key, fence).is_err());
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_upgradeable_reader_shares_with_readers_keeps_writers_out_and_upgrades_when_they_leave()
{
    for (layout, store) in stores() {
        let clients: Vec<LockClient> = ["u", "r", "w", "n"]
            .iter()
            .map(|name| client(store.clone(), name))
            .collect();
        let locks: Vec<RwLock> = clients
            .iter()
            .map(|client| client.rw_lock("config", 4).unwrap())
            .collect();
        let upgradeable = locks[0]
            .upgradeable_read(AcquireOptions::new())
            .await
            .unwrap();
        let reader = locks[1].read(AcquireOptions::new()).await.unwrap();
        assert!(upgradeable.is_safe() && reader.is_safe(), "{layout}");
        // One upgradeable reader at a time, and no writer beside it.
        assert!(
            locks[2]
                .try_upgradeable_read(AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "{layout}"
        );
        assert!(
            locks[2]
                .try_write(AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "{layout}"
        );
        // An upgrade that cannot finish in its budget hands the read back,
        // and lets readers in again.
        let failed = upgradeable
            .upgrade(wait(Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(
            matches!(failed.error, LockError::AcquireTimeout { .. }),
            "{layout}: {:?}",
            failed.error
        );
        let upgradeable = failed.guard;
        assert!(upgradeable.is_safe(), "{layout}");
        let extra = locks[3].try_read(AcquireOptions::new()).await.unwrap();
        assert!(extra.is_some(), "{layout}: readers come in again");
        drop(extra);

        let upgrading = tokio::spawn(async move { upgradeable.upgrade(wait(LEASE * 3)).await });
        sleep(Duration::from_secs(1)).await;
        assert!(!upgrading.is_finished(), "{layout}: a reader is inside");
        assert!(
            locks[3]
                .try_read(AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "{layout}: the upgrade holds new readers back"
        );
        reader.release().await.unwrap();
        let write = timeout(PATIENCE, upgrading)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(write.is_safe(), "{layout}");
        // The failed upgrade held the write lock (fence 1) for a while too.
        assert_eq!(write.fence(), Fence(2), "{layout}");
        write.release().await.unwrap();
        // Everything let go: a writer gets in at once.
        let next = locks[2].try_write(AcquireOptions::new()).await.unwrap();
        assert_eq!(next.expect("free").fence(), Fence(3), "{layout}");
        for client in clients {
            client.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    for readers in [0, 1_001] {
        let error = a.rw_lock("config", readers).unwrap_err();
        assert!(
            matches!(error, LockError::TooManyReaders { max: 1_000, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("1 to 1000"), "{error}");
    }
    let plain = client(MemoryStore::builder().sort_keys(false).build(), "a");
    let error = plain.rw_lock("config", 101).unwrap_err();
    assert!(
        matches!(error, LockError::TooManyReaders { max: 100, .. }),
        "{error:?}"
    );
    plain.shutdown().await.unwrap();

    let lock = a.rw_lock("config", 4).unwrap();
    for options in [
        AcquireOptions::new().reentrant(true),
        AcquireOptions::new().busy_unless_dead(true),
        AcquireOptions::new().delete_on_release(true),
        AcquireOptions::new().only_if_exists(true),
        AcquireOptions::new().lease(Duration::ZERO),
    ] {
        assert!(lock.read(options.clone()).await.is_err(), "{options:?}");
        assert!(lock.write(options.clone()).await.is_err(), "{options:?}");
        assert!(lock.upgradeable_read(options).await.is_err());
    }
    assert!(matches!(
        lock.try_read(wait(Duration::from_secs(1))).await,
        Err(LockError::InvalidConfig(_))
    ));
    assert!(store.records().is_empty(), "{:?}", store.records());

    // Opened with another count than the store shows.
    let read = lock.read(AcquireOptions::new()).await.unwrap();
    let b = client(store.clone(), "b");
    let error = b
        .rw_lock("config", 8)
        .unwrap()
        .read(AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            LockError::ReadersMismatch {
                readers: 8,
                found: 4,
                ..
            }
        ),
        "{error:?}"
    );
    read.release().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn with_read_and_with_write_run_work_under_the_lock() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let lock = a.rw_lock("config", 2).unwrap();
    let fence = lock
        .with_write(AcquireOptions::new(), |view: LockView| async move {
            view.fence()
        })
        .await
        .unwrap();
    assert_eq!(fence, Fence(1));
    let seen = lock
        .with_read(AcquireOptions::new(), |view: ReadView| async move {
            (view.fence(), view.is_safe())
        })
        .await
        .unwrap();
    assert_eq!(seen, (Fence(1), true));
    // Released after: a writer gets in at once.
    assert!(
        lock.try_write(AcquireOptions::new())
            .await
            .unwrap()
            .is_some()
    );
    a.shutdown().await.unwrap();
}

/// Who trusts the lock right now, checked whenever anyone is admitted.
#[derive(Default)]
struct Inside {
    readers: Vec<ReadView>,
    writers: Vec<LockView>,
}

impl Inside {
    /// Never a safe writer beside a safe reader or another safe writer.
    fn check(&self, seed: u64) {
        let readers = self.readers.iter().filter(|view| view.is_safe()).count();
        let writers = self.writers.iter().filter(|view| view.is_safe()).count();
        assert!(
            writers == 0 || (writers == 1 && readers == 0),
            "seed {seed}: {writers} writers and {readers} readers trust the lock at once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn never_a_writer_beside_a_reader_under_faults_and_late_replies() {
    // RW_SEEDS=n runs n seeds (printed, each replayable by its number).
    let seeds: u64 = std::env::var("RW_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(12);
    for seed in 0..seeds {
        println!("seed {seed}");
        // Calls wait up to 300 ms before they apply (the faulty store's
        // delay) and their replies come back 50 ms (writes) or 20 ms (reads)
        // after they applied.
        let store = MemoryStore::new();
        let late = support::Delayed::new(store.clone());
        late.delay_writes(Duration::from_millis(50));
        late.delay_reads(Duration::from_millis(20));
        let faults = FaultConfig::NONE
            .with_ambiguous_applied(0.05)
            .with_ambiguous_not_applied(0.05)
            .with_unavailable(0.05)
            .with_delay(Duration::ZERO, Duration::from_millis(300));
        let inside = Arc::new(Mutex::new(Inside::default()));
        let mut tasks = Vec::new();
        let mut clients = Vec::new();
        let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for i in 0..5u64 {
            let replies_late = lock_core::layer::Layered::new(late.clone(), store.clone());
            let faulty = FaultyStore::new(replies_late, seed * 100 + i).with_faults(faults);
            let client = LockClient::builder(faulty)
                .owner(format!("c{i}"))
                .lease(Duration::from_secs(2))
                .heartbeat_period(Duration::from_millis(400))
                .refresh_period(Duration::from_millis(100))
                .retry_backoff(Duration::from_millis(10), Duration::from_millis(100))
                .build()
                .unwrap();
            let lock = client.rw_lock("shared", 3).unwrap();
            clients.push(client);
            let inside = inside.clone();
            let (writes, reads) = (writes.clone(), reads.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(seed * 1_000 + i);
                for _ in 0..8 {
                    let options = wait(Duration::from_secs(20));
                    match rng.u8(..4) {
                        0 => {
                            if let Ok(guard) = lock.write(options).await {
                                inside.lock().unwrap().writers.push(guard.view());
                                inside.lock().unwrap().check(seed);
                                writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                sleep(Duration::from_millis(rng.u64(0..1_500))).await;
                                inside.lock().unwrap().check(seed);
                                let _ = guard.release().await;
                            }
                        }
                        1 => {
                            if let Ok(guard) = lock.upgradeable_read(options.clone()).await {
                                inside.lock().unwrap().readers.push(guard.view());
                                inside.lock().unwrap().check(seed);
                                sleep(Duration::from_millis(rng.u64(0..500))).await;
                                match guard.upgrade(options).await {
                                    Ok(write) => {
                                        // Its own read is no reader beside it.
                                        inside
                                            .lock()
                                            .unwrap()
                                            .readers
                                            .retain(|read| read.slot().owner() != write.owner());
                                        inside.lock().unwrap().writers.push(write.view());
                                        inside.lock().unwrap().check(seed);
                                        writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                        sleep(Duration::from_millis(rng.u64(0..500))).await;
                                        inside.lock().unwrap().check(seed);
                                        let _ = write.release().await;
                                    }
                                    Err(failed) => drop(failed.guard),
                                }
                            }
                        }
                        _ => {
                            if let Ok(guard) = lock.read(options).await {
                                inside.lock().unwrap().readers.push(guard.view());
                                inside.lock().unwrap().check(seed);
                                reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                sleep(Duration::from_millis(rng.u64(0..1_500))).await;
                                inside.lock().unwrap().check(seed);
                                let _ = guard.release().await;
                            }
                        }
                    }
                }
            }));
        }
        // Checked at every step of time too, not only at admissions.
        let watcher = {
            let inside = inside.clone();
            tokio::spawn(async move {
                loop {
                    sleep(Duration::from_millis(7)).await;
                    inside.lock().unwrap().check(seed);
                }
            })
        };
        for task in tasks {
            timeout(PATIENCE, task).await.expect("bounded").unwrap();
        }
        watcher.abort();
        let (writes, reads) = (
            writes.load(std::sync::atomic::Ordering::Relaxed),
            reads.load(std::sync::atomic::Ordering::Relaxed),
        );
        println!("seed {seed}: {writes} writes, {reads} reads");
        assert!(
            writes > 0 && reads > 0,
            "seed {seed}: {writes} writes, {reads} reads"
        );
        for client in clients {
            let _ = client.shutdown().await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_writer_gets_in_while_readers_keep_coming() {
    let store = MemoryStore::new();
    let readers: Vec<LockClient> = (0..3)
        .map(|i| client(store.clone(), &format!("r{i}")))
        .collect();
    // Readers arrive every 300 ms from three clients, each reading for 1 s,
    // so the lock is never without one.
    let arrivals: Vec<_> = readers
        .iter()
        .enumerate()
        .map(|(i, client)| {
            let lock = client.rw_lock("config", 8).unwrap();
            tokio::spawn(async move {
                sleep(Duration::from_millis(100 * i as u64)).await;
                let mut admitted = Vec::new();
                let end = Instant::now() + Duration::from_secs(20);
                while Instant::now() < end {
                    let lock = lock.clone();
                    admitted.push(tokio::spawn(async move {
                        if let Ok(read) = lock.read(wait(LEASE * 3)).await {
                            sleep(Duration::from_secs(1)).await;
                            read.release().await.unwrap();
                        }
                    }));
                    sleep(Duration::from_millis(300)).await;
                }
                for read in admitted {
                    read.await.unwrap();
                }
            })
        })
        .collect();
    sleep(Duration::from_secs(3)).await;
    let w = client(store.clone(), "w");
    let lock = w.rw_lock("config", 8).unwrap();
    let started = Instant::now();
    let write = lock.write(wait(LEASE * 3)).await.unwrap();
    // The readers inside when it came leave within a read (1 s); the writer
    // sees the last leave at its next poll.
    assert!(
        started.elapsed() <= Duration::from_secs(1) + REFRESH * 2,
        "{:?}",
        started.elapsed()
    );
    write.release().await.unwrap();
    for arrival in arrivals {
        timeout(PATIENCE, arrival).await.unwrap().unwrap();
    }
    for client in readers {
        client.shutdown().await.unwrap();
    }
    w.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_whose_read_was_lost_never_writes_beside_a_reader_of_its_own_client() {
    // One reader slot. The upgradeable reader's slot is forced away (an
    // operator); another task of the same client then reads, in that slot.
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let lock = a.rw_lock("config", 1).unwrap();
    let upgradeable = lock.upgradeable_read(AcquireOptions::new()).await.unwrap();
    let slot = upgradeable.slot().key().clone();
    let operator = client(store.clone(), "operator");
    operator.force_release(slot.clone()).await.unwrap();
    timeout(PATIENCE, upgradeable.until_unsafe()).await.unwrap();
    let reader = lock.read(wait(LEASE)).await.unwrap();
    assert_eq!(reader.slot().key(), &slot, "the same slot");
    assert!(reader.is_safe());
    let upgraded = upgradeable.upgrade(wait(Duration::from_secs(2))).await;
    assert!(
        upgraded.is_err(),
        "a write beside a safe read of the same client"
    );
    assert!(reader.is_safe());
    drop(upgraded);
    reader.release().await.unwrap();
    a.shutdown().await.unwrap();
    operator.shutdown().await.unwrap();
}

/// A store that says it deletes released records (as python-dynamodb-lock's
/// layout does).
#[derive(Debug)]
struct DeletesReleased;

impl lock_core::layer::StoreLayer for DeletesReleased {
    fn capabilities(&self, inner: lock_core::Capabilities) -> lock_core::Capabilities {
        inner.with_keeps_released_records(false)
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_deletes_released_records_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(
        lock_core::layer::Layered::new(DeletesReleased, store.clone()),
        "a",
    );
    let error = a.rw_lock("config", 4).unwrap_err();
    assert!(
        matches!(&error, LockError::InvalidInput { reason, .. } if reason.contains("keeps released records")),
        "{error:?}"
    );
    assert!(store.records().is_empty());
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_one_attempt_write_clears_a_crashed_readers_slot_once_it_may() {
    let store = MemoryStore::new();
    let (dead, crash) = crashable(&store, "dead");
    let read = dead
        .rw_lock("config", 2)
        .unwrap()
        .read(AcquireOptions::new())
        .await
        .unwrap();
    crash.set_unavailable(true);
    let b = client(store.clone(), "b");
    let lock = b.rw_lock("config", 2).unwrap();
    // Seen now; its lease runs out 10.1 s from now, as the writer sees it.
    assert!(
        lock.try_write(AcquireOptions::new())
            .await
            .unwrap()
            .is_none()
    );
    sleep(LEASE.mul_f64(1.01) + Duration::from_millis(100)).await;
    let write = lock.try_write(AcquireOptions::new()).await.unwrap();
    assert!(write.is_some(), "the crashed reader's slot was due");
    drop(write);
    drop(read);
    b.shutdown().await.unwrap();
}

/// One name for fences of a reader-writer lock: a writer, a reader and an
/// upgraded reader of two clients present fences of the write lock
/// (`writer_key`), so one resource admits them in fence order, on both
/// layouts, and refuses none as another lock's.
#[tokio::test(start_paused = true)]
async fn writers_and_readers_of_one_lock_fence_under_one_name() {
    for (layout, store) in stores() {
        let a = client(store.clone(), "a");
        let b = client(store.clone(), "b");
        let lock_a = a.rw_lock("config", 3).unwrap();
        let lock_b = b.rw_lock("config", 3).unwrap();
        let name = lock_a.writer_key().clone();
        assert_eq!(lock_b.writer_key(), &name, "{layout}");
        let resource = FencedResource::new();

        let write = lock_a.write(AcquireOptions::new()).await.unwrap();
        assert_eq!(write.key(), &name, "{layout}");
        resource
            .write("settings", write.key(), write.fence(), 1)
            .unwrap();
        let first = write.fence();
        write.release().await.unwrap();

        let read = lock_b.read(AcquireOptions::new()).await.unwrap();
        assert_eq!(read.writer_key(), &name, "{layout}");
        assert_ne!(
            read.slot().key(),
            &name,
            "{layout}: a slot is a lock of its own"
        );
        assert_eq!(
            resource.read_fenced("settings", read.writer_key(), read.fence()),
            Ok(Some(1)),
            "{layout}"
        );
        read.release().await.unwrap();

        let upgradeable = lock_b
            .upgradeable_read(AcquireOptions::new())
            .await
            .unwrap();
        assert_eq!(upgradeable.writer_key(), &name, "{layout}");
        let write = upgradeable.upgrade(AcquireOptions::new()).await.unwrap();
        assert_eq!(write.key(), &name, "{layout}");
        assert!(write.fence() > first, "{layout}");
        resource
            .write("settings", write.key(), write.fence(), 2)
            .unwrap();
        let second = write.fence();
        write.release().await.unwrap();

        // The first writer's fence, late: stale, not another lock's.
        assert!(
            matches!(
                resource.write("settings", &name, first, 3),
                Err(lock_core::FenceRefused::Stale { .. })
            ),
            "{layout}"
        );
        assert_eq!(resource.read("settings"), Some((2, second)), "{layout}");
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    }
}
