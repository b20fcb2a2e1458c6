//! One heartbeat task per client for all held locks: a schedule ordered by due
//! time, rate limited, each heartbeat run concurrently with its own retries.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::LostReason;
use crate::client::Inner;
use crate::clock::Instant;
use crate::held::Held;
use crate::write::{HeldWrite, WriteEnd};

/// A message to the heartbeat task.
#[derive(Debug)]
pub(crate) enum Command {
    /// Heartbeat this lock at this instant.
    Schedule(Arc<Held>, Instant),
}

/// The running task and its inbox.
#[derive(Debug)]
pub(crate) struct Heartbeats {
    pub tx: mpsc::UnboundedSender<Command>,
    pub task: tokio::task::JoinHandle<()>,
}

struct Due {
    at: Instant,
    seq: u64,
    held: Arc<Held>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    // Reversed: BinaryHeap is a max-heap and the earliest due must come first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl Heartbeats {
    pub(crate) fn start(
        inner: Weak<Inner>,
        clock: Arc<dyn crate::Clock>,
        rate: Option<u32>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(
            run(inner, clock, rate, rx).instrument(tracing::debug_span!("heartbeats")),
        );
        Self { tx, task }
    }
}

async fn run(
    inner: Weak<Inner>,
    clock: Arc<dyn crate::Clock>,
    rate: Option<u32>,
    mut rx: mpsc::UnboundedReceiver<Command>,
) {
    let spacing = rate.map(|per_second| Duration::from_secs(1) / per_second.max(1));
    let mut schedule = BinaryHeap::new();
    let mut running: JoinSet<Option<(Arc<Held>, Instant)>> = JoinSet::new();
    let mut seq: u64 = 0;
    let mut next_slot = clock.now();
    loop {
        let next_due = schedule.peek().map(|due: &Due| due.at);
        tokio::select! {
            command = rx.recv() => match command {
                Some(Command::Schedule(held, at)) => {
                    seq += 1;
                    schedule.push(Due { at, seq, held });
                }
                // The client is gone.
                None => break,
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok(Some((held, at))) = done {
                    seq += 1;
                    schedule.push(Due { at, seq, held });
                }
            }
            () = sleep_until_due(clock.as_ref(), next_due), if next_due.is_some() => {
                let now = clock.now();
                while schedule.peek().is_some_and(|due| due.at <= now) {
                    let Some(mut due) = schedule.pop() else { break };
                    if !due.held.wants_heartbeat() {
                        continue;
                    }
                    if let Some(spacing) = spacing {
                        if next_slot > now {
                            seq += 1;
                            due.at = next_slot;
                            due.seq = seq;
                            schedule.push(due);
                            continue;
                        }
                        next_slot = next_slot.max(now) + spacing;
                    }
                    let Some(inner) = inner.upgrade() else { return };
                    running.spawn(heartbeat(inner, due.held));
                }
            }
        }
    }
    running.abort_all();
}

async fn sleep_until_due(clock: &dyn crate::Clock, due: Option<Instant>) {
    if let Some(due) = due {
        clock.sleep_until(due).await;
    }
}

/// One heartbeat of one lock, with retries until the lease runs out. Returns when
/// to heartbeat next, or `None` when the lock is no longer heartbeaten.
async fn heartbeat(inner: Arc<Inner>, held: Arc<Held>) -> Option<(Arc<Held>, Instant)> {
    let span = tracing::debug_span!("heartbeat", key = %held.key, fence = %held.fence);
    let next = async {
        let _writing = held.write.lock().await;
        if !held.wants_heartbeat() {
            return None;
        }
        let expires = {
            let state = held.state();
            state.confirmed_send + state.lease
        };
        match inner.write_held(&held, HeldWrite::Heartbeat, expires).await {
            WriteEnd::Confirmed => {
                let next = held.state().confirmed_send + inner.config.heartbeat_period;
                tracing::trace!("heartbeat confirmed");
                Some(next)
            }
            WriteEnd::Stolen { owner } => {
                tracing::warn!(owner = owner.as_deref().unwrap_or("-"), "lock lost: stolen");
                inner.lose(&held, LostReason::Stolen { owner });
                None
            }
            WriteEnd::GaveUp(error) => {
                let error = error.map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(%error, "lock lost: lease expired before a heartbeat was confirmed");
                inner.lose(&held, LostReason::Expired);
                None
            }
            WriteEnd::Failed(error) => {
                tracing::warn!(%error, "lock lost: the store refused the heartbeat");
                inner.lose(&held, LostReason::Expired);
                None
            }
            WriteEnd::Stopped => None,
        }
    }
    .instrument(span)
    .await;
    next.map(|at| (held, at))
}
