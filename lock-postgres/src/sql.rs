//! The SQL of every operation, written once per table when the store is built.
//!
//! Each state change is one statement, sent with its parameter types (the
//! extended protocol's unnamed statement: parse, bind and execute in one round
//! trip, and nothing prepared to outlive it, so transaction-mode poolers work).
//!
//! Every conditional statement has the same shape:
//!
//! ```text
//! WITH current AS MATERIALIZED (SELECT ... WHERE key FOR UPDATE),   -- lock the row, read its latest version
//!      written AS (INSERT/UPDATE/DELETE ... decided on that row ... RETURNING ...)
//! SELECT true, written.* UNION ALL SELECT false, current.* WHERE nothing was written
//! ```
//!
//! `FOR UPDATE` makes the row's latest committed version the one the
//! condition is decided on (READ COMMITTED re-reads a row that changed since the
//! statement's snapshot, after waiting for its writer), and keeps it locked until
//! the statement commits, so the returned row on a rejection is the row that
//! made the condition fail. (In the vacant acquire, `ON CONFLICT` takes the
//! lock first and `current` is read only when nothing was written.)
//! docs/postgres.md gives the whole argument.
//!
//! `written_at` is the server's time of the last write
//! (`statement_timestamp()`: the start of the writing statement, so after the
//! holder sent it, even inside a transaction a caller opened). Every
//! statement that returns a record also returns its age on the server's clock
//! (`clock_timestamp() - written_at`, taken as the row is returned): the
//! client credits a record with that age and so takes over a crashed
//! holder's lock as soon as its lease has passed on the server's clock
//! (`lock_core::timing::ClockTrust`).

use crate::errors::StoreConfigError;

/// The columns of a record, in the order every statement returns them (then
/// the record's age, see [`AGE`]).
pub(crate) const COLUMNS: &str =
    "partition_key, sort_key, owner, rvn, lease_ms, released, fence, data, expires_at";

/// The record's age on the server's clock, in whole microseconds (rounded
/// down), from a row that has `written_at`: the last column every statement
/// returns.
const AGE: &str = "floor(extract(epoch FROM clock_timestamp() - written_at) * 1000000)::int8";

/// A validated table name: `table` or `schema.table`, each a plain identifier.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct TableName {
    /// As the user wrote it.
    pub(crate) plain: String,
    /// Quoted for SQL (`"schema"."table"`): the case is kept as written.
    pub(crate) quoted: String,
}

impl TableName {
    pub(crate) fn parse(name: &str) -> Result<Self, StoreConfigError> {
        let parts: Vec<&str> = name.split('.').collect();
        let valid = |part: &str| {
            !part.is_empty()
                && part.len() <= 63
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !part.starts_with(|c: char| c.is_ascii_digit())
        };
        if parts.len() > 2 || !parts.iter().all(|part| valid(part)) {
            return Err(StoreConfigError::InvalidTableName { name: name.into() });
        }
        let quoted = parts
            .iter()
            .map(|part| format!("\"{part}\""))
            .collect::<Vec<_>>()
            .join(".");
        Ok(Self {
            plain: name.into(),
            quoted,
        })
    }
}

/// The statements of one table.
#[derive(Clone, Debug)]
pub(crate) struct Statements {
    pub(crate) get: String,
    pub(crate) put_vacant: String,
    pub(crate) put_version: String,
    pub(crate) delete_vacant: String,
    pub(crate) delete_version: String,
    pub(crate) list_all: String,
    pub(crate) list_partition: String,
    pub(crate) list_partition_first: String,
    pub(crate) create: String,
}

// Parameters of the writes: $1 partition key, $2 sort key ('' for none),
// $3 owner, $4 rvn, $5 lease in ms, $6 released, $7 whether the fence steps,
// $8 what happens to the data (0 keep, 1 replace, 2 clear), $9 the new data,
// $10 expiry, $11 the expected rvn (version writes only).
const KEY: &str = "partition_key = $1 AND sort_key = $2";
const DATA: &str = "CASE $8::int4 WHEN 0 THEN t.data WHEN 1 THEN $9::bytea ELSE NULL END";
// A row with fence 0 carries no fence (a write kept "none"): its acquisition
// starts at the first fence, as on no row.
const FENCE: &str = "CASE WHEN NOT $7::bool THEN t.fence WHEN t.fence = 0 THEN greatest(1, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint) ELSE t.fence + 1 END";
// The fence of a row created where none is (never written, or deleted by a
// scheduled DELETE, a release that deletes, lockctl, by hand, a TRUNCATE):
// the server clock's microseconds since the Unix epoch, so a deleted key's
// fences go on above those a holder paused across the deletion carries
// (FencesAfterDeletion::ClockFloor; the same as Fence::clock_floor, on the
// server's one clock instead of each client's).
const FIRST_FENCE: &str = "CASE WHEN $7::bool THEN greatest(1, floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint) ELSE 0 END";

/// The channel a table's releases are announced on (`NOTIFY`):
/// `<table>:released`, which a listener names as a quoted identifier. A
/// channel is at most 63 bytes (`pg_notify` refuses longer ones, which
/// would fail every release): a longer table name gives
/// `lease_lock:<hash of the name>`, the same in every process.
pub(crate) fn release_channel(table: &TableName) -> String {
    let channel = format!("{}:released", table.plain);
    if channel.len() <= 63 {
        return channel;
    }
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let hash = table
        .plain
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("lease_lock:{hash:016x}")
}

/// The largest payload announced: `NOTIFY` refuses 8,000 bytes or more. A
/// release of a lock whose key is longer is not announced (waiters poll).
const MAX_PAYLOAD: usize = 7_900;

impl Statements {
    pub(crate) fn new(table: &TableName) -> Self {
        let t = &table.quoted;
        // A release (or delete) announces the lock on the table's channel, in
        // the same statement: delivered to listeners when it commits. The
        // table name holds only [A-Za-z0-9_.], so it needs no escaping in a
        // literal. Materialized and referenced by the first branch, so it runs
        // exactly when a row was written.
        let channel = release_channel(table);
        let announced = format!(
            "announced AS MATERIALIZED (SELECT pg_notify('{channel}', payload) FROM \
                 (SELECT json_build_array(partition_key, sort_key)::text AS payload \
                  FROM written WHERE released) AS released \
                 WHERE octet_length(payload) <= {MAX_PAYLOAD})"
        );
        let current = format!(
            "current AS MATERIALIZED (SELECT {COLUMNS}, written_at FROM {t} WHERE {KEY} FOR UPDATE)"
        );
        let outcome = |written: &str| {
            format!(
                "SELECT true AS applied, {COLUMNS}, {AGE} FROM {written} \
                 UNION ALL \
                 SELECT false, {COLUMNS}, {AGE} FROM current WHERE NOT EXISTS (SELECT 1 FROM {written})"
            )
        };
        let announcing = |written: &str| {
            format!(
                "SELECT true AS applied, {COLUMNS}, {AGE} FROM {written} \
                     WHERE (SELECT count(*) FROM announced) >= 0 \
                 UNION ALL \
                 SELECT false, {COLUMNS}, {AGE} FROM current WHERE NOT EXISTS (SELECT 1 FROM {written})"
            )
        };
        let returning = format!("RETURNING {}, t.written_at", qualified("t"));
        // A vacant key: absent (insert, the first fence or 0) or released
        // (update). The conflict branch locks the row and decides on its
        // latest version.
        let put_vacant = format!(
            "WITH {current}, written AS (\
                 INSERT INTO {t} AS t ({COLUMNS}, written_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, {FIRST_FENCE}, \
                         CASE WHEN $8::int4 = 1 THEN $9::bytea END, $10, statement_timestamp()) \
                 ON CONFLICT (partition_key, sort_key) DO UPDATE SET \
                     owner = EXCLUDED.owner, rvn = EXCLUDED.rvn, lease_ms = EXCLUDED.lease_ms, \
                     released = EXCLUDED.released, fence = {FENCE}, data = {DATA}, \
                     expires_at = EXCLUDED.expires_at, written_at = statement_timestamp() \
                 WHERE t.released \
                 {returning}) {}",
            outcome("written")
        );
        // A version: decided on the locked row (`current`), not on the
        // statement's snapshot, so a version written since is seen.
        let put_version = format!(
            "WITH {current}, written AS (\
                 UPDATE {t} AS t SET owner = $3, rvn = $4, lease_ms = $5, released = $6, \
                     fence = {FENCE}, data = {DATA}, expires_at = $10, written_at = statement_timestamp() \
                 FROM current \
                 WHERE t.partition_key = current.partition_key AND t.sort_key = current.sort_key \
                     AND current.rvn = $11 \
                 {returning}), {announced} {}",
            announcing("written")
        );
        // A delete releases too (delete-on-release), whatever the row said.
        let deleted = format!(
            "announced AS MATERIALIZED (SELECT pg_notify('{channel}', payload) FROM \
                 (SELECT json_build_array(partition_key, sort_key)::text AS payload \
                  FROM written) AS deleted \
                 WHERE octet_length(payload) <= {MAX_PAYLOAD})"
        );
        let delete = |condition: &str| {
            format!(
                "WITH {current}, written AS (\
                     DELETE FROM {t} AS t USING current \
                     WHERE t.partition_key = current.partition_key AND t.sort_key = current.sort_key \
                         AND {condition} \
                     {returning}), {deleted} {}",
                announcing("written")
            )
        };
        Self {
            get: format!("SELECT {COLUMNS}, {AGE} FROM {t} WHERE {KEY}"),
            put_vacant,
            put_version,
            delete_vacant: delete("current.released"),
            delete_version: delete("current.rvn = $3"),
            // Keyset paging: $1/$2 the last key of the previous page ('' and ''
            // before the first: every partition key is longer than '').
            list_all: format!(
                "SELECT {COLUMNS}, {AGE} FROM {t} WHERE (partition_key, sort_key) > ($1, $2) \
                 ORDER BY partition_key, sort_key LIMIT $3"
            ),
            list_partition: format!(
                "SELECT {COLUMNS}, {AGE} FROM {t} WHERE partition_key = $1 AND sort_key > $2 \
                 ORDER BY sort_key LIMIT $3"
            ),
            // The first page of a partition includes its key without a sort
            // key (stored as '').
            list_partition_first: format!(
                "SELECT {COLUMNS}, {AGE} FROM {t} WHERE partition_key = $1 AND sort_key >= $2 \
                 ORDER BY sort_key LIMIT $3"
            ),
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\
                     partition_key text NOT NULL, \
                     sort_key text NOT NULL, \
                     owner text NOT NULL, \
                     rvn text NOT NULL, \
                     lease_ms bigint NOT NULL, \
                     released boolean NOT NULL, \
                     fence bigint NOT NULL, \
                     data bytea, \
                     expires_at bigint, \
                     written_at timestamptz NOT NULL DEFAULT now(), \
                     PRIMARY KEY (partition_key, sort_key))"
            ),
        }
    }
}

/// `COLUMNS` qualified by a table alias.
fn qualified(alias: &str) -> String {
    COLUMNS
        .split(", ")
        .map(|column| format!("{alias}.{column}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod channel_tests {
    use super::*;

    #[test]
    fn a_channel_fits_postgres_limit_whatever_the_table_name() {
        let short = TableName::parse("locks").unwrap();
        assert_eq!(release_channel(&short), "locks:released");
        let long = TableName::parse(&format!("{}.{}", "s".repeat(63), "t".repeat(63))).unwrap();
        let channel = release_channel(&long);
        assert!(channel.len() <= 63, "{channel}");
        assert_eq!(channel, release_channel(&long), "the same in every process");
        let other = TableName::parse(&format!("{}.{}", "s".repeat(63), "u".repeat(63))).unwrap();
        assert_ne!(release_channel(&other), channel);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_identifiers_quoted_as_written() {
        assert_eq!(TableName::parse("locks").unwrap().quoted, "\"locks\"");
        assert_eq!(
            TableName::parse("ops.Locks_2").unwrap().quoted,
            "\"ops\".\"Locks_2\""
        );
        for bad in [
            "",
            "a.b.c",
            "1locks",
            "locks;drop",
            "lo\"cks",
            ".locks",
            &"x".repeat(64),
        ] {
            assert!(TableName::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn every_statement_names_the_table_once_per_use_and_returns_the_columns_in_order() {
        let statements = Statements::new(&TableName::parse("locks").unwrap());
        assert!(statements.put_version.contains("FOR UPDATE"));
        assert!(
            statements
                .put_vacant
                .contains("ON CONFLICT (partition_key, sort_key)")
        );
        assert!(statements.delete_version.contains("current.rvn = $3"));
        assert!(
            statements
                .get
                .starts_with(&format!("SELECT {COLUMNS}, {AGE} "))
        );
        // Every statement returning records returns their age last.
        for statement in [
            &statements.put_vacant,
            &statements.put_version,
            &statements.delete_vacant,
            &statements.delete_version,
            &statements.list_all,
            &statements.list_partition,
            &statements.list_partition_first,
        ] {
            assert!(
                statement.contains(&format!("{COLUMNS}, {AGE} FROM")),
                "{statement}"
            );
        }
    }
}
