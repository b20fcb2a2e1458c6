//! Errors of lockctl and the exit code each one ends the process with.

use std::error::Error as StdError;
use std::process::ExitCode;

use lock_core::{LockError, LockKey, StoreError};
use lock_dynamodb::{StoreConfigError, TableError};

/// Success.
pub const OK: u8 = 0;
/// Any error not listed below.
pub const ERROR: u8 = 1;
/// Bad command line: clap's own errors, bad durations, bad configuration.
pub const USAGE: u8 = 2;
/// The wait budget ran out while someone else held the lock.
pub const TIMED_OUT: u8 = 3;
/// `run` lost the lock while the command ran.
pub const LOST: u8 = 4;
/// `run`: the command ran for `--max-time` and was stopped.
pub const MAX_TIME: u8 = 5;
/// `run`: the command exists but could not be executed (as in `env`, `timeout`).
pub const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found.
pub const NOT_FOUND: u8 = 127;

/// Everything that makes lockctl fail.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line or configuration is unusable.
    #[error("{0}")]
    Usage(String),
    /// The lock client failed.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Creating or validating the table failed.
    #[error("{error}{}", hint.as_deref().map(|h| format!("\n  {h}")).unwrap_or_default())]
    Table {
        /// The error.
        #[source]
        error: TableError,
        /// What to run from the shell instead, when that helps.
        hint: Option<String>,
    },
    /// The store configuration is invalid (for example a bad table name).
    #[error(transparent)]
    StoreConfig(#[from] StoreConfigError),
    /// The PostgreSQL store configuration is invalid (a bad table name or
    /// connection string).
    #[error(transparent)]
    PostgresConfig(#[from] lock_postgres::StoreConfigError),
    /// Creating or validating the PostgreSQL table failed.
    #[error("{error}{}", hint.as_deref().map(|h| format!("\n  {h}")).unwrap_or_default())]
    Schema {
        /// The error.
        #[source]
        error: lock_postgres::SchemaError,
        /// What to run from the shell instead, when that helps.
        hint: Option<String>,
    },
    /// `run` stopped the command because it ran for `--max-time`.
    #[error("the command ran for its --max-time of {limit} and was stopped; lock {key} released")]
    MaxTime {
        /// The lock.
        key: LockKey,
        /// The limit, as written for people.
        limit: String,
    },
    /// `run` stopped the command because its lock could no longer be trusted.
    #[error(
        "lock {key} could no longer be trusted while the command ran ({reason}); the command was stopped"
    )]
    Lost {
        /// The lock.
        key: LockKey,
        /// Why.
        reason: String,
    },
    /// A lock operation found no table. (The store's own message carries the
    /// whole server response; the table name and the fix are what matter here.)
    #[error("{store} table {table:?} does not exist ({visible})\n  {hint}", visible = if *store == "DynamoDB" { "or is not visible with these credentials and region" } else { "or is not on the search path of this user" })]
    MissingTable {
        /// The store: "DynamoDB" or "PostgreSQL".
        store: &'static str,
        /// The table.
        table: String,
        /// The lockctl command that creates the table.
        hint: String,
    },
    /// A lock operation found no bucket.
    #[error(
        "the bucket of {url} does not exist or is not visible with these credentials\n  {hint}"
    )]
    MissingBucket {
        /// The store's URL.
        url: String,
        /// What to do.
        hint: String,
    },
    /// The object store configuration is invalid (a bad URL or option, a
    /// store without conditional writes).
    #[error(transparent)]
    BucketConfig(#[from] lock_object_store::StoreConfigError),
    /// The etcd store configuration is invalid (a bad URL or file), or the
    /// login failed.
    #[error(transparent)]
    EtcdConfig(#[from] lock_etcd::StoreConfigError),
    /// The Redis store configuration is invalid, the server cannot be
    /// reached, or it cannot hold locks.
    #[error(transparent)]
    RedisConfig(#[from] lock_redis::StoreConfigError),
    /// Checking the bucket failed.
    #[error("{0}")]
    Bucket(#[source] lock_object_store::BucketError),
    /// `create-table` found the table already there.
    #[error("DynamoDB table {table:?} already exists\n  {hint}")]
    TableExists {
        /// The table.
        table: String,
        /// The lockctl command that checks it.
        hint: String,
    },
    /// A lock operation found a table whose key schema is not the layout's.
    #[error("{source}\n  {hint}")]
    WrongTable {
        /// The error, which names the table, its schema and the layout's.
        #[source]
        source: LockError,
        /// What to run or pass instead.
        hint: String,
    },
    /// A signal ended the wait for the lock.
    #[error("interrupted by {signal} while waiting for the lock")]
    Interrupted {
        /// The signal.
        signal: nix::sys::signal::Signal,
    },
    /// The operator did not confirm a forced release.
    #[error("not confirmed: lock {key} was not released")]
    NotConfirmed {
        /// The lock.
        key: LockKey,
    },
    /// Reading or writing the terminal, or waiting for the command, failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_)
            | CliError::StoreConfig(_)
            | CliError::PostgresConfig(_)
            | CliError::BucketConfig(_) => USAGE,
            CliError::EtcdConfig(lock_etcd::StoreConfigError::Login { .. }) => ERROR,
            CliError::EtcdConfig(_) => USAGE,
            CliError::RedisConfig(lock_redis::StoreConfigError::InvalidUrl { .. })
            | CliError::RedisConfig(lock_redis::StoreConfigError::InvalidPrefix { .. })
            | CliError::RedisConfig(lock_redis::StoreConfigError::ZeroTimeout { .. }) => USAGE,
            CliError::Lock(LockError::AcquireTimeout { .. }) => TIMED_OUT,
            CliError::Lock(LockError::Lost { .. }) | CliError::Lost { .. } => LOST,
            CliError::MaxTime { .. } => MAX_TIME,
            CliError::Lock(
                LockError::InvalidConfig(_)
                | LockError::InvalidInput { .. }
                | LockError::PermitsMismatch { .. }
                | LockError::ReadersMismatch { .. }
                | LockError::TooManyReaders { .. },
            ) => USAGE,
            CliError::Interrupted { signal } => 128u8.saturating_add(*signal as u8),
            _ => ERROR,
        }
    }

    /// Wrap an I/O error.
    pub fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> CliError {
        move |source| CliError::Io { what, source }
    }
}

/// Print `error` on stderr and return its exit code.
///
/// Compact (the default): the error's message, then the causes lockctl's own
/// layers add (a lock, store or table error), each once; the SDK's internal
/// layers below them are left out. `verbose` (`-v`): every cause in the chain.
pub fn report(error: &CliError, verbose: bool) -> ExitCode {
    let mut message = error.to_string();
    let mut source = error.source();
    let mut left_out = false;
    while let Some(cause) = source {
        let ours = cause.downcast_ref::<LockError>().is_some()
            || cause.downcast_ref::<StoreError>().is_some()
            || cause.downcast_ref::<TableError>().is_some()
            || cause.downcast_ref::<StoreConfigError>().is_some()
            || cause.downcast_ref::<lock_postgres::SchemaError>().is_some()
            || cause
                .downcast_ref::<lock_object_store::StoreConfigError>()
                .is_some()
            || cause
                .downcast_ref::<lock_object_store::BucketError>()
                .is_some()
            || cause
                .downcast_ref::<lock_postgres::StoreConfigError>()
                .is_some()
            || cause
                .downcast_ref::<lock_etcd::StoreConfigError>()
                .is_some();
        if !ours && !verbose {
            left_out = true;
            break;
        }
        // Said already by a layer above (a store error is quoted without its
        // "Kind: " prefix): not repeated.
        let said = match cause.downcast_ref::<StoreError>() {
            Some(store) => message.contains(store.message()),
            None => message.contains(&cause.to_string()),
        };
        if verbose || !said {
            message.push_str("\n  caused by: ");
            message.push_str(&cause.to_string());
        }
        source = cause.source();
    }
    if left_out {
        message.push_str("\n  (run with -v for the underlying errors)");
    }
    // Errors quote what the store holds (owner names, keys): no control
    // characters reach the terminal but the line breaks of the message itself.
    let message: String = message
        .split('\n')
        .map(|line| crate::text::printable(line).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("lockctl: {message}");
    ExitCode::from(error.exit_code())
}
