//! The seeded simulation of the protocol: many clients with drifting clocks
//! contend for a few keys on one store with faults, do fenced work on a shared
//! resource, crash, restart, get paused and shut down; every step is checked
//! against the protocol's invariants in true time. See `docs/testing.md`.
//!
//! Each run is drawn from one seed ([`Schedule::from_seed`]) and runs on its own
//! single-threaded tokio runtime with paused time, so a run of twelve simulated
//! seconds takes milliseconds and a failing seed replays the same way:
//!
//! ```
//! use lock_testkit::sim;
//!
//! let report = sim::run_seed(7, None).expect("the protocol holds");
//! assert!(report.acquisitions > 0);
//! ```

use std::fmt;
use std::time::Duration;

mod actors;
mod schedule;
mod store;
mod wall;
mod world;

pub use schedule::{Event, Holds, Release, Schedule, StoreTime, Workload};

/// A deliberate bug, to show that the checks catch one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Breakage {
    /// Clients are configured with no drift bound and no safety margin while
    /// their clocks drift by up to 20 %: a waiter with a fast clock takes over
    /// while a holder with a slow clock still trusts its lease.
    IgnoresDrift,
    /// The store keeps the fence on a takeover or re-acquisition instead of
    /// incrementing it: two holders share a fence.
    ReusedFence,
    /// Waiters' refresh period is two leases instead of a quarter of one, so
    /// they poll every one to two leases: released and orphaned locks sit free
    /// for longer than the liveness bounds.
    SlowPolling,
    /// Clients heartbeat just before their safe time runs out (the period is the
    /// safe time less a microsecond, which the client builder accepts), so each
    /// heartbeat's round trip leaves the guard in danger until its reply arrives,
    /// even in a run without faults or pauses.
    LateHeartbeats,
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimReport {
    /// The run's seed.
    pub seed: u64,
    /// Client processes.
    pub clients: usize,
    /// Contended keys.
    pub keys: usize,
    /// Acquisitions the store applied.
    pub acquisitions: u64,
    /// Releases the store applied.
    pub releases: u64,
    /// Writes the fenced resource accepted.
    pub resource_writes: u64,
    /// Writes the fenced resource rejected as stale.
    pub stale_rejected: u64,
    /// Reads of the resource by readers of a reader-writer lock.
    pub resource_reads: u64,
    /// Sets of keys taken (a sets run).
    pub sets_taken: u64,
    /// Of them, taken in one request.
    pub sets_at_once: u64,
    /// Acquire calls that timed out.
    pub acquire_timeouts: u64,
    /// Client crashes.
    pub crashes: u64,
    /// Process pauses.
    pub pauses: u64,
    /// Records the store deleted (workers that release with delete-on-release).
    pub deletes: u64,
    /// Stale writes the resource rejected only because it knew of a delete: each
    /// came from a holder whose record was deleted since, with a fence at least
    /// as high as any the resource had accepted, so a resource comparing bare
    /// fences would have taken it.
    pub stale_after_delete: u64,
    /// Acquisitions of a key its own owner held until that write: a lock
    /// handed between two tasks of one client (a semaphore's permit, in a
    /// semaphore run) in one write.
    pub local_handoffs: u64,
    /// Whether the run was calm (no faults, pauses or crashes), so that every
    /// guard was also checked to stay safe while its worker held it.
    pub calm: bool,
}

/// An invariant that did not hold, with the seed that replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Seed of the run.
    pub seed: u64,
    /// True (simulated) time into the run.
    pub at: Duration,
    /// Which invariant, and how.
    pub what: String,
    /// The last events before it.
    pub trace: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} at {:.3}s: {}",
            self.seed,
            self.at.as_secs_f64(),
            self.what
        )?;
        writeln!(
            f,
            "replay: LOCK_SIM_SEED={} cargo test -p lock-testkit --test testkit simulation -- --nocapture",
            self.seed
        )?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// Run the schedule drawn from `seed` on a fresh single-threaded runtime with
/// paused time.
pub fn run_seed(seed: u64, breakage: Option<Breakage>) -> Result<SimReport, Violation> {
    run_schedule(Schedule::from_seed(seed, breakage))
}

/// Run one schedule on a fresh single-threaded runtime with paused time.
pub fn run_schedule(schedule: Schedule) -> Result<SimReport, Violation> {
    let seed = schedule.seed;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| Violation {
            seed,
            at: Duration::ZERO,
            what: format!("could not start a runtime: {e}"),
            trace: Vec::new(),
        })?;
    // The clients draw their jitter from generators forked from this thread's.
    fastrand::seed(seed);
    runtime.block_on(actors::simulate(schedule))
}

/// Totals of many runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SimSummary {
    /// Runs completed.
    pub schedules: u64,
    /// Sum of [`SimReport::acquisitions`].
    pub acquisitions: u64,
    /// Sum of [`SimReport::resource_writes`].
    pub resource_writes: u64,
    /// Sum of [`SimReport::stale_rejected`].
    pub stale_rejected: u64,
    /// Sum of [`SimReport::resource_reads`].
    pub resource_reads: u64,
    /// Sum of [`SimReport::sets_taken`].
    pub sets_taken: u64,
    /// Sum of [`SimReport::sets_at_once`].
    pub sets_at_once: u64,
    /// Sum of [`SimReport::crashes`].
    pub crashes: u64,
    /// Sum of [`SimReport::pauses`].
    pub pauses: u64,
    /// Sum of [`SimReport::acquire_timeouts`].
    pub acquire_timeouts: u64,
    /// Sum of [`SimReport::deletes`].
    pub deletes: u64,
    /// Sum of [`SimReport::stale_after_delete`].
    pub stale_after_delete: u64,
    /// Sum of [`SimReport::local_handoffs`].
    pub local_handoffs: u64,
    /// Runs that were [calm](SimReport::calm).
    pub calm: u64,
    /// The violation of the lowest failing seed, if any.
    pub violation: Option<Violation>,
}

impl SimSummary {
    fn add(&mut self, report: &SimReport) {
        self.schedules += 1;
        self.acquisitions += report.acquisitions;
        self.resource_writes += report.resource_writes;
        self.stale_rejected += report.stale_rejected;
        self.resource_reads += report.resource_reads;
        self.sets_taken += report.sets_taken;
        self.sets_at_once += report.sets_at_once;
        self.crashes += report.crashes;
        self.pauses += report.pauses;
        self.acquire_timeouts += report.acquire_timeouts;
        self.deletes += report.deletes;
        self.stale_after_delete += report.stale_after_delete;
        self.local_handoffs += report.local_handoffs;
        self.calm += u64::from(report.calm);
    }

    /// Keep `violation` if its seed is the lowest so far.
    fn keep_lowest(&mut self, violation: Violation) {
        if self
            .violation
            .as_ref()
            .is_none_or(|kept| violation.seed < kept.seed)
        {
            self.violation = Some(violation);
        }
    }
}

/// Run the schedules of seeds `first .. first + count` on `threads` threads,
/// stopping at the first violation each thread finds.
pub fn run_seeds(first: u64, count: u64, threads: usize, breakage: Option<Breakage>) -> SimSummary {
    run_schedules(first, count, threads, |seed| {
        Schedule::from_seed(seed, breakage)
    })
}

/// Run the schedules `make` draws for seeds `first .. first + count` on
/// `threads` threads (for example [`Schedule::with_workload`] of each
/// seed's), stopping at the first violation each thread finds.
pub fn run_schedules(
    first: u64,
    count: u64,
    threads: usize,
    make: impl Fn(u64) -> Schedule + Sync,
) -> SimSummary {
    let threads = threads.max(1) as u64;
    let make = &make;
    // Each thread returns its reports and its first violation; the totals are
    // summed once, here.
    let parts: Vec<(Vec<SimReport>, Option<Violation>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut reports = Vec::new();
                    let mut i = t;
                    while i < count {
                        let seed = first.wrapping_add(i);
                        match run_schedule(make(seed)) {
                            Ok(report) => reports.push(report),
                            Err(violation) => return (reports, Some(violation)),
                        }
                        i += threads;
                    }
                    (reports, None)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    let panicked = Violation {
                        seed: first,
                        at: Duration::ZERO,
                        what: "a simulation thread panicked".into(),
                        trace: Vec::new(),
                    };
                    (Vec::new(), Some(panicked))
                })
            })
            .collect()
    });
    let mut total = SimSummary::default();
    for (reports, violation) in parts {
        for report in &reports {
            total.add(report);
        }
        if let Some(violation) = violation {
            total.keep_lowest(violation);
        }
    }
    total
}
