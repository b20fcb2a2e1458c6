//! Acquire: one conditional write when the lock is vacant, otherwise watch the
//! holder's record and take it over once its RVN has not changed for
//! `lease × (1 + drift)`.

use std::sync::Arc;

use smallvec::SmallVec;
use tracing::Instrument;

use crate::client::Inner;
use crate::clock::Instant;
use crate::held::Held;
use crate::{
    AcquireOptions, Expect, FenceUpdate, LockError, LockGuard, LockKey, LockRecord, NewRecord,
    Observation, Outcome, Rvn, StoreError,
};

/// How many times in a row a released record may be retried at once before the
/// waiter paces itself (it is racing other waiters).
const QUICK_RETRIES: u32 = 3;

/// Writes of an acquire whose outcome is not known yet: (RVN, send time). Inline
/// room for one, the write in flight of an acquire that is not retrying.
type Candidates = SmallVec<[(Rvn, Instant); 1]>;

/// Writes of an acquire whose outcome is unknown. If the acquire ends without the
/// lock (timeout, error, or its future dropped), they are released in the
/// background: one may have applied.
struct Unresolved<'a> {
    inner: &'a Arc<Inner>,
    key: &'a LockKey,
    writes: Candidates,
}

impl Drop for Unresolved<'_> {
    fn drop(&mut self) {
        if !self.writes.is_empty() {
            let rvns = self.writes.drain(..).map(|(rvn, _)| rvn).collect();
            self.inner.release_abandoned(self.key.clone(), rvns);
        }
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
enum Attempt {
    /// It applied (the lock is held), or the acquire is over.
    Done(Result<LockGuard, LockError>),
    /// It did not apply, or may have: what the store said.
    Learned(Reply),
}

impl Inner {
    /// Acquire `key` (see [`LockClient::acquire`](crate::LockClient::acquire)).
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        key: LockKey,
        options: AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.ensure_running()?;
        self.validate_input(&key, options.data.as_deref())?;
        if let Some(guard) = self.reacquire(&key, options.reentrant)? {
            return Ok(guard);
        }
        let span = tracing::info_span!("acquire", key = %key, owner = %self.config.owner);
        let mut unknown = Unresolved {
            inner: self,
            key: &key,
            writes: Candidates::new(),
        };
        let result = async {
            let started = self.clock.now();
            // A vacant lock, the common case, is one write: the loop that waits,
            // retries and takes over is boxed, so this future stays small.
            let first = if options.only_if_exists {
                None
            } else {
                let put = self.put_acquire(
                    &key,
                    Expect::Vacant,
                    &options,
                    &mut unknown.writes,
                    started,
                    None,
                );
                match put.await {
                    Attempt::Done(result) => return result,
                    Attempt::Learned(reply) => Some(reply),
                }
            };
            Box::pin(self.acquire_loop(&key, options, &mut unknown.writes, started, first)).await
        }
        .instrument(span)
        .await;
        if result.is_ok() {
            // The lock is ours; no other write of this acquire can apply on top
            // of it, since each was conditional on a record that is gone.
            unknown.writes.clear();
        }
        result
    }

    /// One acquire write with a fresh RVN, sent at `sent` (a clock reading just
    /// before; an early one is conservative, since the lease counts from it).
    /// `previous` names the holder being taken over, for the log.
    async fn put_acquire(
        self: &Arc<Self>,
        key: &LockKey,
        expect: Expect,
        options: &AcquireOptions,
        candidates: &mut Candidates,
        sent: Instant,
        previous: Option<&str>,
    ) -> Attempt {
        let takeover = matches!(expect, Expect::Version(_));
        let rvn = Rvn::fresh();
        let new = NewRecord {
            owner: self.config.owner.clone(),
            rvn: rvn.clone(),
            lease: self.config.timing.lease,
            released: false,
            fence: FenceUpdate::Next,
            data: options.data.clone(),
            expires_at: None,
        };
        // Unresolved while in flight: if this future is dropped during the call,
        // the write may still apply and must be cleaned up.
        candidates.push((rvn, sent));
        let result = self.store.put(key, expect, new).await;
        let ours = |current: &LockRecord| {
            candidates
                .last()
                .is_some_and(|(rvn, _)| *rvn == current.rvn)
        };
        match result {
            Ok(Outcome::Applied(record)) => {
                debug_assert!(
                    ours(&record),
                    "a store applied a write but returned another RVN"
                );
                if takeover {
                    tracing::info!(fence = %record.fence, previous = previous.unwrap_or("-"), "took over expired lock");
                }
                // The record carries this write's RVN: no copy of our own is
                // kept (each is an atomic reference count). The caller clears the
                // candidates once the lock is held.
                Attempt::Done(self.hold_unless_shut_down(record, sent, options))
            }
            Ok(Outcome::Rejected { current }) => {
                // A rejection that shows our own RVN (a store that retried
                // internally) stays a candidate and is resolved by the caller; so
                // does one without the current record, until the caller's read
                // shows whether the write applied after all.
                if current.as_ref().is_some_and(|current| !ours(current)) {
                    candidates.pop();
                }
                Attempt::Learned(Reply::Rejected(current))
            }
            Err(error) => {
                if !error.is_ambiguous() {
                    candidates.pop();
                }
                Attempt::Learned(Reply::Failed(error))
            }
        }
    }

    /// Everything after a first write that did not get the lock (`first` is its
    /// reply), or from a first read with `only_if_exists`: waiting, retrying,
    /// resolving ambiguous writes, taking over an expired lease.
    async fn acquire_loop(
        self: &Arc<Self>,
        key: &LockKey,
        options: AcquireOptions,
        candidates: &mut Candidates,
        started: Instant,
        mut first: Option<Reply>,
    ) -> Result<LockGuard, LockError> {
        let timing = self.config.timing;
        let deadline = started + options.wait;
        let refresh = options.refresh_period.unwrap_or(self.config.refresh_period);
        let mut observation: Option<Observation> = None;
        let mut step = if options.only_if_exists {
            Step::Read
        } else {
            Step::Put(Expect::Vacant)
        };
        let mut errors: u32 = 0;
        let mut quick: u32 = 0;
        loop {
            self.ensure_running()?;
            let retry_step = step.clone();
            let reply = match (first.take(), std::mem::replace(&mut step, Step::Read)) {
                (Some(reply), _) => reply,
                (None, Step::Put(expect)) => {
                    let previous = observation.as_ref().map(|o| o.owner.as_str());
                    let sent = self.clock.now();
                    let put = self.put_acquire(key, expect, &options, candidates, sent, previous);
                    match put.await {
                        Attempt::Done(result) => return result,
                        Attempt::Learned(reply) => reply,
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
                        && !current.as_ref().is_some_and(|current| {
                            candidates
                                .last()
                                .is_some_and(|(rvn, _)| *rvn == current.rvn)
                        })
                    {
                        candidates.pop();
                    }
                    seen
                }
                Reply::Failed(error) => Err(error),
            };
            let now = self.clock.now();
            let current = match seen {
                Ok(current) => {
                    errors = 0;
                    current
                }
                Err(error) => {
                    if !error.is_retryable() {
                        return Err(LockError::from_store(key, error));
                    }
                    // Keep resolving an ambiguous write past the wait budget for as
                    // long as that write, if it applied, would still hold the lock.
                    let resolve_until = candidates
                        .iter()
                        .map(|(_, sent)| *sent + timing.lease)
                        .max()
                        .map_or(deadline, |until| until.max(deadline));
                    if now >= resolve_until {
                        return Err(LockError::from_store(key, error));
                    }
                    tracing::debug!(attempt = errors, error = %error, "store error while acquiring, retrying");
                    let pause = self.backoff(errors);
                    errors = errors.saturating_add(1);
                    self.clock
                        .sleep_until((now + pause).min(resolve_until))
                        .await;
                    // After an ambiguous write, read to learn whether it applied;
                    // otherwise the write surely did not apply: repeat it.
                    if !error.is_ambiguous() && candidates.is_empty() {
                        step = retry_step;
                    }
                    continue;
                }
            };
            let Some(record) = current else {
                if options.only_if_exists && candidates.is_empty() {
                    return Err(LockError::NotFound { key: key.clone() });
                }
                step = Step::Put(Expect::Vacant);
                quick += 1;
                if quick > QUICK_RETRIES {
                    self.pace(now, refresh, (started, deadline), key, None)
                        .await?;
                }
                continue;
            };
            if let Some(&(_, sent)) = candidates.iter().find(|(rvn, _)| *rvn == record.rvn) {
                // One of our ambiguous writes applied.
                if timing.lease_state(sent, record.lease, now).is_safe() {
                    tracing::info!(fence = %record.fence, "ambiguous acquire resolved: it applied");
                    return self.hold_unless_shut_down(record, sent, &options);
                }
                // Too old to trust: acquire it afresh (a new fence) on top of it.
                step = Step::Put(Expect::Version(record.rvn));
                continue;
            }
            if record.released {
                step = if options.only_if_exists {
                    Step::Put(Expect::Version(record.rvn))
                } else {
                    Step::Put(Expect::Vacant)
                };
                quick += 1;
                if quick > QUICK_RETRIES {
                    self.pace(now, refresh, (started, deadline), key, Some(&record.owner))
                        .await?;
                }
                continue;
            }
            quick = 0;
            // Held by someone else: count from the first time we saw this RVN.
            let watched = match observation.take() {
                Some(seen) if seen.rvn == record.rvn => seen,
                _ => Observation {
                    rvn: record.rvn.clone(),
                    lease: record.lease,
                    owner: record.owner.clone(),
                    seen_at: now,
                },
            };
            let takeover_at = timing.takeover_at(&watched);
            if now >= takeover_at {
                step = Step::Put(Expect::Version(watched.rvn.clone()));
                observation = Some(watched);
                continue;
            }
            if now >= deadline {
                return Err(LockError::AcquireTimeout {
                    key: key.clone(),
                    holder: Some(record.owner),
                    waited: now.saturating_duration_since(started),
                });
            }
            let wake = (now + self.jitter(refresh)).min(takeover_at).min(deadline);
            tracing::trace!(holder = %record.owner, "lock held, waiting");
            self.clock.sleep_until(wake).await;
            step = if self.clock.now() >= takeover_at {
                Step::Put(Expect::Version(watched.rvn.clone()))
            } else {
                Step::Read
            };
            observation = Some(watched);
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
        let wake = (now + self.jitter(refresh)).min(deadline);
        self.clock.sleep_until(wake).await;
        Ok(())
    }

    /// [`hold`](Self::hold), unless the client is shutting down: then the write is
    /// left to the acquire's clean-up (released by its RVN) and the acquire fails.
    fn hold_unless_shut_down(
        self: &Arc<Self>,
        record: LockRecord,
        sent: Instant,
        options: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.ensure_running()?;
        let guard = self.hold(record, sent, options);
        if let Err(error) = self.ensure_running() {
            // Shutdown began while the lock was being recorded and may have
            // drained the held locks before it: undo, and let the clean-up release.
            let held = guard.disarm();
            held.update(|state| state.stopping = true);
            self.forget(&held);
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
    ) -> LockGuard {
        let held = Arc::new(Held::new(
            record.key,
            record.fence,
            options.delete_on_release,
            record.rvn,
            sent,
            self.config.timing.lease,
            record.data,
        ));
        tracing::info!(key = %held.key, fence = %held.fence, owner = %self.config.owner, "acquired");
        self.register(&held, sent);
        LockGuard::new(self.clone(), held)
    }

    /// A second guard for a lock this client already holds, or an error.
    fn reacquire(
        self: &Arc<Self>,
        key: &LockKey,
        reentrant: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let Some(held) = self.registry.get(key) else {
            return Ok(None);
        };
        if !reentrant {
            return Err(LockError::AlreadyHeld { key: key.clone() });
        }
        let shared = held.update(|state| {
            if state.lost.is_none() && !state.stopping {
                state.guards += 1;
                true
            } else {
                false
            }
        });
        if shared {
            Ok(Some(LockGuard::new(self.clone(), held)))
        } else {
            Ok(None)
        }
    }
}
