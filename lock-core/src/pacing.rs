//! How fast the heartbeat task sends: at most the client's own rate limit, and,
//! once the store throttles, a rate learnt from what the store took.
//!
//! A throttled write costs the store nothing (DynamoDB does not charge for it),
//! but every one is a request the client made for nothing, and a client that
//! keeps sending at a rate the store refuses starves the locks that need a
//! heartbeat most. So on a throttle the task slows to a little more than the
//! store confirmed over the last second (probing a tenth above it keeps the
//! capacity used: a slot always finds a heartbeat ready), and speeds up again
//! by a quarter a second while the store keeps up. Which lock goes in each slot
//! is the heartbeat task's decision (earliest deadline first); this only says when.
//!
//! Each client learns its own rate, proportional to its own demand, so clients
//! sharing a table keep shares in proportion to the locks they hold. When the
//! store has confirmed nothing lately (a client with a few locks, or a store
//! that throttles everything), the pace backs off as one write's retries would:
//! one slot per retry base (50 ms by default) after the first throttle, half as
//! often after each further one, down to one per retry ceiling (2 s).

use std::time::Duration;

use crate::clock::Instant;

/// Send this much more than the store confirmed in the last second.
const OVERSHOOT: f64 = 1.1;
/// While the store keeps up, the learnt rate grows by this factor a second.
const GROWTH_PER_SECOND: f64 = 1.25;
/// The learnt rate is forgotten after this long without a throttle (it has
/// grown 1.25^30 ≈ 800-fold by then).
const RECOVERY: Duration = Duration::from_secs(30);
/// How late a wake-up may be and still take the slots it missed.
const CATCH_UP: Duration = Duration::from_millis(10);
/// The window the confirmed rate is measured over: one second, so the
/// confirmations in one window are a rate a second.
const WINDOW: Duration = Duration::from_secs(1);

/// The heartbeat task's pacing; see the module docs.
#[derive(Debug)]
pub(crate) struct Pacer {
    /// The client's own limit, writes a second.
    limit: Option<f64>,
    /// Learnt from throttling, until `RECOVERY` passes without one.
    learnt: Option<Learnt>,
    /// The slowest and fastest the learnt rate falls to when the store has
    /// confirmed nothing lately: one write per retry ceiling, per retry base.
    floor: (f64, f64),
    /// Throttles since the last confirmed heartbeat: the floor halves with each.
    throttles: u32,
    /// The earliest instant the next heartbeat may go.
    next_slot: Instant,
    confirmed: Window,
}

#[derive(Debug, Clone, Copy)]
struct Learnt {
    /// Writes a second when last throttled.
    rate: f64,
    /// When last throttled.
    at: Instant,
}

/// Heartbeats confirmed in the current window and the one before, for a
/// sliding one-second rate.
#[derive(Debug)]
struct Window {
    start: Instant,
    current: u32,
    previous: u32,
}

impl Window {
    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.start);
        if elapsed < WINDOW {
            return;
        }
        self.previous = if elapsed < WINDOW * 2 {
            self.current
        } else {
            0
        };
        self.current = 0;
        self.start = now;
    }

    /// Confirmations a second over the last second (the previous window
    /// weighted by how much of it the last second still covers).
    fn rate(&mut self, now: Instant) -> f64 {
        self.roll(now);
        // The fraction of the current window gone (a window is one second).
        let into = now.saturating_duration_since(self.start).as_secs_f64();
        f64::from(self.previous) * (1.0 - into) + f64::from(self.current)
    }
}

/// The time between two slots at `rate` a second, in whole nanoseconds (so
/// 10 a second is exactly 100 ms).
fn spacing(rate: f64) -> Duration {
    let nanos = (1e9 / rate).round();
    if nanos.is_finite() && nanos < u64::MAX as f64 {
        Duration::from_nanos(nanos as u64)
    } else {
        Duration::MAX
    }
}

impl Pacer {
    /// Pacing from `now` under the client's own limit (heartbeats a second),
    /// backing off between the client's retry base and ceiling.
    pub(crate) fn new(
        limit: Option<u32>,
        retry_base: Duration,
        retry_max: Duration,
        now: Instant,
    ) -> Self {
        let per = |every: Duration| 1.0 / every.as_secs_f64().max(1e-3);
        Self {
            limit: limit.map(|per_second| f64::from(per_second.max(1))),
            learnt: None,
            floor: (per(retry_max), per(retry_base)),
            throttles: 0,
            next_slot: now,
            confirmed: Window {
                start: now,
                current: 0,
                previous: 0,
            },
        }
    }

    /// The rate heartbeats may go at `now` (`None`: no limit).
    pub(crate) fn rate(&mut self, now: Instant) -> Option<f64> {
        if let Some(learnt) = self.learnt
            && now.saturating_duration_since(learnt.at) >= RECOVERY
        {
            self.learnt = None;
        }
        let learnt = self.learnt.map(|learnt| {
            let since = now.saturating_duration_since(learnt.at).as_secs_f64();
            learnt.rate * GROWTH_PER_SECOND.powf(since)
        });
        match (self.limit, learnt) {
            (Some(limit), Some(learnt)) => Some(limit.min(learnt)),
            (limit, learnt) => limit.or(learnt),
        }
    }

    /// Take a slot at `now` for one heartbeat that has waited for one since
    /// `waiting_since` (when it became due): `Ok` to send it now, or the
    /// instant the next slot opens.
    pub(crate) fn take(&mut self, now: Instant, waiting_since: Instant) -> Result<(), Instant> {
        let Some(rate) = self.rate(now) else {
            return Ok(());
        };
        if self.next_slot > now {
            return Err(self.next_slot);
        }
        // A wake-up a little late (timers fire a millisecond apart at best, and
        // a pace of more than a thousand a second needs several heartbeats per
        // wake-up) takes the slots it missed; after a longer quiet spell the
        // schedule starts again from now, with no burst saved up.
        // Only a heartbeat that was already waiting when the slot opened missed
        // it; one that became due later takes the slot from now, so the next
        // gap is never shorter than the spacing.
        let from = if waiting_since <= self.next_slot
            && crate::clock::later(self.next_slot, CATCH_UP) >= now
        {
            self.next_slot
        } else {
            now
        };
        self.next_slot = crate::clock::later(from, spacing(rate));
        Ok(())
    }

    /// A heartbeat was confirmed at `now`.
    pub(crate) fn confirmed(&mut self, now: Instant) {
        self.confirmed.roll(now);
        self.confirmed.current = self.confirmed.current.saturating_add(1);
        self.throttles = 0;
    }

    /// The store throttled a heartbeat at `now`: slow to a little above what it
    /// confirmed over the last second.
    pub(crate) fn throttled(&mut self, now: Instant) {
        let took = self.confirmed.rate(now);
        let (slowest, fastest) = self.floor;
        let floor = (fastest / 2f64.powi(self.throttles.min(30) as i32)).max(slowest);
        self.throttles = self.throttles.saturating_add(1);
        let rate = (took * OVERSHOOT).max(floor);
        self.learnt = Some(Learnt { rate, at: now });
        // The next heartbeat (this one again, most likely: it is nearest its
        // deadline) waits one slot of the new rate.
        self.next_slot = crate::clock::later(now, spacing(rate));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Pacing with the client's default retry base (50 ms) and ceiling (2 s).
    fn default_pacer(limit: Option<u32>, now: Instant) -> Pacer {
        Pacer::new(limit, ms(50), Duration::from_secs(2), now)
    }

    /// How many slots are taken in `over`, trying every millisecond, for a
    /// backlog of heartbeats waiting since `from`.
    fn slots(pacer: &mut Pacer, from: Instant, over: Duration) -> usize {
        let mut taken = 0;
        let mut at = from;
        while at < from + over {
            while pacer.take(at, from).is_ok() {
                taken += 1;
            }
            at += ms(1);
        }
        taken
    }

    #[test]
    fn the_window_rolls_at_each_second_and_forgets_after_two() {
        let t0 = Instant::now();
        let mut window = Window {
            start: t0,
            current: 3,
            previous: 7,
        };
        window.roll(t0 + Duration::from_secs(1) - Duration::from_nanos(1));
        assert_eq!((window.current, window.previous, window.start), (3, 7, t0));
        // At one second exactly: the current window becomes the previous one.
        let t1 = t0 + Duration::from_secs(1);
        window.roll(t1);
        assert_eq!((window.current, window.previous, window.start), (0, 3, t1));
        window.current = 4;
        // Just under two windows later the current one is still the previous.
        let t2 = t1 + Duration::from_secs(2) - Duration::from_nanos(1);
        window.roll(t2);
        assert_eq!((window.current, window.previous), (0, 4));
        // Two whole windows later: nothing was confirmed in the last second.
        window.current = 5;
        window.roll(t2 + Duration::from_secs(2));
        assert_eq!((window.current, window.previous), (0, 0));
    }

    #[test]
    fn the_rate_weighs_the_previous_window_by_what_the_last_second_still_covers() {
        let t0 = Instant::now();
        let mut window = Window {
            start: t0,
            current: 4,
            previous: 10,
        };
        // A quarter into the window: 3/4 of the previous one, all of this one.
        assert!((window.rate(t0 + ms(250)) - 11.5).abs() < 1e-9);
        assert!((window.rate(t0) - 14.0).abs() < 1e-9);
    }

    #[test]
    fn the_spacing_is_whole_nanoseconds_and_never_overflows() {
        assert_eq!(spacing(10.0), ms(100));
        assert_eq!(spacing(3.0), Duration::from_nanos(333_333_333));
        assert_eq!(spacing(0.0), Duration::MAX);
        // Far too slow for a u64 of nanoseconds: "never", not a wrapped value.
        assert_eq!(spacing(1e-12), Duration::MAX);
        let edge = 1e9 / (u64::MAX as f64);
        assert_eq!(
            (1e9 / edge).round(),
            u64::MAX as f64,
            "the edge case itself"
        );
        assert_eq!(spacing(edge), Duration::MAX);
        assert!(spacing(edge * 1.001) < Duration::MAX);
    }

    #[test]
    fn without_a_limit_or_a_throttle_every_heartbeat_goes_at_once() {
        let now = Instant::now();
        let mut pacer = default_pacer(None, now);
        assert!((0..10_000).all(|_| pacer.take(now, now).is_ok()));
        assert_eq!(pacer.rate(now), None);
    }

    /// A heartbeat that became due after its slot opened is not a missed
    /// slot: it goes now, and the next one a whole spacing later (a late
    /// wake-up's catch-up is for heartbeats that were already waiting).
    #[test]
    fn a_heartbeat_due_after_its_slot_opened_does_not_shorten_the_next_gap() {
        let t0 = Instant::now();
        let mut pacer = default_pacer(Some(10), t0);
        assert_eq!(pacer.take(t0, t0), Ok(()));
        // The next becomes due 9 ms after its slot (t0 + 100 ms) opened.
        let due = t0 + ms(109);
        assert_eq!(pacer.take(due, due), Ok(()));
        assert_eq!(pacer.take(t0 + ms(200), t0 + ms(200)), Err(due + ms(100)));
        // One that was waiting when its slot opened, woken 9 ms late, takes
        // the slot it missed: the pace holds on average.
        let mut pacer = default_pacer(Some(10), t0);
        assert_eq!(pacer.take(t0, t0), Ok(()));
        assert_eq!(pacer.take(t0 + ms(109), t0 + ms(50)), Ok(()));
        assert_eq!(pacer.take(t0 + ms(150), t0 + ms(150)), Err(t0 + ms(200)));
    }

    #[test]
    fn the_clients_limit_spaces_heartbeats_evenly() {
        let now = Instant::now();
        let mut pacer = default_pacer(Some(10), now);
        assert_eq!(pacer.take(now, now), Ok(()));
        assert_eq!(pacer.take(now, now), Err(now + ms(100)));
        assert_eq!(slots(&mut pacer, now + ms(100), Duration::from_secs(1)), 10);
    }

    #[test]
    fn a_pace_above_a_thousand_a_second_is_kept_with_millisecond_timers() {
        let now = Instant::now();
        let mut pacer = default_pacer(Some(5000), now);
        // Woken once a millisecond (a timer's best), it sends five each time.
        let taken = slots(&mut pacer, now, Duration::from_secs(1));
        assert!((4995..=5001).contains(&taken), "{taken}");
        // A wake-up 5 ms late takes the 25 slots it missed.
        let mut pacer = default_pacer(Some(5000), now);
        assert!(pacer.take(now, now).is_ok());
        let late = now + ms(5);
        let mut caught_up = 0;
        while pacer.take(late, now).is_ok() {
            caught_up += 1;
        }
        assert_eq!(caught_up, 25);
        // After a quiet spell nothing is saved up: one slot, then the pace.
        let quiet = now + Duration::from_secs(5);
        assert!(pacer.take(quiet, quiet).is_ok());
        assert_eq!(
            pacer.take(quiet, quiet),
            Err(quiet + Duration::from_micros(200))
        );
    }

    #[test]
    fn a_throttle_slows_to_a_tenth_above_what_the_store_confirmed() {
        let start = Instant::now();
        let mut pacer = default_pacer(None, start);
        // The store confirmed 200 heartbeats a second for a while.
        for ms_in in 0..2000 {
            if ms_in % 5 == 0 {
                pacer.confirmed(start + ms(ms_in));
            }
        }
        let now = start + ms(2000);
        pacer.throttled(now);
        let rate = pacer.rate(now).unwrap();
        assert!((rate - 220.0).abs() < 3.0, "{rate}");
        // Paced at that rate: about 220 slots in the next second (growing a
        // quarter over it), not thousands.
        let taken = slots(&mut pacer, now, Duration::from_secs(1));
        assert!((220..=280).contains(&taken), "{taken}");
    }

    #[test]
    fn with_nothing_confirmed_the_pace_backs_off_like_one_writes_retries() {
        let now = Instant::now();
        let mut pacer = default_pacer(None, now);
        let mut rates = Vec::new();
        for _ in 0..8 {
            pacer.throttled(now);
            rates.push(pacer.rate(now).unwrap());
        }
        assert_eq!(rates, [20.0, 10.0, 5.0, 2.5, 1.25, 0.625, 0.5, 0.5]);
        // A confirmed heartbeat starts the back-off again from the retry base.
        pacer.confirmed(now);
        pacer.throttled(now);
        assert!(pacer.rate(now).unwrap() >= 20.0);
    }

    #[test]
    fn the_learnt_rate_grows_while_the_store_keeps_up_and_is_forgotten() {
        let now = Instant::now();
        let mut pacer = default_pacer(Some(100), now);
        pacer.throttled(now);
        let later = now + Duration::from_secs(5);
        let grown = pacer.rate(later).unwrap();
        assert!((grown - 20.0 * 1.25f64.powi(5)).abs() < 0.01, "{grown}");
        // The client's own limit still caps it.
        assert_eq!(pacer.rate(now + Duration::from_secs(20)), Some(100.0));
        let mut unlimited = default_pacer(None, now);
        unlimited.throttled(now);
        assert_eq!(unlimited.rate(now + RECOVERY), None);
    }
}
