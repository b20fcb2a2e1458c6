//! Leader election: several tasks of this process and of other processes run for
//! leader on one DynamoDB table; exactly one is leader at a time.
//!
//! Each task is a candidate (`LockClient::elect`). The tasks of one process
//! share one `LockClient`: they queue for the lock inside the client, and a
//! leader that resigns after its term hands it to the next one in one write.
//! Tasks of other processes poll the record and take over a leader whose
//! process died (`kill -9`) once its lease has run out, with a higher fence;
//! `took_over()` names the dead leader. Run it in two terminals against
//! the moto emulator that `./scripts/test` uses:
//!
//! ```sh
//! .venv/bin/moto_server -p 5000 &
//! export AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_REGION=us-east-1 \
//!   AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
//! cargo run -p lock-dynamodb --example leader_election -- node-a
//! cargo run -p lock-dynamodb --example leader_election -- node-b
//! ```
//!
//! and `kill -9` the process whose task leads. Settings (environment):
//! `LOCK_EXAMPLE_TABLE` (default `lease-lock-example`, created when missing),
//! `LEADER_TASKS` (candidates in this process, default 3), `LEADER_LEASE_MS`
//! (default 2000), `LEADER_TERM_MS` (how long a leader leads before stepping
//! down, default 1000), `LEADER_RUN_FOR_MS` (how long this process runs, default
//! forever). Each event is one line on stdout:
//! `elected|resigned|lost <unix ms> <node>/<task> fence <n> [took-over <owner>]`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{ElectionOptions, LockClient, LockError};
use lock_dynamodb::{DynamoDbStore, TableError, TableOptions};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn say(event: &str, who: &str, fence: u64, extra: &str) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    let mut out = std::io::stdout().lock();
    // One line per event, flushed at once: another process reads them live.
    let _ = writeln!(out, "{event} {now} {who} fence {fence}{extra}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let node = std::env::args().nth(1).unwrap_or_else(|| "node".into());
    let table = std::env::var("LOCK_EXAMPLE_TABLE").unwrap_or_else(|_| "lease-lock-example".into());
    let tasks = setting("LEADER_TASKS", 3);
    let lease = Duration::from_millis(setting("LEADER_LEASE_MS", 2000));
    let term = Duration::from_millis(setting("LEADER_TERM_MS", 1000));
    let run_for = std::env::var("LEADER_RUN_FOR_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis);

    let store = DynamoDbStore::builder(&table).build_from_env().await?;
    if let Err(TableError::NotFound { .. }) = store.validate_table().await {
        // Another process may be creating it at the same time: then it exists.
        if let Err(error) = store.create_table(TableOptions::default()).await {
            store.validate_table().await.map_err(|_| error)?;
        }
    }
    let client = LockClient::builder(store)
        .owner(&node)
        .lease(lease)
        .build()?;

    let mut candidates = Vec::new();
    for task in 1..=tasks {
        let client = client.clone();
        let who = format!("{node}/task-{task}");
        candidates.push(tokio::spawn(async move {
            loop {
                // A candidate campaigns until it resigns: its client's queue,
                // then the other processes' leader, decide when it leads.
                let election = match client.elect("leader", ElectionOptions::new()) {
                    Ok(election) => election,
                    Err(LockError::Shutdown) => return,
                    Err(error) => {
                        eprintln!("{who}: {error}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let leadership = match election.leadership().await {
                    Ok(leadership) => leadership,
                    // The client shut down: the campaign is over.
                    Err(_) => return,
                };
                let fence = leadership.fence().get();
                let extra = leadership
                    .view()
                    .took_over()
                    .map(|previous| format!(" took-over {}", previous.owner))
                    .unwrap_or_default();
                say("elected", &who, fence, &extra);
                // Lead for one term, as long as the leadership can be trusted.
                tokio::select! {
                    reason = leadership.until_unsafe() => {
                        say("lost", &who, fence, &format!(" ({reason})"));
                        // Dropping the election ends its campaign; a new one
                        // joins the queue behind this process's other tasks.
                        drop(election);
                        continue;
                    }
                    () = tokio::time::sleep(term) => {}
                }
                say("resigned", &who, fence, "");
                // Handed to the next candidate of this process, in one write.
                if let Err(error) = election.resign().await {
                    eprintln!("{who}: resign: {error}");
                }
            }
        }));
    }
    match run_for {
        Some(limit) => tokio::time::sleep(limit).await,
        None => std::future::pending().await,
    }
    let report = client.shutdown().await?;
    for candidate in candidates {
        candidate.abort();
    }
    eprintln!("{node}: shut down, released {:?}", report.released);
    Ok(())
}
