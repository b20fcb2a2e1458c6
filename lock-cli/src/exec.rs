//! The command's first moments: lockctl starts `lockctl __exec --parent PID --
//! COMMAND...`, which asks the kernel to SIGKILL it when lockctl dies (Linux's
//! parent-death signal, which survives `exec`), then becomes the command.
//!
//! Setting the parent-death signal between `fork` and `exec` needs code in the
//! forked child; doing it in a freshly started copy of lockctl instead keeps
//! lockctl free of `unsafe`. The cost is one extra `exec` (about a millisecond).
//! The signal reaches only the command itself; the watchdog kills the rest of
//! its process group.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, execvp, getppid};

use crate::exit::{CANNOT_EXECUTE, NOT_FOUND};

/// The hidden subcommand that runs this.
pub const SUBCOMMAND: &str = "__exec";

/// Arm the parent-death signal and exec `command`; returns only on failure,
/// with the exit code to end with.
pub fn exec(parent: i32, command: &[OsString]) -> u8 {
    let Some((program, _)) = command.split_first() else {
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
    let arguments: Result<Vec<CString>, _> = command
        .iter()
        .map(|argument| CString::new(argument.as_bytes()))
        .collect();
    let Ok(arguments) = arguments else {
        eprintln!("lockctl: cannot run {name}: an argument contains a NUL byte");
        return CANNOT_EXECUTE;
    };
    let error = match execvp(&arguments[0], &arguments) {
        Ok(never) => match never {},
        Err(error) => error,
    };
    eprintln!(
        "lockctl: cannot run {name}: {}",
        std::io::Error::from_raw_os_error(error as i32)
    );
    if error == Errno::ENOENT {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}
