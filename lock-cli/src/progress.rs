//! While an acquire waits: who holds the lock and how long we have waited, on
//! stderr. The acquire reports each record it learns (its
//! [`on_wait`](lock_core::AcquireOptions::on_wait) observer): no reads of our
//! own. A side task prints the latest about once a second; the acquire itself
//! is one call with the whole wait budget, so its takeover count is never reset.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{AcquireOptions, LockInfo, LockKey};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::text::duration;

/// How often the side task prints what the acquire saw last.
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
    /// holder is alive can take up to one of its leases), from what the acquire
    /// made with the options returned sees.
    pub fn start(key: &LockKey, options: AcquireOptions) -> (Self, AcquireOptions) {
        let terminal = std::io::stderr().is_terminal();
        let started = Instant::now();
        let printed = Arc::new(AtomicBool::new(false));
        let (seen, sightings) = watch::channel(None);
        let options = options.on_wait(move |info| {
            seen.send_replace(Some(describe(info)));
        });
        let task = Some(tokio::spawn(report(
            sightings,
            key.clone(),
            terminal,
            started,
            printed.clone(),
        )));
        let progress = Self {
            task,
            printed,
            terminal,
            started,
        };
        (progress, options)
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

/// What a record the acquire saw says about the lock.
fn describe(info: Option<&LockInfo>) -> String {
    match info {
        Some(info) if !info.released => format!(
            "held by {} (fence {})",
            crate::text::printable(&info.owner),
            info.fence
        ),
        _ => "vacant, taking it".to_owned(),
    }
}

/// Every [`POLL`], describe the holder the acquire saw last: a line rewritten
/// in place on a terminal, otherwise a new line whenever the holder changes.
/// Runs until aborted.
async fn report(
    sightings: watch::Receiver<Option<String>>,
    key: LockKey,
    terminal: bool,
    started: Instant,
    printed: Arc<AtomicBool>,
) {
    let mut last_holder: Option<String> = None;
    loop {
        tokio::time::sleep(POLL).await;
        // Nothing seen yet (the first attempt is still on its way).
        let Some(holder) = sightings.borrow().clone() else {
            continue;
        };
        let waited = duration(Duration::from_secs(started.elapsed().as_secs()));
        let mut stderr = std::io::stderr().lock();
        printed.store(true, Ordering::Release);
        if terminal {
            let _ = write!(
                stderr,
                "\r\x1b[2Klockctl: waiting for lock {}: {holder}, waited {waited}",
                crate::text::printable(&key.to_string()),
            );
            let _ = stderr.flush();
        } else if last_holder.as_ref() != Some(&holder) {
            let _ = writeln!(
                stderr,
                "lockctl: waiting for lock {}: {holder} (waited {waited})",
                crate::text::printable(&key.to_string()),
            );
        }
        last_holder = Some(holder);
    }
}
