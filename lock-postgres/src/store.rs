//! [`PostgresStore`]: the [`ConditionalStore`] on one PostgreSQL table, and its
//! builder.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use lock_core::{
    AtomicWrites, Capabilities, ConditionalStore, Cursor, Expect, KeyedWrite, LockKey, LockRecord,
    ManyOutcome, NewRecord, Outcome, Page, ReleaseFeed, StoreError,
};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::errors::{Stage, StoreConfigError, classify, classify_pool, ends_session, transport};
use crate::row::{self, WriteValues};
use crate::sql::{Statements, TableName};
use crate::tls::{RootCertificates, SslMode, TlsSettings};

/// How long the store waits, and how long it lets the server work.
///
/// Keep `reply` well below the shortest lease you use: the client can only
/// trust a heartbeat that returned.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub struct Timeouts {
    /// Opening a connection (TCP, TLS and login), and waiting for a free one
    /// in the pool.
    pub connect: Duration,
    /// The server cancels a statement that runs longer (`statement_timeout`,
    /// set on every connection the store opens); a cancelled statement is
    /// rolled back.
    pub statement: Duration,
    /// The client stops waiting for a reply this long after sending; a write
    /// without a reply may have applied (ambiguous) and its connection is
    /// closed. At least `statement`.
    pub reply: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(1),
            statement: Duration::from_secs(2),
            reply: Duration::from_millis(2500),
        }
    }
}

impl Timeouts {
    /// Set the connect timeout.
    pub fn with_connect(mut self, timeout: Duration) -> Self {
        self.connect = timeout;
        self
    }
    /// Set the server's statement timeout.
    pub fn with_statement(mut self, timeout: Duration) -> Self {
        self.statement = timeout;
        self
    }
    /// Set how long the client waits for a reply.
    pub fn with_reply(mut self, timeout: Duration) -> Self {
        self.reply = timeout;
        self
    }

    fn validate(&self) -> Result<(), StoreConfigError> {
        for (which, value) in [
            ("connect", self.connect),
            ("statement", self.statement),
            ("reply", self.reply),
        ] {
            if value.is_zero() {
                return Err(StoreConfigError::ZeroTimeout { which });
            }
        }
        if self.reply < self.statement {
            return Err(StoreConfigError::ReplyBeforeStatement {
                reply: self.reply,
                statement: self.statement,
            });
        }
        Ok(())
    }
}

/// Builds a [`PostgresStore`]; start with [`PostgresStore::builder`].
#[derive(Clone, Debug)]
pub struct PostgresStoreBuilder {
    table: String,
    timeouts: Timeouts,
    max_connections: usize,
    /// Set on the builder; they override the connection string's.
    tls: TlsSettings,
    announce_releases: bool,
}

impl PostgresStoreBuilder {
    /// Timeouts for every statement (see [`Timeouts`]).
    pub fn timeouts(mut self, timeouts: Timeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Most connections the store's own pool opens (default 16). Statements on
    /// one connection wait for each other; a client holding many locks sends
    /// heartbeats on as many connections as are free.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections;
        self
    }

    /// How the connections use TLS (libpq's `sslmode`; default
    /// [`SslMode::Prefer`]). Overrides the connection string's.
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.tls.mode = Some(mode);
        self
    }

    /// The root certificates the server's certificate must chain to (libpq's
    /// `sslrootcert`), for [`SslMode::VerifyCa`] and
    /// [`SslMode::VerifyFull`] (and `Require`, which then checks as
    /// `VerifyCa`). Overrides the connection string's.
    pub fn root_certificates(mut self, roots: RootCertificates) -> Self {
        self.tls.roots = Some(roots);
        self
    }

    /// Log in with this client certificate and its private key (PEM files;
    /// libpq's `sslcert` and `sslkey`). Overrides the connection string's.
    pub fn client_certificate(
        mut self,
        certificate: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls.client_cert = Some(certificate.into());
        self.tls.client_key = Some(key.into());
        self
    }

    /// A store with a pool of its own, connecting with a connection string
    /// (`postgres://user:password@host:port/database?sslmode=verify-full` or
    /// `host=... user=... sslmode=...`). Nothing is connected until the first
    /// statement.
    ///
    /// TLS as libpq does it, through rustls: `sslmode` `disable`, `prefer`
    /// (the default), `require`, `verify-ca`, `verify-full`; `sslrootcert` (a
    /// PEM file, or `system` for the system's roots; by default
    /// `~/.postgresql/root.crt` for the modes that need one); `sslcert` and
    /// `sslkey` for a client certificate. Certificate files are read now, so
    /// a missing one is an error here.
    pub fn build_from_url(mut self, url: &str) -> Result<PostgresStore, StoreConfigError> {
        let (rest, from_url) = crate::tls::split(url)?;
        let config = tokio_postgres::Config::from_str(&rest).map_err(|error| {
            StoreConfigError::InvalidUrl {
                reason: error.to_string(),
            }
        })?;
        self.tls = from_url.overridden_by(&self.tls);
        self.build_with_config(config)
    }

    /// A store with a pool of its own from a parsed configuration, with the
    /// builder's TLS settings (the configuration's `ssl_mode` when the
    /// builder has none). The store sets the connect timeout and the
    /// server's `statement_timeout` on it.
    pub fn build_with_config(
        self,
        mut config: tokio_postgres::Config,
    ) -> Result<PostgresStore, StoreConfigError> {
        self.timeouts.validate()?;
        if self.max_connections == 0 {
            return Err(StoreConfigError::NoConnections);
        }
        let mut tls = self.tls.clone().for_hosts(config.get_hosts())?;
        if tls.mode.is_none() {
            use tokio_postgres::config::SslMode as Negotiate;
            tls.mode = Some(match config.get_ssl_mode() {
                Negotiate::Disable => SslMode::Disable,
                Negotiate::Require => SslMode::Require,
                _ => SslMode::Prefer,
            });
        }
        config.ssl_mode(tls.negotiation());
        let connector = tls.connector()?;
        let statement_ms = self.timeouts.statement.as_millis();
        let options = match config.get_options() {
            Some(existing) => format!("{existing} -c statement_timeout={statement_ms}"),
            None => format!("-c statement_timeout={statement_ms}"),
        };
        config.options(options);
        config.connect_timeout(self.timeouts.connect);
        if config.get_application_name().is_none() {
            config.application_name("lock-postgres");
        }
        // Waiters listen for releases on a connection of their own, opened as
        // the pool's are (a pooled connection's notifications are dropped).
        let feed = self
            .announce_releases
            .then(|| {
                let (config, tls) = (config.clone(), connector.clone());
                let channel = crate::sql::release_channel(&TableName::parse(&self.table).ok()?);
                Some(ReleaseFeed::new(move |announcer| {
                    tokio::spawn(crate::notify::listen(config, tls, channel, announcer));
                }))
            })
            .flatten();
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match connector {
            Some(tls) => Manager::from_config(config, tls, manager_config),
            None => Manager::from_config(config, tokio_postgres::NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(self.max_connections)
            .wait_timeout(Some(self.timeouts.connect))
            .create_timeout(Some(self.timeouts.connect))
            .recycle_timeout(Some(self.timeouts.connect))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(|error| StoreConfigError::Pool {
                reason: error.to_string(),
            })?;
        self.finish(Connections::Pool(pool), feed)
    }

    /// A store on your own pool (with your TLS, sizes and settings). The store
    /// cannot set `statement_timeout` on your connections: set it in the pool's
    /// configuration or on the role (`ALTER ROLE ... SET statement_timeout`);
    /// the reply timeout applies either way. The connections must run the
    /// store's statements in autocommit: one handed back inside an open
    /// transaction would make an "applied" write uncommitted (use
    /// `RecyclingMethod::Clean` or `Verified` when other code shares the pool).
    pub fn build_with_pool(self, pool: Pool) -> Result<PostgresStore, StoreConfigError> {
        self.timeouts.validate()?;
        self.finish(Connections::Pool(pool), None)
    }

    /// A store on one connection you opened (tokio-postgres pipelines
    /// concurrent statements on it). As with [`build_with_pool`](Self::build_with_pool),
    /// set `statement_timeout` yourself, and never open a transaction on it
    /// while the store uses it. A connection that fails stays failed, and
    /// after a reply timeout it stays in use: prefer a pool for long-running
    /// clients.
    pub fn build_with_client(
        self,
        client: Arc<tokio_postgres::Client>,
    ) -> Result<PostgresStore, StoreConfigError> {
        self.timeouts.validate()?;
        self.finish(Connections::Client(client), None)
    }

    /// Whether waiters of this store listen for releases (`LISTEN`) on a
    /// connection of their own, so that a release in another process wakes
    /// them at once (default true). Only a store that opens its own
    /// connections (from a URL or a configuration) listens; every store
    /// announces its releases (`NOTIFY`).
    pub fn announce_releases(mut self, listen: bool) -> Self {
        self.announce_releases = listen;
        self
    }

    fn finish(
        self,
        connections: Connections,
        feed: Option<ReleaseFeed>,
    ) -> Result<PostgresStore, StoreConfigError> {
        let table = TableName::parse(&self.table)?;
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                statements: Statements::new(&table),
                table,
                timeouts: self.timeouts,
                connections,
                feed,
            }),
        })
    }
}

/// Where statements go.
#[derive(Debug)]
enum Connections {
    Pool(Pool),
    Client(Arc<tokio_postgres::Client>),
}

/// One connection for one statement. Unless the statement's reply was read
/// to the end ([`Connection::finished`]), a pooled connection is closed when
/// this is dropped instead of going back to the pool: a statement on it may
/// still be running (its future was dropped, its reply timed out) and the next
/// statement would queue behind it, or the connection itself failed.
struct Connection {
    pooled: Option<Object>,
    shared: Option<Arc<tokio_postgres::Client>>,
    finished: bool,
}

impl Connection {
    fn client(&self) -> Option<&tokio_postgres::Client> {
        match (&self.pooled, &self.shared) {
            (Some(object), _) => Some(object),
            (None, Some(client)) => Some(client),
            (None, None) => None,
        }
    }

    /// The statement's reply was read whole: the connection may be reused.
    fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if !self.finished
            && let Some(object) = self.pooled.take()
        {
            drop(Object::take(object));
        }
    }
}

#[derive(Debug)]
struct Inner {
    table: TableName,
    statements: Statements,
    timeouts: Timeouts,
    connections: Connections,
    /// Releases other processes announce, for this store's waiters.
    feed: Option<ReleaseFeed>,
}

/// A [`ConditionalStore`] on one PostgreSQL table: one statement, one round
/// trip, per operation. Cheap to clone (the pool is shared).
///
/// See the [crate docs](crate) for the statements and how errors map.
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PostgresStore {
    // The table and timeouts say which store this is; the statements and the
    // pool's slots would bury them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.inner.table.plain)
            .field("timeouts", &self.inner.timeouts)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A builder for a store on `table` (`locks`, or `schema.locks`).
    pub fn builder(table: impl Into<String>) -> PostgresStoreBuilder {
        PostgresStoreBuilder {
            table: table.into(),
            timeouts: Timeouts::default(),
            max_connections: 16,
            tls: TlsSettings::default(),
            announce_releases: true,
        }
    }

    /// The table, as configured.
    pub fn table(&self) -> &str {
        &self.inner.table.plain
    }

    /// The timeouts in force.
    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    pub(crate) fn quoted_table(&self) -> &str {
        &self.inner.table.quoted
    }

    pub(crate) fn statements(&self) -> &Statements {
        &self.inner.statements
    }

    async fn connection(&self) -> Result<Connection, StoreError> {
        match &self.inner.connections {
            Connections::Pool(pool) => {
                let object = pool
                    .get()
                    .await
                    .map_err(|error| classify_pool(error, self.table()))?;
                Ok(Connection {
                    pooled: Some(object),
                    shared: None,
                    finished: false,
                })
            }
            Connections::Client(client) => {
                if client.is_closed() {
                    return Err(transport(
                        Stage::Connecting,
                        "the PostgreSQL connection given to the store is closed".into(),
                    ));
                }
                Ok(Connection {
                    pooled: None,
                    shared: Some(client.clone()),
                    finished: false,
                })
            }
        }
    }

    /// Run one statement with typed parameters: one round trip.
    pub(crate) async fn query(
        &self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        stage: Stage,
    ) -> Result<Vec<Row>, StoreError> {
        let mut connection = self.connection().await?;
        let Some(client) = connection.client() else {
            return Err(transport(
                Stage::Connecting,
                "no PostgreSQL connection".into(),
            ));
        };
        let sent =
            tokio::time::timeout(self.inner.timeouts.reply, client.query_typed(sql, params)).await;
        match sent {
            Ok(Ok(rows)) => {
                connection.finished();
                Ok(rows)
            }
            Ok(Err(error)) => {
                // An error for the statement leaves the connection usable; one
                // that ends the session (or the connection's own failure)
                // closes it.
                if !ends_session(&error) {
                    connection.finished();
                }
                Err(classify(&error, stage, self.table()))
            }
            Err(_elapsed) => {
                // The statement may still be running: ask the server to cancel
                // it (best effort, on a connection of its own; it may have
                // committed already, so a write stays ambiguous).
                let cancel = client.cancel_token();
                let limit = self.inner.timeouts.connect;
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(limit, cancel.cancel_query(tokio_postgres::NoTls))
                        .await;
                });
                Err(transport(
                    stage,
                    format!(
                        "no reply from PostgreSQL within {:?}",
                        self.inner.timeouts.reply
                    ),
                ))
            }
        }
    }

    /// `put`'s statement for a key (`partition`, `sort`) and `values`, and
    /// its parameters (`expected`: the version a `Version` condition names).
    fn put_statement<'a>(
        &'a self,
        values: &'a WriteValues<'a>,
        expected: Option<&'a &'a str>,
        partition: &'a &'a str,
        sort: &'a &'a str,
    ) -> (&'a str, Params<'a>) {
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
            (partition, Type::TEXT),
            (sort, Type::TEXT),
            (&values.owner, Type::TEXT),
            (&values.rvn, Type::TEXT),
            (&values.lease_ms, Type::INT8),
            (&values.released, Type::BOOL),
            (&values.next_fence, Type::BOOL),
            (&values.data_mode, Type::INT4),
            (&values.data, Type::BYTEA),
            (&values.expires_at, Type::INT8),
        ];
        let sql = match expected {
            None => &self.inner.statements.put_vacant,
            Some(expected) => {
                params.push((expected, Type::TEXT));
                &self.inner.statements.put_version
            }
        };
        (sql, params)
    }

    /// `put_many`: one transaction on one pooled connection, its `BEGIN` and
    /// every conditional statement sent at once (one round trip), then
    /// `COMMIT` if each applied, `ROLLBACK` otherwise (a second).
    async fn write_many(&self, writes: &[KeyedWrite]) -> Result<ManyOutcome, StoreError> {
        let values = writes
            .iter()
            .map(|write| WriteValues::check(&write.key, &write.new))
            .collect::<Result<Vec<_>, _>>()?;
        let mut keys: Vec<&LockKey> = writes.iter().map(|write| &write.key).collect();
        keys.sort();
        if keys.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StoreError::invalid(
                "a key written twice in one request: each key once",
            ));
        }
        if writes.len() > MAX_KEYS_AT_ONCE {
            return Err(StoreError::invalid(format!(
                "{} writes in one request; this store takes at most {MAX_KEYS_AT_ONCE}",
                writes.len()
            )));
        }
        let partitions: Vec<&str> = writes.iter().map(|write| write.key.partition()).collect();
        let sorts: Vec<&str> = writes
            .iter()
            .map(|write| row::sort_column(&write.key))
            .collect();
        let expected: Vec<Option<&str>> = writes
            .iter()
            .map(|write| match &write.expect {
                Expect::Vacant => None,
                Expect::Version(rvn) => Some(rvn.as_str()),
            })
            .collect();
        let statements: Vec<(&str, Params<'_>)> = (0..writes.len())
            .map(|i| {
                self.put_statement(&values[i], expected[i].as_ref(), &partitions[i], &sorts[i])
            })
            .collect();
        let mut connection = self.connection().await?;
        let Some(client) = connection.client() else {
            return Err(transport(
                Stage::Connecting,
                "no PostgreSQL connection".into(),
            ));
        };
        let reply = self.inner.timeouts.reply;
        // Sent together: tokio-postgres pipelines requests made before their
        // replies are read.
        let begin = client.query_typed("BEGIN", &[]);
        let puts = futures_util::future::join_all(
            statements
                .iter()
                .map(|(sql, params)| client.query_typed(sql, params)),
        );
        let sent = tokio::time::timeout(reply, futures_util::future::join(begin, puts)).await;
        let Ok((begun, replies)) = sent else {
            // Nothing was committed: closing the connection (it is not
            // returned to the pool) rolls the transaction back.
            return Err(StoreError::unavailable(format!(
                "no reply from PostgreSQL within {reply:?} to the statements of a transaction; it was not committed"
            )));
        };
        // Each statement is synchronised on its own: had BEGIN failed, the
        // writes after it ran outside a transaction, each committed if it
        // applied.
        if let Err(error) = begun {
            return Err(StoreError::ambiguous(format!(
                "BEGIN failed ({}), so the writes sent with it ran one by one; some may have applied",
                classify(&error, Stage::Read, self.table()).message()
            )));
        }
        let decided = self.decide(replies);
        let end = match &decided {
            Ok(ManyOutcome::Applied(_)) => "COMMIT",
            _ => "ROLLBACK",
        };
        let ended = tokio::time::timeout(reply, client.query_typed(end, &[])).await;
        match (end, ended, decided) {
            (_, Ok(Ok(_)), decided) => {
                connection.finished();
                decided
            }
            // A rollback that failed: nothing was committed either way (the
            // connection is closed, not reused).
            ("ROLLBACK", _, decided) => decided,
            (_, Ok(Err(error)), _) => Err(classify(&error, Stage::Write, self.table())),
            (_, Err(_elapsed), _) => Err(StoreError::ambiguous(format!(
                "no reply from PostgreSQL within {reply:?} to COMMIT; the writes may have applied"
            ))),
        }
    }

    /// What the statements of a transaction decided, before its end: every
    /// write applied, or the first refused one. Nothing is committed yet, so
    /// an error here means "not applied".
    fn decide(
        &self,
        replies: Vec<Result<Vec<Row>, tokio_postgres::Error>>,
    ) -> Result<ManyOutcome, StoreError> {
        let mut records = Vec::with_capacity(replies.len());
        for (index, rows) in replies.into_iter().enumerate() {
            let rows = rows.map_err(|error| classify(&error, Stage::Read, self.table()))?;
            // A reply that cannot be read is not committed yet: roll back.
            let outcome = Self::outcome(&rows).map_err(|error| {
                StoreError::unavailable(format!(
                    "{}; the transaction was rolled back",
                    error.message()
                ))
            })?;
            match outcome {
                Outcome::Applied(record) => records.push(record),
                Outcome::Rejected { current } => {
                    return Ok(ManyOutcome::Rejected { index, current });
                }
            }
        }
        Ok(ManyOutcome::Applied(records))
    }

    /// Read the outcome of a conditional statement: its one row (`applied`
    /// first, then the record), or none when the key is absent.
    ///
    /// A reply that cannot be read (columns of another type, a value this
    /// store never writes) is ambiguous: the statement has committed, and
    /// whether it wrote cannot be told from it.
    fn outcome(rows: &[Row]) -> Result<Outcome, StoreError> {
        let Some(row) = rows.first() else {
            return Ok(Outcome::Rejected { current: None });
        };
        let unreadable = |what: String| {
            StoreError::ambiguous(format!(
                "PostgreSQL answered the write, but its reply could not be read ({what}); it may have applied"
            ))
        };
        let applied: bool = row
            .try_get(0)
            .map_err(|error| unreadable(error.to_string()))?;
        let record = row::record(row, 1).map_err(|error| unreadable(error.message().to_owned()))?;
        Ok(if applied {
            Outcome::Applied(record)
        } else {
            Outcome::Rejected {
                current: Some(record),
            }
        })
    }
}

#[async_trait]
impl ConditionalStore for PostgresStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        row::check_key(key)?;
        let sort = row::sort_column(key);
        let rows = self
            .query(
                &self.inner.statements.get,
                &[(&key.partition(), Type::TEXT), (&sort, Type::TEXT)],
                Stage::Read,
            )
            .await?;
        rows.first().map(|row| row::record(row, 0)).transpose()
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let values = WriteValues::check(key, &new)?;
        let partition = key.partition();
        let sort = row::sort_column(key);
        let expected = match &expect {
            Expect::Vacant => None,
            Expect::Version(rvn) => Some(rvn.as_str()),
        };
        let (sql, params) = self.put_statement(&values, expected.as_ref(), &partition, &sort);
        let rows = self.query(sql, &params, Stage::Write).await?;
        Self::outcome(&rows)
    }

    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        if matches!(self.inner.connections, Connections::Client(_)) {
            return Err(StoreError::invalid(
                "a store on one shared connection cannot write several keys in one transaction (other statements would run inside it); build it with a pool",
            ));
        }
        self.write_many(&writes).await
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        row::check_key(key)?;
        let partition = key.partition();
        let sort = row::sort_column(key);
        let rows = match &expect {
            Expect::Vacant => {
                self.query(
                    &self.inner.statements.delete_vacant,
                    &[(&partition, Type::TEXT), (&sort, Type::TEXT)],
                    Stage::Write,
                )
                .await?
            }
            Expect::Version(rvn) => {
                let expected = rvn.as_str();
                self.query(
                    &self.inner.statements.delete_version,
                    &[
                        (&partition, Type::TEXT),
                        (&sort, Type::TEXT),
                        (&expected, Type::TEXT),
                    ],
                    Stage::Write,
                )
                .await?
            }
        };
        Self::outcome(&rows)
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        if limit == 0 {
            return Err(StoreError::invalid(
                "a listing page must hold at least one record",
            ));
        }
        let (after_partition, after_sort) = match &cursor {
            Some(cursor) => decode_cursor(cursor)?,
            None => (String::new(), String::new()),
        };
        if let (Some(partition), Some(_)) = (partition, &cursor)
            && after_partition != partition
        {
            return Err(StoreError::invalid(format!(
                "the listing cursor belongs to partition {after_partition:?}, not {partition:?}; start the listing again without one"
            )));
        }
        // One more than asked for tells whether another page follows.
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let fetch = limit.saturating_add(1);
        let rows = match partition {
            Some(partition) => {
                if partition.contains('\0') {
                    return Err(StoreError::invalid(
                        "the partition contains a NUL character, which PostgreSQL text cannot store",
                    ));
                }
                let sql = if cursor.is_some() {
                    &self.inner.statements.list_partition
                } else {
                    &self.inner.statements.list_partition_first
                };
                self.query(
                    sql,
                    &[
                        (&partition, Type::TEXT),
                        (&after_sort, Type::TEXT),
                        (&fetch, Type::INT8),
                    ],
                    Stage::Read,
                )
                .await?
            }
            None => {
                self.query(
                    &self.inner.statements.list_all,
                    &[
                        (&after_partition, Type::TEXT),
                        (&after_sort, Type::TEXT),
                        (&fetch, Type::INT8),
                    ],
                    Stage::Read,
                )
                .await?
            }
        };
        let mut records = rows
            .iter()
            .map(|row| row::record(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let more = records.len() as i64 > limit;
        records.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        let next = match records.last() {
            Some(last) if more => Some(encode_cursor(&last.key)),
            _ => None,
        };
        Ok(Page { records, next })
    }

    fn release_feed(&self) -> Option<ReleaseFeed> {
        self.inner.feed.clone()
    }

    fn capabilities(&self) -> Capabilities {
        // Several keys in one transaction on a connection of its own: not on
        // a connection shared with the store's other statements.
        let atomic = match self.inner.connections {
            Connections::Pool(_) => Some(AtomicWrites::new(
                MAX_KEYS_AT_ONCE,
                MAX_KEYS_AT_ONCE * row::MAX_RECORD_BYTES,
            )),
            Connections::Client(_) => None,
        };
        row::limits()
            .with_announces_releases(self.inner.feed.is_some())
            .with_returns_current_on_conflict(true)
            .with_keeps_released_records(true)
            .with_fences_after_deletion(lock_core::FencesAfterDeletion::ClockFloor)
            .with_stores_expiry(true)
            .with_atomic_writes(atomic)
    }
}

/// A statement's typed parameters.
type Params<'a> = Vec<(&'a (dyn ToSql + Sync), Type)>;

/// The most keys one `put_many` writes: each is a statement of its
/// transaction, all sent at once.
const MAX_KEYS_AT_ONCE: usize = 1_000;

/// A cursor is the last key of the page, as a JSON pair.
fn encode_cursor(key: &LockKey) -> Cursor {
    Cursor(serde_json::json!([key.partition(), row::sort_column(key)]).to_string())
}

fn decode_cursor(cursor: &Cursor) -> Result<(String, String), StoreError> {
    serde_json::from_str::<(String, String)>(&cursor.0).map_err(|_| {
        StoreError::invalid(format!(
            "listing cursor {:?} was not made by this store; start the listing again without one",
            cursor.0
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_invalid() {
        let key = LockKey::with_sort("a\"b", "c,d");
        let cursor = encode_cursor(&key);
        assert_eq!(
            decode_cursor(&cursor).unwrap(),
            ("a\"b".to_owned(), "c,d".to_owned())
        );
        let error = decode_cursor(&Cursor("s3:abc".into())).unwrap_err();
        assert_eq!(error.kind(), lock_core::StoreErrorKind::Invalid);
    }

    #[test]
    fn bad_configuration_is_refused_before_anything_connects() {
        let url = "postgres://u:p@127.0.0.1:1/db";
        let error = PostgresStore::builder("bad name")
            .build_from_url(url)
            .unwrap_err();
        assert!(matches!(error, StoreConfigError::InvalidTableName { .. }));
        let error = PostgresStore::builder("locks")
            .timeouts(Timeouts::default().with_reply(Duration::from_millis(100)))
            .build_from_url(url)
            .unwrap_err();
        assert!(matches!(
            error,
            StoreConfigError::ReplyBeforeStatement { .. }
        ));
        let error = PostgresStore::builder("locks")
            .max_connections(0)
            .build_from_url(url)
            .unwrap_err();
        assert_eq!(error, StoreConfigError::NoConnections);
        let error = PostgresStore::builder("locks")
            .build_from_url("postgres://[bad")
            .unwrap_err();
        assert!(matches!(error, StoreConfigError::InvalidUrl { .. }));
        // TLS is built in: a TLS connection string builds (nothing connects
        // yet), a wrong setting is refused saying what to change.
        assert!(
            PostgresStore::builder("locks")
                .build_from_url("postgres://u:p@db.internal/app?sslmode=require")
                .is_ok()
        );
        let error = PostgresStore::builder("locks")
            .build_from_url(
                "postgres://u:p@db.internal/app?sslmode=verify-full&sslrootcert=/nonexistent.pem",
            )
            .unwrap_err();
        assert!(matches!(error, StoreConfigError::Tls { .. }), "{error:?}");
        assert!(error.to_string().contains("/nonexistent.pem"), "{error}");
    }
}
