//! Locks handled outside a guard: [`DetachedLock`] (a held lock no longer
//! heartbeaten, for a process that hands it on), and releasing a lock by its
//! record version (a script that took a lock in one process and releases it from
//! another, or an operator clearing a stuck lock).

use std::sync::Arc;
use std::time::Duration;

use crate::held::Held;
use crate::replies::{VersionRelease, version_release};
use crate::retry::Retry;
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

impl Shared {
    /// Stop heartbeating `held` and forget it, without releasing it.
    pub(crate) async fn detach(&self, held: Arc<Held>) -> Result<DetachedLock, LockError> {
        // Stop heartbeating first, so a caller that stops waiting below leaves
        // the lock detached (held until its lease ends), not heartbeated by a
        // client that no longer has a guard for it.
        // The holder lets go: the lock may be released by its version from
        // now on, by anyone it is handed to, so no view of it here reads as
        // safe any more.
        // Let go first: a reentrant acquire then can no longer share it.
        held.leave();
        held.update(|state| state.guards = state.guards.saturating_sub(1));
        self.forget(&held);
        held.end_turn(None);
        // The work under it ends before the version that lets others in is
        // handed out.
        held.work_done(self.clock.as_ref()).await;
        // Wait for a heartbeat in flight: the version handed out must be the one
        // the store holds once this client stops writing.
        let _writing = held.writing().await;
        let now = self.clock.now();
        let lease_state = held.lease_state_as_written(now);
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
            lease: held.timing.lease,
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
        let mut tries = 0;
        loop {
            let record = match self.read_for_release(key).await? {
                Some(record) if !record.released => record,
                _ => return Ok(None),
            };
            let info = LockInfo::from_record(record.clone(), false);
            match self.write_release_of(key, record).await {
                Ok(()) => return Ok(Some(info)),
                // The holder wrote between the read and the write (a
                // heartbeat, most likely): whoever holds it now is released,
                // as asked, on the version read again.
                Err(LockError::NotOwned { .. }) if tries + 1 < FORCE_RELEASE_READS => {
                    tries += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// A consistent read, retrying throttled and unavailable stores for a while.
    async fn read_for_release(&self, key: &LockKey) -> Result<Option<LockRecord>, LockError> {
        let mut retry = Retry::until(&self.backoff, self.after(self.backoff.window()));
        loop {
            match self.store.get(key).await {
                Ok(record) => return Ok(record),
                Err(error) => self.wait_to_retry(&mut retry, key, error).await?,
            }
        }
    }

    /// Sleep until the next try after `error`, or return it when `retry` says
    /// to stop.
    async fn wait_to_retry(
        &self,
        retry: &mut Retry<'_>,
        key: &LockKey,
        error: StoreError,
    ) -> Result<(), LockError> {
        let wake = retry
            .after(error, self.clock.now())
            .map_err(|error| LockError::from_store(key, error))?;
        self.clock.sleep_until(wake).await;
        Ok(())
    }

    /// Mark `record` released, conditional on its version, keeping what the
    /// holder's own release would keep (fence, lease, data). Ambiguous
    /// writes are resolved by RVN, as for a guard's release.
    async fn write_release_of(&self, key: &LockKey, record: LockRecord) -> Result<(), LockError> {
        // A lock this client holds at this very version, released by
        // version or by force from here: it lets go (its guards stop reading
        // as safe, its work ends) before the write is sent, and no heartbeat
        // of it is in flight meanwhile.
        let mine = self
            .registry
            .get(key)
            .filter(|held| held.state().rvn == record.rvn);
        let _writing = match &mine {
            Some(held) => {
                held.leave();
                held.work_done(self.clock.as_ref()).await;
                Some(held.writing().await)
            }
            None => None,
        };
        let mut retry = Retry::until(&self.backoff, self.after(self.backoff.window()));
        // Releases of ours whose outcome is unknown.
        let mut sent: Vec<Rvn> = Vec::new();
        // Write next on this version; `None`: read first, to learn whether an
        // ambiguous release applied.
        let mut write_on = Some(record.rvn.clone());
        loop {
            if retry.gave_up(self.clock.now()) {
                return Err(LockError::Store {
                    key: key.clone(),
                    source: StoreError::unavailable(
                        "the release did not complete before its deadline",
                    ),
                });
            }
            let current = match write_on.take() {
                Some(version) => {
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
                        .put(key, Expect::Version(version.clone()), new)
                        .await
                    {
                        Ok(Outcome::Applied(_)) => break,
                        Ok(Outcome::Rejected { current }) => {
                            self.current_after_rejection(key, current).await
                        }
                        Err(error) => {
                            if error.is_ambiguous() {
                                sent.push(rvn);
                            } else {
                                // Surely not applied: write it again.
                                write_on = Some(version);
                            }
                            Err(error)
                        }
                    }
                }
                None => self.store.get(key).await,
            };
            let current = match current {
                Ok(current) => current,
                Err(error) => {
                    self.wait_to_retry(&mut retry, key, error).await?;
                    continue;
                }
            };
            match version_release(current.as_ref(), &record, &sent) {
                VersionRelease::Applied => break,
                VersionRelease::MovedOn => {
                    tracing::info!(%key, current = ?current.as_ref().map(|now| (&now.owner, now.fence)),
                        "the answer to a release by version was lost; the version is no longer held");
                    break;
                }
                VersionRelease::WriteAgain => write_on = Some(record.rvn.clone()),
                VersionRelease::NotOwned => return Err(not_owned(key, current.as_ref())),
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

/// How many times a force release reads the record: a holder that writes
/// between each read and the write after it (heartbeats faster than the
/// store's round trip) fails it with `NotOwned` after this many.
const FORCE_RELEASE_READS: usize = 5;

/// The record no longer carries the version the caller gave.
fn not_owned(key: &LockKey, current: Option<&LockRecord>) -> LockError {
    LockError::NotOwned {
        key: key.clone(),
        owner: current
            .filter(|record| !record.released)
            .map(|record| record.owner.clone()),
    }
}
