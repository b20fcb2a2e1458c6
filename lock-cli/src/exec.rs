//! The command's first moments: lockctl starts `lockctl __exec --parent PID --
//! COMMAND...`, which asks the kernel to SIGKILL it when lockctl dies (Linux's
//! parent-death signal, which survives `exec`), then becomes the command.
//!
//! Setting the parent-death signal between `fork` and `exec` needs code in the
//! forked child; doing it in a freshly started copy of lockctl instead keeps
//! lockctl free of `unsafe`. The cost is one extra `exec` (about a millisecond).
//! The signal reaches only the command itself; the watchdog kills the rest of
//! its process group.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, getppid};

use crate::exit::{CANNOT_EXECUTE, NOT_FOUND};

/// The hidden subcommand that runs this.
pub const SUBCOMMAND: &str = "__exec";

/// lockctl's own executable, for its helpers (`__exec`, `__watchdog`): the
/// kernel's link to the running binary, which works even when the file was
/// replaced or deleted by an upgrade during a long wait (the path
/// `current_exe()` returns would then end in " (deleted)").
pub const OWN_EXECUTABLE: &str = "/proc/self/exe";

/// Arm the parent-death signal and exec `command`; returns only on failure,
/// with the exit code to end with.
///
/// The signal fires when the *thread* that started this process exits: lockctl
/// starts it from the main thread of its single-threaded runtime, which lives
/// as long as lockctl does. (Starting it from a worker or blocking-pool thread
/// would kill the command whenever that thread ended.)
pub fn exec(parent: i32, command: &[OsString]) -> u8 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("lockctl: no command given");
        return crate::exit::USAGE;
    };
    let name = program.to_string_lossy().into_owned();
    if let Err(error) = prctl::set_pdeathsig(Signal::SIGKILL) {
        eprintln!("lockctl: cannot run {name}: arming the parent-death signal failed: {error}");
        return CANNOT_EXECUTE;
    }
    // lockctl may have died before the signal was armed: then nobody would
    // ever send it.
    if getppid() != Pid::from_raw(parent) {
        eprintln!("lockctl: not running {name}: lockctl exited before it started");
        return CANNOT_EXECUTE;
    }
    // std's exec, not a bare execvp: it restores what Rust's runtime changed
    // in this process (SIGPIPE is ignored here, and an ignored signal would
    // survive the exec: `yes | head -1` would print "Broken pipe"), searches
    // PATH and refuses arguments with NUL bytes with an error.
    let error = std::process::Command::new(program).args(args).exec();
    eprintln!("lockctl: cannot run {name}: {error}");
    if error.kind() == std::io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}
