//! A held lock as its confirmed writes left it ([`HeldState`]), and the
//! transitions the client and the model check both run on it: a write
//! confirmed ([`confirm`](HeldState::confirm)), the holder's trust at an
//! instant ([`lease_state`](HeldState::lease_state)), letting go
//! ([`let_go`](HeldState::let_go), [`drop_guard`](HeldState::drop_guard))
//! and a reentrant acquire sharing the acquisition
//! ([`share`](HeldState::share)).
//!
//! `Held` (the client's bookkeeping) keeps one `HeldState` under its lock
//! and calls these inside its updates; the model builds one from its own
//! state for each decision.

use std::time::Duration;

use crate::clock::Instant;
use crate::protocol::Broken;
use crate::record::Rvn;
use crate::timing::{HoldLimits, LeaseState, LostReason, Timing};

/// One acquisition as the client holds it.
#[derive(Debug, Clone)]
pub(crate) struct HeldState {
    /// RVN of the latest confirmed write.
    pub rvn: Rvn,
    /// Send time of the latest confirmed write: the lease runs from here.
    pub confirmed_send: Instant,
    pub data: Option<Vec<u8>>,
    /// Set once the lease can no longer be trusted, for good.
    pub lost: Option<LostReason>,
    /// Reentrant guards alive for this acquisition.
    pub guards: usize,
    /// Release has begun: heartbeats stop.
    pub stopping: bool,
    /// The holder has let the lock go: a release, a hand-off, a final write
    /// of a min hold, a detach or a shutdown has begun. From this instant the
    /// lock reads as lost ([`LostReason::Released`]), before any write that
    /// could let another holder in is sent.
    pub left: bool,
    /// The release's write has ended (whatever its outcome), or the lock was
    /// handed on: a waiter of this client may look again.
    pub release_ended: bool,
    /// Writes whose outcome is unknown (ambiguous), with their send times. A later
    /// reply that shows one of these RVNs proves that write applied.
    pub pending: Vec<(Rvn, Instant)>,
    /// A delete of ours failed ambiguously, so an absent record may be our doing.
    pub ambiguous_delete: bool,
    /// The release failed and the record may still be held: the client
    /// remembered it for shutdown to write again (see `leaving`).
    pub left_over: bool,
}

/// The instant a lease confirmed by a write runs from: the write's send,
/// never its reply. The store applied the write somewhere between the two,
/// and a waiter counts the lease from a reply of its own that came after the
/// write applied, so counting from the send is the only end that never
/// outlives the waiter's count.
pub(crate) fn lease_runs_from(sent: Instant, answered: Instant, broken: Broken) -> Instant {
    match broken {
        #[cfg(test)]
        Broken::LeaseFromReply => answered,
        _ => {
            let _ = answered;
            sent
        }
    }
}

impl HeldState {
    /// A new acquisition whose write `rvn` was sent at `sent` and answered
    /// at `answered`: one guard, the lease running from
    /// [`lease_runs_from`].
    pub(crate) fn acquired(
        rvn: Rvn,
        sent: Instant,
        answered: Instant,
        data: Option<Vec<u8>>,
        broken: Broken,
    ) -> Self {
        Self {
            rvn,
            confirmed_send: lease_runs_from(sent, answered, broken),
            data,
            lost: None,
            guards: 1,
            stopping: false,
            left: false,
            release_ended: false,
            pending: Vec::new(),
            ambiguous_delete: false,
            left_over: false,
        }
    }

    /// A write with `rvn`, sent at `sent` and answered (or found to have
    /// applied) at `answered`, is confirmed: the lease now runs from its
    /// send, never earlier than before (a reply that overtook a later
    /// write's cannot move it back). A confirmed release (or delete) also marks the lock released.
    pub(crate) fn confirm(
        &mut self,
        rvn: Rvn,
        sent: Instant,
        answered: Instant,
        data: Option<Vec<u8>>,
        released: bool,
        broken: Broken,
    ) {
        self.rvn = rvn;
        self.pending.clear();
        let from = lease_runs_from(sent, answered, broken);
        if from > self.confirmed_send {
            self.confirmed_send = from;
        }
        self.data = data;
        if released && self.lost.is_none() {
            self.lost = Some(LostReason::Released);
        }
    }

    /// The holder's view at `now`: lost for good, let go (when
    /// `count_left`; a detach hands on the lease as written), past its max
    /// hold, or as `timing` says of the lease from the last confirmed send.
    /// `is_safe()`, a leader's and a permit's trust are this.
    pub(crate) fn lease_state(
        &self,
        timing: &Timing,
        limits: &HoldLimits,
        now: Instant,
        count_left: bool,
        broken: Broken,
    ) -> LeaseState {
        if let Some(reason) = &self.lost {
            return LeaseState::Lost {
                reason: reason.clone(),
            };
        }
        #[cfg(test)]
        let count_left = count_left && broken != Broken::TrustWhileReleasing;
        #[cfg(not(test))]
        let _ = broken;
        if count_left && self.left {
            return LeaseState::Lost {
                reason: LostReason::Released,
            };
        }
        if let Some(reason) = limits.max_hold_reached(now) {
            return LeaseState::Lost { reason };
        }
        timing.lease_state(self.confirmed_send, now)
    }

    /// When the next heartbeat is due: a `period` after the send of the
    /// last confirmed write, never past the max hold (where heartbeats
    /// stop).
    pub(crate) fn next_heartbeat_at(&self, period: Duration, limits: &HoldLimits) -> Instant {
        limits.not_after(crate::clock::later(self.confirmed_send, period))
    }

    /// The holder lets the lock go: heartbeats stop, and from now on the
    /// lock reads as released. True the first time.
    pub(crate) fn let_go(&mut self) -> bool {
        self.stopping = true;
        !std::mem::replace(&mut self.left, true)
    }

    /// One guard fewer: whether it was the last, and whether the holder let
    /// the lock go just now (it does with the last guard, in the same step,
    /// so a reentrant acquire can never share a lock being released).
    pub(crate) fn drop_guard(&mut self) -> (bool, bool) {
        self.guards = self.guards.saturating_sub(1);
        let last = self.guards == 0;
        (last, last && self.let_go())
    }

    /// A reentrant acquire at `now` shares this acquisition (one more
    /// guard) if the holder trusts it now: not lost, not let go or being
    /// released, and its lease safe. A lease in danger or expired but not
    /// yet marked lost is not shared: the acquire goes to the store, as a
    /// first one would, and never returns a guard that is already unsafe.
    pub(crate) fn share(&mut self, timing: &Timing, limits: &HoldLimits, now: Instant) -> bool {
        let trusted = !self.stopping
            && self
                .lease_state(timing, limits, now, true, Broken::Nothing)
                .is_safe();
        if trusted {
            self.guards += 1;
        }
        trusted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            lease: Duration::from_secs(10),
            max_drift: 0.01,
            safety_margin: Duration::ZERO,
        }
    }

    fn state(at: Instant) -> HeldState {
        HeldState::acquired(Rvn::fresh(), at, at, None, Broken::Nothing)
    }

    #[test]
    fn a_lease_runs_from_the_send_and_never_moves_back() {
        let t0 = Instant::now();
        let mut held = state(t0);
        let sent = t0 + Duration::from_secs(3);
        held.confirm(
            Rvn::fresh(),
            sent,
            sent + Duration::from_secs(2),
            None,
            false,
            Broken::Nothing,
        );
        assert_eq!(held.confirmed_send, sent, "from the send, not the reply");
        held.confirm(
            Rvn::fresh(),
            t0 + Duration::from_secs(1),
            sent,
            None,
            false,
            Broken::Nothing,
        );
        assert_eq!(
            held.confirmed_send, sent,
            "an earlier send never moves it back"
        );
        let broken = HeldState::acquired(Rvn::fresh(), t0, sent, None, Broken::LeaseFromReply);
        assert_eq!(
            broken.confirmed_send, sent,
            "the broken rule counts from the reply"
        );
    }

    #[test]
    fn a_lock_let_go_is_not_trusted_and_not_shared() {
        let t0 = Instant::now();
        let limits = HoldLimits::default();
        let mut held = state(t0);
        assert!(
            held.lease_state(&timing(), &limits, t0, true, Broken::Nothing)
                .is_safe()
        );
        assert!(held.share(&timing(), &limits, t0));
        assert_eq!(held.guards, 2);
        assert_eq!(held.drop_guard(), (false, false));
        assert_eq!(held.drop_guard(), (true, true), "the last guard lets go");
        assert!(
            !held
                .lease_state(&timing(), &limits, t0, true, Broken::Nothing)
                .is_safe()
        );
        assert!(
            held.lease_state(&timing(), &limits, t0, false, Broken::Nothing)
                .is_safe(),
            "as written, for a detach"
        );
        assert!(
            held.lease_state(&timing(), &limits, t0, true, Broken::TrustWhileReleasing)
                .is_safe(),
            "the broken rule trusts a lock let go"
        );
        assert!(!held.share(&timing(), &limits, t0));
    }

    #[test]
    fn a_heartbeat_is_due_a_period_after_the_send_never_past_the_max_hold() {
        let t0 = Instant::now();
        let period = Duration::from_secs(3);
        let mut held = state(t0);
        assert_eq!(
            held.next_heartbeat_at(period, &HoldLimits::default()),
            t0 + period
        );
        let max = HoldLimits::new(t0, None, Some(Duration::from_secs(2)));
        assert_eq!(
            held.next_heartbeat_at(period, &max),
            t0 + Duration::from_secs(2)
        );
        let sent = t0 + Duration::from_secs(1);
        held.confirm(Rvn::fresh(), sent, sent, None, false, Broken::Nothing);
        assert_eq!(
            held.next_heartbeat_at(period, &HoldLimits::default()),
            sent + period
        );
    }

    #[test]
    fn a_lease_in_danger_or_lost_is_not_shared() {
        let t0 = Instant::now();
        let limits = HoldLimits::default();
        let mut held = state(t0);
        let safe_until = timing().safe_until(t0);
        assert!(!held.share(&timing(), &limits, safe_until + Duration::from_millis(1)));
        assert_eq!(held.guards, 1);
        held.lost = Some(LostReason::Stolen {
            owner: Some("b".into()),
        });
        assert!(!held.share(&timing(), &limits, t0));
    }
}
