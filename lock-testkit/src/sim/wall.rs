//! Wall clocks in the simulation ([`StoreTime::WallClocks`]): each client's
//! wall clock ([`SimClock`]), the stamp its writes carry ([`Stamper`], in its
//! own link, as the DynamoDB store stamps a request when it builds it) and the
//! shared layer that returns each record's stamp with it ([`WallStamps`]).
//!
//! [`StoreTime::WallClocks`]: super::StoreTime::WallClocks

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use lock_core::clock::Sleep;
use lock_core::layer::{StoreCall, StoreLayer, StoreReply};
use lock_core::{
    Clock, ConditionalStore, DriftingClock, LockRecord, Outcome, StoreError, WriteTime,
};
use tokio::time::Instant;

/// True wall-clock time at the run's start.
const EPOCH: Duration = Duration::from_secs(1_800_000_000);

/// One host's wall clock: true time since the run's start, `offset_ms` off.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WallClock {
    pub(crate) start: Instant,
    pub(crate) offset_ms: i64,
}

impl WallClock {
    pub(crate) fn now(&self) -> SystemTime {
        let true_now = SystemTime::UNIX_EPOCH + EPOCH + self.start.elapsed();
        let by = Duration::from_millis(self.offset_ms.unsigned_abs());
        if self.offset_ms >= 0 {
            true_now + by
        } else {
            true_now - by
        }
    }
}

/// A client's clocks: its monotonic clock drifts at its rate; its wall clock
/// (disciplined, as NTP keeps one) runs at true rate, `offset_ms` off.
#[derive(Debug)]
pub(crate) struct SimClock {
    pub(crate) monotonic: DriftingClock,
    pub(crate) wall: WallClock,
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        self.monotonic.now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        self.monotonic.sleep_until(deadline)
    }

    fn wall_now(&self) -> SystemTime {
        self.wall.now()
    }
}

/// The stamp of every version written, by RVN, as the store keeps it beside
/// the version.
pub(crate) type Stamps = Arc<Mutex<HashMap<String, SystemTime>>>;

/// Stamps a client's writes with its wall clock when it sends them.
#[derive(Clone, Debug)]
pub(crate) struct Stamper {
    pub(crate) stamps: Stamps,
    pub(crate) wall: WallClock,
}

impl Stamper {
    /// `call`, if it is a write of a version, is sent now.
    pub(crate) fn stamp(&self, call: &StoreCall<'_>) {
        let news: Vec<&lock_core::NewRecord> = match call {
            StoreCall::Put { new, .. } => vec![new],
            StoreCall::PutMany { writes } => writes.iter().map(|write| &write.new).collect(),
            _ => Vec::new(),
        };
        let mut stamps = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        for new in news {
            stamps.insert(new.rvn.as_str().to_owned(), self.wall.now());
        }
    }
}

/// Returns each record with the stamp of its version.
#[derive(Debug)]
pub(crate) struct WallStamps {
    pub(crate) stamps: Stamps,
}

impl WallStamps {
    fn date(&self, record: &mut LockRecord) {
        let stamps = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        record.written = stamps.get(record.rvn.as_str()).copied().map(WriteTime::At);
    }
}

#[async_trait]
impl StoreLayer for WallStamps {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let mut reply = call.send(next).await?;
        match &mut reply {
            StoreReply::Record(Some(record))
            | StoreReply::Outcome(Outcome::Applied(record))
            | StoreReply::Outcome(Outcome::Rejected {
                current: Some(record),
            }) => self.date(record),
            StoreReply::Page(page) => page.records.iter_mut().for_each(|r| self.date(r)),
            StoreReply::Many(lock_core::ManyOutcome::Applied(records)) => {
                records.iter_mut().for_each(|r| self.date(r));
            }
            StoreReply::Many(lock_core::ManyOutcome::Rejected {
                current: Some(record),
                ..
            }) => self.date(record),
            _ => {}
        }
        Ok(reply)
    }

    fn capabilities(&self, inner: lock_core::Capabilities) -> lock_core::Capabilities {
        inner.with_clock(lock_core::StoreClock::Wall {
            granularity: Duration::ZERO,
        })
    }
}
