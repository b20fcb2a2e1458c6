//! Lease-based distributed locks over any conditional store.
#![deny(missing_docs)]

mod acquire;
mod client;
pub mod clock;
mod config;
mod error;
mod guard;
mod heartbeat;
mod held;
mod info;
mod key;
mod options;
mod record;
mod store;
pub mod timing;
mod write;

pub use client::{LockClient, ShutdownReport};
pub use clock::{Clock, DriftingClock, Instant, TokioClock};
pub use config::LockClientBuilder;
pub use error::{ConfigError, LockError, StoreError, StoreErrorKind};
pub use guard::{LockGuard, LockView};
pub use info::{LockInfo, LockPage};
pub use key::LockKey;
pub use options::{AcquireOptions, ListOptions};
pub use record::{Fence, FenceUpdate, LockRecord, NewRecord, Rvn};
pub use store::{Capabilities, ConditionalStore, Cursor, Expect, Outcome, Page};
pub use timing::{LeaseState, LostReason, Observation, Timing};
