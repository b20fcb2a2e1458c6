//! The protocol's timing decisions as pure functions of state and `now`.
//!
//! Everything the client decides about time (is my lease safe, in danger, lost;
//! may I take over a lock I have been watching) is here, so it can be unit-tested
//! with hand-picked instants and drift values, without a runtime.

use std::time::{Duration, SystemTime};

use crate::WriteTime;
use crate::clock::Instant;
/// Why a lease stopped being trusted (defined in its own module: the
/// errors name it too, and they come before the timing rules).
pub use crate::lost::LostReason;

/// The timing parameters of one client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    /// Lease duration `L`.
    pub lease: Duration,
    /// Bound on clock drift between any two clients, as a fraction (0.01 = 1 %).
    pub max_drift: f64,
    /// Extra time the holder stops trusting its lease before the drift-adjusted end.
    pub safety_margin: Duration,
}

impl Timing {
    /// How long after sending a confirmed write the holder may trust its lease:
    /// `L × (1 − drift) − margin` (zero when that is negative).
    pub fn safe_time(&self) -> Duration {
        self.lease
            .mul_f64(1.0 - self.max_drift)
            .saturating_sub(self.safety_margin)
    }

    /// When the holder stops trusting a lease whose latest confirmed write was
    /// sent at `confirmed_send`: the end of its safe time.
    pub fn safe_until(&self, confirmed_send: Instant) -> Instant {
        crate::clock::later(confirmed_send, self.safe_time())
    }

    /// When that lease ends on the holder's clock.
    pub fn expires(&self, confirmed_send: Instant) -> Instant {
        crate::clock::later(confirmed_send, self.lease)
    }

    /// How long a waiter must see the same RVN before it may take over:
    /// `lease × (1 + drift)`, using the lease the holder wrote.
    /// Saturates at `Duration::MAX` for a lease too long to scale (a record
    /// another library wrote with an absurd lease is waited out "forever", not a
    /// panic).
    pub fn takeover_after(&self, observed_lease: Duration) -> Duration {
        Duration::try_from_secs_f64(observed_lease.as_secs_f64() * (1.0 + self.max_drift))
            .unwrap_or(Duration::MAX)
    }

    /// The holder's view of its lease at `now`, given the send time of its latest
    /// confirmed write (`confirmed_send`).
    pub fn lease_state(&self, confirmed_send: Instant, now: Instant) -> LeaseState {
        let safe_until = self.safe_until(confirmed_send);
        let expires = self.expires(confirmed_send);
        if now < safe_until {
            LeaseState::Safe {
                remaining: safe_until - now,
            }
        } else if now < expires {
            LeaseState::InDanger {
                remaining: expires - now,
            }
        } else {
            LeaseState::Lost {
                reason: LostReason::Expired,
            }
        }
    }

    /// The instant at which a waiter may take over the observed record:
    /// `lease × (1 + drift)` after it was seen, less the age the record was
    /// proven to have when seen ([`Observation::credit`]).
    pub fn takeover_at(&self, observation: &Observation) -> Instant {
        self.delayed_takeover_at(observation, Duration::ZERO)
    }

    /// [`takeover_at`](Self::takeover_at) with a
    /// [lock delay](crate::LockClientBuilder::lock_delay): `delay` more
    /// after the lease × (1 + drift), counted from the same write (so a
    /// record already proven old waits only what is left of both).
    pub fn delayed_takeover_at(&self, observation: &Observation, delay: Duration) -> Instant {
        crate::clock::later(
            observation.seen_at,
            self.takeover_after(observation.lease)
                .saturating_add(delay)
                .saturating_sub(observation.credit),
        )
    }

    /// The wait budget of an acquire that sets none: long enough to take over
    /// a holder of `lease` that crashed, `lease × (1 + drift)`, plus one poll
    /// (`refresh`), since the takeover happens on a poll. python-dynamodb-lock
    /// and the Java client wait about as long by default.
    pub fn default_wait(&self, lease: Duration, refresh: Duration) -> Duration {
        self.takeover_after(lease).saturating_add(refresh)
    }
}

/// When a waiter may take over a record its holder left held on purpose
/// until `until` (wall clock) by a final write (see
/// [`Rvn::fresh_final`](crate::Rvn::fresh_final)): as soon as this client's wall
/// clock reads `until`, as an instant on its monotonic clock (`now` and
/// `wall_now` read together). No work under the lock follows a final write,
/// so this ends a schedule, not an ownership: it is the one decision made on
/// wall-clock time, and a waiter's wall clock `s` ahead of the holder's ends
/// the hold `s` early.
pub fn final_hold_ends_at(
    now: Instant,
    wall_now: std::time::SystemTime,
    until: std::time::SystemTime,
) -> Instant {
    crate::clock::later(now, until.duration_since(wall_now).unwrap_or_default())
}

/// The hold-time limits of one acquisition
/// ([`AcquireOptions::min_hold`](crate::AcquireOptions::min_hold) and
/// [`max_hold`](crate::AcquireOptions::max_hold)), as instants on the holder's
/// clock counted from the send time of the write that acquired the lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldLimits {
    /// Until when a release keeps the lock held instead.
    pub min_until: Option<Instant>,
    /// When the lease stops being trusted whatever the heartbeats do, and the
    /// limit it was set with.
    pub max: Option<(Instant, Duration)>,
}

impl HoldLimits {
    /// The limits of a lock acquired by a write sent at `acquired`.
    pub fn new(acquired: Instant, min_hold: Option<Duration>, max_hold: Option<Duration>) -> Self {
        Self {
            min_until: min_hold.map(|hold| crate::clock::later(acquired, hold)),
            max: max_hold.map(|limit| (crate::clock::later(acquired, limit), limit)),
        }
    }

    /// The lease a final write sent at `now` must carry so the lock stays held
    /// until the min hold ends (rounded up to whole milliseconds, the
    /// resolution stores keep leases in), or `None` when a release at `now`
    /// may simply release. The waiter that takes the record over counts this
    /// lease × (1 + drift) from a reply that came after the write, so in true
    /// time the lock is held until at least `min_until`.
    pub fn rest_of_min_hold(&self, now: Instant) -> Option<Duration> {
        let until = self.min_until?;
        let rest = until
            .checked_duration_since(now)
            .filter(|rest| !rest.is_zero())?;
        let millis = rest.as_nanos().div_ceil(1_000_000);
        Some(Duration::from_millis(
            u64::try_from(millis).unwrap_or(u64::MAX),
        ))
    }

    /// The max hold has been reached at `now`: the reason the lease is lost.
    pub fn max_hold_reached(&self, now: Instant) -> Option<LostReason> {
        match self.max {
            Some((until, limit)) if now >= until => Some(LostReason::MaxHold { limit }),
            _ => None,
        }
    }

    /// `at`, or the max hold's end if that comes first: when the holder must
    /// look at the lock next.
    pub fn not_after(&self, at: Instant) -> Instant {
        match self.max {
            Some((until, _)) => at.min(until),
            None => at,
        }
    }
}

/// A waiter's observation of a held record: its RVN, its lease, and when the
/// response carrying it arrived (the latest possible write time, so a waiter's
/// count starts no earlier than the write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The RVN seen.
    pub rvn: crate::Rvn,
    /// The lease the holder wrote.
    pub lease: Duration,
    /// The holder's owner name.
    pub owner: String,
    /// When the response carrying the record arrived.
    pub seen_at: Instant,
    /// How old the record was proven to be at `seen_at`, as [`ClockTrust::credit`]
    /// computes it from what the store said ([`crate::LockRecord::written`]):
    /// zero from a store without a clock.
    pub credit: Duration,
}

impl Observation {
    /// Whether this observation lets a waiter take over no later than `other`
    /// would (the same record seen twice: keep the one proving more).
    pub fn proves_at_least(&self, other: &Observation) -> bool {
        // seen_at − credit ≤ other.seen_at − other.credit, without subtracting
        // from an instant.
        crate::clock::later(self.seen_at, other.credit)
            <= crate::clock::later(other.seen_at, self.credit)
    }
}

/// Which clocks other than its own monotonic one a waiter trusts to prove a
/// record old, and so take over a crashed holder sooner than watching it.
///
/// # Why a credited takeover is safe
///
/// A holder trusts its lease until at most `lease` of true time after it sent
/// the write (its safe time is `lease × (1 − drift) − margin` on a clock
/// running at least `1 − drift`). Every clock here runs at most `1 + drift`
/// fast. A store stamps a write while the writing request runs, so after the
/// holder sent it; a credit `c` at the reply's arrival therefore proves at
/// least `c / (1 + drift)` of true time since the send. The waiter then waits
/// `lease × (1 + drift) − c` on its monotonic clock, at least
/// `lease − c / (1 + drift)` of true time: at least `lease` since the send in
/// all, when the holder has stopped trusting its lease.
///
/// What each source assumes beyond the drift bound:
/// * [`WriteTime::Ago`]: the store's clock is not stepped forward while a
///   lease runs, and all replicas a store reads from share it.
/// * [`WriteTime::At`]: no two hosts' wall clocks (the writer's, the
///   waiter's, the service's for `Last-Modified`) differ by more than
///   [`max_clock_difference`](Self::max_clock_difference), and none is
///   stepped forward while a lease runs (the writer's clock must not advance
///   faster than `1 + drift` between its stamp and the read: all hosts
///   stepped forward together keep their differences and still overstate
///   every age). A host whose clock is further ahead takes a live holder's
///   lock early; one whose clock is behind stamps its writes early, so
///   others take its lock early. Fences still refuse the old holder's writes
///   at the resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockTrust {
    /// Trust [`WriteTime::Ago`] (the store's own clock). On by default.
    pub store_age: bool,
    /// Trust [`WriteTime::At`] when no two hosts' wall clocks differ by more
    /// than this. Off (`None`) by default.
    pub max_clock_difference: Option<Duration>,
}

impl ClockTrust {
    /// The default: the store's own clock, no wall clocks.
    pub const STORE_CLOCK: Self = Self {
        store_age: true,
        max_clock_difference: None,
    };

    /// How old a record stamped `written` is proven to be at the instant this
    /// client's wall clock said `wall_now`. Read the wall clock after the
    /// reply arrived and no later than the instant the observation counts
    /// from ([`Observation::seen_at`]).
    pub fn credit(&self, written: Option<WriteTime>, wall_now: SystemTime) -> Duration {
        match (written, self.max_clock_difference) {
            (Some(WriteTime::Ago(age)), _) if self.store_age => age,
            (Some(WriteTime::At(at)), Some(bound)) => wall_now
                .duration_since(at)
                .unwrap_or_default()
                .saturating_sub(bound),
            _ => Duration::ZERO,
        }
    }
}

/// How far a holder can trust its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Safe to act under the lock for `remaining` more (before heartbeats).
    Safe {
        /// Safe time left.
        remaining: Duration,
    },
    /// Past the safe time but before the lease ends: stop starting work, finish or
    /// abandon what is running. `remaining` is the time until the lease ends.
    InDanger {
        /// Time left until the lease expires.
        remaining: Duration,
    },
    /// The lease can no longer be trusted.
    Lost {
        /// Why.
        reason: LostReason,
    },
}

impl LeaseState {
    /// True for [`LeaseState::Safe`].
    pub fn is_safe(&self) -> bool {
        matches!(self, LeaseState::Safe { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rvn;

    fn timing(drift: f64) -> Timing {
        Timing {
            lease: Duration::from_secs(10),
            max_drift: drift,
            safety_margin: Duration::from_millis(500),
        }
    }

    #[test]
    fn holder_is_safe_then_in_danger_then_lost() {
        let t = timing(0.01);
        let sent = Instant::now();
        // safe time = 10 s × 0.99 − 0.5 s = 9.4 s
        assert_eq!(t.safe_time(), Duration::from_millis(9400));
        assert_eq!(
            t.lease_state(sent, sent),
            LeaseState::Safe {
                remaining: Duration::from_millis(9400)
            }
        );
        assert!(
            t.lease_state(sent, sent + Duration::from_millis(9399))
                .is_safe()
        );
        assert_eq!(
            t.lease_state(sent, sent + Duration::from_millis(9400)),
            LeaseState::InDanger {
                remaining: Duration::from_millis(600)
            }
        );
        assert_eq!(
            t.lease_state(sent, sent + Duration::from_secs(10)),
            LeaseState::Lost {
                reason: LostReason::Expired
            }
        );
    }

    #[test]
    fn waiter_waits_lease_times_one_plus_drift() {
        let t = timing(0.05);
        let seen = Instant::now();
        let obs = Observation {
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(10),
            owner: "a".into(),
            seen_at: seen,
            credit: Duration::ZERO,
        };
        assert_eq!(t.takeover_at(&obs), seen + Duration::from_millis(10_500));
        // The observed (holder's) lease counts, not the waiter's own.
        let long = Observation {
            lease: Duration::from_secs(20),
            ..obs
        };
        assert_eq!(t.takeover_at(&long), seen + Duration::from_secs(21));
    }

    /// With every clock's rate within `1 ± max_drift` of true time (holder slow, so
    /// its lease looks longer; waiter fast, so it counts down sooner), the holder
    /// stops trusting its lease before the waiter may take over, in true time. The
    /// durations come from the functions the client uses, so a change to either
    /// rule is checked here.
    #[test]
    fn drifted_holder_stops_before_drifted_waiter_takes_over() {
        for drift in [0.0, 0.01, 0.05, 0.1, 0.2, 0.4, 0.49] {
            for margin in [Duration::ZERO, Duration::from_millis(500)] {
                let t = Timing {
                    safety_margin: margin,
                    ..timing(drift)
                };
                // The holder sends at true 0, on a clock running slow; the write
                // applies, and the waiter's response arrives, at true 0 at the
                // earliest, on a clock running fast.
                let holder_rate = 1.0 - drift;
                let waiter_rate = 1.0 + drift;
                let holder_safe_true = t.safe_time().as_secs_f64() / holder_rate;
                let waiter_takeover_true = t.takeover_after(t.lease).as_secs_f64() / waiter_rate;
                assert!(
                    holder_safe_true <= waiter_takeover_true,
                    "drift {drift}, margin {margin:?}: safe until {holder_safe_true}, takeover at {waiter_takeover_true}"
                );
                // The holder's own clock says its lease ends no later than a
                // waiter's says it may take over.
                assert!(t.lease <= t.takeover_after(t.lease));
            }
        }
    }

    #[test]
    fn a_credit_comes_only_from_a_trusted_clock() {
        let wall = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let age = Some(WriteTime::Ago(Duration::from_secs(7)));
        let stamped = Some(WriteTime::At(wall - Duration::from_secs(7)));
        let store = ClockTrust::STORE_CLOCK;
        assert_eq!(store.credit(age, wall), Duration::from_secs(7));
        assert_eq!(
            store.credit(stamped, wall),
            Duration::ZERO,
            "no bound declared"
        );
        assert_eq!(store.credit(None, wall), Duration::ZERO);
        let neither = ClockTrust::default();
        assert_eq!(neither.credit(age, wall), Duration::ZERO);
        let bounded = ClockTrust {
            max_clock_difference: Some(Duration::from_secs(2)),
            ..ClockTrust::default()
        };
        assert_eq!(bounded.credit(stamped, wall), Duration::from_secs(5));
        // A stamp from the future, or younger than the bound, proves nothing.
        let future = Some(WriteTime::At(wall + Duration::from_secs(3)));
        assert_eq!(bounded.credit(future, wall), Duration::ZERO);
        let young = Some(WriteTime::At(wall - Duration::from_secs(1)));
        assert_eq!(bounded.credit(young, wall), Duration::ZERO);
    }

    #[test]
    fn a_credited_observation_moves_the_takeover_earlier_by_the_credit_and_no_further() {
        let t = timing(0.01);
        let seen = Instant::now();
        let obs = |credit| Observation {
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(10),
            owner: "a".into(),
            seen_at: seen,
            credit,
        };
        assert_eq!(
            t.takeover_at(&obs(Duration::from_secs(4))),
            seen + Duration::from_millis(6_100)
        );
        assert_eq!(t.takeover_at(&obs(Duration::from_millis(10_100))), seen);
        assert_eq!(t.takeover_at(&obs(Duration::from_secs(3_600))), seen);
        // A lock delay counts from the same write: a record proven 12 s old
        // waits what is left of 10.1 s + 3 s.
        assert_eq!(
            t.delayed_takeover_at(&obs(Duration::from_secs(12)), Duration::from_secs(3)),
            seen + Duration::from_millis(1_100)
        );
        let a = obs(Duration::from_secs(4));
        let b = Observation {
            seen_at: seen + Duration::from_secs(1),
            ..obs(Duration::from_secs(4))
        };
        assert!(a.proves_at_least(&b));
        assert!(!b.proves_at_least(&a));
        assert!(a.proves_at_least(&a));
    }

    /// The argument of [`ClockTrust`], in numbers: the holder (clock slow by
    /// the bound) sends at true 0; the store stamps then and its clock runs
    /// fast by the bound; a reply proving credit `c` arrives at true `r`; the
    /// waiter (clock fast) then waits what `takeover_at` says. In true time
    /// the takeover never comes before the holder stops trusting.
    #[test]
    fn a_credited_takeover_never_comes_before_the_holder_stops_trusting() {
        for drift in [0.0, 0.01, 0.05, 0.2, 0.49] {
            for margin in [Duration::ZERO, Duration::from_millis(500)] {
                let t = Timing {
                    safety_margin: margin,
                    ..timing(drift)
                };
                let holder_safe_true = t.safe_time().as_secs_f64() / (1.0 - drift);
                for read_true in [0.0, 0.3, 5.0, 9.99, 10.0, 30.0] {
                    // The store's clock, fast, measured this age at the read;
                    // the reply arrived at the read's instant (the earliest).
                    let credit = Duration::from_secs_f64(read_true * (1.0 + drift));
                    let seen = Instant::now();
                    let obs = Observation {
                        rvn: Rvn::fresh(),
                        lease: t.lease,
                        owner: "a".into(),
                        seen_at: seen,
                        credit,
                    };
                    let wait_waiter_clock = (t.takeover_at(&obs) - seen).as_secs_f64();
                    let takeover_true = read_true + wait_waiter_clock / (1.0 + drift);
                    assert!(
                        takeover_true + 1e-6 >= holder_safe_true,
                        "drift {drift}, margin {margin:?}, read at {read_true}: takeover at {takeover_true}, safe until {holder_safe_true}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_enormous_observed_lease_saturates() {
        let t = timing(0.01);
        assert_eq!(t.takeover_after(Duration::MAX), Duration::MAX);
        let obs = Observation {
            rvn: Rvn::fresh(),
            lease: Duration::MAX,
            owner: "a".into(),
            seen_at: Instant::now(),
            credit: Duration::ZERO,
        };
        assert!(t.takeover_at(&obs) > Instant::now() + Duration::from_secs(1_000_000));
    }

    #[test]
    fn the_rest_of_a_min_hold_rounds_up_to_whole_milliseconds_and_ends() {
        let acquired = Instant::now();
        let limits = HoldLimits::new(acquired, Some(Duration::from_secs(60)), None);
        let at = acquired + Duration::from_millis(2_000) + Duration::from_nanos(1);
        assert_eq!(
            limits.rest_of_min_hold(at),
            Some(Duration::from_millis(58_000)),
            "57.999999999 s is written as 58 s, never less"
        );
        assert_eq!(
            limits.rest_of_min_hold(acquired + Duration::from_secs(60)),
            None
        );
        assert_eq!(HoldLimits::default().rest_of_min_hold(acquired), None);
    }

    #[test]
    fn the_max_hold_is_reached_at_its_limit_and_bounds_the_next_look() {
        let acquired = Instant::now();
        let limit = Duration::from_secs(7);
        let limits = HoldLimits::new(acquired, None, Some(limit));
        let end = acquired + limit;
        assert_eq!(limits.max_hold_reached(end - Duration::from_nanos(1)), None);
        assert_eq!(
            limits.max_hold_reached(end),
            Some(LostReason::MaxHold { limit })
        );
        assert_eq!(limits.not_after(end + Duration::from_secs(1)), end);
        assert_eq!(limits.not_after(acquired), acquired);
    }

    #[test]
    fn a_final_hold_ends_when_this_clients_wall_clock_reads_its_end() {
        let now = Instant::now();
        let wall = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let until = wall + Duration::from_secs(58);
        assert_eq!(
            final_hold_ends_at(now, wall, until),
            now + Duration::from_secs(58)
        );
        // A wall clock already past the end: over now.
        assert_eq!(
            final_hold_ends_at(now, until + Duration::from_secs(1), until),
            now
        );
    }

    #[test]
    fn safe_time_saturates_at_zero() {
        let t = Timing {
            lease: Duration::from_millis(100),
            max_drift: 0.0,
            safety_margin: Duration::from_secs(1),
        };
        assert_eq!(t.safe_time(), Duration::ZERO);
        let now = Instant::now();
        assert!(matches!(
            t.lease_state(now, now),
            LeaseState::InDanger { .. }
        ));
    }
}
