//! lock-etcd talks to etcd through Rust code generated from etcd's API
//! (`.proto` files) and kept in `src/wire/generated/`, so that building it
//! needs no `protoc` (docs/etcd.md, "Building"). This test generates that
//! code again, from the `.proto` files the `etcd-client` crate ships (a
//! test dependency at a version `Cargo.lock` pins; `cargo metadata` finds
//! them, and may download packages of other platforms it lists), with the generator
//! settings below, and fails on any difference: the kept code cannot drift
//! from what the generator makes of etcd's API.
//!
//! To regenerate after changing the settings or the versions, run
//! `LOCK_ETCD_WRITE_GENERATED=1 cargo test -p lock-etcd --test generated_code`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The generated files kept, one per protobuf package lock-etcd uses: the
/// other packages the API's files declare (its HTTP annotations, the lock
/// and election services) are not needed.
const KEPT: [&str; 3] = ["etcdserverpb.rs", "mvccpb.rs", "authpb.rs"];

/// The `.proto` files generated from, relative to etcd-client's `proto`
/// folder.
const PROTOS: [&str; 3] = [
    "etcd/api/authpb/auth.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/etcdserverpb/rpc.proto",
];

/// Where the `etcd-client` package's sources are, as cargo resolved them.
fn etcd_client_sources() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(&workspace)
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let package = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|package| package["name"] == "etcd-client")
        .expect("etcd-client is a dependency of lock-etcd's tests");
    Path::new(package["manifest_path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_owned()
}

#[test]
fn the_kept_etcd_api_code_is_what_the_generator_makes() {
    let protos = etcd_client_sources().join("proto");
    let out = std::env::temp_dir().join(format!("lock-etcd-generated-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    tonic_prost_build::configure()
        // A client only; etcd's server side is never built.
        .build_server(false)
        .out_dir(&out)
        .compile_protos(
            &PROTOS.map(|proto| protos.join(proto)),
            std::slice::from_ref(&protos),
        )
        .expect("protoc and the generator run (./scripts/test installs protoc)");
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/wire/generated");
    let write = std::env::var_os("LOCK_ETCD_WRITE_GENERATED").is_some();
    let mut drifted = Vec::new();
    for file in KEPT {
        let made = std::fs::read_to_string(out.join(file)).unwrap();
        let path = kept.join(file);
        if write {
            std::fs::create_dir_all(&kept).unwrap();
            std::fs::write(&path, &made).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(made.as_str()) {
            drifted.push(path.display().to_string());
        }
    }
    std::fs::remove_dir_all(&out).unwrap();
    assert!(
        drifted.is_empty(),
        "the generated etcd API code differs from what the generator makes now: {drifted:?}; \
         regenerate with LOCK_ETCD_WRITE_GENERATED=1 cargo test -p lock-etcd --test generated_code"
    );
}
