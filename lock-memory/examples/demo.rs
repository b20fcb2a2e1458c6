//! Several workers contend for job locks on the in-memory store. One of them
//! freezes mid-job (a crash, as far as the others can tell): a standby worker,
//! told which job froze, takes its lock over after the lease and writes with a
//! newer fence, and when the frozen worker wakes, the fenced resource refuses its
//! stale write.
//!
//! Run with `cargo run -p lock-memory --example demo`.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    AcquireOptions, Expect, Fence, LeaseState, ListOptions, LockClient, LockError, LockKey,
};
use lock_memory::{CallResult, FaultyStore, FenceRefused, FencedResource, MemoryStore};
use tokio::time::Instant;

const JOBS: [&str; 2] = ["job/billing", "job/reports"];
const WORKERS: usize = 4;
const ROUNDS: usize = 3;
/// The worker that freezes in the middle of its second job.
const FREEZER: usize = 2;

struct Log {
    start: Instant,
}

impl Log {
    fn say(&self, who: &str, what: impl std::fmt::Display) {
        let t = self.start.elapsed().as_secs_f64();
        println!("[{t:6.2}s] {who:<3} {what}");
    }
}

#[tokio::main]
async fn main() -> Result<(), LockError> {
    let store = MemoryStore::new();
    // The jobs' output: it takes a write only with the highest fence it has
    // seen for the job.
    let resource = Arc::new(FencedResource::<String>::new());
    let log = Arc::new(Log {
        start: Instant::now(),
    });
    println!(
        "{WORKERS} workers and a standby, {} jobs, lease 1.5 s, heartbeat 300 ms, poll 100 ms\n",
        JOBS.len()
    );

    // The freezer tells the standby which job it froze in.
    let (frozen_tx, frozen_rx) = tokio::sync::oneshot::channel::<&'static str>();
    let mut frozen_tx = Some(frozen_tx);
    let mut tasks = Vec::new();
    {
        let standby = LockClient::builder(store.clone())
            .owner("w5")
            .lease(Duration::from_millis(1500))
            .heartbeat_period(Duration::from_millis(300))
            .refresh_period(Duration::from_millis(100))
            .build()?;
        let (resource, log) = (resource.clone(), log.clone());
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            stand_by(standby, store, frozen_rx, resource, log).await
        }));
    }
    for id in 0..WORKERS {
        let name = format!("w{}", id + 1);
        // Each worker talks to the shared store through its own link, so one of
        // them can be cut off (frozen) without the others noticing anything.
        let link = FaultyStore::new(store.clone(), id as u64);
        let client = LockClient::builder(link.clone())
            .owner(name.clone())
            .lease(Duration::from_millis(1500))
            .heartbeat_period(Duration::from_millis(300))
            .refresh_period(Duration::from_millis(100))
            .build()?;
        let (resource, log) = (resource.clone(), log.clone());
        let frozen = if id == FREEZER {
            frozen_tx.take()
        } else {
            None
        };
        tasks.push(tokio::spawn(async move {
            worker(id, name, client, link, resource, log, frozen).await
        }));
    }
    for task in tasks {
        if let Ok(Err(error)) = task.await {
            println!("worker failed: {error}");
        }
    }

    println!("\nlocks at the end:");
    let observer = LockClient::builder(store.clone())
        .owner("observer")
        .build()?;
    let page = observer.list_locks(ListOptions::new()).await?;
    for lock in page.locks {
        println!(
            "  {:<12} fence {:>2}  last owner {:<3} {}",
            lock.key.to_string(),
            lock.fence,
            lock.owner,
            if lock.released {
                "released"
            } else {
                "HELD (stale)"
            }
        );
    }
    println!("store calls: {} ({} writes)", store.calls(), store.writes());
    observer.shutdown().await?;
    Ok(())
}

async fn worker(
    id: usize,
    name: String,
    client: LockClient,
    link: FaultyStore<MemoryStore>,
    resource: Arc<FencedResource<String>>,
    log: Arc<Log>,
    mut frozen: Option<tokio::sync::oneshot::Sender<&'static str>>,
) -> Result<(), LockError> {
    // Stagger the start so the output is easy to follow.
    tokio::time::sleep(Duration::from_millis(50 * id as u64)).await;
    for round in 0..ROUNDS {
        let job = JOBS[(id + round) % JOBS.len()];
        let guard = match client
            .acquire(job, AcquireOptions::new().wait(Duration::from_secs(10)))
            .await
        {
            Ok(guard) => guard,
            Err(error) => {
                log.say(&name, format!("gave up on {job}: {error}"));
                continue;
            }
        };
        let how = match taken_over_from(link.inner(), job, guard.fence()) {
            Some(previous) => format!(" (took over from {previous}, whose lease ran out)"),
            None => String::new(),
        };
        log.say(
            &name,
            format!("holds {job} with fence {}{how}", guard.fence()),
        );

        if id == FREEZER && round == 1 {
            log.say(
                &name,
                format!("freezes in the middle of {job}: no heartbeats, no release"),
            );
            link.set_unavailable(true);
            if let Some(frozen) = frozen.take() {
                let _ = frozen.send(job);
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            link.set_unavailable(false);
            let state = match guard.state() {
                LeaseState::Lost { reason } => format!("lost ({reason})"),
                other => format!("{other:?}"),
            };
            log.say(&name, format!("wakes up; its guard says {state}"));
            match resource.write(job, guard.key(), guard.fence(), name.clone()) {
                Ok(()) => log.say(&name, "wrote with a stale fence (this must not happen)"),
                Err(FenceRefused::Stale { highest, .. }) => log.say(
                    &name,
                    format!(
                        "tries to write with fence {} -> refused, the resource has seen fence {highest}",
                        guard.fence()
                    ),
                ),
                Err(other) => log.say(&name, format!("write refused: {other}")),
            }
            drop(guard);
            continue;
        }

        tokio::time::sleep(Duration::from_millis(400)).await;
        match resource.write(job, guard.key(), guard.fence(), name.clone()) {
            Ok(()) => log.say(&name, format!("wrote {job} with fence {}", guard.fence())),
            Err(refused) => log.say(&name, format!("write refused: {refused}")),
        }
        guard.release().await?;
        log.say(&name, format!("released {job}"));
    }
    Ok(())
}

/// The standby: waits to hear which job froze, takes that lock over once the
/// frozen holder's lease has run out, and writes with the newer fence.
async fn stand_by(
    client: LockClient,
    store: MemoryStore,
    frozen: tokio::sync::oneshot::Receiver<&'static str>,
    resource: Arc<FencedResource<String>>,
    log: Arc<Log>,
) -> Result<(), LockError> {
    let Ok(job) = frozen.await else {
        return Ok(());
    };
    log.say("w5", format!("(standby) waits for {job}"));
    let guard = client
        .acquire(job, AcquireOptions::new().wait(Duration::from_secs(10)))
        .await?;
    let how = match taken_over_from(&store, job, guard.fence()) {
        Some(previous) => format!(" (took over from {previous}, whose lease ran out)"),
        None => String::new(),
    };
    log.say(
        "w5",
        format!("holds {job} with fence {}{how}", guard.fence()),
    );
    match resource.write(job, guard.key(), guard.fence(), "w5".to_owned()) {
        Ok(()) => log.say("w5", format!("wrote {job} with fence {}", guard.fence())),
        Err(refused) => log.say("w5", format!("write refused: {refused}")),
    }
    guard.release().await?;
    log.say("w5", format!("released {job}"));
    client.shutdown().await?;
    Ok(())
}

/// Whose unreleased record the acquisition that got `fence` replaced, read from
/// the store's history: a takeover is the one acquisition that is conditional on
/// the previous holder's record version rather than on a vacant lock. The demo
/// makes about 150 store calls, far fewer than the 10,000 the history keeps by
/// default, so both writes are still in it.
fn taken_over_from(store: &MemoryStore, job: &str, fence: Fence) -> Option<String> {
    let key = LockKey::new(job);
    let history = store.history();
    let applied = |entry: &lock_memory::HistoryEntry| match &entry.result {
        CallResult::Applied(record) if entry.key() == Some(&key) => Some(record.clone()),
        _ => None,
    };
    let acquisition = history
        .iter()
        .find(|entry| entry.is_put() && applied(entry).is_some_and(|r| r.fence == fence))?;
    let Some(Expect::Version(previous)) = acquisition.expect() else {
        return None;
    };
    history
        .iter()
        .filter_map(applied)
        .find(|record| &record.rvn == previous)
        .map(|record| record.owner)
}
