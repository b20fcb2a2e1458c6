//! Retrying store calls: jittered exponential [`Backoff`], and [`Retry`], the
//! one loop state (attempts, backoff, deadline) that every operation retrying
//! a store error keeps: an acquire, a held write (heartbeat, data, release), a
//! release by version and the clean-up of an abandoned acquire. Each caller
//! sleeps its own way (an acquire wakes on shutdown, a heartbeat on a release);
//! when to try again, and when to stop, is decided here.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use crate::StoreError;
use crate::clock::{Clock, Instant, later};

/// Jitter and exponential backoff, drawn from a generator of the client's own
/// (seeded from the thread's generator, so a seeded simulation replays; locked
/// only for one draw, never with anything else).
#[derive(Debug)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    rng: Mutex<fastrand::Rng>,
}

impl Backoff {
    /// Backoff from `base`, doubling to at most `max`.
    pub(crate) fn new(base: Duration, max: Duration, rng: fastrand::Rng) -> Self {
        Self {
            base,
            max,
            rng: Mutex::new(rng),
        }
    }

    /// A random fraction in `[0, 1)`.
    pub(crate) fn random(&self) -> f64 {
        self.rng
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .f64()
    }

    /// Between half and all of `period`.
    pub(crate) fn jitter(&self, period: Duration) -> Duration {
        let half = period / 2;
        half + half.mul_f64(self.random())
    }

    /// The pause before retry number `attempt` (from 0): equal jitter over
    /// `base × 2^attempt`, capped at the maximum.
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let capped = self
            .base
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max);
        self.jitter(capped)
    }

    /// How long a release, or a read for one, may keep retrying: four pauses
    /// at the ceiling.
    pub(crate) fn window(&self) -> Duration {
        self.max.saturating_mul(4)
    }
}

/// One operation's retries: how many so far, the backoff between them, the
/// instant past which it gives up, and the last error (what a caller that gave
/// up reports).
#[derive(Debug)]
pub(crate) struct Retry<'a> {
    backoff: &'a Backoff,
    attempt: u32,
    give_up_at: Instant,
    /// At most this many calls in all (`None`: until the deadline).
    max_calls: Option<u32>,
    last_error: Option<StoreError>,
}

impl<'a> Retry<'a> {
    /// Retries with `backoff` until `give_up_at`.
    pub(crate) fn until(backoff: &'a Backoff, give_up_at: Instant) -> Self {
        Self {
            backoff,
            attempt: 0,
            give_up_at,
            max_calls: None,
            last_error: None,
        }
    }

    /// At most `calls` calls in all (the first and its retries), however
    /// long the deadline.
    pub(crate) fn at_most(mut self, calls: u32) -> Self {
        self.max_calls = Some(calls);
        self
    }

    /// Move the deadline (an acquire resolving an ambiguous write keeps going
    /// for as long as that write could hold the lock).
    pub(crate) fn set_give_up_at(&mut self, at: Instant) {
        self.give_up_at = at;
    }

    /// The deadline has passed at `now`.
    pub(crate) fn gave_up(&self, now: Instant) -> bool {
        now >= self.give_up_at
    }

    /// A call succeeded: the next error backs off from the start again.
    pub(crate) fn succeeded(&mut self) {
        self.attempt = 0;
    }

    /// `error` ended a call at `now`: when to try again (never past the
    /// deadline), or the error back when another attempt cannot help (it is
    /// not retryable), the deadline has passed or the calls ran out.
    pub(crate) fn after(&mut self, error: StoreError, now: Instant) -> Result<Instant, StoreError> {
        let spent = self
            .max_calls
            .is_some_and(|calls| self.attempt.saturating_add(1) >= calls);
        if !error.is_retryable() || self.gave_up(now) || spent {
            return Err(error);
        }
        Ok(self.pause(error, now))
    }

    /// `error` ended a call at `now`, and is retried whatever its kind (a
    /// heartbeat keeps trying until its lease ends): when to try again.
    pub(crate) fn pause(&mut self, error: StoreError, now: Instant) -> Instant {
        tracing::debug!(attempt = self.attempt, %error, "store error, retrying");
        let wake = later(now, self.backoff.delay(self.attempt)).min(self.give_up_at);
        self.attempt = self.attempt.saturating_add(1);
        self.last_error = Some(error);
        wake
    }

    /// The last error retried, for a caller that gave up at the deadline.
    pub(crate) fn into_last_error(self) -> Option<StoreError> {
        self.last_error
    }
}

/// Run a store call, abandoning it at `deadline`: a store that hangs must not
/// hold a heartbeat or a release past the point where its answer could
/// matter. An abandoned write may still apply, so it counts as ambiguous.
pub(crate) async fn before<T>(
    clock: &dyn Clock,
    deadline: Instant,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let mut call = std::pin::pin!(call);
    // A store that answers at once (in memory, or a cached reply) needs no
    // timer: only arm one when the call has to wait.
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
    if let std::task::Poll::Ready(result) = first {
        return result;
    }
    tokio::select! {
        biased;
        result = call => result,
        () = clock.sleep_until(deadline) => Err(StoreError::ambiguous(
            "the store did not answer before the lease deadline; the write may still apply",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff() -> Backoff {
        Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(1),
            fastrand::Rng::with_seed(3),
        )
    }

    #[test]
    fn delays_double_from_the_base_to_the_ceiling_with_equal_jitter() {
        let backoff = backoff();
        for (attempt, full) in [
            (0, 100),
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1000),
            (40, 1000),
        ] {
            let full = Duration::from_millis(full);
            for _ in 0..50 {
                let delay = backoff.delay(attempt);
                assert!(
                    delay >= full / 2 && delay <= full,
                    "attempt {attempt}: {delay:?} outside [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
        assert_eq!(backoff.window(), Duration::from_secs(4));
    }

    #[test]
    fn jitter_spreads_over_the_upper_half_of_the_period() {
        let backoff = backoff();
        let period = Duration::from_secs(1);
        let draws: Vec<Duration> = (0..200).map(|_| backoff.jitter(period)).collect();
        assert!(draws.iter().all(|d| *d >= period / 2 && *d <= period));
        assert!(draws.iter().any(|d| *d < period * 3 / 5));
        assert!(draws.iter().any(|d| *d > period * 9 / 10));
    }

    #[test]
    fn a_retry_waits_the_backoff_but_never_past_its_deadline() {
        let backoff = backoff();
        let now = Instant::now();
        let mut retry = Retry::until(&backoff, now + Duration::from_millis(300));
        let first = retry
            .after(StoreError::unavailable("x"), now)
            .unwrap_or(now);
        assert!(
            first >= now + Duration::from_millis(50) && first <= now + Duration::from_millis(100)
        );
        // The third pause (up to 400 ms) is cut at the deadline.
        let _ = retry.after(StoreError::unavailable("x"), now);
        let _ = retry.after(StoreError::unavailable("x"), now);
        let mut cut = Retry::until(&backoff, now + Duration::from_millis(60));
        for _ in 0..3 {
            let wake = cut.pause(StoreError::unavailable("x"), now);
            assert!(wake <= now + Duration::from_millis(60));
        }
        assert!(cut.into_last_error().is_some());
    }

    #[test]
    fn a_retry_stops_at_its_deadline_on_a_final_error_and_after_its_retries() {
        let backoff = backoff();
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        let mut retry = Retry::until(&backoff, deadline);
        assert!(retry.after(StoreError::invalid("x"), now).is_err());
        assert!(retry.after(StoreError::throttled("x"), now).is_ok());
        assert!(retry.after(StoreError::ambiguous("x"), now).is_ok());
        assert!(!retry.gave_up(deadline - Duration::from_nanos(1)));
        assert!(retry.gave_up(deadline));
        assert!(retry.after(StoreError::unavailable("x"), deadline).is_err());

        let mut bounded = Retry::until(&backoff, deadline).at_most(3);
        assert!(bounded.after(StoreError::unavailable("x"), now).is_ok());
        assert!(bounded.after(StoreError::unavailable("x"), now).is_ok());
        assert!(bounded.after(StoreError::unavailable("x"), now).is_err());
    }

    #[test]
    fn a_success_starts_the_backoff_again() {
        let backoff = Backoff::new(
            Duration::from_millis(100),
            Duration::from_secs(100),
            fastrand::Rng::with_seed(5),
        );
        let now = Instant::now();
        let mut retry = Retry::until(&backoff, now + Duration::from_secs(1000));
        for _ in 0..5 {
            let _ = retry.pause(StoreError::unavailable("x"), now);
        }
        // Sixth pause: at least 1.6 s (half of 3.2 s).
        let sixth = retry.pause(StoreError::unavailable("x"), now);
        assert!(sixth >= now + Duration::from_millis(1600));
        retry.succeeded();
        let again = retry.pause(StoreError::unavailable("x"), now);
        assert!(again <= now + Duration::from_millis(100));
    }
}
