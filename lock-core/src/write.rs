//! Writes to a record this client holds (heartbeat, data update, release), with
//! retries and ambiguous-write resolution by RVN.
//!
//! Every write carries a fresh RVN and is a *candidate* from the moment it is
//! sent, with its send time: if the caller stops waiting for it (a timeout, a
//! `select!`) or the store's answer is lost, the write may still apply, and when
//! a later reply shows the store holding a candidate's RVN, that write applied
//! and the lease runs from its send time. A write the store definitely refused
//! stops being a candidate. The deadline only ever moves on a confirmed write.

use std::sync::Arc;

use crate::clock::Instant;
use crate::held::{Held, Snapshot};
use crate::replies::{HeldRejection, Unresolved, Wants, held_write_rejected};
use crate::retry::{Retry, before};
use crate::shared::Shared;
use crate::{
    DataUpdate, Expect, FenceUpdate, LockError, LockRecord, LostReason, NewRecord, Outcome, Rvn,
    StoreError,
};

/// What a held write is for.
#[derive(Clone, Debug)]
pub(crate) enum HeldWrite {
    /// Extend the lease, keep the data.
    Heartbeat,
    /// Replace the data, or clear it with `None` (extends the lease too).
    SetData(Option<Vec<u8>>),
    /// Mark released, keeping the record and its fence, and the data unless
    /// new data is given.
    Release(Option<Vec<u8>>),
    /// Delete the record.
    Delete,
    /// The last write of a lock released before its min hold ended: keep it
    /// held for `lease` more (the rest of the min hold), under a final RVN,
    /// with no heartbeat after it; the data replaced when given.
    HoldFor {
        lease: std::time::Duration,
        data: Option<Vec<u8>>,
    },
}

impl HeldWrite {
    /// A confirmed write of this kind ends the hold.
    fn releases(&self) -> bool {
        matches!(self, Self::Release(_) | Self::Delete | Self::HoldFor { .. })
    }

    /// What the record must show for this write to have done its work, given
    /// the data it leaves (`data`).
    fn wants<'a>(&self, data: &'a Option<Vec<u8>>) -> Wants<'a> {
        match self {
            Self::Heartbeat => Wants::Heartbeat,
            Self::SetData(_) => Wants::Data(data),
            Self::Release(_) => Wants::Released,
            Self::HoldFor { .. } => Wants::FinalHold,
            Self::Delete => Wants::Deleted,
        }
    }

    /// What the write does to the stored data. A heartbeat or a release
    /// without data sends none: the store keeps what is there.
    fn data_update(&self) -> DataUpdate {
        match self {
            Self::SetData(Some(data))
            | Self::Release(Some(data))
            | Self::HoldFor {
                data: Some(data), ..
            } => DataUpdate::Replace(data.clone()),
            Self::SetData(None) => DataUpdate::Clear,
            Self::Heartbeat
            | Self::Release(None)
            | Self::Delete
            | Self::HoldFor { data: None, .. } => DataUpdate::Keep,
        }
    }
}

/// How a held write ended. A confirmed release or delete has marked the lock
/// released.
#[derive(Debug)]
pub(crate) enum WriteEnd {
    /// The write (or an earlier ambiguous one) is known to have applied.
    Confirmed,
    /// The record is no longer ours.
    Stolen { owner: Option<String> },
    /// Retries ran past `give_up_at`; the last store error.
    GaveUp(Option<StoreError>),
    /// The store refused the request for good (invalid, unauthorized, not found...).
    Failed(StoreError),
    /// Release began while a heartbeat was retrying.
    Stopped,
    /// A heartbeat the store throttled (not applied): the heartbeat task sends
    /// it again in its turn, earliest deadline first, at a pace the store takes.
    /// (Other writes retry a throttle themselves.)
    Throttled(StoreError),
}

impl Shared {
    /// Perform `write` on `held` under its write lock (the caller holds it).
    /// `now` is the caller's latest clock reading and `first` the state it read
    /// under the write lock: they serve the first attempt, which saves a clock
    /// read and a lock (an earlier send time is conservative: it only shortens
    /// the lease counted from it).
    pub(crate) async fn write_held(
        &self,
        held: &Held,
        write: HeldWrite,
        give_up_at: Instant,
        now: Instant,
        first: Snapshot,
    ) -> WriteEnd {
        let is_heartbeat = matches!(write, HeldWrite::Heartbeat);
        let mut retry = Retry::until(&self.backoff, give_up_at);
        // Subscribed only once a heartbeat has to wait: every change notifies
        // subscribers, and most writes never wait.
        let mut changes: Option<tokio::sync::watch::Receiver<u64>> = None;
        let mut first = Some((now, first));
        // This call's own writes (of a release): only these, unresolved, let a
        // key that moved on count as released, not an earlier heartbeat's.
        let mut own: Vec<Rvn> = Vec::new();
        loop {
            let (sent, snapshot) = match first.take() {
                Some(first) => first,
                None => (self.clock.now(), held.snapshot()),
            };
            if is_heartbeat && !snapshot.wants_heartbeat() {
                return WriteEnd::Stopped;
            }
            // The data the record holds once this write applies.
            let data = match &write {
                HeldWrite::SetData(data) => data.clone(),
                HeldWrite::Release(Some(data))
                | HeldWrite::HoldFor {
                    data: Some(data), ..
                } => Some(data.clone()),
                _ => snapshot.data,
            };
            let expected = snapshot.rvn;
            if retry.gave_up(sent) {
                return WriteEnd::GaveUp(retry.into_last_error());
            }
            let rvn = match write {
                HeldWrite::HoldFor { lease, .. } => self.final_hold_rvn(lease),
                _ => Rvn::fresh(),
            };
            if write.releases() {
                own.push(rvn.clone());
            }
            // A candidate before it is sent: should this future be dropped while
            // the write is on the wire, the next write recognises it as ours.
            // Not a change watchers need to hear of: no notification.
            let earlier_delete = {
                let mut state = held.state();
                let earlier = state.ambiguous_delete;
                if matches!(write, HeldWrite::Delete) {
                    state.ambiguous_delete = true;
                } else {
                    state.pending.push((rvn.clone(), sent));
                }
                earlier
            };
            // This write surely did not apply: it stops being a candidate.
            let not_applied = || {
                let mut state = held.state();
                state.pending.retain(|(pending, _)| *pending != rvn);
                state.ambiguous_delete = earlier_delete;
            };
            let result = match &write {
                HeldWrite::Delete => {
                    let delete = self.store.delete(&held.key, Expect::Version(expected));
                    before(self.clock.as_ref(), give_up_at, delete).await
                }
                _ => {
                    let new = NewRecord {
                        owner: self.config.owner.clone(),
                        rvn: rvn.clone(),
                        lease: match write {
                            HeldWrite::HoldFor { lease, .. } => lease,
                            _ => held.timing.lease,
                        },
                        released: matches!(write, HeldWrite::Release(_)),
                        fence: FenceUpdate::Keep,
                        data: write.data_update(),
                        expires_at: None,
                    };
                    let put = self.store.put(&held.key, Expect::Version(expected), new);
                    before(self.clock.as_ref(), give_up_at, put).await
                }
            };
            let error = match result {
                Ok(Outcome::Applied(record)) => {
                    if record.fence != held.fence && !matches!(write, HeldWrite::Delete) {
                        tracing::warn!(key = %held.key, ours = %held.fence, stored = %record.fence,
                            "store changed the fence on a keep-fence write");
                    }
                    held.confirm(rvn, sent, self.clock.now(), data, write.releases());
                    return WriteEnd::Confirmed;
                }
                Ok(Outcome::Rejected { current }) => {
                    // Refused, and the record shows another version: this write
                    // did not apply. (A bare rejection keeps it a candidate until
                    // the record is read.)
                    if matches!(write, HeldWrite::Delete)
                        || current.as_ref().is_some_and(|record| record.rvn != rvn)
                    {
                        not_applied();
                    }
                    match self.current_after_rejection(&held.key, current).await {
                        Ok(current) => {
                            match self.resolve_rejection(held, &write, current, &data, &own) {
                                Some(end) => return end,
                                // An earlier write of ours applied; repeat this one on top.
                                None => continue,
                            }
                        }
                        Err(error) => error,
                    }
                }
                Err(error) => {
                    // Failed before it reached the store: not a candidate.
                    if !error.is_ambiguous() {
                        not_applied();
                    }
                    error
                }
            };
            if !error.is_retryable() && !is_heartbeat {
                return WriteEnd::Failed(error);
            }
            // Retrying a throttled heartbeat here would compete with every other
            // lock's for the capacity the store has; the task decides who goes.
            if is_heartbeat && error.kind() == crate::StoreErrorKind::Throttled {
                return WriteEnd::Throttled(error);
            }
            let wake = retry.pause(error, self.clock.now());
            // A heartbeat stops retrying as soon as release begins.
            if is_heartbeat {
                let changes = changes.get_or_insert_with(|| held.subscribe());
                if !held.wants_heartbeat() {
                    return WriteEnd::Stopped;
                }
                // Our own bookkeeping (a pending RVN) also bumps the channel:
                // only a stop ends the backoff early.
                loop {
                    tokio::select! {
                        () = self.clock.sleep_until(wake) => break,
                        changed = changes.changed() => {
                            if changed.is_err() || !held.wants_heartbeat() {
                                break;
                            }
                        }
                    }
                }
            } else {
                self.clock.sleep_until(wake).await;
            }
        }
    }

    /// The RVN of a final write that holds the lock `rest` more: it carries
    /// that end on this client's wall clock.
    pub(crate) fn final_hold_rvn(&self, rest: std::time::Duration) -> Rvn {
        let wall = self.clock.wall_now();
        Rvn::fresh_final(wall.checked_add(rest).unwrap_or(wall))
    }

    pub(crate) async fn set_data(
        &self,
        held: &Arc<Held>,
        data: Option<Vec<u8>>,
    ) -> Result<(), LockError> {
        self.ensure_running()?;
        self.validate_input(&held.key, data.as_deref())?;
        let _writing = held.writing().await;
        let snapshot = held.snapshot();
        if let Some(reason) = snapshot.lost {
            return Err(LockError::Lost {
                key: held.key.clone(),
                reason,
            });
        }
        let now = self.clock.now();
        let expires = snapshot.expires;
        match self
            .write_held(held, HeldWrite::SetData(data), expires, now, snapshot)
            .await
        {
            WriteEnd::Confirmed => Ok(()),
            WriteEnd::Stolen { owner } => {
                let reason = LostReason::Stolen { owner };
                self.lose(held, reason.clone());
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason,
                })
            }
            WriteEnd::GaveUp(_) | WriteEnd::Stopped => {
                self.lose(held, LostReason::Expired);
                Err(LockError::Lost {
                    key: held.key.clone(),
                    reason: LostReason::Expired,
                })
            }
            WriteEnd::Failed(error) | WriteEnd::Throttled(error) => {
                Err(LockError::from_store(&held.key, error))
            }
        }
    }

    /// Carry out what a rejection of `write` means (see
    /// [`held_write_rejected`]): `None` means an earlier ambiguous write of
    /// ours applied (now confirmed) and this write must be repeated on top of it.
    fn resolve_rejection(
        &self,
        held: &Held,
        write: &HeldWrite,
        current: Option<LockRecord>,
        data: &Option<Vec<u8>>,
        own: &[Rvn],
    ) -> Option<WriteEnd> {
        let (pending, ambiguous_delete) = {
            let state = held.state();
            (state.pending.clone(), state.ambiguous_delete)
        };
        let unresolved = Unresolved {
            pending: &pending,
            ambiguous_delete,
            own,
            fence: held.fence,
        };
        match held_write_rejected(write.wants(data), unresolved, current) {
            HeldRejection::Applied {
                rvn,
                sent,
                data,
                done,
            } => {
                held.confirm(rvn, sent, self.clock.now(), data, done && write.releases());
                done.then_some(WriteEnd::Confirmed)
            }
            HeldRejection::Released => {
                held.mark_lost(LostReason::Released);
                Some(WriteEnd::Confirmed)
            }
            HeldRejection::Stolen { owner } => Some(WriteEnd::Stolen { owner }),
        }
    }
}
