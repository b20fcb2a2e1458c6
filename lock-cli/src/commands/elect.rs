//! `lockctl elect`: campaign for leadership of a lock, run the command while
//! leading (with `run`'s supervision), and campaign again when the
//! leadership ends.

use std::convert::Infallible;
use std::time::Duration;

use lock_core::{Election, ElectionOptions, LockClient, LockKey, Role};

use super::run::{CommandSpec, Ended, Watched, supervise};
use crate::args::{ElectArgs, Global};
use crate::child::{self, Signals};
use crate::exit::CliError;
use crate::text::{duration, printable};

/// Campaign until told to stop (or, with `--exit-with-command`, until the
/// command exits); the command's exit code.
pub async fn elect(global: &Global, args: &ElectArgs) -> Result<u8, CliError> {
    let (mut signals, client, grace) = super::run::prepare(global, args.lease, args.grace).await?;
    let result = campaign(&client, args, grace, &mut signals).await;
    // Whatever happened, leave nothing held.
    super::finish(&client).await;
    result
}

async fn campaign(
    client: &LockClient,
    args: &ElectArgs,
    grace: Duration,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let key = args.key.lock_key();
    let spec = CommandSpec {
        command: &args.command,
        grace,
        max_time: None,
        foreground: args.foreground,
    };
    let mut options = ElectionOptions::new().lease(args.lease);
    if let Some(data) = &args.data {
        options = options.data(data.as_bytes());
    }
    loop {
        let election = client.elect(key.clone(), options.clone())?;
        eprintln!("lockctl: campaigning for leadership of {}", name(&key));
        // One election for as long as the command does not exit by itself:
        // after a lost leadership it campaigns again on its own.
        let ended = loop {
            let leadership = tokio::select! {
                leadership = election.leadership() => leadership?,
                never = report_roles(&election) => match never {},
                signal = signals.next() => {
                    election.resign().await?;
                    return Err(CliError::Interrupted { signal });
                }
            };
            eprintln!(
                "lockctl: leading {} (fence {}): starting the command",
                name(&key),
                leadership.fence()
            );
            let watched = Watched::lock(leadership.view(), client.owner());
            let ended = match supervise(client, &watched, &spec, signals).await {
                Ok(ended) => ended,
                Err(error) => {
                    let _ = election.resign().await;
                    return Err(error);
                }
            };
            match &ended.stopped {
                // Leadership could not be trusted: the command was stopped;
                // the election campaigns again by itself.
                Some(why) if !ended.signalled && !args.exit_with_command => {
                    eprintln!(
                        "lockctl: leadership of {} ended ({}): the command was stopped; campaigning again",
                        name(&key),
                        printable(why)
                    );
                }
                _ => break ended,
            }
        };
        let Ended {
            status,
            stopped,
            signalled,
            ..
        } = ended;
        let status = status?;
        if let Some(why) = stopped {
            // With --exit-with-command: leadership ended, as `run` reports a
            // lost lock.
            let _ = tokio::time::timeout(Duration::from_secs(1), election.resign()).await;
            return Err(CliError::Lost {
                key,
                reason: printable(&why).into_owned(),
            });
        }
        // The command exited by itself (or after a signal lockctl forwarded):
        // hand leadership on.
        if let Err(error) = election.resign().await {
            eprintln!(
                "lockctl: warning: resigning leadership of {} failed ({}); it is freed when its lease ({}) runs out",
                name(&key),
                printable(&error.to_string()),
                duration(args.lease)
            );
        }
        let code = child::exit_code(status);
        if signalled || args.exit_with_command {
            return Ok(code);
        }
        eprintln!(
            "lockctl: the command exited with {code} while leading {}: resigned; campaigning again in {}",
            name(&key),
            duration(args.restart_delay)
        );
        tokio::select! {
            () = tokio::time::sleep(args.restart_delay) => {}
            signal = signals.next() => return Err(CliError::Interrupted { signal }),
        }
    }
}

/// Say on stderr who leads, each time a poll shows a new leader. Never ends.
async fn report_roles(election: &Election) -> Infallible {
    let mut roles = election.watch();
    loop {
        if let Role::Follower { leader, fence, .. } = roles.borrow_and_update().clone() {
            eprintln!("lockctl: following {} (fence {fence})", printable(&leader));
        }
        if roles.changed().await.is_err() {
            // The campaign ended; `leadership()` says why.
            return std::future::pending().await;
        }
    }
}

/// The key as it may be printed.
fn name(key: &LockKey) -> String {
    printable(&key.to_string()).into_owned()
}
