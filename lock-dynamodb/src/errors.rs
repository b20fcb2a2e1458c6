//! Errors of this crate: [`StoreConfigError`] for a store or layout that cannot
//! work, [`TableError`] for table creation, validation and deletion. Store
//! operations themselves return [`lock_core::StoreError`]; see
//! [`mapping`](crate::mapping) for how DynamoDB errors are classified.

use std::time::Duration;

use lock_core::StoreError;

/// A store configuration or [`Layout`](crate::Layout) the builder refused.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreConfigError {
    /// No layout has this name ([`Layout::named`](crate::Layout::named)).
    #[error("unknown layout {name:?}: use native, python-dynamodb-lock or java")]
    UnknownLayout {
        /// The name given.
        name: String,
    },
    /// The table name is not a valid DynamoDB table name.
    #[error(
        "invalid DynamoDB table name {name:?}: use 3 to 255 characters from a-z, A-Z, 0-9, '_', '-' and '.'"
    )]
    InvalidTableName {
        /// The refused name.
        name: String,
    },
    /// An attribute name is empty.
    #[error("the {role} attribute name is empty")]
    EmptyAttributeName {
        /// What the attribute is for.
        role: &'static str,
    },
    /// An attribute name is longer than DynamoDB allows.
    #[error("the {role} attribute name {name:?} is longer than 255 bytes")]
    AttributeNameTooLong {
        /// What the attribute is for.
        role: &'static str,
        /// The name.
        name: String,
    },
    /// Two fields share one attribute.
    #[error("attribute {name:?} is used for both the {first} and the {second}")]
    DuplicateAttribute {
        /// The shared name.
        name: String,
        /// The first use.
        first: &'static str,
        /// The second use.
        second: &'static str,
    },
    /// [`ReleaseMode::MarkReleased`](crate::ReleaseMode::MarkReleased) without a
    /// released attribute.
    #[error(
        "release mode MarkReleased needs a released attribute (set one, or use ReleaseMode::Delete)"
    )]
    ReleaseNeedsAttribute,
    /// The value standing for "no sort key" is empty (DynamoDB refuses empty keys).
    #[error("the sort key placeholder for keys without a sort key must not be empty")]
    EmptyNoSortValue,
    /// A timeout is zero.
    #[error("the {which} timeout must be greater than zero")]
    ZeroTimeout {
        /// Which timeout.
        which: &'static str,
    },
    /// The read attempt count is zero.
    #[error("read attempts must be at least 1")]
    ZeroReadAttempts,
    /// A python-dynamodb-lock layout without an expiry attribute, or without a
    /// default expiry: the Python library cannot read such items.
    #[error(
        "the python-dynamodb-lock layout must write its expiry_time on every write (the Python library fails on items without it): keep an expiry attribute and a default expiry"
    )]
    PythonNeedsExpiry,
    /// The endpoint URL cannot be connected to as given.
    #[error("invalid DynamoDB endpoint URL {url:?}: {reason}")]
    InvalidEndpoint {
        /// The URL.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The SDK configuration has no region: every request would fail.
    #[error(
        "no AWS region configured: set AWS_REGION (or a region in the AWS profile, or on the SDK configuration)"
    )]
    NoRegion,
}

/// An error from [`create_table`](crate::DynamoDbStore::create_table),
/// [`validate_table`](crate::DynamoDbStore::validate_table) or
/// [`delete_table`](crate::DynamoDbStore::delete_table).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// The table does not exist.
    #[error("DynamoDB table {table:?} does not exist: {hint}")]
    NotFound {
        /// The table.
        table: String,
        /// How to create it.
        hint: String,
    },
    /// `create_table` found the table already there.
    #[error("DynamoDB table {table:?} already exists (use validate_table to check it)")]
    AlreadyExists {
        /// The table.
        table: String,
    },
    /// The table exists but is not `ACTIVE`.
    #[error("DynamoDB table {table:?} is {status}, not ACTIVE")]
    NotActive {
        /// The table.
        table: String,
        /// Its status as DynamoDB reports it.
        status: String,
    },
    /// The key schema differs from the layout's.
    #[error(
        "DynamoDB table {table:?} has key schema {found}, but the layout needs {expected}: \
         create a table for this layout or choose the layout that matches the table"
    )]
    KeySchemaMismatch {
        /// The table.
        table: String,
        /// What the layout needs, e.g. `lock_key (S, HASH)`.
        expected: String,
        /// What the table has.
        found: String,
    },
    /// Time to live is enabled on an attribute that the layout uses for something
    /// other than the expiry time: DynamoDB would delete live locks.
    #[error(
        "DynamoDB table {table:?} has TTL enabled on attribute {attribute:?}, which the layout uses as the {role}: \
         DynamoDB would delete live locks; disable TTL or point it at the expiry attribute"
    )]
    TtlConflict {
        /// The table.
        table: String,
        /// The TTL attribute.
        attribute: String,
        /// What the layout uses it for.
        role: &'static str,
    },
    /// Waiting for a table state ran out of time.
    #[error("gave up after {waited:?} waiting for DynamoDB table {table:?} to become {wanted}")]
    WaitTimeout {
        /// The table.
        table: String,
        /// The state waited for.
        wanted: &'static str,
        /// How long.
        waited: Duration,
    },
    /// DynamoDB refused or failed a table operation (the classified error is the
    /// source).
    #[error("{operation} on DynamoDB table {table:?} failed")]
    Store {
        /// The table.
        table: String,
        /// The DynamoDB operation.
        operation: &'static str,
        /// The classified error (kind and message; the SDK error is its source).
        #[source]
        source: StoreError,
    },
}
