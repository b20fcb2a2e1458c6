//! lock-testkit's own tests: the conformance suite on the memory store (plain and
//! behind faults with retries), the suite's teeth, the seeded simulation, the
//! model-based test and the fault proxy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod testkit {
    mod conformance;
    mod model;
    mod proxy;
    mod simulation;
}
