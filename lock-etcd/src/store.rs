//! [`EtcdStore`]: the [`ConditionalStore`] contract on etcd transactions.
//!
//! * `get` is one linearizable range request; the record and its
//!   `mod_revision` are remembered ([`Revisions`]).
//! * `put` is one transaction: `IF mod_revision(key) == <the base's>` (or
//!   `create_revision(key) == 0` for a key taken to be absent) `THEN put
//!   ELSE get`. The base is the record this store last saw at the key when
//!   the condition holds on it, else "absent". The fence is the base's + 1,
//!   computed here: the transaction only applies on exactly that revision, so
//!   the step is atomic.
//! * A refused transaction returns the current record in the same round
//!   trip. It is the rejection, unless the condition holds on it (a released
//!   record this store had not seen): then the transaction is made again on
//!   its revision.
//! * `delete` is the same transaction with a delete; `put_many` compares and
//!   writes every key in one transaction.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    AtomicWrites, Capabilities, ConditionalStore, Cursor, Expect, KeyedWrite, LockKey, LockRecord,
    ManyOutcome, NewRecord, Outcome, Page, ReleaseAnnouncer, ReleaseFeed, RequestCosts, StoreError,
};

use crate::errors::{Call, classify, timed_out};
use crate::layout::{Layout, MAX_PARTITION_BYTES, MAX_SORT_BYTES};
use crate::revisions::{Known, Revisions};
use crate::value;
use crate::wire::etcdserverpb::{Compare, RequestOp, ResponseOp, TxnResponse};
use crate::wire::mvccpb::{KeyValue, event::EventType};
use crate::wire::{Connection, Endpoints, requests};

/// Largest record, measured as the client measures it (key, owner, data):
/// with base64 and JSON, well inside etcd's default request limit
/// (`--max-request-bytes`, 1.5 MiB).
pub(crate) const MAX_RECORD_BYTES: usize = 400 * 1024;

/// Most keys one `put_many` writes: its transaction holds as many compares,
/// puts and gets, within etcd's default `--max-txn-ops` (128).
pub(crate) const MAX_KEYS_AT_ONCE: usize = 64;

/// Most bytes one `put_many` writes, as records are measured: within
/// etcd's default request limit once encoded.
pub(crate) const MAX_BYTES_AT_ONCE: usize = 1_000_000;

/// How many times one write is made again when the condition held on the
/// record a refused transaction returned, but the key changed again before
/// the next transaction: other writers releasing and re-acquiring every time.
const RACED_WRITES: usize = 4;

/// Locks in etcd: one key per lock under a prefix.
///
/// Built with [`EtcdStore::builder`] or
/// [`EtcdStoreBuilder::from_url`](crate::EtcdStoreBuilder::from_url); see the
/// [crate docs](crate).
#[derive(Clone)]
pub struct EtcdStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The channel requests go on; replaced after a request that got no
    /// answer ([`EtcdStore::failed`]).
    channel: RwLock<Connection>,
    /// How to open a new channel.
    connector: Connector,
    /// The last request timed out: the next opens a new channel.
    suspect: AtomicBool,
    pub layout: Layout,
    pub revisions: Revisions,
    /// Where the locks are, for messages: `etcd://host:port/prefix`.
    pub url: String,
    /// Releases announced under `{prefix}/n/`, when the store announces them.
    pub feed: Option<ReleaseFeed>,
}

/// What a new channel is opened with: the endpoints and options the store
/// was built with.
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    pub endpoints: Endpoints,
    /// The same without a request timeout: for the watch, a stream that
    /// stays open.
    pub watch_endpoints: Endpoints,
    /// The user to log in as, and the password.
    pub user: Option<(String, String)>,
    /// How long opening a channel (and logging in) may take.
    pub timeout: Duration,
}

impl Connector {
    /// A new channel for requests.
    pub(crate) async fn open(&self) -> Result<Connection, tonic::Status> {
        Connection::open(&self.endpoints, self.user.as_ref()).await
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// The record and revision a write is made on: `None` when the key is taken
/// to be absent.
type Base = Option<Known>;

impl EtcdStore {
    pub(crate) fn from_parts(
        connection: Connection,
        connector: Connector,
        layout: Layout,
        url: String,
        remembered: NonZeroUsize,
        announce: bool,
    ) -> Self {
        let feed = announce.then(|| {
            let connector = connector.clone();
            let layout = layout.clone();
            ReleaseFeed::new(move |announcer| {
                tokio::spawn(listen(connector, layout, announcer));
            })
        });
        Self {
            inner: Arc::new(Inner {
                channel: RwLock::new(connection),
                connector,
                suspect: AtomicBool::new(false),
                layout,
                revisions: Revisions::new(remembered),
                url,
                feed,
            }),
        }
    }

    /// Where the locks are (`etcd://host:port/prefix`, password hidden).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The prefix every lock key is under.
    pub fn prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// The etcd key that holds `key`'s record.
    pub fn etcd_key(&self, key: &LockKey) -> String {
        self.inner.layout.key(key)
    }

    /// The channel in use now.
    fn connection(&self) -> Connection {
        self.inner
            .channel
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The KV client of the channel to use now: a new channel when the last
    /// request timed out. An HTTP/2 connection whose packets are silently
    /// dropped (a firewall that forgot it, a partition the proxy or network
    /// does not heal) hangs every request sent on it until TCP gives up,
    /// minutes later, and etcd refuses keep-alive pings frequent enough to
    /// notice sooner. So, as the PostgreSQL store never reuses a connection
    /// whose reply timed out, the request after a timeout opens a new channel
    /// (a new connection, made when the request is sent). Opening it sends
    /// nothing, except with a user, when it logs in first: if that fails,
    /// the request fails as `Unavailable` (not sent) and the next one tries
    /// again.
    async fn kv(&self, what: &str) -> Result<Connection, StoreError> {
        if self.inner.suspect.swap(false, Ordering::SeqCst) {
            let connector = &self.inner.connector;
            let opened = tokio::time::timeout(connector.timeout, connector.open()).await;
            match opened {
                Ok(Ok(connection)) => {
                    *self
                        .inner
                        .channel
                        .write()
                        .unwrap_or_else(PoisonError::into_inner) = connection;
                }
                Ok(Err(status)) => {
                    self.inner.suspect.store(true, Ordering::SeqCst);
                    return Err(StoreError::unavailable(format!(
                        "{what}: opening a new etcd channel after a timeout: {}",
                        crate::errors::describe(&status)
                    ))
                    .with_source(status));
                }
                Err(_) => {
                    self.inner.suspect.store(true, Ordering::SeqCst);
                    return Err(StoreError::unavailable(format!(
                        "{what}: opening a new etcd channel after a timeout took over {:?}",
                        connector.timeout
                    )));
                }
            }
        }
        Ok(self.connection())
    }

    /// `request`'s answer. A request abandoned before its answer (its
    /// caller stopped waiting: the lock client's own deadline) makes the next
    /// request open a new channel, as a timeout does.
    async fn awaited<T>(&self, request: impl Future<Output = T>) -> T {
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        let answer = request.await;
        waiting.answered = true;
        answer
    }

    /// `error` classified; a timeout makes the next request open a new
    /// channel ([`kv`](Self::kv)).
    fn failed(&self, call: Call, what: &str, status: tonic::Status) -> StoreError {
        if timed_out(&status) {
            self.inner.suspect.store(true, Ordering::SeqCst);
        }
        classify(call, what, status)
    }

    /// The announcement of `record`'s release, put in the same transaction:
    /// waiters watching it try at once. None when nothing is released, or
    /// the store does not announce.
    fn announcement(&self, record: &LockRecord) -> Option<RequestOp> {
        (self.inner.feed.is_some() && record.released).then(|| {
            let (at, lock) = self.inner.layout.announcement(&record.key);
            requests::put_op(&at, lock)
        })
    }

    /// A record read from etcd, remembered with its revision.
    fn known(&self, key: &str, kv: &KeyValue) -> Result<Known, StoreError> {
        let record = value::decode(key, &kv.value)?;
        if self.inner.layout.key(&record.key) != key {
            return Err(StoreError::other(format!(
                "the etcd key {key} holds the record of lock {}, which belongs elsewhere; move it out of the lock prefix",
                record.key
            )));
        }
        let known = Known {
            record,
            revision: kv.mod_revision,
        };
        self.inner.revisions.remember(key, known.clone());
        Ok(known)
    }

    /// The current record of `key` as a refused transaction's `get` returned
    /// it (`None`: absent), remembered.
    fn current(&self, key: &str, response: Option<&ResponseOp>) -> Result<Base, StoreError> {
        let kv = match requests::read_in(response) {
            Some(read) => read.kvs.first(),
            None => {
                return Err(StoreError::other(format!(
                    "write {key}: etcd refused the transaction without the record it read"
                )));
            }
        };
        match kv {
            Some(kv) => Ok(Some(self.known(key, kv)?)),
            None => {
                self.inner.revisions.forget(key);
                Ok(None)
            }
        }
    }

    /// Read `key`: the record and its revision, remembered.
    async fn read(&self, key: &str) -> Result<Base, StoreError> {
        let what = format!("read {key}");
        let connection = self.kv(&what).await?;
        let answer = self.awaited(connection.range(requests::get(key))).await;
        let response = answer.map_err(|status| self.failed(Call::Read, &what, status))?;
        match response.kvs.first() {
            Some(found) => Ok(Some(self.known(key, found)?)),
            None => {
                self.inner.revisions.forget(key);
                Ok(None)
            }
        }
    }

    /// The guess a write on `key` starts from: what this store last saw
    /// there when `expect` holds on it, else "absent" (a refused transaction
    /// returns the truth).
    fn guess(&self, key: &str, expect: &Expect) -> Base {
        self.inner
            .revisions
            .get(key)
            .filter(|known| expect.holds_on(Some(&known.record)))
    }

    /// Run `txn`; `what` names it in errors.
    async fn commit(
        &self,
        what: &str,
        txn: crate::wire::etcdserverpb::TxnRequest,
    ) -> Result<TxnResponse, StoreError> {
        let connection = self.kv(what).await?;
        let answer = self.awaited(connection.txn(txn)).await;
        answer.map_err(|status| self.failed(Call::Write, what, status))
    }
}

/// Relay the releases announced under `{prefix}/n/` to `announcer` until
/// nobody holds the feed: one watch on a channel of its own (no request
/// timeout: the stream stays open), opened again half a second or so after
/// it ends (waiters poll meanwhile).
async fn listen(connector: Connector, layout: Layout, announcer: ReleaseAnnouncer) {
    tokio::select! {
        () = relay(&connector, &layout, &announcer) => {}
        // The store is gone: drop the watch and its channel.
        () = announcer.closed() => {}
    }
}

async fn relay(connector: &Connector, layout: &Layout, announcer: &ReleaseAnnouncer) {
    let prefix = layout.announcements();
    while !announcer.is_closed() {
        let watched =
            match Connection::open(&connector.watch_endpoints, connector.user.as_ref()).await {
                Ok(connection) => connection.watch(requests::watch_prefix(&prefix)).await,
                Err(status) => Err(status),
            };
        match watched {
            Ok(mut stream) => {
                while let Ok(Some(response)) = stream.message().await {
                    for event in &response.events {
                        let Some(kv) = &event.kv else { continue };
                        if event.r#type != i32::from(EventType::Put) {
                            continue;
                        }
                        let (Ok(key), Ok(value)) =
                            (std::str::from_utf8(&kv.key), std::str::from_utf8(&kv.value))
                        else {
                            continue;
                        };
                        if let Some(lock) = layout.announced(key, value)
                            && !announcer.announce(lock)
                        {
                            return;
                        }
                    }
                    // etcd ended the watch (compacted, or the member lost
                    // its leader): watch again.
                    if response.canceled {
                        break;
                    }
                }
            }
            Err(status) => tracing::debug!(
                "could not watch {prefix}: {}",
                crate::errors::describe(&status)
            ),
        }
        let pause = Duration::from_millis(500 + fastrand::u64(..500));
        tokio::time::sleep(pause).await;
    }
}

/// Marks the channel suspect when dropped before its request was answered.
struct Abandoned<'a> {
    suspect: &'a AtomicBool,
    answered: bool,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.suspect.store(true, Ordering::SeqCst);
        }
    }
}

/// The comparison that `base` is still what `key` holds.
fn unchanged(key: &str, base: &Base) -> Compare {
    match base {
        Some(known) => requests::written_at(key, known.revision),
        None => requests::absent(key),
    }
}

/// The revision a write transaction committed at: every key it wrote has
/// this `mod_revision`.
fn committed_at(what: &str, response: &TxnResponse) -> Result<i64, StoreError> {
    requests::revision(response).ok_or_else(|| {
        StoreError::ambiguous(format!(
            "{what}: etcd answered without a revision; the write may have applied"
        ))
    })
}

/// The record's size as the limits count it.
fn record_bytes(record: &LockRecord) -> usize {
    record.key.partition().len()
        + record.key.sort().map_or(0, str::len)
        + record.owner.len()
        + record.data.as_ref().map_or(0, Vec::len)
}

/// The checks the client makes too, so a store used on its own refuses the
/// same input before anything is sent.
fn check_record(record: &LockRecord) -> Result<(), StoreError> {
    let limits = limits();
    limits.check_key(&record.key)?;
    Ok(limits.check_record_size(&record.key, record_bytes(record))?)
}

/// The key and record limits of this store.
fn limits() -> Capabilities {
    Capabilities::default()
        .with_key_limits(MAX_PARTITION_BYTES, MAX_SORT_BYTES)
        .with_max_record_bytes(MAX_RECORD_BYTES)
}

#[async_trait]
impl ConditionalStore for EtcdStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let key = self.inner.layout.key(key);
        Ok(self.read(&key).await?.map(|known| known.record))
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let ekey = self.inner.layout.key(key);
        // Checked on a record with no data kept, then on the one written:
        // bad input is refused before any request.
        check_record(&new.stored_on(key, None)?)?;
        let what = format!("write {ekey}");
        let mut base = match (self.guess(&ekey, &expect), &expect) {
            (Some(known), _) => Some(known),
            // Taken to be absent: a refused transaction returns the record.
            (None, Expect::Vacant) => None,
            // A version is never absent: read the revision to compare.
            (None, Expect::Version(_)) => {
                let current = self.read(&ekey).await?;
                let record = current.as_ref().map(|known| &known.record);
                if !expect.holds_on(record) {
                    return Ok(Outcome::Rejected {
                        current: record.cloned(),
                    });
                }
                current
            }
        };
        for _ in 0..=RACED_WRITES {
            let record = new.stored_on(key, base.as_ref().map(|known| &known.record))?;
            check_record(&record)?;
            let mut writes = vec![requests::put_op(&ekey, value::encode(&record))];
            writes.extend(self.announcement(&record));
            let txn = requests::txn(
                vec![unchanged(&ekey, &base)],
                writes,
                vec![requests::get_op(&ekey)],
            );
            let response = match self.commit(&what, txn).await {
                Ok(response) => response,
                Err(error) => {
                    // The write may have applied: the revision is unknown.
                    self.inner.revisions.forget(&ekey);
                    return Err(error);
                }
            };
            if response.succeeded {
                let revision = match committed_at(&what, &response) {
                    Ok(revision) => revision,
                    Err(error) => {
                        self.inner.revisions.forget(&ekey);
                        return Err(error);
                    }
                };
                self.inner.revisions.remember(
                    &ekey,
                    Known {
                        record: record.clone(),
                        revision,
                    },
                );
                return Ok(Outcome::Applied(record));
            }
            let current = self.current(&ekey, response.responses.first())?;
            let record = current.as_ref().map(|known| &known.record);
            if !expect.holds_on(record) {
                return Ok(Outcome::Rejected {
                    current: record.cloned(),
                });
            }
            // The condition holds on the record etcd returned (released, and
            // this store had not seen it): write on its revision.
            base = current;
        }
        Err(StoreError::unavailable(format!(
            "{what}: the key changed under {} transactions in a row while the condition held; try again",
            RACED_WRITES + 1
        )))
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let ekey = self.inner.layout.key(key);
        let what = format!("delete {ekey}");
        let mut base = match self.guess(&ekey, &expect) {
            Some(known) => Some(known),
            None => self.read(&ekey).await?,
        };
        for _ in 0..=RACED_WRITES {
            let Some(known) = base.take() else {
                return Ok(Outcome::Rejected { current: None });
            };
            if !expect.holds_on(Some(&known.record)) {
                return Ok(Outcome::Rejected {
                    current: Some(known.record),
                });
            }
            let txn = requests::txn(
                vec![requests::written_at(&ekey, known.revision)],
                std::iter::once(requests::delete_op(&ekey))
                    .chain(self.announcement(&LockRecord {
                        released: true,
                        ..known.record.clone()
                    }))
                    .collect(),
                vec![requests::get_op(&ekey)],
            );
            let response = self.commit(&what, txn).await;
            // Deleted, or unknown: nothing is remembered either way.
            self.inner.revisions.forget(&ekey);
            let response = response?;
            if response.succeeded {
                return Ok(Outcome::Applied(known.record));
            }
            base = self.current(&ekey, response.responses.first())?;
        }
        Err(StoreError::unavailable(format!(
            "{what}: the key changed under {} transactions in a row while the condition held; try again",
            RACED_WRITES + 1
        )))
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let (start, end) = self.inner.layout.listing(partition);
        let from = match &cursor {
            None => start.clone(),
            Some(Cursor(after)) => {
                if !after.starts_with(&start) || *after >= end {
                    return Err(StoreError::invalid(format!(
                        "listing cursor {after:?} is not a key of this listing"
                    )));
                }
                // The smallest key after the last one listed.
                format!("{after}\0")
            }
        };
        let limit = limit.max(1);
        let request = requests::range(&from, &end, i64::try_from(limit).unwrap_or(i64::MAX));
        let what = format!("list {start}");
        let connection = self.kv(&what).await?;
        let answer = self.awaited(connection.range(request)).await;
        let response = answer.map_err(|status| self.failed(Call::Read, &what, status))?;
        let mut records = Vec::with_capacity(response.kvs.len());
        let mut last = None;
        for found in &response.kvs {
            let key = std::str::from_utf8(&found.key)
                .map_err(|error| {
                    StoreError::other(format!(
                        "list {start}: a key under the lock prefix is not UTF-8 ({error}); move it out of the prefix"
                    ))
                })?
                .to_owned();
            records.push(self.known(&key, found)?.record);
            last = Some(key);
        }
        // Keys come in byte order, so the last key listed is the cursor.
        let next = if response.more {
            last.map(Cursor)
        } else {
            None
        };
        Ok(Page { records, next })
    }

    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        if writes.len() > MAX_KEYS_AT_ONCE {
            return Err(StoreError::invalid(format!(
                "{} writes in one request; this store takes at most {MAX_KEYS_AT_ONCE}",
                writes.len()
            )));
        }
        let ekeys: Vec<String> = writes
            .iter()
            .map(|write| self.inner.layout.key(&write.key))
            .collect();
        let mut sorted: Vec<&String> = ekeys.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StoreError::invalid(
                "a key written twice in one request: each key once",
            ));
        }
        let mut total = 0;
        for write in &writes {
            let record = write.new.stored_on(&write.key, None)?;
            check_record(&record)?;
            total += record_bytes(&record);
        }
        if total > MAX_BYTES_AT_ONCE {
            return Err(StoreError::invalid(format!(
                "{total} bytes of records in one request; this store takes at most {MAX_BYTES_AT_ONCE}"
            )));
        }
        let what = format!("write {} keys under {}", writes.len(), self.prefix());
        let mut bases: Vec<Base> = writes
            .iter()
            .zip(&ekeys)
            .map(|(write, ekey)| self.guess(ekey, &write.expect))
            .collect();
        // A version is never absent: read the revisions to compare.
        for (index, (write, ekey)) in writes.iter().zip(&ekeys).enumerate() {
            if let (Expect::Version(_), Some(None)) = (&write.expect, bases.get(index)) {
                let current = self.read(ekey).await?;
                let record = current.as_ref().map(|known| &known.record);
                if !write.expect.holds_on(record) {
                    return Ok(ManyOutcome::Rejected {
                        index,
                        current: record.cloned(),
                    });
                }
                if let Some(base) = bases.get_mut(index) {
                    *base = current;
                }
            }
        }
        for _ in 0..=RACED_WRITES {
            let mut records = Vec::with_capacity(writes.len());
            for (write, base) in writes.iter().zip(&bases) {
                let record = write
                    .new
                    .stored_on(&write.key, base.as_ref().map(|k| &k.record))?;
                check_record(&record)?;
                records.push(record);
            }
            let compares: Vec<Compare> = ekeys
                .iter()
                .zip(&bases)
                .map(|(ekey, base)| unchanged(ekey, base))
                .collect();
            let puts: Vec<RequestOp> = ekeys
                .iter()
                .zip(&records)
                .map(|(ekey, record)| requests::put_op(ekey, value::encode(record)))
                .collect();
            let gets: Vec<RequestOp> = ekeys.iter().map(|ekey| requests::get_op(ekey)).collect();
            let txn = requests::txn(compares, puts, gets);
            let response = match self.commit(&what, txn).await {
                Ok(response) => response,
                Err(error) => {
                    for ekey in &ekeys {
                        self.inner.revisions.forget(ekey);
                    }
                    return Err(error);
                }
            };
            if response.succeeded {
                let revision = match committed_at(&what, &response) {
                    Ok(revision) => revision,
                    Err(error) => {
                        for ekey in &ekeys {
                            self.inner.revisions.forget(ekey);
                        }
                        return Err(error);
                    }
                };
                for (ekey, record) in ekeys.iter().zip(&records) {
                    self.inner.revisions.remember(
                        ekey,
                        Known {
                            record: record.clone(),
                            revision,
                        },
                    );
                }
                return Ok(ManyOutcome::Applied(records));
            }
            let replies = &response.responses;
            let mut currents = Vec::with_capacity(writes.len());
            for (index, ekey) in ekeys.iter().enumerate() {
                currents.push(self.current(ekey, replies.get(index))?);
            }
            let refused = writes.iter().zip(&currents).position(|(write, current)| {
                !write.expect.holds_on(current.as_ref().map(|k| &k.record))
            });
            if let Some(index) = refused {
                let current = currents
                    .get(index)
                    .and_then(|current| current.as_ref().map(|known| known.record.clone()));
                return Ok(ManyOutcome::Rejected { index, current });
            }
            // Every condition holds on what etcd returned: write on it.
            bases = currents;
        }
        Err(StoreError::unavailable(format!(
            "{what}: the keys changed under {} transactions in a row while the conditions held; try again",
            RACED_WRITES + 1
        )))
    }

    fn release_feed(&self) -> Option<ReleaseFeed> {
        self.inner.feed.clone()
    }

    fn capabilities(&self) -> Capabilities {
        limits()
            .with_announces_releases(self.inner.feed.is_some())
            .with_fences_after_deletion(lock_core::FencesAfterDeletion::ClockFloor)
            .with_requests(RequestCosts::REVISIONED_KEYS)
            .with_atomic_writes(Some(AtomicWrites::new(MAX_KEYS_AT_ONCE, MAX_BYTES_AT_ONCE)))
    }
}
