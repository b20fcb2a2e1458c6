//! Serve the lock client's metrics to Prometheus: install the exporter
//! before building the client, describe the metrics, and scrape
//! `http://127.0.0.1:9464/metrics` while a few workers contend for two locks.
//!
//! ```sh
//! cargo run -p lock-core --example prometheus            # 30 s
//! cargo run -p lock-core --example prometheus -- 300     # or as long as you like
//! curl -s http://127.0.0.1:9464/metrics | grep ^lock_
//! ```
//!
//! A real service does the same with its own store (DynamoDB, PostgreSQL)
//! and its exporter's address; the metrics are listed in docs/operations.md.

use std::net::SocketAddr;
use std::time::Duration;

use lock_core::{AcquireOptions, LockClient};
use lock_memory::MemoryStore;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 30,
    };
    let address: SocketAddr = ([127, 0, 0, 1], 9464).into();
    // First the exporter, then the clients: each client registers its
    // metrics with the recorder installed when it is built.
    PrometheusBuilder::new()
        .with_http_listener(address)
        .install()?;
    lock_core::metrics::describe();
    println!("metrics at http://{address}/metrics for {seconds} s");

    let store = MemoryStore::new();
    let mut workers = Vec::new();
    for worker in 0..4 {
        let client = LockClient::builder(store.clone())
            .owner(format!("worker-{worker}"))
            .lease(Duration::from_secs(2))
            .build()?;
        workers.push(tokio::spawn(async move {
            loop {
                let key = if fastrand::bool() {
                    "report"
                } else {
                    "billing"
                };
                let options = AcquireOptions::new().wait(Duration::from_millis(500));
                if let Ok(guard) = client.acquire(key, options).await {
                    tokio::time::sleep(Duration::from_millis(fastrand::u64(100..1_500))).await;
                    let _ = guard.release().await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    for worker in workers {
        worker.abort();
    }
    Ok(())
}
