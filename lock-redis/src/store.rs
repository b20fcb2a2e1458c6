//! [`RedisStore`]: the [`ConditionalStore`] contract on Redis scripts.
//!
//! Every call is one script ([`scripts`](crate::scripts)), which Redis runs
//! atomically: the condition, the fence and the write are decided on the
//! record as it is when the script runs, and a refused write returns the
//! current record in the same round trip. Reads run a script too, so each
//! record comes with its age on the server's clock (on the node that wrote
//! it; elsewhere its age is unknown: [`record::decode`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use lock_core::{
    AtomicWrites, Capabilities, ConditionalStore, Cursor, DataUpdate, Expect, FenceUpdate,
    KeyedWrite, LockKey, LockRecord, ManyOutcome, NewRecord, Outcome, Page, ReleaseAnnouncer,
    ReleaseFeed, StoreClock, StoreError, WriteTime,
};
use redis::Value;

use crate::builder::ReplicaAcks;
use crate::errors::{Call, classify};
use crate::layout::{Layout, MAX_PARTITION_BYTES, MAX_SORT_BYTES};
use crate::link::{Connector, Link};
use crate::record::{self, array, integer};
use crate::scripts::Scripts;

/// Largest record, measured as the client measures it (key, owner, data).
pub(crate) const MAX_RECORD_BYTES: usize = 400 * 1024;
/// Most keys one `put_many` writes (one script).
pub(crate) const MAX_KEYS_AT_ONCE: usize = 100;
/// Most bytes one `put_many` writes, as records are measured.
pub(crate) const MAX_BYTES_AT_ONCE: usize = 4 * 1024 * 1024;
/// Idle connections kept for writes that wait for replicas.
const MAX_IDLE_WRITERS: usize = 8;
/// The latest expiry time `EXPIREAT` takes (Unix seconds): a later one would
/// fail the script after its first write.
const MAX_EXPIRES_AT: u64 = (i64::MAX / 1000) as u64;

/// Locks in Redis or Valkey: one hash per lock under a prefix.
///
/// Built with [`RedisStore::builder`] or
/// [`RedisStoreBuilder::from_url`](crate::RedisStoreBuilder::from_url); see
/// the [crate docs](crate).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Connector,
    /// The connection requests go on; replaced after one that failed or
    /// timed out ([`RedisStore::connection`]).
    connection: tokio::sync::Mutex<Option<Link>>,
    /// Partitions this store knows are in the registry.
    registered: Mutex<HashSet<String>>,
    /// Idle connections for writes that wait for replicas.
    writers: Mutex<Vec<Link>>,
    /// The last request got no answer: the next opens a new connection.
    suspect: AtomicBool,
    scripts: Scripts,
    layout: Layout,
    url: String,
    replicas: Option<ReplicaAcks>,
    /// With `wait_for_replicas`: this store's writes that applied on the
    /// primary, or may have, without the replicas' acknowledgement (their
    /// RVN, when that was found, and the lease they carried). A record
    /// showing one is not handed to the client until the replicas
    /// acknowledge it ([`RedisStore::trusted`]).
    unconfirmed: Mutex<HashMap<String, (std::time::Instant, std::time::Duration)>>,
    /// Releases announced on the channel, when the store announces them.
    feed: Option<ReleaseFeed>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.url)
            .field("prefix", &self.inner.layout.prefix())
            .finish_non_exhaustive()
    }
}

/// Marks the connection suspect when dropped before its request was
/// answered.
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

impl RedisStore {
    pub(crate) fn from_parts(
        connector: Connector,
        connection: Link,
        layout: Layout,
        url: String,
        replicas: Option<ReplicaAcks>,
        announce: bool,
    ) -> Self {
        let feed = announce.then(|| {
            let client = connector.seed.clone();
            let channel = layout.channel();
            let layout = layout.clone();
            ReleaseFeed::new(move |announcer| {
                tokio::spawn(listen(client, channel, layout, announcer));
            })
        });
        Self {
            inner: Arc::new(Inner {
                connector,
                connection: tokio::sync::Mutex::new(Some(connection)),
                registered: Mutex::new(HashSet::new()),
                writers: Mutex::new(Vec::new()),
                suspect: AtomicBool::new(false),
                scripts: Scripts::new(),
                layout,
                url,
                replicas,
                unconfirmed: Mutex::new(HashMap::new()),
                feed,
            }),
        }
    }

    /// Where the locks are (the URL, its password hidden).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The prefix every lock key is under.
    pub fn prefix(&self) -> &str {
        self.inner.layout.prefix()
    }

    /// The Redis key of `key`'s record (a hash).
    pub fn record_key(&self, key: &LockKey) -> String {
        self.inner.layout.keys(key).record
    }

    /// The channel releases are announced on (`{prefix}:released`); each
    /// message names the lock released (`partition/lock`, escaped as in the
    /// keys).
    pub fn release_channel(&self) -> String {
        self.inner.layout.channel()
    }

    /// Whether the store talks to a Redis Cluster (found when it connected).
    pub fn is_cluster(&self) -> bool {
        self.inner.connector.is_cluster()
    }

    /// The connection to use now: a new one when the last request failed
    /// without an answer or was abandoned. A connection whose packets vanish
    /// (a firewall that forgot it, a partition) would otherwise hang every
    /// request on it until TCP gives up, minutes later; and one the server
    /// closed is dead for good.
    async fn connection(&self) -> Result<Link, StoreError> {
        let mut slot = self.inner.connection.lock().await;
        if self.inner.suspect.swap(false, Ordering::SeqCst) {
            *slot = None;
        }
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        match self.inner.connector.open().await {
            Ok(connection) => {
                *slot = Some(connection.clone());
                Ok(connection)
            }
            Err(error) => Err(error),
        }
    }

    /// Load the scripts into the server's script cache.
    pub(crate) async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut connection = self.connection().await?;
        let scripts = &self.inner.scripts;
        for script in [&scripts.put, &scripts.delete, &scripts.read, &scripts.touch] {
            script
                .load_async(&mut connection)
                .await
                .map_err(|error| classify(Call::Read, "load the scripts", error))?;
        }
        Ok(())
    }

    /// Run `script` with `keys` and `args`: `EVALSHA`, and on `NOSCRIPT`
    /// (the server restarted or flushed its scripts; nothing ran) load it
    /// and run it again. A write waits for replica acknowledgements when the
    /// builder asked for them; `tracked` are the RVNs (and leases) of the
    /// records it writes held, which, applied without those
    /// acknowledgements, are not trusted until they come
    /// ([`RedisStore::trusted`]).
    async fn run(
        &self,
        call: Call,
        what: &str,
        script: &redis::Script,
        keys: &[String],
        args: Vec<Vec<u8>>,
        tracked: &[(String, std::time::Duration)],
    ) -> Result<Value, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        // With replica acknowledgements, a write and its WAIT go on a
        // connection nothing else uses meanwhile: a client blocked in WAIT
        // holds up every later command of its connection, and so would
        // every other lock's heartbeat.
        let waits = match (call, self.inner.replicas) {
            (Call::Write, Some(acks)) => Some(acks),
            _ => None,
        };
        let mut connection = match waits {
            Some(_) => self.writer().await?,
            None => self.connection().await?,
        };
        // Unacknowledged from before it is sent until the replicas
        // acknowledge it or it surely did not apply: a caller that stops
        // waiting half-way (a timeout, a `select!`) leaves it unacknowledged,
        // as it may have applied.
        if waits.is_some() {
            self.unconfirmed(tracked);
        }
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        let answer: Result<Value, redis::RedisError> =
            invocation.invoke_async(&mut connection).await;
        waiting.answered = true;
        let value = match answer {
            Ok(value) => value,
            Err(error) => {
                let error = self.failed(call, what, error);
                // Surely not applied: forget it. Perhaps applied: surely not
                // acknowledged by the replicas, so it stays unacknowledged.
                if !error.is_ambiguous() {
                    self.acknowledged(tracked);
                }
                return Err(error);
            }
        };
        if let Some(acks) = waits {
            // A refused write wrote nothing: nothing to wait for (and nothing
            // that could show).
            if applied(&value) {
                // Applied on the primary only, when this fails: it stays
                // unacknowledged, and the client does not learn it applied
                // from a read of the primary either, or the acknowledgement
                // it asked for would protect the store call and not the lock.
                self.wait_for_replicas(what, &mut connection, acks).await?;
            }
            self.acknowledged(tracked);
            self.give_back(connection);
        }
        Ok(value)
    }

    /// Forget `tracked`: acknowledged by the replicas, or surely not applied.
    fn acknowledged(&self, tracked: &[(String, std::time::Duration)]) {
        if tracked.is_empty() {
            return;
        }
        let mut unconfirmed = self
            .inner
            .unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (rvn, _) in tracked {
            unconfirmed.remove(rvn);
        }
    }

    /// Remember `tracked` as perhaps applied without the replicas'
    /// acknowledgement; forget those whose lease has long passed
    /// (twice over, and the `WAIT`'s timeout: the client no longer trusts a
    /// write that old, whatever a read shows).
    fn unconfirmed(&self, tracked: &[(String, std::time::Duration)]) {
        let wait = self
            .inner
            .replicas
            .map_or_else(Default::default, |acks| acks.timeout);
        let now = std::time::Instant::now();
        let mut unconfirmed = self
            .inner
            .unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        unconfirmed.retain(|_, (at, lease)| {
            now.saturating_duration_since(*at) <= lease.saturating_mul(2).saturating_add(wait)
        });
        for (rvn, lease) in tracked {
            unconfirmed.insert(rvn.clone(), (now, *lease));
        }
    }

    /// `record`, read from the record key `record_key`, as the client may
    /// trust it. With `wait_for_replicas`, a record showing a write of this
    /// store that the replicas did not acknowledge is only handed over once
    /// they have: a script that rewrites the record's RVN unchanged (a write
    /// that changes nothing, but moves this connection's replication offset
    /// past the read) and a `WAIT` on the same connection. Without that, the
    /// client, resolving the ambiguous write by reading the primary, would
    /// find its RVN and hold the lock (or extend its lease) on a write a
    /// failover can lose, and the detached replica, promoted, would hand
    /// the same fence out again. Not acknowledged in time: `Unavailable`
    /// (the client reads again, and its lease runs out meanwhile as in an
    /// outage).
    async fn trusted(
        &self,
        what: &str,
        record_key: &str,
        record: Option<LockRecord>,
    ) -> Result<Option<LockRecord>, StoreError> {
        let (Some(acks), Some(found)) = (self.inner.replicas, &record) else {
            return Ok(record);
        };
        let rvn = found.rvn.as_str().to_owned();
        let pending = self
            .inner
            .unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&rvn);
        if !pending {
            return Ok(record);
        }
        let not_trusted = |detail: String| {
            StoreError::unavailable(format!(
                "{what}: the record shows a write of this store that {} replicas have not acknowledged ({detail}); not trusted until they do (wait_for_replicas)",
                acks.replicas
            ))
        };
        let mut connection = self.writer().await?;
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        let touched: Result<i64, redis::RedisError> = self
            .inner
            .scripts
            .touch
            .key(record_key)
            .arg(&rvn)
            .invoke_async(&mut connection)
            .await;
        waiting.answered = true;
        // It changes nothing: a failure is not ambiguous.
        let touched = touched.map_err(|error| self.failed(Call::Read, what, error))?;
        if touched != 1 {
            // Written again since the read: what was read is stale.
            return Err(not_trusted("the record changed since it was read".into()));
        }
        if let Err(error) = self.wait_for_replicas(what, &mut connection, acks).await {
            return Err(not_trusted(error.message().to_owned()).with_source(error));
        }
        self.give_back(connection);
        self.inner
            .unconfirmed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&rvn);
        Ok(record)
    }

    /// A connection for one write and its `WAIT`: an idle one of the
    /// store's, or a new one.
    async fn writer(&self) -> Result<Link, StoreError> {
        let idle = self
            .inner
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(link) => Ok(link),
            None => self.inner.connector.open().await,
        }
    }

    /// A writer connection whose write and `WAIT` were answered, for the
    /// next write (a few are kept; one that failed is never given back).
    fn give_back(&self, link: Link) {
        let mut idle = self
            .inner
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE_WRITERS {
            idle.push(link);
        }
    }

    /// `WAIT` for the replicas after a write that applied on the primary:
    /// fewer acknowledgements in time make the write ambiguous.
    async fn wait_for_replicas(
        &self,
        what: &str,
        connection: &mut Link,
        acks: ReplicaAcks,
    ) -> Result<(), StoreError> {
        let millis = u64::try_from(acks.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        // WAIT blocks up to its own timeout: the reply may come that much
        // later than a request's.
        let mut waiting_connection = connection.clone().with_response_timeout(
            self.inner
                .connector
                .timeouts
                .request
                .saturating_add(acks.timeout),
        );
        let answer: Result<i64, redis::RedisError> = redis::cmd("WAIT")
            .arg(acks.replicas)
            .arg(millis)
            .query_async(&mut waiting_connection)
            .await;
        waiting.answered = true;
        match answer {
            Ok(count) if count >= i64::from(acks.replicas) => Ok(()),
            Ok(count) => Err(StoreError::ambiguous(format!(
                "{what}: applied on the primary, but {count} of {} replicas acknowledged it within {:?}; a failover now could lose it, so it is not trusted until they acknowledge it",
                acks.replicas, acks.timeout
            ))),
            Err(error) => {
                self.inner.suspect.store(true, Ordering::SeqCst);
                Err(StoreError::ambiguous(format!(
                    "{what}: applied on the primary, but WAIT for replicas failed: {error}"
                ))
                .with_source(error))
            }
        }
    }

    /// `error` classified; one that left the connection in doubt (no
    /// answer, a dropped connection) makes the next request open a new one.
    fn failed(&self, call: Call, what: &str, error: redis::RedisError) -> StoreError {
        if matches!(error.kind(), redis::ErrorKind::Io) || error.is_unrecoverable_error() {
            self.inner.suspect.store(true, Ordering::SeqCst);
        }
        classify(call, what, error)
    }

    /// Put `partition` (escaped) in the registry of partitions, once per
    /// store, before a lock of it may first be written: a listing of every
    /// lock reads the registry, then each partition's index. In a cluster
    /// the registry is in another slot than the lock, so it is a request of
    /// its own; it only ever grows, and says nothing about any lock.
    async fn register(&self, what: &str, partition: &str) -> Result<(), StoreError> {
        let known = self
            .inner
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(partition);
        if known {
            return Ok(());
        }
        let mut connection = self.connection().await?;
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        let added: Result<i64, redis::RedisError> = redis::cmd("ZADD")
            .arg(self.inner.layout.partitions())
            .arg(0)
            .arg(partition)
            .query_async(&mut connection)
            .await;
        waiting.answered = true;
        // The lock's write was not sent: whatever happened here, it is not
        // ambiguous.
        added.map_err(|error| {
            let error = self.failed(Call::Read, what, error);
            StoreError::new(
                error.kind(),
                format!("register the partition: {}", error.message()),
            )
            .with_source(error)
        })?;
        self.inner
            .registered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(partition.to_owned());
        Ok(())
    }

    /// The records of `locks` (lock parts) of the escaped `partition`, read
    /// in one script with the server's time; absent ones left out.
    async fn read_partition(
        &self,
        what: &str,
        partition: &str,
        locks: &[String],
    ) -> Result<Vec<LockRecord>, StoreError> {
        if locks.is_empty() {
            return Ok(Vec::new());
        }
        let layout = &self.inner.layout;
        let mut keys = vec![layout.partition_index(partition)];
        keys.extend(locks.iter().map(|lock| layout.record_of(partition, lock)));
        let args = locks.iter().map(|lock| lock.as_bytes().to_vec()).collect();
        let reply = self
            .run(Call::Read, what, &self.inner.scripts.read, &keys, args, &[])
            .await?;
        let mut items = array(what, reply)?.into_iter();
        let now = integer(what, &items.next().unwrap_or(Value::Nil))?;
        let node = record::text(items.next().unwrap_or(Value::Nil));
        let mut records = Vec::with_capacity(locks.len());
        for fields in items {
            // An expired record is left out (and left the index).
            records.extend(record::decode(what, fields, now, &node)?);
        }
        Ok(records)
    }

    /// Up to `limit` members of the sorted set `key` after `after` (lexical
    /// order), or from the start.
    async fn members_after(
        &self,
        what: &str,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let min = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
        let mut connection = self.connection().await?;
        let mut waiting = Abandoned {
            suspect: &self.inner.suspect,
            answered: false,
        };
        let members: Result<Vec<String>, redis::RedisError> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(&min)
            .arg("+")
            .arg("BYLEX")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut connection)
            .await;
        waiting.answered = true;
        members.map_err(|error| self.failed(Call::Read, what, error))
    }

    /// The channel releases are announced on, or empty when they are not.
    fn channel(&self) -> String {
        if self.inner.feed.is_some() {
            self.inner.layout.channel()
        } else {
            String::new()
        }
    }

    /// The script's arguments for one write.
    fn write_args(&self, key: &LockKey, expect: &Expect, new: &NewRecord, args: &mut Vec<Vec<u8>>) {
        let keys = self.inner.layout.keys(key);
        let (condition, expected) = match expect {
            Expect::Vacant => ("vacant", ""),
            Expect::Version(rvn) => ("version", rvn.as_str()),
        };
        let (data_mode, data): (&str, &[u8]) = match &new.data {
            DataUpdate::Keep => ("keep", b""),
            DataUpdate::Replace(bytes) => ("replace", bytes),
            DataUpdate::Clear => ("clear", b""),
        };
        let text = |value: &str| value.as_bytes().to_vec();
        args.extend([
            text(condition),
            text(expected),
            text(&keys.lock),
            text(&keys.member),
            text(key.partition()),
            text(if key.sort().is_some() { "1" } else { "0" }),
            text(key.sort().unwrap_or_default()),
            text(&new.owner),
            text(new.rvn.as_str()),
            text(&new.lease.as_millis().to_string()),
            text(if new.released { "1" } else { "0" }),
            text(match new.fence {
                FenceUpdate::Next => "next",
                FenceUpdate::Keep => "keep",
            }),
            text(data_mode),
            data.to_vec(),
            text(&new.expires_at.map(|at| at.to_string()).unwrap_or_default()),
        ]);
    }

    /// The checks the client makes too, so a store used on its own refuses
    /// the same input before anything is sent.
    fn check(key: &LockKey, new: &NewRecord) -> Result<usize, StoreError> {
        let limits = limits();
        limits.check_key(key)?;
        if new.expires_at.is_some_and(|at| at > MAX_EXPIRES_AT) {
            return Err(StoreError::invalid(format!(
                "lock {key}: expires_at is past what Redis's EXPIREAT takes ({MAX_EXPIRES_AT} seconds)"
            )));
        }
        let size = key.partition().len()
            + key.sort().map_or(0, str::len)
            + new.owner.len()
            + new.data.bytes().map_or(0, <[u8]>::len);
        limits.check_record_size(key, size)?;
        Ok(size)
    }

    /// Run the write script on `writes`.
    async fn write(
        &self,
        what: &str,
        writes: &[(&LockKey, &Expect, &NewRecord)],
    ) -> Result<Value, StoreError> {
        let mut keys = Vec::with_capacity(writes.len() * 3);
        let mut args = vec![self.channel().into_bytes()];
        // A held record written without the replicas' acknowledgement is not
        // trusted; a released one may be (a release lost in a failover
        // leaves the lock held until its lease runs out, no worse).
        let tracked: Vec<(String, std::time::Duration)> = match self.inner.replicas {
            Some(_) => writes
                .iter()
                .filter(|(_, _, new)| !new.released)
                .map(|(_, _, new)| (new.rvn.as_str().to_owned(), new.lease))
                .collect(),
            None => Vec::new(),
        };
        for (key, expect, new) in writes {
            let lock = self.inner.layout.keys(key);
            if matches!(expect, Expect::Vacant) {
                self.register(what, &lock.partition).await?;
            }
            keys.push(lock.record);
            keys.push(lock.fences);
            keys.push(lock.index);
            self.write_args(key, expect, new, &mut args);
        }
        self.run(
            Call::Write,
            what,
            &self.inner.scripts.put,
            &keys,
            args,
            &tracked,
        )
        .await
    }
}

/// How long the listener waits before subscribing again after its
/// connection failed (waiters poll meanwhile): 0.5–1 s.
fn resubscribe_after_failure() -> std::time::Duration {
    std::time::Duration::from_millis(500 + fastrand::u64(..500))
}

/// How long the listener waits after the server refused the subscription
/// (`NOPERM`): a permission is not granted within a second, and asking
/// every second would fill the server's ACL log. 60–90 s, so a permission
/// granted later still takes effect.
fn resubscribe_after_refusal() -> std::time::Duration {
    std::time::Duration::from_millis(60_000 + fastrand::u64(..30_000))
}

/// Relay the releases published on `channel` to `announcer` until nobody
/// holds the feed: one subscribed connection, opened again shortly after it
/// fails, or after a minute when the server refuses the subscription
/// (waiters poll meanwhile).
async fn listen(
    client: redis::Client,
    channel: String,
    layout: Layout,
    announcer: ReleaseAnnouncer,
) {
    tokio::select! {
        () = relay(&client, &channel, &layout, &announcer) => {}
        // The store is gone: drop the subscribed connection.
        () = announcer.closed() => {}
    }
}

async fn relay(
    client: &redis::Client,
    channel: &str,
    layout: &Layout,
    announcer: &ReleaseAnnouncer,
) {
    use futures_util::StreamExt as _;
    // A refusal is said once, at warn: it lasts until someone grants the
    // permission, and waiters only lose their wake-ups.
    let mut warned = false;
    while !announcer.is_closed() {
        let pause = match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(channel).await {
                Ok(()) => {
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        let Ok(member) = message.get_payload::<String>() else {
                            continue;
                        };
                        if let Some(key) = layout.keys_of_member(&member)
                            && !announcer.announce(key)
                        {
                            return;
                        }
                    }
                    resubscribe_after_failure()
                }
                Err(error) if error.code() == Some("NOPERM") => {
                    if !warned {
                        warned = true;
                        tracing::warn!(
                            %error,
                            "lock-redis may not SUBSCRIBE to {channel}: waiters are not woken by releases and wait for their next poll; grant the store's user +subscribe and &{channel} (docs/redis.md, Permissions). Trying again every minute."
                        );
                    }
                    resubscribe_after_refusal()
                }
                Err(error) => {
                    tracing::debug!(%error, "could not subscribe to {channel}");
                    resubscribe_after_failure()
                }
            },
            Err(error) => {
                tracing::debug!(%error, "could not subscribe to {channel}");
                resubscribe_after_failure()
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// Whether a write script's reply says it applied (`{1, ...}`).
fn applied(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(1))))
}

/// The key and record limits of this store.
fn limits() -> Capabilities {
    Capabilities::default()
        .with_key_limits(MAX_PARTITION_BYTES, MAX_SORT_BYTES)
        .with_max_record_bytes(MAX_RECORD_BYTES)
}

/// A record just written: its age is zero.
fn fresh(record: Option<LockRecord>) -> Option<LockRecord> {
    record.map(|record| LockRecord {
        written: Some(WriteTime::Ago(std::time::Duration::ZERO)),
        ..record
    })
}

/// The written records of the write script's `{1, {record...}, now}`, or
/// the refusal of its `{0, index, record, now}`.
enum Written {
    Applied(Vec<LockRecord>),
    Rejected {
        index: usize,
        current: Option<LockRecord>,
    },
}

fn written(what: &str, reply: Value) -> Result<Written, StoreError> {
    let mut items = array(what, reply)?.into_iter();
    let status = integer(what, &items.next().unwrap_or(Value::Nil))?;
    if status == 1 {
        let records = array(what, items.next().unwrap_or(Value::Nil))?;
        let now = integer(what, &items.next().unwrap_or(Value::Nil))?;
        let node = record::text(items.next().unwrap_or(Value::Nil));
        let mut applied = Vec::with_capacity(records.len());
        for fields in records {
            let record = record::decode(what, fields, now, &node)?;
            applied.extend(fresh(record));
        }
        return Ok(Written::Applied(applied));
    }
    let index = integer(what, &items.next().unwrap_or(Value::Nil))?;
    let fields = items.next().unwrap_or(Value::Nil);
    let now = integer(what, &items.next().unwrap_or(Value::Nil))?;
    let node = record::text(items.next().unwrap_or(Value::Nil));
    Ok(Written::Rejected {
        index: usize::try_from(index).unwrap_or(usize::MAX),
        current: record::decode(what, fields, now, &node)?,
    })
}

#[async_trait]
impl ConditionalStore for RedisStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let lock = self.inner.layout.keys(key);
        let what = format!("read {}", lock.record);
        let keys = [lock.index.clone(), lock.record.clone()];
        let reply = self
            .run(
                Call::Read,
                &what,
                &self.inner.scripts.read,
                &keys,
                vec![lock.lock.into_bytes()],
                &[],
            )
            .await?;
        let mut items = array(&what, reply)?.into_iter();
        let now = integer(&what, &items.next().unwrap_or(Value::Nil))?;
        let node = record::text(items.next().unwrap_or(Value::Nil));
        let record = record::decode(&what, items.next().unwrap_or(Value::Nil), now, &node)?;
        self.trusted(&what, &lock.record, record).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        Self::check(key, &new)?;
        let record_key = self.inner.layout.keys(key).record;
        let what = format!("write {record_key}");
        match written(&what, self.write(&what, &[(key, &expect, &new)]).await?)? {
            Written::Applied(mut records) => match records.pop() {
                Some(record) => Ok(Outcome::Applied(record)),
                None => Err(record::unreadable(&what, "no record written")),
            },
            Written::Rejected { current, .. } => Ok(Outcome::Rejected {
                current: self.trusted(&what, &record_key, current).await?,
            }),
        }
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let lock = self.inner.layout.keys(key);
        let what = format!("delete {}", lock.record);
        let (condition, expected) = match &expect {
            Expect::Vacant => ("vacant", ""),
            Expect::Version(rvn) => ("version", rvn.as_str()),
        };
        let keys = [lock.record.clone(), lock.fences, lock.index];
        let args = vec![
            condition.as_bytes().to_vec(),
            expected.as_bytes().to_vec(),
            lock.member.into_bytes(),
            lock.lock.into_bytes(),
            self.channel().into_bytes(),
        ];
        let reply = self
            .run(
                Call::Write,
                &what,
                &self.inner.scripts.delete,
                &keys,
                args,
                &[],
            )
            .await?;
        let mut items = array(&what, reply)?.into_iter();
        let status = integer(&what, &items.next().unwrap_or(Value::Nil))?;
        let fields = items.next().unwrap_or(Value::Nil);
        let now = integer(&what, &items.next().unwrap_or(Value::Nil))?;
        let node = record::text(items.next().unwrap_or(Value::Nil));
        let record = record::decode(&what, fields, now, &node)?;
        match (status, record) {
            (1, Some(record)) => Ok(Outcome::Applied(record)),
            (_, current) => Ok(Outcome::Rejected {
                current: self.trusted(&what, &lock.record, current).await?,
            }),
        }
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let layout = &self.inner.layout;
        let limit = limit.max(1);
        // The cursor is the last lock listed, as `partition/lock`.
        let after = match &cursor {
            None => None,
            Some(Cursor(after)) => {
                let split = after.split_once('/');
                let valid = layout.keys_of_member(after).is_some()
                    && split.is_some_and(|(escaped, _)| {
                        partition.is_none_or(|partition| Layout::escaped(partition) == escaped)
                    });
                match split {
                    Some((escaped, lock)) if valid => Some((escaped.to_owned(), lock.to_owned())),
                    _ => {
                        return Err(StoreError::invalid(format!(
                            "listing cursor {after:?} is not a lock of this listing"
                        )));
                    }
                }
            }
        };
        let mut records = Vec::new();
        // Partitions in order: the one asked for; or, for every lock, the
        // cursor's partition (it may hold more locks) and those after it in
        // the registry, fetched a batch at a time.
        let mut pending: std::collections::VecDeque<String> = match (partition, &after) {
            (Some(partition), _) => [Layout::escaped(partition)].into(),
            (None, Some((escaped, _))) => [escaped.clone()].into(),
            (None, None) => std::collections::VecDeque::new(),
        };
        let mut registry_after: Option<String> = after.as_ref().map(|(escaped, _)| escaped.clone());
        let mut registry_done = partition.is_some();
        loop {
            if pending.is_empty() && !registry_done {
                let what = format!("list {}", layout.partitions());
                let batch = self
                    .members_after(&what, &layout.partitions(), registry_after.as_deref(), 100)
                    .await?;
                registry_done = batch.len() < 100;
                registry_after = batch.last().cloned().or(registry_after);
                pending.extend(batch);
            }
            let Some(escaped) = pending.pop_front() else {
                return Ok(Page {
                    records,
                    next: None,
                });
            };
            let what = format!("list {}", layout.partition_index(&escaped));
            let from = after
                .as_ref()
                .filter(|(at, _)| *at == escaped)
                .map(|(_, lock)| lock.as_str());
            let wanted = limit - records.len();
            let locks = self
                .members_after(&what, &layout.partition_index(&escaped), from, wanted)
                .await?;
            records.extend(self.read_partition(&what, &escaped, &locks).await?);
            if locks.len() >= wanted {
                let next = locks.last().map(|lock| Cursor(format!("{escaped}/{lock}")));
                return Ok(Page { records, next });
            }
        }
    }

    async fn put_many(&self, writes: Vec<KeyedWrite>) -> Result<ManyOutcome, StoreError> {
        if self.is_cluster() {
            return Err(StoreError::invalid(
                "a Redis Cluster cannot write keys of several slots in one script: this store takes them one by one",
            ));
        }
        if writes.len() > MAX_KEYS_AT_ONCE {
            return Err(StoreError::invalid(format!(
                "{} writes in one request; this store takes at most {MAX_KEYS_AT_ONCE}",
                writes.len()
            )));
        }
        let mut sorted: Vec<&LockKey> = writes.iter().map(|write| &write.key).collect();
        sorted.sort();
        if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(StoreError::invalid(
                "a key written twice in one request: each key once",
            ));
        }
        let mut total = 0;
        for write in &writes {
            total += Self::check(&write.key, &write.new)?;
        }
        if total > MAX_BYTES_AT_ONCE {
            return Err(StoreError::invalid(format!(
                "{total} bytes of records in one request; this store takes at most {MAX_BYTES_AT_ONCE}"
            )));
        }
        let what = format!("write {} keys under {}", writes.len(), self.prefix());
        let batch: Vec<(&LockKey, &Expect, &NewRecord)> = writes
            .iter()
            .map(|write| (&write.key, &write.expect, &write.new))
            .collect();
        match written(&what, self.write(&what, &batch).await?)? {
            Written::Applied(records) if records.len() == writes.len() => {
                Ok(ManyOutcome::Applied(records))
            }
            Written::Applied(_) => Err(record::unreadable(&what, "not every record written")),
            Written::Rejected { index, current } => {
                let current = match writes.get(index) {
                    Some(write) => {
                        let record_key = self.inner.layout.keys(&write.key).record;
                        self.trusted(&what, &record_key, current).await?
                    }
                    None => current,
                };
                Ok(ManyOutcome::Rejected { index, current })
            }
        }
    }

    fn release_feed(&self) -> Option<ReleaseFeed> {
        self.inner.feed.clone()
    }

    fn capabilities(&self) -> Capabilities {
        // Keys of several partitions are in several slots of a cluster.
        let atomic =
            (!self.is_cluster()).then(|| AtomicWrites::new(MAX_KEYS_AT_ONCE, MAX_BYTES_AT_ONCE));
        limits()
            .with_announces_releases(self.inner.feed.is_some())
            .with_clock(StoreClock::Age)
            // Each lock's fence floor outlives its record, whatever removed
            // it: an expiry, a delete, a DEL by hand.
            .with_fences_after_deletion(lock_core::FencesAfterDeletion::Remembered)
            .with_atomic_writes(atomic)
    }
}
