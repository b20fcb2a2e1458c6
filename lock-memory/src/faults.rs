//! What the fault injector can do to a call, how random faults are drawn from a
//! seeded generator, and the record of what it did.

use std::time::Duration;

use lock_core::{LockKey, StoreErrorKind};
use tokio::time::Instant;

use crate::Op;

/// One fault the [`FaultyStore`](crate::FaultyStore) can inject into a call.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Fault {
    /// Let the call through untouched. Scripted, it lets a later scripted fault hit
    /// the second (third, …) matching call.
    Pass,
    /// Fail with [`StoreErrorKind::Throttled`] before the call reaches the store.
    Throttled,
    /// Fail with [`StoreErrorKind::Unavailable`] before the call reaches the store.
    Unavailable,
    /// Let the call reach the store and take effect, then lose the response:
    /// [`StoreErrorKind::Ambiguous`]. (For reads, the read happens and its result
    /// is lost.)
    AmbiguousApplied,
    /// Time out before the call reaches the store: [`StoreErrorKind::Ambiguous`],
    /// but nothing was applied.
    AmbiguousNotApplied,
    /// Fail with this kind before the call reaches the store (for example
    /// `NotFound` for a missing table, `Unauthorized`).
    Error(StoreErrorKind),
    /// Wait this long (tokio time), then serve the call normally.
    Delay(Duration),
}

impl Fault {
    /// True when the call reaches the wrapped store.
    pub fn reaches_store(&self) -> bool {
        matches!(
            self,
            Fault::Pass | Fault::AmbiguousApplied | Fault::Delay(_)
        )
    }
}

/// Random faults for one class of calls (reads or writes): a probability per
/// fault, and an optional random delay.
///
/// For each call the injector draws one number `r` in `[0, 1)` and picks, in this
/// order, throttle if `r < throttle`, unavailable if `r < throttle + unavailable`,
/// and so on; when the probabilities add up to more than 1 the later ones get only
/// what is left. Probabilities outside `[0, 1]` are clamped, NaN counts as 0.
/// With `delay: Some((min, max))`, every such call is first delayed by a duration
/// drawn uniformly from `min..=max` (nanosecond steps, tokio time).
#[derive(Clone, Copy, PartialEq, Debug, Default)]
pub struct FaultConfig {
    /// Probability of [`Fault::Throttled`].
    pub throttle: f64,
    /// Probability of [`Fault::Unavailable`].
    pub unavailable: f64,
    /// Probability of [`Fault::AmbiguousApplied`].
    pub ambiguous_applied: f64,
    /// Probability of [`Fault::AmbiguousNotApplied`].
    pub ambiguous_not_applied: f64,
    /// Latency added to every call, drawn uniformly from `min..=max`.
    pub delay: Option<(Duration, Duration)>,
}

impl FaultConfig {
    /// No faults, no delay.
    pub const NONE: FaultConfig = FaultConfig {
        throttle: 0.0,
        unavailable: 0.0,
        ambiguous_applied: 0.0,
        ambiguous_not_applied: 0.0,
        delay: None,
    };

    /// Builder-style setter for [`FaultConfig::throttle`].
    pub fn with_throttle(mut self, probability: f64) -> Self {
        self.throttle = probability;
        self
    }

    /// Builder-style setter for [`FaultConfig::unavailable`].
    pub fn with_unavailable(mut self, probability: f64) -> Self {
        self.unavailable = probability;
        self
    }

    /// Builder-style setter for [`FaultConfig::ambiguous_applied`].
    pub fn with_ambiguous_applied(mut self, probability: f64) -> Self {
        self.ambiguous_applied = probability;
        self
    }

    /// Builder-style setter for [`FaultConfig::ambiguous_not_applied`].
    pub fn with_ambiguous_not_applied(mut self, probability: f64) -> Self {
        self.ambiguous_not_applied = probability;
        self
    }

    /// Builder-style setter for [`FaultConfig::delay`] (the bounds may come in
    /// either order).
    pub fn with_delay(mut self, min: Duration, max: Duration) -> Self {
        self.delay = Some((min, max));
        self
    }

    /// Draw this call's fault (`None`: no fault) and delay from `rng`. Draws one
    /// number for the fault when any probability is set, and one for the delay
    /// when a delay is set, so the draws depend only on the configuration and the
    /// call order. Probabilities outside 0–1 (or NaN) are clamped. Public so that
    /// other fault injectors (the simulation's client links) draw the same way.
    pub fn draw(&self, rng: &mut fastrand::Rng) -> (Option<Fault>, Option<Duration>) {
        let probabilities = [
            (self.throttle, Fault::Throttled),
            (self.unavailable, Fault::Unavailable),
            (self.ambiguous_applied, Fault::AmbiguousApplied),
            (self.ambiguous_not_applied, Fault::AmbiguousNotApplied),
        ];
        let mut fault = None;
        if probabilities.iter().any(|(p, _)| clamp(*p) > 0.0) {
            let roll = rng.f64();
            let mut threshold = 0.0;
            for (p, candidate) in probabilities {
                threshold += clamp(p);
                if roll < threshold {
                    fault = Some(candidate);
                    break;
                }
            }
        }
        let delay = self.delay.map(|(a, b)| {
            let (min, max) = if a <= b { (a, b) } else { (b, a) };
            let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.u64(nanos(min)..=nanos(max)))
        });
        (fault, delay)
    }
}

fn clamp(p: f64) -> f64 {
    if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) }
}

/// Why a fault was injected.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[non_exhaustive]
pub enum FaultSource {
    /// The store was switched off with
    /// [`set_unavailable`](crate::FaultyStore::set_unavailable).
    Outage,
    /// A fault queued with [`script`](crate::FaultyStore::script).
    Script,
    /// Drawn from the seeded generator and the [`FaultConfig`].
    Random,
    /// A write beyond the
    /// [write capacity](crate::FaultyStore::with_write_capacity).
    Capacity,
}

/// What the injector did to one call.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FaultEvent {
    /// Position among the calls this injector saw, from 0. It keeps counting
    /// across [`clear_faults`](crate::FaultyStore::clear_faults), across events
    /// dropped because the record is full, and while it keeps none (see
    /// [`with_history_capacity`](crate::FaultyStore::with_history_capacity)).
    pub seq: u64,
    /// Tokio time when the call was made.
    pub at: Instant,
    /// The method called.
    pub op: Op,
    /// The key, for `get`, `put` and `delete`.
    pub key: Option<LockKey>,
    /// The fault injected: [`Fault::Pass`] when the call went through (possibly
    /// after a random delay).
    pub fault: Fault,
    /// Where the fault came from.
    pub source: FaultSource,
    /// The random delay added before the call, if any (a scripted
    /// [`Fault::Delay`] is in `fault` instead).
    pub delay: Option<Duration>,
}

impl FaultEvent {
    /// True when the call was disturbed: anything but a clean, undelayed pass.
    pub fn is_fault(&self) -> bool {
        Self::disturbs(&self.fault, self.delay)
    }

    /// [`is_fault`](Self::is_fault) of an event with this fault and delay, for the
    /// counter of disturbed calls, which counts whether or not events are kept.
    pub(crate) fn disturbs(fault: &Fault, delay: Option<Duration>) -> bool {
        *fault != Fault::Pass || delay.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probabilities_are_taken_in_order_and_clamped() {
        let mut rng = fastrand::Rng::with_seed(1);
        let always = FaultConfig::NONE.with_throttle(2.0).with_unavailable(1.0);
        let never = FaultConfig::NONE
            .with_throttle(f64::NAN)
            .with_unavailable(-1.0);
        for _ in 0..100 {
            assert_eq!(always.draw(&mut rng), (Some(Fault::Throttled), None));
            assert_eq!(never.draw(&mut rng), (None, None));
        }
    }

    #[test]
    fn delays_stay_within_their_bounds_in_either_order() {
        let mut rng = fastrand::Rng::with_seed(2);
        let (lo, hi) = (Duration::from_millis(5), Duration::from_millis(7));
        for config in [
            FaultConfig::NONE.with_delay(lo, hi),
            FaultConfig::NONE.with_delay(hi, lo),
        ] {
            for _ in 0..100 {
                let (fault, delay) = config.draw(&mut rng);
                assert_eq!(fault, None);
                let delay = delay.unwrap_or_default();
                assert!(delay >= lo && delay <= hi, "{delay:?}");
            }
        }
    }
}
