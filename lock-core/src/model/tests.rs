use stateright::{Checker, Model};

use super::fleet::{Action, State};
use super::fleet::{FAST, SLOW};
use super::{Break, Fleet};

/// Ticks of real time explored: long enough for a crashed holder's lease to
/// be waited out by the slowest waiter (25 ms at 3 ms a tick) after it held
/// the lock.
const HORIZON: u32 = 9;
const MUTUAL_EXCLUSION: &str =
    "mutual exclusion of trust: never two holders that both trust their lease";
const LIVENESS: &str = "liveness: a released lock is taken at once, a crashed holder's within L(1+d) of the first sighting";

fn explore(fleet: Fleet) -> impl Checker<Fleet> {
    let size = (
        fleet.clients,
        fleet.permits,
        fleet.horizon,
        fleet.faults,
        fleet.broken,
    );
    let started = std::time::Instant::now();
    let clock_too_fast = fleet.store_clock.is_some_and(|rate| rate > FAST);
    let mut builder = fleet.checker().threads(2);
    if size.4 != Break::Nothing || clock_too_fast {
        // A broken rule: the first schedule with two trusted holders is the
        // answer.
        builder = builder.finish_when(stateright::HasDiscoveries::AnyOf(
            std::collections::BTreeSet::from([MUTUAL_EXCLUSION, LIVENESS]),
        ));
    } else {
        // Every rule kept: the first counterexample found ends the run (and
        // is printed), instead of the search going on past it.
        builder = builder.finish_when(stateright::HasDiscoveries::AnyFailures);
    }
    let large = std::env::var("LOCK_MODEL").as_deref() == Ok("large");
    if !large {
        // A rule that makes the schedules grow (one that loops, leaving more
        // to resolve each turn) would explore until memory runs out: stop
        // at a budget far above every default run's measured size instead.
        builder = builder.target_state_count(STATE_BUDGET);
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "model {size:?}: {} states, {} unique, depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    // A counterexample found on the way is the answer (printed by the
    // caller); "sometimes" examples, found early, are not.
    let failed = checker.discoveries().keys().any(|name| {
        matches!(
            checker.discovery_classification(name),
            stateright::DiscoveryClassification::Counterexample
        )
    });
    assert!(
        large || failed || checker.state_count() < STATE_BUDGET,
        "model {size:?}: stopped at {} states, over the budget of {STATE_BUDGET} (the largest default \
         run explores about 26 million): the schedules grew far past their size, which a rule that \
         loops does; no property was violated on the way (depth {})",
        checker.state_count(),
        checker.max_depth()
    );
    checker
}

/// The most states a default run may explore (the largest explores about
/// 26 million, 8.6 million of them distinct, in 1.3 GB): well above every
/// one, well below what the machine's memory holds.
const STATE_BUDGET: usize = 80_000_000;

/// A counterexample as a reader follows it: each step and the state after.
fn trace(path: stateright::Path<State, Action>) -> String {
    path.into_vec()
        .into_iter()
        .map(|(state, action)| match action {
            Some(action) => format!("{state:?}\n  --{action:?}-->"),
            None => format!("{state:?}"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A counterexample as `lock-core/tests/replay.rs` replays it on real
/// clients: each client's clock, then the steps, a stray request named by
/// the client that sent it.
fn step_list(path: &stateright::Path<State, Action>) -> String {
    let steps = path.clone().into_vec();
    if steps
        .iter()
        .any(|(_, action)| matches!(action, Some(Action::Poll(..))))
    {
        return "none: a semaphore's clients and slots are renamed at each step".to_string();
    }
    let clocks = steps
        .first()
        .map(|(state, _)| state.clock_names().join(" "))
        .unwrap_or_default();
    let actions: Vec<String> = steps
        .iter()
        .filter_map(|(state, action)| {
            Some(match action.as_ref()? {
                Action::ApplyStray(i) => format!("ApplyStray({})", state.stray_writer(*i)?),
                action => format!("{action:?}"),
            })
        })
        .collect();
    format!("clocks: {clocks}; steps: {}", actions.join(" "))
}

/// No property has a counterexample; each one found is printed step by step.
fn assert_no_counterexample(checker: &impl Checker<Fleet>) {
    for (name, path) in checker.discoveries() {
        let classification = checker.discovery_classification(name);
        assert!(
            !matches!(
                classification,
                stateright::DiscoveryClassification::Counterexample
            ),
            "{name}: counterexample\n{}\nreplay: {}",
            trace(path.clone()),
            step_list(&path)
        );
    }
}

#[test]
fn every_schedule_of_two_clients_with_faults_keeps_every_invariant() {
    let checker = explore(Fleet::new(2, HORIZON, 1, 1, Break::Nothing));
    assert_no_counterexample(&checker);
    // And the schedules worth having are there: a crashed holder taken
    // over, an ambiguous write found applied.
    checker.assert_properties();
}

/// On a store that reports each record's age on its own clock (as
/// PostgreSQL does), waiters credit it and take a crashed holder's lock as
/// soon as its lease has passed on that clock. With the store's clock at
/// either end of the drift bound (the fast end proves records oldest, the
/// worst case): no two holders trust the lock, and a holder that stopped
/// heartbeating is taken over sooner than watching would allow. Without
/// faults (4.7 million states at the fast end); `LOCK_MODEL=large` adds one
/// fault per schedule (150 million states, about 4.5 minutes).
#[test]
fn every_schedule_of_two_clients_on_a_store_clock_keeps_every_invariant() {
    for rate in [FAST, SLOW] {
        let checker = explore(Fleet::new(2, HORIZON, 0, 1, Break::Nothing).with_store_clock(rate));
        assert_no_counterexample(&checker);
        // (A holder that stops heartbeating is a crash without a fault.)
        let reached =
            "a record the store's clock proves old is taken over before watching it would allow";
        assert!(
            checker.discovery(reached).is_some(),
            "{rate} ms a tick: never {reached}"
        );
    }
}

/// `LOCK_MODEL=large`: the store clock at the fast end of the drift bound,
/// with one fault per schedule.
#[test]
fn a_store_clock_with_faults_when_asked() {
    if std::env::var("LOCK_MODEL").as_deref() != Ok("large") {
        eprintln!("skipped: LOCK_MODEL=large runs a store clock with faults (about 4.5 minutes)");
        return;
    }
    assert_no_counterexample(&explore(
        Fleet::new(2, HORIZON, 1, 1, Break::Nothing).with_store_clock(FAST),
    ));
}

/// A store clock running twice as fast as true time (far beyond the drift
/// bound, as a clock stepped forward looks) proves a live holder's record
/// old: two holders trust the lock.
#[test]
fn a_store_clock_beyond_the_drift_bound_is_caught() {
    let checker = explore(Fleet::new(2, HORIZON, 0, 1, Break::Nothing).with_store_clock(8));
    let discovery = checker
        .discovery(MUTUAL_EXCLUSION)
        .unwrap_or_else(|| panic!("a store clock twice as fast lets a waiter take a live lock"));
    eprintln!("{}", trace(discovery));
}

/// Acquisitions with and without a min hold: a release before it ends is a
/// final write that keeps the lock held to its end (on the wall clock), and a
/// waiter takes it from then on. Without faults.
#[test]
fn every_schedule_of_two_clients_with_min_holds_keeps_every_invariant() {
    assert_no_counterexample(&explore(
        Fleet::new(2, HORIZON, 0, 1, Break::Nothing).with_min_hold(),
    ));
}

/// A waiter that ignores the end of a final write's min hold (and waits as
/// for a dead holder) passes up a lock it may take: the liveness property
/// finds the schedule.
#[test]
fn a_waiter_that_ignores_the_end_of_a_min_hold_is_caught() {
    let checker = explore(Fleet::new(2, HORIZON, 0, 1, Break::IgnoresFinalHold).with_min_hold());
    let path = checker
        .discovery(LIVENESS)
        .unwrap_or_else(|| panic!("no schedule passed up an ended min hold"));
    eprintln!(
        "IgnoresFinalHold: counterexample\n{}\nreplay: {}",
        trace(path.clone()),
        step_list(&path)
    );
}

/// Leader election: each candidate campaigns, leads, steps down (a
/// resignation, or a lease in danger: the release path, deposed before the
/// write) and campaigns again; a leader is trusted while its lease is safe
/// and it has not stepped down (`Leadership::is_safe`), which is the trust
/// mutual exclusion checks. Two campaigns per candidate, without faults
/// here; with one, `LOCK_MODEL=large`.
#[test]
fn every_schedule_of_two_candidates_campaigning_twice_keeps_every_invariant() {
    assert_no_counterexample(&explore(Fleet::new(2, HORIZON, 0, 2, Break::Nothing)));
}

/// `LOCK_MODEL=large`: two campaigns per candidate with one fault per
/// schedule (44 million states, about 4 minutes).
#[test]
fn campaigns_with_faults_when_asked() {
    if std::env::var("LOCK_MODEL").as_deref() != Ok("large") {
        eprintln!("skipped: LOCK_MODEL=large runs two campaigns with faults (about 4 minutes)");
        return;
    }
    assert_no_counterexample(&explore(Fleet::new(2, HORIZON, 1, 2, Break::Nothing)));
}

/// A holder may hand the lock to another task of its client (the release's
/// hand-off: the next task writes on the version handed, for the next
/// fence). Without faults here; with one, `LOCK_MODEL=large`.
#[test]
fn every_schedule_of_two_clients_with_hand_offs_keeps_every_invariant() {
    let checker = explore(Fleet::new(2, HORIZON, 0, 1, Break::Nothing).with_hand_offs());
    assert_no_counterexample(&checker);
}

/// `LOCK_MODEL=large`: hand-offs with one fault per schedule (22 million
/// states, about 2½ minutes).
#[test]
fn hand_offs_with_faults_when_asked() {
    if std::env::var("LOCK_MODEL").as_deref() != Ok("large") {
        eprintln!("skipped: LOCK_MODEL=large runs hand-offs with faults (about 2½ minutes)");
        return;
    }
    assert_no_counterexample(&explore(
        Fleet::new(2, HORIZON, 1, 1, Break::Nothing).with_hand_offs(),
    ));
}

/// Acquisitions with and without a max hold (heartbeats stop and trust ends
/// at it), without faults: faults on top are the large run's.
#[test]
fn every_schedule_of_two_clients_with_max_holds_keeps_every_invariant() {
    assert_no_counterexample(&explore(
        Fleet::new(2, HORIZON, 0, 1, Break::Nothing).with_max_hold(),
    ));
}

/// `LOCK_MODEL=large`: three clients. `LOCK_MODEL_HORIZON` (ticks, default
/// 9) and `LOCK_MODEL_FAULTS` (per schedule, default 0) change its size.
#[test]
fn three_clients_when_asked() {
    if std::env::var("LOCK_MODEL").as_deref() != Ok("large") {
        eprintln!("skipped: LOCK_MODEL=large runs 3 clients (about 4 minutes, 9 GB)");
        return;
    }
    let horizon = setting("LOCK_MODEL_HORIZON", HORIZON);
    let faults = u8::try_from(setting("LOCK_MODEL_FAULTS", 0)).unwrap_or(0);
    assert_no_counterexample(&explore(Fleet::new(3, horizon, faults, 1, Break::Nothing)));
}

/// The shortest schedule in which `property` fails with `broken`, printed
/// step by step; the fleet and the schedule's last state.
fn counterexample(broken: Break, property: &'static str) -> (Fleet, State) {
    let checker = explore(Fleet::new(2, HORIZON, 1, 1, broken));
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{broken:?}: no schedule broke \"{property}\""));
    let last = path.last_state().clone();
    eprintln!(
        "{broken:?}: counterexample\n{}\nreplay: {}",
        trace(path.clone()),
        step_list(&path)
    );
    (checker.model().clone(), last)
}

/// Each rule, broken on purpose, lets two holders trust the lock at once in
/// some schedule, and the checker finds it.
fn finds_two_trusted_holders(broken: Break) {
    let (fleet, last) = counterexample(broken, MUTUAL_EXCLUSION);
    let trusting = (0..last.clients.len())
        .filter(|&c| fleet.trusts(&last, c))
        .count();
    assert_eq!(
        trusting, 2,
        "the counterexample ends with two trusted holders"
    );
}

#[test]
fn taking_over_after_the_lease_instead_of_lease_times_one_plus_drift_is_caught() {
    finds_two_trusted_holders(Break::TakeoverAfterLease);
}

#[test]
fn a_safe_time_not_shortened_by_the_drift_bound_is_caught() {
    finds_two_trusted_holders(Break::SafeTimeWithoutDrift);
}

#[test]
fn counting_the_lease_from_the_reply_instead_of_the_send_is_caught() {
    finds_two_trusted_holders(Break::LeaseFromReply);
}

#[test]
fn a_rejected_heartbeat_taken_as_applied_is_caught() {
    finds_two_trusted_holders(Break::RejectedTakenAsApplied);
}

#[test]
fn a_release_that_lets_go_after_sending_is_caught() {
    finds_two_trusted_holders(Break::ReleaseUnsafeAfterSend);
}

/// A waiter that forgets its first sighting at each poll never takes over a
/// crashed holder: the liveness property finds the schedule.
#[test]
fn a_waiter_that_restarts_its_count_at_every_poll_is_caught() {
    counterexample(Break::ForgetsSightings, LIVENESS);
}

/// A semaphore of two permits, three clients polling its slots, one fault
/// per schedule (a crash, a lost answer or one held back): never more
/// trusted holders than permits, nor two on one slot; fences rise per slot;
/// a free permit is taken at once and a crashed holder's in time; all
/// permits are held at once in some schedule. About 6 million states.
/// `LOCK_MODEL_HORIZON` and `LOCK_MODEL_FAULTS` change its size.
#[test]
fn every_schedule_of_three_clients_on_two_permits_keeps_every_invariant() {
    let horizon = setting("LOCK_MODEL_HORIZON", HORIZON);
    let faults = u8::try_from(setting("LOCK_MODEL_FAULTS", 1)).unwrap_or(1);
    let checker = explore(Fleet::new(3, horizon, faults, 1, Break::Nothing).with_permits(2));
    assert_no_counterexample(&checker);
    checker.assert_properties();
}

/// The semaphore's poll decides with the lock's rules, so a broken one
/// breaks it too: taking a permit over after its lease lets two clients
/// trust one slot.
#[test]
fn a_semaphore_taking_over_after_the_lease_is_caught() {
    let checker = explore(Fleet::new(3, HORIZON, 1, 1, Break::TakeoverAfterLease).with_permits(2));
    let path = checker
        .discovery(MUTUAL_EXCLUSION)
        .unwrap_or_else(|| panic!("no schedule let two clients trust one permit"));
    eprintln!(
        "TakeoverAfterLease on a semaphore: counterexample\n{}",
        trace(path)
    );
}

/// A number from the environment, or `default`.
fn setting(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}
