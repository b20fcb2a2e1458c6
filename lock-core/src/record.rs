//! The lock record a store keeps per key, and the pieces it is made of.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::LockKey;

/// A record version number: a fresh random id chosen by the writer for **every**
/// write.
///
/// Because no two writes share an RVN, a client that sees its own RVN in the store
/// knows its write applied, even when the response to that write was lost.
///
/// Cloning is cheap (the string is shared): the client keeps the RVN of each
/// write in several places until the write is resolved.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rvn(Arc<str>);

impl Rvn {
    /// A fresh, random RVN (a UUID v4).
    ///
    /// The randomness comes from the operating system on every call, not from a
    /// generator in the process: a forked process, or a VM restored from a
    /// snapshot, must not repeat the RVNs its parent wrote.
    pub fn fresh() -> Self {
        let mut text = uuid::Uuid::encode_buffer();
        Self(Arc::from(
            &*uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text),
        ))
    }

    /// A fresh RVN marked final, held until `until` (wall clock): the version
    /// of a record its holder wrote for the last time, to keep the lock held
    /// until a [`min_hold`](crate::AcquireOptions::min_hold) ends, with no
    /// heartbeat and no work under the lock after it. Written as
    /// `<uuid>.final.<until in Unix milliseconds>`.
    ///
    /// An acquire counts such a record as busy until `until` on its own wall
    /// clock (a waiter that gives up on live holders,
    /// [`busy_unless_dead`](crate::AcquireOptions::busy_unless_dead), gives up
    /// at once instead of watching it for a dead holder), and may take it
    /// over from then on, or by the usual rule (its lease × (1 + drift)
    /// unchanged), whichever comes first.
    pub fn fresh_final(until: std::time::SystemTime) -> Self {
        let millis = until
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        Self(Arc::from(format!("{}{FINAL_MARK}{millis}", Self::fresh())))
    }

    /// For a version written by [`fresh_final`](Self::fresh_final): until when
    /// (wall clock) its holder keeps the lock. `None` for every other version.
    pub fn final_until(&self) -> Option<std::time::SystemTime> {
        let (_, millis) = self.0.rsplit_once(FINAL_MARK)?;
        let millis: u64 = millis.parse().ok()?;
        std::time::UNIX_EPOCH.checked_add(Duration::from_millis(millis))
    }

    /// Wrap an RVN read from a store (any non-empty string other libraries wrote).
    pub fn from_stored(value: impl Into<String>) -> Self {
        Self(Arc::from(value.into()))
    }

    /// The RVN as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Rvn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Rvn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Rvn({})", self.0)
    }
}

/// What separates a final write's RVN from the time it holds until (a UUID
/// never holds it).
const FINAL_MARK: &str = ".final.";

/// A fencing token: strictly increasing per key across every acquisition, kept
/// across heartbeats and release.
///
/// Pass it to the resource you protect and have the resource reject any write whose
/// fence is lower than the highest it has seen; a holder that was paused past its
/// lease then cannot do harm. Records written by libraries that know no fences read
/// as fence 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Fence(pub u64);

impl Fence {
    /// The fence as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The first fence of a record created where none is, at wall-clock
    /// time `now`: microseconds since the Unix epoch (at least 1).
    ///
    /// A key's record can be deleted (a time to live, a lifecycle rule, a
    /// scheduled `DELETE`, delete-on-release): a store that started the key
    /// again at fence 1 would hand out fences a holder paused before the
    /// deletion still carries, and a resource would admit that holder's
    /// stale write. Starting from the clock instead puts the new fences
    /// above every earlier one, on two conditions: the key was not acquired
    /// more than once a microsecond on average since its record was
    /// created (every acquisition is a round trip to a store: far slower),
    /// and the clock of the process that creates the record again is not
    /// behind the clock of the one that created it before by more than the
    /// time between the two creations. See `docs/fencing.md`.
    pub fn floor_at(now: std::time::SystemTime) -> Fence {
        let micros = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros());
        Fence(u64::try_from(micros).unwrap_or(u64::MAX).max(1))
    }

    /// [`floor_at`](Self::floor_at) the system's wall clock now: what a
    /// store whose records can be deleted stores as the fence of a record it
    /// creates ([`FencesAfterDeletion::ClockFloor`](crate::FencesAfterDeletion::ClockFloor)).
    pub fn clock_floor() -> Fence {
        Self::floor_at(std::time::SystemTime::now())
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What a write does to the stored fence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FenceUpdate {
    /// Store the previous fence + 1 (every acquisition: vacant or
    /// takeover), or, when there is no record, a fence above every fence
    /// the key had before its record was deleted: the store's
    /// [`FencesAfterDeletion`](crate::FencesAfterDeletion) says how.
    Next,
    /// Keep the stored fence: heartbeats, data updates and release.
    Keep,
}

/// What a write does to the data stored with the lock.
///
/// A store applies it in the same conditional write as the rest of the record:
/// `Keep` leaves the stored bytes as they are (none on a record the write
/// creates), `Replace` stores new bytes, `Clear` removes them.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub enum DataUpdate {
    /// Leave the stored data as it is. Heartbeats, releases without data, and
    /// acquires that ask for nothing else: a job that resumes from the previous
    /// holder's checkpoint reads it from the record it acquired.
    #[default]
    Keep,
    /// Store these bytes, replacing what was there.
    Replace(Vec<u8>),
    /// Remove the stored data.
    Clear,
}

impl DataUpdate {
    /// The data a record holds after this update, given what it held before.
    pub fn apply(&self, before: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match self {
            DataUpdate::Keep => before,
            DataUpdate::Replace(bytes) => Some(bytes.clone()),
            DataUpdate::Clear => None,
        }
    }

    /// The bytes this update writes, if it writes any.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            DataUpdate::Replace(bytes) => Some(bytes),
            DataUpdate::Keep | DataUpdate::Clear => None,
        }
    }
}

impl<T: Into<Vec<u8>>> From<T> for DataUpdate {
    fn from(bytes: T) -> Self {
        DataUpdate::Replace(bytes.into())
    }
}

/// One lock record as a store keeps it.
///
/// Two records are equal when they hold the same content: `written` says
/// when a read found it, not what it is (two reads of one version, a
/// moment apart, report different ages), so equality leaves it out.
#[derive(Clone, Debug)]
pub struct LockRecord {
    /// The key this record belongs to.
    pub key: LockKey,
    /// Owner name of the client that wrote it.
    pub owner: String,
    /// Record version number of the write that produced this record.
    pub rvn: Rvn,
    /// The lease the writer promised to heartbeat within.
    pub lease: Duration,
    /// True once the holder released it; a released record is vacant.
    pub released: bool,
    /// Fencing token of the acquisition this record belongs to.
    pub fence: Fence,
    /// Bytes stored with the lock, readable by anyone.
    pub data: Option<Vec<u8>>,
    /// Wall-clock epoch seconds for store-side garbage collection only (for example
    /// DynamoDB TTL). Never used to decide ownership.
    pub expires_at: Option<u64>,
    /// When this version was written, as far as the store can tell (see
    /// [`WriteTime`]); `None` from a store without a clock, or for a record
    /// written by a client that does not stamp its writes. Only ever lets a
    /// waiter take a dead holder's lock sooner than watching it for
    /// `lease × (1 + drift)` would; see [`Capabilities::clock`](crate::Capabilities::clock).
    pub written: Option<WriteTime>,
}

/// When a record's version was written, as its store reports it on a read.
///
/// Both forms are bounds in the safe direction: never later than the holder
/// sent the write that made the version. A waiter credits the record with the
/// age they prove ([`ClockTrust::credit`](crate::timing::ClockTrust::credit)) and so
/// takes over a crashed holder's lock as soon as its lease has passed, instead
/// of watching the record for a whole lease first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum WriteTime {
    /// Measured by the store on its own clock, in the statement that read the
    /// record: at least this long passed between the write (stamped while the
    /// writing statement ran, so after the holder sent it) and the read.
    /// PostgreSQL (`clock_timestamp()`) and the in-memory store report this.
    /// Trusted by default: it assumes only that the store's clock runs within
    /// the clients' drift bound and is not stepped forward.
    Ago(Duration),
    /// A wall-clock time no earlier than the write was sent: the writer's own
    /// clock read as the request was built (DynamoDB), or the service's
    /// `Last-Modified` plus its granularity (object stores). Used only by a
    /// client given a
    /// [`max_clock_difference`](crate::LockClientBuilder::max_clock_difference),
    /// the most any two hosts' wall clocks (and the service's) may differ.
    At(SystemTime),
}

impl PartialEq for LockRecord {
    fn eq(&self, other: &Self) -> bool {
        let Self {
            key,
            owner,
            rvn,
            lease,
            released,
            fence,
            data,
            expires_at,
            written: _,
        } = self;
        *key == other.key
            && *owner == other.owner
            && *rvn == other.rvn
            && *lease == other.lease
            && *released == other.released
            && *fence == other.fence
            && *data == other.data
            && *expires_at == other.expires_at
    }
}

impl Eq for LockRecord {}

impl LockRecord {
    /// True when the record may be acquired with [`Expect::Vacant`](crate::Expect::Vacant).
    pub fn is_vacant(&self) -> bool {
        self.released
    }
}

/// The record a writer asks the store to write. The store fills in the key and
/// computes the fence from [`FenceUpdate`].
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NewRecord {
    /// Owner name of the writer.
    pub owner: String,
    /// A fresh RVN for this write.
    pub rvn: Rvn,
    /// The lease the writer promises to heartbeat within.
    pub lease: Duration,
    /// Whether this write releases the lock.
    pub released: bool,
    /// What the write does to the fence.
    pub fence: FenceUpdate,
    /// What the write does to the data stored with the lock.
    pub data: DataUpdate,
    /// Optional garbage-collection time (wall-clock epoch seconds).
    pub expires_at: Option<u64>,
}

impl NewRecord {
    /// The record this write stores under `key` on top of `base` (the record
    /// it replaces; `None` when the key has none): the fence stepped from
    /// `base`'s (on no record, [`Fence::clock_floor`]) or kept, the data
    /// updated, every other field this write's. For a store that computes
    /// the record itself and writes it conditionally on exactly `base` (a
    /// version, a revision), and whose records can be deleted behind its
    /// back ([`FencesAfterDeletion::ClockFloor`](crate::FencesAfterDeletion::ClockFloor)).
    ///
    /// # Errors
    ///
    /// `Invalid` when the fence would pass `u64::MAX`.
    pub fn stored_on(
        &self,
        key: &LockKey,
        base: Option<&LockRecord>,
    ) -> Result<LockRecord, crate::StoreError> {
        let fence = match (self.fence, base) {
            // A record with fence 0 carries no fence (a write that kept
            // "none", another library's record): as on no record.
            (FenceUpdate::Next, Some(base)) if base.fence == Fence(0) => Fence::clock_floor(),
            (FenceUpdate::Next, Some(base)) => {
                Fence(base.fence.get().checked_add(1).ok_or_else(|| {
                    crate::StoreError::invalid(format!(
                        "lock {key}: the fence cannot go past u64::MAX"
                    ))
                })?)
            }
            (FenceUpdate::Next, None) => Fence::clock_floor(),
            (FenceUpdate::Keep, Some(base)) => base.fence,
            // Keep on no record cannot pass a condition; 0 is never stored.
            (FenceUpdate::Keep, None) => Fence(0),
        };
        Ok(LockRecord {
            key: key.clone(),
            owner: self.owner.clone(),
            rvn: self.rvn.clone(),
            lease: self.lease,
            released: self.released,
            fence,
            data: self.data.apply(base.and_then(|base| base.data.clone())),
            expires_at: self.expires_at,
            written: None,
        })
    }
}

/// The lock an acquisition took over: a holder that stopped heartbeating (it
/// crashed, hung, was partitioned or detached its lock) and whose record kept one
/// version for its lease × (1 + drift). Its work may be half done: this is the
/// cue for crash recovery (see [`LockView::took_over`](crate::LockView::took_over)).
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Takeover {
    /// The owner name in the record that was taken over.
    pub owner: String,
    /// The fence of that holder's acquisition (this one's is higher).
    pub fence: Fence,
    /// The data that holder left with the lock (a checkpoint, for example).
    pub data: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::{DataUpdate, Fence, LockRecord, Rvn};
    use crate::LockKey;

    #[test]
    fn values_print_as_they_are_stored() {
        let rvn = Rvn::from_stored("0f8e6c3a-python");
        assert_eq!(rvn.as_str(), "0f8e6c3a-python");
        assert_eq!(format!("{rvn:?}"), "Rvn(0f8e6c3a-python)");
        assert_eq!(Rvn::fresh().as_str().len(), 36, "a hyphenated UUID");
        assert_eq!(Fence(41).to_string(), "41");
        let key = LockKey::with_sort("jobs", "export");
        assert_eq!(format!("{key:?}"), "LockKey(jobs/export)");
        assert_eq!(DataUpdate::from("x"), DataUpdate::Replace(b"x".to_vec()));
    }

    #[test]
    fn only_a_released_record_is_vacant() {
        let record = |released| LockRecord {
            key: LockKey::new("k"),
            owner: "a".into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(10),
            fence: Fence(1),
            released,
            data: None,
            expires_at: None,
            written: None,
        };
        assert!(record(true).is_vacant());
        assert!(!record(false).is_vacant());
    }

    #[test]
    fn records_are_equal_by_content_whenever_they_were_read() {
        let first = LockRecord {
            key: LockKey::new("k"),
            owner: "a".into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_secs(10),
            fence: Fence(1),
            released: false,
            data: None,
            expires_at: None,
            written: Some(super::WriteTime::Ago(Duration::from_secs(1))),
        };
        let later = LockRecord {
            written: Some(super::WriteTime::Ago(Duration::from_secs(2))),
            ..first.clone()
        };
        assert_eq!(first, later);
        let other = LockRecord {
            fence: Fence(2),
            ..first.clone()
        };
        assert_ne!(first, other);
    }

    #[test]
    fn a_final_rvn_carries_its_wall_clock_end_and_no_other_rvn_does() {
        let until = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let rvn = Rvn::fresh_final(until);
        assert_eq!(rvn.final_until(), Some(until));
        assert_ne!(Rvn::fresh_final(until), rvn, "each one is fresh");
        assert_eq!(Rvn::fresh().final_until(), None);
        // What other libraries write is never read as final.
        for stored in ["0f8e6c3a-python", "x.final.", "x.final.soon", ""] {
            assert_eq!(Rvn::from_stored(stored).final_until(), None, "{stored}");
        }
    }

    #[test]
    fn the_clock_floor_is_microseconds_since_the_epoch_and_never_zero() {
        use std::time::{Duration, UNIX_EPOCH};
        assert_eq!(Fence::floor_at(UNIX_EPOCH), Fence(1));
        assert_eq!(
            Fence::floor_at(UNIX_EPOCH + Duration::from_micros(1_765_000_000_000_123)),
            Fence(1_765_000_000_000_123)
        );
        // Before the epoch (a clock set wrong): still a fence a lock grants.
        assert_eq!(
            Fence::floor_at(UNIX_EPOCH - Duration::from_secs(1)),
            Fence(1)
        );
        // A microsecond later, a higher floor.
        let now = std::time::SystemTime::now();
        assert!(Fence::floor_at(now + Duration::from_micros(1)) > Fence::floor_at(now));
    }
}
