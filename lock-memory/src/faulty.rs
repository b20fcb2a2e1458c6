//! [`FaultyStore`]: a wrapper that injects faults into calls to any
//! [`ConditionalStore`].

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::layer::{StoreCall, StoreLayer, StoreReply};
use lock_core::{ConditionalStore, LockKey, StoreError};
use tokio::time::Instant;

use crate::capacity::{Bucket, WriteCapacity};
use crate::faults::{Fault, FaultConfig, FaultEvent, FaultSource};
use crate::history::Bounded;
use crate::{DEFAULT_HISTORY_CAPACITY, Op};

/// Wraps any [`ConditionalStore`] and disturbs its calls: delays, throttling,
/// failures before the call is applied, and ambiguous failures after it was
/// applied (the response is lost) or before.
///
/// For every call, in this order of precedence:
///
/// 1. While [switched off](Self::set_unavailable), every call fails with
///    `Unavailable` at once and never reaches the store.
/// 2. Otherwise the first [scripted](Self::script) fault queued for this
///    [`Op`] is consumed and injected.
/// 3. Otherwise a write (`put`, `delete`) beyond the
///    [write capacity](Self::with_write_capacity), if one is set, is throttled.
/// 4. Otherwise a fault and a delay are drawn from the seeded generator and the
///    [`FaultConfig`] for reads (`get`, `list`) or writes (`put`, `delete`).
///
/// Given the seed and the order of calls, the faults injected are always the
/// same: replay a failing run by reusing its [`seed`](Self::seed) (also shown by
/// `Debug`). Clones share the generator, the script, the switch and the record of
/// injected faults, so a test can keep a handle on a store it handed to a client.
/// Every call is recorded as a [`FaultEvent`] in [`faults`](Self::faults), which
/// keeps the last [`DEFAULT_HISTORY_CAPACITY`] (10,000) events unless
/// [`with_history_capacity`](Self::with_history_capacity) says otherwise.
pub struct FaultyStore<S> {
    inner: Arc<S>,
    seed: u64,
    faults: Injector,
}

/// The layer that decides each call's fault and injects it; its state is
/// shared by every clone of the store.
#[derive(Clone)]
struct Injector {
    shared: Arc<Mutex<State>>,
}

impl fmt::Debug for Injector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Injector")
    }
}

struct State {
    rng: fastrand::Rng,
    reads: FaultConfig,
    writes: FaultConfig,
    script: VecDeque<(Op, Fault)>,
    unavailable: bool,
    /// The write-capacity limit, if any.
    capacity: Option<Bucket>,
    events: Bounded<FaultEvent>,
    /// Calls and disturbed calls since the last `clear_faults`, counted apart from
    /// `events` so they stay exact when it drops events or keeps none.
    calls: usize,
    injected: usize,
    next_seq: u64,
}

impl<S> Clone for FaultyStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            seed: self.seed,
            faults: self.faults.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("FaultyStore")
            .field("seed", &self.seed)
            .field("unavailable", &state.unavailable)
            .field("reads", &state.reads)
            .field("writes", &state.writes)
            .field("scripted", &state.script.len())
            .field("calls", &state.calls)
            .field("inner", &self.inner)
            .finish()
    }
}

impl<S> FaultyStore<S> {
    /// Wrap `inner`, drawing random faults from a generator seeded with `seed`.
    /// No random faults are configured yet: until
    /// [`with_faults`](Self::with_faults) or a setter says otherwise, only scripted
    /// faults and the outage switch disturb calls.
    pub fn new(inner: S, seed: u64) -> Self {
        Self::from_arc(Arc::new(inner), seed)
    }

    /// Wrap a store that is already shared.
    pub fn from_arc(inner: Arc<S>, seed: u64) -> Self {
        Self {
            inner,
            seed,
            faults: Injector {
                shared: Arc::new(Mutex::new(State {
                    rng: fastrand::Rng::with_seed(seed),
                    reads: FaultConfig::NONE,
                    writes: FaultConfig::NONE,
                    script: VecDeque::new(),
                    unavailable: false,
                    capacity: None,
                    events: Bounded::new(DEFAULT_HISTORY_CAPACITY),
                    calls: 0,
                    injected: 0,
                    next_seq: 0,
                })),
            },
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.faults.state()
    }

    /// The seed the random faults are drawn from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Keep the last `events` calls in [`faults`](Self::faults) (default
    /// [`DEFAULT_HISTORY_CAPACITY`], 10,000), dropping the oldest first; `0`
    /// records none. [`calls`](Self::calls) and [`injected`](Self::injected) count
    /// every call whatever is kept, and [`FaultEvent::seq`] numbers each call among
    /// all of them. Shared by clones, like everything else.
    pub fn with_history_capacity(self, events: usize) -> Self {
        self.state().events.set_capacity(events);
        self
    }

    /// The same random faults for reads and writes.
    pub fn with_faults(self, config: FaultConfig) -> Self {
        self.set_read_faults(config);
        self.set_write_faults(config);
        self
    }

    /// Random faults for `get` and `list`.
    pub fn with_read_faults(self, config: FaultConfig) -> Self {
        self.set_read_faults(config);
        self
    }

    /// Random faults for `put` and `delete`.
    pub fn with_write_faults(self, config: FaultConfig) -> Self {
        self.set_write_faults(config);
        self
    }

    /// Change the random faults for `get` and `list` from now on.
    pub fn set_read_faults(&self, config: FaultConfig) {
        self.state().reads = config;
    }

    /// Change the random faults for `put` and `delete` from now on.
    pub fn set_write_faults(&self, config: FaultConfig) {
        self.state().writes = config;
    }

    /// Limit writes to `capacity` (a token bucket in tokio time): a `put` or
    /// `delete` beyond it fails with `Throttled` before it reaches the store and
    /// consumes nothing, as DynamoDB throttles a table or partition over its
    /// write capacity. Scripted faults and outages come first and are not
    /// charged; random faults are drawn only for writes within the capacity.
    pub fn with_write_capacity(self, capacity: WriteCapacity) -> Self {
        self.set_write_capacity(Some(capacity));
        self
    }

    /// Set (a full bucket) or remove the write-capacity limit from now on.
    pub fn set_write_capacity(&self, capacity: Option<WriteCapacity>) {
        self.state().capacity = capacity.map(|capacity| Bucket::new(capacity, Instant::now()));
    }

    /// Queue `fault` for the next call of `op` that finds no earlier fault queued
    /// for it. Scripted faults of one op are consumed in the order they were
    /// queued, and take precedence over random faults.
    pub fn script(&self, op: Op, fault: Fault) {
        self.state().script.push_back((op, fault));
    }

    /// Scripted faults not consumed yet.
    pub fn scripted(&self) -> usize {
        self.state().script.len()
    }

    /// Drop every scripted fault not consumed yet.
    pub fn clear_script(&self) {
        self.state().script.clear();
    }

    /// Switch the store off (`true`: every call fails with `Unavailable` and never
    /// reaches the wrapped store) or back on. Scripted faults wait for the store
    /// to come back, and no random numbers are drawn during the outage.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.state().unavailable = unavailable;
    }

    /// True while the store is switched off.
    pub fn is_unavailable(&self) -> bool {
        self.state().unavailable
    }

    /// What was done to every call since the last
    /// [`clear_faults`](Self::clear_faults), in call order: to the most recent
    /// ones only when there were more than the
    /// [capacity](Self::with_history_capacity), and to none when it is 0. Identify
    /// an event by its [`seq`](FaultEvent::seq), not its position here.
    pub fn faults(&self) -> Vec<FaultEvent> {
        self.state().events.to_vec()
    }

    /// Calls seen since the last [`clear_faults`](Self::clear_faults), whether or
    /// not [`faults`](Self::faults) still holds them.
    pub fn calls(&self) -> usize {
        self.state().calls
    }

    /// Calls disturbed (any fault or delay) since the last
    /// [`clear_faults`](Self::clear_faults).
    pub fn injected(&self) -> usize {
        self.state().injected
    }

    /// Forget the recorded events and reset the counters (sequence numbers keep
    /// counting).
    pub fn clear_faults(&self) {
        let mut state = self.state();
        state.events.clear();
        state.calls = 0;
        state.injected = 0;
    }
}

impl Injector {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every mutation under this lock is a single step; a poisoned lock is sound.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Decide what happens to this call and record it. The lock is released before
    /// anything is awaited.
    fn decide(&self, op: Op, key: Option<&LockKey>) -> (Fault, Option<Duration>) {
        let mut state = self.state();
        let (fault, source, delay) = if state.unavailable {
            (Fault::Unavailable, FaultSource::Outage, None)
        } else if let Some(index) = state.script.iter().position(|(o, _)| *o == op) {
            let fault = state
                .script
                .remove(index)
                .map_or(Fault::Pass, |(_, fault)| fault);
            (fault, FaultSource::Script, None)
        } else if op.is_write()
            && let Some(bucket) = state.capacity.as_mut()
            && !bucket.take(Instant::now())
        {
            (Fault::Throttled, FaultSource::Capacity, None)
        } else {
            let config = if op.is_write() {
                state.writes
            } else {
                state.reads
            };
            let (fault, delay) = config.draw(&mut state.rng);
            (fault.unwrap_or(Fault::Pass), FaultSource::Random, delay)
        };
        let seq = state.next_seq;
        state.next_seq += 1;
        state.calls += 1;
        if FaultEvent::disturbs(&fault, delay) {
            state.injected += 1;
        }
        if state.events.keeps() {
            state.events.push(FaultEvent {
                seq,
                at: Instant::now(),
                op,
                key: key.cloned(),
                fault: fault.clone(),
                source,
                delay,
            });
        }
        (fault, delay)
    }
}

#[async_trait]
impl StoreLayer for Injector {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let op = call.op();
        let (fault, delay) = self.decide(op, call.key());
        let delay = match &fault {
            Fault::Delay(scripted) => Some(*scripted),
            _ => delay,
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let what = || format!("injected fault on {op:?}");
        match fault {
            Fault::Pass | Fault::Delay(_) => call.send(next).await,
            Fault::AmbiguousApplied => {
                // The call takes effect; its response is lost on the way back.
                let _lost = call.send(next).await;
                Err(StoreError::ambiguous(format!(
                    "{}: response lost (the call was applied)",
                    what()
                )))
            }
            Fault::AmbiguousNotApplied => Err(StoreError::ambiguous(format!(
                "{}: timed out (the call was not applied)",
                what()
            ))),
            Fault::Throttled => Err(StoreError::throttled(format!("{}: throttled", what()))),
            Fault::Unavailable => Err(StoreError::unavailable(format!(
                "{}: unavailable (the call was not applied)",
                what()
            ))),
            Fault::Error(kind) => Err(StoreError::new(
                kind,
                format!("{}: {kind:?} (the call was not applied)", what()),
            )),
        }
    }
}

lock_core::store_via_layer!(impl[S: ConditionalStore] for FaultyStore<S>,
    |this| (&this.faults, &*this.inner as &dyn ConditionalStore));
