//! `lockctl --store postgres://...`: the same commands on the PostgreSQL test
//! server (started by `./scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::time::Duration;

use support::Env;

/// Every wait on a process is bounded by this.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn create_table_then_validate_table_and_a_missing_table_is_explained() {
    let Some(env) = Env::postgres("schema") else {
        return;
    };
    // Before it exists: a lock command and validate-table say how to create it,
    // without repeating the connection string (it carries the password).
    let out = env.run(&["show", "job"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("PostgreSQL table") && out.stderr.contains("create-table"),
        "{out:?}"
    );
    assert!(!out.stderr.contains("lock_test:lock_test"), "{out:?}");
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{out:?}");

    let out = env.run(&["create-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["store"], "postgres");
    // Again: the table fits, so it is fine.
    let out = env.run(&["create-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("is ready on PostgreSQL"), "{out:?}");
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout.contains("fits the lock-postgres schema"),
        "{out:?}"
    );
}

#[test]
fn acquire_show_list_and_release_by_version() {
    let Some(env) = Env::postgres("acquire") else {
        return;
    };
    env.create_table();
    let out = env.run(&[
        "acquire", "deploy", "--lease", "30s", "--owner", "script-1", "-o", "json",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let acquired = out.json();
    let first = acquired["fence"].as_u64().unwrap();
    assert!(first >= 1, "{acquired}");
    let version = acquired["version"].as_str().unwrap().to_owned();

    let out = env.run(&["acquire", "deploy", "--lease", "30s", "--wait", "1s"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    assert!(out.stderr.contains("script-1"), "{out:?}");

    let show = env.run(&["show", "deploy", "-o", "json"]);
    assert_eq!(show.json()["held"], true, "{show:?}");
    assert_eq!(show.json()["fence"], first, "{show:?}");
    let list = env.run(&["list", "-o", "json"]);
    assert_eq!(list.code, Some(0), "{list:?}");
    assert!(list.stdout.contains("deploy"), "{list:?}");

    let out = env.run(&["release", "deploy", "--version", &version]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let show = env.run(&["show", "deploy", "-o", "json"]);
    assert_eq!(show.json()["held"], false, "{show:?}");
}

#[test]
fn concurrent_runs_on_one_key_never_overlap_and_fences_increase() {
    let Some(env) = Env::postgres("overlap") else {
        return;
    };
    env.create_table();
    support::concurrent_runs_never_overlap_and_fences_increase(&env);
}

#[test]
fn cron_runs_with_permits_reclaim_a_crashed_holders_permit_and_skip_live_ones() {
    let Some(env) = Env::postgres("cron_permits") else {
        return;
    };
    env.create_table();
    support::cron_runs_reclaim_a_crashed_holders_permit(&env);
}

#[test]
fn dynamodb_options_and_unknown_stores_are_usage_errors() {
    let Some(env) = Env::postgres("usage") else {
        return;
    };
    for args in [
        &["--layout", "python", "show", "job"][..],
        &["--region", "eu-west-1", "show", "job"],
        &["--endpoint-url", "http://127.0.0.1:1", "show", "job"],
    ] {
        let out = env.run(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains("applies to DynamoDB only"), "{out:?}");
    }
    let out = env.run(&["--table", "bad name", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("invalid table name"), "{out:?}");
    let out = env.run(&["--store", "mysql://x", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--store must be"), "{out:?}");
}

#[test]
fn a_tls_connection_string_with_verify_full_works_and_a_wrong_host_name_is_refused() {
    let Some(env) = Env::postgres("tls") else {
        return;
    };
    let port = std::env::var("LOCK_POSTGRES_PORT").unwrap();
    let dir = std::env::var("LOCK_POSTGRES_TLS_DIR").unwrap();
    // lock_tls may log in over TLS only.
    let url = |host: &str| {
        format!(
            "postgres://lock_tls:lock_tls@{host}:{port}/lock_test?sslmode=verify-full&sslrootcert={dir}/ca.crt"
        )
    };
    let env = env.with_store_url(url("localhost"));
    env.create_table();
    let out = env.run(&["acquire", "deploy", "--lease", "30s", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let fence = out.json()["fence"].as_u64().unwrap();
    assert!(fence >= 1, "{out:?}");
    let show = env.run(&["show", "deploy", "-o", "json"]);
    assert_eq!(show.code, Some(0), "{show:?}");
    assert_eq!(show.json()["fence"], fence, "{show:?}");
    // The server's certificate names localhost, not 127.0.0.1.
    let env = env.with_store_url(url("127.0.0.1"));
    let out = env.run(&["show", "deploy"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("certificate"), "{out:?}");
    // A setting lockctl cannot use is a usage error naming it.
    let env = env.with_store_url(format!(
        "postgres://lock_tls:lock_tls@localhost:{port}/lock_test?sslmode=verify-full&sslrootcert=/nonexistent.pem"
    ));
    let out = env.run(&["show", "deploy"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("/nonexistent.pem"), "{out:?}");
}

/// The processes descending from `pid` (children, their children, …), from
/// /proc.
fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // The parent is the second field after the command's closing
            // parenthesis.
            let after = stat.rsplit_once(')')?.1;
            let parent = after.split_whitespace().nth(1)?.parse().ok()?;
            Some((child, parent))
        })
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(c, _)| *c),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// The fence drill with real processes on PostgreSQL: holder A (`lockctl
/// run`, its watchdog and its command) is frozen with SIGSTOP after its
/// command learned its fence; B takes the lock over after A's lease and
/// writes the row with its fence through `psql` and the table's fence
/// function; then A's command is resumed (its lockctl still frozen, so
/// nothing kills it) and writes with its old fence: refused (psql exits 3),
/// its transaction rolled back, and the row holds B's write.
#[test]
fn a_frozen_holders_late_write_through_psql_is_refused_by_the_fence_function() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let Some(env) = Env::postgres("fence") else {
        return;
    };
    let out = env.run(&["create-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("\"{}_admit_fence\"", env.table)),
        "create-table makes the fence function: {out:?}"
    );
    let url = std::env::var("LOCK_POSTGRES_URL").unwrap();
    let psql = std::env::var("LOCK_POSTGRES_PSQL").unwrap_or_else(|_| "psql".into());
    let orders = format!("{}_orders", env.table);
    let setup = std::process::Command::new(&psql)
        .args([&url, "-v", "ON_ERROR_STOP=1", "-qc"])
        .arg(format!(
            "CREATE TABLE {orders} (id int PRIMARY KEY, writer text NOT NULL, fence bigint NOT NULL)"
        ))
        .output()
        .unwrap();
    assert!(setup.status.success(), "{setup:?}");
    // What each holder's command runs: the fence check, then its write, in
    // one transaction.
    let sql = env.path("write.sql");
    std::fs::write(
        &sql,
        format!(
            "BEGIN;\n\
             SELECT \"{table}_admit_fence\"('orders/1', :'key', :fence);\n\
             INSERT INTO {orders} (id, writer, fence) VALUES (1, :'writer', :fence)\n\
             ON CONFLICT (id) DO UPDATE SET writer = EXCLUDED.writer, fence = EXCLUDED.fence;\n\
             COMMIT;\n",
            table = env.table
        ),
    )
    .unwrap();
    let write = |writer: &str| {
        format!(
            "{psql} {url} -q -v ON_ERROR_STOP=1 -v writer={writer} -v fence=\"$LOCK_FENCE\" -v key=\"$LOCK_FENCE_KEY\" -f {sql}",
            sql = sql.display()
        )
    };
    let (ready, go, done) = (env.path("a.ready"), env.path("go"), env.path("a.rc"));
    let script = format!(
        "echo \"$LOCK_FENCE\" > {ready}; while [ ! -f {go} ]; do sleep 0.05; done; {write} 2> {err}; echo $? > {done}",
        ready = ready.display(),
        go = go.display(),
        write = write("A"),
        err = env.path("a.err").display(),
        done = done.display(),
    );
    let a = env.spawn(
        "a",
        &["run", "orders", "--lease", "2s", "--", "sh", "-c", &script],
    );
    let a_fence = support::wait_for_file(&ready, LIMIT);
    // Freeze all of A: lockctl, its watchdog and its command.
    let frozen: Vec<i32> = std::iter::once(a.child.id() as i32)
        .chain(descendants(a.child.id() as i32))
        .collect();
    for pid in &frozen {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
    }
    let b = env.run(&[
        "run",
        "orders",
        "--wait",
        "30s",
        "--lease",
        "2s",
        "--",
        "sh",
        "-c",
        &write("B"),
    ]);
    assert_eq!(b.code, Some(0), "B took over and wrote: {b:?}");
    // Only A's command and its children go on: its lockctl and watchdog
    // stay frozen.
    std::fs::write(&go, "").unwrap();
    let watchdog = |pid: i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|line| String::from_utf8_lossy(&line).contains("__watchdog"))
    };
    for pid in frozen.iter().skip(1).filter(|pid| !watchdog(**pid)) {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
    }
    let rc = support::wait_for_file(&done, LIMIT);
    let err = std::fs::read_to_string(env.path("a.err")).unwrap_or_default();
    assert_eq!(rc.trim(), "3", "psql stopped at the refused fence: {err}");
    assert!(err.contains("is stale"), "{err}");
    let row = std::process::Command::new(&psql)
        .args([&url, "-tAc"])
        .arg(format!(
            "SELECT writer || ' ' || fence FROM {orders} WHERE id = 1"
        ))
        .output()
        .unwrap();
    let row = String::from_utf8_lossy(&row.stdout).trim().to_owned();
    assert!(row.starts_with("B "), "the row holds B's write: {row}");
    assert!(
        row.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > a_fence.trim().parse::<u64>().unwrap(),
        "B's fence is higher than A's: {row} after {a_fence}"
    );
    for pid in &frozen {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
    }
    let _ = a.finish(LIMIT);
}
