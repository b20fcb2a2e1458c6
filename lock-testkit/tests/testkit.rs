//! lock-testkit's own tests: the conformance suite on the memory store (plain and
//! behind faults with retries), the suite's teeth, the seeded simulation, and the
//! model-based test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod testkit {
    mod conformance;
    mod model;
    mod simulation;
}
