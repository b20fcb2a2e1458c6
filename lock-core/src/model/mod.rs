//! An exhaustive check of the protocol: every interleaving of a small fleet
//! of clients on one linearizable store, explored breadth-first with states
//! deduplicated (by [Stateright](https://docs.rs/stateright)), the clients
//! deciding with this crate's own rules:
//!
//! * [`Timing`](crate::timing::Timing) decides whether a holder's lease is
//!   safe, when it ends, and when a waiter may take over, and
//!   [`HoldLimits`](crate::timing::HoldLimits) when a max hold ends it and
//!   what is left of a min hold, and `final_hold_ends_at` when a waiter may
//!   take a record its holder left held to the end of a min hold;
//! * [`Sightings`](crate::sightings::Sightings) keeps a waiter's first
//!   sighting of a record version across polls;
//! * [`replies`](crate::replies) decides what a read, a rejection or an
//!   ambiguous write means.
//!
//! The model ([`fleet`]) carries out what the client does around those
//! decisions, one step at a time; the checker explores every order of the
//! steps and every fault. Stateright was chosen because it is the maintained
//! Rust model checker on crates.io: a model is plain Rust calling plain Rust
//! (the decisions are called, not re-written in another language as a TLA+
//! spec would need), its breadth-first search deduplicates states and
//! returns the shortest counterexample as a path of actions.
//!
//! Why fixed clock rates: every timing rule compares a duration on one
//! client's clock with a duration on another's, so the worst case for each
//! is one clock as slow and the other as fast as the drift bound allows, for
//! the whole run. Each client's clock runs at one of the two extremes
//! (chosen in the initial states: every combination is explored); real time
//! advances in ticks.
//!
//! The properties are the invariants of docs/protocol.md, named after them:
//! see the `properties` of [`Fleet`]. `cargo test -p lock-core --lib model`
//! runs the standard size (2 clients, 1 key, one fault per schedule, 9 ticks
//! of real time: about 8 million states, under a minute on 2 cores), the
//! same without faults with max holds, with min holds and with local
//! hand-offs, leader election as two campaigns per candidate, a two-permit
//! semaphore with three clients (its states reduced by symmetry, see
//! [`Fleet::with_permits`]), and the
//! tests that break a rule on purpose; `LOCK_MODEL=large` runs three
//! clients, and hand-offs with a fault (see docs/testing.md). A
//! counterexample also prints as a step list that `tests/replay.rs` replays
//! on real clients.

mod fleet;

pub(crate) use fleet::{Break, Fleet};

mod tests;
