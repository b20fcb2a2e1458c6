//! Table management: create a lock table for a layout, check that an existing
//! table fits the layout, delete a table (for tests).

use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ProvisionedThroughput,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use tokio::time::Instant;

use crate::DynamoDbStore;
use crate::errors::TableError;
use crate::mapping::{Access, create_table_hint, map_sdk_error};

/// How a new table is billed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[non_exhaustive]
pub enum Billing {
    /// On-demand (`PAY_PER_REQUEST`): no capacity to plan, the default. Lock
    /// tables see small, bursty traffic, which is what on-demand is for.
    #[default]
    OnDemand,
    /// Provisioned capacity, in read and write capacity units.
    Provisioned {
        /// Read capacity units.
        read: i64,
        /// Write capacity units.
        write: i64,
    },
}

/// Options of [`DynamoDbStore::create_table`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct TableOptions {
    /// Billing mode (default on-demand).
    pub billing: Billing,
    /// Enable DynamoDB time to live on the layout's expiry attribute, when it has
    /// one (default `true`), so abandoned lock items are eventually deleted.
    pub enable_ttl: bool,
    /// How long to wait for the table to become `ACTIVE` (default 5 minutes).
    pub wait: Duration,
}

impl Default for TableOptions {
    fn default() -> Self {
        Self {
            billing: Billing::OnDemand,
            enable_ttl: true,
            wait: Duration::from_secs(300),
        }
    }
}

impl TableOptions {
    /// Bill with provisioned capacity.
    pub fn provisioned(mut self, read: i64, write: i64) -> Self {
        self.billing = Billing::Provisioned { read, write };
        self
    }
    /// Enable or skip time to live on the expiry attribute.
    pub fn enable_ttl(mut self, enable: bool) -> Self {
        self.enable_ttl = enable;
        self
    }
    /// How long to wait for `ACTIVE`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

/// What [`DynamoDbStore::validate_table`] found on a table that fits the layout.
#[derive(Clone, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct TableReport {
    /// The table.
    pub table: String,
    /// The attribute DynamoDB's time to live is enabled (or being enabled) on.
    pub ttl_attribute: Option<String>,
    /// Things that work but deserve attention (for example TTL not enabled while
    /// the layout writes expiry times).
    pub warnings: Vec<String>,
}

/// How often table creation and deletion poll `DescribeTable`.
///
/// Not the SDK's generated waiters (`wait_until_table_exists` and
/// `..._not_exists`): their delay between polls is fixed at 20 s to 120 s with
/// no public setting, and a new table is never active at the first poll, so
/// every `create_table` on DynamoDB would take at least 20 s (a table is usually
/// active in a few seconds). A poll every 200 ms costs a few dozen reads.
const POLL: Duration = Duration::from_millis(200);

impl DynamoDbStore {
    /// Create the table for this store's layout: a string partition key, a string
    /// sort key when the layout has one, on-demand billing unless told otherwise,
    /// and time to live on the expiry attribute (when the layout has one and
    /// `options.enable_ttl`). Waits until the table is `ACTIVE`.
    ///
    /// On a DynamoDB-compatible server without a time-to-live API (it
    /// answers `UpdateTimeToLive` as an unknown operation), the table is
    /// created without it: the report's warning (also logged) says expired
    /// lock records are then not cleaned up.
    ///
    /// Fails with [`TableError::AlreadyExists`] when the table is there; use
    /// [`validate_table`](Self::validate_table) to check such a table.
    pub async fn create_table(&self, options: TableOptions) -> Result<TableReport, TableError> {
        let table = self.table().to_owned();
        let layout = self.layout();
        let store_error = |operation: &'static str| {
            let table = table.clone();
            move |source| TableError::Store {
                table,
                operation,
                source,
            }
        };
        let mut definitions = vec![attribute(&table, layout.partition_key())?];
        let mut schema = vec![key_element(&table, layout.partition_key(), KeyType::Hash)?];
        if let Some(sort) = layout.sort_key() {
            definitions.push(attribute(&table, sort)?);
            schema.push(key_element(&table, sort, KeyType::Range)?);
        }
        let mut request = self
            .client()
            .create_table()
            .table_name(&table)
            .set_attribute_definitions(Some(definitions))
            .set_key_schema(Some(schema));
        request = match options.billing {
            Billing::OnDemand => request.billing_mode(BillingMode::PayPerRequest),
            Billing::Provisioned { read, write } => request
                .billing_mode(BillingMode::Provisioned)
                .provisioned_throughput(
                    ProvisionedThroughput::builder()
                        .read_capacity_units(read)
                        .write_capacity_units(write)
                        .build()
                        .map_err(|e| invalid_request(&table, "CreateTable", e))?,
                ),
        };
        if let Err(err) = request.send().await {
            if let SdkError::ServiceError(service) = &err
                && service.err().code() == Some("ResourceInUseException")
            {
                return Err(TableError::AlreadyExists { table });
            }
            return Err(store_error("CreateTable")(map_sdk_error(
                err,
                Access::Write,
                self.ctx("CreateTable"),
            )));
        }
        self.wait_for(
            |status| status == Some(TableStatus::Active),
            "ACTIVE",
            options.wait,
        )
        .await?;
        let mut report = TableReport {
            table: table.clone(),
            ttl_attribute: None,
            warnings: Vec::new(),
        };
        if let (true, Some(expiry)) = (options.enable_ttl, layout.expires_at()) {
            let spec = TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(expiry)
                .build()
                .map_err(|e| invalid_request(&table, "UpdateTimeToLive", e))?;
            let enabled = self
                .client()
                .update_time_to_live()
                .table_name(&table)
                .time_to_live_specification(spec)
                .send()
                .await;
            match enabled {
                Ok(_) => report.ttl_attribute = Some(expiry.to_owned()),
                Err(err) if unsupported_operation(&err) => {
                    let warning = no_ttl_api(&table);
                    tracing::warn!(%table, "{warning}");
                    report.warnings.push(warning);
                }
                Err(err) => {
                    return Err(store_error("UpdateTimeToLive")(map_sdk_error(
                        err,
                        Access::Write,
                        self.ctx("UpdateTimeToLive"),
                    )));
                }
            }
        }
        tracing::info!(%table, layout = layout.preset_name(), "created lock table");
        Ok(report)
    }

    /// Check that the table exists, is `ACTIVE`, and has the key schema and key
    /// attribute types of this store's layout, and that time to live, if enabled,
    /// is on the layout's expiry attribute and not on one holding lock state.
    /// Every error says which table and what to change.
    pub async fn validate_table(&self) -> Result<TableReport, TableError> {
        let table = self.table().to_owned();
        let layout = self.layout();
        let description = self.describe().await?.ok_or_else(|| TableError::NotFound {
            table: table.clone(),
            hint: create_table_hint(&table, layout),
        })?;
        let status = description.table_status().cloned();
        if status != Some(TableStatus::Active) {
            return Err(TableError::NotActive {
                table,
                status: status.map_or_else(|| "without a status".into(), |s| s.as_str().to_owned()),
            });
        }

        if let Some((expected, found)) = key_schema_mismatch(layout, &description) {
            return Err(TableError::KeySchemaMismatch {
                table,
                expected,
                found,
            });
        }

        let mut warnings = Vec::new();
        let described = self
            .client()
            .describe_time_to_live()
            .table_name(&table)
            .send()
            .await;
        let ttl = match described {
            Ok(ttl) => Some(ttl),
            // A DynamoDB-compatible server without the time-to-live API.
            Err(err) if unsupported_operation(&err) => {
                warnings.push(no_ttl_api(&table));
                None
            }
            Err(err) => {
                return Err(TableError::Store {
                    table: table.clone(),
                    operation: "DescribeTimeToLive",
                    source: map_sdk_error(err, Access::Read, self.ctx("DescribeTimeToLive")),
                });
            }
        };
        let ttl_attribute = ttl
            .as_ref()
            .and_then(|ttl| ttl.time_to_live_description())
            .and_then(|d| {
                let on = matches!(
                    d.time_to_live_status(),
                    Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
                );
                on.then(|| d.attribute_name().map(str::to_owned)).flatten()
            });
        if let Some(attribute) = &ttl_attribute
            && Some(attribute.as_str()) != layout.expires_at()
            && let Some((role, _)) = layout
                .attributes()
                .into_iter()
                .find(|(_, name)| *name == attribute)
        {
            return Err(TableError::TtlConflict {
                table,
                attribute: attribute.clone(),
                role,
            });
        }
        match (&ttl_attribute, layout.expires_at(), layout.default_expiry()) {
            // Said already: the server has no time to live at all.
            (None, Some(_), Some(_)) if ttl.is_none() => {}
            (None, Some(expiry), Some(_)) => warnings.push(format!(
                "the layout writes expiry times to {expiry:?} but time to live is not enabled on table {table:?}: abandoned lock items stay until deleted"
            )),
            (Some(attribute), Some(expiry), _) if attribute != expiry => warnings.push(format!(
                "time to live on table {table:?} is on {attribute:?}, not on the layout's expiry attribute {expiry:?}"
            )),
            _ => {}
        }
        Ok(TableReport {
            table,
            ttl_attribute,
            warnings,
        })
    }

    /// Delete the table and wait until it is gone. Meant for tests and tear-down:
    /// every lock in it is lost.
    pub async fn delete_table(&self, wait: Duration) -> Result<(), TableError> {
        let table = self.table().to_owned();
        if let Err(err) = self.client().delete_table().table_name(&table).send().await {
            if let SdkError::ServiceError(service) = &err
                && service.err().code() == Some("ResourceNotFoundException")
            {
                return Ok(());
            }
            return Err(TableError::Store {
                table,
                operation: "DeleteTable",
                source: map_sdk_error(err, Access::Write, self.ctx("DeleteTable")),
            });
        }
        let started = Instant::now();
        while self.describe().await?.is_some() {
            if started.elapsed() >= wait {
                return Err(TableError::WaitTimeout {
                    table,
                    wanted: "deleted",
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// The table's description, `None` when it does not exist.
    pub(crate) async fn describe(
        &self,
    ) -> Result<Option<aws_sdk_dynamodb::types::TableDescription>, TableError> {
        match self
            .client()
            .describe_table()
            .table_name(self.table())
            .send()
            .await
        {
            Ok(output) => Ok(output.table().cloned()),
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && service.err().code() == Some("ResourceNotFoundException")
                {
                    return Ok(None);
                }
                Err(TableError::Store {
                    table: self.table().to_owned(),
                    operation: "DescribeTable",
                    source: map_sdk_error(err, Access::Read, self.ctx("DescribeTable")),
                })
            }
        }
    }

    async fn wait_for(
        &self,
        done: impl Fn(Option<TableStatus>) -> bool,
        wanted: &'static str,
        wait: Duration,
    ) -> Result<(), TableError> {
        let started = Instant::now();
        loop {
            let status = self
                .describe()
                .await?
                .and_then(|d| d.table_status().cloned());
            if done(status) {
                return Ok(());
            }
            if started.elapsed() >= wait {
                return Err(TableError::WaitTimeout {
                    table: self.table().to_owned(),
                    wanted,
                    waited: started.elapsed(),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

fn attribute(table: &str, name: &str) -> Result<AttributeDefinition, TableError> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(|e| invalid_request(table, "CreateTable", e))
}

fn key_element(table: &str, name: &str, key_type: KeyType) -> Result<KeySchemaElement, TableError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(|e| invalid_request(table, "CreateTable", e))
}

fn invalid_request(
    table: &str,
    operation: &'static str,
    error: aws_sdk_dynamodb::error::BuildError,
) -> TableError {
    TableError::Store {
        table: table.to_owned(),
        operation,
        source: lock_core::StoreError::invalid(format!("could not build the request: {error}"))
            .with_source(error),
    }
}

/// The table's key schema against the layout's: `(expected, found)` when they
/// differ, each as `name (type, HASH|RANGE), ...`.
pub(crate) fn key_schema_mismatch(
    layout: &crate::Layout,
    description: &aws_sdk_dynamodb::types::TableDescription,
) -> Option<(String, String)> {
    let types = |name: &str| {
        description
            .attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == name)
            .map(|d| d.attribute_type().as_str().to_owned())
            .unwrap_or_else(|| "?".into())
    };
    let found: Vec<String> = description
        .key_schema()
        .iter()
        .map(|k| {
            format!(
                "{} ({}, {})",
                k.attribute_name(),
                types(k.attribute_name()),
                k.key_type().as_str()
            )
        })
        .collect();
    let mut expected = vec![format!("{} (S, HASH)", layout.partition_key())];
    if let Some(sort) = layout.sort_key() {
        expected.push(format!("{sort} (S, RANGE)"));
    }
    (found != expected).then(|| {
        (
            expected.join(", "),
            if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        )
    })
}

/// Whether the server refused a request as an operation it does not have (a
/// DynamoDB-compatible server without time to live, for instance), rather
/// than for its contents or its credentials.
pub(crate) fn unsupported_operation<E, R>(err: &SdkError<E, R>) -> bool
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
    R: std::fmt::Debug,
{
    match err {
        SdkError::ServiceError(service) => matches!(
            service.err().code(),
            Some(
                "UnknownOperationException"
                    | "UnsupportedOperationException"
                    | "NotImplemented"
                    | "NotImplementedException"
            )
        ),
        _ => false,
    }
}

/// The warning for a server without the time-to-live API.
fn no_ttl_api(table: &str) -> String {
    format!(
        "the server has no time-to-live API (UpdateTimeToLive and DescribeTimeToLive are unknown operations), \
         so table {table:?} has no time to live: expired lock records are not cleaned up; \
         delete them yourself (lockctl list shows them)"
    )
}
