//! The simulated processes: a worker per client that acquires, does fenced work,
//! gets paused and releases; and the run itself, which crashes, pauses and
//! restarts clients on schedule, checks the guards every few milliseconds, and
//! shuts everything down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{
    AcquireOptions, ConditionalStore, DriftingClock, ElectionOptions, LockClient, LockError,
    LockView, Timing,
};
use lock_memory::MemoryStore;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::schedule::{Event, RW_LOCK, Release, SEMAPHORE, StoreTime, Workload};
use lock_core::layer::Layered;

use super::store::{ClientLink, Recorder, ReusesFences};
use super::wall::{SimClock, Stamper, Stamps, WallClock, WallStamps};
use super::world::{World, key_name, keys_of};
use super::{Breakage, Schedule, SimReport, Violation};

/// How often the checker looks at every guard.
const CHECK_EVERY: Duration = Duration::from_millis(20);

fn between(rng: &mut fastrand::Rng, low: Duration, high: Duration) -> Duration {
    low + high.saturating_sub(low).mul_f64(rng.f64())
}

struct Process {
    client: LockClient,
    worker: JoinHandle<()>,
}

struct Run {
    world: Arc<World>,
    memory: MemoryStore,
    shared: Arc<dyn ConditionalStore>,
    /// The stamps of every version, in a run on wall clocks.
    stamps: Option<Stamps>,
    /// When the run started: every wall clock counts from it.
    started: Instant,
    stop: watch::Sender<bool>,
    processes: Vec<Option<Process>>,
    incarnations: Vec<u64>,
}

impl Run {
    /// Client `client`'s wall clock (true time unless the run has wall clocks
    /// off it).
    fn wall_clock(&self, client: usize) -> WallClock {
        let offset_ms = match &self.world.schedule.store_time {
            StoreTime::WallClocks { offsets_ms, .. } => {
                offsets_ms.get(client).copied().unwrap_or_default()
            }
            _ => 0,
        };
        WallClock {
            start: self.started,
            offset_ms,
        }
    }

    fn start_process(&mut self, client: usize) -> Result<(), LockError> {
        let world = &self.world;
        let schedule = &world.schedule;
        let incarnation = self.incarnations[client];
        let owner = world.owner(client);
        let link = Layered::new(
            ClientLink {
                world: world.clone(),
                client,
                incarnation,
                gate: world.gate(client),
                calls: Mutex::new(HashMap::new()),
                stamper: self.stamps.as_ref().map(|stamps| Stamper {
                    stamps: stamps.clone(),
                    wall: self.wall_clock(client),
                }),
            },
            self.shared.clone(),
        );
        let margin = schedule.safety_margins[client];
        let mut builder = LockClient::builder(link)
            .owner(owner)
            .lease(schedule.lease)
            .max_clock_drift(schedule.max_drift)
            .safety_margin(margin)
            // The liveness bounds are computed from this period: set it, rather
            // than rely on the client's default matching `Schedule::refresh`.
            .refresh_period(schedule.refresh())
            .clock(Arc::new(SimClock {
                monotonic: DriftingClock::new(schedule.rates[client]),
                wall: self.wall_clock(client),
            }));
        match &schedule.store_time {
            StoreTime::WallClocks { bound, .. } => builder = builder.max_clock_difference(*bound),
            StoreTime::StoreClock { .. } | StoreTime::None => {}
        }
        match schedule.breakage {
            // `Schedule::from_seed` gives every client a zero margin for this.
            Some(Breakage::IgnoresDrift) => {}
            Some(Breakage::SlowPolling) => builder = builder.refresh_period(schedule.lease * 2),
            Some(Breakage::LateHeartbeats) => {
                let safe = Timing {
                    lease: schedule.lease,
                    max_drift: schedule.max_drift,
                    safety_margin: margin,
                }
                .safe_time();
                builder = builder.heartbeat_period(safe.saturating_sub(Duration::from_micros(1)));
            }
            _ => {}
        }
        let lock_client = builder.build()?;
        let rng = fastrand::Rng::with_seed(
            schedule.seed ^ ((client as u64) << 40) ^ (incarnation << 20) ^ 0x5eed,
        );
        let (locks, stop) = (lock_client.clone(), self.stop.subscribe());
        let worker = match schedule.workload {
            Workload::Election => tokio::spawn(campaign(world.clone(), client, locks, rng, stop)),
            Workload::Semaphore { permits } => tokio::spawn(take_permits(
                world.clone(),
                client,
                locks,
                permits,
                rng,
                stop,
            )),
            Workload::ReaderWriter { readers } => tokio::spawn(read_and_write(
                world.clone(),
                client,
                locks,
                readers,
                rng,
                stop,
            )),
            Workload::Sets => tokio::spawn(take_sets(world.clone(), client, locks, rng, stop)),
            _ => tokio::spawn(work(world.clone(), client, locks, rng, stop)),
        };
        self.processes[client] = Some(Process {
            client: lock_client,
            worker,
        });
        Ok(())
    }

    fn crash(&mut self, client: usize) {
        if let Some(process) = self.processes[client].take() {
            self.world.crash(client);
            process.worker.abort();
            drop(process.client);
        }
    }
}

/// One client's worker: pick a key, acquire it within a wait budget, write to
/// the fenced resource a few times while the lease is safe, release; repeat.
async fn work(
    world: Arc<World>,
    client: usize,
    locks: LockClient,
    mut rng: fastrand::Rng,
    stop: watch::Receiver<bool>,
) {
    let schedule = world.schedule.clone();
    let lease = schedule.lease;
    let release = schedule.releases[client];
    while !*stop.borrow() && !world.violated() {
        let key = key_name(rng.usize(..schedule.keys));
        let wait = lease.mul_f64(3.0 * rng.f64());
        world.start_waiting(client, &key);
        let holds = schedule.holds[client];
        let mut options = AcquireOptions::new()
            .wait(wait)
            .delete_on_release(release == Release::DeleteOnRelease);
        if let Some(min) = holds.min {
            options = options.min_hold(min);
        }
        if let Some(max) = holds.max {
            options = options.max_hold(max);
        }
        let acquired = locks.acquire(key.clone(), options).await;
        let gave_up = matches!(acquired, Err(LockError::AcquireTimeout { .. }));
        world.stop_waiting(client, gave_up);
        match acquired {
            Ok(guard) => {
                let view = guard.view();
                fenced_work(&world, client, &view, || view.is_safe(), &mut rng, &stop).await;
                world.remove_guard(client, &key);
                // Lost or not, the guard is done; a failed release is the lease's
                // business (it expires).
                let _ = match release {
                    Release::ReleaseAndDelete => guard.release_and_delete().await,
                    Release::Keep | Release::DeleteOnRelease => guard.release().await,
                };
            }
            Err(LockError::AcquireTimeout { .. }) => world.count_timeout(),
            Err(_) => {}
        }
        tokio::time::sleep(between(&mut rng, Duration::ZERO, lease / 2)).await;
    }
}

/// What a worker does while it holds `view`: a few writes to the fenced
/// resource, each after checking `trusted` (the lease, or a leadership), some
/// with a process pause between the check and the write.
async fn fenced_work(
    world: &Arc<World>,
    client: usize,
    view: &LockView,
    trusted: impl Fn() -> bool,
    rng: &mut fastrand::Rng,
    stop: &watch::Receiver<bool>,
) {
    let schedule = &world.schedule;
    let lease = schedule.lease;
    let epoch = world.add_guard(client, view.clone());
    for _ in 0..rng.usize(1..=8) {
        tokio::time::sleep(between(rng, Duration::from_millis(20), lease / 2)).await;
        if *stop.borrow() || !trusted() {
            break;
        }
        if rng.f64() < schedule.pause_before_write {
            // Checked the lease, then stopped the world before writing.
            let length = lease.mul_f64(0.5 + 2.0 * rng.f64());
            world.set_paused(client, true);
            tokio::time::sleep(length).await;
            world.set_paused(client, false);
            if rng.f64() < schedule.careless {
                world.resource_write(view, epoch, false);
            } else if trusted() {
                world.resource_write(view, epoch, true);
            } else {
                break;
            }
        } else {
            world.resource_write(view, epoch, true);
        }
    }
}

/// One client's candidate in the run's election (key `k0`): it leads through
/// [`Election::lead`](lock_core::Election::lead), doing fenced work while the
/// leadership is trusted, and now and then resigns (or drops its election)
/// and campaigns again after a pause. While it does not lead it waits for the
/// key, as far as the liveness checks go.
async fn campaign(
    world: Arc<World>,
    client: usize,
    locks: LockClient,
    mut rng: fastrand::Rng,
    stop: watch::Receiver<bool>,
) {
    let key = key_name(0);
    let lease = world.schedule.lease;
    while !*stop.borrow() && !world.violated() {
        let Ok(election) = locks.elect(key.clone(), ElectionOptions::new()) else {
            return;
        };
        world.start_waiting(client, &key);
        for _ in 0..rng.usize(1..=4) {
            let led = election
                .lead(|leadership| {
                    let (world, mut rng, stop) = (world.clone(), rng.fork(), stop.clone());
                    async move {
                        world.stop_waiting(client, false);
                        let view = leadership.view().clone();
                        fenced_work(
                            &world,
                            client,
                            &view,
                            || leadership.is_safe(),
                            &mut rng,
                            &stop,
                        )
                        .await;
                    }
                })
                .await;
            // Cancelled when the leadership stopped being trusted, or done:
            // either way the worker lets go of it, and is a candidate again.
            world.remove_guard(client, &key);
            match led {
                Ok(()) | Err(LockError::Lost { .. }) => world.start_waiting(client, &key),
                Err(_) => return,
            }
            if *stop.borrow() || world.violated() {
                break;
            }
        }
        world.stop_waiting(client, false);
        if rng.bool() {
            let _ = election.resign().await;
        } else {
            drop(election);
        }
        tokio::time::sleep(between(&mut rng, Duration::ZERO, lease / 2)).await;
    }
}

/// One client's workers on the run's semaphore: two tasks sharing the
/// client (so permits are also handed between them locally), each taking a
/// permit within a wait budget (waiting, as far as the liveness checks go,
/// for every slot), doing fenced work on its slot while its lease is safe,
/// and releasing; repeat.
async fn take_permits(
    world: Arc<World>,
    client: usize,
    locks: LockClient,
    permits: u32,
    mut rng: fastrand::Rng,
    stop: watch::Receiver<bool>,
) {
    let Ok(semaphore) = locks.semaphore(SEMAPHORE, permits) else {
        return;
    };
    let other = rng.fork();
    tokio::join!(
        permit_worker(&world, client, &semaphore, rng, &stop),
        permit_worker(&world, client, &semaphore, other, &stop),
    );
}

/// One task of [`take_permits`].
async fn permit_worker(
    world: &Arc<World>,
    client: usize,
    semaphore: &lock_core::Semaphore,
    mut rng: fastrand::Rng,
    stop: &watch::Receiver<bool>,
) {
    let schedule = world.schedule.clone();
    let lease = schedule.lease;
    let slots = keys_of(&schedule);
    while !*stop.borrow() && !world.violated() {
        for slot in &slots {
            world.start_waiting(client, slot);
        }
        let holds = schedule.holds[client];
        let mut options = AcquireOptions::new().wait(lease.mul_f64(3.0 * rng.f64()));
        if let Some(min) = holds.min {
            options = options.min_hold(min);
        }
        if let Some(max) = holds.max {
            options = options.max_hold(max);
        }
        let acquired = semaphore.acquire(options).await;
        let gave_up = matches!(acquired, Err(LockError::AcquireTimeout { .. }));
        world.stop_waiting(client, gave_up);
        match acquired {
            Ok(permit) => {
                let view: LockView = (*permit).clone();
                fenced_work(world, client, &view, || view.is_safe(), &mut rng, stop).await;
                world.remove_guard(client, view.key());
                let _ = permit.release().await;
            }
            Err(LockError::AcquireTimeout { .. }) => world.count_timeout(),
            Err(_) => {}
        }
        tokio::time::sleep(between(&mut rng, Duration::ZERO, lease / 2)).await;
    }
}

/// One client's worker taking sets of keys: two or more of the run's keys,
/// all or nothing, within a wait budget; while the set is safe, writes to the
/// resource of each key (some after a pause); release; repeat. A set that
/// failed must leave none of its keys held by the client.
async fn take_sets(
    world: Arc<World>,
    client: usize,
    locks: LockClient,
    mut rng: fastrand::Rng,
    stop: watch::Receiver<bool>,
) {
    let schedule = world.schedule.clone();
    let lease = schedule.lease;
    while !*stop.borrow() && !world.violated() {
        let mut keys: Vec<usize> = (0..schedule.keys).collect();
        rng.shuffle(&mut keys);
        keys.truncate(rng.usize(2..=schedule.keys));
        let keys: Vec<lock_core::LockKey> = keys.into_iter().map(key_name).collect();
        let holds = schedule.holds[client];
        let mut options = AcquireOptions::new().wait(lease.mul_f64(3.0 * rng.f64()));
        if let Some(min) = holds.min {
            options = options.min_hold(min);
        }
        if let Some(max) = holds.max {
            options = options.max_hold(max);
        }
        match locks.acquire_all(keys.clone(), options).await {
            Ok(group) => {
                world.count_set(group.taken_at_once());
                let members: Vec<(LockView, u64)> = group
                    .guards()
                    .iter()
                    .map(|guard| {
                        let view = guard.view();
                        let epoch = world.add_guard(client, view.clone());
                        (view, epoch)
                    })
                    .collect();
                for _ in 0..rng.usize(1..=4) {
                    tokio::time::sleep(between(&mut rng, Duration::from_millis(20), lease / 2))
                        .await;
                    if *stop.borrow() || !group.is_safe() {
                        break;
                    }
                    let paused = rng.f64() < schedule.pause_before_write;
                    if paused {
                        let length = lease.mul_f64(0.5 + 2.0 * rng.f64());
                        world.set_paused(client, true);
                        tokio::time::sleep(length).await;
                        world.set_paused(client, false);
                    }
                    let careless = paused && rng.f64() < schedule.careless;
                    if !careless && !group.is_safe() {
                        break;
                    }
                    for (view, epoch) in &members {
                        world.resource_write(view, *epoch, !careless);
                    }
                }
                for (view, _) in &members {
                    world.remove_guard(client, view.key());
                }
                let _ = group.release().await;
            }
            Err(error) => {
                if let LockError::AcquireTimeout { .. } = error {
                    world.count_timeout();
                }
                // Nothing of the set stays held by this client.
                let held = locks.held_keys();
                if let Some(key) = keys.iter().find(|key| held.contains(key)) {
                    world.set_failed_set_held(client, key, &error);
                }
            }
        }
        tokio::time::sleep(between(&mut rng, Duration::ZERO, lease / 2)).await;
    }
}

/// One client's worker on the run's reader-writer lock: mostly reads, some
/// writes, some upgradeable reads that then upgrade, each within a wait
/// budget; readers read the resource the writers write, each read after
/// checking the read is safe (some with a pause in between, unchecked).
async fn read_and_write(
    world: Arc<World>,
    client: usize,
    locks: LockClient,
    readers: u32,
    mut rng: fastrand::Rng,
    stop: watch::Receiver<bool>,
) {
    let Ok(lock) = locks.rw_lock(RW_LOCK, readers) else {
        return;
    };
    let schedule = world.schedule.clone();
    let lease = schedule.lease;
    while !*stop.borrow() && !world.violated() {
        let holds = schedule.holds[client];
        let mut options = AcquireOptions::new().wait(lease.mul_f64(3.0 * rng.f64()));
        if let Some(min) = holds.min {
            options = options.min_hold(min);
        }
        if let Some(max) = holds.max {
            options = options.max_hold(max);
        }
        let paused = world.pauses(client);
        let outcome = match rng.u8(..10) {
            0..=2 => match lock.write(options).await {
                Ok(write) => {
                    world.check_writer_wait(client, paused);
                    let view = write.view();
                    fenced_work(&world, client, &view, || view.is_safe(), &mut rng, &stop).await;
                    world.remove_guard(client, view.key());
                    let _ = write.release().await;
                    Ok(())
                }
                Err(error) => Err(error),
            },
            3 => match lock.upgradeable_read(options.clone()).await {
                Ok(read) => {
                    world.add_read(client, read.view());
                    reads(&world, client, &read.view(), &mut rng, &stop).await;
                    let paused = world.pauses(client);
                    match read.upgrade(options).await {
                        Ok(write) => {
                            world.check_writer_wait(client, paused);
                            let view = write.view();
                            fenced_work(&world, client, &view, || view.is_safe(), &mut rng, &stop)
                                .await;
                            world.remove_guard(client, view.key());
                            world.remove_read(client);
                            let _ = write.release().await;
                            Ok(())
                        }
                        Err(failed) => {
                            world.remove_read(client);
                            let _ = failed.guard.release().await;
                            Err(failed.error)
                        }
                    }
                }
                Err(error) => Err(error),
            },
            _ => match lock.read(options).await {
                Ok(read) => {
                    world.add_read(client, read.view());
                    reads(&world, client, &read.view(), &mut rng, &stop).await;
                    world.remove_read(client);
                    let _ = read.release().await;
                    Ok(())
                }
                Err(error) => Err(error),
            },
        };
        if let Err(LockError::AcquireTimeout { .. }) = outcome {
            world.count_timeout();
        }
        tokio::time::sleep(between(&mut rng, Duration::ZERO, lease / 2)).await;
    }
}

/// What a reader does while it holds `view`: a few reads of the resource,
/// each after checking the read is safe, some with a process pause between
/// the check and the read (then unchecked, or checked again).
async fn reads(
    world: &Arc<World>,
    client: usize,
    view: &lock_core::ReadView,
    rng: &mut fastrand::Rng,
    stop: &watch::Receiver<bool>,
) {
    let schedule = &world.schedule;
    let lease = schedule.lease;
    for _ in 0..rng.usize(1..=6) {
        tokio::time::sleep(between(rng, Duration::from_millis(20), lease / 2)).await;
        if *stop.borrow() || !view.is_safe() {
            break;
        }
        if rng.f64() < schedule.pause_before_write {
            let length = lease.mul_f64(0.5 + 2.0 * rng.f64());
            world.set_paused(client, true);
            tokio::time::sleep(length).await;
            world.set_paused(client, false);
            if rng.f64() < schedule.careless {
                world.resource_read(view, false);
            } else if view.is_safe() {
                world.resource_read(view, true);
            } else {
                break;
            }
        } else {
            world.resource_read(view, true);
        }
    }
}

pub(crate) async fn simulate(schedule: Schedule) -> Result<SimReport, Violation> {
    let world = Arc::new(World::new(schedule.clone()));
    // The run learns the store's truth from its own recording layer at the instant
    // each write applies, and reads the records at the end: the store's history
    // of every call would only cost time and memory.
    let memory = match &schedule.store_time {
        StoreTime::StoreClock { rate } => MemoryStore::builder()
            .history_capacity(0)
            .store_clock(*rate)
            .build(),
        _ => MemoryStore::builder().history_capacity(0).build(),
    };
    let stamps: Option<Stamps> =
        matches!(schedule.store_time, StoreTime::WallClocks { .. }).then(Stamps::default);
    // The store below the recorder: the memory store, maybe breaking fences,
    // maybe returning each version's wall-clock stamp.
    let below: Arc<dyn ConditionalStore> = match schedule.breakage {
        Some(Breakage::ReusedFence) => Arc::new(Layered::new(ReusesFences, memory.clone())),
        _ => Arc::new(memory.clone()),
    };
    let below: Arc<dyn ConditionalStore> = match &stamps {
        Some(stamps) => Arc::new(Layered::new(
            WallStamps {
                stamps: stamps.clone(),
            },
            below,
        )),
        None => below,
    };
    let shared: Arc<dyn ConditionalStore> = Arc::new(Layered::new(
        Recorder {
            world: world.clone(),
        },
        below,
    ));
    let mut run = Run {
        world: world.clone(),
        memory,
        shared,
        stamps,
        started: Instant::now(),
        stop: watch::channel(false).0,
        processes: (0..schedule.clients).map(|_| None).collect(),
        incarnations: vec![0; schedule.clients],
    };
    let start = Instant::now();
    let setup = |e: LockError| Violation {
        seed: schedule.seed,
        at: Duration::ZERO,
        what: format!("the simulation could not build a client: {e}"),
        trace: Vec::new(),
    };
    for client in 0..schedule.clients {
        run.start_process(client).map_err(setup)?;
    }
    let checker = {
        let world = world.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CHECK_EVERY).await;
                world.check_guards();
            }
        })
    };

    // Crashes, pauses and restarts, in true time.
    let mut restarts: Vec<(Instant, usize)> = Vec::new();
    let mut events = schedule.events.iter().peekable();
    let end = start + schedule.run_for;
    loop {
        let next_event = events.peek().map(|(at, _, _)| start + *at);
        let next_restart = restarts.iter().map(|(at, _)| *at).min();
        let next = [next_event, next_restart, Some(end)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(end);
        tokio::time::sleep_until(next).await;
        if world.violated() {
            break;
        }
        let now = Instant::now();
        while let Some((_, client, event)) = events.next_if(|(at, _, _)| start + *at <= now) {
            match *event {
                Event::Crash { restart_after } => {
                    if run.processes[*client].is_some() {
                        run.crash(*client);
                        restarts.push((now + restart_after, *client));
                    }
                }
                Event::Pause { length } => {
                    if run.processes[*client].is_some() {
                        let (world, client) = (world.clone(), *client);
                        world.set_paused(client, true);
                        tokio::spawn(async move {
                            tokio::time::sleep(length).await;
                            world.set_paused(client, false);
                        });
                    }
                }
            }
        }
        let due: Vec<usize> = restarts
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, c)| *c)
            .collect();
        restarts.retain(|(at, _)| *at > now);
        for client in due {
            run.incarnations[client] += 1;
            world.restart(client, run.incarnations[client]);
            run.start_process(client).map_err(setup)?;
        }
        if now >= end {
            break;
        }
    }

    // Orderly shutdown: the store recovers, paused processes wake, workers finish
    // what they are doing and release, then every client shuts down.
    world.faults_off();
    for client in 0..schedule.clients {
        world.set_paused(client, false);
    }
    run.stop.send_replace(true);
    let patience = schedule.lease * 8 + Duration::from_secs(10);
    for client in 0..schedule.clients {
        if let Some(process) = run.processes[client].as_mut()
            && tokio::time::timeout(patience, &mut process.worker)
                .await
                .is_err()
        {
            process.worker.abort();
            if !world.violated() {
                return Err(Violation {
                    seed: schedule.seed,
                    at: Instant::now().saturating_duration_since(start),
                    what: format!("client {client}'s worker did not stop within {patience:?}"),
                    trace: Vec::new(),
                });
            }
        }
    }
    for process in run.processes.iter().flatten() {
        let _ = process.client.shutdown().await;
    }
    checker.abort();
    world.check_guards();
    world.check_shutdown(&run.memory.records());
    match world.take_violation() {
        Some(violation) => Err(violation),
        None => Ok(world.report()),
    }
}
