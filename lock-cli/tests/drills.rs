//! Fault drills of `lockctl run` as an operator would run them, against the
//! emulator, some through a TCP fault proxy (`lock_testkit::proxy`): the
//! command never runs beside the next holder, whatever it does on SIGTERM and
//! whatever happens to lockctl; failed acquires leave nothing held; releases
//! whose answers are lost tell the truth. Commands append a timestamp every
//! 100 ms; "never beside" means the first command's last timestamp comes
//! before the second command's first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use lock_testkit::proxy::{FaultProxy, ProxyMode, ScriptedFault};
use nix::sys::signal::{Signal, kill};
use support::{Env, Process, wait_for_file, wait_until};

const LIMIT: Duration = Duration::from_secs(60);

/// A shell command that appends `date +%s%N` to `log` every 100 ms, after
/// `setup` (a trap, say).
fn ticking(setup: &str, log: &Path) -> String {
    format!(
        "{setup} while :; do date +%s%N >> {log}; sleep 0.1; done",
        log = log.display()
    )
}

fn stamps(log: &Path) -> Vec<u128> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// `lockctl ARGS` reaching the emulator through `proxy`.
fn via<'a>(proxy: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--endpoint-url", proxy];
    all.extend_from_slice(args);
    all
}

/// Start the next holder (going direct, waiting up to 30 s), wait for both
/// runs to end, and check the first command's last timestamp comes before the
/// second's first. Returns the gap.
fn next_holder_starts_after_the_first_command_is_gone(
    env: &Env,
    mut first: Process,
    first_log: &Path,
    expected_first_code: Option<i32>,
) -> Duration {
    let second_log = env.path("second");
    let script = format!(
        "i=0; while [ $i -lt 5 ]; do date +%s%N >> {log}; sleep 0.1; i=$((i+1)); done",
        log = second_log.display()
    );
    let second = env.spawn(
        "second",
        &[
            "run", "job", "--wait", "30s", "--lease", "3s", "--", "sh", "-c", &script,
        ],
    );
    // When the first lockctl exits (wall clock, as the commands' stamps).
    let deadline = Instant::now() + LIMIT;
    let first_exited = loop {
        if first.child.try_wait().unwrap().is_some() {
            break std::time::SystemTime::now();
        }
        assert!(Instant::now() < deadline, "the first lockctl did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    let second = second.finish(LIMIT);
    assert_eq!(second.code, Some(0), "{second:?}");
    let first = first.finish(LIMIT);
    assert_eq!(first.code, expected_first_code, "{first:?}");
    let (a, b) = (stamps(first_log), stamps(&second_log));
    assert!(!a.is_empty() && !b.is_empty(), "{a:?} {b:?}");
    let (last, next) = (*a.iter().max().unwrap(), *b.iter().min().unwrap());
    assert!(
        last < next,
        "the first command ran {:?} beside the next holder's\nfirst: {first:?}",
        Duration::from_nanos(u64::try_from(last - next).unwrap())
    );
    let gap = Duration::from_nanos(u64::try_from(next - last).unwrap());
    let exited = first_exited
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    println!(
        "the next holder's command started {gap:?} after the first's last sign of life; \
         the first lockctl exited {:?} after it",
        Duration::from_nanos(u64::try_from(exited.saturating_sub(last)).unwrap())
    );
    gap
}

fn proxy(env: &Env) -> FaultProxy {
    FaultProxy::start(&env.endpoint).unwrap()
}

/// The partition drill: `lockctl run job ARGS -- sh -c SCRIPT` reaches the
/// emulator through a fault proxy; once the command has written its first
/// timestamp to the log `script` is made with, the holder is partitioned and
/// the next holder, going direct, must start only after the command is gone.
fn partitioned_holder(prefix: &str, args: &[&str], script: impl FnOnce(&Path) -> String) {
    let Some(env) = Env::with_table(prefix) else {
        return;
    };
    let proxy = proxy(&env);
    let url = proxy.url();
    let log = env.path("first");
    let script = script(&log);
    let mut run = vec!["run", "job"];
    run.extend_from_slice(args);
    run.extend(["--", "sh", "-c", &script]);
    let first = env.spawn("first", &via(&url, &run));
    wait_for_file(&log, LIMIT);
    proxy.set(ProxyMode::Blackhole);
    next_holder_starts_after_the_first_command_is_gone(&env, first, &log, Some(4));
}

#[test]
fn a_partitioned_holder_whose_command_ignores_sigterm_is_killed_before_the_next_holder_starts() {
    partitioned_holder("ignores-term", &["--lease", "3s"], |log| {
        ticking("trap '' TERM;", log)
    });
}

#[test]
fn a_partitioned_holder_whose_command_needs_two_seconds_to_stop_is_gone_before_the_next_holder() {
    // On SIGTERM it goes on writing for 2 s, then exits.
    partitioned_holder(
        "slow-stop",
        &["--lease", "8s", "--grace", "2500ms"],
        |log| {
            let cleanup = format!(
                "trap 'i=0; while [ $i -lt 20 ]; do date +%s%N >> {log}; sleep 0.1; i=$((i+1)); done; exit 0' TERM;",
                log = log.display()
            );
            ticking(&cleanup, log)
        },
    );
}

#[test]
fn a_partitioned_holder_whose_command_leaves_a_child_that_ignores_sigterm_is_gone_before_the_next_holder()
 {
    // The command (a shell that dies on SIGTERM) runs a child that ignores it:
    // when the command is gone, its child is not.
    partitioned_holder("leftover-child", &["--lease", "3s"], |log| {
        let child = ticking("trap '' TERM;", log).replace('\'', "'\\''");
        format!("sh -c '{child}'")
    });
}

#[test]
fn processes_the_command_leaves_behind_are_stopped_before_the_lock_is_released() {
    let Some(env) = Env::with_table("leftovers") else {
        return;
    };
    let background = env.path("background");
    let script = format!("sleep 1000 & echo $! > {}", background.display());
    let out = env.run(&["run", "job", "--lease", "3s", "--", "sh", "-c", &script]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("left processes"), "{out:?}");
    let pid: i32 = wait_for_file(&background, LIMIT).trim().parse().unwrap();
    assert!(!alive(pid), "the background process outlived the lock");
}

#[test]
fn the_command_runs_with_default_signal_dispositions() {
    let Some(env) = Env::with_table("sigpipe") else {
        return;
    };
    // `yes` dies of SIGPIPE when `head` exits, as in any shell; with SIGPIPE
    // ignored it would print "Broken pipe" and exit 1.
    let out = env.run(&["run", "job", "--", "sh", "-c", "yes | head -1"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "y", "{out:?}");
    assert!(!out.stderr.contains("Broken pipe"), "{out:?}");
}

/// Whether `pid` is a live process (not gone, not a zombie nobody reaped).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[test]
fn killing_lockctl_with_sigkill_kills_its_command_and_the_commands_children() {
    let Some(env) = Env::with_table("kill9") else {
        return;
    };
    let (child_pid, grandchild_pid) = (env.path("child"), env.path("grandchild"));
    let script = format!(
        "sleep 1000 & echo $! > {g}; echo $$ > {c}; wait",
        g = grandchild_pid.display(),
        c = child_pid.display()
    );
    let holder = env.spawn(
        "holder",
        &["run", "job", "--lease", "3s", "--", "sh", "-c", &script],
    );
    let child: i32 = wait_for_file(&child_pid, LIMIT).trim().parse().unwrap();
    let grandchild: i32 = wait_for_file(&grandchild_pid, LIMIT)
        .trim()
        .parse()
        .unwrap();
    assert!(alive(child) && alive(grandchild));
    kill(holder.pid(), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    let out = holder.finish(LIMIT);
    assert_eq!(out.status.code(), None, "{out:?}");
    wait_until(
        "the command and its child are gone",
        Duration::from_secs(5),
        || !alive(child) && !alive(grandchild),
    );
    println!(
        "command and child gone {:?} after lockctl was killed",
        killed.elapsed()
    );
}

#[test]
fn a_stopped_lockctls_command_is_killed_by_the_watchdog_before_the_next_holder_starts() {
    let Some(env) = Env::with_table("sigstop") else {
        return;
    };
    let log = env.path("first");
    let script = ticking("", &log);
    let first = env.spawn(
        "first",
        &["run", "job", "--lease", "3s", "--", "sh", "-c", &script],
    );
    wait_for_file(&log, LIMIT);
    kill(first.pid(), Signal::SIGSTOP).unwrap();
    let stopped = first.pid();
    let second_log = env.path("second");
    let script = format!("date +%s%N >> {}", second_log.display());
    let second = env.run(&[
        "run", "job", "--wait", "30s", "--lease", "3s", "--", "sh", "-c", &script,
    ]);
    assert_eq!(second.code, Some(0), "{second:?}");
    let (a, b) = (stamps(&log), stamps(&second_log));
    let (last, next) = (*a.iter().max().unwrap(), *b.iter().min().unwrap());
    // Let the stopped lockctl go (it finds its command killed).
    let _ = kill(stopped, Signal::SIGCONT);
    let out = first.finish(LIMIT);
    assert!(
        last < next,
        "the stopped holder's command ran beside the next holder's; first: {out:?}"
    );
    println!(
        "the next holder's command started {:?} after the stopped holder's last sign of life",
        Duration::from_nanos(u64::try_from(next - last).unwrap())
    );
}

#[test]
fn an_acquire_whose_answers_are_lost_fails_within_seconds_and_leaves_nothing_held() {
    let Some(env) = Env::with_table("lost-answers") else {
        return;
    };
    let proxy = proxy(&env);
    let url = proxy.url();
    proxy.set(ProxyMode::LoseReplies);
    for (name, args) in [
        (
            "acquire",
            vec!["acquire", "job", "--wait", "0s", "--lease", "60s"],
        ),
        (
            "run",
            vec!["run", "job", "--wait", "0s", "--lease", "60s", "--", "true"],
        ),
    ] {
        let started = Instant::now();
        let out = env.spawn(name, &via(&url, &args)).finish(LIMIT);
        let took = started.elapsed();
        println!(
            "{name} with every answer lost: exit {:?} after {took:?}",
            out.code
        );
        assert_eq!(out.code, Some(1), "{out:?}");
        assert!(took < Duration::from_secs(15), "{name} took {took:?}");
        let shown = env.run(&["--output", "json", "show", "job"]);
        assert_eq!(shown.code, Some(0), "{shown:?}");
        let record = shown.json();
        assert!(
            record.is_null() || record["held"] == false,
            "{name} left the lock held: {record}"
        );
    }
    assert!(proxy.stats().replies_lost > 0, "{:?}", proxy.stats());
}

#[test]
fn a_release_by_version_whose_answer_was_lost_exits_0() {
    let Some(env) = Env::with_table("release-lost") else {
        return;
    };
    let out = env.run(&["--output", "json", "acquire", "job", "--lease", "1m"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let version = out.json()["version"].as_str().unwrap().to_owned();
    let proxy = proxy(&env);
    let url = proxy.url();
    // The read goes through; the release applies and its answer is lost.
    proxy.fail_next(ScriptedFault::Forward, 1);
    proxy.fail_next(ScriptedFault::LoseReply, 1);
    let out = env.run(&via(&url, &["release", "job", "--version", &version]));
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(proxy.stats().replies_lost, 1, "{:?}", proxy.stats());
    let shown = env.run(&["--output", "json", "show", "job"]).json();
    assert_eq!(shown["held"], false, "{shown}");
}

#[test]
fn two_sigterms_to_lockctl_escalate_to_sigkill_after_the_grace_period() {
    let Some(env) = Env::with_table("two-terms") else {
        return;
    };
    let ready = env.path("ready");
    let script = format!("trap '' TERM; echo up > {}; sleep 1000", ready.display());
    let run = env.spawn(
        "stubborn",
        &[
            "run", "job", "--lease", "20s", "--grace", "1s", "--", "sh", "-c", &script,
        ],
    );
    wait_for_file(&ready, LIMIT);
    kill(run.pid(), Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    kill(run.pid(), Signal::SIGTERM).unwrap();
    let sent = Instant::now();
    let out = run.finish(LIMIT);
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    assert!(out.stderr.contains("second SIGTERM"), "{out:?}");
    let shown = env.run(&["--output", "json", "show", "job"]).json();
    assert_eq!(shown["held"], false, "{shown}");
}

#[test]
fn in_the_foreground_a_sigint_sent_to_lockctl_alone_reaches_the_command() {
    let Some(env) = Env::with_table("fg-int") else {
        return;
    };
    let ready = env.path("ready");
    let script = format!(
        "trap 'exit 7' INT; echo up > {}; while :; do sleep 0.1; done",
        ready.display()
    );
    let run = env.spawn(
        "fg",
        &["run", "job", "--foreground", "--", "sh", "-c", &script],
    );
    wait_for_file(&ready, LIMIT);
    kill(run.pid(), Signal::SIGINT).unwrap();
    let out = run.finish(LIMIT);
    assert_eq!(out.code, Some(7), "{out:?}");
}
