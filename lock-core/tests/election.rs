//! Leader election over the in-memory store, in paused tokio time: at most one
//! leader whose lease is safe at any instant, a new leader within
//! `lease × (1 + drift) + refresh` of a leader's crash, a partitioned leader's
//! work cancelled before anyone else leads, no "stopped leading" without having
//! led, resignation handed over promptly, and a campaign that never gives up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    ConfigError, Election, ElectionOptions, Fence, LockClient, LockError, LockKey, LostReason,
    Role, StoreErrorKind,
};
use lock_memory::{Fault, FaultyStore, MemoryStore, Op};
use support::{LEASE, client};
use tokio::time::{Instant, timeout};

/// The support client's refresh (poll) period.
const REFRESH: Duration = Duration::from_millis(500);

/// The longest a fleet may go without a leader after the leader crashes:
/// `lease × (1 + drift) + refresh`, plus the jitter of one poll.
fn failover_bound() -> Duration {
    LEASE.mul_f64(1.01) + REFRESH
}

/// Candidates, one per client, each client on its own faulty view of `store`.
struct Fleet {
    stores: Vec<FaultyStore<MemoryStore>>,
    clients: Vec<LockClient>,
    elections: Vec<Election>,
}

impl Fleet {
    fn new(store: &MemoryStore, names: &[&str]) -> Self {
        let mut fleet = Fleet {
            stores: Vec::new(),
            clients: Vec::new(),
            elections: Vec::new(),
        };
        for (i, name) in names.iter().enumerate() {
            let faulty = FaultyStore::new(store.clone(), 100 + i as u64);
            let client = client(faulty.clone(), name);
            let election = client
                .elect("leader", ElectionOptions::new().data(*name))
                .unwrap();
            fleet.stores.push(faulty);
            fleet.clients.push(client);
            fleet.elections.push(election);
        }
        fleet
    }

    /// The candidates that lead with a safe lease now.
    fn safe_leaders(&self) -> Vec<usize> {
        (0..self.elections.len())
            .filter(|&i| self.elections[i].is_leader())
            .collect()
    }

    /// Wait (polling every 10 ms, checking at most one leader each time) until
    /// some candidate other than `not` leads; its index and when.
    async fn next_leader(&self, not: Option<usize>, within: Duration) -> (usize, Instant) {
        let started = Instant::now();
        loop {
            let leaders = self.safe_leaders();
            assert!(leaders.len() <= 1, "two leaders at once: {leaders:?}");
            if let Some(&leader) = leaders.first()
                && Some(leader) != not
            {
                return (leader, Instant::now());
            }
            assert!(
                started.elapsed() <= within,
                "no new leader within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn one_candidate_leads_and_the_others_follow_it_by_name() {
    let store = MemoryStore::new();
    let fleet = Fleet::new(&store, &["a", "b", "c"]);
    let (leader, _) = fleet.next_leader(None, Duration::from_secs(1)).await;
    let name = fleet.clients[leader].owner().to_owned();
    // The followers learn the leader from their own polls (no extra reads).
    tokio::time::sleep(REFRESH * 3).await;
    for (i, election) in fleet.elections.iter().enumerate() {
        if i == leader {
            assert!(
                matches!(
                    election.role(),
                    Role::Leader {
                        fence: Fence(1),
                        ..
                    }
                ),
                "{:?}",
                election.role()
            );
            assert_eq!(election.terms(), 1);
        } else {
            assert_eq!(
                election.role(),
                Role::Follower {
                    leader: name.clone(),
                    fence: Fence(1),
                    data: Some(name.clone().into_bytes()),
                }
            );
            assert_eq!(election.terms(), 0);
        }
    }
    // Each follower wrote once (its first attempt, refused) and has polled
    // with reads since; the leader's later writes are its heartbeats.
    for (i, client) in fleet.clients.iter().enumerate() {
        let puts = store
            .history()
            .iter()
            .filter(|entry| entry.is_put() && entry.writer() == Some(client.owner()))
            .count();
        if i != leader {
            assert_eq!(puts, 1, "{}: {:?}", client.owner(), store.history());
        }
    }
    assert_eq!(
        store.record(&LockKey::new("leader")).unwrap().fence,
        Fence(1)
    );
    for client in &fleet.clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_crashed_leader_is_replaced_within_the_lease_and_a_poll_and_never_two_lead() {
    let store = MemoryStore::new();
    let fleet = Fleet::new(&store, &["a", "b", "c"]);
    let (first, _) = fleet.next_leader(None, Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The leader's process stops reaching the store: a crash, as the others
    // see it (nothing it sends arrives).
    fleet.stores[first].set_unavailable(true);
    let crashed = Instant::now();
    let (second, elected) = fleet.next_leader(Some(first), failover_bound()).await;
    assert!(
        elected - crashed <= failover_bound(),
        "{:?}",
        elected - crashed
    );
    // Not before the crashed leader's lease can have run out.
    assert!(elected - crashed >= LEASE.mul_f64(1.01) - Duration::from_secs(2));
    assert!(matches!(
        fleet.elections[second].role(),
        Role::Leader {
            fence: Fence(2),
            ..
        }
    ));
    assert!(!fleet.elections[first].is_leader());
    for client in &fleet.clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_leader_cancels_its_work_before_anyone_else_leads() {
    let store = MemoryStore::new();
    let fleet = Fleet::new(&store, &["a", "b"]);
    let (first, _) = fleet.next_leader(None, Duration::from_secs(1)).await;
    let cancelled: Arc<Mutex<Option<(Instant, LockError)>>> = Arc::default();
    let work = {
        let cancelled = cancelled.clone();
        let election = &fleet.elections[first];
        let outcome = election.lead(|leadership| async move {
            assert_eq!(leadership.fence(), Fence(1));
            std::future::pending::<()>().await
        });
        async move {
            let error = outcome.await.unwrap_err();
            *cancelled.lock().unwrap() = Some((Instant::now(), error));
        }
    };
    // When the leader's published role stops saying it leads.
    let mut roles = fleet.elections[first].watch();
    let stepped_down = tokio::spawn(async move {
        roles
            .wait_for(|role| !matches!(role, Role::Leader { .. }))
            .await
            .unwrap();
        Instant::now()
    });
    let (_, (second, elected)) = tokio::join!(work, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        fleet.stores[first].set_unavailable(true);
        fleet.next_leader(Some(first), failover_bound()).await
    });
    let (at, error) = cancelled.lock().unwrap().take().unwrap();
    // The role says so the moment the work is cancelled, not at the lease's end.
    assert_eq!(stepped_down.await.unwrap(), at);
    assert!(
        matches!(
            error,
            LockError::Lost {
                reason: LostReason::InDanger,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        at < elected,
        "work cancelled at {at:?}, new leader at {elected:?}"
    );
    assert_ne!(second, first);
    for client in &fleet.clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn only_a_candidate_that_led_sees_itself_stop_leading() {
    let store = MemoryStore::new();
    let fleet = Fleet::new(&store, &["a", "b"]);
    let (first, _) = fleet.next_leader(None, Duration::from_secs(1)).await;
    let other = 1 - first;
    // Every role each candidate goes through from here on.
    let record = |election: &Election| {
        let mut roles = election.watch();
        let seen = Arc::new(Mutex::new(vec![roles.borrow_and_update().clone()]));
        let keep = seen.clone();
        tokio::spawn(async move {
            while roles.changed().await.is_ok() {
                keep.lock().unwrap().push(roles.borrow_and_update().clone());
            }
        });
        seen
    };
    let (led, followed) = (
        record(&fleet.elections[first]),
        record(&fleet.elections[other]),
    );
    fleet.stores[first].set_unavailable(true);
    fleet.next_leader(Some(first), failover_bound()).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let led = led.lock().unwrap().clone();
    let followed = followed.lock().unwrap().clone();
    // The leader stepped down (it led); the follower never saw itself step
    // down: it went from following to leading.
    assert!(matches!(led[0], Role::Leader { .. }), "{led:?}");
    assert!(
        led[1..]
            .iter()
            .all(|role| !matches!(role, Role::Leader { .. }))
    );
    assert!(led.len() >= 2, "{led:?}");
    assert!(
        matches!(followed.last(), Some(Role::Leader { .. })),
        "{followed:?}"
    );
    let first_lead = followed
        .iter()
        .position(|role| matches!(role, Role::Leader { .. }))
        .unwrap();
    assert_eq!(first_lead, followed.len() - 1, "{followed:?}");
    assert_eq!(fleet.elections[other].terms(), 1);
    for client in &fleet.clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn resigning_hands_leadership_to_another_process_within_a_poll() {
    let store = MemoryStore::new();
    let mut fleet = Fleet::new(&store, &["a", "b"]);
    let (first, _) = fleet.next_leader(None, Duration::from_secs(1)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resigned = Instant::now();
    let election = fleet.elections.remove(first);
    election.resign().await.unwrap();
    let record = store.record(&LockKey::new("leader")).unwrap();
    assert!(record.released, "{record:?}");
    let (second, elected) = fleet
        .next_leader(None, REFRESH + Duration::from_millis(100))
        .await;
    assert!(
        elected - resigned <= REFRESH + Duration::from_millis(20),
        "{:?}",
        elected - resigned
    );
    assert!(matches!(
        fleet.elections[second].role(),
        Role::Leader {
            fence: Fence(2),
            ..
        }
    ));
    for client in &fleet.clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn resigning_hands_leadership_to_a_candidate_of_the_same_client_in_one_write() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let first = a.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(first.is_leader());
    let second = a.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // Queued behind the first inside the client: it reads nothing.
    assert_eq!(second.role(), Role::Campaigning);
    let writes = store.writes();
    first.resign().await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(matches!(
        second.role(),
        Role::Leader {
            fence: Fence(2),
            ..
        }
    ));
    assert_eq!(store.writes() - writes, 1, "{:?}", store.history());
    second.resign().await.unwrap();
    assert!(store.record(&LockKey::new("leader")).unwrap().released);
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_lost_its_lease_campaigns_again_and_leads_again() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 7);
    let a = client(faulty.clone(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(election.is_leader());
    // A store outage longer than the lease: it steps down, keeps campaigning
    // through the outage, and leads again once the store is back.
    faulty.set_unavailable(true);
    tokio::time::sleep(LEASE * 2).await;
    assert_eq!(election.role(), Role::Campaigning);
    faulty.set_unavailable(false);
    let leadership = timeout(LEASE * 2, election.leadership())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leadership.fence(), Fence(2));
    assert_eq!(election.terms(), 2);
    election.resign().await.unwrap();
    a.shutdown().await.unwrap();
}

/// Notes when each write reaches it.
#[derive(Clone, Debug, Default)]
struct PutTimes(Arc<Mutex<Vec<Instant>>>);

#[async_trait::async_trait]
impl lock_core::layer::StoreLayer for PutTimes {
    async fn call(
        &self,
        call: lock_core::layer::StoreCall<'_>,
        next: &dyn lock_core::ConditionalStore,
    ) -> Result<lock_core::layer::StoreReply, lock_core::StoreError> {
        if call.op() == lock_core::layer::StoreOp::Put {
            self.0.lock().unwrap().push(Instant::now());
        }
        call.send(next).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_campaign_goes_on_after_errors_no_retry_could_fix_pausing_longer_each_time() {
    let store = MemoryStore::new();
    let faulty = FaultyStore::new(store.clone(), 8);
    for _ in 0..4 {
        faulty.script(Op::Put, Fault::Error(StoreErrorKind::Unauthorized));
    }
    let times = PutTimes::default();
    let a = client(
        lock_core::layer::Layered::new(times.clone(), faulty.clone()),
        "a",
    );
    let election = a
        .elect(
            "leader",
            ElectionOptions::new().retry(Duration::from_secs(1), Duration::from_secs(3)),
        )
        .unwrap();
    // Refused four times, then elected.
    let leadership = timeout(Duration::from_secs(12), election.leadership())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leadership.fence(), Fence(1));
    assert_eq!(faulty.scripted(), 0);
    // The pauses: 1 s doubled per failure up to 3 s, each jittered down by
    // up to a half.
    let times = times.0.lock().unwrap().clone();
    assert_eq!(times.len(), 5, "{times:?}");
    let second = Duration::from_secs(1);
    for (i, (low, high)) in [
        (second / 2, second),
        (second, 2 * second),
        (3 * second / 2, 3 * second),
        (3 * second / 2, 3 * second),
    ]
    .into_iter()
    .enumerate()
    {
        let pause = times[i + 1] - times[i];
        // tokio's timer rounds a sleep up to the next millisecond.
        let high = high + Duration::from_millis(2);
        assert!(low <= pause && pause <= high, "pause {i}: {pause:?}");
    }
    election.resign().await.unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_released_record_seen_while_campaigning_is_not_a_leader() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let first = a.elect("leader", ElectionOptions::new()).unwrap();
    timeout(Duration::from_secs(1), first.leadership())
        .await
        .unwrap()
        .unwrap();
    // b follows a; its writes take a second to answer.
    let slow = support::Delayed::new(store.clone());
    let b = client(slow.clone(), "b");
    let second = b.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        matches!(&second.role(), Role::Follower { leader, .. } if leader == "a"),
        "{:?}",
        second.role()
    );
    slow.delay_writes(Duration::from_secs(1));
    first.resign().await.unwrap();
    // b's next poll reads the released record and writes; while its write
    // is on its way, nobody leads as far as b knows.
    let mut seen = Vec::new();
    let started = Instant::now();
    while !second.is_leader() && started.elapsed() < Duration::from_secs(5) {
        seen.push(second.role());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(second.is_leader());
    let after_release: Vec<_> = seen
        .iter()
        .skip_while(|role| matches!(role, Role::Follower { .. }))
        .collect();
    assert!(
        !after_release.is_empty()
            && after_release
                .iter()
                .all(|role| matches!(role, Role::Campaigning)),
        "{seen:?}"
    );
    second.resign().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropping_an_election_releases_the_lock_and_shutdown_ends_the_campaign() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(election.is_leader());
    drop(election);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(store.record(&LockKey::new("leader")).unwrap().released);

    let waiting = a.elect("leader", ElectionOptions::new()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(waiting.is_leader());
    a.shutdown().await.unwrap();
    let ended = timeout(Duration::from_secs(5), waiting.leadership())
        .await
        .unwrap();
    assert!(matches!(ended, Err(LockError::Shutdown)), "{ended:?}");
    assert_eq!(waiting.role(), Role::Campaigning);
    assert!(store.record(&LockKey::new("leader")).unwrap().released);
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let a = client(store.clone(), "a");
    let empty = a.elect("", ElectionOptions::new());
    assert!(
        matches!(empty, Err(LockError::InvalidInput { .. })),
        "{empty:?}"
    );
    let zero = a.elect("leader", ElectionOptions::new().lease(Duration::ZERO));
    assert!(
        matches!(zero, Err(LockError::InvalidConfig(ConfigError::ZeroLease))),
        "{zero:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(store.calls(), 0);
    a.shutdown().await.unwrap();
}

#[test]
fn elect_outside_a_runtime_is_a_clear_error() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let a = runtime.block_on(async { client(MemoryStore::new(), "a") });
    let outside = a.elect("leader", ElectionOptions::new());
    let error = outside.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::InvalidConfig(ConfigError::NoRuntime { .. })
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("tokio runtime"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn resigning_cancels_the_leaders_work_before_the_release_is_answered() {
    let store = support::Delayed::new(MemoryStore::new());
    let a = client(store.clone(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    let watcher = election.watcher();
    let leadership = timeout(Duration::from_secs(1), watcher.leadership())
        .await
        .unwrap()
        .unwrap();
    let work = tokio::spawn(async move {
        let ended = watcher.lead(|_| std::future::pending::<()>()).await;
        (ended, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The release takes 5 s to be answered; the work must not wait for that.
    store.delay_writes(Duration::from_secs(5));
    let resigned = Instant::now();
    let resigning = tokio::spawn(election.resign());
    let (ended, at) = timeout(Duration::from_secs(1), work)
        .await
        .unwrap()
        .unwrap();
    support::assert_lost_to_release(&ended);
    assert!(
        at - resigned < Duration::from_millis(10),
        "{:?}",
        at - resigned
    );
    assert!(!leadership.is_safe());
    timeout(Duration::from_secs(10), resigning)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    a.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_dropped_election_is_read_as_ended_at_once() {
    let a = client(MemoryStore::new(), "a");
    let election = a.elect("leader", ElectionOptions::new()).unwrap();
    let watcher = election.watcher();
    let leadership = timeout(Duration::from_secs(1), watcher.leadership())
        .await
        .unwrap()
        .unwrap();
    drop(election);
    assert!(!leadership.is_safe());
    assert!(!watcher.is_leader());
    assert_eq!(watcher.role(), Role::Campaigning);
    let ended = timeout(Duration::from_secs(1), watcher.leadership())
        .await
        .unwrap();
    assert!(matches!(ended, Err(LockError::Shutdown)), "{ended:?}");
    a.shutdown().await.unwrap();
}
