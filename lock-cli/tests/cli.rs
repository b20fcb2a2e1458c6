//! The `lockctl` binary against the moto DynamoDB emulator (started by
//! `./scripts/test`). Every test has its own table, so they run in parallel;
//! leases are short (2 s) and every wait has a deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use support::{Env, fence_after, wait_for_file, wait_until};

const LIMIT: Duration = Duration::from_secs(30);

/// `sh -c SCRIPT` for `run`.
fn sh(script: &str) -> [&str; 3] {
    ["sh", "-c", script]
}

#[test]
fn concurrent_runs_on_one_key_never_overlap() {
    let Some(env) = Env::with_table("overlap") else {
        return;
    };
    let log = env.path("log");
    let script = format!(
        "echo \"start $(date +%s%N) $LOCK_FENCE\" >> {log}; sleep 0.4; echo \"end $(date +%s%N) $LOCK_FENCE\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let mut args = vec!["run", "job", "--wait", "20s", "--lease", "2s", "--"];
            args.extend(sh(&script));
            env.spawn(&format!("run{i}"), &args)
        })
        .collect();
    for run in runs {
        let out = run.finish(LIMIT);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let events: Vec<(String, u128, u64)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[0].to_owned(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(events.len(), 6, "{text}");
    // In time order the log must read start, end, start, end, ... with one
    // fence per start/end pair, and fences increasing by one from the first
    // run's (where the store starts a new key).
    let mut sorted = events.clone();
    sorted.sort_by_key(|(_, at, _)| *at);
    assert_eq!(sorted, events, "lines were appended in time order");
    let first = events[0].2;
    for (pair, expected_fence) in events.chunks(2).zip(first..) {
        assert_eq!(pair[0].0, "start", "{text}");
        assert_eq!(pair[1].0, "end", "{text}");
        assert_eq!(pair[0].2, pair[1].2, "{text}");
        assert_eq!(pair[0].2, expected_fence, "{text}");
    }
}

/// `lockctl run job --lease 2s` killed with SIGKILL while its command runs: the
/// record is left held, nobody heartbeats it. Returns the command's pid (the
/// kernel and the watchdog kill it with lockctl; drills.rs checks that) and
/// the fence it held.
fn crashed_holder(env: &Env) -> (i32, u64) {
    let pidfile = env.path("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut args = vec!["run", "job", "--lease", "2s", "--"];
    args.extend(sh(&script));
    let holder = env.spawn("holder", &args);
    let orphan: i32 = wait_for_file(&pidfile, LIMIT).trim().parse().unwrap();
    let shown = env.run(&["show", "job", "-o", "json"]).json();
    assert_eq!(shown["held"], true, "{shown}");
    let fence = shown["fence"].as_u64().unwrap();
    kill(holder.pid(), Signal::SIGKILL).unwrap();
    let out = holder.finish(LIMIT);
    assert_eq!(out.status.code(), None, "killed by a signal: {out:?}");
    (orphan, fence)
}

#[test]
fn a_holder_killed_with_sigkill_is_taken_over_after_its_lease() {
    let Some(env) = Env::with_table("takeover") else {
        return;
    };
    let (orphan, crashed_fence) = crashed_holder(&env);

    // Nobody releases it: the next run waits for the lease, then takes over.
    let started = Instant::now();
    let out = env.run(&[
        "run",
        "job",
        "--wait",
        "15s",
        "--lease",
        "2s",
        "--",
        "sh",
        "-c",
        "echo $LOCK_FENCE",
    ]);
    let waited = started.elapsed();
    // The command it ran was in its own process group; stop it.
    let _ = killpg(Pid::from_raw(orphan), Signal::SIGKILL);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        (crashed_fence + 1).to_string(),
        "a takeover is a new fence: {out:?}"
    );
    assert!(
        waited >= Duration::from_secs(2),
        "taken over after {waited:?}, before the 2 s lease ran out"
    );
    assert!(
        out.stderr.contains("waiting for lock job: held by"),
        "progress names the holder: {out:?}"
    );
}

#[test]
fn a_cron_run_with_no_wait_takes_over_a_crashed_holder_and_skips_a_live_one() {
    let Some(env) = Env::with_table("cron") else {
        return;
    };
    let (orphan, crashed_fence) = crashed_holder(&env);
    let _ = killpg(Pid::from_raw(orphan), Signal::SIGKILL);

    // The next cron run (`--wait 0s`, the default) watches the record; it does
    // not change, so the run takes the lock over instead of skipping it forever.
    let started = Instant::now();
    let out = env.run(&[
        "run",
        "job",
        "--lease",
        "2s",
        "--",
        "sh",
        "-c",
        "echo $LOCK_FENCE",
    ]);
    let waited = started.elapsed();
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        (crashed_fence + 1).to_string(),
        "a takeover is a new fence: {out:?}"
    );
    assert!(waited < Duration::from_secs(8), "took {waited:?}");

    // A live holder (heartbeating every 0.5 s): the cron run skips it as soon
    // as it has seen the record change, with exit 3.
    let live = env.spawn(
        "live",
        &["run", "job", "--lease", "2s", "--", "sleep", "20"],
    );
    wait_until("the live holder holds the lock", LIMIT, || {
        env.run(&["show", "job", "-o", "json"]).json()["held"] == true
    });
    let started = Instant::now();
    let out = env.run(&["run", "job", "--", "true"]);
    let waited = started.elapsed();
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(waited < Duration::from_secs(4), "skipped after {waited:?}");
    kill(live.pid(), Signal::SIGTERM).unwrap();
    live.finish(LIMIT);
}

#[test]
fn cron_runs_with_permits_reclaim_a_crashed_holders_permit_and_skip_live_ones() {
    let Some(env) = Env::with_table("cron-permits") else {
        return;
    };
    support::cron_runs_reclaim_a_crashed_holders_permit(&env);
}

#[test]
fn sigterm_and_sigint_are_forwarded_and_the_exit_code_passed_through() {
    let Some(env) = Env::with_table("signals") else {
        return;
    };
    for (signal, code, foreground) in [
        (Signal::SIGTERM, 7, false),
        (Signal::SIGINT, 8, false),
        (Signal::SIGTERM, 9, true),
    ] {
        let ready = env.path(&format!("ready-{code}"));
        let script = format!(
            "trap 'exit {code}' {name}; echo up > {ready}; while :; do sleep 0.1; done",
            name = &signal.as_str()[3..],
            ready = ready.display()
        );
        let mut args = vec!["run", "job", "--lease", "2s"];
        if foreground {
            args.push("--foreground");
        }
        args.push("--");
        args.extend(sh(&script));
        let run = env.spawn(&format!("run-{code}"), &args);
        wait_for_file(&ready, LIMIT);
        kill(run.pid(), signal).unwrap();
        let out = run.finish(LIMIT);
        assert_eq!(out.code, Some(code), "{signal}: {out:?}");
        // Released on exit: vacant at once.
        let show = env.run(&["show", "job", "-o", "json"]);
        assert_eq!(show.json()["held"], false, "{show:?}");
    }
    // A command killed by a signal is reported the shell's way.
    let out = env.run(&["run", "job", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
}

#[test]
fn a_lost_lock_terminates_the_command_and_exits_4() {
    let Some(env) = Env::with_table("lost") else {
        return;
    };
    // A command that stops on SIGTERM.
    let ready = env.path("ready");
    let marker = env.path("terminated");
    let script = format!(
        "trap 'echo yes > {marker}; exit 0' TERM; echo up > {ready}; while :; do sleep 0.1; done",
        marker = marker.display(),
        ready = ready.display()
    );
    let mut args = vec!["run", "job", "--lease", "4s", "--grace", "1500ms", "--"];
    args.extend(sh(&script));
    let run = env.spawn("polite", &args);
    wait_for_file(&ready, LIMIT);
    let forced = env.run(&["release", "job", "--force", "--yes", "--owner", "operator"]);
    assert_eq!(forced.code, Some(0), "{forced:?}");
    let out = run.finish(LIMIT);
    assert_eq!(out.code, Some(4), "{out:?}");
    assert!(
        out.stderr.contains("operator"),
        "names who took it: {out:?}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "yes");

    // A command that ignores SIGTERM is killed after the grace period.
    let ready = env.path("ready-stubborn");
    let script = format!(
        "trap '' TERM; echo up > {ready}; while :; do sleep 0.1; done",
        ready = ready.display()
    );
    let mut args = vec!["run", "stubborn", "--lease", "2s", "--grace", "500ms", "--"];
    args.extend(sh(&script));
    let run = env.spawn("stubborn", &args);
    wait_for_file(&ready, LIMIT);
    let forced = env.run(&["release", "stubborn", "--force", "--yes"]);
    assert_eq!(forced.code, Some(0), "{forced:?}");
    let out = run.finish(LIMIT);
    assert_eq!(out.code, Some(4), "{out:?}");
    // Not the warning that comes with SIGTERM ("SIGKILL in 500ms"): the kill itself.
    assert!(
        out.stderr
            .contains("the command is still running: sending SIGKILL"),
        "{out:?}"
    );
}

#[test]
fn acquire_prints_fence_and_version_and_release_by_version_frees_it() {
    let Some(env) = Env::with_table("acquire") else {
        return;
    };
    let out = env.run(&[
        "acquire", "deploy", "--lease", "30s", "--owner", "script-1", "-o", "json",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let acquired = out.json();
    let first = acquired["fence"].as_u64().unwrap();
    assert!(first >= 1, "{acquired}");
    assert_eq!(acquired["owner"], "script-1");
    assert_eq!(acquired["lease_ms"], 30_000);
    let version = acquired["version"].as_str().unwrap().to_owned();

    // Held without a heartbeat: another acquire times out naming the holder.
    let out = env.run(&["acquire", "deploy", "--lease", "30s", "--wait", "1s"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(out.stderr.contains("script-1"), "{out:?}");

    // A wrong version releases nothing.
    let out = env.run(&["release", "deploy", "--version", "not-the-version"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("script-1"), "{out:?}");
    let out = env.run(&["release", "deploy", "--version", &version]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let show = env.run(&["show", "deploy", "-o", "json"]);
    assert_eq!(show.json()["held"], false, "{show:?}");

    // Text output is shell assignments.
    let out = env.run(&["acquire", "deploy", "--lease", "30s", "--owner", "it's me"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains(&format!("LOCK_FENCE={}\n", first + 1)),
        "{out:?}"
    );
    assert!(out.stdout.contains(r"LOCK_OWNER='it'\''s me'"), "{out:?}");
    let version = out
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("LOCK_VERSION="))
        .unwrap();
    let out = env.run(&["release", "deploy", "--version", version]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn show_and_list_print_json() {
    let Some(env) = Env::with_table("inspect") else {
        return;
    };
    // The fence each key was acquired with (its first).
    let mut fences = std::collections::HashMap::new();
    for key in ["alpha", "beta"] {
        let data = format!("data-{key}");
        let out = env.run(&[
            "acquire", key, "--lease", "1m", "--data", &data, "--owner", "ops",
        ]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let fence: u64 = fence_after(&out.stdout, "LOCK_FENCE=")
            .unwrap_or_else(|| panic!("no LOCK_FENCE: {out:?}"));
        fences.insert(key, fence);
    }
    let out = env.run(&["list", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let list = out.json();
    let locks = list.as_array().unwrap();
    assert_eq!(locks.len(), 2, "{list}");
    assert_eq!(locks[0]["key"], "alpha");
    assert_eq!(locks[1]["key"], "beta");
    for lock in locks {
        assert_eq!(lock["owner"], "ops");
        assert_eq!(lock["held"], true);
        let key = lock["key"].as_str().unwrap();
        assert_eq!(lock["fence"], fences[key], "{lock}");
        assert_eq!(lock["lease_ms"], 60_000);
        assert!(lock["version"].is_string());
    }
    let out = env.run(&["list", "--partition", "beta", "-o", "json"]);
    assert_eq!(out.json().as_array().unwrap().len(), 1, "{out:?}");

    let out = env.run(&["show", "alpha", "-o", "json"]);
    let shown = out.json();
    assert_eq!(shown["data"], "data-alpha");
    assert_eq!(shown["sort_key"], serde_json::Value::Null);
    let out = env.run(&["show", "nothing", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json(), serde_json::Value::Null);
    // Text output for people.
    let out = env.run(&["list"]);
    assert!(out.stdout.starts_with("KEY "), "{out:?}");
    assert_eq!(out.stdout.lines().count(), 3, "{out:?}");

    // Forced release asks first, and refuses without a terminal.
    let out = env.run(&["release", "alpha", "--force"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--yes"), "{out:?}");
    let out = env.run(&["release", "alpha", "--force", "--yes", "-o", "json"]);
    let released = out.json();
    assert_eq!(released["released"], true, "{out:?}");
    assert_eq!(released["lock"]["owner"], "ops", "{out:?}");
}

#[test]
fn python_layout_honours_a_python_dynamodb_lock_record() {
    let Some(env) = Env::with_layout("python", "python") else {
        return;
    };
    env.create_table();
    // What python-dynamodb-lock 0.9 writes (its `_add_new_lock_to_dynamodb`).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
        use aws_sdk_dynamodb::types::AttributeValue;
        let config = aws_sdk_dynamodb::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "tests"))
            .endpoint_url(&env.endpoint)
            .build();
        aws_sdk_dynamodb::Client::from_conf(config)
            .put_item()
            .table_name(&env.table)
            .item("lock_key", AttributeValue::S("job".into()))
            .item("sort_key", AttributeValue::S("-".into()))
            .item("owner_name", AttributeValue::S("python-host-1234".into()))
            .item("lease_duration", AttributeValue::N("30.0".into()))
            .item(
                "record_version_number",
                AttributeValue::S("0f8e6c3a-python".into()),
            )
            .item("expiry_time", AttributeValue::N("4000000000".into()))
            .send()
            .await
            .unwrap();
    });
    let out = env.run(&["run", "job", "--wait", "1s", "--", "true"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(out.stderr.contains("python-host-1234"), "{out:?}");
    let show = env.run(&["show", "job", "-o", "json"]).json();
    assert_eq!(show["owner"], "python-host-1234");
    assert_eq!(show["fence"], 0, "python-dynamodb-lock writes no fence");
    assert_eq!(show["lease_ms"], 30_000);
    // The default layout does not fit this table, and says so.
    let out = env.run(&["--layout", "default", "validate-table"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("key schema"), "{out:?}");
    // A lock operation on it is recognised by the typed mismatch in the
    // error's sources, and told which flag to change.
    let out = env.run(&["--layout", "default", "show", "job"]);
    assert!(
        out.stderr.contains("key schema")
            && out.stderr.contains("pass the --layout it was made for"),
        "{out:?}"
    );
}

#[test]
fn bad_input_is_a_usage_error() {
    // Refused before anything is sent: no server is needed, and none is there.
    let env = Env::offline("usage");
    for (args, expected) in [
        (&["run", "job", "--lease", "30", "--", "true"][..], "30s"),
        (
            &["run", "job", "--wait", "soon", "--", "true"][..],
            "duration",
        ),
        (&["run", "job"][..], "COMMAND"),
        (&["acquire", "job"][..], "--lease"),
        (&["--layout", "cobol", "show", "job"][..], "cobol"),
        (&["release", "job"][..], "--version"),
        (
            &["release", "job", "--yes", "--version", "v"][..],
            "--force",
        ),
        (
            &["run", "job", "--lease", "0s", "--", "true"][..],
            "from 1s to 365 days",
        ),
        // Below any sane lease: refused with the bounds, not "heartbeat period
        // must be greater than zero", a setting lockctl has no option for.
        (
            &["run", "job", "--lease", "1ns", "--", "true"][..],
            "from 1s to 365 days",
        ),
        (
            &["run", "job", "--lease", "1000y", "--", "true"][..],
            "from 1s to 365 days",
        ),
        (
            &["acquire", "job", "--lease", "1ms"][..],
            "from 1s to 365 days",
        ),
        // A grace period that does not fit the lease names the most it allows.
        (
            &[
                "run", "job", "--lease", "5s", "--grace", "10s", "--", "true",
            ][..],
            "at most --grace 1s 950ms",
        ),
        (
            &[
                "acquire",
                "job",
                "--lease",
                "1m",
                "--data",
                "x",
                "--data-file",
                "f",
            ][..],
            "--data-file",
        ),
        (
            &[
                "acquire",
                "job",
                "--lease",
                "1m",
                "--data-file",
                "/nonexistent/data",
            ][..],
            "cannot read --data-file /nonexistent/data",
        ),
        (&["--table", "x", "show", "job"][..], "table name"),
    ] {
        let out = env.run(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(expected),
            "{args:?}: stderr should mention {expected:?}: {out:?}"
        );
    }
    let out = env.run(&["--help"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("Exit codes:"), "{out:?}");
    // The help names every store lockctl takes.
    let first = out.stdout.lines().next().unwrap_or_default();
    for store in [
        "DynamoDB",
        "PostgreSQL",
        "bucket",
        "etcd",
        "Redis",
        "Valkey",
    ] {
        assert!(first.contains(store), "{store} in {first:?}");
    }
    for url in ["postgres://", "s3://", "etcd://", "redis://"] {
        assert!(out.stdout.contains(url), "{url}: {out:?}");
    }
}

#[test]
fn create_table_then_validate_table_and_a_missing_table_is_explained() {
    let Some(env) = Env::new("table") else {
        return;
    };
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains(&env.table), "names the table: {out:?}");
    assert!(
        out.stderr.contains(&format!(
            "lockctl --table {} --layout native create-table",
            env.table
        )),
        "says how to create it: {out:?}"
    );
    // A lock command on the missing table says the same.
    let out = env.run(&["show", "job"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("create-table"), "{out:?}");

    let out = env.run(&["create-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["table"], env.table.as_str());
    let out = env.run(&["validate-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let report = out.json();
    assert_eq!(report["ttl_attribute"], "expires_at");
    assert_eq!(report["warnings"], serde_json::json!([]));
    let out = env.run(&["create-table"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("already exists"), "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "lockctl --table {} --layout native validate-table",
            env.table
        )) && !out.stderr.contains("validate_table"),
        "names the command, not the Rust function: {out:?}"
    );
}

#[test]
fn a_non_utf8_argument_is_refused_naming_the_argument() {
    use std::os::unix::ffi::OsStrExt;
    let Some(env) = Env::new("utf8") else {
        return;
    };
    let bad = std::ffi::OsStr::from_bytes(b"job\xff");
    let out = env.lockctl(&[]).arg("show").arg(bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("<KEY>"), "names the argument: {stderr}");
    assert!(stderr.contains("not valid UTF-8"), "{stderr}");
}

#[test]
fn data_over_the_argument_limit_comes_from_a_file_or_standard_input() {
    use std::io::Write;
    let Some(env) = Env::with_table("data") else {
        return;
    };
    // 300 KB: more than one argument may hold (128 KiB on Linux).
    let data = "checkpoint ".repeat(30_000);
    let file = env.path("data");
    std::fs::write(&file, &data).unwrap();
    let out = env.run(&[
        "acquire",
        "from-file",
        "--lease",
        "1m",
        "--data-file",
        file.to_str().unwrap(),
    ]);
    // DynamoDB items are at most 400 KB: 330 KB of data fits.
    assert_eq!(out.code, Some(0), "{out:?}");
    let shown = env.run(&["-o", "json", "show", "from-file"]).json();
    assert_eq!(shown["data"].as_str().map(str::len), Some(data.len()));

    let mut child = env
        .lockctl(&["acquire", "from-stdin", "--lease", "1m", "--data", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(data.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let shown = env.run(&["-o", "json", "show", "from-stdin"]).json();
    assert_eq!(shown["data"].as_str(), Some(data.as_str()));
}

#[test]
fn control_characters_from_the_store_never_reach_the_terminal() {
    let Some(env) = Env::with_table("escape") else {
        return;
    };
    let owner = "evil\u{1b}[2J\u{1b}]0;pwned\u{7}\rowner";
    let out = env.run(&[
        "--owner",
        owner,
        "acquire",
        "job\u{1b}[31m",
        "--lease",
        "1m",
        "--data",
        "a\u{1b}[8mb",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    for args in [&["list"][..], &["show", "job\u{1b}[31m"][..]] {
        let out = env.run(args);
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(
            !out.stdout.contains('\u{1b}')
                && !out.stdout.contains('\r')
                && !out.stdout.contains('\u{7}'),
            "{args:?} printed raw control characters: {:?}",
            out.stdout
        );
        assert!(out.stdout.contains("evil\\u{1b}[2J"), "{:?}", out.stdout);
    }
    // A waiter's progress (printed once a second) and error name the key and
    // the holder the same way.
    let out = env.run(&["run", "job\u{1b}[31m", "--wait", "2500ms", "--", "true"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(!out.stderr.contains('\u{1b}'), "{:?}", out.stderr);
}

#[test]
fn waiting_shows_the_holder_and_a_released_lock_is_taken_at_once() {
    let Some(env) = Env::with_table("wait") else {
        return;
    };
    let ready = env.path("ready");
    let script = format!("echo $LOCK_FENCE > {}; sleep 2.5", ready.display());
    let mut args = vec!["run", "job", "--owner", "first", "--lease", "10s", "--"];
    args.extend(sh(&script));
    let first = env.spawn("first", &args);
    let fence: u64 = wait_for_file(&ready, LIMIT).trim().parse().unwrap();
    let second = env.spawn(
        "second",
        &[
            "run", "job", "--wait", "20s", "--lease", "10s", "--", "true",
        ],
    );
    wait_until("the waiter names the holder", LIMIT, || {
        second.stderr_so_far().contains(&format!(
            "waiting for lock job: held by first (fence {fence})"
        ))
    });
    let started = Instant::now();
    assert_eq!(first.finish(LIMIT).code, Some(0));
    let out = second.finish(LIMIT);
    assert_eq!(out.code, Some(0), "{out:?}");
    // Released, not expired: taken well before the 10 s lease could run out.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        out.stderr
            .contains(&format!("acquired lock job (fence {})", fence + 1)),
        "{out:?}"
    );
}

/// `lockctl args` with `configure` applied to its environment, run to the end;
/// (exit code, stderr, time taken).
fn run_with(
    env: &Env,
    args: &[&str],
    configure: impl FnOnce(&mut std::process::Command),
) -> (Option<i32>, String, Duration) {
    let mut command = env.lockctl(args);
    configure(&mut command);
    let started = Instant::now();
    let out = command.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[test]
fn misconfigured_aws_fails_at_once_saying_what_to_set() {
    let Some(env) = Env::with_table("misconfigured") else {
        return;
    };
    let no_credentials = |command: &mut std::process::Command| {
        command
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY");
    };
    // No credentials anywhere: refused before anything is sent, not retried
    // for a lease as if the write might have applied.
    let (code, stderr, took) = run_with(&env, &["run", "job", "--", "true"], no_credentials);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("Unauthorized"), "{stderr}");
    assert!(
        stderr.contains("AWS_ACCESS_KEY_ID"),
        "says what to set: {stderr}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
    // A profile that does not exist: the same.
    let (code, stderr, took) = run_with(&env, &["run", "job", "--", "true"], |command| {
        no_credentials(command);
        command.env("AWS_PROFILE", "no-such-profile");
    });
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("Unauthorized"), "{stderr}");
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
    // No region: a usage error naming the ways to set one.
    let (code, stderr, took) = run_with(&env, &["run", "job", "--", "true"], |command| {
        command.env_remove("AWS_REGION");
    });
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--region") && stderr.contains("AWS_REGION"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
    // Nothing was written by any of them.
    let show = env.run(&["show", "job", "-o", "json"]);
    assert_eq!(show.code, Some(0), "{show:?}");
    assert_eq!(show.stdout.trim(), "null", "no record: {show:?}");
}

#[test]
fn a_credential_process_profile_supplies_the_credentials() {
    let Some(env) = Env::with_table("credproc") else {
        return;
    };
    let script = env.path("credentials.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": \"testing\", \"SecretAccessKey\": \"testing\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = env.path("aws-config");
    std::fs::write(
        &config,
        format!(
            "[profile locks]\ncredential_process = {}\nregion = us-east-1\n",
            script.display()
        ),
    )
    .unwrap();
    let (code, stderr, _) = run_with(&env, &["run", "job", "--", "true"], |command| {
        command
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_REGION")
            .env("AWS_CONFIG_FILE", &config)
            .env("AWS_PROFILE", "locks");
    });
    assert_eq!(code, Some(0), "{stderr}");
}

#[test]
fn output_into_a_pipe_has_no_colour_and_errors_name_what_failed() {
    let Some(env) = Env::with_table("plain") else {
        return;
    };
    // Library logs on (they are coloured at a terminal): none of it coloured
    // into a pipe.
    let (code, stderr, _) = run_with(&env, &["run", "job", "--", "true"], |command| {
        command.env("LOCKCTL_LOG", "debug");
    });
    assert_eq!(code, Some(0), "{stderr}");
    assert!(!stderr.is_empty(), "debug logs were written");
    assert!(
        !stderr.contains('\u{1b}'),
        "escape codes in a pipe: {stderr:?}"
    );
    // A listing that fails says it was the listing, not "lock *".
    let mut missing = env.lockctl(&["list"]);
    missing.args(["--table", "no-such-table-here"]);
    let out = missing.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("lock *"), "{stderr}");
    assert!(stderr.contains("no-such-table-here"), "{stderr}");
    // An endpoint with an impossible port is refused before anything is sent.
    let mut command = env.lockctl(&["--endpoint-url", "http://127.0.0.1:99999", "list"]);
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("65535"), "{stderr}");
}

#[test]
fn an_endpoint_that_is_not_dynamodb_fails_at_once() {
    let Some(env) = Env::new("not-dynamodb") else {
        return;
    };
    // A web server that implements no POST: every request answered 501 with
    // an HTML body, as `python -m http.server` does.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut buffer = [0u8; 65536];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = stream.read(&mut buffer);
            let body = "<html><body>Unsupported method ('POST')</body></html>";
            let _ = write!(
                stream,
                "HTTP/1.1 501 Not Implemented\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let mut command = env.lockctl(&["--endpoint-url", &url, "run", "job", "--", "true"]);
    let started = Instant::now();
    let out = command.output().unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is the endpoint URL a DynamoDB endpoint"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(3), "took {took:?}: {stderr}");
}

#[test]
fn a_table_of_another_layout_is_explained_with_what_to_run() {
    let Some(env) = Env::with_layout("wrong-layout", "python") else {
        return;
    };
    env.create_table();
    for args in [
        &["--layout", "default", "show", "job"][..],
        &["--layout", "default", "list"][..],
        &["--layout", "default", "run", "job", "--", "true"][..],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, Some(1), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("validate-table") && out.stderr.contains("--layout"),
            "{args:?}: points to validate-table and --layout: {out:?}"
        );
        assert!(
            out.stderr.contains("lock_key"),
            "names the schema found: {out:?}"
        );
        assert!(
            out.stderr.len() < 1000,
            "{} bytes: {out:?}",
            out.stderr.len()
        );
    }
}

#[test]
fn the_next_holder_keeps_the_data_unless_it_clears_it() {
    let Some(env) = Env::with_table("keep-data") else {
        return;
    };
    let out = env.run(&["run", "job", "--data", "checkpoint 7", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let shown = env.run(&["-o", "json", "show", "job"]).json();
    let first = shown["fence"].as_u64().unwrap();
    let out = env.run(&["run", "job", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let shown = env.run(&["-o", "json", "show", "job"]).json();
    assert_eq!(shown["data"], "checkpoint 7", "{shown}");
    assert_eq!(shown["fence"], first + 1, "{shown}");
    let out = env.run(&["run", "job", "--clear-data", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let shown = env.run(&["-o", "json", "show", "job"]).json();
    assert_eq!(shown["data"], serde_json::Value::Null, "{shown}");
}

/// `run` names its lock in LOCK_* variables that mean what `acquire`'s do;
/// lockctl's own settings are LOCKCTL_*, and LOCKCTL_OWNER is not passed on,
/// so a lockctl the command starts writes an owner name of its own.
#[test]
fn a_command_under_run_sees_its_lock_and_a_nested_lockctl_has_its_own_owner() {
    let Some(env) = Env::with_table("nested") else {
        return;
    };
    let nested = format!(
        "{} {}",
        env!("CARGO_BIN_EXE_lockctl"),
        env.target_args().join(" ")
    );
    let script = format!(
        "echo \"key=$LOCK_KEY sort=${{LOCK_SORT_KEY-unset}} fence=$LOCK_FENCE owner=$LOCK_OWNER \
         settings=${{LOCKCTL_OWNER-unset}}\"; {nested} acquire inner --lease 5s -o json"
    );
    let mut args = vec!["run", "outer", "--lease", "5s", "--"];
    args.extend(sh(&script));
    let out = env
        .lockctl(&args)
        .env("LOCKCTL_OWNER", "parent")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The fence the run held, from the (released) record.
    let shown = env.run(&["show", "outer", "-o", "json"]).json();
    let fence = shown["fence"].as_u64().unwrap();
    assert!(
        stdout.contains(&format!(
            "key=outer sort=unset fence={fence} owner=parent settings=unset"
        )),
        "{stdout}"
    );
    let inner: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let inner_owner = inner["owner"].as_str().unwrap();
    assert_ne!(inner_owner, "parent", "{stdout}");
    assert!(!inner_owner.is_empty());
}

/// `--min-hold`: a command that ends early leaves the lock held (one final
/// write) until the hold ends; a `run --wait 0s` meanwhile skips (exit 3) at
/// once instead of watching for a dead holder.
#[test]
fn run_min_hold_keeps_the_lock_after_a_short_command() {
    let Some(env) = Env::with_table("minhold") else {
        return;
    };
    let out = env.run(&[
        "run",
        "nightly",
        "--lease",
        "2s",
        "--min-hold",
        "30s",
        "--",
        "true",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let show = env.run(&["show", "nightly", "-o", "json"]);
    let record = show.json();
    assert_eq!(record["held"], true, "{show:?}");
    assert!(
        record["version"].as_str().unwrap().contains(".final."),
        "{show:?}"
    );
    let lease = record["lease_ms"].as_u64().unwrap();
    assert!((25_000..=30_000).contains(&lease), "{show:?}");
    let started = Instant::now();
    let again = env.run(&["run", "nightly", "--lease", "2s", "--", "true"]);
    assert_eq!(again.code, Some(3), "{again:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "skipped at once"
    );
    // Bad input is refused before anything is written.
    let bad = env.run(&["run", "other", "--min-hold", "soon", "--", "true"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");
}

/// `--max-time`: the command is stopped (SIGTERM) when it has run that long,
/// the lock is released and lockctl exits with 5.
#[test]
fn run_max_time_stops_the_command_and_exits_5() {
    let Some(env) = Env::with_table("maxtime") else {
        return;
    };
    let started = Instant::now();
    let out = env.run(&[
        "run",
        "job",
        "--lease",
        "4s",
        "--max-time",
        "1s",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(out.code, Some(5), "{out:?}");
    assert!(out.stderr.contains("--max-time"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "{out:?}");
    let show = env.run(&["show", "job", "-o", "json"]);
    assert_eq!(show.json()["held"], false, "{show:?}");
}

/// Lines of `path` (empty if it does not exist yet).
fn lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn elect_runs_the_command_on_one_leader_and_another_takes_over_when_it_dies() {
    let Some(env) = Env::with_table("elect") else {
        return;
    };
    let log = env.path("log");
    let script = format!(
        "echo \"$LOCK_FENCE $LOCK_OWNER\" >> {}; exec sleep 60",
        log.display()
    );
    let candidate = |owner: &str| {
        let mut args = vec!["elect", "leader", "--lease", "2s", "--owner", owner, "--"];
        args.extend(sh(&script));
        env.spawn(owner, &args)
    };
    let a = candidate("node-a");
    wait_until("a leader", LIMIT, || lines(&log).len() == 1);
    let first: u64 = lines(&log)[0]
        .strip_suffix(" node-a")
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("node-a leads first: {:?}", lines(&log)));
    let b = candidate("node-b");
    wait_until("the second candidate follows", LIMIT, || {
        b.stderr_so_far()
            .contains(&format!("following node-a (fence {first})"))
    });
    // One leader: the second candidate's command has not run.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(lines(&log), [format!("{first} node-a")]);

    // The leader's host dies: lockctl and its command (the watchdog kills it).
    kill(a.pid(), Signal::SIGKILL).unwrap();
    let died = Instant::now();
    let _ = a.finish(LIMIT);
    wait_until("a new leader", LIMIT, || lines(&log).len() == 2);
    let failover = died.elapsed();
    assert_eq!(lines(&log)[1], format!("{} node-b", first + 1));
    // Not before the dead leader's lease ran out, and within it, a poll and a
    // heartbeat period (its last heartbeat was up to one period before).
    assert!(
        failover >= Duration::from_millis(1400) && failover < Duration::from_secs(5),
        "{failover:?}"
    );

    // Stopping the leader: its command gets the SIGTERM, lockctl resigns and
    // exits with the command's code.
    kill(b.pid(), Signal::SIGTERM).unwrap();
    let out = b.finish(LIMIT);
    assert_eq!(out.code, Some(128 + 15), "{out:?}");
    let shown = env.run(&["show", "leader", "-o", "json"]);
    assert_eq!(shown.json()["held"], false, "{shown:?}");
}

#[test]
fn elect_restarts_the_command_after_a_lost_leadership_and_after_it_exits() {
    let Some(env) = Env::with_table("elect-again") else {
        return;
    };
    // Leadership taken away: the command is stopped, and started again with
    // the next fence once lockctl leads again.
    let log = env.path("log");
    let script = format!(
        "trap 'exit 0' TERM; echo \"$LOCK_FENCE\" >> {}; while :; do sleep 0.1; done",
        log.display()
    );
    let mut args = vec!["elect", "leader", "--lease", "2s", "--grace", "500ms", "--"];
    args.extend(sh(&script));
    let leader = env.spawn("leader", &args);
    wait_until("a leader", LIMIT, || lines(&log).len() == 1);
    let forced = env.run(&["release", "leader", "--force", "--yes"]);
    assert_eq!(forced.code, Some(0), "{forced:?}");
    wait_until("leading again", LIMIT, || lines(&log).len() == 2);
    let first: u64 = lines(&log)[0].parse().unwrap();
    assert_eq!(lines(&log), [first.to_string(), (first + 1).to_string()]);
    assert!(
        leader
            .stderr_so_far()
            .contains("the command was stopped; campaigning again"),
        "{}",
        leader.stderr_so_far()
    );
    kill(leader.pid(), Signal::SIGTERM).unwrap();
    let out = leader.finish(LIMIT);
    assert_eq!(out.code, Some(0), "the command's own code: {out:?}");

    // A command that exits by itself is run again after --restart-delay...
    let runs = env.path("runs");
    let script = format!("echo run >> {}; exit 3", runs.display());
    let mut args = vec![
        "elect",
        "restarted",
        "--lease",
        "2s",
        "--restart-delay",
        "200ms",
        "--",
    ];
    args.extend(sh(&script));
    let restarting = env.spawn("restarting", &args);
    wait_until("three runs", LIMIT, || lines(&runs).len() >= 3);
    kill(restarting.pid(), Signal::SIGTERM).unwrap();
    let out = restarting.finish(LIMIT);
    assert!(
        out.stderr
            .contains("the command exited with 3 while leading"),
        "{out:?}"
    );
    assert_eq!(out.code, Some(128 + 15), "{out:?}");

    // ...or, with --exit-with-command, ends lockctl with its code.
    let mut args = vec!["elect", "once", "--exit-with-command", "--"];
    args.extend(sh("echo $LOCK_FENCE; exit 7"));
    let out = env.run(&args);
    assert_eq!(out.code, Some(7), "{out:?}");
    // LOCK_FENCE is the leadership's fence, as lockctl reported it.
    let fence = fence_after(&out.stderr, "leading once (fence ")
        .unwrap_or_else(|| panic!("no leadership reported: {out:?}"));
    assert_eq!(out.stdout.trim(), fence.to_string(), "{out:?}");
    let shown = env.run(&["show", "once", "-o", "json"]);
    assert_eq!(shown.json()["held"], false, "{shown:?}");
    assert_eq!(shown.json()["fence"], fence, "{shown:?}");
}

#[test]
fn run_with_permits_lets_that_many_commands_run_at_once() {
    let Some(env) = Env::with_table("permits") else {
        return;
    };
    let log = env.path("log");
    let script = format!(
        "echo \"start $(date +%s%N)\" >> {log}; sleep 1; echo \"end $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|i| {
            let mut args = vec![
                "run",
                "exports",
                "--permits",
                "2",
                "--wait",
                "20s",
                "--lease",
                "2s",
                "--",
            ];
            args.extend(sh(&script));
            env.spawn(&format!("run{i}"), &args)
        })
        .collect();
    for run in runs {
        let out = run.finish(LIMIT);
        assert_eq!(out.code, Some(0), "{out:?}");
        assert!(out.stderr.contains("acquired permit"), "{out:?}");
    }
    // In time order: never more than two between a start and its end, and
    // the third ran (after one of the first two ended).
    let mut events: Vec<(u128, i32)> = lines(&log)
        .iter()
        .map(|line| {
            let (kind, at) = line.split_once(' ').unwrap();
            (at.parse().unwrap(), if kind == "start" { 1 } else { -1 })
        })
        .collect();
    events.sort_unstable();
    let mut running = 0;
    let mut most = 0;
    for (_, step) in &events {
        running += step;
        most = most.max(running);
    }
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(most, 2, "{events:?}");

    // Another count on the same semaphore is a usage error, before it writes.
    let out = env.run(&["run", "exports", "--permits", "3", "--", "true"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("has 2 permits in the store, not 3"),
        "{out:?}"
    );
}

/// The `{"metrics": [...]}` line `--metrics` printed to stderr.
fn metrics_line(stderr: &str) -> serde_json::Value {
    let line = stderr
        .lines()
        .rev()
        .find(|line| line.starts_with("{\"metrics\""))
        .unwrap_or_else(|| panic!("no metrics line in {stderr:?}"));
    serde_json::from_str(line).unwrap()
}

/// The sum of the counters named `name` whose labels include `labels`.
fn counted(metrics: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> u64 {
    metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|figure| {
            figure["name"] == name
                && labels
                    .iter()
                    .all(|(label, value)| figure["labels"][label] == *value)
        })
        .map(|figure| figure["value"].as_u64().unwrap())
        .sum()
}

#[test]
fn metrics_are_printed_as_json_at_exit() {
    let Some(env) = Env::with_table("metrics") else {
        return;
    };
    let out = env.run(&["--metrics", "run", "nightly", "--lease", "2s", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let metrics = metrics_line(&out.stderr);
    assert_eq!(
        counted(&metrics, "lock_acquires_total", &[("outcome", "acquired")]),
        1
    );
    assert_eq!(counted(&metrics, "lock_acquires_total", &[]), 1);
    // The acquire and the release, applied.
    assert_eq!(
        counted(
            &metrics,
            "lock_store_calls_total",
            &[("op", "put"), ("outcome", "applied")]
        ),
        2
    );
    let latency = metrics["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|figure| {
            figure["name"] == "lock_store_call_seconds"
                && figure["labels"]["op"] == "put"
                && figure["labels"]["outcome"] == "applied"
        })
        .unwrap();
    assert_eq!(latency["type"], "histogram");
    assert_eq!(latency["value"]["count"], 2);
    assert!(latency["value"]["max"].as_f64().unwrap() > 0.0, "{latency}");
    // A timeout counts as one, and the JSON still comes when lockctl fails.
    let held = env.spawn(
        "holder",
        &["run", "nightly", "--lease", "2s", "--", "sleep", "5"],
    );
    wait_until("the holder holds the lock", LIMIT, || {
        env.run(&["show", "nightly", "-o", "json"]).json()["held"] == true
    });
    let out = env.run(&[
        "--metrics",
        "acquire",
        "nightly",
        "--lease",
        "2s",
        "--wait",
        "0s",
    ]);
    assert_eq!(out.code, Some(3), "{out:?}");
    let metrics = metrics_line(&out.stderr);
    assert_eq!(
        counted(&metrics, "lock_acquires_total", &[("outcome", "timeout")]),
        1
    );
    held.finish(LIMIT);
    // Without the flag, nothing is printed.
    let out = env.run(&["show", "nightly"]);
    assert!(!out.stderr.contains("\"metrics\""), "{out:?}");
}

/// The `(at, +1 | -1)` steps of `kind`'s intervals in a log of
/// `<kind> start|end <nanoseconds>` lines, and the most of them open at once.
fn most_at_once(log: &[String], kind: &str) -> usize {
    let mut steps: Vec<(u128, i32)> = log
        .iter()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (who, what, at) = (parts.next()?, parts.next()?, parts.next()?);
            (kind == "*" || who == kind)
                .then(|| (at.parse().unwrap(), if what == "start" { 1 } else { -1 }))
        })
        .collect();
    steps.sort_unstable();
    let (mut open, mut most) = (0, 0);
    for (_, step) in steps {
        open += step;
        most = most.max(open);
    }
    most as usize
}

#[test]
fn run_shared_runs_together_and_exclusive_alone() {
    let Some(env) = Env::with_table("rw") else {
        return;
    };
    let log = env.path("log");
    let script = |who: &str| {
        format!(
            "echo \"{who} start $(date +%s%N) $LOCK_MODE $LOCK_FENCE\" >> {log}; sleep 1; \
             echo \"{who} end $(date +%s%N)\" >> {log}",
            log = log.display()
        )
    };
    let run = |name: &str, mode: &str, who: &str| {
        let mut args = vec![
            "run",
            "config",
            mode,
            "--readers",
            "4",
            "--wait",
            "30s",
            "--lease",
            "2s",
            "--",
        ];
        let script = script(who);
        args.extend(sh(&script));
        env.spawn(name, &args)
    };
    let readers: Vec<_> = (0..3)
        .map(|i| run(&format!("reader{i}"), "--shared", "r"))
        .collect();
    wait_until("two readers in", LIMIT, || {
        lines(&log)
            .iter()
            .filter(|line| line.starts_with("r start"))
            .count()
            >= 2
    });
    let writer = run("writer", "--exclusive", "w");
    // The late reader comes once the writer waits (its write lock held); the
    // writer's fence is that record's.
    let mut writer_fence = None;
    wait_until("the writer waiting", LIMIT, || {
        let listed = env.run(&["list", "-o", "json"]).json();
        writer_fence = listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|lock| {
                let name = format!("{}{}", lock["key"], lock["sort_key"]);
                name.contains("writer") && lock["held"] == true
            })
            .and_then(|lock| lock["fence"].as_u64());
        writer_fence.is_some()
    });
    let writer_fence = writer_fence.unwrap();
    let late = run("late-reader", "--shared", "r");
    for process in readers.into_iter().chain([writer, late]) {
        let out = process.finish(LIMIT);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let log = lines(&log);
    assert_eq!(log.len(), 10, "{log:?}");
    assert!(
        most_at_once(&log, "r") >= 2,
        "readers ran together: {log:?}"
    );
    assert_eq!(most_at_once(&log, "w"), 1, "{log:?}");
    for line in log.iter().filter(|line| line.starts_with("w start")) {
        assert!(
            line.ends_with(&format!("exclusive {writer_fence}")),
            "{line}"
        );
    }
    let writer_start: u128 = log
        .iter()
        .find(|line| line.starts_with("w start"))
        .and_then(|line| line.split(' ').nth(2)?.parse().ok())
        .unwrap();
    let writer_end: u128 = log
        .iter()
        .find(|line| line.starts_with("w end"))
        .and_then(|line| line.split(' ').nth(2)?.parse().ok())
        .unwrap();
    // Never a reader beside the writer: no reader starts or ends while it
    // writes, and none is inside when it starts.
    for line in log.iter().filter(|line| line.starts_with("r ")) {
        let at: u128 = line.split(' ').nth(2).unwrap().parse().unwrap();
        assert!(
            at <= writer_start || at >= writer_end,
            "a reader moved at {at} while the writer wrote ({writer_start} to {writer_end}): {log:?}"
        );
    }
    let inside_at_writer_start = log
        .iter()
        .filter(|line| line.starts_with("r "))
        .filter(|line| line.split(' ').nth(2).unwrap().parse::<u128>().unwrap() <= writer_start)
        .map(|line| if line.starts_with("r start") { 1 } else { -1 })
        .sum::<i32>();
    assert_eq!(inside_at_writer_start, 0, "{log:?}");
    // The reader that came while the writer waited read after it, with its fence.
    let last_reader = log
        .iter()
        .filter(|line| line.starts_with("r start"))
        .max_by_key(|line| line.split(' ').nth(2).unwrap().parse::<u128>().unwrap())
        .unwrap();
    assert!(
        last_reader.ends_with(&format!("shared {writer_fence}")),
        "{log:?}"
    );

    // A reader count other than the store's is a usage error, before it writes.
    let out = env.run(&["run", "config", "--shared", "--readers", "8", "--", "true"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("4 reader slots"), "{out:?}");
}

#[test]
fn run_with_several_keys_holds_them_all_or_nothing() {
    let Some(env) = Env::with_table("several") else {
        return;
    };
    let holding = env.spawn("holder", &["run", "acct-b", "--", "sleep", "3"]);
    let mut held_b = serde_json::Value::Null;
    wait_until("acct-b held", LIMIT, || {
        held_b = env.run(&["show", "acct-b", "-o", "json"]).json();
        held_b["held"] == true
    });
    let fence_b = held_b["fence"].as_u64().unwrap();
    let out = env.run(&["run", "acct-c", "acct-a", "acct-b", "--", "true"]);
    assert_eq!(out.code, Some(3), "acct-b is held: {out:?}");
    for key in ["acct-a", "acct-c"] {
        let shown = env.run(&["show", key, "-o", "json"]);
        assert_ne!(shown.json()["held"], true, "{key} left held: {shown:?}");
    }
    // acct-a was taken and let go by the refused run, which stopped at
    // acct-b before trying acct-c: acct-c has no record yet.
    let shown = env.run(&["show", "acct-a", "-o", "json"]).json();
    let fence_a = shown["fence"].as_u64().unwrap();
    let shown = env.run(&["show", "acct-c", "-o", "json"]);
    assert_eq!(shown.json(), serde_json::Value::Null, "acct-c: {shown:?}");
    let seen = env.path("seen");
    let script = format!(
        "printf '%s|%s' \"$LOCK_KEYS\" \"$LOCK_FENCES\" > {}",
        seen.display()
    );
    let mut args = vec!["run", "acct-c", "acct-a", "acct-b", "--wait", "30s", "--"];
    args.extend(sh(&script));
    let out = env.run(&args);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("acquired locks"), "{out:?}");
    let seen = std::fs::read_to_string(&seen).unwrap();
    // acct-a and acct-b one past their fences above; acct-c taken for the
    // first time, with the fence its record now shows.
    let fence_c =
        fence_after(&seen, "acct-c=").unwrap_or_else(|| panic!("no fence for acct-c: {seen:?}"));
    assert_eq!(
        seen,
        format!(
            "acct-a\nacct-b\nacct-c|acct-a={}\nacct-b={}\nacct-c={fence_c}",
            fence_a + 1,
            fence_b + 1
        ),
        "{seen:?}"
    );
    assert_eq!(holding.finish(LIMIT).code, Some(0));
    for (key, fence) in [
        ("acct-a", fence_a + 1),
        ("acct-b", fence_b + 1),
        ("acct-c", fence_c),
    ] {
        let shown = env.run(&["show", key, "-o", "json"]);
        assert_eq!(shown.json()["held"], false, "{key}: {shown:?}");
        assert_eq!(shown.json()["fence"], fence, "{key}: {shown:?}");
    }
    // Several keys with --shared or --sort-key: a usage error.
    let out = env.run(&["run", "acct-a", "acct-b", "--shared", "--", "true"]);
    assert_eq!(out.code, Some(2), "{out:?}");
}

#[test]
fn run_names_the_lock_for_fence_checks_as_the_rust_api_prints_it() {
    // In a bucket: a store with sort keys.
    let Some(env) = Env::bucket("fence-key") else {
        return;
    };
    let seen = env.path("seen");
    let script = format!(
        "printf '%s|%s|%s|%s|%s' \"$LOCK_KEY\" \"${{LOCK_SORT_KEY-}}\" \"${{LOCK_FENCE_KEY-}}\" \"${{LOCK_KEYS-}}\" \"${{LOCK_FENCES-}}\" > {}",
        seen.display()
    );
    let seen_by = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(["--", "sh", "-c", &script]);
        let out = env.run(&args);
        assert_eq!(out.code, Some(0), "{out:?}");
        std::fs::read_to_string(&seen).unwrap()
    };
    // A key with a `/` is another lock than a sort key: escaped, so that
    // the two never fence under one name.
    assert_eq!(
        seen_by(&["run", "jobs/nightly"]),
        "jobs/nightly||jobs%2Fnightly||"
    );
    assert_eq!(
        seen_by(&["run", "jobs", "--sort-key", "nightly"]),
        "jobs|nightly|jobs/nightly||"
    );
    assert_eq!(
        seen_by(&["run", "jobs", "--sort-key", "a/b%"]),
        "jobs|a/b%|jobs/a%2Fb%25||"
    );
    // Several keys: LOCK_KEYS as given, LOCK_FENCES by fence name (each
    // a new key's first fence).
    let seen = seen_by(&["run", "acct/2", "acct/1"]);
    let (names, fences) = seen.rsplit_once('|').unwrap();
    assert_eq!(names, "|||acct/1\nacct/2");
    let fences: Vec<(&str, u64)> = fences
        .lines()
        .map(|line| {
            let (name, fence) = line.split_once('=').unwrap();
            (name, fence.parse().unwrap())
        })
        .collect();
    assert_eq!(
        fences.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        ["acct%2F1", "acct%2F2"]
    );
    assert!(fences.iter().all(|(_, fence)| *fence >= 1), "{fences:?}");
}

#[test]
fn shared_and_exclusive_runs_name_the_lock_and_its_write_lock_without_sort_keys() {
    // A table without a sort key keeps a reader-writer lock's records as
    // partitions `config#...`: LOCK_KEY is still the lock's name, and
    // LOCK_FENCE_KEY its write lock, the Rust API's `writer_key`.
    let Some(env) = Env::with_table("rw-names") else {
        return;
    };
    let seen = env.path("seen");
    let script = format!(
        "printf '%s|%s|%s' \"$LOCK_KEY\" \"$LOCK_FENCE_KEY\" \"$LOCK_FENCE\" > {}",
        seen.display()
    );
    // The writer fence: the write lock's first, kept by the reader, then
    // the next writer's one more.
    let mut first = None;
    for (mode, step) in [("--exclusive", 0), ("--shared", 0), ("--exclusive", 1)] {
        let out = env.run(&[
            "run",
            "config",
            mode,
            "--readers",
            "4",
            "--",
            "sh",
            "-c",
            &script,
        ]);
        assert_eq!(out.code, Some(0), "{out:?}");
        let seen = std::fs::read_to_string(&seen).unwrap();
        let fence: u64 = seen.rsplit('|').next().unwrap().parse().unwrap();
        let first = *first.get_or_insert(fence);
        assert_eq!(
            seen,
            format!("config|config#writer|{}", first + step),
            "{mode}"
        );
    }
}
