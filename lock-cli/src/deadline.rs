//! When `lockctl run` stops its command: the timeline that keeps the command
//! from ever running beside the next holder.
//!
//! The holder trusts its lease for the *safe time* after its last confirmed
//! heartbeat was sent (`lease × (1 − drift) − margin`); a waiter takes over no
//! earlier than `lease × (1 + drift)` after it first saw that record. So the
//! command must be dead by the end of the safe time, whatever it does on
//! SIGTERM. lockctl therefore:
//!
//! * sends SIGTERM as soon as the safe time left is at most the grace period
//!   (heartbeats have been failing for `safe time − grace`);
//! * sends SIGKILL when the safe time ends, grace or no grace;
//! * and a watchdog process sends the same SIGKILL at the same instant if
//!   lockctl itself is frozen or killed.
//!
//! A heartbeat confirmed meanwhile moves both instants later. The grace period
//! must leave room for heartbeats to fail: at most the safe time minus two
//! heartbeat periods (one missed heartbeat and its retry), or an ordinary run
//! would SIGTERM its command between two healthy heartbeats.

use std::time::Duration;

use lock_core::Timing;

/// The shortest lease `run` and `acquire` take: below a second, one round trip
/// to DynamoDB and the heartbeat period are of the same size as the lease.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// The longest lease: the lock client's own bound (365 days).
pub use lock_core::MAX_LEASE;

/// The default grace period is a quarter of the lease, at most this.
const DEFAULT_GRACE_CAP: Duration = Duration::from_secs(10);

/// The grace period `run` uses when none is given: a quarter of the lease, at
/// most 10 s (5 s for the default 20 s lease).
pub fn default_grace(lease: Duration) -> Duration {
    (lease / 4).min(DEFAULT_GRACE_CAP)
}

/// The longest grace period a client with `timing` and `heartbeat` period
/// allows: the safe time minus two heartbeat periods.
pub fn max_grace(timing: &Timing, heartbeat: Duration) -> Duration {
    timing
        .safe_time()
        .saturating_sub(heartbeat.saturating_mul(2))
}

/// Check `grace` against the client's lease; the message says what to change.
pub fn check_grace(grace: Duration, timing: &Timing, heartbeat: Duration) -> Result<(), String> {
    let most = max_grace(timing, heartbeat);
    if grace <= most {
        return Ok(());
    }
    Err(format!(
        "--grace {} does not fit a lease of {}: the command must get SIGTERM, its grace \
         period and SIGKILL while the lease is still safe ({} after the last heartbeat), \
         after two heartbeats ({} each) have been given the chance to fail; this lease \
         allows at most --grace {}. Shorten --grace or lengthen --lease",
        crate::text::duration(grace),
        crate::text::duration(timing.lease),
        crate::text::duration(timing.safe_time()),
        crate::text::duration(heartbeat),
        crate::text::duration(most),
    ))
}

/// Check a `--lease` value.
pub fn check_lease(lease: Duration) -> Result<(), String> {
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(format!(
            "--lease {} is out of range: give a lease from {} to 365 days",
            crate::text::duration(lease),
            crate::text::duration(MIN_LEASE),
        ));
    }
    Ok(())
}

/// lockctl sends SIGKILL this long before the safe time ends, and tells the
/// watchdog, whose own SIGKILL is set for the end itself: a lockctl that runs
/// kills first (and the watchdog stays quiet); one that is frozen is covered.
pub const KILL_LEAD: Duration = Duration::from_millis(50);

/// What `run` does next, given the safe time left now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// How long from now until SIGTERM is due (zero: now).
    pub term_in: Duration,
    /// How long from now until lockctl's SIGKILL is due (zero: now).
    pub kill_in: Duration,
    /// How long from now until the watchdog's SIGKILL: the end of the safe
    /// time.
    pub watchdog_in: Duration,
}

impl Plan {
    /// The plan for `safe_left` of safe time left and `grace`.
    pub fn new(safe_left: Duration, grace: Duration) -> Self {
        Self {
            term_in: safe_left.saturating_sub(grace),
            kill_in: safe_left.saturating_sub(KILL_LEAD),
            watchdog_in: safe_left,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn timing(lease: Duration) -> Timing {
        Timing {
            lease,
            max_drift: 0.01,
            safety_margin: (lease / 10).min(Duration::from_secs(1)),
        }
    }

    #[test]
    fn the_default_grace_fits_every_lease_with_default_heartbeats() {
        for secs in [1, 2, 3, 5, 10, 20, 60, 600, 86_400] {
            let lease = Duration::from_secs(secs);
            let grace = default_grace(lease);
            assert!(
                check_grace(grace, &timing(lease), lease / 4).is_ok(),
                "lease {lease:?}, grace {grace:?}"
            );
        }
        assert_eq!(
            default_grace(Duration::from_secs(20)),
            Duration::from_secs(5)
        );
        assert_eq!(default_grace(Duration::from_secs(600)), DEFAULT_GRACE_CAP);
    }

    #[test]
    fn a_grace_that_does_not_fit_is_refused_naming_the_most_allowed() {
        let lease = Duration::from_secs(5);
        // safe time 4.95 − 0.5 = 4.45 s; two heartbeats 2.5 s: at most 1.95 s.
        assert_eq!(
            max_grace(&timing(lease), lease / 4),
            Duration::from_millis(1950)
        );
        let error = check_grace(Duration::from_secs(10), &timing(lease), lease / 4).unwrap_err();
        assert!(error.contains("--grace 1s 950ms"), "{error}");
        assert!(error.contains("--lease"), "{error}");
        // The old default (10 s) did not fit the default 20 s lease either.
        let lease = Duration::from_secs(20);
        assert!(check_grace(Duration::from_secs(10), &timing(lease), lease / 4).is_err());
        assert!(check_grace(Duration::from_millis(8800), &timing(lease), lease / 4).is_ok());
    }

    #[test]
    fn leases_out_of_range_are_refused_with_the_bounds() {
        for bad in [
            Duration::from_nanos(1),
            Duration::from_millis(999),
            MAX_LEASE * 2,
        ] {
            let error = check_lease(bad).unwrap_err();
            assert!(error.contains("from 1s to 365 days"), "{error}");
        }
        assert!(check_lease(MIN_LEASE).is_ok() && check_lease(MAX_LEASE).is_ok());
    }

    #[test]
    fn sigterm_comes_a_grace_period_before_the_safe_time_ends_and_sigkill_at_its_end() {
        let plan = Plan::new(Duration::from_secs(8), Duration::from_secs(5));
        assert_eq!(plan.term_in, Duration::from_secs(3));
        assert_eq!(plan.kill_in, Duration::from_secs(8) - KILL_LEAD);
        assert_eq!(plan.watchdog_in, Duration::from_secs(8));
        let late = Plan::new(Duration::from_secs(2), Duration::from_secs(5));
        assert_eq!(late.term_in, Duration::ZERO);
        assert_eq!(late.kill_in, Duration::from_secs(2) - KILL_LEAD);
        let over = Plan::new(Duration::ZERO, Duration::from_secs(5));
        assert_eq!(
            (over.term_in, over.kill_in),
            (Duration::ZERO, Duration::ZERO)
        );
    }
}
