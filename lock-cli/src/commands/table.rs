//! `lockctl create-table` and `lockctl validate-table`, on DynamoDB (a table
//! of the chosen layout), PostgreSQL (the `lock-postgres` schema), a bucket
//! (checked: buckets are made with the cloud's own tools), etcd or Redis
//! (checked: there is nothing to create).

use lock_dynamodb::{DynamoDbStore, TableError, TableOptions};
use lock_etcd::EtcdStore;
use lock_object_store::BucketStore;
use lock_postgres::{PostgresStore, SchemaError};
use lock_redis::RedisStore;
use serde::Serialize;

use crate::args::{CreateTableArgs, Global, OutputFormat};
use crate::connect::Backend;
use crate::exit::{CliError, OK};
use crate::output;

/// What the table commands print as JSON.
#[derive(Debug, Serialize)]
struct TableJson<'a> {
    store: &'a str,
    table: &'a str,
    layout: &'a str,
    ttl_attribute: Option<&'a str>,
    warnings: &'a [String],
}

/// Create the table and wait until it can be used.
pub async fn create(global: &Global, args: &CreateTableArgs) -> Result<u8, CliError> {
    match global.backend().await? {
        Backend::DynamoDb(store) => create_dynamodb(global, args, &store).await,
        Backend::Postgres(store) => create_postgres(global, &store).await,
        Backend::Bucket(store) => check_bucket(global, &store, "ready").await,
        Backend::Etcd(store) => check_etcd(global, &store, "ready").await,
        Backend::Redis(store) => check_redis(global, &store, "ready").await,
    }
}

/// Check the table.
pub async fn validate(global: &Global) -> Result<u8, CliError> {
    match global.backend().await? {
        Backend::DynamoDb(store) => validate_dynamodb(global, &store).await,
        Backend::Postgres(store) => validate_postgres(global, &store).await,
        Backend::Bucket(store) => check_bucket(global, &store, "fits").await,
        Backend::Etcd(store) => check_etcd(global, &store, "fits").await,
        Backend::Redis(store) => check_redis(global, &store, "fits").await,
    }
}

async fn create_dynamodb(
    global: &Global,
    args: &CreateTableArgs,
    store: &DynamoDbStore,
) -> Result<u8, CliError> {
    let options = TableOptions::default()
        .enable_ttl(!args.no_ttl)
        .wait(args.wait);
    let report = store
        .create_table(options)
        .await
        .map_err(|error| match error {
            // The library's message names its Rust function; here the
            // command is what helps.
            TableError::AlreadyExists { table } => CliError::TableExists {
                hint: format!(
                    "check that it fits the layout with: lockctl --table {table} --layout {} validate-table",
                    global.layout.flag()
                ),
                table,
            },
            error => CliError::Table { error, hint: None },
        })?;
    let ttl = report.ttl_attribute.as_deref();
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "dynamodb",
            table: store.table(),
            layout: global.layout.flag(),
            ttl_attribute: ttl,
            warnings: &report.warnings,
        })?,
        OutputFormat::Text => {
            output::line(&format!(
                "created table {} for the {} layout{}",
                store.table(),
                global.layout.flag(),
                ttl.map(|a| format!(" (time to live on {a})"))
                    .unwrap_or_default()
            ))?;
            for warning in &report.warnings {
                output::line(&format!("warning: {warning}"))?;
            }
        }
    }
    Ok(OK)
}

async fn validate_dynamodb(global: &Global, store: &DynamoDbStore) -> Result<u8, CliError> {
    let report = store.validate_table().await.map_err(|error| {
        let hint = matches!(error, TableError::NotFound { .. })
            .then(|| format!("or {}", super::create_table_hint(global)));
        CliError::Table { error, hint }
    })?;
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "dynamodb",
            table: &report.table,
            layout: global.layout.flag(),
            ttl_attribute: report.ttl_attribute.as_deref(),
            warnings: &report.warnings,
        })?,
        OutputFormat::Text => {
            let mut text = format!(
                "table {} fits the {} layout",
                report.table,
                global.layout.flag()
            );
            if let Some(ttl) = &report.ttl_attribute {
                text.push_str(&format!(" (time to live on {ttl})"));
            }
            for warning in &report.warnings {
                text.push_str(&format!("\nwarning: {warning}"));
            }
            output::line(&text)?;
        }
    }
    Ok(OK)
}

/// `CREATE TABLE IF NOT EXISTS`, then validation: running it again on a
/// table that fits is fine, on one that does not is an error saying what
/// differs (the table is never altered). Then the fence table and function
/// beside it, which a command run under a lock calls with its `LOCK_FENCE`
/// (none for a table whose name leaves no room for theirs: a warning says so).
async fn create_postgres(global: &Global, store: &PostgresStore) -> Result<u8, CliError> {
    store
        .create_schema()
        .await
        .map_err(|error| CliError::Schema { error, hint: None })?;
    let mut text = format!("table {} is ready on PostgreSQL", store.table());
    match store.fence_guard() {
        Ok(_) => {
            let guard = store
                .create_fence_guard()
                .await
                .map_err(|error| CliError::Schema { error, hint: None })?;
            text.push_str(&format!(
                "\nfences: SELECT {}(resource, lock_key, fence) in a transaction refuses a stale holder",
                guard.function()
            ));
        }
        Err(error) => text.push_str(&format!("\nwarning: no fence function: {error}")),
    }
    postgres_ok(global, store, &text)
}

async fn validate_postgres(global: &Global, store: &PostgresStore) -> Result<u8, CliError> {
    store.validate_schema().await.map_err(|error| {
        let hint = matches!(error, SchemaError::Missing { .. })
            .then(|| format!("or {}", super::create_table_hint(global)));
        CliError::Schema { error, hint }
    })?;
    postgres_ok(
        global,
        store,
        &format!("table {} fits the lock-postgres schema", store.table()),
    )
}

fn postgres_ok(global: &Global, store: &PostgresStore, text: &str) -> Result<u8, CliError> {
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "postgres",
            table: store.table(),
            layout: "postgres",
            ttl_attribute: None,
            warnings: &[],
        })?,
        OutputFormat::Text => output::line(text)?,
    }
    Ok(OK)
}

/// A bucket is never created here (that takes the cloud's own tools and
/// policies): both commands check that it exists, that these credentials may
/// read, write and list under the prefix, and that its PUTs are conditional.
async fn check_bucket(global: &Global, store: &BucketStore, verb: &str) -> Result<u8, CliError> {
    store.validate_bucket().await.map_err(CliError::Bucket)?;
    let costs = lock_core::ConditionalStore::capabilities(store).requests;
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "object-store",
            table: store.url(),
            layout: "object-store",
            ttl_attribute: None,
            warnings: &[],
        })?,
        OutputFormat::Text => output::line(&format!(
            "{} {verb}: conditional writes checked (create-if-absent and If-Match); locks are kept under {}\n\
             requests: {} per heartbeat or release, {} for a write on a lock this process has not read, {} more after a refused write",
            store.url(),
            if store.prefix().as_ref().is_empty() {
                "the bucket's root".to_owned()
            } else {
                format!("{}/", store.prefix())
            },
            costs.write_on_seen,
            costs.write_on_unseen,
            costs.rejection,
        ))?,
    }
    Ok(OK)
}

/// etcd has nothing to create: the check reads the prefix (the user may, and
/// every value there is a lock record) and says how the locks are kept.
async fn check_etcd(global: &Global, store: &EtcdStore, verb: &str) -> Result<u8, CliError> {
    let mut cursor = None;
    loop {
        let page = lock_core::ConditionalStore::list(store, None, cursor, 1000)
            .await
            .map_err(|source| {
                CliError::Lock(lock_core::LockError::List {
                    partition: None,
                    source,
                })
            })?;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let costs = lock_core::ConditionalStore::capabilities(store).requests;
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "etcd",
            table: store.url(),
            layout: "etcd",
            ttl_attribute: None,
            warnings: &[],
        })?,
        OutputFormat::Text => output::line(&format!(
            "{} {verb}: every value under {}/r/ is a lock record; nothing to create (etcd keeps keys as they are written)\n\
             requests: {} per heartbeat or release, {} for a write on a lock this process has not read, {} more after a refused write",
            store.url(),
            store.prefix(),
            costs.write_on_seen,
            costs.write_on_unseen,
            costs.rejection,
        ))?,
    }
    Ok(OK)
}

/// Redis has nothing to create: connecting checked the server (scripts run,
/// nothing held is evicted); this reads every record under the prefix.
async fn check_redis(global: &Global, store: &RedisStore, verb: &str) -> Result<u8, CliError> {
    let mut cursor = None;
    loop {
        let page = lock_core::ConditionalStore::list(store, None, cursor, 1000)
            .await
            .map_err(|source| {
                CliError::Lock(lock_core::LockError::List {
                    partition: None,
                    source,
                })
            })?;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            store: "redis",
            table: store.url(),
            layout: "redis",
            ttl_attribute: None,
            warnings: &[],
        })?,
        OutputFormat::Text => output::line(&format!(
            "{} {verb}: scripts run, no eviction of held locks{}; locks are kept under {}:; nothing to create\n\
             requests: 1 per operation (one script)",
            store.url(),
            if store.is_cluster() {
                ", a Redis Cluster"
            } else {
                ""
            },
            store.prefix(),
        ))?,
    }
    Ok(OK)
}
