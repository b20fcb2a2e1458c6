//! Two workers contend for one lock on a real DynamoDB endpoint.
//!
//! Region, credentials and endpoint come from the environment, as for any AWS
//! program. Against the moto emulator that `./scripts/test` uses:
//!
//! ```sh
//! .venv/bin/moto_server -p 5000 &
//! AWS_ENDPOINT_URL=http://127.0.0.1:5000 AWS_REGION=us-east-1 \
//!   AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
//!   cargo run -p lock-dynamodb --example dynamodb
//! ```
//!
//! Against AWS, drop `AWS_ENDPOINT_URL` and use your usual credentials; the
//! table (`LOCK_EXAMPLE_TABLE`, default `lease-lock-example`) is created on demand with
//! on-demand billing.

use std::time::Duration;

use lock_core::{AcquireOptions, LockClient};
use lock_dynamodb::{DynamoDbStore, TableError, TableOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table = std::env::var("LOCK_EXAMPLE_TABLE").unwrap_or_else(|_| "lease-lock-example".into());
    let store = DynamoDbStore::builder(&table).build_from_env().await?;
    match store.validate_table().await {
        Ok(report) => {
            for warning in report.warnings {
                println!("warning: {warning}");
            }
        }
        Err(TableError::NotFound { .. }) => {
            println!("creating table {table}");
            store.create_table(TableOptions::default()).await?;
        }
        Err(other) => return Err(other.into()),
    }

    let mut workers = Vec::new();
    for name in ["alice", "bob"] {
        let client = LockClient::builder(store.clone())
            .owner(name)
            .lease(Duration::from_secs(5))
            .build()?;
        workers.push(tokio::spawn(async move {
            for round in 1..=2 {
                let guard = client
                    .acquire(
                        "example-job",
                        AcquireOptions::new().wait(Duration::from_secs(30)),
                    )
                    .await?;
                println!(
                    "{name} holds example-job (round {round}) with fence {}",
                    guard.fence()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                guard.release().await?;
                println!("{name} released example-job");
            }
            client.shutdown().await?;
            Ok::<_, lock_core::LockError>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    Ok(())
}
