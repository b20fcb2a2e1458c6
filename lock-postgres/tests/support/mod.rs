//! Shared set-up of the PostgreSQL tests: the server's address, fresh tables,
//! and an administrator connection for roles and row locks.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{LockClient, StoreError};
use lock_postgres::{PostgresStore, PostgresStoreBuilder};
use lock_testkit::{FreshStore, StoreFactory};

/// The test server, from `LOCK_POSTGRES_URL` (set by `./scripts/test`, which
/// starts a throw-away cluster). Without it the test fails and says how to run
/// it, unless `LOCK_POSTGRES_SKIP=1` asks to skip, which is printed.
pub fn url() -> Option<String> {
    lock_testkit::server_from_env("LOCK_POSTGRES_URL", "LOCK_POSTGRES_SKIP", "PostgreSQL")
}

/// The superuser's connection string (roles, grants, row locks held by hand).
pub fn admin_url() -> String {
    std::env::var("LOCK_POSTGRES_ADMIN_URL").expect("./scripts/test sets LOCK_POSTGRES_ADMIN_URL")
}

/// A table name no other test uses.
pub fn table_name(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// A store on a fresh table, with these extra builder settings.
pub async fn fresh_store_with(
    configure: impl FnOnce(PostgresStoreBuilder) -> PostgresStoreBuilder,
) -> Option<PostgresStore> {
    let url = url()?;
    let store = configure(PostgresStore::builder(table_name("locks")))
        .build_from_url(&url)
        .expect("valid store configuration");
    store.create_schema().await.expect("create the test table");
    Some(store)
}

/// A store on a fresh table.
pub async fn fresh_store() -> Option<PostgresStore> {
    fresh_store_with(|b| b).await
}

/// A second store (its own pool) on `store`'s table, reaching the server at
/// `url`.
pub fn same_table(
    store: &PostgresStore,
    url: &str,
    configure: impl FnOnce(PostgresStoreBuilder) -> PostgresStoreBuilder,
) -> PostgresStore {
    configure(PostgresStore::builder(store.table()))
        .build_from_url(url)
        .expect("valid store configuration")
}

/// One connection of its own to `url`, its connection task spawned.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A lock client on `store`.
pub fn client(store: PostgresStore, owner: &str, lease: Duration) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(lease)
        .build()
        .expect("valid client configuration")
}

/// Fresh tables for the conformance suite, dropped after each case passes.
#[derive(Clone, Copy, Debug)]
pub struct TableFactory;

#[async_trait]
impl StoreFactory for TableFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        let Some(url) = url() else {
            return Ok(None);
        };
        let table = table_name("conformance");
        let store = PostgresStore::builder(&table)
            .build_from_url(&url)
            .map_err(|error| StoreError::other(error.to_string()))?;
        store
            .create_schema()
            .await
            .map_err(|error| StoreError::other(error.to_string()))?;
        let cleanup = lock_testkit::Cleanup::new(move || async move {
            let admin = connect(&url).await;
            let _ = admin
                .batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))
                .await;
        });
        Ok(Some(FreshStore::with_cleanup(store, cleanup)))
    }
}
