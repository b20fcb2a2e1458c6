//! Model-based test: random operation sequences on a store and on the reference
//! model; every reply must match. Runs on the memory store, and on the memory
//! store behind the fault injector with the retry layer.

use std::collections::BTreeSet;
use std::time::Duration;

use lock_core::{
    Capabilities, ConditionalStore, DataUpdate, Expect, FenceUpdate, LockKey, NewRecord, Outcome,
    Rvn, StoreErrorKind,
};
use lock_memory::{FaultConfig, FaultyStore, MemoryStore};
use lock_testkit::RetryingStore;
use lock_testkit::model::ModelStore;
use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};

const MAX_RECORD: usize = 512;

/// What the stores under test say (the memory store remembers deleted
/// records' fences).
fn caps() -> Capabilities {
    Capabilities::default()
        .with_max_record_bytes(MAX_RECORD)
        .with_fences_after_deletion(lock_core::FencesAfterDeletion::Remembered)
}

fn memory() -> MemoryStore {
    MemoryStore::builder().max_record_bytes(MAX_RECORD).build()
}

#[derive(Clone, Debug)]
enum Op {
    Get(LockKey),
    Put {
        key: LockKey,
        expect: Expect,
        new: NewRecord,
    },
    Delete(LockKey, Expect),
    List(Option<String>, usize),
}

#[derive(Clone, Debug)]
struct Reference {
    model: ModelStore,
    writes: u64,
    seed: u64,
    /// What the model answered the last transition, if it wrote: the reply the
    /// store under test must give (the model itself is the state after it).
    last_write: Option<Result<Outcome, StoreErrorKind>>,
}

fn key_strategy() -> impl Strategy<Value = LockKey> {
    (
        prop::sample::select(vec!["a", "b", "c", ""]),
        prop::option::of(prop::sample::select(vec!["x", "y"])),
    )
        .prop_map(|(p, s)| match s {
            Some(s) => LockKey::with_sort(p, s),
            None => LockKey::new(p),
        })
}

fn expect_strategy(state: &Reference) -> BoxedStrategy<Expect> {
    let mut rvns: Vec<Rvn> = state.model.records().map(|r| r.rvn.clone()).collect();
    rvns.push(Rvn::from_stored("never-written"));
    prop_oneof![
        2 => Just(Expect::Vacant),
        3 => prop::sample::select(rvns).prop_map(Expect::Version),
    ]
    .boxed()
}

impl ReferenceStateMachine for Reference {
    type State = Reference;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Self::State> {
        any::<u64>()
            .prop_map(|seed| Reference {
                model: ModelStore::new(caps()),
                writes: 0,
                seed,
                last_write: None,
            })
            .boxed()
    }

    fn transitions(state: &Self::State) -> BoxedStrategy<Self::Transition> {
        let rvn = Rvn::from_stored(format!("rvn-{}", state.writes));
        let data = prop_oneof![
            2 => Just(DataUpdate::Keep),
            2 => Just(DataUpdate::Clear),
            3 => prop::collection::vec(any::<u8>(), 0..48).prop_map(DataUpdate::Replace),
            1 => prop::collection::vec(any::<u8>(), MAX_RECORD + 1..MAX_RECORD + 40)
                .prop_map(DataUpdate::Replace),
        ];
        let put = (
            key_strategy(),
            expect_strategy(state),
            prop::sample::select(vec!["alice", "bob"]),
            any::<bool>(),
            any::<bool>(),
            data,
            1u64..30,
        )
            .prop_map(
                move |(key, expect, owner, next, released, data, lease)| Op::Put {
                    key,
                    expect,
                    new: NewRecord {
                        owner: owner.into(),
                        rvn: rvn.clone(),
                        lease: Duration::from_secs(lease),
                        released,
                        fence: if next {
                            FenceUpdate::Next
                        } else {
                            FenceUpdate::Keep
                        },
                        data,
                        expires_at: None,
                    },
                },
            );
        prop_oneof![
            2 => key_strategy().prop_map(Op::Get),
            6 => put,
            2 => (key_strategy(), expect_strategy(state)).prop_map(|(k, e)| Op::Delete(k, e)),
            1 => (
                prop::option::of(prop::sample::select(vec!["a".to_owned(), "b".to_owned()])),
                1usize..4
            )
                .prop_map(|(p, l)| Op::List(p, l)),
        ]
        .boxed()
    }

    fn apply(mut state: Self::State, transition: &Self::Transition) -> Self::State {
        state.last_write = match transition {
            Op::Put { key, expect, new } => {
                state.writes += 1;
                Some(state.model.put(key, expect, new))
            }
            Op::Delete(key, expect) => Some(state.model.delete(key, expect)),
            Op::Get(_) | Op::List(..) => None,
        };
        state
    }
}

/// A store under test; the reference state says what it must answer.
struct Sut {
    runtime: tokio::runtime::Runtime,
    store: Box<dyn ConditionalStore>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn kind<T>(result: Result<T, lock_core::StoreError>) -> Result<T, StoreErrorKind> {
    result.map_err(|e| e.kind())
}

impl Sut {
    /// Apply `op`; `reference` is the model after it, with its reply.
    fn step(self, op: Op, reference: &Reference) -> Self {
        let model = &reference.model;
        let store = self.store.as_ref();
        match op {
            Op::Get(key) => {
                let got = kind(self.runtime.block_on(store.get(&key)));
                assert_eq!(got, model.get(&key), "get {key:?}");
            }
            Op::Put { key, expect, new } => {
                let got = kind(
                    self.runtime
                        .block_on(store.put(&key, expect.clone(), new.clone())),
                );
                let want = reference.last_write.clone().expect("a put writes");
                assert_eq!(got, want, "put {key:?} {expect:?} {new:?}");
            }
            Op::Delete(key, expect) => {
                let got = kind(self.runtime.block_on(store.delete(&key, expect.clone())));
                let want = reference.last_write.clone().expect("a delete writes");
                assert_eq!(got, want, "delete {key:?} {expect:?}");
            }
            Op::List(partition, limit) => {
                let mut keys = Vec::new();
                let mut cursor = None;
                loop {
                    let page = self
                        .runtime
                        .block_on(store.list(partition.as_deref(), cursor, limit))
                        .unwrap();
                    assert!(page.records.len() <= limit);
                    for record in page.records {
                        assert_eq!(model.get(&record.key), Ok(Some(record.clone())));
                        keys.push(record.key);
                    }
                    match page.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
                let unique: BTreeSet<_> = keys.iter().cloned().collect();
                assert_eq!(unique.len(), keys.len(), "duplicates in {keys:?}");
                let want: BTreeSet<_> = model.keys(partition.as_deref()).into_iter().collect();
                assert_eq!(unique, want, "list {partition:?}");
            }
        }
        self
    }
}

struct MemoryTest;

impl StateMachineTest for MemoryTest {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(_: &Reference) -> Sut {
        Sut {
            runtime: runtime(),
            store: Box::new(memory()),
        }
    }

    fn apply(sut: Sut, reference: &Reference, transition: Op) -> Sut {
        sut.step(transition, reference)
    }
}

struct FaultyTest;

impl StateMachineTest for FaultyTest {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(reference: &Reference) -> Sut {
        let faults = FaultConfig::NONE
            .with_throttle(0.1)
            .with_unavailable(0.1)
            .with_ambiguous_applied(0.1)
            .with_ambiguous_not_applied(0.1)
            .with_delay(Duration::ZERO, Duration::from_millis(5));
        let faulty = FaultyStore::new(memory(), reference.seed).with_faults(faults);
        Sut {
            runtime: runtime(),
            store: Box::new(RetryingStore::new(faulty)),
        }
    }

    fn apply(sut: Sut, reference: &Reference, transition: Op) -> Sut {
        sut.step(transition, reference)
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn memory_store_matches_the_model(sequential 1..40 => MemoryTest);

    #[test]
    fn faulty_store_with_retries_matches_the_model(sequential 1..40 => FaultyTest);
}
