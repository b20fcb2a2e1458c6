//! `lockctl --store etcd://host:port/prefix`: the same commands in the etcd
//! test server (started by `./scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use support::Env;

#[test]
fn validate_table_reads_the_prefix_and_options_of_other_stores_are_refused() {
    let Some(env) = Env::etcd("check") else {
        return;
    };
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("nothing to create"), "{out:?}");
    assert!(out.stdout.contains("1 per heartbeat"), "{out:?}");
    let out = env.run(&["create-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["store"], "etcd");

    let out = env.run(&["--table", "t", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--table does not apply to etcd"),
        "{out:?}"
    );
    let out = env.run_bare(&["--store", "etcd://127.0.0.1/x", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("no port"), "{out:?}");
    // Nothing listens on port 9: unavailable, said plainly.
    let out = env.run_bare(&["--store", "etcd://127.0.0.1:9/x", "show", "job"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("Connection refused") || out.stderr.contains("connect"),
        "{out:?}"
    );
}

/// A clock-difference bound, set once for every store (a crontab's
/// `LOCKCTL_MAX_CLOCK_DIFFERENCE`), is accepted on etcd, whose records carry
/// no write time: it changes nothing there, as on PostgreSQL and Redis.
#[test]
fn a_clock_difference_bound_is_accepted_and_changes_nothing() {
    let Some(env) = Env::etcd("clock-bound") else {
        return;
    };
    let out = env.run(&["--max-clock-difference", "2s", "run", "job", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn acquire_show_list_and_release_by_version() {
    let Some(env) = Env::etcd("acquire") else {
        return;
    };
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
    let Some(env) = Env::etcd("overlap") else {
        return;
    };
    support::concurrent_runs_never_overlap_and_fences_increase(&env);
}

/// Several keys on one run, in one etcd transaction.
#[test]
fn a_run_under_several_keys_takes_them_in_one_request() {
    let Some(env) = Env::etcd("keys") else {
        return;
    };
    let out = env.run(&[
        "run",
        "a",
        "b",
        "c",
        "--lease",
        "5s",
        "--",
        "sh",
        "-c",
        "echo \"$LOCK_KEYS $LOCK_FENCES\"",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    // Three new keys: each at its own first fence, the one its record shows.
    let fences: Vec<u64> = ["a", "b", "c"]
        .into_iter()
        .map(|key| {
            let shown = env.run(&["show", key, "-o", "json"]).json();
            assert_eq!(shown["held"], false, "{key}: {shown}");
            shown["fence"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(
        out.stdout,
        format!(
            "a\nb\nc a={}\nb={}\nc={}\n",
            fences[0], fences[1], fences[2]
        ),
        "{out:?}"
    );
    assert!(out.stderr.contains("in one request"), "{out:?}");
}
