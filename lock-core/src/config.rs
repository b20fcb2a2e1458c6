//! Client configuration: the builder, its defaults and its validation.

use std::sync::Arc;
use std::time::Duration;

use crate::timing::ClockTrust;
use crate::{Clock, ConditionalStore, ConfigError, Timing, TokioClock};

/// The longest lease a client may write: a year. Longer leases are almost
/// certainly a unit mistake, and stores keep leases in milliseconds.
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Validated settings of one [`LockClient`](crate::LockClient).
#[derive(Clone, Debug)]
pub(crate) struct ClientConfig {
    pub owner: String,
    pub timing: Timing,
    pub heartbeat_period: Duration,
    /// The safety margin as set on the builder; `None`: a tenth of each lease,
    /// at most 1 s (so a per-acquire lease gets a margin of its own size).
    pub margin_setting: Option<Duration>,
    pub refresh_period: Duration,
    pub heartbeat_rate_limit: Option<u32>,
    pub retry_base: Duration,
    pub retry_max: Duration,
    pub shutdown_timeout: Duration,
    pub metric_key_labels: bool,
    /// Which clocks prove a record old (see [`ClockTrust`]).
    pub clock_trust: ClockTrust,
    /// How much longer than the takeover rule a silent holder's lock is left
    /// alone (see [`LockClientBuilder::lock_delay`]).
    pub lock_delay: Duration,
}

/// Builds a [`LockClient`](crate::LockClient); see
/// [`LockClient::builder`](crate::LockClient::builder).
///
/// Defaults: lease 20 s, heartbeat every lease / 4, refresh (poll) period 1 s (or
/// lease / 4 if shorter), max clock drift 1 %, safety margin lease / 10 (at most
/// 1 s), no heartbeat rate limit, store retries backing off from 50 ms to 2 s,
/// shutdown bounded by 5 s, owner name = host name + random suffix.
#[derive(Debug)]
#[must_use]
pub struct LockClientBuilder {
    store: Arc<dyn ConditionalStore>,
    clock: Arc<dyn Clock>,
    owner: Option<String>,
    lease: Duration,
    heartbeat_period: Option<Duration>,
    refresh_period: Option<Duration>,
    max_drift: f64,
    safety_margin: Option<Duration>,
    heartbeat_rate_limit: Option<u32>,
    retry_base: Duration,
    retry_max: Duration,
    shutdown_timeout: Duration,
    metric_key_labels: bool,
    clock_trust: ClockTrust,
    lock_delay: Duration,
}

impl LockClientBuilder {
    pub(crate) fn new(store: Arc<dyn ConditionalStore>) -> Self {
        Self {
            store,
            clock: Arc::new(TokioClock),
            owner: None,
            lease: Duration::from_secs(20),
            heartbeat_period: None,
            refresh_period: None,
            max_drift: 0.01,
            safety_margin: None,
            heartbeat_rate_limit: None,
            retry_base: Duration::from_millis(50),
            retry_max: Duration::from_secs(2),
            shutdown_timeout: Duration::from_secs(5),
            metric_key_labels: false,
            clock_trust: ClockTrust::STORE_CLOCK,
            lock_delay: Duration::ZERO,
        }
    }

    /// The owner name written into every record (default: host name + random
    /// suffix). Two clients must never share one.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The lease duration `L`: how long a record stays trusted without a heartbeat
    /// (at most a year).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often each held lock is heartbeaten (default lease / 4). Must be shorter
    /// than the safe time `L × (1 − drift) − margin`.
    pub fn heartbeat_period(mut self, period: Duration) -> Self {
        self.heartbeat_period = Some(period);
        self
    }

    /// How often a waiting acquire polls the lock (default 1 s, or lease / 4 when
    /// shorter). Each poll is jittered to between half and all of this period.
    pub fn refresh_period(mut self, period: Duration) -> Self {
        self.refresh_period = Some(period);
        self
    }

    /// Bound on every client's clock rate error, as a fraction (default 0.01). A
    /// holder stops trusting its lease `L × drift` early and a waiter waits
    /// `L × drift` longer.
    pub fn max_clock_drift(mut self, drift: f64) -> Self {
        self.max_drift = drift;
        self
    }

    /// Extra time the holder stops trusting its lease before the drift-adjusted end,
    /// covering scheduling delays (default lease / 10, at most 1 s).
    pub fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// At most this many heartbeats started per second by this client (default
    /// unlimited); heartbeats beyond it are spread out.
    pub fn heartbeat_rate_limit(mut self, per_second: u32) -> Self {
        self.heartbeat_rate_limit = Some(per_second);
        self
    }

    /// Backoff for retried store errors: from `base`, doubling, capped at `max`,
    /// with jitter.
    pub fn retry_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.retry_base = base;
        self.retry_max = max.max(base);
        self
    }

    /// How long [`LockClient::shutdown`](crate::LockClient::shutdown) waits for
    /// its releases (default 5 s; `Duration::MAX` waits for as long as they take).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Label this client's per-lock metrics with the lock's key (default
    /// off; see [`metrics`](crate::metrics)). One series per key: for a few
    /// well-known keys only, never keys made per job, user or request.
    pub fn metric_key_labels(mut self, yes: bool) -> Self {
        self.metric_key_labels = yes;
        self
    }

    /// Take over a crashed holder's lock by the store's own clock where the
    /// store keeps one ([`StoreClock::Age`](crate::StoreClock::Age):
    /// PostgreSQL; Redis and Valkey, on the node that wrote the record; the
    /// in-memory store): a record whose lease has passed on
    /// the store's clock is taken over the first time this client reads it,
    /// instead of after watching it for `lease × (1 + drift)`. On by default.
    ///
    /// It assumes the store's clock runs within the drift bound and is not
    /// stepped forward during a lease (a forward step of `s` lets a waiter take
    /// a live holder's lock up to `s` early; fences still refuse the old
    /// holder's writes at the resource). Turn it off to rely on no clock but
    /// this client's monotonic one.
    pub fn use_store_clock(mut self, yes: bool) -> Self {
        self.clock_trust.store_age = yes;
        self
    }

    /// Take over a crashed holder's lock by wall-clock time, on stores whose
    /// records carry one ([`StoreClock::Wall`](crate::StoreClock::Wall):
    /// DynamoDB stamps each write with its writer's clock; object stores keep
    /// `Last-Modified`), trusting that no two hosts' wall clocks (writers',
    /// waiters', the service's) differ by more than `bound`. A record is taken
    /// over once `written + lease × (1 + drift) + bound` has passed on this
    /// client's wall clock. Off by default: a waiter then watches the record
    /// for `lease × (1 + drift)`, which needs no clock assumption.
    ///
    /// What a wrong bound breaks: a host whose clock is further ahead than
    /// `bound` takes a live holder's lock early, by the excess; a host whose
    /// clock is further behind stamps its writes early, so others take its
    /// locks early by the excess. The old holder still trusts its lease until
    /// its own monotonic clock says otherwise, so two holders may act at once:
    /// fences ([`lock_core::fencing`](crate::fencing)) still refuse the old
    /// holder's writes at the resource.
    pub fn max_clock_difference(mut self, bound: Duration) -> Self {
        self.clock_trust.max_clock_difference = Some(bound);
        self
    }

    /// Leave a lock whose holder went silent (crashed, cut off, paused) alone
    /// for `delay` longer than the takeover rule requires, as Chubby's and
    /// Consul's lock-delay do (default none): for resources that cannot check
    /// fences, so that a holder's write still in flight when it lost the lock
    /// lands before anyone else may act. Set it alike on every client of a
    /// lock: it is the waiters' rule. A lock released, or left to the end of
    /// a min hold, is taken at once as before. At most a year.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// The clock all timing decisions read (default [`TokioClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The store and clock the client is built over (see `LockClient`'s
    /// `build`, which lives with the client).
    pub(crate) fn parts(&self) -> (Arc<dyn ConditionalStore>, Arc<dyn Clock>) {
        (self.store.clone(), self.clock.clone())
    }

    /// Check every setting; writes nothing.
    pub(crate) fn validate(&self) -> Result<ClientConfig, ConfigError> {
        let lease = self.lease;
        if !(0.0..0.5).contains(&self.max_drift) || !self.max_drift.is_finite() {
            return Err(ConfigError::BadDrift {
                drift: self.max_drift,
            });
        }
        let timing = Timing {
            lease,
            max_drift: self.max_drift,
            safety_margin: self.safety_margin.unwrap_or_else(|| default_margin(lease)),
        };
        let heartbeat = self.heartbeat_period.unwrap_or(lease / 4);
        check_lease(&timing, heartbeat)?;
        let refresh = self
            .refresh_period
            .unwrap_or_else(|| Duration::from_secs(1).min(lease / 4));
        if refresh.is_zero() {
            return Err(ConfigError::ZeroRefresh);
        }
        if self.heartbeat_rate_limit == Some(0) {
            return Err(ConfigError::ZeroRateLimit);
        }
        if self.lock_delay > MAX_LEASE {
            return Err(ConfigError::LockDelayTooLong {
                delay: self.lock_delay,
                max: MAX_LEASE,
            });
        }
        if self.clock_trust.max_clock_difference.is_some()
            && self.store.capabilities().clock == crate::StoreClock::None
        {
            return Err(ConfigError::ClockDifferenceWithoutWriteTimes);
        }
        warn_if_fences_restart(&self.store.capabilities());
        let owner = match &self.owner {
            Some(owner) if owner.trim().is_empty() => return Err(ConfigError::EmptyOwner),
            Some(owner) => owner.clone(),
            None => default_owner(),
        };
        Ok(ClientConfig {
            owner,
            timing,
            heartbeat_period: heartbeat,
            margin_setting: self.safety_margin,
            refresh_period: refresh,
            heartbeat_rate_limit: self.heartbeat_rate_limit,
            retry_base: self.retry_base,
            retry_max: self.retry_max,
            shutdown_timeout: self.shutdown_timeout,
            metric_key_labels: self.metric_key_labels,
            clock_trust: self.clock_trust,
            lock_delay: self.lock_delay,
        })
    }
}

/// Says once per process, at warn, that a store starts a key's fences again
/// after its record is deleted: a fence from it checked at a resource can
/// then admit a stale holder. Not an error: a lock whose record is never
/// deleted, or whose fences nobody checks, is safe on it.
fn warn_if_fences_restart(caps: &crate::Capabilities) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if caps.fences_after_deletion == crate::FencesAfterDeletion::Restart
        && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            "this lock store starts a key's fences again at 1 when its record is deleted \
             (Capabilities::fences_after_deletion is Restart): a holder paused across a \
             deletion keeps a fence the next holders may be given again, and a resource \
             checking fences would admit its stale writes; never delete the records of \
             locks whose fences a resource checks"
        );
    }
}

/// The safety margin when none is set: a tenth of the lease, at most 1 s.
fn default_margin(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(1))
}

/// The rules every lease a client writes must meet, the client's own and a
/// per-acquire one alike: not zero, at most [`MAX_LEASE`], a safe time left
/// after drift and margin, and heartbeats more often than the safe time.
fn check_lease(timing: &Timing, heartbeat: Duration) -> Result<(), ConfigError> {
    let lease = timing.lease;
    if lease.is_zero() {
        return Err(ConfigError::ZeroLease);
    }
    if lease > MAX_LEASE {
        return Err(ConfigError::LeaseTooLong {
            lease,
            max: MAX_LEASE,
        });
    }
    let safe = timing.safe_time();
    if safe.is_zero() {
        return Err(ConfigError::NoSafeTime {
            lease,
            drift: timing.max_drift,
            margin: timing.safety_margin,
        });
    }
    if heartbeat.is_zero() {
        return Err(ConfigError::ZeroHeartbeat);
    }
    if heartbeat >= safe {
        return Err(ConfigError::HeartbeatTooSlow { heartbeat, safe });
    }
    Ok(())
}

impl ClientConfig {
    /// The wait budget of an acquire that sets none
    /// ([`Timing::default_wait`]), and the lock delay on top.
    pub(crate) fn default_wait(&self, lease: Duration, refresh: Duration) -> Duration {
        self.timing
            .default_wait(lease, refresh)
            .saturating_add(self.lock_delay)
    }

    /// [`default_wait`](Self::default_wait) for an acquire with `options`
    /// (its lease and refresh period, or the client's).
    pub(crate) fn default_wait_for(&self, options: &crate::AcquireOptions) -> Duration {
        let lease = options.lease.unwrap_or(self.timing.lease);
        let refresh = options.refresh_period.unwrap_or(self.refresh_period);
        self.default_wait(lease, refresh)
    }

    /// The wait budget of an acquire with `options`: the one it sets, or
    /// none for busy-unless-dead (a wait rule of its own: it watches a
    /// silent holder until it may be taken over, and gives up on a live
    /// one), or [`default_wait_for`](Self::default_wait_for).
    pub(crate) fn wait_for(&self, options: &crate::AcquireOptions) -> Duration {
        options.wait.unwrap_or_else(|| {
            if options.busy_unless_dead {
                Duration::ZERO
            } else {
                self.default_wait_for(options)
            }
        })
    }

    /// The timing of a lock held with `lease`: the client's drift bound, and
    /// its margin (a tenth of `lease`, at most 1 s, unless the builder set one).
    pub(crate) fn timing_for(&self, lease: Duration) -> Timing {
        if lease == self.timing.lease {
            return self.timing;
        }
        Timing {
            lease,
            max_drift: self.timing.max_drift,
            safety_margin: self.margin_setting.unwrap_or_else(|| default_margin(lease)),
        }
    }

    /// How often a lock held with `lease` is heartbeaten: the client's period,
    /// scaled to the lease (a quarter of it by default).
    pub(crate) fn heartbeat_period_for(&self, lease: Duration) -> Duration {
        if lease == self.timing.lease {
            return self.heartbeat_period;
        }
        let ratio = self.heartbeat_period.as_secs_f64() / self.timing.lease.as_secs_f64();
        Duration::try_from_secs_f64(lease.as_secs_f64() * ratio).unwrap_or(self.heartbeat_period)
    }

    /// The timing of a lock held with `lease`.
    pub(crate) fn lock_timing(&self, lease: Duration) -> crate::held::LockTiming {
        crate::held::LockTiming {
            timing: self.timing_for(lease),
            heartbeat_period: self.heartbeat_period_for(lease),
        }
    }

    /// Check an acquire's hold-time limits; writes nothing.
    pub(crate) fn check_holds(
        &self,
        min_hold: Option<Duration>,
        max_hold: Option<Duration>,
        delete_on_release: bool,
    ) -> Result<(), ConfigError> {
        for hold in [min_hold, max_hold].into_iter().flatten() {
            if hold > MAX_LEASE {
                return Err(ConfigError::HoldTooLong {
                    hold,
                    max: MAX_LEASE,
                });
            }
        }
        if max_hold.is_some_and(|max| max.is_zero()) {
            return Err(ConfigError::ZeroMaxHold);
        }
        if let (Some(min), Some(max)) = (min_hold, max_hold)
            && min > max
        {
            return Err(ConfigError::MinHoldOverMaxHold { min, max });
        }
        if delete_on_release && min_hold.is_some_and(|min| !min.is_zero()) {
            return Err(ConfigError::MinHoldWithDelete);
        }
        Ok(())
    }

    /// Check a per-acquire lease against the rules the client's own meets.
    pub(crate) fn check_acquire_lease(&self, lease: Duration) -> Result<(), ConfigError> {
        check_lease(&self.timing_for(lease), self.heartbeat_period_for(lease))
    }
}

/// Host name plus a random suffix, so two processes on one host differ.
fn default_owner() -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let host = if host.is_empty() {
        "localhost".to_owned()
    } else {
        host
    };
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}
