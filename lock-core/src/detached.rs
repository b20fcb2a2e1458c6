//! Locks handled outside a guard: [`DetachedLock`] (a held lock no longer
//! heartbeaten, for a process that hands it on), and releasing a lock by its
//! record version (a script that took a lock in one process and releases it from
//! another, or an operator clearing a stuck lock).

use std::sync::Arc;
use std::time::Duration;

use crate::held::Held;
use crate::shared::Shared;
use crate::{
    DataUpdate, Expect, Fence, FenceUpdate, LeaseState, LockError, LockInfo, LockKey, LockRecord,
    LostReason, NewRecord, Outcome, Rvn, StoreError,
};

/// A lock this client acquired and then stopped maintaining with
/// [`LockGuard::detach`](crate::LockGuard::detach).
///
/// Nothing heartbeats it any more: the lock stays held in the store until its
/// lease runs out (and a waiter takes it over), or until someone releases it by
/// version with [`LockClient::release_version`](crate::LockClient::release_version)
/// — this process or another one that was handed [`version`](Self::version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedLock {
    key: LockKey,
    fence: Fence,
    version: Rvn,
    lease: Duration,
    owner: String,
    data: Option<Vec<u8>>,
    remaining: Duration,
}

impl DetachedLock {
    /// The lock's key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The fencing token of the acquisition.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The record version of the last confirmed write: what
    /// [`release_version`](crate::LockClient::release_version) needs.
    pub fn version(&self) -> &Rvn {
        &self.version
    }

    /// The lease written in the record: waiters take the lock over once the
    /// record has kept this version for the lease × (1 + drift).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The owner name written in the record.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The data stored with the lock (as [`LockView::data`](crate::LockView::data)).
    pub fn data(&self) -> Option<Vec<u8>> {
        self.data.clone()
    }

    /// The safe time that was left when the lock was detached (zero if it was
    /// already in danger). It only shrinks from there: nothing extends it.
    pub fn remaining(&self) -> Duration {
        self.remaining
    }
}

/// The next store call of a release by version.
enum Step {
    /// Write the release, expecting this version.
    Write(Rvn),
    /// Read the record to learn whether an ambiguous release applied.
    Read,
}

impl Shared {
    /// Stop heartbeating `held` and forget it, without releasing it.
    pub(crate) async fn detach(&self, held: Arc<Held>) -> Result<DetachedLock, LockError> {
        // Stop heartbeating first, so a caller that stops waiting below leaves
        // the lock detached (held until its lease ends), not heartbeated by a
        // client that no longer has a guard for it.
        held.update(|state| {
            state.guards = state.guards.saturating_sub(1);
            state.stopping = true;
        });
        self.forget(&held);
        held.end_turn(None);
        // Wait for a heartbeat in flight: the version handed out must be the one
        // the store holds once this client stops writing.
        let _writing = held.writing().await;
        let now = self.clock.now();
        let lease_state = held.lease_state(now);
        let state = held.state();
        if let LeaseState::Lost { reason } = lease_state {
            return Err(LockError::Lost {
                key: held.key.clone(),
                reason,
            });
        }
        Ok(DetachedLock {
            key: held.key.clone(),
            fence: held.fence,
            version: state.rvn.clone(),
            lease: state.lease,
            owner: self.config.owner.clone(),
            data: state.data.clone(),
            remaining: match lease_state {
                LeaseState::Safe { remaining } => remaining,
                _ => Duration::ZERO,
            },
        })
    }

    /// Release `key` if its record still carries `version`.
    pub(crate) async fn release_version(
        &self,
        key: &LockKey,
        version: &Rvn,
    ) -> Result<LockInfo, LockError> {
        self.ensure_running()?;
        self.validate_input(key, None)?;
        let record = self.read_for_release(key).await?;
        match record {
            Some(record) if record.rvn == *version => {
                let info = LockInfo::from_record(record.clone(), false);
                if !record.released {
                    self.write_release_of(key, record).await?;
                }
                Ok(info)
            }
            other => Err(not_owned(key, other.as_ref())),
        }
    }

    /// Release whatever holds `key` now, conditional on the version just read.
    pub(crate) async fn force_release(&self, key: &LockKey) -> Result<Option<LockInfo>, LockError> {
        self.ensure_running()?;
        self.validate_input(key, None)?;
        match self.read_for_release(key).await? {
            Some(record) if !record.released => {
                let info = LockInfo::from_record(record.clone(), false);
                self.write_release_of(key, record).await?;
                Ok(Some(info))
            }
            _ => Ok(None),
        }
    }

    /// A consistent read, retrying throttled and unavailable stores for a while.
    async fn read_for_release(&self, key: &LockKey) -> Result<Option<LockRecord>, LockError> {
        let give_up_at = self.after(self.retry_window());
        let mut attempt = 0;
        loop {
            match self.store.get(key).await {
                Ok(record) => return Ok(record),
                Err(error) => {
                    attempt = self.pause_or_fail(key, error, attempt, give_up_at).await?;
                }
            }
        }
    }

    /// Sleep before the next retry of `error`, or return it when it is not
    /// retryable or the retries ran out.
    async fn pause_or_fail(
        &self,
        key: &LockKey,
        error: StoreError,
        attempt: u32,
        give_up_at: crate::Instant,
    ) -> Result<u32, LockError> {
        let now = self.clock.now();
        if !error.is_retryable() || now >= give_up_at {
            return Err(LockError::from_store(key, error));
        }
        tracing::debug!(%key, attempt, %error, "store error on release by version, retrying");
        let wake = crate::clock::later(now, self.backoff(attempt)).min(give_up_at);
        self.clock.sleep_until(wake).await;
        Ok(attempt.saturating_add(1))
    }

    /// Mark `record` released, conditional on its version, keeping what the
    /// holder's own release would keep (fence, lease, data). Ambiguous
    /// writes are resolved by RVN, as for a guard's release.
    async fn write_release_of(&self, key: &LockKey, record: LockRecord) -> Result<(), LockError> {
        let give_up_at = self.after(self.retry_window());
        // Releases of ours whose outcome is unknown.
        let mut candidates: Vec<Rvn> = Vec::new();
        let mut attempt = 0;
        let mut step = Step::Write(record.rvn.clone());
        loop {
            if self.clock.now() >= give_up_at {
                return Err(LockError::Store {
                    key: key.clone(),
                    source: StoreError::unavailable(
                        "the release did not complete before its deadline",
                    ),
                });
            }
            let current = match step {
                Step::Write(ref expected) => {
                    let rvn = Rvn::fresh();
                    let new = NewRecord {
                        // The owner field names the record's writer: whoever
                        // released it, so a holder that finds its lock gone
                        // learns who did it.
                        owner: self.config.owner.clone(),
                        rvn: rvn.clone(),
                        lease: record.lease,
                        released: true,
                        fence: FenceUpdate::Keep,
                        data: DataUpdate::Keep,
                        expires_at: None,
                    };
                    match self
                        .store
                        .put(key, Expect::Version(expected.clone()), new)
                        .await
                    {
                        Ok(Outcome::Applied(_)) => break,
                        Ok(Outcome::Rejected { current }) => {
                            match self.current_after_rejection(key, current).await {
                                Ok(current) => current,
                                Err(error) => {
                                    attempt =
                                        self.pause_or_fail(key, error, attempt, give_up_at).await?;
                                    step = Step::Read;
                                    continue;
                                }
                            }
                        }
                        Err(error) => {
                            if error.is_ambiguous() {
                                candidates.push(rvn);
                                step = Step::Read;
                            }
                            attempt = self.pause_or_fail(key, error, attempt, give_up_at).await?;
                            continue;
                        }
                    }
                }
                Step::Read => match self.store.get(key).await {
                    Ok(current) => current,
                    Err(error) => {
                        attempt = self.pause_or_fail(key, error, attempt, give_up_at).await?;
                        continue;
                    }
                },
            };
            match current {
                // One of our ambiguous releases applied.
                Some(now) if candidates.contains(&now.rvn) => break,
                // Nothing applied yet: the record is as we read it.
                Some(now) if now.rvn == record.rvn => step = Step::Write(now.rvn),
                // After a release of ours whose answer was lost, a vacant key, a
                // released record or a later acquisition (a higher fence) means
                // the version is no longer held: most likely our release applied
                // and the key moved on (a store that deletes on release leaves
                // no record at all). Whoever did it, the release's purpose is
                // met; only a version we never released is an error.
                other
                    if !candidates.is_empty()
                        && other
                            .as_ref()
                            .is_none_or(|now| now.released || now.fence > record.fence) =>
                {
                    tracing::info!(%key, current = ?other.as_ref().map(|now| (&now.owner, now.fence)),
                        "the answer to a release by version was lost; the version is no longer held");
                    break;
                }
                other => return Err(not_owned(key, other.as_ref())),
            }
        }
        tracing::info!(%key, fence = %record.fence, owner = %record.owner, "released by version");
        // If this very client holds that acquisition, it is released now.
        let held = self.registry.get(key);
        if let Some(held) = held
            && held.state().rvn == record.rvn
        {
            self.lose(&held, LostReason::Released);
        }
        Ok(())
    }
}

/// The record no longer carries the version the caller gave.
fn not_owned(key: &LockKey, current: Option<&LockRecord>) -> LockError {
    LockError::NotOwned {
        key: key.clone(),
        owner: current
            .filter(|record| !record.released)
            .map(|record| record.owner.clone()),
    }
}
