//! Client drills through the [fault proxy](crate::proxy): the lock client on a
//! real store whose network breaks, for every backend alike. Each drill takes
//! the store twice, once reached directly and once through the proxy (built by
//! the caller, with timeouts short enough for a 2 s lease), and panics with
//! what went wrong, as a test does.
//!
//! * [`partitioned_holder`]: the holder's connections go silent; it is in
//!   danger, then lost, before a waiter going direct takes over with a higher
//!   fence, and its release after the partition heals writes nothing.
//! * [`contention_under_faults`]: three clients take one key in turns while the
//!   proxy fails a fraction of the traffic; no two safe holdings overlap, fences
//!   rise with time, and nothing is left held after every client shut down.
//! * [`semaphore_under_faults`]: five clients share a semaphore of two permits
//!   while the proxy fails a fraction of the traffic; never more than two safe
//!   holders at once, one per slot, fences rising per slot, nothing left held.
//! * [`sets_under_faults`]: four clients take overlapping sets of three keys
//!   all or nothing (in one request where the store can) while the proxy fails
//!   a fraction of the traffic; no key in two safe sets at once, fences rising
//!   per key, nothing left held.
//! * [`reader_writer_under_faults`]: five clients read and write one
//!   reader-writer lock while the proxy fails a fraction of the traffic; never
//!   a safe write beside a safe read or another write, readers together,
//!   nothing left held.
//! * [`partitioned_reader`]: a reader's connections go silent; a writer going
//!   direct is admitted only once the reader no longer trusts its read.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, Fence, LockClient, LockError, LockKey, StoreClock,
};
use tokio::time::Instant;

use crate::proxy::{FaultProxy, ProxyMode};

/// Every wait on a future that might never resolve is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

/// The lease of every drill's clients.
pub const DRILL_LEASE: Duration = Duration::from_secs(2);

fn client(store: impl ConditionalStore, owner: &str) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(DRILL_LEASE)
        .build()
        .unwrap_or_else(|error| panic!("drill client {owner}: {error}"))
}

/// `future`, or a panic naming `what` after [`LIMIT`].
pub(crate) async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {LIMIT:?}"))
}

/// The sum of what the `workers` return, each within `limit`; panics if one
/// panicked or did not finish.
async fn joined(workers: Vec<tokio::task::JoinHandle<usize>>, limit: Duration) -> usize {
    let mut total = 0;
    for worker in workers {
        match tokio::time::timeout(limit, worker).await {
            Ok(Ok(count)) => total += count,
            Ok(Err(error)) => panic!("a worker panicked: {error}"),
            Err(_) => panic!("the workers did not finish within {limit:?}"),
        }
    }
    total
}

/// Shut every client down (each bounded), panicking on an error.
async fn shut_down(clients: &[LockClient]) {
    for worker in clients {
        bounded("a worker's shutdown", worker.shutdown())
            .await
            .unwrap_or_else(|error| panic!("a worker's shutdown: {error}"));
    }
}

/// The seed of a drill's faults: `LOCK_PROXY_SEED` to replay one, otherwise a
/// new one. Printed either way.
pub fn drill_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    let seed = std::env::var("LOCK_PROXY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| RandomState::new().hash_one(std::time::SystemTime::now()));
    println!("fault proxy seed {seed} (replay with LOCK_PROXY_SEED={seed})");
    seed
}

/// A partitioned holder is lost before a waiter going direct takes over; see
/// the [module docs](self).
pub async fn partitioned_holder<S>(direct: S, via: S, proxy: &FaultProxy)
where
    S: ConditionalStore + Clone,
{
    let lease = DRILL_LEASE;
    let holder = client(via, "holder");
    let waiter = client(direct.clone(), "waiter");
    let key = LockKey::new("job");
    let guard = bounded(
        "the holder's acquire",
        holder.acquire(key.clone(), AcquireOptions::new()),
    )
    .await
    .unwrap_or_else(|error| panic!("the holder's acquire: {error}"));
    // The key's first fence: 1, or the clock's floor on a store whose
    // records can be deleted behind its back (FencesAfterDeletion).
    let first = guard.fence();
    let in_danger = tokio::spawn({
        let unsafe_ = guard.until_unsafe();
        async move {
            let reason = unsafe_.await;
            (Instant::now(), reason)
        }
    });
    let lost = tokio::spawn({
        let lost = guard.until_ended();
        async move {
            let reason = lost.await;
            (Instant::now(), reason)
        }
    });
    // Let a heartbeat or two through first.
    tokio::time::sleep(lease / 2).await;

    proxy.set(ProxyMode::Blackhole);
    let cut = Instant::now();
    let taken = bounded(
        "the waiter's acquire",
        waiter.acquire(
            key.clone(),
            AcquireOptions::new().wait(Duration::from_secs(10)),
        ),
    )
    .await
    .unwrap_or_else(|error| panic!("the waiter takes the partitioned holder's lock over: {error}"));
    let taken_at = Instant::now();
    let Ok((in_danger_at, danger)) = bounded("the holder's danger", in_danger).await else {
        panic!("the danger watch panicked");
    };
    let Ok((lost_at, reason)) = bounded("the holder's loss", lost).await else {
        panic!("the loss watch panicked");
    };
    println!(
        "cut at 0; in danger at {:?} ({danger}); lost at {:?} ({reason}); taken over at {:?}",
        in_danger_at - cut,
        lost_at - cut,
        taken_at - cut
    );
    assert!(in_danger_at < lost_at, "in danger before lost");
    assert!(
        lost_at <= taken_at,
        "the holder gave up before the waiter took over"
    );
    // A waiter that must watch the record (the drill's clients declare no
    // clock bound) counts a lease from its first look, after the cut. One the
    // store's own clock lets count from the holder's last heartbeat (before
    // the cut, by a heartbeat period or more if it ran late) may come
    // sooner: the holder's loss before it, checked above, is what matters.
    if direct.capabilities().clock != StoreClock::Age {
        assert!(
            taken_at - cut >= lease,
            "the waiter waited out a lease: {:?}",
            taken_at - cut
        );
    }
    assert_eq!(taken.fence(), Fence(first.get() + 1), "fences only go up");
    assert_eq!(taken.took_over().map(|t| t.owner.as_str()), Some("holder"));

    // Healed: the old holder's release changes nothing.
    proxy.set(ProxyMode::Pass);
    let stale = bounded("the stale release", guard.release()).await;
    assert!(matches!(stale, Err(LockError::Lost { .. })), "{stale:?}");
    let record = bounded("a read", direct.get(&key))
        .await
        .unwrap_or_else(|error| panic!("reading the record: {error}"));
    let record = record.unwrap_or_else(|| panic!("the record is gone"));
    assert_eq!(
        (record.owner.as_str(), record.fence, record.released),
        ("waiter", Fence(first.get() + 1), false)
    );
    bounded("the waiter's release", taken.release())
        .await
        .unwrap_or_else(|error| panic!("the waiter's release: {error}"));
    for (who, client) in [("holder", &holder), ("waiter", &waiter)] {
        bounded("a shutdown", client.shutdown())
            .await
            .unwrap_or_else(|error| panic!("the {who}'s shutdown: {error}"));
    }
}

/// One safe holding, as seen by the holder: from its acquire's return to the
/// last moment it still found its lease safe.
#[derive(Clone, Copy, Debug)]
struct Holding {
    from: Instant,
    to: Instant,
    fence: Fence,
}

/// Three clients take one key in turns, eight times each, through the proxy
/// in `faults` (for example [`ProxyMode::ResetSome`] or
/// [`ProxyMode::FailSomeExchanges`] with a fifth of the traffic); see the
/// [module docs](self).
pub async fn contention_under_faults<S>(direct: S, via: S, proxy: &FaultProxy, faults: ProxyMode)
where
    S: ConditionalStore + Clone,
{
    proxy.set(faults);
    let key = LockKey::new("contended");
    let holdings: Arc<Mutex<Vec<Holding>>> = Arc::default();
    let clients: Vec<LockClient> = (0..3)
        .map(|i| client(via.clone(), &format!("worker-{i}")))
        .collect();
    let mut workers = Vec::new();
    for worker in &clients {
        let (worker, key, holdings) = (worker.clone(), key.clone(), holdings.clone());
        workers.push(tokio::spawn(async move {
            let mut acquired = 0;
            for _ in 0..8 {
                let options = AcquireOptions::new().wait(Duration::from_secs(8));
                let Ok(guard) = worker.acquire(key.clone(), options).await else {
                    continue;
                };
                acquired += 1;
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
                let to = Instant::now();
                if guard.is_safe() {
                    holdings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Holding {
                            from,
                            to,
                            fence: guard.fence(),
                        });
                }
                // A failed release is fine here: the record expires or the
                // client's background clean-up releases it.
                let _ = guard.release().await;
            }
            acquired
        }));
    }
    let acquired = joined(workers, Duration::from_secs(120)).await;
    let stats = proxy.stats();
    println!("{acquired} acquisitions; proxy {stats:?}");
    assert!(
        stats.reset_before_forwarding > 0 && stats.replies_lost > 0,
        "the drill injected both kinds of fault: {stats:?}"
    );
    assert!(acquired >= 12, "the lock kept changing hands: {acquired}");

    // No two safe holdings overlapped, and fences rose with time.
    let mut holdings = holdings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    holdings.sort_by_key(|h| h.from);
    for pair in holdings.windows(2) {
        assert!(
            pair[0].to <= pair[1].from,
            "two holders at once: {:?} and {:?}",
            pair[0],
            pair[1]
        );
        assert!(
            pair[0].fence < pair[1].fence,
            "{:?} then {:?}",
            pair[0],
            pair[1]
        );
    }

    // Healed, every client shuts down; nothing is left held.
    proxy.set(ProxyMode::Pass);
    shut_down(&clients).await;
    let record = bounded("a read", direct.get(&key))
        .await
        .unwrap_or_else(|error| panic!("reading the record: {error}"));
    assert!(
        record.as_ref().is_none_or(|r| r.released),
        "left held with nobody heartbeating: {record:?}"
    );
}

/// One safe holding of a permit, with its slot.
#[derive(Clone, Copy, Debug)]
struct PermitHolding {
    slot: u32,
    from: Instant,
    to: Instant,
    fence: Fence,
}

/// Five clients take permits of a two-permit semaphore, four times each,
/// through the proxy in `faults`; see the [module docs](self).
pub async fn semaphore_under_faults<S>(direct: S, via: S, proxy: &FaultProxy, faults: ProxyMode)
where
    S: ConditionalStore + Clone,
{
    const PERMITS: u32 = 2;
    proxy.set(faults);
    let holdings: Arc<Mutex<Vec<PermitHolding>>> = Arc::default();
    let clients: Vec<LockClient> = (0..5)
        .map(|i| client(via.clone(), &format!("worker-{i}")))
        .collect();
    let mut workers = Vec::new();
    for worker in &clients {
        let semaphore = worker
            .semaphore("pool", PERMITS)
            .unwrap_or_else(|error| panic!("opening the semaphore: {error}"));
        let holdings = holdings.clone();
        workers.push(tokio::spawn(async move {
            let mut acquired = 0;
            for _ in 0..4 {
                let options = AcquireOptions::new().wait(Duration::from_secs(8));
                let Ok(permit) = semaphore.acquire(options).await else {
                    continue;
                };
                acquired += 1;
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(50)).await;
                let to = Instant::now();
                if permit.is_safe() {
                    holdings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(PermitHolding {
                            slot: permit.slot(),
                            from,
                            to,
                            fence: permit.fence(),
                        });
                }
                let _ = permit.release().await;
            }
            acquired
        }));
    }
    let acquired = joined(workers, Duration::from_secs(180)).await;
    let stats = proxy.stats();
    println!("{acquired} permits taken; proxy {stats:?}");
    assert!(
        acquired >= 10,
        "the permits kept changing hands: {acquired}"
    );
    let holdings = holdings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // Never more than PERMITS safe holdings at one instant.
    let mut edges: Vec<(Instant, i32)> = holdings
        .iter()
        .flat_map(|h| [(h.from, 1), (h.to, -1)])
        .collect();
    // At one instant an end comes before a start.
    edges.sort_by_key(|&(at, step)| (at, step));
    let mut running = 0;
    for (at, step) in edges {
        running += step;
        assert!(
            running <= PERMITS as i32,
            "{running} safe permit holders at {at:?}: {holdings:?}"
        );
    }
    // Per slot: one holder at a time, fences rising.
    for slot in 0..PERMITS {
        let mut mine: Vec<&PermitHolding> = holdings.iter().filter(|h| h.slot == slot).collect();
        mine.sort_by_key(|h| h.from);
        for pair in mine.windows(2) {
            assert!(
                pair[0].to <= pair[1].from,
                "slot {slot}: {:?} and {:?}",
                pair[0],
                pair[1]
            );
            assert!(
                pair[0].fence < pair[1].fence,
                "slot {slot}: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    proxy.set(ProxyMode::Pass);
    shut_down(&clients).await;
    // Nothing left held: every slot's record is absent or released (the
    // header that holds the count without sort keys is held for good).
    nothing_left_held(&direct, |key| key.partition().ends_with("#permits")).await;
}

/// One safe holding of a set of keys.
#[derive(Clone, Debug)]
struct SetHolding {
    keys: Vec<(LockKey, Fence)>,
    from: Instant,
    to: Instant,
    at_once: bool,
}

/// Every record of `direct` is released (or `skip` says to leave it alone).
async fn nothing_left_held(direct: &impl ConditionalStore, skip: impl Fn(&LockKey) -> bool) {
    let mut cursor = None;
    loop {
        let page = bounded("a listing", direct.list(None, cursor, 100))
            .await
            .unwrap_or_else(|error| panic!("listing the records: {error}"));
        for record in page.records.iter().filter(|record| !skip(&record.key)) {
            assert!(
                record.released,
                "left held with nobody heartbeating: {record:?}"
            );
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
}

/// Four clients take overlapping sets of three of five keys, all or nothing,
/// four times each, through the proxy in `faults`; see the
/// [module docs](self).
pub async fn sets_under_faults<S>(direct: S, via: S, proxy: &FaultProxy, faults: ProxyMode)
where
    S: ConditionalStore + Clone,
{
    proxy.set(faults);
    let holdings: Arc<Mutex<Vec<SetHolding>>> = Arc::default();
    let clients: Vec<LockClient> = (0..4)
        .map(|i| client(via.clone(), &format!("worker-{i}")))
        .collect();
    let mut workers = Vec::new();
    for (i, worker) in clients.iter().enumerate() {
        let (worker, holdings) = (worker.clone(), holdings.clone());
        workers.push(tokio::spawn(async move {
            let mut acquired = 0;
            for round in 0..4 {
                // Each set overlaps every other worker's in some rounds, in
                // another order.
                let keys: Vec<String> = [0, 3, 1]
                    .iter()
                    .map(|offset| format!("set-{}", (i + round + offset) % 5))
                    .collect();
                let options = AcquireOptions::new().wait(Duration::from_secs(8));
                let Ok(group) = worker.acquire_all(keys, options).await else {
                    continue;
                };
                acquired += 1;
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(50)).await;
                let to = Instant::now();
                if group.is_safe() {
                    holdings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(SetHolding {
                            keys: group
                                .fences()
                                .map(|(key, fence)| (key.clone(), fence))
                                .collect(),
                            from,
                            to,
                            at_once: group.taken_at_once(),
                        });
                }
                let _ = group.release().await;
            }
            acquired
        }));
    }
    let acquired = joined(workers, Duration::from_secs(180)).await;
    let holdings = holdings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let at_once = holdings.iter().filter(|h| h.at_once).count();
    println!(
        "{acquired} sets taken ({at_once} of the safe ones in one request); proxy {:?}",
        proxy.stats()
    );
    assert!(acquired >= 6, "the sets kept changing hands: {acquired}");
    // Per key: one safe set at a time, fences rising.
    for n in 0..5 {
        let key = LockKey::new(format!("set-{n}"));
        let mut mine: Vec<(&SetHolding, Fence)> = holdings
            .iter()
            .filter_map(|h| {
                h.keys
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, fence)| (h, *fence))
            })
            .collect();
        mine.sort_by_key(|(h, _)| h.from);
        for pair in mine.windows(2) {
            assert!(
                pair[0].0.to <= pair[1].0.from,
                "{key} in two safe sets at once: {:?} and {:?}",
                pair[0].0,
                pair[1].0
            );
            assert!(
                pair[0].1 < pair[1].1,
                "{key}: {:?} then {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    proxy.set(ProxyMode::Pass);
    shut_down(&clients).await;
    nothing_left_held(&direct, |_| false).await;
}

/// One safe read or write of a reader-writer lock.
#[derive(Clone, Copy, Debug)]
struct RwHolding {
    write: bool,
    from: Instant,
    to: Instant,
}

/// Five clients read (two rounds in three) and write one reader-writer lock,
/// four times each, through the proxy in `faults`; see the
/// [module docs](self).
pub async fn reader_writer_under_faults<S>(direct: S, via: S, proxy: &FaultProxy, faults: ProxyMode)
where
    S: ConditionalStore + Clone,
{
    proxy.set(faults);
    let holdings: Arc<Mutex<Vec<RwHolding>>> = Arc::default();
    let clients: Vec<LockClient> = (0..5)
        .map(|i| client(via.clone(), &format!("worker-{i}")))
        .collect();
    let mut workers = Vec::new();
    for (i, worker) in clients.iter().enumerate() {
        let lock = worker
            .rw_lock("shared", 4)
            .unwrap_or_else(|error| panic!("opening the reader-writer lock: {error}"));
        let holdings = holdings.clone();
        workers.push(tokio::spawn(async move {
            let mut taken = 0;
            for round in 0..4 {
                let options = AcquireOptions::new().wait(Duration::from_secs(10));
                let write = (i + round) % 3 == 0;
                let (from, to, safe, release) = if write {
                    let Ok(guard) = lock.write(options).await else {
                        continue;
                    };
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let to = Instant::now();
                    let safe = guard.is_safe();
                    (from, to, safe, guard.release().await)
                } else {
                    let Ok(guard) = lock.read(options).await else {
                        continue;
                    };
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let to = Instant::now();
                    let safe = guard.is_safe();
                    (from, to, safe, guard.release().await)
                };
                let _ = release;
                taken += 1;
                if safe {
                    holdings
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(RwHolding { write, from, to });
                }
            }
            taken
        }));
    }
    let taken = joined(workers, Duration::from_secs(240)).await;
    let holdings = holdings
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let writes = holdings.iter().filter(|h| h.write).count();
    println!(
        "{taken} reads and writes taken ({writes} safe writes); proxy {:?}",
        proxy.stats()
    );
    assert!(taken >= 10 && writes >= 2, "{taken} taken, {writes} writes");
    for (i, a) in holdings.iter().enumerate() {
        for b in &holdings[i + 1..] {
            let overlap = a.from < b.to && b.from < a.to;
            assert!(
                !(overlap && (a.write || b.write)),
                "a write beside another holding: {a:?} and {b:?}"
            );
        }
    }
    proxy.set(ProxyMode::Pass);
    shut_down(&clients).await;
    nothing_left_held(&direct, |key| key.to_string().ends_with("#readers")).await;
}

/// A reader of a reader-writer lock is partitioned (its connections go
/// silent); a writer going direct is admitted only once the reader can no
/// longer trust its read, having cleared its slot; the healed reader's
/// release writes nothing. See the [module docs](self).
pub async fn partitioned_reader<S>(direct: S, via: S, proxy: &FaultProxy)
where
    S: ConditionalStore + Clone,
{
    let lease = DRILL_LEASE;
    let reader = client(via, "reader");
    let writer = client(direct.clone(), "writer");
    let read = bounded(
        "the reader's read",
        reader
            .rw_lock("shared", 2)
            .unwrap_or_else(|error| panic!("opening the reader-writer lock: {error}"))
            .read(AcquireOptions::new()),
    )
    .await
    .unwrap_or_else(|error| panic!("the reader's read: {error}"));
    let lost = tokio::spawn({
        let unsafe_ = read.until_unsafe();
        async move {
            let reason = unsafe_.await;
            (Instant::now(), reason)
        }
    });
    // Let a heartbeat or two through first.
    tokio::time::sleep(lease / 2).await;
    proxy.set(ProxyMode::Blackhole);
    let cut = Instant::now();
    let write = bounded(
        "the writer's write",
        writer
            .rw_lock("shared", 2)
            .unwrap_or_else(|error| panic!("opening the reader-writer lock: {error}"))
            .write(AcquireOptions::new().wait(Duration::from_secs(10))),
    )
    .await
    .unwrap_or_else(|error| panic!("the writer is admitted once the reader is gone: {error}"));
    let admitted = Instant::now();
    let Ok((unsafe_at, reason)) = bounded("the reader's loss", lost).await else {
        panic!("the loss watch panicked");
    };
    println!(
        "cut at 0; the read unsafe at {:?} ({reason}); the writer admitted at {:?}",
        unsafe_at - cut,
        admitted - cut
    );
    assert!(
        unsafe_at <= admitted,
        "the reader stopped trusting its read before the writer was admitted"
    );
    assert!(write.is_safe());
    // Healed: the old reader's release changes nothing the writer holds.
    proxy.set(ProxyMode::Pass);
    let _ = bounded("the stale release", read.release()).await;
    assert!(write.is_safe(), "the writer keeps the lock");
    bounded("the writer's release", write.release())
        .await
        .unwrap_or_else(|error| panic!("the writer's release: {error}"));
    for (who, client) in [("reader", &reader), ("writer", &writer)] {
        bounded("a shutdown", client.shutdown())
            .await
            .unwrap_or_else(|error| panic!("the {who}'s shutdown: {error}"));
    }
    nothing_left_held(&direct, |key| key.to_string().ends_with("#readers")).await;
}

/// A release announced by the store wakes a waiter of another store (its
/// own connections, as another process has) at once: the waiter polls every
/// 10 s, so without the announcement its next look would come at least 5 s
/// after its first; with it, the lock changes hands within a second of the
/// release. Also checks the waiter still gets the lock when it is never
/// announced (polling goes on): a store built without announcements.
pub async fn announced_hand_off<S>(holder_store: S, waiter_store: S)
where
    S: ConditionalStore + Clone,
{
    assert!(
        waiter_store.capabilities().announces_releases,
        "the drill needs a store that announces releases"
    );
    let holder = client(holder_store, "holder");
    let waiter = LockClient::builder(waiter_store)
        .owner("waiter")
        .lease(DRILL_LEASE)
        .refresh_period(Duration::from_secs(10))
        .build()
        .unwrap_or_else(|error| panic!("drill client waiter: {error}"));
    let key = LockKey::new("announced");
    let guard = bounded(
        "the holder's acquire",
        holder.acquire(key.clone(), AcquireOptions::new()),
    )
    .await
    .unwrap_or_else(|error| panic!("the holder's acquire: {error}"));
    let first = guard.fence();
    let waiting = tokio::spawn({
        let (waiter, key) = (waiter.clone(), key.clone());
        async move {
            let taken = waiter
                .acquire(key, AcquireOptions::new().wait(Duration::from_secs(30)))
                .await;
            (taken, Instant::now())
        }
    });
    // Past the waiter's first look (and the listener's start).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let released = Instant::now();
    bounded("the holder's release", guard.release())
        .await
        .unwrap_or_else(|error| panic!("the holder's release: {error}"));
    let (taken, taken_at) = bounded("the waiter's acquire", waiting)
        .await
        .unwrap_or_else(|error| panic!("the waiter's task: {error}"));
    let taken = taken.unwrap_or_else(|error| panic!("the waiter's acquire: {error}"));
    let hand_off = taken_at - released;
    println!("announced hand-off: {hand_off:?}");
    assert!(
        hand_off < Duration::from_secs(2),
        "the waiter took {hand_off:?} after the release; its next poll was 5 s or more away"
    );
    assert_eq!(taken.fence(), Fence(first.get() + 1));
    bounded("the waiter's release", taken.release())
        .await
        .unwrap_or_else(|error| panic!("the waiter's release: {error}"));
    shut_down(&[holder, waiter]).await;
}
