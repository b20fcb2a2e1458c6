//! What happens when a program lets go of a client without
//! [`shutdown`](crate::LockClient::shutdown): the last handle (the last clone
//! of the `LockClient` and the last `LockGuard`) finishes the releases its
//! guards started, where it can.
//!
//! A dropped guard's release runs as a task on the runtime. At the end of a
//! `#[tokio::main]` function the guards are dropped, and the runtime ends right
//! after, cancelling that task: the lock would stay held for a whole lease.
//! So the last handle, dropped on a multi-threaded runtime, blocks its thread
//! (letting the runtime's other work run, with `block_in_place`) until those
//! releases end, within the shutdown timeout. On a current-thread runtime, or
//! with no runtime, nothing can run them while the thread blocks: it logs a
//! warning naming each lock instead.

use std::sync::Arc;

use tokio::runtime::{Handle, RuntimeFlavor};

use crate::shared::{LastHandle, Shared};

// `LastHandle` is defined beside `Shared`, which keeps a weak reference to
// it; what dropping the last one does is this module's.
impl Drop for LastHandle {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.finish_releases_on_last_drop();
        }
    }
}

impl Shared {
    /// The program let go of this client: wait for the releases still running
    /// if the runtime can run them while this thread waits, or say which locks
    /// may be left held.
    fn finish_releases_on_last_drop(self: &Arc<Self>) {
        if self.ensure_running().is_err() {
            // Shut down: shutdown waited for (or reported) every release.
            return;
        }
        let Some(keys) = self.background_running() else {
            return;
        };
        let runtime = match Handle::try_current() {
            Ok(runtime)
                if runtime.runtime_flavor() == RuntimeFlavor::MultiThread
                    && !std::thread::panicking() =>
            {
                runtime
            }
            _ => {
                for key in keys {
                    tracing::warn!(
                        %key,
                        "the last handle of a lock client was dropped while the lock's release was \
                         running; if the runtime ends now the lock stays held until its lease ends \
                         (call LockClient::shutdown before leaving)"
                    );
                }
                // Left running: on a runtime that goes on, they still finish.
                return;
            }
        };
        let mut pending = self.take_background();
        let timeout = self.config.shutdown_timeout;
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tokio::task::block_in_place(|| {
                runtime.block_on(async {
                    tokio::time::timeout(timeout, pending.join_all())
                        .await
                        .is_ok()
                })
            })
        }));
        match waited {
            Ok(true) => tracing::debug!("the last handle of a lock client finished its releases"),
            Ok(false) => {
                // Only the releases that have not ended.
                for key in pending.sorted_keys() {
                    tracing::warn!(
                        %key,
                        "the last handle of a lock client was dropped and the lock's release did \
                         not finish within the shutdown timeout; it may stay held until its lease ends"
                    );
                }
                // Still running: on a runtime that goes on, they may yet finish.
                pending.tasks.detach_all();
            }
            // Not a thread that may block (inside `Runtime::enter` but not
            // on the runtime): the releases go on as the runtime does.
            Err(_) => {
                tracing::warn!(
                    "the last handle of a lock client was dropped where it cannot wait for its \
                     releases; call LockClient::shutdown before leaving"
                );
                pending.tasks.detach_all();
            }
        }
    }
}
