//! `lockctl --store s3://bucket/prefix`: the same commands in a bucket of
//! moto's S3 (started by `./scripts/test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use support::Env;

#[test]
fn create_table_and_validate_table_check_the_bucket_and_a_missing_one_is_explained() {
    let Some(env) = Env::bucket("check") else {
        return;
    };
    let out = env.run(&["validate-table"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("conditional writes checked"), "{out:?}");
    assert!(out.stdout.contains("2 for a write on a lock"), "{out:?}");
    let out = env.run(&["create-table", "-o", "json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.json()["store"], "object-store");

    // A bucket that is not there: the check names it, and so does a lock
    // command (which says how to check it).
    let missing = [
        "--store",
        "s3://no-such-lockctl-bucket/x",
        "--endpoint-url",
        env.endpoint.as_str(),
    ];
    let out = env.run_bare(&[&missing[..], &["validate-table"]].concat());
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(out.stderr.contains("no-such-lockctl-bucket"), "{out:?}");
    let out = env.run_bare(&[&missing[..], &["acquire", "job", "--lease", "30s"]].concat());
    assert_eq!(out.code, Some(1), "{out:?}");
    assert!(
        out.stderr.contains("does not exist") && out.stderr.contains("validate-table"),
        "{out:?}"
    );
}

#[test]
fn acquire_show_list_and_release_by_version() {
    let Some(env) = Env::bucket("acquire") else {
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
    let out = env.run(&["acquire", "deploy", "--lease", "30s", "-o", "json"]);
    assert_eq!(
        out.json()["fence"],
        first + 1,
        "fences rise across a release: {out:?}"
    );
}

#[test]
fn concurrent_runs_on_one_key_never_overlap_and_fences_increase() {
    let Some(env) = Env::bucket("overlap") else {
        return;
    };
    support::concurrent_runs_never_overlap_and_fences_increase(&env);
}

#[test]
fn options_that_do_not_apply_and_stores_without_conditional_writes_are_usage_errors() {
    let env = Env::offline("bucket-usage");
    for (args, says) in [
        (
            &["--store", "s3://b/p", "--table", "t", "show", "job"][..],
            "--table does not apply",
        ),
        (
            &["--store", "s3://b/p", "--layout", "python", "show", "job"],
            "--layout applies to DynamoDB only",
        ),
        (
            &["--store", "gs://b/p", "--region", "eu", "show", "job"],
            "applies to S3 only",
        ),
        (
            &["--store", "file:///tmp/locks", "show", "job"],
            "LocalFileSystem",
        ),
    ] {
        let out = env.run_bare(args);
        assert_eq!(out.code, Some(2), "{args:?}: {out:?}");
        assert!(out.stderr.contains(says), "{args:?}: {out:?}");
    }
}
