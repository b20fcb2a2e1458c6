//! `lockctl create-table` and `lockctl validate-table`.

use lock_dynamodb::{TableError, TableOptions};
use serde::Serialize;

use crate::args::{CreateTableArgs, Global, OutputFormat};
use crate::exit::{CliError, OK};
use crate::output;

/// What the table commands print as JSON.
#[derive(Debug, Serialize)]
struct TableJson<'a> {
    table: &'a str,
    layout: &'a str,
    ttl_attribute: Option<&'a str>,
    warnings: &'a [String],
}

/// Create the table for the layout and wait until it is active.
pub async fn create(global: &Global, args: &CreateTableArgs) -> Result<u8, CliError> {
    let store = global.store().await?;
    let options = TableOptions::default()
        .enable_ttl(!args.no_ttl)
        .wait(args.wait);
    store
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
    let ttl = (!args.no_ttl)
        .then(|| store.layout().expires_at())
        .flatten();
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
            table: store.table(),
            layout: global.layout.flag(),
            ttl_attribute: ttl,
            warnings: &[],
        })?,
        OutputFormat::Text => output::line(&format!(
            "created table {} for the {} layout{}",
            store.table(),
            global.layout.flag(),
            ttl.map(|a| format!(" (time to live on {a})"))
                .unwrap_or_default()
        ))?,
    }
    Ok(OK)
}

/// Check the table against the layout.
pub async fn validate(global: &Global) -> Result<u8, CliError> {
    let store = global.store().await?;
    let report = store.validate_table().await.map_err(|error| {
        let hint = matches!(error, TableError::NotFound { .. })
            .then(|| format!("or {}", super::create_table_hint(global)));
        CliError::Table { error, hint }
    })?;
    match global.output {
        OutputFormat::Json => output::json(&TableJson {
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
