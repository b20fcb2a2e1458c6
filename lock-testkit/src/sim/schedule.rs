//! A [`Schedule`]: everything one simulation run does, drawn from its seed.

use std::time::Duration;

use lock_memory::FaultConfig;

use super::Breakage;

/// What one seeded run simulates. [`Schedule::from_seed`] draws it; every field
/// is public so a test can pin one down.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The seed everything else was drawn from.
    pub seed: u64,
    /// Number of client processes (2–16).
    pub clients: usize,
    /// Number of contended keys (1–4).
    pub keys: usize,
    /// Lease of every client.
    pub lease: Duration,
    /// Clock drift bound the clients are configured with.
    pub max_drift: f64,
    /// Each client's clock rate relative to true time (within `1 ± max_drift`).
    pub rates: Vec<f64>,
    /// Store latency bounds (half before the store applies a call, half after).
    pub latency: (Duration, Duration),
    /// Faults on every store call.
    pub faults: FaultConfig,
    /// Whether the liveness bounds are checked (only in runs without failing
    /// calls: a run of throttles can delay any waiter by any amount).
    pub check_liveness: bool,
    /// Probability that a worker, after checking its lease, is paused before its
    /// write to the resource.
    pub pause_before_write: f64,
    /// Probability that a paused worker writes without checking its lease again
    /// on waking (relying on the fence).
    pub careless: f64,
    /// Crash and process-pause events: (true time, client, event).
    pub events: Vec<(Duration, usize, Event)>,
    /// How long clients run before the orderly shutdown.
    pub run_for: Duration,
    /// The deliberate bug, if any.
    pub breakage: Option<Breakage>,
    /// Each client's safety margin ([`LockClientBuilder::safety_margin`]): zero for
    /// about a quarter of the clients, the protocol must be safe without one;
    /// otherwise up to a fifth of the lease.
    ///
    /// [`LockClientBuilder::safety_margin`]: lock_core::LockClientBuilder::safety_margin
    pub safety_margins: Vec<Duration>,
    /// How each client's worker releases: in half of the schedules every worker
    /// keeps the record, in the other half each worker draws one of the three ways.
    pub releases: Vec<Release>,
    /// What the workers do with the locks: take plain locks (the default),
    /// campaign in one leader election, or take permits of one semaphore.
    pub workload: Workload,
    /// Each client's hold-time limits on every acquire: none in two thirds of
    /// the schedules; otherwise each client may draw a
    /// [`min_hold`](lock_core::AcquireOptions::min_hold) (up to two leases;
    /// not with delete-on-release, which refuses one) and a
    /// [`max_hold`](lock_core::AcquireOptions::max_hold) (half a lease to three).
    pub holds: Vec<Holds>,
    /// What the store tells about when each record was written, and so how
    /// soon a waiter may take a crashed holder's lock: nothing in a drawn
    /// schedule (waiters watch records); see [`Schedule::with_store_time`].
    pub store_time: StoreTime,
}

/// What the simulated store says about when a record was written.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub enum StoreTime {
    /// Nothing: a waiter watches a record for `lease × (1 + drift)`.
    #[default]
    None,
    /// The store keeps a clock running at `rate` × true time and reports
    /// each record's age on reads, as PostgreSQL does; clients trust it.
    StoreClock {
        /// The store clock's rate (within `1 ± max_drift` for a correct run).
        rate: f64,
    },
    /// Each write is stamped with its writer's wall clock, as DynamoDB's are;
    /// client `i`'s wall clock is `offsets_ms[i]` milliseconds off true time,
    /// and every client trusts that no two differ by more than `bound`.
    WallClocks {
        /// Each client's wall-clock offset from true time, in milliseconds.
        offsets_ms: Vec<i64>,
        /// The bound the clients are configured with
        /// ([`max_clock_difference`](lock_core::LockClientBuilder::max_clock_difference)).
        bound: Duration,
    },
}

/// What the simulated workers coordinate with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Workload {
    /// Each worker acquires one of the schedule's keys at a time
    /// ([`LockClient::acquire`](lock_core::LockClient::acquire)).
    #[default]
    Locks,
    /// Each client is a candidate in one election
    /// ([`LockClient::elect`](lock_core::LockClient::elect)) and does its
    /// fenced work through [`Election::lead`](lock_core::Election::lead); some
    /// resign and campaign again.
    Election,
    /// Each worker takes a permit of one semaphore of `permits`
    /// ([`LockClient::semaphore`](lock_core::LockClient::semaphore)): its
    /// slots are the run's keys, and at most `permits` guards are safe at once.
    Semaphore {
        /// The semaphore's permits.
        permits: u32,
    },
    /// Each worker reads, writes, or reads upgradeably and then upgrades, one
    /// reader-writer lock with room for `readers` readers
    /// ([`LockClient::rw_lock`](lock_core::LockClient::rw_lock)): never a
    /// writer with a safe lease beside a reader with a safe lease or another
    /// writer, and a reader that trusts its read never sees a writer fence
    /// newer than its own at the resource.
    ReaderWriter {
        /// The lock's reader slots.
        readers: u32,
    },
    /// Each worker takes a set of two or more of the run's keys all or
    /// nothing ([`LockClient::acquire_all`](lock_core::LockClient::acquire_all);
    /// in one request when every key is free, the memory store writing
    /// several keys at once) and writes to each: one holder per key, and a
    /// set that failed leaves none of its keys held by its client.
    Sets,
}

/// The semaphore's name in a [`Workload::Semaphore`] run.
pub(crate) const SEMAPHORE: &str = "pool";

/// The reader-writer lock's name in a [`Workload::ReaderWriter`] run.
pub(crate) const RW_LOCK: &str = "shared";

/// One client's hold-time limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Holds {
    /// Released earlier than this after the acquire, the lock stays held by a
    /// final write.
    pub min: Option<Duration>,
    /// Heartbeats stop and the guard is lost at this long after the acquire.
    pub max: Option<Duration>,
}

/// How a worker releases its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// [`LockGuard::release`](lock_core::LockGuard::release): the record stays,
    /// marked released, and the key's fences keep increasing.
    Keep,
    /// Acquired with
    /// [`AcquireOptions::delete_on_release`](lock_core::AcquireOptions::delete_on_release),
    /// released with `release`: the record is deleted (so is it when `shutdown`
    /// releases the lock), and the key's next fence is 1.
    DeleteOnRelease,
    /// Released with
    /// [`LockGuard::release_and_delete`](lock_core::LockGuard::release_and_delete):
    /// the record is deleted, and the key's next fence is 1.
    ReleaseAndDelete,
}

impl Release {
    /// Whether this worker's releases delete the record.
    pub fn deletes(self) -> bool {
        self != Release::Keep
    }
}

/// A disturbance of one client process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The process dies (no release); it restarts as a new incarnation after
    /// `restart_after`.
    Crash {
        /// Down time before the restart.
        restart_after: Duration,
    },
    /// Every store call of the process stalls for this long (a stop-the-world
    /// pause or a partition); the process notices on waking.
    Pause {
        /// How long.
        length: Duration,
    },
}

fn ms(rng: &mut fastrand::Rng, range: std::ops::RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rng.u64(range))
}

impl Schedule {
    /// Draw a schedule from `seed`.
    pub fn from_seed(seed: u64, breakage: Option<Breakage>) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        // Small runs are cheaper and find most bugs; large ones still come up.
        let clients = if rng.u8(..4) == 0 {
            rng.usize(2..=16)
        } else {
            rng.usize(2..=5)
        };
        let keys = rng.usize(1..=4);
        let lease = ms(&mut rng, 800..=3_000);
        let mut max_drift = [0.0, 0.01, 0.05, 0.1][rng.usize(..4)];
        let mut rate_spread = max_drift;
        if breakage == Some(Breakage::IgnoresDrift) {
            // The clients believe their clocks agree; they do not.
            max_drift = 0.0;
            rate_spread = 0.2;
        }
        let rates = (0..clients)
            .map(|_| 1.0 + rate_spread * (2.0 * rng.f64() - 1.0))
            .collect();
        let latency_max = ms(&mut rng, 1..=60);
        let latency = (latency_max / 4, latency_max);
        let (faults, check_liveness) = match rng.u8(..3) {
            0 => (FaultConfig::NONE, true),
            1 => (FaultConfig::NONE, true),
            _ => {
                let p = 0.01 + 0.05 * rng.f64();
                (
                    FaultConfig::NONE
                        .with_throttle(p)
                        .with_unavailable(p)
                        .with_ambiguous_applied(p)
                        .with_ambiguous_not_applied(p),
                    false,
                )
            }
        };
        let run_for = Duration::from_secs(12);
        let mut events = Vec::new();
        for _ in 0..rng.usize(0..=3) {
            let at = ms(&mut rng, 500..=10_000);
            let client = rng.usize(..clients);
            let event = if rng.bool() {
                Event::Crash {
                    restart_after: ms(&mut rng, 0..=4_000),
                }
            } else {
                Event::Pause {
                    length: lease.mul_f64(0.5 + 2.0 * rng.f64()),
                }
            };
            events.push((at, client, event));
        }
        events.sort_by_key(|(at, client, _)| (*at, *client));
        let pause_before_write = if breakage == Some(Breakage::IgnoresDrift) {
            0.3
        } else {
            [0.0, 0.02, 0.1][rng.usize(..3)]
        };
        // Drawn after everything above, so that every field drawn before these
        // existed is still the same for a given seed (a seed reported before keeps
        // its clients, keys, faults and events).
        let mut safety_margins: Vec<Duration> = (0..clients)
            .map(|_| {
                if rng.u8(..4) == 0 {
                    Duration::ZERO
                } else {
                    (lease / 5).mul_f64(rng.f64())
                }
            })
            .collect();
        if breakage == Some(Breakage::IgnoresDrift) {
            safety_margins = vec![Duration::ZERO; clients];
        }
        let releases = if rng.bool() {
            vec![Release::Keep; clients]
        } else {
            (0..clients)
                .map(|_| {
                    [
                        Release::Keep,
                        Release::DeleteOnRelease,
                        Release::ReleaseAndDelete,
                    ][rng.usize(..3)]
                })
                .collect()
        };
        let holds = if rng.u8(..3) == 0 {
            releases
                .iter()
                .map(|release| {
                    let min = (rng.bool() && *release != Release::DeleteOnRelease)
                        .then(|| lease.mul_f64(2.0 * rng.f64()));
                    let max = rng.bool().then(|| {
                        lease
                            .mul_f64(0.5 + 2.5 * rng.f64())
                            .max(min.unwrap_or_default())
                    });
                    Holds { min, max }
                })
                .collect()
        } else {
            vec![Holds::default(); clients]
        };
        Self {
            seed,
            clients,
            keys,
            lease,
            max_drift,
            rates,
            latency,
            faults,
            check_liveness,
            pause_before_write,
            careless: 0.5,
            events,
            run_for,
            breakage,
            safety_margins,
            releases,
            holds,
            workload: Workload::Locks,
            store_time: StoreTime::None,
        }
    }

    /// The same schedule on a store that tells when records were written.
    pub fn with_store_time(mut self, store_time: StoreTime) -> Self {
        self.store_time = store_time;
        self
    }

    /// The same schedule with another workload: one key for an election, the
    /// semaphore's slots for a semaphore (each worker then releases by keeping
    /// the record, as a permit does; the drawn hold limits stay).
    pub fn with_workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        match workload {
            Workload::Locks => {}
            Workload::Election => {
                self.keys = 1;
                self.releases = vec![Release::Keep; self.clients];
                self.holds = vec![Holds::default(); self.clients];
            }
            Workload::Semaphore { permits } => {
                self.keys = permits as usize;
                self.releases = vec![Release::Keep; self.clients];
            }
            Workload::Sets => {
                self.keys = self.keys.max(3);
                // How long a set waits depends on the other sets, not only on
                // when a key was freed.
                self.check_liveness = false;
            }
            Workload::ReaderWriter { readers } => {
                // The write lock, the upgrade lock and the reader slots.
                self.keys = readers as usize + 2;
                self.releases = vec![Release::Keep; self.clients];
                // The workers wait for no single key (a waiter's bound
                // depends on who is inside): `check_liveness` applies to the
                // writers' wait instead (`World::check_writer_wait`).
            }
        }
        self
    }

    /// The schedule as the simulation ran it before the fields drawn last were
    /// added: every client with the client's default safety margin (a tenth of
    /// the lease, at most 1 s) and keeping its records. A seed that found a bug
    /// before then replays the very run it found it in.
    pub fn without_later_draws(mut self) -> Self {
        let default_margin = (self.lease / 10).min(Duration::from_secs(1));
        self.safety_margins = vec![default_margin; self.clients];
        self.releases = vec![Release::Keep; self.clients];
        self.holds = vec![Holds::default(); self.clients];
        self
    }

    /// A run without disturbances: no store faults, no process pauses (scheduled
    /// or between a lease check and a write), no crashes. In such a run no guard
    /// may go in danger or be lost while its worker holds it.
    pub fn is_calm(&self) -> bool {
        self.faults == FaultConfig::NONE && self.events.is_empty() && self.pause_before_write == 0.0
    }

    /// Longest a worker holds a guard when nothing pauses it: up to 8 writes, each
    /// after at most half a lease (and tokio's timers round each sleep up to the
    /// next millisecond). An upgradeable reader of a reader-writer lock holds
    /// its slot through its reads (up to 6, each after at most half a lease),
    /// its upgrade's wait (up to 3 leases) and its writes.
    pub fn longest_hold(&self) -> Duration {
        let writes = self.lease * 4;
        match self.workload {
            Workload::ReaderWriter { .. } => {
                self.lease * 3 + self.lease * 3 + writes + Duration::from_millis(100)
            }
            _ => writes + Duration::from_millis(100),
        }
    }

    /// Refresh period of the clients (as the client default: a quarter lease, at
    /// most 1 s).
    pub fn refresh(&self) -> Duration {
        (self.lease / 4).min(Duration::from_secs(1))
    }

    /// Slowest clock rate a client may have.
    fn slowest(&self) -> f64 {
        self.rates.iter().copied().fold(1.0, f64::min)
    }

    /// Longest a waiting client may take to get a released lock: one refresh
    /// period on its clock, a read and a write.
    pub fn released_bound(&self) -> Duration {
        self.refresh().div_f64(self.slowest()) + self.latency.1 * 3 + Duration::from_millis(20)
    }

    /// Longest a waiting client may take to take over a crashed holder's lock,
    /// counted from the holder's last write (or the waiter's start):
    /// `lease × (1 + drift)` and a refresh on its clock, and a few round trips.
    pub fn takeover_bound(&self, lease: Duration) -> Duration {
        (lease.mul_f64(1.0 + self.max_drift) + self.refresh()).div_f64(self.slowest())
            + self.latency.1 * 4
            + Duration::from_millis(50)
    }
}
