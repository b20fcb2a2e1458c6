//! Every way out of a lock stops it being trusted *before* the write that
//! could let another holder in is sent: a release, a release with data, a
//! dropped guard, `shutdown()`, a resignation, a dropped `Election`, a
//! released or dropped `Permit`, a detach, the final write of a min hold, a
//! local hand-off, a release retried after an ambiguous reply. Each runs on a
//! store that applies the leaving write at once and answers it seconds later
//! (paused time), while another process takes the lock the moment it can; at
//! every sampled instant at most one holder (or `permits` permits, or one
//! leader) may be trusted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{AcquireOptions, ElectionOptions, LockClient, LostReason, Role};
use lock_memory::{Fault, FaultyStore, MemoryStore, Op};
use support::{Delayed, client, wait};
use tokio::time::{Instant, timeout};

/// How late the leaving write is answered.
const LATE: Duration = Duration::from_secs(5);
/// How often trust is sampled, and for how long.
const STEP: Duration = Duration::from_millis(50);
const SPAN: Duration = Duration::from_secs(12);

/// What a contender exposes to the check: is it trusted now?
type Trusted = Arc<dyn Fn() -> bool + Send + Sync>;

/// The lock of a contender that acquires `name` on `client` as soon as it can,
/// published for sampling.
fn contend(client: &LockClient, name: &'static str) -> Trusted {
    let slot: Arc<Mutex<Option<lock_core::LockGuard>>> = Arc::default();
    let client = client.clone();
    let held = slot.clone();
    tokio::spawn(async move {
        let guard = client.acquire(name, wait(Duration::from_secs(60))).await;
        *held.lock().unwrap() = Some(guard.unwrap());
    });
    Arc::new(move || slot.lock().unwrap().as_ref().is_some_and(|g| g.is_safe()))
}

/// Start `leave` with writes answered [`LATE`]; once its first write has been
/// sent (and applied), answer writes promptly again and start the contenders;
/// then sample for [`SPAN`] that at most `most` of `holders` and the
/// contenders are trusted at once, and that the contenders did get in while
/// the leaving write's answer was on its way (so the check had teeth).
async fn never_more_trusted_than(
    most: usize,
    store: &Delayed,
    leave: impl Future<Output = ()> + Send + 'static,
    holders: Vec<Trusted>,
    contenders: impl FnOnce() -> Vec<Trusted>,
) {
    let writes = || {
        store
            .served()
            .iter()
            .filter(|call| call.op != "get")
            .count()
    };
    let sent_before = writes();
    store.delay_writes(LATE);
    let started = Instant::now();
    let leaving = tokio::spawn(leave);
    timeout(Duration::from_secs(1), async {
        while writes() == sent_before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the way out sent a write");
    store.delay_writes(Duration::ZERO);
    let contenders = contenders();
    let mut contender_in_before_answer = false;
    while Instant::now() - started < SPAN {
        let holders_trusted = holders.iter().filter(|trusted| trusted()).count();
        let contenders_trusted = contenders.iter().filter(|trusted| trusted()).count();
        let at = Instant::now() - started;
        assert!(
            holders_trusted + contenders_trusted <= most,
            "at {at:?}: {holders_trusted} leaving and {contenders_trusted} new holders trusted at once"
        );
        if contenders_trusted > 0 && at < LATE {
            contender_in_before_answer = true;
        }
        tokio::time::sleep(STEP).await;
    }
    assert!(
        contender_in_before_answer,
        "no contender got in while the leaving write was unanswered: the check proved nothing"
    );
    timeout(Duration::from_secs(60), leaving)
        .await
        .unwrap()
        .unwrap();
}

fn safe(view: &lock_core::LockView) -> Trusted {
    let view = view.clone();
    Arc::new(move || view.is_safe())
}

#[tokio::test(start_paused = true)]
async fn a_release_in_flight_is_not_safe() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    let leave = async move { guard.release().await.unwrap() };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
}

#[tokio::test(start_paused = true)]
async fn a_release_with_data_in_flight_is_not_safe() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    let leave = async move { guard.release_with_data(b"done".to_vec()).await.unwrap() };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_is_not_safe_while_its_release_is_in_flight() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    let leave = async move { drop(guard) };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
}

#[tokio::test(start_paused = true)]
async fn a_lock_released_by_shutdown_is_not_safe_while_the_release_is_in_flight() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    let leave = async move {
        a.shutdown().await.unwrap();
        drop(guard);
    };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
}

#[tokio::test(start_paused = true)]
async fn a_release_retried_after_an_ambiguous_reply_is_not_safe_meanwhile() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(memory.clone(), 7);
    let a = client(faulty.clone(), "a");
    let b = client(memory.clone(), "b");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let view = guard.view();
    // The release applies and its reply is lost; every retry for a while
    // finds the store unavailable.
    faulty.script(Op::Put, Fault::AmbiguousApplied);
    for _ in 0..6 {
        faulty.script(Op::Put, Fault::Unavailable);
    }
    let releasing = tokio::spawn(guard.release());
    let contender = contend(&b, "job");
    let started = Instant::now();
    let mut contender_in = false;
    while Instant::now() - started < SPAN {
        let both = view.is_safe() && contender();
        assert!(
            !both,
            "at {:?}: the releasing holder and the new one are both trusted",
            Instant::now() - started
        );
        contender_in |= contender();
        tokio::time::sleep(STEP).await;
    }
    assert!(contender_in, "the contender never got the lock");
    let _ = timeout(Duration::from_secs(60), releasing).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_final_write_of_a_min_hold_is_not_safe_in_flight() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a
        .acquire(
            "job",
            AcquireOptions::new().min_hold(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let holder = safe(&guard);
    let leave = async move { guard.release().await.unwrap() };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
    let puts = store.puts();
    assert!(
        puts.iter().any(|put| put
            .new
            .as_ref()
            .is_some_and(|new| new.rvn.final_until().is_some())),
        "the release was a final write: {puts:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_detached_lock_is_not_safe_from_the_moment_it_is_detached() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let view = guard.view();
    let detached = guard.detach().await.unwrap();
    assert!(
        !view.is_safe(),
        "detached: whoever holds its version may release it at any moment"
    );
    assert!(matches!(
        view.state(),
        lock_core::LeaseState::Lost {
            reason: LostReason::Released
        }
    ));
    assert!(detached.remaining() > Duration::ZERO, "{detached:?}");
    // Released by version in another process, and taken at once.
    b.release_version(detached.key().clone(), detached.version())
        .await
        .unwrap();
    let taken = b.try_acquire("job", AcquireOptions::new()).await.unwrap();
    assert!(taken.is_some());
    assert!(!view.is_safe());
}

#[tokio::test(start_paused = true)]
async fn a_lock_this_client_releases_by_version_is_not_safe_before_the_write() {
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    let version = guard.version();
    let leave = async move {
        a.release_version("job", &version).await.unwrap();
        drop(guard);
    };
    never_more_trusted_than(1, &store, leave, vec![holder], || vec![contend(&b, "job")]).await;
}

#[tokio::test(start_paused = true)]
async fn a_lock_handed_to_the_next_task_is_not_safe_before_the_hand_off_write() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let holder = safe(&guard);
    // Another task of the same client waits for the key: the release hands
    // it the lock, and that task's one write (answered late) takes it over.
    let next = contend(&a, "job");
    tokio::time::sleep(Duration::from_millis(10)).await;
    let puts = store.puts().len();
    store.delay_writes(LATE);
    let releasing = tokio::spawn(guard.release());
    timeout(Duration::from_secs(1), async {
        while store.puts().len() == puts {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the next task wrote");
    assert!(
        !holder(),
        "the hand-off write was sent while the old guard read as safe"
    );
    timeout(Duration::from_secs(1), releasing)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::sleep(LATE).await;
    assert!(next() && !holder());
}

// ---- Permits ---------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_permit_released_or_dropped_is_not_safe_in_flight() {
    for drop_it in [false, true] {
        let store = Delayed::new(MemoryStore::new());
        let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
        let semaphore = a.semaphore("pool", 2).unwrap();
        let first = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let second = semaphore.acquire(AcquireOptions::new()).await.unwrap();
        let holders = vec![safe(&first), safe(&second)];
        let leave = async move {
            if drop_it {
                drop(first);
            } else {
                first.release().await.unwrap();
            }
        };
        let contenders = move || {
            let slot: Arc<Mutex<Option<lock_core::Permit>>> = Arc::default();
            let held = slot.clone();
            let semaphore = b.semaphore("pool", 2).unwrap();
            tokio::spawn(async move {
                let permit = semaphore
                    .acquire(wait(Duration::from_secs(60)))
                    .await
                    .unwrap();
                *held.lock().unwrap() = Some(permit);
            });
            vec![
                Arc::new(move || slot.lock().unwrap().as_ref().is_some_and(|p| p.is_safe()))
                    as Trusted,
            ]
        };
        never_more_trusted_than(2, &store, leave, holders, contenders).await;
        drop(second);
    }
}

// ---- Elections ---------------------------------------------------------------

/// A candidate on `client` for "leader", trusted while it says it leads.
fn candidate(client: &LockClient) -> (lock_core::Election, Trusted) {
    let election = client.elect("leader", ElectionOptions::new()).unwrap();
    let watcher = election.watcher();
    let trusted =
        Arc::new(move || watcher.is_leader() || matches!(watcher.role(), Role::Leader { .. }));
    (election, trusted)
}

/// `a` leads "leader" (its election, its leadership's trust).
async fn leading(a: &LockClient) -> (lock_core::Election, Trusted) {
    let (election, trusted) = candidate(a);
    let leadership = timeout(Duration::from_secs(5), election.leadership())
        .await
        .unwrap()
        .unwrap();
    let both = trusted.clone();
    (
        election,
        Arc::new(move || both() || leadership.is_safe()) as Trusted,
    )
}

/// `a` leads; `leave` (made from `a` and its election) is its way out,
/// while a candidate on another client campaigns from the moment the leaving
/// write was sent: never two trusted leaders.
async fn never_two_leaders<F, Fut>(leave: F)
where
    F: FnOnce(LockClient, lock_core::Election) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let store = Delayed::new(MemoryStore::new());
    let (a, b) = (client(store.clone(), "a"), client(store.clone(), "b"));
    let (election, leader) = leading(&a).await;
    let keep = Arc::new(Mutex::new(Vec::new()));
    let kept = keep.clone();
    never_more_trusted_than(1, &store, leave(a, election), vec![leader], move || {
        let (election, trusted) = candidate(&b);
        kept.lock().unwrap().push(election);
        vec![trusted]
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_resigning_leader_is_deposed_before_its_release_is_sent() {
    never_two_leaders(|_, election| async move { election.resign().await.unwrap() }).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_election_is_deposed_before_its_release_is_sent() {
    never_two_leaders(|_, election| async move { drop(election) }).await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_deposes_the_leader_before_its_release_is_sent() {
    never_two_leaders(|a, election| async move {
        a.shutdown().await.unwrap();
        drop(election);
    })
    .await;
}

// ---- Work under the lock is gone before the write ----------------------------

/// A piece of work that records how many puts the store had served when it
/// was dropped.
struct Work {
    store: Delayed,
    dropped_at_puts: Arc<Mutex<Option<usize>>>,
}

impl Drop for Work {
    fn drop(&mut self) {
        *self.dropped_at_puts.lock().unwrap() = Some(self.store.puts().len());
    }
}

async fn forever(work: Work) {
    let _work = work;
    std::future::pending::<()>().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_cancels_with_lock_work_before_it_writes_the_release() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let dropped_at_puts = Arc::new(Mutex::new(None));
    let work = Work {
        store: store.clone(),
        dropped_at_puts: dropped_at_puts.clone(),
    };
    let running = {
        let a = a.clone();
        tokio::spawn(async move {
            a.with_lock("job", AcquireOptions::new(), |_| forever(work))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let puts = store.puts().len();
    store.delay_writes(LATE);
    timeout(Duration::from_secs(30), a.shutdown())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        *dropped_at_puts.lock().unwrap(),
        Some(puts),
        "the work was dropped before the release was sent"
    );
    let ended = timeout(Duration::from_secs(1), running)
        .await
        .unwrap()
        .unwrap();
    support::assert_lost_to_release(&ended);
}

#[tokio::test(start_paused = true)]
async fn resigning_drops_the_leaders_work_before_it_writes_the_release() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    let watcher = election.watcher();
    timeout(Duration::from_secs(1), watcher.leadership())
        .await
        .unwrap()
        .unwrap();
    let dropped_at_puts = Arc::new(Mutex::new(None));
    let work = Work {
        store: store.clone(),
        dropped_at_puts: dropped_at_puts.clone(),
    };
    let leading = tokio::spawn(async move { watcher.lead(|_| forever(work)).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    let puts = store.puts().len();
    store.delay_writes(LATE);
    timeout(Duration::from_secs(30), election.resign())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(*dropped_at_puts.lock().unwrap(), Some(puts));
    assert!(
        timeout(Duration::from_secs(1), leading)
            .await
            .unwrap()
            .unwrap()
            .is_err()
    );
    a.shutdown().await.unwrap();
}

// ---- A campaign that ended never publishes a term ----------------------------

/// A store whose first put blocks its worker thread until told to go on:
/// the campaign task is then inside a poll when the election is dropped,
/// which `abort()` cannot interrupt.
#[derive(Clone, Debug)]
struct BlockingPut {
    inner: MemoryStore,
    entered: Arc<Mutex<Option<std::sync::mpsc::Sender<()>>>>,
    go: Arc<Mutex<Option<std::sync::mpsc::Receiver<()>>>>,
}

#[async_trait::async_trait]
impl lock_core::layer::StoreLayer for BlockingPut {
    async fn call(
        &self,
        call: lock_core::layer::StoreCall<'_>,
        next: &dyn lock_core::ConditionalStore,
    ) -> Result<lock_core::layer::StoreReply, lock_core::StoreError> {
        if matches!(call, lock_core::layer::StoreCall::Put { .. }) {
            let entered = self.entered.lock().unwrap().take();
            if let Some(entered) = entered {
                let _ = entered.send(());
                let go = self.go.lock().unwrap().take().unwrap();
                // Blocks this worker thread on purpose (see the type's docs).
                go.recv().unwrap();
            }
        }
        call.send(next).await
    }
}

lock_core::store_via_layer!(impl[] for BlockingPut, |this| (this, &this.inner as &dyn lock_core::ConditionalStore));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_dropped_while_its_campaign_runs_on_another_thread_never_leads() {
    let (entered_tx, entered) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let store = BlockingPut {
        inner: MemoryStore::new(),
        entered: Arc::new(Mutex::new(Some(entered_tx))),
        go: Arc::new(Mutex::new(Some(go_rx))),
    };
    let a = client(store.clone(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    let watcher = election.watcher();
    // The campaign's acquire is inside its put, on a worker thread.
    tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    drop(election);
    go.send(()).unwrap();
    // Whatever the campaign does next, it ended: it must never read as leading.
    for _ in 0..50 {
        assert!(!watcher.is_leader());
        assert_ne!(
            std::mem::discriminant(&watcher.role()),
            std::mem::discriminant(&Role::Leader {
                fence: lock_core::Fence(1),
                since: Instant::now(),
            }),
            "{:?}",
            watcher.role()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Not even for an instant: no term began after the drop.
    assert_eq!(
        watcher.terms(),
        0,
        "a campaign that had ended published a term"
    );
    // And its lock was released, not left held for a lease.
    let record = store.inner.record(&lock_core::LockKey::new("leader"));
    assert!(
        record.as_ref().is_none_or(|record| record.released),
        "{record:?}"
    );
    a.shutdown().await.unwrap();
}

// ---- Waiting for work, and its bound ------------------------------------------

/// Work under `view`'s lock in another task, which needs a second to unwind
/// once the lock is no longer safe: why it stopped, and when it had unwound.
fn unwinding_worker(view: &lock_core::LockView) -> tokio::task::JoinHandle<(LostReason, Instant)> {
    let view = view.clone();
    tokio::spawn(async move {
        let _working = view.begin_work();
        let reason = view.until_unsafe().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        (reason, Instant::now())
    })
}

#[tokio::test(start_paused = true)]
async fn a_release_waits_for_work_beside_the_guard_to_end_and_reads_released_meanwhile() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let view = guard.view();
    let worker = unwinding_worker(&view);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let puts = store.puts().len();
    let started = Instant::now();
    let releasing = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        !view.is_safe(),
        "released from the moment the release began"
    );
    assert_eq!(
        store.puts().len(),
        puts,
        "nothing written while the work runs"
    );
    let (reason, unwound) = timeout(Duration::from_secs(5), worker)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason, LostReason::Released);
    timeout(Duration::from_secs(5), releasing)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let release = &store.puts()[puts];
    assert!(release.new.as_ref().unwrap().released);
    assert!(
        release.sent >= unwound,
        "the release was sent after the work ended"
    );
    assert!(release.sent - started >= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn work_that_never_ends_holds_a_release_back_only_until_the_lease_ends() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let acquired = Instant::now();
    let stuck = guard.begin_work();
    let puts = store.puts().len();
    timeout(Duration::from_secs(60), guard.release())
        .await
        .unwrap()
        .unwrap();
    let release = &store.puts()[puts];
    assert!(release.new.as_ref().unwrap().released);
    let at = release.sent - acquired;
    assert!(
        at >= support::LEASE && at < support::LEASE + Duration::from_secs(1),
        "released {at:?} after the acquire"
    );
    drop(stuck);
}

#[tokio::test(start_paused = true)]
async fn a_release_by_version_of_a_held_lock_waits_for_its_work() {
    let store = Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
    let view = guard.view();
    let worker = unwinding_worker(&view);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let puts = store.puts().len();
    let version = guard.version();
    a.release_version("job", &version).await.unwrap();
    let (_, unwound) = worker.await.unwrap();
    assert!(store.puts()[puts].sent >= unwound);
    assert!(!view.is_safe());
    drop(guard);
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_awaited_inside_with_lock_work_still_releases_the_lock() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 3);
    let a = client(faulty.clone(), "a");
    // Another lock of the client, whose guard outlives the shutdown: only
    // the shutdown's own release can release it.
    let other = a.acquire("other", AcquireOptions::new()).await.unwrap();
    let inner = a.clone();
    let ended = timeout(
        Duration::from_secs(30),
        a.with_lock("job", AcquireOptions::new(), |_| async move {
            // The releases take a second to reach the store.
            faulty.script(Op::Put, Fault::Delay(Duration::from_secs(1)));
            faulty.script(Op::Put, Fault::Delay(Duration::from_secs(1)));
            // The shutdown cancels this very work (the lock reads released)...
            let _ = inner.shutdown().await;
        }),
    )
    .await
    .unwrap();
    support::assert_lost_to_release(&ended);
    // ...but the releases it started run to their end.
    for name in ["job", "other"] {
        timeout(Duration::from_secs(5), async {
            while !store
                .record(&lock_core::LockKey::new(name))
                .is_some_and(|record| record.released)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{name} was left held for its lease"));
    }
    assert!(a.held_keys().is_empty());
    drop(other);
}
