//! Fences checked at the resource: a small table that remembers, for each
//! resource a lock protects, the highest fence a writer presented, and a SQL
//! function that admits a fence inside the writer's own transaction or
//! refuses it, so that a holder whose lease ran out (paused, partitioned)
//! cannot write after the next holder did: its whole transaction rolls back.
//!
//! [`PostgresStore::create_fence_guard`] creates both beside the lock table
//! `locks` (fences count per key of one lock table): the table `locks_fences`
//! and the function `locks_admit_fence(resource text, lock_key text, fence
//! bigint)`, in the lock table's schema.
//! Any client can call the function in plain SQL; [`FenceGuard::admit`] calls
//! it from Rust with a lock's key and fence and turns its refusals into a
//! [`FenceError`].
//!
//! The function admits a fence equal to or higher than the highest one
//! admitted for the resource (and records it), and raises:
//!
//! * SQLSTATE [`STALE_FENCE`] (`LLF01`) for a lower one: the lock was taken
//!   over since; the detail is the highest fence admitted;
//! * SQLSTATE [`OTHER_LOCK`] (`LLF02`) for a fence of another lock than the
//!   one that first fenced the resource (fences of two locks do not
//!   compare); the detail is that lock's key;
//! * SQLSTATE `22023` (invalid parameter) for an empty resource or a fence
//!   below 1.
//!
//! The row of the resource stays locked until the transaction ends, so two
//! writers of one resource take turns: a stale one waits for the newer one
//! to commit and is then refused. Under `REPEATABLE READ` or `SERIALIZABLE`
//! the one that waited gets a serialization failure (`40001`) instead, which
//! rolls it back too.

use lock_core::fencing::check_input;
use lock_core::{Fence, FenceRefused, LockKey};
use tokio_postgres::GenericClient;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use crate::errors::{SchemaError, Stage};
use crate::store::PostgresStore;

/// SQLSTATE of a fence lower than one admitted already.
pub const STALE_FENCE: &str = "LLF01";
/// SQLSTATE of a fence of another lock than the one that fences the resource.
pub const OTHER_LOCK: &str = "LLF02";
/// The longest resource name admitted, in bytes: it is the fence table's
/// primary key, and PostgreSQL's index entries hold about 2,700 bytes.
pub const MAX_RESOURCE_BYTES: usize = 2_048;

/// Why a fence was not admitted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The fence was refused, or refused before anything was sent (see
    /// [`FenceRefused`]). A refusal by the function aborted the
    /// transaction: roll it back.
    #[error(transparent)]
    Refused(#[from] FenceRefused),
    /// The server failed the call (no connection, no such function: run
    /// [`PostgresStore::create_fence_guard`] first, no permission).
    #[error("PostgreSQL could not check the fence of resource {resource}")]
    Postgres {
        /// The resource.
        resource: String,
        /// The server's or the driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
}

/// The longest identifier PostgreSQL keeps (longer ones are cut short).
const MAX_NAME_BYTES: usize = 63;

/// The fence table and function of a lock table; see the
/// [module docs](self). Cheap to clone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceGuard {
    /// `"schema"."locks_fences"`, quoted as the lock table is.
    table: String,
    /// `"schema"."locks_admit_fence"`.
    function: String,
    /// The statement that admits a fence: `$1` resource, `$2` lock key, `$3`
    /// fence.
    admit: String,
}

impl FenceGuard {
    /// The guard of lock table `table` (`locks` or `schema.locks`, already
    /// validated), or `None` if its names would not fit.
    fn of_table(table: &str) -> Option<Self> {
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table),
        };
        if name.len() + "_admit_fence".len() > MAX_NAME_BYTES {
            return None;
        }
        let qualify = |suffix: &str| match schema {
            Some(schema) => format!("\"{schema}\".\"{name}{suffix}\""),
            None => format!("\"{name}{suffix}\""),
        };
        let function = qualify("_admit_fence");
        Some(Self {
            table: qualify("_fences"),
            admit: format!("SELECT {function}($1::text, $2::text, $3::bigint)"),
            function,
        })
    }

    /// The function's name, quoted and qualified as the lock table is: what
    /// plain SQL calls, as `SELECT locks_admit_fence('orders/42', 'orders',
    /// 7)` for the lock table `locks`.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// The fence table's name, qualified as [`function`](Self::function).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The statement [`admit`](Self::admit) sends: `$1` the resource, `$2`
    /// the lock's key, `$3` its fence.
    pub fn statement(&self) -> &str {
        &self.admit
    }

    /// Admit `fence` of the lock `key` for `resource` on `client` — the
    /// caller's transaction, so that a refusal rolls back what it wrote —
    /// and return the highest fence admitted (the one presented).
    ///
    /// Refused with [`FenceRefused::InvalidInput`] (in [`FenceError::Refused`]) before anything is sent for
    /// an empty resource, one with a NUL character or longer than
    /// [`MAX_RESOURCE_BYTES`], or fence 0.
    pub async fn admit(
        &self,
        client: &impl GenericClient,
        resource: &str,
        key: &LockKey,
        fence: Fence,
    ) -> Result<Fence, FenceError> {
        let value = check_arguments(resource, key, fence)?;
        let lock_key = key.to_string();
        let rows = client
            .query_typed(
                &self.admit,
                &[
                    (&resource, Type::TEXT),
                    (&lock_key, Type::TEXT),
                    (&value, Type::INT8),
                ],
            )
            .await
            .map_err(|source| refusal(source, resource, &lock_key, fence))?;
        let highest: Option<i64> = rows.first().and_then(|row| row.get(0));
        Ok(highest
            .and_then(|highest| u64::try_from(highest).ok())
            .map_or(fence, Fence))
    }
}

/// The checks [`FenceGuard::admit`] makes before it sends anything (and a
/// caller of the SQL function in another language can make the same way):
/// a resource the fence table can hold, a lock key, and a fence from 1 to
/// PostgreSQL's largest `bigint`, returned as one.
pub fn check_arguments(resource: &str, key: &LockKey, fence: Fence) -> Result<i64, FenceRefused> {
    check_input(resource, &key.to_string(), fence)?;
    check_resource(resource)?;
    i64::try_from(fence.0).map_err(|_| FenceRefused::InvalidInput {
        reason: format!(
            "fence {fence} for resource {resource}: PostgreSQL's bigint holds fences up to {}",
            i64::MAX
        ),
    })
}

/// A resource name the fence table can hold, or what to change.
fn check_resource(resource: &str) -> Result<(), FenceRefused> {
    let reason = if resource.contains('\0') {
        format!("resource {resource:?} contains a NUL character, which PostgreSQL text cannot hold")
    } else if resource.len() > MAX_RESOURCE_BYTES {
        format!(
            "resource name of {} bytes: at most {MAX_RESOURCE_BYTES} (name the resource by a shorter key, or a hash of it)",
            resource.len()
        )
    } else {
        return Ok(());
    };
    Err(FenceRefused::InvalidInput { reason })
}

/// The function's refusal as a [`FenceError`], or the server's error.
fn refusal(source: tokio_postgres::Error, resource: &str, key: &str, fence: Fence) -> FenceError {
    let db = source.as_db_error();
    let detail = db.and_then(|db| db.detail()).unwrap_or_default().to_owned();
    match source.code().map(SqlState::code) {
        Some(STALE_FENCE) => FenceRefused::Stale {
            resource: resource.to_owned(),
            presented: fence,
            highest: Fence(detail.parse().unwrap_or(0)),
        }
        .into(),
        Some(OTHER_LOCK) => FenceRefused::OtherLock {
            resource: resource.to_owned(),
            fenced_by: detail,
            presented_by: key.to_owned(),
        }
        .into(),
        _ => FenceError::Postgres {
            resource: resource.to_owned(),
            source,
        },
    }
}

impl PostgresStore {
    /// The fence table and function of this store's lock table (created by
    /// [`create_fence_guard`](Self::create_fence_guard)); refused when the
    /// lock table's name leaves no room for theirs.
    pub fn fence_guard(&self) -> Result<FenceGuard, SchemaError> {
        FenceGuard::of_table(self.table()).ok_or_else(|| SchemaError::FenceNamesTooLong {
            table: self.table().to_owned(),
            max: MAX_NAME_BYTES,
        })
    }

    /// Create the fence table and function of this store's lock table if
    /// they do not exist, or replace the function with this version's (see
    /// the [module docs](crate::fence)). Safe to call from several processes
    /// at once. The role needs `CREATE` on the schema; a writer needs
    /// `EXECUTE` on the function and `SELECT, INSERT, UPDATE` on the table.
    pub async fn create_fence_guard(&self) -> Result<FenceGuard, SchemaError> {
        let guard = self.fence_guard()?;
        let FenceGuard {
            table, function, ..
        } = &guard;
        // One transaction, serialised by an advisory lock: two processes
        // replacing one function at once would fail.
        let sql = format!(
            r#"DO $create$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('lease_lock_fence_guard'));
    CREATE TABLE IF NOT EXISTS {table} (
        resource text PRIMARY KEY,
        lock_key text NOT NULL,
        fence bigint NOT NULL CHECK (fence > 0),
        admitted_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE OR REPLACE FUNCTION {function}(p_resource text, p_lock_key text, p_fence bigint)
    RETURNS bigint LANGUAGE plpgsql AS $admit$
    DECLARE
        fenced_by text;
        highest bigint;
    BEGIN
        IF p_resource IS NULL OR p_resource = '' THEN
            RAISE EXCEPTION 'a fenced resource needs a name' USING ERRCODE = '22023';
        END IF;
        IF p_fence IS NULL OR p_fence < 1 THEN
            RAISE EXCEPTION 'fence % for resource %: a fence is 1 or more', p_fence, p_resource
                USING ERRCODE = '22023';
        END IF;
        INSERT INTO {table} AS f (resource, lock_key, fence)
        VALUES (p_resource, coalesce(p_lock_key, ''), p_fence)
        ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence, admitted_at = now()
            WHERE f.lock_key = EXCLUDED.lock_key AND f.fence <= EXCLUDED.fence
        RETURNING f.fence INTO highest;
        IF FOUND THEN
            RETURN highest;
        END IF;
        SELECT f.lock_key, f.fence INTO fenced_by, highest
        FROM {table} f WHERE f.resource = p_resource;
        IF fenced_by IS DISTINCT FROM coalesce(p_lock_key, '') THEN
            RAISE EXCEPTION 'resource % is fenced by lock %, not by lock %', p_resource, fenced_by, p_lock_key
                USING ERRCODE = '{OTHER_LOCK}', DETAIL = fenced_by,
                      HINT = 'pass the fence of the lock that guards this resource';
        END IF;
        RAISE EXCEPTION 'fence % for resource % is stale: fence % was admitted already', p_fence, p_resource, highest
            USING ERRCODE = '{STALE_FENCE}', DETAIL = highest::text,
                  HINT = 'the lock was taken over: stop and roll back';
    END
    $admit$;
END
$create$"#
        );
        self.query(&sql, &[], Stage::Write)
            .await
            .map_err(|source| SchemaError::Store {
                table: table.clone(),
                source,
            })?;
        Ok(guard)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_is_named_after_its_lock_table_in_its_schema() {
        let guard = FenceGuard::of_table("jobs.Locks").unwrap();
        assert_eq!(guard.function(), "\"jobs\".\"Locks_admit_fence\"");
        assert_eq!(guard.table(), "\"jobs\".\"Locks_fences\"");
        assert_eq!(
            guard.statement(),
            "SELECT \"jobs\".\"Locks_admit_fence\"($1::text, $2::text, $3::bigint)"
        );
        assert_eq!(
            FenceGuard::of_table("locks").unwrap().function(),
            "\"locks_admit_fence\""
        );
        // PostgreSQL cuts names at 63 bytes: 51 leave room, 52 do not.
        assert!(FenceGuard::of_table(&"t".repeat(51)).is_some());
        assert!(FenceGuard::of_table(&format!("s.{}", "t".repeat(52))).is_none());
    }

    #[test]
    fn resource_names_the_table_cannot_hold_are_refused_saying_what_to_change() {
        for (resource, says) in [
            ("", "needs a name"),
            ("a\0b", "NUL"),
            (&"x".repeat(MAX_RESOURCE_BYTES + 1), "at most 2048"),
        ] {
            let error = check_arguments(resource, &LockKey::new("orders"), Fence(1)).unwrap_err();
            assert!(error.to_string().contains(says), "{error}");
        }
        assert!(check_resource(&"x".repeat(MAX_RESOURCE_BYTES)).is_ok());
    }
}
