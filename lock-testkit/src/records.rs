//! The writes store tests make by hand, shaped as the client makes them, and
//! the unwrapping of an outcome a test expects to apply.

use std::time::Duration;

use lock_core::{DataUpdate, FenceUpdate, LockRecord, NewRecord, Outcome, Rvn};

/// An acquire-shaped write by `owner`: a fresh RVN, a 20 s lease, the next
/// fence, the data kept.
pub fn acquire_write(owner: &str) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released: false,
        fence: FenceUpdate::Next,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

/// A heartbeat of `record` by its owner: a fresh RVN, the fence kept.
pub fn heartbeat_of(record: &LockRecord) -> NewRecord {
    NewRecord {
        fence: FenceUpdate::Keep,
        ..acquire_write(&record.owner)
    }
}

/// The release of `record` by its owner: released, the fence kept.
pub fn release_of(record: &LockRecord) -> NewRecord {
    NewRecord {
        released: true,
        ..heartbeat_of(record)
    }
}

/// The record a write stored; panics, naming what came instead, when the
/// write was refused.
pub fn applied(outcome: Outcome) -> LockRecord {
    match outcome {
        Outcome::Applied(record) => record,
        other => panic!("expected the write to apply, got {other:?}"),
    }
}
