//! The monotonic clock the client reads all of its timing decisions from.

use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

pub use tokio::time::Instant;

/// A boxed future returned by [`Clock::sleep_until`].
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// How far "never" is: a deadline that far out is never reached by a running
/// process, and tokio's timers accept it.
const NEVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `at + by`, saturating: a duration too large for the clock (a wait of
/// `Duration::MAX`, a lease someone wrote as years) means "never", not a panic.
pub(crate) fn later(at: Instant, by: Duration) -> Instant {
    // Falling back to ever nearer "nevers" keeps a deadline far away even on a
    // clock with less room; only a clock at its very end gives `at` itself.
    [
        NEVER,
        Duration::from_secs(365 * 24 * 3600),
        Duration::from_secs(24 * 3600),
    ]
    .into_iter()
    .find_map(|limit| at.checked_add(by.min(limit)))
    .unwrap_or(at)
}

/// A monotonic clock.
///
/// The client reads time only through this trait, so a simulation can give each
/// client its own drift, jumps and pauses while tokio's paused clock drives them
/// all. The default, [`TokioClock`], is `tokio::time::Instant` (CLOCK_MONOTONIC on
/// Linux, which stops while the machine is suspended; see `docs/safety.md`).
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current instant on this clock.
    fn now(&self) -> Instant;

    /// A future that completes once this clock reads `deadline` or later. It may
    /// wake early (callers re-check [`now`](Self::now)) but must not wake late by
    /// more than the runtime's timer granularity.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// Wall-clock time on this clock: the system's, moved by how far this
    /// clock is from real monotonic time (none for [`TokioClock`] on a running
    /// runtime; tokio's paused test clock and a [`DriftingClock`] move it).
    ///
    /// Read for one decision only, never for ownership: whether a record its
    /// holder left held to the end of a
    /// [`min_hold`](crate::AcquireOptions::min_hold) (a final write, which no
    /// work under the lock follows) has reached that end. A min hold is a
    /// promise about schedules, which are wall-clock times themselves.
    fn wall_now(&self) -> std::time::SystemTime {
        let now = self.now().into_std();
        let real = std::time::Instant::now();
        let system = std::time::SystemTime::now();
        match now.checked_duration_since(real) {
            Some(ahead) => system.checked_add(ahead).unwrap_or(system),
            None => system
                .checked_sub(real.saturating_duration_since(now))
                .unwrap_or(system),
        }
    }
}

/// `tokio::time::Instant`: real monotonic time, or tokio's paused test clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// A clock that runs at `rate` × tokio time and can be jumped forward: for
/// simulations and tests of drift and process pauses.
///
/// A rate of `1.01` runs 1 % fast; `0.99` runs 1 % slow. [`jump`](Self::jump) moves
/// the clock forward at once, as a process that was paused sees time when it wakes.
#[derive(Debug)]
pub struct DriftingClock {
    rate: f64,
    state: Mutex<DriftState>,
}

#[derive(Debug)]
struct DriftState {
    /// Tokio instant at which `reading` was taken.
    base_real: Instant,
    /// This clock's reading at `base_real`.
    reading: Instant,
}

impl DriftingClock {
    /// A clock that starts at tokio's now and runs at `rate` (must be positive).
    pub fn new(rate: f64) -> Self {
        let now = Instant::now();
        Self {
            rate: if rate.is_finite() && rate > 0.0 {
                rate
            } else {
                1.0
            },
            state: Mutex::new(DriftState {
                base_real: now,
                reading: now,
            }),
        }
    }

    /// The clock's rate relative to tokio time.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Move the clock forward by `by` at once.
    pub fn jump(&self, by: Duration) {
        let mut state = self.lock();
        let real = Instant::now();
        let reading = Self::read(self.rate, &state, real);
        state.base_real = real;
        state.reading = reading + by;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DriftState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read(rate: f64, state: &DriftState, real: Instant) -> Instant {
        let elapsed = real.saturating_duration_since(state.base_real);
        state.reading + elapsed.mul_f64(rate)
    }
}

impl Clock for DriftingClock {
    fn now(&self) -> Instant {
        Self::read(self.rate, &self.lock(), Instant::now())
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let ahead = deadline.saturating_duration_since(self.now());
        // Convert this clock's duration into tokio time, rounding up so the sleep
        // never ends before the clock reads the deadline.
        let real = ahead.div_f64(self.rate) + Duration::from_nanos(1);
        Box::pin(tokio::time::sleep(real))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_falls_back_to_a_year_then_a_day_near_the_end_of_the_clock() {
        let start = Instant::now();
        // The last instant this clock can show, to the second.
        let (mut low, mut high) = (0u64, u64::MAX);
        while low < high {
            let mid = low + (high - low).div_ceil(2);
            if start.checked_add(Duration::from_secs(mid)).is_some() {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        let year = Duration::from_secs(365 * 24 * 3600);
        let day = Duration::from_secs(24 * 3600);
        // Two years before the end: a year away is the furthest "never".
        let at = start + Duration::from_secs(low) - 2 * year;
        assert_eq!(later(at, Duration::MAX), at + year);
        // Half a year before the end: a day away.
        let at = start + Duration::from_secs(low) - year / 2;
        assert_eq!(later(at, Duration::MAX), at + day);
        // A bounded wait is kept as it is.
        assert_eq!(
            later(at, Duration::from_secs(5)),
            at + Duration::from_secs(5)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_drifting_clock_says_its_rate_and_never_wakes_before_the_deadline() {
        assert_eq!(DriftingClock::new(1.5).rate(), 1.5);
        assert_eq!(
            DriftingClock::new(0.0).rate(),
            1.0,
            "no rate falls back to 1"
        );
        let clock = DriftingClock::new(1.0);
        let deadline = clock.now() + Duration::from_millis(250);
        clock.sleep_until(deadline).await;
        assert!(clock.now() >= deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn drifting_clock_runs_at_its_rate_and_jumps() {
        let fast = DriftingClock::new(1.5);
        let start = fast.now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(fast.now() - start, Duration::from_secs(3));
        fast.jump(Duration::from_secs(10));
        assert_eq!(fast.now() - start, Duration::from_secs(13));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(fast.now() - start, Duration::from_secs(16));
    }

    #[tokio::test(start_paused = true)]
    async fn drifting_clock_sleeps_until_its_own_deadline() {
        for rate in [0.5, 0.99, 1.0, 1.01, 2.0] {
            let clock = DriftingClock::new(rate);
            let deadline = clock.now() + Duration::from_secs(10);
            let real = Instant::now();
            clock.sleep_until(deadline).await;
            assert!(clock.now() >= deadline, "rate {rate}");
            let slept = real.elapsed().as_secs_f64();
            assert!(
                (slept - 10.0 / rate).abs() < 0.01,
                "rate {rate}: slept {slept}"
            );
        }
    }

    #[test]
    fn later_saturates_instead_of_overflowing() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(3)),
            now + Duration::from_secs(3)
        );
        let never = later(now, Duration::MAX);
        assert!(never >= now + Duration::from_secs(50 * 365 * 24 * 3600));
    }

    #[test]
    fn a_bad_rate_falls_back_to_real_time() {
        assert_eq!(DriftingClock::new(0.0).rate(), 1.0);
        assert_eq!(DriftingClock::new(f64::NAN).rate(), 1.0);
    }
}
