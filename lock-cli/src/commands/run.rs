//! `lockctl run`: hold a lock while a command runs, and make sure the command
//! is gone before anyone else can take the lock (see `deadline` for the
//! timeline, `watchdog` and `exec` for a lockctl that is frozen or killed).

use std::process::ExitStatus;
use std::time::Duration;

use lock_core::{LockClient, LockGuard, LostReason};
use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::args::{Global, RunArgs};
use crate::child::{self, Running, Signals};
use crate::deadline::{self, Plan};
use crate::exit::CliError;
use crate::output::duration;
use crate::watchdog::Watchdog;

/// Acquire, run the command under the lock, release; the command's exit code.
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let mut signals = Signals::install()?;
    let client = global.client(Some(args.lease)).await?;
    let grace = args
        .grace
        .unwrap_or_else(|| deadline::default_grace(args.lease));
    // Refused before anything is written.
    deadline::check_grace(grace, &client.timing(), client.heartbeat_period())
        .map_err(CliError::Usage)?;
    let result = hold_and_run(&client, args, grace, &mut signals).await;
    // Whatever happened, leave nothing held: an interrupted or failed acquire
    // may have a write to clean up, a release may still be running.
    super::finish(&client).await;
    result
}

async fn hold_and_run(
    client: &LockClient,
    args: &RunArgs,
    grace: Duration,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let key = args.key.lock_key();
    let guard = super::take(client, &key, &args.take, true, signals).await?;
    // The watchdog first: the command never runs without one.
    let mut watchdog = match Watchdog::start() {
        Ok(watchdog) => watchdog,
        Err(error) => {
            release_quietly(guard, &key.to_string()).await;
            return Err(error);
        }
    };
    let env = [
        ("LOCK_KEY", key.to_string()),
        ("LOCK_FENCE", guard.fence().to_string()),
        ("LOCK_OWNER", client.owner().to_owned()),
    ];
    let mut command = match child::spawn(&args.command, &env, args.foreground) {
        Ok(command) => command,
        Err(error) => {
            watchdog.done();
            release_quietly(guard, &key.to_string()).await;
            return Err(error);
        }
    };
    watchdog.watch(command.target());
    watchdog.arm(guard.remaining());

    let supervisor = Supervisor {
        guard: &guard,
        grace,
        foreground: args.foreground,
        // Often enough that the watchdog's deadline follows each heartbeat.
        rearm_every: (client.heartbeat_period() / 2).min(Duration::from_secs(1)),
    };
    let ended = supervisor
        .supervise(&mut command, &mut watchdog, signals)
        .await;
    watchdog.done();
    let status = ended.status?;
    match ended.stopped {
        Some(why) => {
            // The lease is not to be trusted: try to vacate the record, briefly
            // (the rest goes on in the background, bounded by the shutdown).
            let _ = tokio::time::timeout(Duration::from_secs(1), guard.release()).await;
            Err(CliError::Lost { key, reason: why })
        }
        None => {
            // The command has ended: release at once.
            if let Err(error) = guard.release().await {
                eprintln!(
                    "lockctl: warning: releasing lock {key} failed ({error}); it is freed when its lease runs out"
                );
            }
            Ok(child::exit_code(status))
        }
    }
}

async fn release_quietly(guard: LockGuard, key: &str) {
    if let Err(error) = guard.release().await {
        eprintln!("lockctl: warning: releasing lock {key} failed: {error}");
    }
}

/// How the command ended, and why lockctl stopped it, if it did.
struct Ended {
    status: Result<ExitStatus, CliError>,
    stopped: Option<String>,
}

/// Watches the lease and lockctl's signals while the command runs.
struct Supervisor<'a> {
    guard: &'a LockGuard,
    grace: Duration,
    foreground: bool,
    rearm_every: Duration,
}

impl Supervisor<'_> {
    async fn supervise(
        &self,
        command: &mut Running,
        watchdog: &mut Watchdog,
        signals: &mut Signals,
    ) -> Ended {
        let lost = self.guard.lost();
        tokio::pin!(lost);
        let mut lost_seen = false;
        // Why lockctl sent SIGTERM, once it has.
        let mut stopped: Option<String> = None;
        // SIGKILL instants other than the end of the safe time: after the lock
        // was taken by someone else, after a second SIGTERM to lockctl.
        let mut kill_after_loss: Option<Instant> = None;
        let mut kill_after_signals: Option<Instant> = None;
        let mut terms_received = 0u32;
        let mut killed = false;
        loop {
            let now = Instant::now();
            let plan = Plan::new(self.guard.remaining(), self.grace);
            if kill_after_loss.is_none() {
                // A heartbeat moves the end of the safe time; so does the
                // watchdog's deadline. (Once the lock is someone else's, the
                // last deadline stands.)
                watchdog.arm(plan.kill_in);
            }
            let term_at = stopped.is_none().then(|| now + plan.term_in);
            // Once the lock is someone else's, the safe time is over and the
            // command gets its grace period from the loss; otherwise it dies
            // when the safe time ends.
            let kill_for_lease = match kill_after_loss {
                Some(at) => Some(at),
                None => stopped.as_ref().map(|_| now + plan.kill_in),
            };
            let kill_at = if killed {
                None
            } else {
                [kill_for_lease, kill_after_signals]
                    .into_iter()
                    .flatten()
                    .min()
            };
            tokio::select! {
                status = command.wait() => return Ended { status, stopped },
                signal = signals.next() => {
                    // In the foreground the terminal sends Ctrl-C to the command
                    // itself; forwarding it too would deliver it twice. A SIGINT
                    // sent to lockctl alone is forwarded.
                    if !(self.foreground && signal == Signal::SIGINT && child::terminal_may_have_sent_it()) {
                        command.signal(signal);
                    }
                    if signal == Signal::SIGTERM {
                        terms_received += 1;
                        if terms_received == 2 && kill_after_signals.is_none() {
                            eprintln!(
                                "lockctl: second SIGTERM: SIGKILL to the command in {} unless it exits",
                                duration(self.grace)
                            );
                            kill_after_signals = Some(now + self.grace);
                        }
                    }
                }
                reason = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    if matches!(reason, LostReason::Stolen { .. } | LostReason::Released) {
                        // Someone else may hold the lock already: stop now.
                        kill_after_loss = Some(now + self.grace);
                    }
                    if stopped.is_none() {
                        self.terminate(command, &format!("lock lost ({reason})"), self.grace);
                        stopped = Some(reason.to_string());
                    }
                }
                () = child::sleep_until(term_at) => {
                    // A heartbeat may have moved the safe time on meanwhile.
                    let left = self.guard.remaining();
                    if left <= self.grace {
                        let why = format!(
                            "heartbeats have failed; the lease is safe for {} more",
                            duration(left)
                        );
                        self.terminate(command, &why, left);
                        stopped = Some(why);
                    }
                }
                () = child::sleep_until(kill_at) => {
                    let now = Instant::now();
                    let due = kill_after_signals.is_some_and(|at| now >= at)
                        || match kill_after_loss {
                            Some(at) => now >= at,
                            None => self.guard.remaining().is_zero(),
                        };
                    if due {
                        eprintln!("lockctl: the command is still running: sending SIGKILL");
                        command.signal(Signal::SIGKILL);
                        killed = true;
                    }
                }
                () = tokio::time::sleep(self.rearm_every) => {}
            }
        }
    }

    fn terminate(&self, command: &Running, why: &str, kill_in: Duration) {
        eprintln!(
            "lockctl: lock {} can no longer be trusted ({why}): sending SIGTERM to the command, SIGKILL in {}",
            self.guard.key(),
            duration(kill_in.min(self.grace))
        );
        command.signal(Signal::SIGTERM);
    }
}
