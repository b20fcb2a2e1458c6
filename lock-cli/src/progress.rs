//! While an acquire waits: who holds the lock and how long we have waited, on
//! stderr. A side task reads the lock about once a second; the acquire itself
//! is one call with the whole wait budget, so its takeover count is never reset.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{LockClient, LockKey};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::text::duration;

/// How often the side task reads the lock.
const POLL: Duration = Duration::from_secs(1);

/// Reports progress until [`finish`](Self::finish) (or drop).
#[derive(Debug)]
pub struct Progress {
    task: Option<JoinHandle<()>>,
    /// Set once the task printed something.
    printed: Arc<AtomicBool>,
    terminal: bool,
    started: Instant,
}

impl Progress {
    /// Start reporting on `key` (even for one attempt: finding out whether a
    /// holder is alive can take up to one of its leases).
    pub fn start(client: &LockClient, key: &LockKey) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let started = Instant::now();
        let printed = Arc::new(AtomicBool::new(false));
        let task = Some(tokio::spawn(report(
            client.clone(),
            key.clone(),
            terminal,
            started,
            printed.clone(),
        )));
        Self {
            task,
            printed,
            terminal,
            started,
        }
    }

    /// Stop reporting. When anything was reported, end the progress line with
    /// `outcome` and the time waited (or just clear it when `None`: the error
    /// that follows says it all).
    pub async fn finish(mut self, outcome: Option<&str>) {
        let Some(task) = self.task.take() else {
            return;
        };
        task.abort();
        // Wait until it is gone, so its last line cannot follow ours.
        let _ = task.await;
        if !self.printed.load(Ordering::Acquire) {
            return;
        }
        let clear = if self.terminal { "\r\x1b[2K" } else { "" };
        match outcome {
            Some(outcome) => {
                let waited = duration(self.started.elapsed());
                eprintln!("{clear}lockctl: {outcome} after waiting {waited}");
            }
            None => eprint!("{clear}"),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Read the lock every [`POLL`] and describe its holder: a line rewritten in
/// place on a terminal, otherwise a new line whenever the holder changes.
/// Runs until aborted.
async fn report(
    client: LockClient,
    key: LockKey,
    terminal: bool,
    started: Instant,
    printed: Arc<AtomicBool>,
) {
    let mut last_holder: Option<(String, u64)> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let holder = match client.get_lock(key.clone()).await {
            Ok(Some(info)) if !info.released => Some((
                format!(
                    "held by {} (fence {})",
                    crate::text::printable(&info.owner),
                    info.fence
                ),
                info.fence.get(),
            )),
            Ok(_) => Some(("vacant, taking it".to_owned(), 0)),
            // The acquire reports store errors itself; keep the last holder.
            Err(_) => last_holder.clone(),
        };
        let Some(holder) = holder else { continue };
        let waited = duration(Duration::from_secs(started.elapsed().as_secs()));
        let mut stderr = std::io::stderr().lock();
        printed.store(true, Ordering::Release);
        if terminal {
            let _ = write!(
                stderr,
                "\r\x1b[2Klockctl: waiting for lock {}: {}, waited {waited}",
                crate::text::printable(&key.to_string()),
                holder.0
            );
            let _ = stderr.flush();
        } else if last_holder.as_ref() != Some(&holder) {
            let _ = writeln!(
                stderr,
                "lockctl: waiting for lock {}: {} (waited {waited})",
                crate::text::printable(&key.to_string()),
                holder.0
            );
        }
        last_holder = Some(holder);
    }
}
