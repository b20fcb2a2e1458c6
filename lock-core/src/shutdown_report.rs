//! [`ShutdownReport`]: what a client's shutdown did. On its own, so that
//! the metrics that count it need not depend on the release code.

use crate::{LockError, LockKey};

/// What [`LockClient::shutdown`](crate::LockClient::shutdown) did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Locks released (or already gone), including those whose release was
    /// running in the background (a dropped guard, a release whose caller
    /// stopped waiting) and those a failed release or clean-up had left held,
    /// written again.
    pub released: Vec<LockKey>,
    /// Locks whose release failed, with the error.
    pub failed: Vec<(LockKey, LockError)>,
    /// Locks whose release did not finish within the shutdown timeout.
    pub timed_out: Vec<LockKey>,
}
