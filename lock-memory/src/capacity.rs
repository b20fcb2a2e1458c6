//! A write-capacity limit for the fault injector: a token bucket, as DynamoDB
//! meters provisioned (and, per partition, on-demand) write capacity.

use tokio::time::Instant;

/// At most `per_second` writes a second on average, with bursts of up to `burst`
/// writes after a quiet spell; a write beyond it is throttled and, as on DynamoDB,
/// consumes nothing (a throttled write costs no capacity).
///
/// Used with [`FaultyStore::with_write_capacity`](crate::FaultyStore::with_write_capacity).
/// Time is tokio time, so a paused-time test sees exactly the capacity it set.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct WriteCapacity {
    per_second: f64,
    burst: f64,
}

impl WriteCapacity {
    /// `per_second` writes a second, bursts of up to `burst` writes. Values that
    /// are not finite or below zero count as zero (every write throttled); a burst
    /// below one still lets single writes through at the rate.
    pub fn new(per_second: f64, burst: f64) -> Self {
        let sane = |value: f64| {
            if value.is_finite() {
                value.max(0.0)
            } else {
                0.0
            }
        };
        Self {
            per_second: sane(per_second),
            burst: sane(burst).max(1.0),
        }
    }

    /// Writes a second on average.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// The largest burst after a quiet spell.
    pub fn burst(&self) -> f64 {
        self.burst
    }
}

/// The bucket: how many writes may go now, refilled with time.
#[derive(Debug)]
pub(crate) struct Bucket {
    capacity: WriteCapacity,
    tokens: f64,
    refilled_at: Instant,
}

impl Bucket {
    /// A full bucket.
    pub(crate) fn new(capacity: WriteCapacity, now: Instant) -> Self {
        Self {
            capacity,
            tokens: capacity.burst,
            refilled_at: now,
        }
    }

    /// Take one write's worth at `now`; false (nothing taken) when the bucket
    /// holds less.
    pub(crate) fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.refilled_at);
        self.refilled_at = self.refilled_at.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.capacity.per_second)
            .min(self.capacity.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_bucket_lets_a_burst_through_then_the_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(WriteCapacity::new(10.0, 3.0), start);
        assert!((0..3).all(|_| bucket.take(start)));
        assert!(!bucket.take(start), "the burst is spent");
        // Refilled at 10 a second: one more write every 100 ms.
        assert!(!bucket.take(start + Duration::from_millis(99)));
        assert!(bucket.take(start + Duration::from_millis(100)));
        assert!(!bucket.take(start + Duration::from_millis(150)));
        // A quiet spell refills the burst, no more.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| bucket.take(later)).count(), 3);
    }

    #[test]
    fn nonsense_capacities_throttle_everything_and_do_not_panic() {
        let start = Instant::now();
        for capacity in [
            WriteCapacity::new(f64::NAN, f64::INFINITY),
            WriteCapacity::new(-5.0, -1.0),
        ] {
            let mut bucket = Bucket::new(capacity, start);
            assert!(bucket.take(start), "a burst of at least one");
            assert!(!bucket.take(start + Duration::from_secs(3600)));
        }
    }
}
