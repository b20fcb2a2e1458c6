//! Creating and validating the lock table: [`PostgresStore::create_schema`] and
//! [`PostgresStore::validate_schema`].

use tokio_postgres::types::Type;

use crate::errors::{SchemaError, Stage};
use crate::store::PostgresStore;

/// A column the store writes: name, type as `format_type` prints it, and
/// whether it must be `NOT NULL`.
const EXPECTED: [(&str, &str, bool); 10] = [
    ("partition_key", "text", true),
    ("sort_key", "text", true),
    ("owner", "text", true),
    ("rvn", "text", true),
    ("lease_ms", "bigint", true),
    ("released", "boolean", true),
    ("fence", "bigint", true),
    ("data", "bytea", false),
    ("expires_at", "bigint", false),
    ("written_at", "timestamp with time zone", true),
];

impl PostgresStore {
    /// Create the lock table if it does not exist (`CREATE TABLE IF NOT
    /// EXISTS`), then validate it: an existing table of another shape is an
    /// error, never altered. The role needs `CREATE` on the schema; the store's
    /// own statements need only `SELECT, INSERT, UPDATE, DELETE` on the table.
    pub async fn create_schema(&self) -> Result<(), SchemaError> {
        self.query(&self.statements().create, &[], Stage::Write)
            .await
            .map_err(|source| self.schema_store_error(source))?;
        self.validate_schema().await
    }

    /// Check that the table exists with the columns, types, nullability and
    /// primary key the store's statements rely on, and that the connecting role
    /// may read and write it. Every problem found is listed, each saying what
    /// to change.
    pub async fn validate_schema(&self) -> Result<(), SchemaError> {
        let name = self.quoted_table();
        let rows = self
            .query(
                "SELECT to_regclass($1)::oid",
                &[(&name, Type::TEXT)],
                Stage::Read,
            )
            .await
            .map_err(|source| self.schema_store_error(source))?;
        let oid: Option<u32> = rows.first().and_then(|row| row.get(0));
        let Some(oid) = oid else {
            return Err(SchemaError::Missing {
                table: self.table().to_owned(),
            });
        };
        let columns = self
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                        a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' \
                 FROM pg_attribute a \
                 WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
                &[(&oid, Type::OID)],
                Stage::Read,
            )
            .await
            .map_err(|source| self.schema_store_error(source))?;
        let found: Vec<(String, String, bool, bool)> = columns
            .iter()
            .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
            .collect();
        let key = self
            .query(
                "SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}') \
                 FROM pg_index i \
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) \
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                 WHERE i.indrelid = $1 AND i.indisprimary AND k.ord <= i.indnkeyatts",
                &[(&oid, Type::OID)],
                Stage::Read,
            )
            .await
            .map_err(|source| self.schema_store_error(source))?;
        let primary_key: Vec<String> = key.first().map(|row| row.get(0)).unwrap_or_default();
        let privileges = self
            .query(
                "SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) AS p \
                 WHERE NOT has_table_privilege($1, p)",
                &[(&oid, Type::OID)],
                Stage::Read,
            )
            .await
            .map_err(|source| self.schema_store_error(source))?;
        let missing_privileges: Vec<String> = privileges.iter().map(|row| row.get(0)).collect();
        let problems = problems(name, &found, &primary_key, &missing_privileges);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SchemaError::Mismatch {
                table: self.table().to_owned(),
                problems,
            })
        }
    }

    fn schema_store_error(&self, source: lock_core::StoreError) -> SchemaError {
        SchemaError::Store {
            table: self.table().to_owned(),
            source,
        }
    }
}

/// What differs between the table found and the one the store writes.
fn problems(
    table: &str,
    found: &[(String, String, bool, bool)],
    primary_key: &[String],
    missing_privileges: &[String],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, expected_type, not_null) in EXPECTED {
        match found.iter().find(|(column, ..)| column == name) {
            None => problems.push(format!(
                "column {name} is missing: ALTER TABLE {table} ADD COLUMN {name} {expected_type}{}{}",
                if not_null { " NOT NULL" } else { "" },
                if name == "written_at" { " DEFAULT now()" } else { "" }
            )),
            Some((_, actual, ..)) if actual != expected_type => problems.push(format!(
                "column {name} is {actual}; it must be {expected_type}"
            )),
            Some((_, _, actual_not_null, _)) if not_null && !actual_not_null => problems.push(
                format!("column {name} allows NULL: ALTER TABLE {table} ALTER COLUMN {name} SET NOT NULL"),
            ),
            // Inserts leave it to its default.
            Some((_, _, _, has_default)) if name == "written_at" && !has_default => problems.push(
                format!("column written_at has no default: ALTER TABLE {table} ALTER COLUMN written_at SET DEFAULT now()"),
            ),
            Some(_) => {}
        }
    }
    for (name, _, not_null, has_default) in found {
        let known = EXPECTED.iter().any(|(expected, ..)| expected == name);
        if !known && *not_null && !has_default {
            problems.push(format!(
                "column {name} is NOT NULL without a default, so the store's inserts would fail: give it a default or drop NOT NULL"
            ));
        }
    }
    if primary_key != ["partition_key", "sort_key"] {
        problems.push(if primary_key.is_empty() {
            format!(
                "the table has no primary key: ALTER TABLE {table} ADD PRIMARY KEY (partition_key, sort_key)"
            )
        } else {
            format!(
                "the primary key is ({}); it must be (partition_key, sort_key)",
                primary_key.join(", ")
            )
        });
    }
    if !missing_privileges.is_empty() {
        problems.push(format!(
            "the connecting role lacks {} on it: GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO <role>",
            missing_privileges.join(", ")
        ));
    }
    problems
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn column(name: &str, ty: &str, not_null: bool) -> (String, String, bool, bool) {
        (name.into(), ty.into(), not_null, false)
    }

    fn good() -> Vec<(String, String, bool, bool)> {
        EXPECTED
            .iter()
            .map(|(name, ty, not_null)| {
                (
                    name.to_string(),
                    ty.to_string(),
                    *not_null,
                    *name == "written_at",
                )
            })
            .collect()
    }

    const KEY: [&str; 2] = ["partition_key", "sort_key"];

    #[test]
    fn the_expected_table_has_no_problems() {
        let key: Vec<String> = KEY.iter().map(|k| k.to_string()).collect();
        assert!(problems("locks", &good(), &key, &[]).is_empty());
    }

    #[test]
    fn each_difference_is_one_precise_problem() {
        let key: Vec<String> = vec!["partition_key".into()];
        let mut columns = good();
        columns.retain(|(name, ..)| name != "rvn");
        columns[0].1 = "character varying(64)".into();
        columns[2].2 = false; // owner nullable
        columns.push(column("tenant", "text", true));
        let found = problems("locks", &columns, &key, &["UPDATE".into()]);
        assert_eq!(found.len(), 6, "{found:#?}");
        assert!(found[0].contains("partition_key is character varying(64)"));
        assert!(found[1].contains("owner allows NULL"));
        assert!(
            found[2].contains("rvn is missing: ALTER TABLE locks ADD COLUMN rvn text NOT NULL")
        );
        assert!(found[3].contains("tenant is NOT NULL without a default"));
        assert!(found[4].contains("primary key is (partition_key)"));
        assert!(found[5].contains("lacks UPDATE"));
    }
}
