//! Errors of this crate: [`StoreConfigError`] for a store that cannot work as
//! configured, [`SchemaError`] for schema creation and validation. Store
//! operations themselves return [`lock_core::StoreError`]; [`classify`] says how
//! PostgreSQL's errors map onto it.

use std::time::Duration;

use lock_core::StoreError;
use tokio_postgres::error::SqlState;

/// A store configuration the builder refused; nothing was sent.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// The table name is not a plain SQL identifier (optionally schema-qualified).
    #[error(
        "invalid table name {name:?}: use `table` or `schema.table`, each part 1 to 63 characters from a-z, A-Z, 0-9 and '_', not starting with a digit"
    )]
    InvalidTableName {
        /// The refused name.
        name: String,
    },
    /// The connection string could not be parsed.
    #[error("invalid PostgreSQL connection string: {reason}")]
    InvalidUrl {
        /// What the parser said.
        reason: String,
    },
    /// A timeout is zero.
    #[error("the {which} timeout must be greater than zero")]
    ZeroTimeout {
        /// Which timeout.
        which: &'static str,
    },
    /// The reply timeout is shorter than the statement timeout: the client would
    /// give up on statements the server still runs, and call them ambiguous.
    #[error(
        "the reply timeout ({reply:?}) must be at least the statement timeout ({statement:?}); raise it"
    )]
    ReplyBeforeStatement {
        /// The reply timeout.
        reply: Duration,
        /// The statement timeout.
        statement: Duration,
    },
    /// A pool of no connections.
    #[error("max_connections must be at least 1")]
    NoConnections,
    /// A TLS setting (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`, or the
    /// builder's) is invalid, or a certificate file it names cannot be used.
    #[error("TLS: {reason}")]
    Tls {
        /// What is wrong, and what to change.
        reason: String,
    },
    /// The connection pool could not be built.
    #[error("could not build the connection pool: {reason}")]
    Pool {
        /// What deadpool said.
        reason: String,
    },
}

/// Schema creation or validation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The table does not exist.
    #[error(
        "lock table {table} does not exist; create it with PostgresStore::create_schema or `lockctl create-table`"
    )]
    Missing {
        /// The table as configured.
        table: String,
    },
    /// The table exists but differs from what the store writes; each problem
    /// says what to change.
    #[error("lock table {table} does not match what the store writes: {}", problems.join("; "))]
    Mismatch {
        /// The table as configured.
        table: String,
        /// One line per problem.
        problems: Vec<String>,
    },
    /// The lock table's name leaves no room for its fence table's and
    /// function's (`<table>_fences`, `<table>_admit_fence`).
    #[error(
        "lock table name {table} is too long for its fence table and function (<table>_fences, <table>_admit_fence): PostgreSQL names hold {max} bytes, so the table's may have at most {}",
        max - "_admit_fence".len()
    )]
    FenceNamesTooLong {
        /// The table as configured.
        table: String,
        /// The longest name PostgreSQL keeps.
        max: usize,
    },
    /// The server could not be asked (connection, permissions, ...).
    #[error("could not check lock table {table}")]
    Store {
        /// The table as configured.
        table: String,
        /// What went wrong.
        #[source]
        source: StoreError,
    },
}

/// Where a statement was when it failed: the classification of a lost
/// connection depends on whether the statement may have reached the server.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Stage {
    /// Getting or opening a connection: nothing was sent.
    Connecting,
    /// A read was sent.
    Read,
    /// A conditional write was sent: it may have applied.
    Write,
}

/// Classify a PostgreSQL error for the lock client.
///
/// The rule behind each line: an error the server reports *for the statement*
/// means the statement's implicit transaction rolled back (nothing applied);
/// losing the connection after a write was sent leaves it unknown (ambiguous).
///
/// | PostgreSQL | kind |
/// | --- | --- |
/// | no connection (refused, unreachable, pool timeout) | `Unavailable` |
/// | `40001` serialization failure, `40P01` deadlock, `55P03` lock not available, `53xxx` insufficient resources | `Unavailable` (rolled back, retried) |
/// | `57014` statement timeout or cancel | `Unavailable` (rolled back, retried) |
/// | connection lost after a write was sent, `57P0x` shutdown, the reply deadline passed | writes `Ambiguous`, reads `Unavailable` |
/// | `28000`, `28P01` authentication; `42501` permission denied | `Unauthorized`, saying what to grant or set |
/// | `42P01` missing table, `3D000` missing database, `3F000` missing schema | `NotFound`, naming it and the fix |
/// | `22xxx` data exception, `54000` program limit | `Invalid` |
/// | anything else (wrong column types, a read-only standby, ...) | `Other` |
pub(crate) fn classify(error: &tokio_postgres::Error, stage: Stage, table: &str) -> StoreError {
    let Some(db) = error.as_db_error() else {
        return classify_transport(error, stage);
    };
    let code = db.code();
    let message = db.message();
    let class = &code.code()[..2];
    let kind = if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || class == "53"
    {
        StoreError::unavailable(format!(
            "PostgreSQL refused the statement ({}: {message}); it was rolled back",
            code.code()
        ))
    } else if *code == SqlState::QUERY_CANCELED {
        StoreError::unavailable(format!(
            "PostgreSQL cancelled the statement ({message}); it was rolled back"
        ))
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        && message.contains("no encryption")
    {
        // pg_hba.conf accepts this user only over TLS (`hostssl`).
        StoreError::unauthorized(format!(
            "PostgreSQL accepts this login only over TLS ({message}); connect with TLS: sslmode=verify-full and sslrootcert=/path/to/ca.pem in the connection string (or sslmode=require to encrypt without checking the server)"
        ))
    } else if *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    {
        StoreError::unauthorized(format!(
            "PostgreSQL refused the login ({message}); check the user and password of the connection string"
        ))
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        StoreError::unauthorized(format!(
            "PostgreSQL denied access ({message}); GRANT SELECT, INSERT, UPDATE, DELETE ON {table} to the connecting role"
        ))
    } else if *code == SqlState::UNDEFINED_TABLE {
        StoreError::not_found(format!(
            "lock table {table} does not exist ({message}); create it with PostgresStore::create_schema or `lockctl create-table`"
        ))
    } else if *code == SqlState::INVALID_CATALOG_NAME || *code == SqlState::INVALID_SCHEMA_NAME {
        StoreError::not_found(format!(
            "{message}; create it, or fix the connection string or table name"
        ))
    } else if matches!(class, "57" | "08") {
        // Shutdown, crash, connection failure: the server may have ended the
        // session around a statement it had already committed.
        transport(
            stage,
            format!("PostgreSQL ended the session ({}: {message})", code.code()),
        )
    } else if class == "22" || *code == SqlState::PROGRAM_LIMIT_EXCEEDED {
        StoreError::invalid(format!("PostgreSQL refused the values ({message})"))
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        StoreError::other(format!(
            "the server is read-only ({message}); point the store at the primary, not a standby"
        ))
    } else if *code == SqlState::UNDEFINED_COLUMN || *code == SqlState::DATATYPE_MISMATCH {
        StoreError::other(format!(
            "lock table {table} does not have the columns this store writes ({message}); run validate_schema to see what differs"
        ))
    } else {
        StoreError::other(format!("PostgreSQL error {}: {message}", code.code()))
    };
    kind.with_source(clone_error(error))
}

/// An error that carries no server error: the connection, TLS, the client's
/// own configuration.
fn classify_transport(error: &tokio_postgres::Error, stage: Stage) -> StoreError {
    // tokio-postgres does not expose its error kinds; these two are told apart
    // by the text it gives them, and anything else is a transport failure.
    let text = chain_text(error);
    let classified =
        if text.starts_with("authentication error") || text.contains("password missing") {
            StoreError::unauthorized(format!(
                "could not log in to PostgreSQL ({text}); set the password in the connection string"
            ))
        } else if text.starts_with("invalid configuration") {
            StoreError::invalid(format!(
                "the PostgreSQL connection is misconfigured ({text})"
            ))
        } else {
            transport(stage, format!("PostgreSQL connection failed ({text})"))
        };
    classified.with_source(clone_error(error))
}

/// Whether the connection is unusable after `error`: a transport failure, or
/// a server error that ends the session (shutdown, connection failure).
pub(crate) fn ends_session(error: &tokio_postgres::Error) -> bool {
    match error.as_db_error() {
        None => true,
        Some(db) => {
            matches!(&db.code().code()[..2], "57" | "08") && *db.code() != SqlState::QUERY_CANCELED
        }
    }
}

/// A failure of the connection itself, by how far the statement got.
pub(crate) fn transport(stage: Stage, what: String) -> StoreError {
    match stage {
        Stage::Connecting => StoreError::unavailable(format!("{what}; nothing was sent")),
        Stage::Read => StoreError::unavailable(what),
        Stage::Write => StoreError::ambiguous(format!(
            "{what} after the write was sent; it may have applied"
        )),
    }
}

/// The source kept in a [`StoreError`]'s chain: tokio-postgres errors are not
/// `Clone`, so the chain keeps their text.
fn clone_error(error: &tokio_postgres::Error) -> Box<dyn std::error::Error + Send + Sync> {
    Box::from(chain_text(error))
}

/// An error and its causes on one line: tokio-postgres's own `Display` says
/// only the kind ("error connecting to server"), its cause says why.
fn chain_text(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Classify a failure to get a connection from a pool.
pub(crate) fn classify_pool(error: deadpool_postgres::PoolError, table: &str) -> StoreError {
    use deadpool_postgres::PoolError;
    match error {
        PoolError::Backend(error) => classify(&error, Stage::Connecting, table),
        PoolError::Timeout(which) => StoreError::unavailable(format!(
            "no PostgreSQL connection in time ({which:?} timeout of the pool); nothing was sent"
        )),
        PoolError::Closed => StoreError::other("the PostgreSQL connection pool was closed"),
        other => StoreError::other(format!("could not get a PostgreSQL connection: {other}")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use lock_core::StoreErrorKind;

    #[test]
    fn a_lost_connection_is_ambiguous_only_for_a_write_that_was_sent() {
        assert_eq!(
            transport(Stage::Connecting, "gone".into()).kind(),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            transport(Stage::Read, "gone".into()).kind(),
            StoreErrorKind::Unavailable
        );
        assert_eq!(
            transport(Stage::Write, "gone".into()).kind(),
            StoreErrorKind::Ambiguous
        );
    }

    #[test]
    fn config_errors_say_what_to_change() {
        let error = StoreConfigError::ReplyBeforeStatement {
            reply: Duration::from_secs(1),
            statement: Duration::from_secs(2),
        };
        assert!(error.to_string().contains("raise it"), "{error}");
        let error = SchemaError::Mismatch {
            table: "locks".into(),
            problems: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            error.to_string(),
            "lock table locks does not match what the store writes: a; b"
        );
    }
}
