//! `lockctl run`: hold a lock while a command runs.

use lock_core::LostReason;
use nix::sys::signal::Signal;

use crate::args::{Global, RunArgs};
use crate::child::{self, Signals};
use crate::exit::CliError;
use crate::output::duration;

/// Acquire, run the command under the lock, release; the command's exit code.
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let mut signals = Signals::install()?;
    let client = global.client(Some(args.lease)).await?;
    let key = args.key.lock_key();
    let guard = super::take(&client, &key, &args.take, true, &mut signals).await?;

    let env = [
        ("LOCK_KEY", key.to_string()),
        ("LOCK_FENCE", guard.fence().to_string()),
        ("LOCK_OWNER", client.owner().to_owned()),
    ];
    let mut command = match child::spawn(&args.command, &env, args.foreground) {
        Ok(command) => command,
        Err(error) => {
            if let Err(release) = guard.release().await {
                eprintln!("lockctl: warning: releasing lock {key} failed: {release}");
            }
            return Err(error);
        }
    };

    // Stop at "in danger", not at "expired": the command must be told before a
    // waiter can possibly take the lock over.
    let untrusted = guard.until_unsafe();
    tokio::pin!(untrusted);
    let mut lost: Option<LostReason> = None;
    let mut kill_at = None;
    let status = loop {
        tokio::select! {
            status = command.wait() => break status,
            signal = signals.next() => {
                // In the foreground the terminal sends Ctrl-C to the command
                // itself; forwarding it too would deliver it twice.
                if !(args.foreground && signal == Signal::SIGINT) {
                    command.signal(signal);
                }
            }
            reason = &mut untrusted, if lost.is_none() => {
                eprintln!(
                    "lockctl: lock {key} can no longer be trusted ({reason}): sending SIGTERM to the command{}",
                    if args.grace.is_zero() { String::new() } else { format!(", SIGKILL in {}", duration(args.grace)) }
                );
                command.signal(Signal::SIGTERM);
                lost = Some(reason);
                kill_at = Some(child::kill_deadline(args.grace));
            }
            () = child::sleep_until(kill_at) => {
                eprintln!("lockctl: the command outlived its grace period: sending SIGKILL");
                command.signal(Signal::SIGKILL);
                kill_at = None;
            }
        }
    };
    // The command has ended: release at once, whatever happens next.
    let released = guard.release().await;
    let status = status?;
    if let Some(reason) = lost {
        return Err(CliError::Lost { key, reason });
    }
    if let Err(error) = released {
        eprintln!(
            "lockctl: warning: releasing lock {key} failed ({error}); it is freed when its lease runs out"
        );
    }
    Ok(child::exit_code(status))
}
