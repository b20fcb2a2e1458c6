//! The leader-election example, run as two processes of three tasks each against
//! the emulator: one leader at a time, fences that only go up, and a `kill -9`
//! of the leading process survived by the other one taking over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One line the example printed.
#[derive(Debug, Clone)]
struct Event {
    kind: String,
    at_ms: u128,
    who: String,
    fence: u64,
    took_over: Option<String>,
}

fn parse(line: &str) -> Option<Event> {
    let parts: Vec<&str> = line.split_whitespace().collect();
    if parts.len() < 5 || parts[3] != "fence" {
        return None;
    }
    Some(Event {
        kind: parts[0].to_owned(),
        at_ms: parts[1].parse().ok()?,
        who: parts[2].to_owned(),
        fence: parts[4].parse().ok()?,
        took_over: (parts.get(5) == Some(&"took-over")).then(|| parts[6].to_owned()),
    })
}

/// The example's binary, built by `cargo test` beside this test's.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join("leader_election");
    assert!(
        path.exists(),
        "{} is missing: run `cargo test -p lock-dynamodb` (which builds the examples) \
         or `cargo build -p lock-dynamodb --example leader_election` first",
        path.display()
    );
    path
}

fn start(node: &str, table: &str, endpoint: &str, events: mpsc::Sender<Event>) -> Child {
    let mut child = Command::new(example())
        .arg(node)
        .env("LOCK_TABLE", table)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env("LEADER_TASKS", "3")
        .env("LEADER_LEASE_MS", "2000")
        .env("LEADER_TERM_MS", "300")
        .env("LEADER_RUN_FOR_MS", "40000")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout: ChildStdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(event) = parse(&line)
                && events.send(event).is_err()
            {
                break;
            }
        }
    });
    child
}

/// Events until `until` is true of one, or the limit.
fn collect(
    events: &mpsc::Receiver<Event>,
    seen: &mut Vec<Event>,
    limit: Duration,
    until: impl Fn(&Event) -> bool,
) -> Option<Event> {
    let deadline = Instant::now() + limit;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(event) => {
                seen.push(event.clone());
                if until(&event) {
                    return Some(event);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn leaders_of_two_processes_exclude_each_other_and_survive_a_kill_9() {
    let Some(endpoint) = support::endpoint() else {
        return;
    };
    let store = support::fresh_store(lock_dynamodb::Layout::native())
        .await
        .unwrap();
    let table = store.table().to_owned();
    let (tx, events) = mpsc::channel();
    let mut seen = Vec::new();
    let mut a = start("node-a", &table, &endpoint, tx.clone());
    collect(&events, &mut seen, Duration::from_secs(30), |e| {
        e.kind == "elected" && e.who.starts_with("node-a/")
    })
    .expect("node-a elects a leader");
    let mut b = start("node-b", &table, &endpoint, tx);
    // node-a's tasks hand the lock to each other; node-b waits.
    collect(&events, &mut seen, Duration::from_secs(3), |_| false);
    let leading_a: std::collections::HashSet<&str> = seen
        .iter()
        .filter(|e| e.kind == "elected")
        .map(|e| e.who.as_str())
        .collect();
    assert!(
        leading_a.len() >= 2,
        "the tasks of one process take turns: {seen:?}"
    );
    // Kill node-a while one of its tasks leads.
    let killed_at = Instant::now();
    a.kill().unwrap();
    a.wait().unwrap();
    let taken = collect(&events, &mut seen, Duration::from_secs(20), |e| {
        e.kind == "elected" && e.who.starts_with("node-b/")
    })
    .expect("node-b takes over");
    let after = killed_at.elapsed();
    eprintln!("node-b took over {after:?} after node-a was killed; events: {seen:?}");
    assert_eq!(taken.took_over.as_deref(), Some("node-a"), "{taken:?}");
    // lease × 1.01 after node-b first saw node-a's last record, plus a poll.
    assert!(
        after <= Duration::from_secs(6),
        "taken over after {after:?}"
    );
    collect(&events, &mut seen, Duration::from_secs(2), |_| false);
    b.kill().unwrap();
    b.wait().unwrap();

    // One leader at a time: in fence order, each term ends (resigned, lost,
    // or its process killed) before the next begins.
    let elected: Vec<&Event> = seen.iter().filter(|e| e.kind == "elected").collect();
    for pair in elected.windows(2) {
        assert!(pair[0].fence < pair[1].fence, "fences only go up: {pair:?}");
        assert!(pair[0].at_ms <= pair[1].at_ms, "{pair:?}");
        if let Some(end) = seen
            .iter()
            .find(|e| e.kind != "elected" && e.fence == pair[0].fence)
        {
            assert!(
                end.at_ms <= pair[1].at_ms,
                "terms overlap: {end:?} {:?}",
                pair[1]
            );
        } else {
            // Only the term node-a was killed in has no end line.
            assert_eq!(pair[1].took_over.as_deref(), Some("node-a"), "{pair:?}");
        }
    }
    assert!(
        seen.iter().all(|e| e.kind != "lost"),
        "no leader lost its lease while its process lived: {seen:?}"
    );
}
