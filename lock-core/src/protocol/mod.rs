//! The protocol's decisions as pure, synchronous transitions: given a
//! lock's state, a clock reading and a store's reply, the next state. No
//! I/O, no locks, no runtime: the async client keeps the state and runs
//! what these decide, and the model check (`crate::model`) drives the same
//! functions with its own store and clocks, so what the model explores is
//! the client's code, not a copy of it.
//!
//! * [`holding`]: a held lock's lease: which send it runs from, whether the
//!   holder trusts it, letting go, and sharing it with a reentrant acquire.
//! * [`acquiring`]: what an acquire makes of the record it saw: take it,
//!   hold a write of its own, write afresh on one too old, or wait for the
//!   holder until it may take over.
//!
//! [`Broken`] is the one knob inside them: a rule a test breaks on purpose,
//! to show that the model check and the tests notice. Outside tests it
//! has one value, [`Broken::Nothing`].

pub(crate) mod acquiring;
pub(crate) mod holding;

/// A rule of the protocol broken on purpose, inside the transition that
/// keeps it, so that the model check (and the tests that replay its
/// counterexamples) show they catch it. The client always passes
/// [`Nothing`](Self::Nothing); the other values exist in test builds only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Broken {
    /// Every rule kept.
    #[default]
    Nothing,
    /// A confirmed write's lease runs from its reply instead of its send:
    /// time the request spent on the way counts twice.
    #[cfg(test)]
    LeaseFromReply,
    /// A holder that has let go (its release is on its way) still trusts
    /// its lease: its work goes on while the store may already be another's.
    #[cfg(test)]
    TrustWhileReleasing,
    /// A waiter ignores the end of a final write's min hold and waits for
    /// its holder as for a dead one (liveness, not safety).
    #[cfg(test)]
    IgnoresFinalHold,
}
