//! [`LostReason`]: why a lease stopped being trusted. On its own, depending
//! on nothing else in the crate: the timing rules, the errors and the
//! protocol all name it.

use std::fmt;
use std::time::Duration;

/// Why a lease stopped being trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// Another writer replaced the record (a takeover, a forced release, another
    /// owner): seen on a heartbeat or write.
    Stolen {
        /// The owner now in the record, if there is a record.
        owner: Option<String>,
    },
    /// No heartbeat was confirmed before the lease ran out.
    Expired,
    /// No heartbeat was confirmed within the safe time (used by `with_lock`, which
    /// cancels its work as soon as the lease is in danger).
    InDanger,
    /// The lock was released (by the guard, or by `shutdown`).
    Released,
    /// The lock was held for its
    /// [`max_hold`](crate::AcquireOptions::max_hold): heartbeats stopped.
    MaxHold {
        /// The limit it was acquired with.
        limit: Duration,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::Stolen { owner: Some(owner) } => {
                write!(f, "stolen: the record now belongs to {owner}")
            }
            LostReason::Stolen { owner: None } => f.write_str("stolen: the record was deleted"),
            LostReason::Expired => f.write_str("expired: no heartbeat confirmed within the lease"),
            LostReason::InDanger => {
                f.write_str("in danger: no heartbeat confirmed within the safe time")
            }
            LostReason::Released => f.write_str("released"),
            LostReason::MaxHold { limit } => {
                write!(f, "held for its max hold of {limit:?}: heartbeats stopped")
            }
        }
    }
}
