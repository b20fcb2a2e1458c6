//! The watchdog: a small process (lockctl itself, run as `lockctl __watchdog`)
//! that SIGKILLs the command's process group when the lease's safe time ends,
//! without depending on lockctl being scheduled.
//!
//! lockctl's own timeline (see `deadline`) stops the command in time as long
//! as lockctl runs. A lockctl that is frozen (SIGSTOP, a debugger, a starved
//! host) or killed cannot, and its command would go on beside the next holder.
//! So `run` starts the watchdog before the command, tells it whom to kill, and
//! re-arms it with the end of the safe time after every confirmed heartbeat.
//! The watchdog kills the command's group when that instant passes without a
//! new one, and at once when lockctl goes away without saying it is done (its
//! end of the pipe closes). It has its own process group, so a signal to
//! lockctl's group (Ctrl-Z, `kill -STOP -PGID`) does not stop it too.
//!
//! The protocol is lines on the watchdog's stdin: `watch group PGID` or `watch
//! pid PID`, `arm NANOS` (the kill instant on CLOCK_MONOTONIC, which both
//! processes read), `disarm` (lockctl killed the command itself), `done`.

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::time::{ClockId, clock_gettime};
use nix::unistd::Pid;

use crate::exit::CliError;

/// The hidden subcommand that runs the watchdog.
pub const SUBCOMMAND: &str = "__watchdog";

/// What the watchdog kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The command's process group (the command and its children).
    Group(Pid),
    /// The command alone (`--foreground`: it shares lockctl's group).
    Process(Pid),
}

impl Target {
    fn kill(self) {
        let result = match self {
            Target::Group(pgid) => killpg(pgid, Signal::SIGKILL),
            Target::Process(pid) => kill(pid, Signal::SIGKILL),
        };
        // ESRCH: already gone.
        let _ = result;
    }
}

/// Nanoseconds on CLOCK_MONOTONIC, the clock tokio's and std's `Instant` use
/// on Linux, and one every process reads alike.
fn monotonic_nanos() -> u128 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |now| {
        u128::try_from(now.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u128::try_from(now.tv_nsec()).unwrap_or(0)
    })
}

/// lockctl's handle on its watchdog.
#[derive(Debug)]
pub struct Watchdog {
    process: Child,
    /// The pipe to the watchdog, non-blocking: a watchdog that is stopped and
    /// lets the pipe fill up must not stop lockctl's heartbeats with it.
    input: Option<ChildStdin>,
    /// The kill instant last sent (CLOCK_MONOTONIC nanoseconds).
    armed: Option<u128>,
    /// Set once a write to the watchdog failed (it died): said once.
    broken: bool,
}

/// A re-arm that moves the kill instant later by less than this is not sent:
/// the deadline follows heartbeats, not every wake-up of lockctl.
const REARM_STEP_NANOS: u128 = 10_000_000;

impl Watchdog {
    /// Start the watchdog (before the command, so a command never runs
    /// without one).
    pub fn start() -> Result<Self, CliError> {
        let mut command = Command::new(crate::exec::OWN_EXECUTABLE);
        command
            .arg(SUBCOMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            // Its own group: a signal meant for lockctl's group must not stop
            // or kill the watchdog with it.
            .process_group(0);
        let mut process = command
            .spawn()
            .map_err(CliError::io("starting the watchdog process"))?;
        let input = process.stdin.take();
        if let Some(input) = &input {
            use nix::fcntl::{FcntlArg, OFlag, fcntl};
            fcntl(input, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                .map_err(|errno| CliError::io("setting up the watchdog's pipe")(errno.into()))?;
        }
        Ok(Self {
            process,
            input,
            armed: None,
            broken: false,
        })
    }

    /// Tell the watchdog what to kill.
    pub fn watch(&mut self, target: Target) {
        let line = match target {
            Target::Group(pgid) => format!("watch group {pgid}"),
            Target::Process(pid) => format!("watch pid {pid}"),
        };
        self.send(&line);
    }

    /// Kill the target `kill_in` from now unless re-armed before.
    pub fn arm(&mut self, kill_in: Duration) {
        let at = monotonic_nanos().saturating_add(kill_in.as_nanos());
        if self
            .armed
            .is_some_and(|armed| at >= armed && at - armed < REARM_STEP_NANOS)
        {
            return;
        }
        self.armed = Some(at);
        self.send(&format!("arm {at}"));
    }

    /// lockctl has killed the command itself: the watchdog need not (and
    /// should not say it did).
    pub fn disarm(&mut self) {
        self.armed = None;
        self.send("disarm");
    }

    /// The command has ended: the watchdog exits without killing anything.
    pub fn done(mut self) {
        self.send("done");
        self.input = None;
        // It exits as soon as it reads the line; reap it (bounded).
        for _ in 0..50 {
            if !matches!(self.process.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
    }

    fn send(&mut self, line: &str) {
        let Some(input) = self.input.as_mut() else {
            return;
        };
        if let Err(error) = writeln!(input, "{line}").and_then(|()| input.flush()) {
            if !self.broken {
                eprintln!(
                    "lockctl: warning: the watchdog process is gone ({error}); \
                     if lockctl is frozen now, nothing stops the command at the end of the lease"
                );
            }
            self.broken = true;
        }
    }
}

/// The watchdog process's main: exit code 0 after `done`, or after killing the
/// command.
pub fn serve() -> u8 {
    let (lines, received) = mpsc::channel::<String>();
    // A thread reads stdin, so the main thread can wait with a deadline.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
        // Dropping `lines` tells the main thread that lockctl is gone.
    });
    let mut target: Option<Target> = None;
    let mut kill_at: Option<u128> = None;
    // The watchdog has killed the command: nothing more to arm.
    let mut fired = false;
    loop {
        let next = match kill_at {
            None => received
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            Some(at) => {
                let left = at.saturating_sub(monotonic_nanos());
                let left = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX));
                received.recv_timeout(left)
            }
        };
        match next {
            Ok(line) => match parse(&line) {
                Some(Message::Watch(watched)) => target = Some(watched),
                Some(Message::Arm(at)) if !fired => kill_at = Some(at),
                Some(Message::Arm(_)) => {}
                Some(Message::Disarm) => kill_at = None,
                Some(Message::Done) => return 0,
                None => {}
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if kill_at.is_some_and(|at| monotonic_nanos() >= at) {
                    if let Some(target) = target {
                        target.kill();
                        eprintln!(
                            "lockctl watchdog: lockctl did not confirm the lease before its safe time \
                             ended (is it stopped or starved?): killed the command"
                        );
                    }
                    // Keep reading until lockctl says it is done (or is gone),
                    // so it never finds its watchdog missing.
                    fired = true;
                    kill_at = None;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // lockctl is gone without saying the command ended (killed):
                // nothing heartbeats the lock any more.
                if let (Some(target), false) = (target, fired) {
                    target.kill();
                    eprintln!("lockctl watchdog: lockctl is gone: killed the command");
                }
                return 0;
            }
        }
    }
}

enum Message {
    Watch(Target),
    Arm(u128),
    Disarm,
    Done,
}

fn parse(line: &str) -> Option<Message> {
    let mut words = line.split_whitespace();
    match (words.next()?, words.next(), words.next()) {
        ("watch", Some(kind), Some(id)) => {
            let id = Pid::from_raw(id.parse().ok()?);
            match kind {
                "group" => Some(Message::Watch(Target::Group(id))),
                "pid" => Some(Message::Watch(Target::Process(id))),
                _ => None,
            }
        }
        ("arm", Some(at), None) => at.parse().ok().map(Message::Arm),
        ("disarm", None, None) => Some(Message::Disarm),
        ("done", None, None) => Some(Message::Done),
        _ => None,
    }
}
