//! The model: clients acquiring, heartbeating and releasing one key on a
//! linearizable store, with lost requests and replies, late and duplicated
//! writes, crashes and pauses. What a client does around a decision is
//! written here; every decision is the crate's own (see the module above).

use std::time::Duration;

use stateright::{Model, Property};

use crate::clock::Instant;
use crate::protocol::Broken;
use crate::protocol::acquiring;
use crate::protocol::holding::{HeldState, lease_runs_from};
use crate::replies::{self, HeldRejection, Unresolved, Wants};
use crate::sightings::Sightings;
use crate::timing::{Observation, Timing};
use crate::{Fence, LockKey, LockRecord, Rvn};

/// A slow clock's milliseconds per tick of real time, and a fast one's: the
/// two ends of a drift bound of 25 % around 4 ms per tick.
pub(crate) const SLOW: u32 = 3;
pub(crate) const FAST: u32 = 5;
const DRIFT: f64 = 0.25;
/// The lease every client writes (20 ms on its clock: 4 to 7 ticks).
const LEASE_MS: u64 = 20;
/// The holder's margin before the drift-adjusted end of its lease.
const MARGIN_MS: u64 = 1;
/// How long after a confirmed write a holder sends its next heartbeat.
const HEARTBEAT_MS: u32 = 8;
/// The max hold of an acquisition that asks for one: shorter than the lease,
/// so it ends trust before heartbeats would have to.
const MAX_HOLD_MS: u64 = 12;
/// The min hold of an acquisition that asks for one (on the holder's clock):
/// a release before it ends is a final write that keeps the lock held to its
/// end, on the wall clock.
const MIN_HOLD_MS: u64 = 12;

/// A rule deliberately broken, for the tests that show the checker finds
/// what each rule prevents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Break {
    /// Every rule as built.
    Nothing,
    /// A waiter takes over after watching a record for its lease, not
    /// lease × (1 + drift).
    TakeoverAfterLease,
    /// The holder trusts its lease for lease − margin, its safe time not
    /// shortened by the drift bound.
    SafeTimeWithoutDrift,
    /// The holder counts its lease from the reply that confirmed a write,
    /// not from sending it.
    LeaseFromReply,
    /// A heartbeat the store rejected is taken as applied.
    RejectedTakenAsApplied,
    /// A releasing holder keeps trusting its lease until the release is
    /// answered, instead of letting go before it sends.
    ReleaseUnsafeAfterSend,
    /// A waiter forgets its first sighting at every poll, so its count
    /// starts again each time.
    ForgetsSightings,
    /// A waiter ignores the end of a final write's min hold and waits for the
    /// holder as for a dead one.
    IgnoresFinalHold,
}

impl Break {
    /// The same rule broken inside the client's own transition
    /// (`protocol::Broken`), where the transition keeps it.
    fn in_protocol(self) -> Broken {
        match self {
            Break::LeaseFromReply => Broken::LeaseFromReply,
            Break::ReleaseUnsafeAfterSend => Broken::TrustWhileReleasing,
            Break::IgnoresFinalHold => Broken::IgnoresFinalHold,
            _ => Broken::Nothing,
        }
    }
}

/// The fleet and the store, and the limits of the exploration.
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    /// How many clients contend for the key.
    pub(crate) clients: usize,
    /// Ticks of real time explored.
    pub(crate) horizon: u32,
    /// Faults (lost requests and replies, duplicated writes, crashes) in
    /// one run, at most.
    pub(crate) faults: u8,
    /// Acquisitions each client begins, at most.
    pub(crate) acquisitions: u8,
    /// Acquisitions may ask for a max hold (each one, with and without).
    pub(crate) max_hold: bool,
    /// A holder may hand the lock to another task of its client (once per
    /// client), as a release does when one waits.
    pub(crate) hand_offs: bool,
    /// Acquisitions may ask for a min hold (each one, with and without).
    pub(crate) min_hold: bool,
    /// Permits: 1 is a lock; more, a semaphore of that many slots, each a
    /// lock of its own, that an acquirer polls together and takes one of.
    pub(crate) permits: usize,
    /// The rule broken, if any.
    pub(crate) broken: Break,
    /// The store keeps a clock running this many milliseconds per tick (4 is
    /// true time; 3 and 5 the drift bound's ends) and reports each record's
    /// age on reads, as PostgreSQL does; waiters credit it. `None`: waiters
    /// watch records.
    pub(crate) store_clock: Option<u32>,
    timing: Timing,
    base: Instant,
}

impl Fleet {
    pub(crate) fn new(
        clients: usize,
        horizon: u32,
        faults: u8,
        acquisitions: u8,
        broken: Break,
    ) -> Self {
        Fleet {
            clients,
            horizon,
            faults,
            acquisitions,
            max_hold: false,
            hand_offs: false,
            min_hold: false,
            permits: 1,
            broken,
            store_clock: None,
            timing: Timing {
                lease: Duration::from_millis(LEASE_MS),
                max_drift: DRIFT,
                safety_margin: Duration::from_millis(MARGIN_MS),
            },
            base: Instant::now(),
        }
    }

    /// The same fleet, each acquisition with and without a max hold.
    pub(crate) fn with_max_hold(self) -> Self {
        Fleet {
            max_hold: true,
            ..self
        }
    }

    /// The same fleet, each holder free to hand the lock to another task of
    /// its client once.
    pub(crate) fn with_hand_offs(self) -> Self {
        Fleet {
            hand_offs: true,
            ..self
        }
    }

    /// The same fleet, each acquisition with and without a min hold.
    pub(crate) fn with_min_hold(self) -> Self {
        Fleet {
            min_hold: true,
            ..self
        }
    }

    /// The same fleet contending for the permits of a semaphore: each
    /// acquirer reads every slot at once (as a poll does), takes a free one
    /// (from any start: the client's is random), else one it may take over.
    /// States that differ only by the names of clients or of slots are
    /// explored once (see [`canonical`]).
    ///
    /// Three clients on two keys are too many states for every step the
    /// lock runs explore, so here a write applies the instant it is sent
    /// (the worst case for the timing rules, which count from the send and
    /// from the sighting of the applied write), and its answer is read at
    /// the next step unless a fault loses it or holds it back (reading an
    /// answer changes only its reader, so its place among other clients'
    /// steps of the tick makes no difference). What this leaves out, a
    /// write landing after others sent later, the lock runs explore.
    pub(crate) fn with_permits(self, permits: usize) -> Self {
        Fleet { permits, ..self }
    }

    /// The same fleet on a store that keeps a clock of `ms_per_tick` and
    /// reports each record's age with it.
    pub(crate) fn with_store_clock(self, ms_per_tick: u32) -> Self {
        Fleet {
            store_clock: Some(ms_per_tick),
            ..self
        }
    }

    /// When the store stamps a write applied now: the tick, on a store that
    /// keeps a clock (0 on one that does not, so its states stay as many).
    fn stamp(&self, state: &State) -> u32 {
        if self.store_clock.is_some() {
            state.now
        } else {
            0
        }
    }

    /// How old the store's clock says `stored` is now, and so what the crate
    /// credits it with (`ClockTrust::credit`): nothing without a store clock.
    fn credit(&self, state: &State, stored: &Stored, now: u32) -> Duration {
        let Some(ms_per_tick) = self.store_clock else {
            return Duration::ZERO;
        };
        let age = state.now.saturating_sub(stored.applied) * ms_per_tick;
        crate::timing::ClockTrust::STORE_CLOCK.credit(
            Some(crate::WriteTime::Ago(Duration::from_millis(u64::from(age)))),
            self.wall(now),
        )
    }

    /// The hold limits of client `c`'s acquisition (the crate's own).
    fn hold_limits(&self, client: &Client) -> Option<crate::timing::HoldLimits> {
        let acquired = client.max_hold_from.or(client.min_hold_from)?;
        Some(crate::timing::HoldLimits::new(
            self.instant(acquired),
            client
                .min_hold_from
                .map(|_| Duration::from_millis(MIN_HOLD_MS)),
            client
                .max_hold_from
                .map(|_| Duration::from_millis(MAX_HOLD_MS)),
        ))
    }

    /// What is left of the acquisition's min hold at `now` (its clock), in
    /// whole milliseconds.
    fn rest_of_min_hold(&self, client: &Client, now: u32) -> Option<u32> {
        let rest = self
            .hold_limits(client)?
            .rest_of_min_hold(self.instant(now))?;
        u32::try_from(rest.as_millis()).ok()
    }

    /// Wall-clock time at `ms` on a client's clock: each client's wall clock
    /// runs with its monotonic one, so two clients' wall clocks drift apart
    /// as their rates do.
    fn wall(&self, ms: u32) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_millis(u64::from(ms))
    }

    /// The acquisition's max hold is over at `now` (its clock).
    fn max_hold_reached(&self, client: &Client, now: u32) -> bool {
        self.hold_limits(client)
            .is_some_and(|limits| limits.max_hold_reached(self.instant(now)).is_some())
    }

    /// The rules a holder judges its own lease by.
    fn holder_timing(&self) -> Timing {
        match self.broken {
            Break::SafeTimeWithoutDrift => Timing {
                max_drift: 0.0,
                ..self.timing
            },
            _ => self.timing,
        }
    }

    /// The rules a waiter judges a takeover by.
    fn waiter_timing(&self) -> Timing {
        match self.broken {
            Break::TakeoverAfterLease => Timing {
                max_drift: 0.0,
                ..self.timing
            },
            _ => self.timing,
        }
    }

    fn instant(&self, ms: u32) -> Instant {
        self.base + Duration::from_millis(u64::from(ms))
    }

    fn ms(&self, at: Instant) -> u32 {
        u32::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u32::MAX)
    }

    /// Client `c`'s clock, in milliseconds.
    fn clock(&self, state: &State, c: usize) -> u32 {
        state.now * state.clients[c].rate
    }

    fn record(&self, stored: &Stored) -> LockRecord {
        let rvn = match stored.final_until {
            // The crate's final mark: `<id>.final.<until in ms>`.
            Some(until) => final_rvn(stored.writer, stored.write, until),
            None => rvn(stored.writer, stored.write),
        };
        LockRecord {
            key: LockKey::new("k"),
            owner: format!("c{}", stored.writer),
            rvn,
            lease: self.timing.lease,
            released: stored.released,
            fence: Fence(stored.fence),
            data: None,
            expires_at: None,
            written: None,
        }
    }

    fn writes(&self, client: u8, list: &[(u16, u32)]) -> Vec<(Rvn, Instant)> {
        list.iter()
            .map(|&(write, sent)| (rvn(client, write), self.instant(sent)))
            .collect()
    }

    /// An acquirer's unresolved writes to `slot`.
    fn writes_to(&self, client: u8, slot: u8, list: &[Unsure]) -> Vec<(Rvn, Instant)> {
        list.iter()
            .filter(|unsure| unsure.0 == slot)
            .map(|&(_, write, sent)| (rvn(client, write), self.instant(sent)))
            .collect()
    }

    /// The slot client `c` holds (or is releasing), and its fence.
    fn fence(&self, state: &State, c: usize) -> Option<(u8, u64)> {
        match &state.clients[c].phase {
            Phase::Holding { slot, fence, .. } | Phase::Releasing { slot, fence, .. } => {
                Some((*slot, *fence))
            }
            _ => None,
        }
    }

    /// A semaphore's answer is read the step after the write it answers
    /// (or lost, or held back, a fault): reading it changes nothing but the
    /// reader, so where it falls among other clients' steps of the same
    /// tick makes no difference, and one place for it is enough. The actions
    /// then, if an answer is due.
    fn answer_now(&self, state: &State, actions: &mut Vec<Action>) -> bool {
        let due = state.clients.iter().position(|client| {
            client.phase != Phase::Crashed
                && matches!(
                    &client.call,
                    Some(Call {
                        answer: Some(_),
                        late: false,
                        ..
                    })
                )
        });
        let Some(c) = due else {
            return false;
        };
        actions.push(Action::Receive(c));
        if state.faults_left > 0 {
            if let Some(Call {
                answer: Some(answer),
                ..
            }) = &state.clients[c].call
                && *answer != Answer::Ambiguous
            {
                actions.push(Action::LoseAnswer(c));
            }
            actions.push(Action::DelayAnswer(c));
        }
        true
    }

    /// A holder's and a releaser's next steps: a heartbeat when due, a
    /// release, a hand-off; a releaser's next try.
    fn holder_actions(&self, state: &State, c: usize, actions: &mut Vec<Action>) {
        let client = &state.clients[c];
        match &client.phase {
            Phase::Holding { .. } => {
                let now = self.clock(state, c);
                // Due when the client's own rule says (a period after the
                // last confirmed send, never past the max hold); none once
                // the lease is lost (expired, or at the max hold, where the
                // client's heartbeats stop). Sending later is a paused
                // process.
                let lost = matches!(self.lease_state(state, c), crate::LeaseState::Lost { .. });
                let due = self.held_state(client, c).is_some_and(|held| {
                    let limits = self.hold_limits(client).unwrap_or_default();
                    self.instant(now)
                        >= held
                            .next_heartbeat_at(Duration::from_millis(HEARTBEAT_MS.into()), &limits)
                });
                if !lost && due && !self.max_hold_reached(client, now) {
                    actions.push(Action::Send(c));
                }
                actions.push(Action::Release(c));
                // The client's release hands the lock over only while
                // it is safely held: not lost, no write unresolved.
                if self.hand_offs
                    && !client.handed_off
                    && !lost
                    && !self.max_hold_reached(client, now)
                    && self.rest_of_min_hold(client, now).is_none()
                    && matches!(&client.phase, Phase::Holding { pending, .. } if pending.is_empty())
                {
                    actions.push(Action::HandOff(c));
                }
            }
            Phase::Releasing { .. } => actions.push(Action::Send(c)),
            _ => {}
        }
    }

    /// Client `c` trusts its lease on `slot` now.
    fn trusts_slot(&self, state: &State, c: usize, slot: u8) -> bool {
        self.fence(state, c).is_some_and(|(held, _)| held == slot) && self.trusts(state, c)
    }

    /// Whether client `c` trusts its lease now: what `is_safe()` says.
    pub(crate) fn trusts(&self, state: &State, c: usize) -> bool {
        self.lease_state(state, c).is_safe()
    }

    /// Client `c`'s lease now, as the client's own transition judges it
    /// (`HeldState::lease_state`: let go, past the max hold, or by its
    /// timing from the last confirmed send).
    fn lease_state(&self, state: &State, c: usize) -> crate::LeaseState {
        let client = &state.clients[c];
        let Some(held) = self.held_state(client, c) else {
            return crate::LeaseState::Lost {
                reason: crate::LostReason::Released,
            };
        };
        held.lease_state(
            &self.holder_timing(),
            &self.hold_limits(client).unwrap_or_default(),
            self.instant(self.clock(state, c)),
            true,
            self.broken.in_protocol(),
        )
    }

    /// Client `c`'s held lock as the client keeps it (`HeldState`), built
    /// from its phase: `None` unless it holds or is releasing.
    fn held_state(&self, client: &Client, c: usize) -> Option<HeldState> {
        let (write, confirmed, left) = match &client.phase {
            Phase::Holding {
                write, confirmed, ..
            } => (*write, *confirmed, false),
            Phase::Releasing {
                write, confirmed, ..
            } => (*write, *confirmed, true),
            _ => return None,
        };
        let from = self.instant(confirmed);
        let mut held = HeldState::acquired(rvn(c as u8, write), from, from, None, Broken::Nothing);
        if left {
            held.let_go();
        }
        Some(held)
    }

    /// Where client `c`'s lease runs from once a write it sent at `sent` is
    /// confirmed at `now` (its clock), its lease having run from
    /// `confirmed` (`None`: the write acquired): the client's own
    /// transition (`HeldState::confirm`, `lease_runs_from`).
    fn confirmed(&self, confirmed: Option<u32>, c: usize, write: u16, sent: u32, now: u32) -> u32 {
        let (sent, now) = (self.instant(sent), self.instant(now));
        let broken = self.broken.in_protocol();
        let Some(confirmed) = confirmed else {
            return self.ms(lease_runs_from(sent, now, broken));
        };
        let from = self.instant(confirmed);
        let mut held = HeldState::acquired(rvn(c as u8, write), from, from, None, Broken::Nothing);
        held.confirm(rvn(c as u8, write), sent, now, None, false, broken);
        self.ms(held.confirmed_send)
    }
}

impl State {
    /// Each client's clock, as a replay names it: `slow` or `fast`.
    pub(crate) fn clock_names(&self) -> Vec<&'static str> {
        self.clients
            .iter()
            .map(|client| if client.rate == SLOW { "slow" } else { "fast" })
            .collect()
    }

    /// The client whose request is the `i`th still in the network.
    pub(crate) fn stray_writer(&self, i: usize) -> Option<usize> {
        self.strays.get(i).map(|(writer, _)| usize::from(*writer))
    }
}

/// An RVN of the model: which client wrote it, and its write number.
fn rvn(client: u8, write: u16) -> Rvn {
    Rvn::from_stored(format!("c{client}.{write}"))
}

/// The RVN of a final write of the model, held until `until` (wall clock,
/// milliseconds): the crate's final mark on the model's name.
fn final_rvn(client: u8, write: u16, until: u32) -> Rvn {
    Rvn::from_stored(format!("c{client}.{write}.final.{until}"))
}

/// The writer and write number an RVN of the model names.
fn parse_rvn(rvn: &Rvn) -> (u8, u16) {
    let mut parts = rvn.as_str().trim_start_matches('c').split('.');
    let client = parts.next().and_then(|part| part.parse().ok());
    let write = parts.next().and_then(|part| part.parse().ok());
    (client.unwrap_or(0), write.unwrap_or(0))
}

/// The record the store holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Stored {
    writer: u8,
    write: u16,
    released: bool,
    fence: u64,
    /// A final write's end of the min hold (wall clock, milliseconds).
    final_until: Option<u32>,
    /// The tick it was applied at, on a store that keeps a clock.
    applied: u32,
}

/// A write to the store (reads are one step, see [`Fleet::read`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Op {
    Put {
        /// The slot written (always 0 for a lock).
        slot: u8,
        /// `None`: the key vacant or released; otherwise that version.
        expect: Option<(u8, u16)>,
        write: u16,
        released: bool,
        /// An acquisition: the store writes the next fence.
        next_fence: bool,
        /// A final write: held until then (wall clock, milliseconds).
        final_until: Option<u32>,
    },
}

/// What came back for a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Answer {
    Applied(Stored),
    Rejected(Option<Stored>),
    /// Timed out or lost: applied or not, the client cannot tell.
    Ambiguous,
}

/// A client's call to the store: the request, when it was sent (on its
/// clock), and the answer once there is one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Call {
    op: Op,
    sent: u32,
    answer: Option<Answer>,
    /// A semaphore's answer held back to a later step (a fault).
    late: bool,
}

/// A waiter's first sighting of the record version it watches.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Seen {
    writer: u8,
    write: u16,
    at: u32,
    /// The age the store's clock proved then (milliseconds).
    credit: u32,
}

/// Where a client is with the lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Not trying to hold it.
    Idle,
    /// Acquiring: its first write of this acquisition is `from`; writes
    /// whose outcome is unknown, with their send times; the version of its
    /// own that another task of the client handed it, if any.
    Acquiring {
        from: u16,
        /// Per slot.
        seen: Vec<Option<Seen>>,
        unresolved: Vec<Unsure>,
        handed: Option<u16>,
    },
    /// Holding `slot`, its lease counted from `confirmed` (its clock).
    Holding {
        slot: u8,
        write: u16,
        confirmed: u32,
        fence: u64,
        pending: Vec<(u16, u32)>,
    },
    /// Let go; its release being written.
    Releasing {
        slot: u8,
        write: u16,
        confirmed: u32,
        fence: u64,
        pending: Vec<(u16, u32)>,
        /// The release's own writes, with their send times.
        own: Vec<(u16, u32)>,
        tries: u8,
        /// Released within its min hold: the final write holds the lock
        /// this much longer (milliseconds, the holder's clock).
        hold_for: Option<u32>,
    },
    Crashed,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Client {
    /// Milliseconds of its clock per tick.
    rate: u32,
    phase: Phase,
    call: Option<Call>,
    /// Writes sent so far (the next one's number).
    writes: u16,
    acquisitions: u8,
    /// This acquisition asks for a max hold.
    wants_max_hold: bool,
    /// It holds with a max hold, counted from this send time (its clock).
    max_hold_from: Option<u32>,
    /// It has handed the lock to another of its tasks.
    handed_off: bool,
    /// This acquisition asks for a min hold.
    wants_min_hold: bool,
    /// It holds with a min hold, counted from this send time (its clock).
    min_hold_from: Option<u32>,
}

/// A property's violation, recorded by the step that made it (the rest are
/// read off the state).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Violations {
    /// A client took a write of its own for someone else's, or someone
    /// else's for its own.
    own_write_misjudged: bool,
    /// A waiter passed up a lock it may take: a released one, or one whose
    /// version it had watched for lease × (1 + drift).
    takeover_late: bool,
}

/// The state of the fleet and the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct State {
    /// Real time, in ticks.
    now: u32,
    /// Each slot's record.
    store: Vec<Option<Stored>>,
    pub(crate) clients: Vec<Client>,
    /// Requests still in the network whose sender stopped waiting for them
    /// (a lost reply's retry, a crashed sender's write): they may apply
    /// later.
    strays: Vec<(u8, Op)>,
    faults_left: u8,
    /// The highest fence the store granted an acquisition, per slot.
    highest_fence: Vec<u64>,
    /// A crashed holder's lock was taken over (the model is not vacuous).
    took_over_crashed: bool,
    /// A record was taken over before a waiter watching it from its first
    /// sighting could have: the store's clock proved it old.
    took_over_by_credit: bool,
    /// An ambiguous write was found applied and kept.
    recognised_own: bool,
    /// An ambiguous write was found applied too long ago to trust, and
    /// written afresh on.
    renewed_own: bool,
    violations: Violations,
}

/// An acquirer's write whose outcome is unknown: its slot, number and send
/// time.
pub(crate) type Unsure = (u8, u16, u32);

/// An acquirer's bookkeeping: its first write's number, its first sighting
/// of each slot, its unresolved writes, the version handed to it.
type Acquiring = (u16, Vec<Option<Seen>>, Vec<Unsure>, Option<u16>);

/// What an acquirer makes of one slot's record.
enum Verdict {
    /// A version of its own handed to it by another task: write on it.
    Handed(u16),
    /// A write of its own that applied: it holds the slot.
    Ours {
        write: u16,
        confirmed: u32,
        fence: u64,
    },
    /// Vacant or released: take it.
    Free,
    /// Held, and watched long enough: take it over.
    Due(Stored),
    /// A write of its own that applied too long ago to trust: write afresh
    /// on top of it.
    Renew(u16),
    /// Held: wait.
    Wait,
}

/// A step of one client, the store, the network or time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// Real time advances one tick.
    Tick,
    /// The client begins an acquisition (it reads the record).
    Begin(usize),
    /// The same, asking for a max hold.
    BeginWithMaxHold(usize),
    /// The same, asking for a min hold.
    BeginWithMinHold(usize),
    /// The client sends its next request: an acquirer's read, a holder's
    /// heartbeat, a releaser's next try.
    Send(usize),
    /// The holder lets go and sends its release.
    Release(usize),
    /// The holder lets go and hands the lock to another task of its
    /// client, which writes on the version handed.
    HandOff(usize),
    /// The store applies the client's request (and answers).
    Apply(usize),
    /// The store applies it, and a copy stays in the network (a retry).
    ApplyTwice(usize),
    /// The request is lost on the way; it may still arrive later.
    LoseRequest(usize),
    /// The answer is lost: the client sees a timeout.
    LoseAnswer(usize),
    /// The client reads the answer and decides.
    Receive(usize),
    /// A request in the network arrives at last.
    ApplyStray(usize),
    /// The client's process dies.
    Crash(usize),
    /// A semaphore's answer is held back: the client reads it at a later
    /// step of its choosing.
    DelayAnswer(usize),
    /// A semaphore's acquirer begins (if idle) or polls again: it reads
    /// every slot at once and writes to the first it may take, in its order
    /// from slot `start`.
    Poll(usize, u8),
}

impl Model for Fleet {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut states = Vec::new();
        // The clients are alike but for their clocks: the first k slow and
        // the rest fast covers every assignment up to renaming the clients.
        for slow in 0..=self.clients {
            let clients = (0..self.clients)
                .map(|c| Client {
                    rate: if c < slow { SLOW } else { FAST },
                    phase: Phase::Idle,
                    call: None,
                    writes: 0,
                    acquisitions: 0,
                    wants_max_hold: false,
                    max_hold_from: None,
                    handed_off: false,
                    wants_min_hold: false,
                    min_hold_from: None,
                })
                .collect();
            states.push(State {
                now: 0,
                store: vec![None; self.permits],
                clients,
                strays: Vec::new(),
                faults_left: self.faults,
                highest_fence: vec![0; self.permits],
                took_over_crashed: false,
                took_over_by_credit: false,
                recognised_own: false,
                renewed_own: false,
                violations: Violations::default(),
            });
        }
        states
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if self.permits > 1 && self.answer_now(state, actions) {
            return;
        }
        if state.now < self.horizon {
            actions.push(Action::Tick);
        }
        let faults = state.faults_left > 0;
        for (c, client) in state.clients.iter().enumerate() {
            if client.phase == Phase::Crashed {
                continue;
            }
            if faults {
                actions.push(Action::Crash(c));
            }
            match &client.call {
                None if self.permits > 1 => match &client.phase {
                    Phase::Idle if client.acquisitions >= self.acquisitions => {}
                    Phase::Idle | Phase::Acquiring { .. } => {
                        for start in 0..self.permits {
                            actions.push(Action::Poll(c, start as u8));
                        }
                    }
                    _ => self.holder_actions(state, c, actions),
                },
                None => match &client.phase {
                    Phase::Idle if client.acquisitions < self.acquisitions => {
                        actions.push(Action::Begin(c));
                        if self.max_hold {
                            actions.push(Action::BeginWithMaxHold(c));
                        }
                        if self.min_hold {
                            actions.push(Action::BeginWithMinHold(c));
                        }
                    }
                    Phase::Acquiring { .. } => actions.push(Action::Send(c)),
                    _ => self.holder_actions(state, c, actions),
                },
                Some(Call { answer: None, .. }) => {
                    actions.push(Action::Apply(c));
                    if faults {
                        actions.push(Action::LoseRequest(c));
                        actions.push(Action::ApplyTwice(c));
                    }
                }
                Some(Call {
                    answer: Some(answer),
                    ..
                }) => {
                    actions.push(Action::Receive(c));
                    if faults && *answer != Answer::Ambiguous {
                        actions.push(Action::LoseAnswer(c));
                    }
                }
            }
        }
        for i in 0..state.strays.len() {
            actions.push(Action::ApplyStray(i));
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = self.step(last, action)?;
        renumber_writes(&mut state);
        if self.permits > 1 {
            state = canonical(&state);
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(
                "mutual exclusion of trust: never two holders that both trust their lease",
                |model: &Fleet, state: &State| {
                    (0..model.permits).all(|slot| {
                        (0..state.clients.len())
                            .filter(|&c| model.trusts_slot(state, c, slot as u8))
                            .count()
                            <= 1
                    })
                },
            ),
            Property::always(
                "fences strictly increase in acquisition order: a holder that trusts its lease has the highest fence granted",
                |model: &Fleet, state: &State| {
                    (0..state.clients.len()).all(|c| {
                        !model.trusts(state, c)
                            || model.fence(state, c).is_some_and(|(slot, fence)| {
                                state.highest_fence.get(usize::from(slot)) == Some(&fence)
                            })
                    })
                },
            ),
            Property::always(
                "a client never takes its own write for another's, nor another's for its own",
                |_: &Fleet, state: &State| !state.violations.own_write_misjudged,
            ),
            Property::always(
                "liveness: a released lock is taken at once, a crashed holder's within L(1+d) of the first sighting",
                |_: &Fleet, state: &State| !state.violations.takeover_late,
            ),
            Property::sometimes(
                "a crashed holder's lock is taken over",
                |_: &Fleet, state: &State| state.took_over_crashed,
            ),
            Property::sometimes(
                "an ambiguous write is found applied and kept",
                |_: &Fleet, state: &State| state.recognised_own,
            ),
            Property::sometimes(
                "an ambiguous write found applied too long ago to trust is written afresh on",
                |_: &Fleet, state: &State| state.renewed_own,
            ),
        ];
        if self.store_clock.is_some() {
            properties.push(Property::sometimes(
                "a record the store's clock proves old is taken over before watching it would allow",
                |_: &Fleet, state: &State| state.took_over_by_credit,
            ));
        }
        if self.permits > 1 {
            properties.push(Property::always(
                "a semaphore never has more holders that trust their permit than permits",
                |model: &Fleet, state: &State| {
                    (0..state.clients.len())
                        .filter(|&c| model.trusts(state, c))
                        .count()
                        <= model.permits
                },
            ));
            properties.push(Property::sometimes(
                "every permit is held and trusted at once",
                |model: &Fleet, state: &State| {
                    (0..state.clients.len())
                        .filter(|&c| model.trusts(state, c))
                        .count()
                        == model.permits
                },
            ));
        }
        properties
    }
}

/// The store applies `op` from `writer`, atomically, and answers.
fn apply(state: &mut State, writer: u8, op: &Op, stamp: u32) -> Answer {
    let Op::Put { slot, .. } = op;
    let slot = usize::from(*slot);
    let store = &mut state.store[slot];
    match op {
        Op::Put {
            slot: _,
            expect,
            write,
            released,
            next_fence,
            final_until,
        } => {
            let holds = match (expect, store.as_ref()) {
                (None, None) => true,
                (None, Some(current)) => current.released,
                (Some(version), Some(current)) => (current.writer, current.write) == *version,
                (Some(_), None) => false,
            };
            if !holds {
                return Answer::Rejected(store.clone());
            }
            let fence = store.as_ref().map_or(0, |current| current.fence);
            let written = Stored {
                writer,
                write: *write,
                released: *released,
                fence: if *next_fence { fence + 1 } else { fence },
                final_until: *final_until,
                applied: stamp,
            };
            *store = Some(written.clone());
            if *next_fence {
                state.highest_fence[slot] = state.highest_fence[slot].max(written.fence);
            }
            Answer::Applied(written)
        }
    }
}

impl Fleet {
    /// An acquirer reads every slot and decides. A read is one step: the
    /// reply arrives the instant the store reads, the earliest it can, which
    /// is the worst case for safety (a waiter counts from the reply's
    /// arrival); a lost read is a read not made. A semaphore's poll reads
    /// every slot at once, as its partition query does, judges each in its
    /// order from `start`, and writes to the first it may take: a write of
    /// its own that applied, else a free slot, else one it may take over.
    fn read(&self, state: &mut State, c: usize, start: u8) {
        let Phase::Acquiring {
            from,
            seen,
            unresolved,
            handed,
        } = state.clients[c].phase.clone()
        else {
            return;
        };
        let mut acquiring = (from, seen, unresolved, handed);
        let mut chosen: Option<(u8, Verdict)> = None;
        for i in 0..self.permits {
            let slot = ((usize::from(start) + i) % self.permits) as u8;
            let current = state.store[usize::from(slot)].clone();
            let verdict = self.judge(state, c, &mut acquiring, slot, current);
            if chosen
                .as_ref()
                .is_none_or(|(_, best)| verdict.rank() < best.rank())
            {
                chosen = Some((slot, verdict));
            }
        }
        if let Some((slot, verdict)) = chosen {
            self.act(state, c, acquiring, slot, verdict);
        }
    }

    /// One step, before its write numbers are renumbered.
    fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Begin(c) | Action::BeginWithMaxHold(c) | Action::BeginWithMinHold(c) => {
                self.begin(&mut state, c, &action);
                self.read(&mut state, c, 0);
            }
            Action::Poll(c, start) => {
                if state.clients[c].phase == Phase::Idle {
                    self.begin(&mut state, c, &action);
                }
                self.read(&mut state, c, start);
            }
            Action::Send(c) => {
                let op = match &state.clients[c].phase {
                    Phase::Acquiring { .. } => {
                        self.read(&mut state, c, 0);
                        return Some(state);
                    }
                    Phase::Holding { slot, write, .. } => {
                        let (slot, expect) = (*slot, Some((c as u8, *write)));
                        self.put(&mut state, c, slot, expect, false, false)
                    }
                    Phase::Releasing {
                        slot,
                        write,
                        hold_for,
                        ..
                    } => {
                        let (slot, expect) = (*slot, Some((c as u8, *write)));
                        let hold_for = *hold_for;
                        let now = self.clock(&state, c);
                        // Within a min hold, the final write: held, until the
                        // min hold's end on this client's wall clock.
                        let mut op =
                            self.put(&mut state, c, slot, expect, hold_for.is_none(), false);
                        let Op::Put {
                            write, final_until, ..
                        } = &mut op;
                        *final_until = hold_for.map(|rest| now + rest);
                        if let Phase::Releasing { own, .. } = &mut state.clients[c].phase {
                            own.push((*write, now));
                        }
                        op
                    }
                    _ => return None,
                };
                self.send(&mut state, c, op);
            }
            Action::Release(c) => {
                let Phase::Holding {
                    slot,
                    write,
                    confirmed,
                    fence,
                    pending,
                } = state.clients[c].phase.clone()
                else {
                    return None;
                };
                // Let go first: from here on the lock reads as released.
                let now = self.clock(&state, c);
                let hold_for = self.rest_of_min_hold(&state.clients[c], now);
                state.clients[c].phase = Phase::Releasing {
                    slot,
                    write,
                    confirmed,
                    fence,
                    pending,
                    own: Vec::new(),
                    tries: 0,
                    hold_for,
                };
                return self.step(&state, Action::Send(c));
            }
            Action::HandOff(c) => {
                let Phase::Holding { slot, write, .. } = state.clients[c].phase else {
                    return None;
                };
                // Let go first (the holding task reads as released), then the
                // next task writes on the version handed, for the next fence.
                let client = &mut state.clients[c];
                client.handed_off = true;
                client.wants_max_hold = false;
                client.max_hold_from = None;
                client.wants_min_hold = false;
                client.min_hold_from = None;
                client.phase = Phase::Acquiring {
                    from: client.writes,
                    seen: vec![None; self.permits],
                    unresolved: Vec::new(),
                    handed: Some(write),
                };
                let op = self.put(&mut state, c, slot, Some((c as u8, write)), false, true);
                self.send(&mut state, c, op);
            }
            Action::Apply(c) | Action::ApplyTwice(c) => {
                let op = state.clients[c].call.as_ref()?.op.clone();
                let stamp = self.stamp(&state);
                let mut answer = apply(&mut state, c as u8, &op, stamp);
                if action == Action::ApplyTwice(c) {
                    // A retry inside the store's client reaches the store
                    // too; the caller gets the retry's answer.
                    state.faults_left -= 1;
                    answer = apply(&mut state, c as u8, &op, stamp);
                }
                if let Some(call) = state.clients[c].call.as_mut() {
                    call.answer = Some(answer);
                }
            }
            Action::LoseRequest(c) => {
                state.faults_left -= 1;
                let call = state.clients[c].call.as_mut()?;
                call.answer = Some(Answer::Ambiguous);
                let op = call.op.clone();
                state.strays.push((c as u8, op));
                state.strays.sort();
            }
            Action::LoseAnswer(c) => {
                state.faults_left -= 1;
                state.clients[c].call.as_mut()?.answer = Some(Answer::Ambiguous);
            }
            Action::DelayAnswer(c) => {
                state.faults_left -= 1;
                state.clients[c].call.as_mut()?.late = true;
            }
            Action::ApplyStray(i) => {
                let (writer, op) = state.strays.remove(i);
                let stamp = self.stamp(&state);
                apply(&mut state, writer, &op, stamp);
            }
            Action::Crash(c) => {
                state.faults_left -= 1;
                let client = &mut state.clients[c];
                if let Some(Call {
                    op, answer: None, ..
                }) = client.call.take()
                {
                    state.strays.push((c as u8, op));
                    state.strays.sort();
                }
                client.phase = Phase::Crashed;
            }
            Action::Receive(c) => self.receive(&mut state, c),
        }
        Some(state)
    }

    fn send(&self, state: &mut State, c: usize, op: Op) {
        let sent = self.clock(state, c);
        // A semaphore's store applies a write the instant it is sent: see
        // `with_permits`.
        let stamp = self.stamp(state);
        let answer = (self.permits > 1).then(|| apply(state, c as u8, &op, stamp));
        state.clients[c].call = Some(Call {
            op,
            sent,
            answer,
            late: false,
        });
    }

    /// Client `c` begins an acquisition (asking for a max or min hold, as
    /// `action` says).
    fn begin(&self, state: &mut State, c: usize, action: &Action) {
        let client = &mut state.clients[c];
        client.acquisitions += 1;
        client.wants_max_hold = *action == Action::BeginWithMaxHold(c);
        client.max_hold_from = None;
        client.wants_min_hold = *action == Action::BeginWithMinHold(c);
        client.min_hold_from = None;
        client.phase = Phase::Acquiring {
            from: client.writes,
            seen: vec![None; self.permits],
            unresolved: Vec::new(),
            handed: None,
        };
    }

    /// A put to `slot` with the client's next write number.
    fn put(
        &self,
        state: &mut State,
        c: usize,
        slot: u8,
        expect: Option<(u8, u16)>,
        released: bool,
        next_fence: bool,
    ) -> Op {
        let client = &mut state.clients[c];
        let write = client.writes;
        client.writes += 1;
        Op::Put {
            slot,
            expect,
            write,
            released,
            next_fence,
            final_until: None,
        }
    }

    fn receive(&self, state: &mut State, c: usize) {
        let Some(Call {
            op,
            sent,
            answer: Some(answer),
            ..
        }) = state.clients[c].call.take()
        else {
            return;
        };
        let now = self.clock(state, c);
        let phase = state.clients[c].phase.clone();
        match phase {
            Phase::Acquiring {
                from,
                seen,
                mut unresolved,
                handed,
            } => match (answer, &op) {
                (Answer::Applied(stored), Op::Put { slot, .. }) => {
                    let confirmed = self.confirmed(None, c, stored.write, sent, now);
                    self.granted(state, c, *slot, stored.write, confirmed, stored.fence);
                }
                (Answer::Ambiguous, Op::Put { slot, write, .. }) => {
                    unresolved.push((*slot, *write, sent));
                    state.clients[c].phase = Phase::Acquiring {
                        from,
                        seen,
                        unresolved,
                        handed,
                    };
                }
                (Answer::Rejected(current), op) => {
                    // A rejection showing this very write (a store's retry
                    // of a write that applied) leaves it a candidate;
                    // otherwise it surely did not apply.
                    let Op::Put { slot, write, .. } = op;
                    if let Some(stored) = &current
                        && stored.writer == c as u8
                        && stored.write == *write
                    {
                        unresolved.push((*slot, *write, sent));
                    }
                    let mut acquiring = (from, seen, unresolved, handed);
                    let verdict = self.judge(state, c, &mut acquiring, *slot, current);
                    self.act(state, c, acquiring, *slot, verdict);
                }
            },
            Phase::Holding {
                slot,
                write,
                confirmed,
                fence,
                mut pending,
            } => {
                let Op::Put {
                    write: sent_write, ..
                } = op;
                match answer {
                    Answer::Applied(_) => {
                        state.clients[c].phase = Phase::Holding {
                            slot,
                            write: sent_write,
                            confirmed: self.confirmed(Some(confirmed), c, sent_write, sent, now),
                            fence,
                            pending: Vec::new(),
                        };
                    }
                    Answer::Ambiguous => {
                        pending.push((sent_write, sent));
                        state.clients[c].phase = Phase::Holding {
                            slot,
                            write,
                            confirmed,
                            fence,
                            pending,
                        };
                    }
                    Answer::Rejected(current) => {
                        // This write too may be what the store shows (its
                        // client's retry of a write that applied).
                        pending.push((sent_write, sent));
                        let writes = self.writes(c as u8, &pending);
                        let decided = replies::held_write_rejected(
                            Wants::Heartbeat,
                            Unresolved {
                                pending: &writes,
                                ambiguous_delete: false,
                                own: &[],
                                fence: Fence(fence),
                            },
                            current.as_ref().map(|stored| self.record(stored)),
                        );
                        let ours = current
                            .as_ref()
                            .is_some_and(|stored| stored.writer == c as u8);
                        match decided {
                            HeldRejection::Applied { rvn, sent, .. } => {
                                if !ours {
                                    state.violations.own_write_misjudged = true;
                                }
                                state.recognised_own = true;
                                state.clients[c].phase = Phase::Holding {
                                    slot,
                                    write: parse_rvn(&rvn).1,
                                    confirmed: self.confirmed(
                                        Some(confirmed),
                                        c,
                                        parse_rvn(&rvn).1,
                                        self.ms(sent),
                                        now,
                                    ),
                                    fence,
                                    pending: Vec::new(),
                                };
                            }
                            _ if self.broken == Break::RejectedTakenAsApplied => {
                                state.clients[c].phase = Phase::Holding {
                                    slot,
                                    write: sent_write,
                                    confirmed: sent,
                                    fence,
                                    pending: Vec::new(),
                                };
                            }
                            HeldRejection::Stolen { .. } | HeldRejection::Released => {
                                if ours
                                    && current.as_ref().is_some_and(|stored| {
                                        pending.iter().any(|(w, _)| *w == stored.write)
                                    })
                                {
                                    state.violations.own_write_misjudged = true;
                                }
                                state.clients[c].phase = Phase::Idle;
                            }
                        }
                    }
                }
            }
            Phase::Releasing {
                slot,
                write,
                confirmed,
                fence,
                mut pending,
                own,
                tries,
                hold_for,
            } => {
                let Op::Put {
                    write: sent_write, ..
                } = op;
                match answer {
                    Answer::Applied(_) => state.clients[c].phase = Phase::Idle,
                    Answer::Ambiguous => {
                        pending.push((sent_write, sent));
                        state.clients[c].phase = if tries + 1 >= 2 {
                            // It gives up; the lease runs out.
                            Phase::Idle
                        } else {
                            Phase::Releasing {
                                slot,
                                write,
                                confirmed,
                                fence,
                                pending,
                                own,
                                tries: tries + 1,
                                hold_for,
                            }
                        };
                    }
                    Answer::Rejected(current) => {
                        pending.push((sent_write, sent));
                        // The release's writes carry their final mark, as the
                        // store shows them.
                        let named = |write: u16, sent: u32| match hold_for {
                            Some(rest) => final_rvn(c as u8, write, sent + rest),
                            None => rvn(c as u8, write),
                        };
                        let writes: Vec<(Rvn, Instant)> = pending
                            .iter()
                            .map(|&(write, sent)| {
                                let ours = own.iter().any(|&(own, _)| own == write);
                                let name = if ours {
                                    named(write, sent)
                                } else {
                                    rvn(c as u8, write)
                                };
                                (name, self.instant(sent))
                            })
                            .collect();
                        let own_rvns: Vec<Rvn> = own
                            .iter()
                            .map(|&(write, sent)| named(write, sent))
                            .collect();
                        let wants = if hold_for.is_some() {
                            Wants::FinalHold
                        } else {
                            Wants::Released
                        };
                        let decided = replies::held_write_rejected(
                            wants,
                            Unresolved {
                                pending: &writes,
                                ambiguous_delete: false,
                                own: &own_rvns,
                                fence: Fence(fence),
                            },
                            current.as_ref().map(|stored| self.record(stored)),
                        );
                        state.clients[c].phase = match decided {
                            HeldRejection::Applied {
                                rvn, done: false, ..
                            } => Phase::Releasing {
                                slot,
                                write: parse_rvn(&rvn).1,
                                confirmed,
                                fence,
                                pending: Vec::new(),
                                own,
                                tries,
                                hold_for,
                            },
                            _ => Phase::Idle,
                        };
                    }
                }
            }
            Phase::Idle | Phase::Crashed => {}
        }
    }

    /// What an acquirer makes of `slot`'s record (read, or shown by a
    /// rejection): the crate's `acquire_finds`, then its sighting and
    /// takeover rules. It notes its sighting, and any misjudgement.
    fn judge(
        &self,
        state: &mut State,
        c: usize,
        (from, seen, unresolved, handed): &mut Acquiring,
        slot: u8,
        current: Option<Stored>,
    ) -> Verdict {
        let now = self.clock(state, c);
        let writes = self.writes_to(c as u8, slot, unresolved);
        let mine = |stored: &Stored| stored.writer == c as u8 && stored.write >= *from;
        let handed_rvn = handed.map(|write| rvn(c as u8, write));
        let seen = &mut seen[usize::from(slot)];
        let finds = replies::acquire_finds(
            current.as_ref().map(|stored| self.record(stored)),
            &writes,
            handed_rvn.as_ref(),
        );
        // The age the store's clock proves of the record, if it has one.
        let credit = current
            .as_ref()
            .map_or(Duration::ZERO, |stored| self.credit(state, stored, now));
        // A held record's sighting, as `watched` notes it: the first
        // sighting (as the model knows it) and the crate's observation.
        let mut watched: Option<(Seen, Observation)> = None;
        let judged = acquiring::judge(
            finds,
            self.instant(now),
            self.wall(now),
            |_| self.holder_timing(),
            |record| {
                let (first, observation) =
                    self.sight(current.as_ref(), seen.take(), record, now, credit);
                let takeover_at = self.waiter_timing().takeover_at(&observation);
                watched = Some((first, observation));
                takeover_at
            },
            self.broken.in_protocol(),
        );
        match judged {
            // Still the version handed over: write on it again.
            acquiring::Seen::Handed(_) => handed.map_or(Verdict::Wait, Verdict::Handed),
            acquiring::Seen::Free(_) => {
                if current.as_ref().is_some_and(mine) {
                    state.violations.own_write_misjudged = true;
                }
                *seen = None;
                *handed = None;
                Verdict::Free
            }
            acquiring::Seen::Hold { record, sent } => {
                let (writer, write) = parse_rvn(&record.rvn);
                if writer != c as u8 {
                    state.violations.own_write_misjudged = true;
                }
                let confirmed = self.confirmed(None, c, write, self.ms(sent), now);
                Verdict::Ours {
                    write,
                    confirmed,
                    fence: record.fence.0,
                }
            }
            acquiring::Seen::Renew(record) => {
                let (writer, write) = parse_rvn(&record.rvn);
                if writer != c as u8 {
                    state.violations.own_write_misjudged = true;
                }
                Verdict::Renew(write)
            }
            acquiring::Seen::Held { takeover_at, .. } => {
                let (Some(stored), Some((first, observation))) = (current, watched) else {
                    return Verdict::Wait;
                };
                if mine(&stored) {
                    state.violations.own_write_misjudged = true;
                }
                *handed = None;
                let due = self.instant(now) >= takeover_at;
                let bound = (LEASE_MS as f64 * (1.0 + DRIFT)).ceil() as u32;
                if due && stored.final_until.is_none() && now < first.at + bound {
                    state.took_over_by_credit = true;
                }
                if !due {
                    // Watched for lease × (1 + drift), counted on its own
                    // clock from its first sighting of this version (as the
                    // model knows it): it must take over.
                    // Or a final write whose min hold has ended on its wall
                    // clock, as the model knows it.
                    let hold_ended = stored.final_until.is_some_and(|until| now >= until);
                    if now >= first.at + bound || hold_ended {
                        state.violations.takeover_late = true;
                    }
                }
                // What the crate remembers: the sighting proving the version
                // oldest (the first one, without a store clock).
                *seen = Some(Seen {
                    at: self.ms(observation.seen_at),
                    credit: self.ms(self.base + observation.credit),
                    ..first
                });
                if due {
                    Verdict::Due(stored)
                } else {
                    Verdict::Wait
                }
            }
        }
    }

    /// A waiter's sighting of `record` (the model's `current`) at `now`:
    /// its first sighting of this version as the model knows it (`seen`,
    /// unless it is of another version), and the crate's observation, made
    /// by the crate's `Sightings` holding what this waiter remembers of the
    /// key (its first sighting, unless the rule is broken).
    fn sight(
        &self,
        current: Option<&Stored>,
        seen: Option<Seen>,
        record: &LockRecord,
        now: u32,
        credit: Duration,
    ) -> (Seen, Observation) {
        let (writer, write) = parse_rvn(&record.rvn);
        let first = match seen {
            Some(seen) if (seen.writer, seen.write) == (writer, write) => seen,
            _ => Seen {
                writer,
                write,
                at: now,
                credit: self.ms(self.base + credit),
            },
        };
        let sightings = Sightings::with_capacity(1);
        let remembered = Some(&first).filter(|_| self.broken != Break::ForgetsSightings);
        if let (Some(first), Some(stored)) = (remembered, current) {
            sightings.saw(
                &self.record(&Stored {
                    writer: first.writer,
                    write: first.write,
                    ..stored.clone()
                }),
                self.instant(first.at),
                Duration::from_millis(u64::from(first.credit)),
            );
        }
        let observation = sightings.saw(record, self.instant(now), credit).observation;
        (first, observation)
    }

    /// What an acquirer does with its verdict on `slot`.
    fn act(&self, state: &mut State, c: usize, acquiring: Acquiring, slot: u8, verdict: Verdict) {
        let (from, seen, unresolved, handed) = acquiring;
        // The version its next write expects (`None`: vacant), for the
        // verdicts that write while still acquiring.
        let expect = match verdict {
            Verdict::Handed(write) => {
                let op = self.put(state, c, slot, Some((c as u8, write)), false, true);
                self.send(state, c, op);
                return;
            }
            Verdict::Ours {
                write,
                confirmed,
                fence,
            } => {
                state.recognised_own = true;
                self.granted(state, c, slot, write, confirmed, fence);
                return;
            }
            Verdict::Free => None,
            Verdict::Renew(write) => {
                state.renewed_own = true;
                Some((c as u8, write))
            }
            Verdict::Due(stored) => {
                if state.clients[usize::from(stored.writer)].phase == Phase::Crashed {
                    state.took_over_crashed = true;
                }
                Some((stored.writer, stored.write))
            }
            Verdict::Wait => {
                state.clients[c].phase = Phase::Acquiring {
                    from,
                    seen,
                    unresolved,
                    handed,
                };
                return;
            }
        };
        state.clients[c].phase = Phase::Acquiring {
            from,
            seen,
            unresolved,
            handed,
        };
        let op = self.put(state, c, slot, expect, false, true);
        self.send(state, c, op);
    }

    /// Client `c` holds `slot` with `fence`.
    fn granted(
        &self,
        state: &mut State,
        c: usize,
        slot: u8,
        write: u16,
        confirmed: u32,
        fence: u64,
    ) {
        let client = &mut state.clients[c];
        // A max hold counts from the send of the write that acquired.
        client.max_hold_from = client.wants_max_hold.then_some(confirmed);
        client.min_hold_from = client.wants_min_hold.then_some(confirmed);
        state.clients[c].phase = Phase::Holding {
            slot,
            write,
            confirmed,
            fence,
            pending: Vec::new(),
        };
    }
}

impl Verdict {
    /// Which verdict a poll acts on first: a write of its own, then a free
    /// slot, then a takeover (the lowest).
    fn rank(&self) -> u8 {
        match self {
            Verdict::Handed(_) | Verdict::Ours { .. } | Verdict::Renew(_) => 0,
            Verdict::Free => 1,
            Verdict::Due(_) => 2,
            Verdict::Wait => 3,
        }
    }
}

/// Every reference to a write number of client `writer` in `state`, handed
/// to `visit` (the acquirer's `from` threshold is not one: see
/// [`renumber_writes`]).
fn visit_writes(state: &mut State, visit: &mut impl FnMut(u8, &mut u16)) {
    fn op(writer: u8, op: &mut Op, visit: &mut impl FnMut(u8, &mut u16)) {
        let Op::Put { expect, write, .. } = op;
        visit(writer, write);
        if let Some((owner, version)) = expect {
            visit(*owner, version);
        }
    }
    for stored in state.store.iter_mut().flatten() {
        visit(stored.writer, &mut stored.write);
    }
    for (writer, stray) in &mut state.strays {
        op(*writer, stray, visit);
    }
    for (c, client) in state.clients.iter_mut().enumerate() {
        let c = c as u8;
        if let Some(call) = &mut client.call {
            op(c, &mut call.op, visit);
            if let Some(Answer::Applied(stored) | Answer::Rejected(Some(stored))) = &mut call.answer
            {
                visit(stored.writer, &mut stored.write);
            }
        }
        match &mut client.phase {
            Phase::Acquiring {
                seen,
                unresolved,
                handed,
                ..
            } => {
                for seen in seen.iter_mut().flatten() {
                    visit(seen.writer, &mut seen.write);
                }
                if let Some(handed) = handed {
                    visit(c, handed);
                }
                for (_, write, _) in unresolved {
                    visit(c, write);
                }
            }
            Phase::Holding { write, pending, .. } => {
                visit(c, write);
                for (write, _) in pending {
                    visit(c, write);
                }
            }
            Phase::Releasing {
                write,
                pending,
                own,
                ..
            } => {
                visit(c, write);
                for (write, _) in pending {
                    visit(c, write);
                }
                for (write, _) in own {
                    visit(c, write);
                }
            }
            Phase::Idle | Phase::Crashed => {}
        }
    }
}

/// Write numbers only name writes: two states that differ only in how many
/// writes are behind them (a heartbeat more or less, long since replaced)
/// behave alike. So each client's numbers still referenced are renumbered
/// 0, 1, 2, … in their order (an acquirer's `from` kept between the same
/// ones), and its next number follows them. Equality and order between
/// numbers, all the model and the decisions ever look at, are unchanged.
fn renumber_writes(state: &mut State) {
    let clients = state.clients.len();
    let mut used: Vec<Vec<u16>> = vec![Vec::new(); clients];
    visit_writes(state, &mut |writer, write| {
        if let Some(list) = used.get_mut(usize::from(writer)) {
            list.push(*write);
        }
    });
    for list in &mut used {
        list.sort_unstable();
        list.dedup();
    }
    let rank = |list: &[u16], write: u16| list.partition_point(|&used| used < write) as u16;
    visit_writes(state, &mut |writer, write| {
        if let Some(list) = used.get(usize::from(writer)) {
            *write = rank(list, *write);
        }
    });
    for (c, client) in state.clients.iter_mut().enumerate() {
        let list = &used[c];
        if let Phase::Acquiring { from, .. } = &mut client.phase {
            *from = rank(list, *from);
        }
        client.writes = list.len() as u16;
    }
}

/// The state with its clients renamed (client `c` becomes `clients[c]`) and
/// its slots too (slot `s` becomes `slots[s]`).
fn relabel(state: &State, clients: &[u8], slots: &[u8]) -> State {
    let client = |c: u8| clients[usize::from(c)];
    let slot = |s: u8| slots[usize::from(s)];
    let op = |op: &Op| {
        let Op::Put {
            slot: written,
            expect,
            write,
            released,
            next_fence,
            final_until,
        } = op.clone();
        Op::Put {
            slot: slot(written),
            expect: expect.map(|(owner, version)| (client(owner), version)),
            write,
            released,
            next_fence,
            final_until,
        }
    };
    let stored = |stored: &Stored| Stored {
        writer: client(stored.writer),
        ..stored.clone()
    };
    let by_slot = |index: usize| {
        slots
            .iter()
            .position(|&to| usize::from(to) == index)
            .unwrap_or(index)
    };
    let mut renamed = state.clone();
    renamed.store = (0..state.store.len())
        .map(|s| state.store[by_slot(s)].as_ref().map(stored))
        .collect();
    renamed.highest_fence = (0..state.highest_fence.len())
        .map(|s| state.highest_fence[by_slot(s)])
        .collect();
    renamed.strays = state
        .strays
        .iter()
        .map(|(writer, sent)| (client(*writer), op(sent)))
        .collect();
    renamed.strays.sort();
    for (c, old) in state.clients.iter().enumerate() {
        let mut new = old.clone();
        if let Some(call) = &mut new.call {
            call.op = op(&call.op);
            call.answer = match &call.answer {
                Some(Answer::Applied(written)) => Some(Answer::Applied(stored(written))),
                Some(Answer::Rejected(current)) => {
                    Some(Answer::Rejected(current.as_ref().map(stored)))
                }
                other => other.clone(),
            };
        }
        match &mut new.phase {
            Phase::Acquiring {
                seen, unresolved, ..
            } => {
                let old_seen = seen.clone();
                *seen = (0..old_seen.len())
                    .map(|s| {
                        old_seen[by_slot(s)].as_ref().map(|sighting| Seen {
                            writer: client(sighting.writer),
                            ..sighting.clone()
                        })
                    })
                    .collect();
                for unsure in unresolved.iter_mut() {
                    unsure.0 = slot(unsure.0);
                }
            }
            Phase::Holding { slot: held, .. } | Phase::Releasing { slot: held, .. } => {
                *held = slot(*held);
            }
            Phase::Idle | Phase::Crashed => {}
        }
        renamed.clients[usize::from(client(c as u8))] = new;
    }
    renamed
}

/// Clients are alike but for their clock and what they did; a semaphore's
/// slots are alike but for their records. Two states that differ only by
/// the names of clients or slots behave alike, so the checker keeps one of
/// them: the least of the renamings that keep the slow clocks' clients
/// first (as every initial state has them, so every state does).
fn canonical(state: &State) -> State {
    let rate = |c: usize| state.clients[c].rate;
    let mut best: Option<State> = None;
    let keep_clocks =
        |clients: &Vec<u8>| (0..clients.len()).all(|c| rate(c) == rate(usize::from(clients[c])));
    for clients in permutations(state.clients.len())
        .into_iter()
        .filter(keep_clocks)
    {
        for slots in permutations(state.store.len()) {
            let renamed = relabel(state, &clients, &slots);
            if best.as_ref().is_none_or(|best| renamed < *best) {
                best = Some(renamed);
            }
        }
    }
    best.unwrap_or_else(|| state.clone())
}

/// Every order of `0..n`.
fn permutations(n: usize) -> Vec<Vec<u8>> {
    let mut all = vec![Vec::new()];
    for next in 0..n as u8 {
        all = all
            .into_iter()
            .flat_map(|partial: Vec<u8>| {
                (0..=partial.len()).map(move |at| {
                    let mut longer = partial.clone();
                    longer.insert(at, next);
                    longer
                })
            })
            .collect();
    }
    all
}
