//! Lease-based distributed locks over any conditional store.
#![deny(missing_docs)]

pub mod clock;
mod error;
mod key;
mod record;
mod store;
pub mod timing;

pub use clock::{Clock, DriftingClock, Instant, TokioClock};
pub use error::{ConfigError, LockError, StoreError, StoreErrorKind};
pub use key::LockKey;
pub use record::{Fence, FenceUpdate, LockRecord, NewRecord, Rvn};
pub use store::{Capabilities, ConditionalStore, Cursor, Expect, Outcome, Page};
pub use timing::{LeaseState, LostReason, Observation, Timing};
