//! Acquire: take this client's turn at the key (acquires of one key on one
//! client queue, first come first served), then one conditional write when the
//! lock is vacant or was handed over by the previous local holder; otherwise
//! watch the holder's record and take it over once its RVN has not changed for
//! `lease × (1 + drift)`, counted from this client's first sighting of that RVN
//! (remembered across acquires, see `sightings`).

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;
use tracing::Instrument;

use crate::clock::{Instant, later};
use crate::held::Held;
use crate::metrics::AcquireOutcome;
use crate::protocol::Broken;
use crate::protocol::acquiring::{self, Seen};
use crate::protocol::holding::lease_runs_from;
use crate::replies::acquire_finds;
use crate::retry::Retry;
use crate::shared::Shared;
use crate::timing::HoldLimits;
use crate::turns::{Handoff, NoTurn, Phase, Turn};
use crate::{
    AcquireOptions, ConfigError, Expect, FenceUpdate, KeyedWrite, LockError, LockGuard, LockKey,
    LockRecord, ManyOutcome, NewRecord, Outcome, Rvn, StoreError, StoreErrorKind, Takeover,
};

/// How many times in a row a released record may be retried at once before the
/// waiter paces itself (it is racing other waiters).
const QUICK_RETRIES: u32 = 3;

/// Writes of an acquire whose outcome is not known yet: (RVN, send time). Inline
/// room for one, the write in flight of an acquire that is not retrying.
type Candidates = SmallVec<[(Rvn, Instant); 1]>;

/// One acquire in progress: its turn at the key, the lock handed to it (if the
/// previous local holder handed it over), and its writes whose outcome is
/// unknown. If the acquire ends without the lock (timeout, error, or its future
/// dropped), the writes are released in the background (one may have applied),
/// and so is a handed lock nobody else in the queue will take.
struct Attempt<'a> {
    shared: &'a Arc<Shared>,
    key: &'a LockKey,
    /// The lease this acquire writes (the client's, or its own).
    lease: Duration,
    writes: Candidates,
    turn: Option<Turn>,
    handed: Option<Handoff>,
    /// The last takeover write (its RVN) and whom it replaces: if that write
    /// turns out to have applied, the guard still says whom it took over.
    takeover_write: Option<(Rvn, Takeover)>,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut rvns: Vec<Rvn> = self.writes.drain(..).map(|(rvn, _)| rvn).collect();
        // The clean-up is bounded by the longest lease among what it releases.
        let mut lease = self.lease;
        if let Some(handed) = self.handed.take() {
            match self.turn.as_mut() {
                Some(turn) if turn.has_waiters() => turn.hand_off(handed),
                _ => {
                    lease = lease.max(handed.lease);
                    rvns.push(handed.rvn);
                }
            }
        }
        if !rvns.is_empty() {
            self.shared.release_abandoned(self.key.clone(), rvns, lease);
        }
        // The turn goes to the next waiter as this is dropped.
    }
}

impl Attempt<'_> {
    /// Whom this acquire's write that `record` shows took over, if that
    /// write was a takeover.
    fn took_over_by(&self, record: &LockRecord) -> Option<Takeover> {
        self.takeover_write
            .as_ref()
            .filter(|(rvn, _)| *rvn == record.rvn)
            .map(|(_, previous)| previous.clone())
    }

    /// `current` carries the RVN of this acquire's latest write.
    fn latest_is(&self, current: &LockRecord) -> bool {
        self.writes
            .last()
            .is_some_and(|(rvn, _)| *rvn == current.rvn)
    }
}

#[derive(Clone)]
enum Step {
    Put(Expect),
    Read,
}

enum Reply {
    /// The store's current record (after a read).
    Seen(Option<LockRecord>),
    /// A write was rejected; the current record, if the store returned it.
    Rejected(Option<LockRecord>),
    /// The store failed; the write may have applied if ambiguous.
    Failed(StoreError),
}

/// How one acquire write ended.
enum Written {
    /// It applied (the lock is held), or the acquire is over.
    Done(Result<LockGuard, LockError>),
    /// It did not apply, or may have: what the store said.
    Learned(Reply),
}

/// How an attempt to take several free keys in one request ended
/// ([`Shared::acquire_at_once`]).
pub(crate) enum AtOnce {
    /// Every key is held, in the order asked.
    Held(Vec<LockGuard>),
    /// Not taken this way (a key is held or handed over, or the store failed):
    /// nothing is held, or what may be is being released; take them one by one.
    NotNow,
    /// The acquire is over (shutdown, an invalid option).
    Failed(LockError),
}

impl Shared {
    /// Take every one of `keys` (sorted, distinct, at most the store's
    /// `atomic_writes`) in one conditional request, each expected vacant: the
    /// common case of a set nobody holds, in one write instead of one per key.
    /// Anything else (a key held here or elsewhere, a store error) is
    /// [`AtOnce::NotNow`]; an ambiguous reply is resolved by reading each key
    /// (all of them carry this request's versions, or none does), and writes
    /// that may have applied unknown to this client are released by version,
    /// as an acquire's.
    pub(crate) async fn acquire_at_once(
        self: &Arc<Self>,
        keys: &[LockKey],
        options: &AcquireOptions,
    ) -> AtOnce {
        let started = self.clock.now();
        for key in keys {
            if let Err(error) = self.check_acquire(key, options) {
                return AtOnce::Failed(error);
            }
        }
        let lease = options.lease.unwrap_or(self.config.timing.lease);
        // Counted as an acquire running, so a shutdown waits for its clean-up.
        let _running = self.acquiring();
        let mut attempts: Vec<Attempt<'_>> = Vec::with_capacity(keys.len());
        for key in keys {
            // A key another task of this client holds or is handed is for the
            // one-by-one path, which queues for it.
            let mut turn = match self.take_turn(key, true, started, started).await {
                Ok(turn) => turn,
                Err(LockError::Shutdown) => return AtOnce::Failed(LockError::Shutdown),
                Err(_) => return AtOnce::NotNow,
            };
            let handed = turn.take_handoff();
            let busy = turn.waited || handed.is_some();
            attempts.push(Attempt {
                shared: self,
                key,
                lease,
                writes: Candidates::new(),
                turn: Some(turn),
                handed,
                takeover_write: None,
            });
            if busy {
                return AtOnce::NotNow;
            }
        }
        let sent = self.clock.now();
        let writes: Vec<KeyedWrite> = attempts
            .iter_mut()
            .map(|attempt| {
                let rvn = Rvn::fresh();
                // Unresolved while in flight, as an acquire's write.
                attempt.writes.push((rvn.clone(), sent));
                KeyedWrite {
                    key: attempt.key.clone(),
                    expect: Expect::Vacant,
                    new: NewRecord {
                        owner: self.config.owner.clone(),
                        rvn,
                        lease,
                        released: false,
                        fence: FenceUpdate::Next,
                        data: options.data.clone(),
                        expires_at: None,
                    },
                }
            })
            .collect();
        let records = match self.store.put_many(writes).await {
            Ok(ManyOutcome::Applied(records))
                if records.len() == attempts.len()
                    && records
                        .iter()
                        .zip(&attempts)
                        .all(|(record, attempt)| attempt.latest_is(record)) =>
            {
                records
            }
            Ok(ManyOutcome::Applied(_)) => {
                // Not the records written: the store breaks its contract. The
                // writes stay candidates, released by version.
                return AtOnce::Failed(LockError::from_store(
                    &keys[0],
                    StoreError::new(
                        StoreErrorKind::Other,
                        "the store applied several writes but returned other records",
                    ),
                ));
            }
            Ok(ManyOutcome::Rejected { .. }) => {
                attempts
                    .iter_mut()
                    .for_each(|attempt| attempt.writes.clear());
                return AtOnce::NotNow;
            }
            Err(error) if error.is_ambiguous() => match self.read_many(&attempts).await {
                // Applied, and still young enough to trust (the reads may
                // have taken a while): held. Too old, the writes stay
                // candidates, released by version, and the keys are taken
                // one by one.
                Some(records)
                    if self
                        .config
                        .timing_for(lease)
                        .lease_state(sent, self.clock.now())
                        .is_safe() =>
                {
                    records
                }
                _ => return AtOnce::NotNow,
            },
            Err(_) => {
                attempts
                    .iter_mut()
                    .for_each(|attempt| attempt.writes.clear());
                return AtOnce::NotNow;
            }
        };
        let elapsed = self.clock.now().saturating_duration_since(started);
        let mut guards = Vec::with_capacity(records.len());
        for (attempt, record) in attempts.iter_mut().zip(records) {
            let turn = attempt.turn.take();
            let held = self.hold_unless_shut_down(record, sent, options, turn, None);
            self.metrics
                .acquire(attempt.key, AcquireOutcome::of(&held), elapsed, false);
            match held {
                Ok(guard) => {
                    attempt.writes.clear();
                    guards.push(guard);
                }
                // Shutdown: the guards taken are dropped (released), the other
                // writes released by version as the attempts drop.
                Err(error) => return AtOnce::Failed(error),
            }
        }
        AtOnce::Held(guards)
    }

    /// After an ambiguous `put_many`: the records, if every key carries the
    /// version this request wrote (it applied); `None` otherwise. The writes
    /// stay candidates either way until the caller holds the keys, so an
    /// attempt dropped without them releases each by version (nothing, where
    /// it did not apply).
    async fn read_many(&self, attempts: &[Attempt<'_>]) -> Option<Vec<LockRecord>> {
        let mut records = Vec::with_capacity(attempts.len());
        for attempt in attempts {
            match self.store.get(attempt.key).await {
                Ok(Some(record)) if attempt.latest_is(&record) => records.push(record),
                _ => return None,
            }
        }
        Some(records)
    }

    /// Acquire `key` (see [`LockClient::acquire`](crate::LockClient::acquire)).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        key: LockKey,
        options: AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.acquire_handed(key, options, None).await
    }

    /// [`acquire`](Self::acquire), taking over `handed` (a lock of this
    /// client's released to this acquire by a [`Successors`] queue) in one
    /// write. A hand-off the acquire does not end up holding is released.
    ///
    /// [`Successors`]: crate::turns::Successors
    pub(crate) async fn acquire_handed(
        self: &Arc<Self>,
        key: LockKey,
        options: AcquireOptions,
        handed: Option<Handoff>,
    ) -> Result<LockGuard, LockError> {
        let started = self.clock.now();
        if let Err(error) = self.check_acquire(&key, &options) {
            let result = Err(error);
            self.metrics
                .acquire(&key, AcquireOutcome::of(&result), Duration::ZERO, false);
            if let Some(handed) = handed {
                self.release_handoff(key, handed);
            }
            return result;
        }
        let lease = options.lease.unwrap_or(self.config.timing.lease);
        let wait = self.config.wait_for(&options);
        if options.reentrant
            && handed.is_none()
            && let Some(guard) = self.share(&key)
        {
            let result = Ok(guard);
            self.metrics
                .acquire(&key, AcquireOutcome::of(&result), Duration::ZERO, false);
            return result;
        }
        let span = tracing::info_span!("acquire", key = %key, owner = %self.config.owner);
        // Dropped after the attempt (declared before it), so shutdown sees the
        // attempt's clean-up, if it leaves one, before it stops waiting.
        let _running = self.acquiring();
        let mut attempt = Attempt {
            shared: self,
            key: &key,
            lease,
            writes: Candidates::new(),
            turn: None,
            handed,
            takeover_write: None,
        };
        // Whether the acquire found the lock taken (queued behind a task of
        // this client, or went on past its first write): it waited.
        let mut contended = false;
        let result = async {
            let deadline = later(started, wait);
            let fail_fast = wait.is_zero();
            let mut turn = self.take_turn(&key, fail_fast, started, deadline).await?;
            let waited = turn.waited;
            contended = waited;
            if let Some(from_turn) = turn.take_handoff() {
                // A hand-off in the key's turn as well as one given: the
                // turn's is the later version; the given one is released.
                if let Some(given) = attempt.handed.replace(from_turn) {
                    self.release_handoff(key.clone(), given);
                }
            }
            attempt.turn = Some(turn);
            // The turn may have come from a shutdown releasing the task ahead:
            // then a lock handed over with it is released by the attempt's drop.
            self.ensure_running()?;
            // After a wait in the queue, the first write is sent now, not at the start.
            let sent = if waited { self.clock.now() } else { started };
            // A vacant or handed-over lock, the common case, is one write: the loop
            // that waits, retries and takes over is boxed, so this future stays small.
            let expect = match &attempt.handed {
                Some(handed) => Some(Expect::Version(handed.rvn.clone())),
                None if options.only_if_exists => None,
                None => Some(Expect::Vacant),
            };
            let first = match expect {
                None => None,
                Some(expect) => {
                    let put = self.put_acquire(&key, expect, &options, &mut attempt, sent, None);
                    match put.await {
                        Written::Done(result) => return result,
                        Written::Learned(reply) => Some(reply),
                    }
                }
            };
            contended = true;
            let looped = self.acquire_loop(&key, &options, &mut attempt, started, deadline, first);
            Box::pin(looped).await
        }
        .instrument(span)
        .await;
        if result.is_ok() {
            // The lock is ours; no other write of this acquire can apply on top
            // of it, since each was conditional on a record that is gone.
            attempt.writes.clear();
        }
        let elapsed = self.clock.now().saturating_duration_since(started);
        self.metrics
            .acquire(&key, AcquireOutcome::of(&result), elapsed, contended);
        result
    }

    /// The checks an acquire makes before anything is read or written (a
    /// semaphore makes them for the longest of its slots' keys).
    pub(crate) fn check_acquire(
        &self,
        key: &LockKey,
        options: &AcquireOptions,
    ) -> Result<(), LockError> {
        self.ensure_running()?;
        self.validate_input(key, options.data.bytes())?;
        if let Some(lease) = options.lease {
            self.config.check_acquire_lease(lease)?;
        }
        self.config.check_holds(
            options.min_hold,
            options.max_hold,
            options.delete_on_release,
        )?;
        if options.delete_on_release && !self.caps.conditional_delete {
            return Err(ConfigError::DeleteNotConditional.into());
        }
        Ok(())
    }

    /// This client's turn at `key`: at once, after the task ahead (a holder, an
    /// acquire, a release of this client) is done with it, or an error.
    async fn take_turn(
        self: &Arc<Self>,
        key: &LockKey,
        fail_fast: bool,
        started: Instant,
        deadline: Instant,
    ) -> Result<Turn, LockError> {
        // A one-attempt acquire waits only for a release of this client's, which
        // ends within its lease or its retries; past that the key is busy.
        let until = if fail_fast {
            later(started, self.config.timing.lease.max(self.backoff.window()))
        } else {
            deadline
        };
        let shared = self.clone();
        let waited = self
            .turns
            .take(key, fail_fast, move || {
                Box::pin(async move { shared.pause_until(until).await })
            })
            .await;
        self.ensure_running()?;
        match waited {
            Ok(turn) => Ok(turn),
            Err(NoTurn::Busy) => Err(LockError::AlreadyHeld { key: key.clone() }),
            Err(NoTurn::TimedOut(phase)) => Err(LockError::AcquireTimeout {
                key: key.clone(),
                // An acquire of this client ahead in the queue is itself waiting
                // for someone: name that holder if it has been seen.
                holder: match phase {
                    Phase::Acquiring => self.sightings.holder(key),
                    Phase::Holding | Phase::Releasing => None,
                }
                .or_else(|| Some(self.config.owner.clone())),
                waited: self.clock.now().saturating_duration_since(started),
            }),
        }
    }

    /// One acquire write with a fresh RVN, sent at `sent` (a clock reading just
    /// before; an early one is conservative, since the lease counts from it).
    /// `previous` is the expired holder being taken over.
    async fn put_acquire(
        self: &Arc<Self>,
        key: &LockKey,
        expect: Expect,
        options: &AcquireOptions,
        attempt: &mut Attempt<'_>,
        sent: Instant,
        previous: Option<Takeover>,
    ) -> Written {
        let rvn = Rvn::fresh();
        let new = NewRecord {
            owner: self.config.owner.clone(),
            rvn: rvn.clone(),
            lease: attempt.lease,
            released: false,
            fence: FenceUpdate::Next,
            data: options.data.clone(),
            expires_at: None,
        };
        // Unresolved while in flight: if this future is dropped during the call,
        // the write may still apply and must be cleaned up.
        attempt.writes.push((rvn.clone(), sent));
        if let Some(previous) = &previous {
            attempt.takeover_write = Some((rvn, previous.clone()));
        }
        let expected = match &expect {
            Expect::Version(version) => Some(version.clone()),
            Expect::Vacant => None,
        };
        let result = self.store.put(key, expect, new).await;
        match result {
            Ok(Outcome::Applied(record)) => {
                debug_assert!(
                    attempt.latest_is(&record),
                    "a store applied a write but returned another RVN"
                );
                if let Some(previous) = &previous {
                    tracing::info!(fence = %record.fence, previous = %previous.owner, "took over expired lock");
                }
                // The record carries this write's RVN: no copy of our own is
                // kept (each is an atomic reference count). The caller clears the
                // candidates once the lock is held.
                attempt.handed = None;
                let turn = attempt.turn.take();
                Written::Done(self.hold_unless_shut_down(record, sent, options, turn, previous))
            }
            Ok(Outcome::Rejected {
                current: Some(current),
            }) if expected.as_ref() == Some(&current.rvn) => {
                // Refused on the very version the store shows: the store breaks
                // its contract (or cannot compare this table's versions), and
                // writing again would be refused again, forever.
                attempt.writes.pop();
                Written::Learned(Reply::Failed(StoreError::new(
                    crate::StoreErrorKind::Other,
                    format!(
                        "the store refused a write conditional on version {} while its record shows that version: \
                         it does not keep the store contract (check the table's layout)",
                        current.rvn.as_str()
                    ),
                )))
            }
            Ok(Outcome::Rejected { current }) => {
                // A rejection that shows our own RVN (a store that retried
                // internally) stays a candidate and is resolved by the caller; so
                // does one without the current record, until the caller's read
                // shows whether the write applied after all.
                if current
                    .as_ref()
                    .is_some_and(|current| !attempt.latest_is(current))
                {
                    attempt.writes.pop();
                }
                Written::Learned(Reply::Rejected(current))
            }
            Err(error) => {
                if !error.is_ambiguous() {
                    attempt.writes.pop();
                }
                Written::Learned(Reply::Failed(error))
            }
        }
    }

    /// Everything after a first write that did not get the lock (`first` is its
    /// reply), or from a first read with `only_if_exists`: waiting, retrying,
    /// resolving ambiguous writes, taking over an expired lease.
    async fn acquire_loop(
        self: &Arc<Self>,
        key: &LockKey,
        options: &AcquireOptions,
        attempt: &mut Attempt<'_>,
        started: Instant,
        deadline: Instant,
        mut first: Option<Reply>,
    ) -> Result<LockGuard, LockError> {
        let refresh = options.refresh_period.unwrap_or(self.config.refresh_period);
        // The held record last seen (its RVN) and who held it: what a takeover
        // write on top of that RVN replaces.
        let mut takeover: Option<(Rvn, Takeover)> = None;
        // The holder wrote while this client watched (busy-unless-dead gives up).
        let mut alive = false;
        let mut step = if options.only_if_exists {
            Step::Read
        } else {
            Step::Put(Expect::Vacant)
        };
        let mut retry = Retry::until(&self.backoff, deadline);
        let mut quick: u32 = 0;
        // Releases the store announces, watched by an acquire that may wait,
        // from here on: before its first read, so a release between that
        // read and the wait is not missed (one between the first, refused
        // write and here costs a poll). Not before the first write: an
        // uncontended acquire starts no listener.
        let mut releases = if deadline > started || options.busy_unless_dead {
            self.watch_releases()
        } else {
            None
        };
        loop {
            self.ensure_running()?;
            let retry_step = step.clone();
            let reply = match (first.take(), std::mem::replace(&mut step, Step::Read)) {
                (Some(reply), _) => reply,
                (None, Step::Put(expect)) => {
                    let sent = self.clock.now();
                    let previous = match (&expect, &takeover) {
                        (Expect::Version(rvn), Some((seen, previous))) if seen == rvn => {
                            Some(previous.clone())
                        }
                        _ => None,
                    };
                    let put = self.put_acquire(key, expect, options, attempt, sent, previous);
                    match put.await {
                        Written::Done(result) => return result,
                        Written::Learned(reply) => reply,
                    }
                }
                (None, Step::Read) => match self.store.get(key).await {
                    Ok(current) => Reply::Seen(current),
                    Err(error) => Reply::Failed(error),
                },
            };
            let seen = match reply {
                Reply::Seen(current) => Ok(current),
                Reply::Rejected(Some(current)) => Ok(Some(current)),
                Reply::Rejected(None) => {
                    let seen = self.current_after_rejection(key, None).await;
                    // The write kept as a candidate: not ours after all unless the
                    // record read back shows its RVN.
                    if let Ok(current) = &seen
                        && !current
                            .as_ref()
                            .is_some_and(|current| attempt.latest_is(current))
                    {
                        attempt.writes.pop();
                    }
                    seen
                }
                Reply::Failed(error) => Err(error),
            };
            // The wall clock before the monotonic one: a credit proven at the
            // wall reading holds at any later instant (see `ClockTrust::credit`).
            let wall_now = self.clock.wall_now();
            let now = self.clock.now();
            let current = match seen {
                Ok(current) => {
                    retry.succeeded();
                    if let Some(observer) = &options.observer {
                        let info = current
                            .clone()
                            .map(|record| crate::LockInfo::from_record(record, false));
                        observer.saw(info.as_ref());
                    }
                    current
                }
                Err(error) => {
                    // Keep resolving an ambiguous write past the wait budget while
                    // that write, if it applied, would still hold the lock, but
                    // for no longer than the client's retry window after it was
                    // sent: a one-attempt acquire against a store whose answers
                    // are lost must not take a whole lease to fail. Giving up is
                    // safe: the attempt's drop releases the write by its RVN in
                    // the background (shutdown waits for that), so one that
                    // applied is not left held.
                    let resolving = attempt.lease.min(self.backoff.window());
                    let resolve_until = attempt
                        .writes
                        .iter()
                        .map(|(_, sent)| later(*sent, resolving))
                        .max()
                        .map_or(deadline, |until| until.max(deadline));
                    retry.set_give_up_at(resolve_until);
                    // After an ambiguous write, read to learn whether it applied;
                    // otherwise the write surely did not apply: repeat it.
                    let repeat = !error.is_ambiguous() && attempt.writes.is_empty();
                    let wake = retry
                        .after(error, now)
                        .map_err(|error| LockError::from_store(key, error))?;
                    self.pause_until(wake).await;
                    if repeat {
                        step = retry_step;
                    }
                    continue;
                }
            };
            let handed = attempt.handed.as_ref().map(|handed| &handed.rvn);
            let finds = acquire_finds(current, &attempt.writes, handed);
            // Whether the holder wrote since this client last looked.
            let mut changed = false;
            let seen = acquiring::judge(
                finds,
                now,
                wall_now,
                |lease| self.config.timing_for(lease),
                |record| {
                    // Counted from this client's first sighting of this RVN,
                    // in this acquire or an earlier one, with the lock delay.
                    let (sighting, at) = self.sight(record, now, wall_now);
                    changed = sighting.changed;
                    at
                },
                Broken::Nothing,
            );
            let (record, takeover_at, final_hold) = match seen {
                Seen::Free(released) => {
                    self.sightings.forget(key);
                    attempt.handed = None;
                    let holder = released.as_ref().map(|record| record.owner.clone());
                    step = match released {
                        None if options.only_if_exists && attempt.writes.is_empty() => {
                            return Err(LockError::NotFound { key: key.clone() });
                        }
                        // Released by its holder (or someone wrote on top of a
                        // handed lock): free, and it exists.
                        Some(record) if options.only_if_exists => {
                            Step::Put(Expect::Version(record.rvn))
                        }
                        _ => Step::Put(Expect::Vacant),
                    };
                    quick += 1;
                    if quick > QUICK_RETRIES {
                        self.pace(now, refresh, (started, deadline), key, holder.as_deref())
                            .await?;
                    }
                    continue;
                }
                Seen::Hold { record, sent } => {
                    // One of our ambiguous writes applied; if it was a takeover,
                    // the guard says whom it replaced.
                    let previous = attempt.took_over_by(&record);
                    tracing::info!(fence = %record.fence, "ambiguous acquire resolved: it applied");
                    attempt.handed = None;
                    let turn = attempt.turn.take();
                    return self.hold_unless_shut_down(record, sent, options, turn, previous);
                }
                Seen::Renew(record) => {
                    // Too old to trust: acquire it afresh (a new fence) on top
                    // of it, still replacing whom that write replaced.
                    let previous = attempt.took_over_by(&record);
                    takeover = previous.map(|previous| (record.rvn.clone(), previous));
                    step = Step::Put(Expect::Version(record.rvn));
                    continue;
                }
                Seen::Handed(record) => {
                    // Still the lock the previous local holder handed over: take it.
                    step = Step::Put(Expect::Version(record.rvn));
                    continue;
                }
                Seen::Held {
                    record,
                    takeover_at,
                    final_hold,
                } => {
                    attempt.handed = None;
                    (record, takeover_at, final_hold)
                }
            };
            quick = 0;
            alive |= changed || final_hold;
            takeover = Some((
                record.rvn.clone(),
                Takeover {
                    owner: record.owner.clone(),
                    fence: record.fence,
                    data: record.data.clone(),
                },
            ));
            if now >= takeover_at {
                step = Step::Put(Expect::Version(record.rvn));
                continue;
            }
            // Busy-unless-dead: the budget only ends the wait once the holder has
            // shown it is alive; a record that does not change is watched until
            // it may be taken over.
            let budget_applies = !options.busy_unless_dead || alive;
            if budget_applies && now >= deadline {
                return Err(LockError::AcquireTimeout {
                    key: key.clone(),
                    holder: Some(record.owner),
                    waited: now.saturating_duration_since(started),
                });
            }
            let mut wake = later(now, self.backoff.jitter(refresh)).min(takeover_at);
            if budget_applies {
                wake = wake.min(deadline);
            }
            tracing::trace!(holder = %record.owner, "lock held, waiting");
            let announced = self
                .pause_until_released(wake, releases.as_mut(), |released| released == key)
                .await;
            step = if self.clock.now() >= takeover_at {
                Step::Put(Expect::Version(record.rvn))
            } else if announced && !options.only_if_exists {
                // Announced released: try at once (the write is conditional;
                // a false announcement costs one refused write).
                Step::Put(Expect::Vacant)
            } else {
                Step::Read
            };
        }
    }

    /// Sleep one jittered refresh period, or fail with a timeout once the budget is
    /// spent (used when racing other waiters for a vacant lock).
    async fn pace(
        &self,
        now: Instant,
        refresh: std::time::Duration,
        (started, deadline): (Instant, Instant),
        key: &LockKey,
        holder: Option<&str>,
    ) -> Result<(), LockError> {
        if now >= deadline {
            return Err(LockError::AcquireTimeout {
                key: key.clone(),
                holder: holder.map(str::to_owned),
                waited: now.saturating_duration_since(started),
            });
        }
        let wake = later(now, self.backoff.jitter(refresh)).min(deadline);
        self.pause_until(wake).await;
        Ok(())
    }

    /// [`hold`](Self::hold), unless the client is shutting down: then the write is
    /// left to the acquire's clean-up (released by its RVN) and the acquire fails.
    fn hold_unless_shut_down(
        self: &Arc<Self>,
        record: LockRecord,
        sent: Instant,
        options: &AcquireOptions,
        turn: Option<Turn>,
        took_over: Option<Takeover>,
    ) -> Result<LockGuard, LockError> {
        self.ensure_running()?;
        let guard = self.hold(record, sent, options, turn, took_over);
        if let Err(error) = self.ensure_running() {
            // Shutdown began while the lock was being recorded and may have
            // drained the held locks before it: undo, and let the clean-up release.
            let held = guard.disarm();
            held.update(|state| state.stopping = true);
            self.forget(&held);
            held.end_turn(None);
            return Err(error);
        }
        Ok(guard)
    }

    /// Record a confirmed acquisition (`record` carries the RVN of the write,
    /// sent at `sent`, that applied) and start heartbeating it.
    fn hold(
        self: &Arc<Self>,
        record: LockRecord,
        sent: Instant,
        options: &AcquireOptions,
        turn: Option<Turn>,
        took_over: Option<Takeover>,
    ) -> LockGuard {
        // The lease, and the min and max holds, run from the acquiring
        // write's send, even when its reply came late or was lost and a read
        // found it applied.
        let from = lease_runs_from(sent, self.clock.now(), Broken::Nothing);
        let held = Held::new(
            record.key,
            record.fence,
            options.delete_on_release,
            record.rvn,
            from,
            self.config.lock_timing(record.lease),
            record.data,
        )
        .with_turn(turn, took_over)
        .with_limits(HoldLimits::new(from, options.min_hold, options.max_hold));
        let held = Arc::new(held);
        if held.took_over.is_some() {
            self.metrics.takeover(&held.key);
        }
        // What this client saw of an earlier holder is history now: a later
        // holder's record must count as a first sighting, not as "alive".
        self.sightings.forget(&held.key);
        tracing::info!(key = %held.key, fence = %held.fence, owner = %self.config.owner, "acquired");
        self.register(&held, sent);
        LockGuard::new(self.clone(), held)
    }

    /// Another guard for the acquisition of `key` this client holds, if it
    /// holds one it trusts now: not lost, not being released, its lease safe
    /// (a reentrant acquire; `protocol::holding::HeldState::share`).
    fn share(self: &Arc<Self>, key: &LockKey) -> Option<LockGuard> {
        let held = self.registry.get(key)?;
        held.share(self.clock.now())
            .then(|| LockGuard::new(self.clone(), held))
    }
}
