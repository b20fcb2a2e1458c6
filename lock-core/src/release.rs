//! Every way out of a lock: `release()` and `release_and_delete()` (finished in
//! the background if their caller stops waiting), a dropped guard (released in
//! the background, honouring delete-on-release), a hand-off to the next task of
//! this client waiting for the key, or for any slot of a semaphore the key is
//! one of (one write, made by that task), the clean-up
//! of an acquire that gave up with writes in flight, and `shutdown()`.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::held::Held;
use crate::leaving::{Leaving, Leftover};
use crate::retry::{Retry, before};
use crate::shared::{Background, Shared};
use crate::shutdown_report::ShutdownReport;
use crate::timing::HoldLimits;
use crate::turns::Handoff;
use crate::write::{HeldWrite, WriteEnd};
use crate::{
    DataUpdate, Expect, FenceUpdate, LockError, LockKey, LostReason, NewRecord, Outcome, Rvn,
    StoreError,
};

/// Calls to release one abandoned acquisition before leaving it to expire.
const ABANDONED_RELEASE_ATTEMPTS: u32 = 4;

/// A release whose caller may stop waiting: if its future is dropped before the
/// release has finished, the release goes on in the background.
struct FinishInBackground<'a> {
    shared: &'a Arc<Shared>,
    held: &'a Arc<Held>,
    leaving: Leaving,
    done: bool,
}

impl Drop for FinishInBackground<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.shared
                .finish_release_in_background(self.held.clone(), self.leaving.clone());
        }
    }
}

impl Shared {
    /// Drop one guard of `held`; the last one releases the lock (or hands it to
    /// the next task of this client waiting for the key).
    pub(crate) async fn release(
        self: &Arc<Self>,
        held: &Arc<Held>,
        leaving: Leaving,
    ) -> Result<(), LockError> {
        if !self.last_guard_gone(held) {
            return Ok(());
        }
        let mut finish = FinishInBackground {
            shared: self,
            held,
            leaving: leaving.clone(),
            done: false,
        };
        let span = tracing::info_span!("release", key = %held.key, fence = %held.fence);
        let result = self.write_release(held, leaving).instrument(span).await;
        finish.done = true;
        result
    }

    /// Give up one guard of `held`. When it was the last, the lock stops being
    /// heartbeaten and held (a fail-fast acquire of the key may now wait for the
    /// release) and the caller writes the release: true.
    fn last_guard_gone(&self, held: &Arc<Held>) -> bool {
        if !held.drop_guard() {
            return false;
        }
        self.forget(held);
        held.releasing();
        true
    }

    /// Write the release of `held` (the holder has let it go, its guards are
    /// gone and it is forgotten), once the work under it has ended, then end
    /// its turn: with a hand-off when another task of this client waits for
    /// the key and the lock is still safely ours (and the release has no data
    /// to leave: a hand-off writes nothing).
    pub(crate) async fn write_release(
        &self,
        held: &Arc<Held>,
        leaving: Leaving,
    ) -> Result<(), LockError> {
        // The lock reads as released since the holder let go, which tells the
        // work under it (`with_lock`, `lead`, a `WorkInProgress`) to stop: no
        // write may let another holder in while that work still runs. Past
        // the lease's end waiting protects nobody.
        held.work_done(self.clock.as_ref()).await;
        let result = self.write_release_now(held, leaving).await;
        held.update(|state| state.release_ended = true);
        result
    }

    /// [`write_release`](Self::write_release) once the work has ended.
    async fn write_release_now(&self, held: &Arc<Held>, leaving: Leaving) -> Result<(), LockError> {
        let _writing = held.writing().await;
        let snapshot = held.snapshot();
        let now = self.clock.now();
        // A lock within its min hold is not handed over either: it stays held
        // by its final write for everyone, this client's tasks included.
        let min_hold_rest = held.limits.rest_of_min_hold(now);
        let handoff = match (&leaving.data, min_hold_rest) {
            (None, None) => self.handoff(held, &snapshot),
            _ => None,
        };
        if let Some(handoff) = handoff {
            // To the next acquire of this key, or else to a task waiting for
            // any of a set of keys that this lock is one of (a semaphore's);
            // either writes on the handed version once it has the key's turn,
            // which this lock keeps until it is marked lost.
            let handed = if held.has_local_waiters() {
                held.mark_lost(LostReason::Released);
                held.end_turn(Some(handoff));
                true
            } else if let Some(successors) = held.successors() {
                let taken = successors.offer(&held.key, handoff).is_ok();
                if taken {
                    held.mark_lost(LostReason::Released);
                    held.end_turn(None);
                }
                taken
            } else {
                false
            };
            if handed {
                self.metrics.handoff(&held.key);
                tracing::info!("handed to the next task of this client");
                return Ok(());
            }
        }
        let result = self
            .write_release_locked(held, leaving, snapshot, (now, min_hold_rest))
            .await;
        held.end_turn(None);
        result
    }

    /// The lock as a hand-off, if the next acquire can take it over in one
    /// write: a task waits (or may, for a lock with successors), the lease is
    /// not lost or past its end, no write of ours is unresolved (the next
    /// acquire expects exactly this version), and the client is not shutting
    /// down (then everything is released).
    fn handoff(&self, held: &Held, snapshot: &crate::held::Snapshot) -> Option<Handoff> {
        // Cheapest test first: usually nobody waits.
        if (!held.has_local_waiters() && held.successors().is_none())
            || snapshot.lost.is_some()
            || self.ensure_running().is_err()
            || self.clock.now() >= snapshot.expires
        {
            return None;
        }
        let state = held.state();
        if !state.pending.is_empty() || state.ambiguous_delete {
            return None;
        }
        Some(Handoff {
            rvn: state.rvn.clone(),
            lease: held.timing.lease,
        })
    }

    /// Write the release (or, with `min_hold_rest`, the final write that
    /// holds the lock that much longer), starting at `now`.
    async fn write_release_locked(
        &self,
        held: &Arc<Held>,
        leaving: Leaving,
        snapshot: crate::held::Snapshot,
        (now, min_hold_rest): (crate::clock::Instant, Option<Duration>),
    ) -> Result<(), LockError> {
        match &snapshot.lost {
            Some(LostReason::Released) => return Ok(()),
            Some(reason @ LostReason::Stolen { .. }) => {
                return Err(LockError::Lost {
                    key: held.key.clone(),
                    reason: reason.clone(),
                });
            }
            // Expired or in danger: the record may still be ours; try to vacate it.
            _ => {}
        }
        let give_up_at = snapshot
            .expires
            .max(crate::clock::later(now, self.backoff.window()));
        let write = match min_hold_rest {
            // Released early: one final write keeps it held to the min hold's end.
            Some(lease) => HeldWrite::HoldFor {
                lease,
                data: leaving.data.clone(),
            },
            None if leaving.delete => HeldWrite::Delete,
            None => HeldWrite::Release(leaving.data.clone()),
        };
        let holding = matches!(write, HeldWrite::HoldFor { .. });
        let end = self
            .write_held(held, write, give_up_at, now, snapshot)
            .await;
        if matches!(
            end,
            WriteEnd::GaveUp(_) | WriteEnd::Failed(_) | WriteEnd::Throttled(_)
        ) {
            // The record may still show this client as holder: shutdown
            // writes it again.
            let rvns = {
                let state = held.state();
                let mut rvns = vec![state.rvn.clone()];
                rvns.extend(state.pending.iter().map(|(rvn, _)| rvn.clone()));
                rvns
            };
            let leftover = Leftover {
                key: held.key.clone(),
                rvns,
                leaving,
                lease: held.timing.lease,
                limits: held.limits,
            };
            if self.left_over(leftover) {
                held.update(|state| state.left_over = true);
            }
        }
        match end {
            WriteEnd::Confirmed => {
                if holding {
                    tracing::info!("left held until its min hold ends");
                } else {
                    tracing::info!("released");
                }
                Ok(())
            }
            WriteEnd::Stolen { owner } => {
                let reason = LostReason::Stolen { owner };
                held.mark_lost(reason.clone());
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason,
                })
            }
            WriteEnd::GaveUp(error) => Err(LockError::Store {
                key: held.key.clone(),
                source: error.unwrap_or_else(|| {
                    StoreError::unavailable("release did not complete before its deadline")
                }),
            }),
            WriteEnd::Failed(error) | WriteEnd::Throttled(error) => {
                Err(LockError::from_store(&held.key, error))
            }
            WriteEnd::Stopped => Ok(()),
        }
    }

    /// A guard was dropped without release: release it in the background,
    /// honouring delete-on-release. Without a runtime, heartbeats stop and the
    /// lease runs out.
    pub(crate) fn release_in_background(self: &Arc<Self>, held: Arc<Held>) {
        if !self.last_guard_gone(&held) {
            return;
        }
        let leaving = Leaving::as_acquired(&held);
        self.finish_release_in_background(held, leaving);
    }

    /// Write the release of `held` (already forgotten, its guards gone) in the
    /// background, where shutdown waits for it and counts it.
    fn finish_release_in_background(self: &Arc<Self>, held: Arc<Held>, leaving: Leaving) {
        let shared = self.clone();
        let release = {
            let held = held.clone();
            async move {
                let key = held.key.clone();
                let span = tracing::info_span!("release", key = %key, fence = %held.fence);
                let result = shared.write_release(&held, leaving).instrument(span).await;
                if let Err(error) = &result {
                    tracing::debug!(%key, %error, "background release failed");
                    if held.state().left_over {
                        // Shutdown writes it again and reports that.
                        return None;
                    }
                }
                Some((key, result))
            }
        };
        if self.in_background(Some(held.key.clone()), release).is_err() {
            tracing::debug!(key = %held.key, "no runtime to release on; the lease runs out");
            held.end_turn(None);
        }
    }

    /// Remember `leftover` for shutdown to write again, unless the client is
    /// shutting down already (then the caller reports the failure): whether
    /// it was remembered.
    fn left_over(&self, leftover: Leftover) -> bool {
        if self.ensure_running().is_err() {
            return false;
        }
        self.leftovers.remember(leftover);
        true
    }

    /// Write `leftover`'s way out, conditional on each of its versions in turn
    /// (the record is at most one of them), each tried at most
    /// [`ABANDONED_RELEASE_ATTEMPTS`] times until `give_up`. A rejection means
    /// the version is not the record's (that write never applied, or someone
    /// wrote since): nothing to do. `None` when nothing is left; otherwise the
    /// leftover with the versions that could not be written, and the last
    /// error.
    async fn leave_versions(
        &self,
        leftover: Leftover,
        give_up: crate::clock::Instant,
    ) -> Option<(Leftover, StoreError)> {
        let mut unwritten = Vec::new();
        let mut last_error = None;
        for rvn in &leftover.rvns {
            let mut retry =
                Retry::until(&self.backoff, give_up).at_most(ABANDONED_RELEASE_ATTEMPTS);
            let error = loop {
                let write = self.leave_version(&leftover, rvn);
                let error = match before(self.clock.as_ref(), give_up, write).await {
                    Ok(Outcome::Applied(_)) => {
                        tracing::info!(key = %leftover.key, "released a lock left held");
                        break None;
                    }
                    Ok(Outcome::Rejected { .. }) => break None,
                    Err(error) => error,
                };
                match retry.after(error, self.clock.now()) {
                    Ok(wake) => self.clock.sleep_until(wake).await,
                    Err(error) => break Some(error),
                }
            };
            if let Some(error) = error {
                tracing::debug!(key = %leftover.key, %error, "could not release a lock left held");
                unwritten.push(rvn.clone());
                last_error = Some(error);
            }
        }
        let error = last_error?;
        Some((
            Leftover {
                rvns: unwritten,
                ..leftover
            },
            error,
        ))
    }

    /// One conditional write leaving `leftover`'s key at version `rvn`: the
    /// final write of a min hold not over yet, else the delete or release its
    /// way out asks for.
    async fn leave_version(&self, leftover: &Leftover, rvn: &Rvn) -> Result<Outcome, StoreError> {
        let expect = Expect::Version(rvn.clone());
        let rest = leftover.limits.rest_of_min_hold(self.clock.now());
        if rest.is_none() && leftover.leaving.delete {
            return self.store.delete(&leftover.key, expect).await;
        }
        let (rvn, lease, released) = match rest {
            Some(rest) => (self.final_hold_rvn(rest), rest, false),
            None => (Rvn::fresh(), leftover.lease, true),
        };
        let new = NewRecord {
            owner: self.config.owner.clone(),
            rvn,
            lease,
            released,
            fence: FenceUpdate::Keep,
            data: match &leftover.leaving.data {
                Some(data) => DataUpdate::Replace(data.clone()),
                None => DataUpdate::Keep,
            },
            expires_at: None,
        };
        self.store.put(&leftover.key, expect, new).await
    }

    /// Start writing every leftover again, each as a release `shutdown()`
    /// counts, within `give_up`.
    fn leftovers_into(
        self: &Arc<Self>,
        running: &mut Background,
        runtime: &tokio::runtime::Handle,
        give_up: crate::clock::Instant,
    ) {
        for leftover in self.leftovers.take_all() {
            let shared = self.clone();
            let key = leftover.key.clone();
            let write = async move { Some(shared.leave_again(leftover, give_up).await) };
            running.spawn(Some(key), write, runtime);
        }
    }

    /// Write `leftover` again at shutdown, within `give_up`: its key and how
    /// that ended, as a release reports it.
    async fn leave_again(
        &self,
        leftover: Leftover,
        give_up: crate::clock::Instant,
    ) -> (LockKey, Result<(), LockError>) {
        let key = leftover.key.clone();
        let result = match self.leave_versions(leftover, give_up).await {
            None => Ok(()),
            Some((_, source)) => Err(LockError::Store {
                key: key.clone(),
                source,
            }),
        };
        (key, result)
    }

    /// A lock handed over that nobody took (its waiter left, or took another
    /// version): released by the version handed, as
    /// [`release_abandoned`](Self::release_abandoned) does.
    pub(crate) fn release_handoff(self: &Arc<Self>, key: LockKey, handoff: Handoff) {
        self.release_abandoned(key, vec![handoff.rvn], handoff.lease);
    }

    /// An acquire gave up (timed out, failed or was cancelled) after writes whose
    /// outcome it never learned, or with a lock handed to it that it never took:
    /// each may hold the lock for a full lease with nobody heartbeating it.
    /// Release each, conditional on its RVN, so waiters need not wait the lease
    /// out. A write that did not apply is rejected and nothing changes.
    pub(crate) fn release_abandoned(
        self: &Arc<Self>,
        key: LockKey,
        rvns: Vec<Rvn>,
        lease: Duration,
    ) {
        let shared = self.clone();
        let name = key.clone();
        let cleanup = async move {
            // Past a lease the write, if it applied, has expired for every waiter
            // anyway; a store that hangs must not keep this task (and the client) alive.
            let give_up = shared.after(lease);
            let leftover = Leftover {
                key,
                rvns,
                leaving: Leaving::default(),
                lease,
                limits: HoldLimits::default(),
            };
            let (leftover, error) = shared.leave_versions(leftover, give_up).await?;
            // The last error of a write that could not be released: shutdown
            // writes it again, or, when it runs already, reports it (the lock
            // may stay held until its lease ends).
            let key = leftover.key.clone();
            if shared.left_over(leftover) {
                return None;
            }
            Some((key.clone(), Err(LockError::Store { key, source: error })))
        };
        // Named, so a shutdown that runs out of time lists it as not released.
        if self.in_background(Some(name), cleanup).is_err() {
            tracing::debug!(
                "no runtime to release an abandoned acquisition on; it expires with its lease"
            );
        }
    }

    /// Stop heartbeats and release every held lock, and wait for the releases
    /// running in the background, within the shutdown timeout.
    /// (The caller has begun the shutdown: [`Shared::begin_shutdown`]
    /// returned true.)
    pub(crate) async fn shutdown_begun(self: &Arc<Self>) -> ShutdownReport {
        let span = tracing::info_span!("shutdown", owner = %self.config.owner);
        async {
            drop(
                self.heartbeats
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .take(),
            );
            let held = self.registry.lock().drain_held();
            self.metrics.held_fewer(held.len());
            let mut report = ShutdownReport::default();
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                // Not on a tokio runtime: release one after the other.
                for held in &held {
                    held.leave();
                }
                let give_up = self.after(self.config.shutdown_timeout);
                let mut results = Vec::new();
                for leftover in self.leftovers.take_all() {
                    results.push(self.leave_again(leftover, give_up).await);
                }
                for held in held {
                    let result = self.write_release(&held, Leaving::as_acquired(&held)).await;
                    results.push((held.key.clone(), result));
                }
                for (key, result) in results {
                    match result {
                        Ok(()) => report.released.push(key),
                        Err(error) => report.failed.push((key, error)),
                    }
                }
                return report;
            };
            // Every lock reads as released (and every leader here is
            // deposed) before the first release is written.
            for held in &held {
                held.leave();
                held.releasing();
            }
            let mut running = Background::default();
            let give_up = self.after(self.config.shutdown_timeout);
            self.leftovers_into(&mut running, &runtime, give_up);
            for held in held {
                let shared = self.clone();
                let key = held.key.clone();
                let release = async move {
                    let result = shared
                        .write_release(&held, Leaving::as_acquired(&held))
                        .await;
                    Some((held.key.clone(), result))
                };
                running.spawn(Some(key), release, &runtime);
            }
            let deadline = self
                .clock
                .sleep_until(self.after(self.config.shutdown_timeout));
            tokio::pin!(deadline);
            // The locks held, then the background clean-ups (and any started
            // meanwhile: a guard dropped, an acquire ending), under one deadline.
            loop {
                if running.tasks.is_empty() {
                    running = self.take_background();
                    self.leftovers_into(&mut running, &runtime, give_up);
                }
                if running.tasks.is_empty() {
                    // Acquires still running stop at their next step; one whose
                    // write was in flight leaves a clean-up to wait for.
                    tokio::select! {
                        () = self.acquires_ended() => {}
                        () = &mut deadline => break,
                    }
                    running = self.take_background();
                    if running.tasks.is_empty() {
                        break;
                    }
                }
                tokio::select! {
                    next = running.tasks.join_next_with_id() => {
                        let id = match next {
                            Some(Ok((id, done))) => {
                                if let Some((key, result)) = done {
                                    match result {
                                        Ok(()) => report.released.push(key),
                                        Err(error) => report.failed.push((key, error)),
                                    }
                                }
                                id
                            }
                            Some(Err(failed)) => failed.id(),
                            None => continue,
                        };
                        running.keys.remove(&id);
                    }
                    () = &mut deadline => {
                        let late = self.take_background();
                        for mut tasks in [running, late] {
                            tasks.tasks.abort_all();
                            report.timed_out.extend(tasks.keys.into_values());
                        }
                        break;
                    }
                }
            }
            tracing::info!(
                released = report.released.len(),
                failed = report.failed.len(),
                "shut down"
            );
            self.metrics.shutdown(&report);
            report
        }
        .instrument(span)
        .await
    }
}
