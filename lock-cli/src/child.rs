//! The command `run` starts: spawning it, forwarding signals to it, stopping it
//! when the lock is lost, and turning how it ended into an exit code.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::exit::CliError;
use crate::watchdog::Target;

/// Signal handlers for the signals lockctl passes on to the command (SIGINT,
/// SIGTERM, SIGHUP) instead of dying of them.
///
/// Installed before the lock is acquired: from then on a SIGTERM must not kill
/// lockctl without a release, and once the command runs it must reach it.
#[derive(Debug)]
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Catch SIGINT, SIGTERM and SIGHUP.
    pub fn install() -> Result<Self, CliError> {
        let install = |kind| signal(kind).map_err(CliError::io("installing signal handlers"));
        Ok(Self {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
        })
    }

    /// The next caught signal. Cancel safe.
    pub async fn next(&mut self) -> Signal {
        // `recv` returns `None` only when the runtime shuts down.
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// A running command.
#[derive(Debug)]
pub struct Running {
    child: Child,
    pid: Pid,
    /// Signals go to the command's process group (its children too), or only to
    /// the command in `--foreground` mode.
    group: bool,
}

/// Start `command` with `env` added to lockctl's environment.
pub fn spawn(
    command: &[OsString],
    env: &[(&str, String)],
    foreground: bool,
) -> Result<Running, CliError> {
    let Some((program, args)) = command.split_first() else {
        return Err(CliError::Usage("no command given after --".into()));
    };
    // Through `lockctl __exec`, which arms the kernel's parent-death signal and
    // then becomes the command (see `exec`): if lockctl is killed, so is the
    // command.
    let mut cmd = Command::new(crate::exec::OWN_EXECUTABLE);
    cmd.arg(crate::exec::SUBCOMMAND)
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--")
        .arg(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // lockctl's owner is this process's: a lockctl the command starts
        // must not write it too.
        .env_remove("LOCKCTL_OWNER");
    if !foreground {
        // Its own process group: Ctrl-C reaches lockctl alone, which forwards
        // it once, and a lost lock stops the command's children as well.
        cmd.process_group(0);
    }
    // The wrapper reports a command that cannot run (and exits 126 or 127);
    // failing to start lockctl's own wrapper is lockctl's error.
    let child = cmd.spawn().map_err(CliError::io(
        "starting the command (through lockctl __exec)",
    ))?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| CliError::Io {
            what: "starting the command",
            source: std::io::Error::other("the started command has no process id"),
        })?;
    Ok(Running {
        child,
        pid,
        group: !foreground,
    })
}

impl Running {
    /// What the watchdog kills if lockctl cannot: the command's group, or the
    /// command alone when it shares lockctl's group (`--foreground`).
    pub fn target(&self) -> Target {
        if self.group {
            Target::Group(self.pid)
        } else {
            Target::Process(self.pid)
        }
    }

    /// Send `sig` to the command (and its process group).
    pub fn signal(&self, sig: Signal) {
        let result = if self.group {
            killpg(self.pid, sig)
        } else {
            kill(self.pid, sig)
        };
        // ESRCH: it is already gone, and `wait` will say how it ended.
        if let Err(error) = result {
            tracing::debug!(%error, ?sig, "signalling the command failed");
        }
    }

    /// Whether processes of the command's process group are still there (its
    /// children, after the command itself exited). Always false in
    /// `--foreground` mode, where the group is lockctl's own.
    pub fn group_left(&self) -> bool {
        self.group && killpg(self.pid, None).is_ok()
    }

    /// Wait for the command to end. Cancel safe.
    pub async fn wait(&mut self) -> Result<ExitStatus, CliError> {
        self.child
            .wait()
            .await
            .map_err(CliError::io("waiting for the command"))
    }
}

/// How the command ended, as an exit code: its own, or 128 + the signal that
/// killed it (the shell's convention).
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

/// Whether a SIGINT lockctl got may have come from its terminal, which then
/// sent it to the command too: lockctl's process group is the terminal's
/// foreground group. (`kill -INT` from elsewhere, or no terminal at all: it
/// reached lockctl alone.)
pub fn terminal_may_have_sent_it() -> bool {
    // The controlling terminal itself, not stdin: stdin may be a file or a
    // pipe (`--data -`) while Ctrl-C still comes from the terminal.
    std::fs::File::open("/dev/tty").is_ok_and(|tty| {
        nix::unistd::tcgetpgrp(&tty).is_ok_and(|foreground| foreground == nix::unistd::getpgrp())
    })
}

/// Sleep until `deadline`, or forever when there is none.
pub async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
