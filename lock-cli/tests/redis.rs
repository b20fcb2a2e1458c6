//! `lockctl --store redis://host:port?prefix=...`: the same commands in the
//! Redis test server, and with `valkey://` in the Valkey one (both started by
//! `./scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use support::Env;

#[test]
fn validate_table_checks_the_server_and_options_of_other_stores_are_refused() {
    let Some(env) = Env::redis("check") else {
        return;
    };
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("scripts run"), "{out:?}");
    let out = env.run(&["create-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["store"], "redis");

    let out = env.run(&["--table", "t", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(
        out.stderr.contains("--table does not apply to Redis"),
        "{out:?}"
    );
    let out = env.run_bare(&["--store", "redis://127.0.0.1:1/x?prefix={a}", "show", "job"]);
    assert_eq!(out.code, Some(2), "{out:?}");
    let out = env.run_bare(&["--store", "redis://127.0.0.1:9", "show", "job"]);
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("could not connect to Redis"), "{out:?}");
}

#[test]
fn acquire_show_list_and_release_by_version() {
    let Some(env) = Env::redis("acquire") else {
        return;
    };
    acquire_show_list_and_release(&env);
}

#[test]
fn on_valkey_acquire_show_list_and_release_by_version() {
    let Some(env) = Env::valkey("acquire") else {
        return;
    };
    acquire_show_list_and_release(&env);
}

#[test]
fn on_valkey_concurrent_runs_never_overlap_and_fences_increase() {
    let Some(env) = Env::valkey("overlap") else {
        return;
    };
    support::concurrent_runs_never_overlap_and_fences_increase(&env);
}

/// One holder acquires `deploy` (fence 1, a version), a second is refused
/// after waiting, `list` shows it, and a release by that version frees it.
fn acquire_show_list_and_release(env: &Env) {
    let out = env.run(&[
        "acquire", "deploy", "--lease", "30s", "--owner", "script-1", "-o", "json",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let acquired = out.json();
    assert_eq!(acquired["fence"], 1);
    let version = acquired["version"].as_str().unwrap().to_owned();
    let out = env.run(&["acquire", "deploy", "--lease", "30s", "--wait", "1s"]);
    assert_eq!(out.code, Some(3), "{out:?}");
    let list = env.run(&["list", "-o", "json"]);
    assert!(list.stdout.contains("deploy"), "{list:?}");
    let out = env.run(&["release", "deploy", "--version", &version]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let show = env.run(&["show", "deploy", "-o", "json"]);
    assert_eq!(show.json()["held"], false, "{show:?}");
}

#[test]
fn concurrent_runs_on_one_key_never_overlap_and_fences_increase() {
    let Some(env) = Env::redis("overlap") else {
        return;
    };
    support::concurrent_runs_never_overlap_and_fences_increase(&env);
}
