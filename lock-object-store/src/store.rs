//! [`BucketStore`]: the [`ConditionalStore`] contract on an object store's
//! conditional PUTs.
//!
//! * `get` is one GET; the record and the object's version (ETag, version id)
//!   are remembered ([`Versions`]).
//! * `put` on a version this store saw is one PUT with `If-Match` on that
//!   object version; on a key known to be absent, one PUT with
//!   `If-None-Match: *`. Otherwise it reads first (one GET), decides the
//!   condition on the record read, and writes on that object version. The
//!   fence is the base record's + 1, computed here: the conditional PUT only
//!   applies on exactly that object, so the step is atomic.
//! * A PUT whose condition failed (412, 409 `ConditionalRequestConflict`, or
//!   a 404 for `If-Match` on a deleted object) is followed by one GET. The
//!   current record is returned as the rejection, or, when it carries the RVN
//!   this call wrote (a retry inside the HTTP client that applied), as the
//!   write applied; when the condition holds on the record read (a released
//!   key written by someone meanwhile and released again), the PUT is made
//!   again on its version.

use std::num::NonZeroUsize;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt as _;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, Expect, LockKey, LockRecord, NewRecord, Outcome, Page,
    RequestCosts, StoreClock, StoreError, WriteTime,
};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::body;
use crate::errors::{Call, classify};
use crate::layout::{Layout, MAX_PARTITION_BYTES, MAX_SORT_BYTES};
use crate::versions::{Known, Versions};

/// Largest record, measured as the client measures it (key, owner, data).
pub(crate) const MAX_RECORD_BYTES: usize = 1024 * 1024;

/// How many times one `put` writes again when the condition held on the
/// record it read but the object changed before its write: other writers
/// releasing and re-acquiring between one GET and one PUT, every time.
const RACED_WRITES: usize = 4;

/// Keys whose object versions are remembered, by default.
pub(crate) const DEFAULT_REMEMBERED: usize = 10_000;

/// Locks in an object store: one object per key under a prefix.
///
/// Built with [`BucketStore::builder`]; see the [crate docs](crate).
#[derive(Clone)]
pub struct BucketStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub objects: Arc<dyn ObjectStore>,
    pub layout: Layout,
    pub versions: Versions,
    /// Where the locks are, for messages: `s3://bucket/prefix`.
    pub url: String,
    /// Every request is sent once (the builder's HTTP clients never retry).
    /// A store of the caller's own may have re-sent a PUT that applied, so
    /// there every failed write is ambiguous.
    pub sends_once: bool,
    /// Every write gets a version no earlier write had (Azure's ETags,
    /// GCS's generations, `InMemory`), unlike S3's ETag, the body's MD5:
    /// fenced objects need no write tag.
    pub unique_versions: bool,
}

impl std::fmt::Debug for BucketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketStore")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// The record and object version a write is made on: `None` when the key
/// has no object.
type Base = Option<Known>;

/// What a `put` decided before writing.
enum Plan {
    /// Write on this base.
    Write(Base),
    /// The condition does not hold: reject with the current record.
    Reject(Option<LockRecord>),
}

impl BucketStore {
    pub(crate) fn from_parts(
        objects: Arc<dyn ObjectStore>,
        layout: Layout,
        url: String,
        remembered: NonZeroUsize,
        sends_once: bool,
        unique_versions: bool,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                objects,
                layout,
                versions: Versions::new(remembered),
                url,
                sends_once,
                unique_versions,
            }),
        }
    }

    /// `error`, met while writing: as it is where every request was sent once;
    /// ambiguous where a retry inside the caller's store may have applied an
    /// earlier attempt.
    fn write_error(&self, error: StoreError) -> StoreError {
        if self.inner.sends_once || error.is_ambiguous() {
            return error;
        }
        let message = format!(
            "{} (the object store may retry requests, so an earlier attempt may have applied)",
            error.message()
        );
        StoreError::ambiguous(message).with_source(error)
    }

    /// Where the locks are (`s3://bucket/prefix`, or what the builder was told).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The prefix every lock object is under.
    pub fn prefix(&self) -> &Path {
        self.inner.layout.prefix()
    }

    /// The object that holds `key`'s record.
    pub fn object_path(&self, key: &LockKey) -> Path {
        self.inner.layout.path(key)
    }

    /// The object store underneath.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.objects
    }

    /// Read `path`: the record and its object version, remembered.
    async fn read(&self, path: &Path) -> Result<Base, StoreError> {
        let inner = &self.inner;
        let result = match inner.objects.get_opts(path, GetOptions::default()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => {
                inner.versions.forget(path);
                return Ok(None);
            }
            Err(error) => return Err(classify(Call::Read, &format!("read {path}"), error)),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let last_modified = result.meta.last_modified;
        let bytes = result
            .bytes()
            .await
            .map_err(|error| classify(Call::Read, &format!("read {path}"), error))?;
        let mut record = body::decode(path.as_ref(), &bytes)?;
        // The service's time of the write: after the writer sent it, on the
        // service's clock, to the second (S3 and Azure send `Last-Modified`
        // in whole seconds, truncated): one second more is never earlier.
        record.written = std::time::SystemTime::from(last_modified)
            .checked_add(LAST_MODIFIED_GRANULARITY)
            .map(WriteTime::At);
        if inner.layout.path(&record.key) != *path {
            return Err(StoreError::other(format!(
                "the object {path} holds the record of lock {}, which belongs elsewhere; move it out of the lock prefix",
                record.key
            )));
        }
        let known = Known { record, version };
        inner.versions.remember(path, known.clone());
        Ok(Some(known))
    }

    /// Decide `expect` on what is known of `path`, reading it when the guess
    /// cannot decide.
    async fn plan(
        &self,
        path: &Path,
        expect: &Expect,
        fresh: Option<Base>,
    ) -> Result<Plan, StoreError> {
        let guess = match fresh {
            Some(base) => Some(base),
            None => self.inner.versions.get(path).map(Some),
        };
        // A remembered version decides only when the write on it would apply:
        // a held record may have been released since, so "held" is read again.
        if let Some(Some(known)) = &guess
            && expect.holds_on(Some(&known.record))
        {
            return Ok(Plan::Write(Some(known.clone())));
        }
        if let Some(None) = guess {
            // Known absent (read just now): a create decides.
            return Ok(if expect.holds_on(None) {
                Plan::Write(None)
            } else {
                Plan::Reject(None)
            });
        }
        let base = self.read(path).await?;
        let record = base.as_ref().map(|known| &known.record);
        Ok(if expect.holds_on(record) {
            Plan::Write(base)
        } else {
            Plan::Reject(record.cloned())
        })
    }
}

/// The checks the client makes too, so a store used on its own refuses the
/// same input before anything is sent.
fn check_record(record: &LockRecord) -> Result<(), StoreError> {
    let key = &record.key;
    let limits = limits();
    limits.check_key(key)?;
    let size = key.partition().len()
        + key.sort().map_or(0, str::len)
        + record.owner.len()
        + record.data.as_ref().map_or(0, Vec::len);
    Ok(limits.check_record_size(key, size)?)
}

/// The key and record limits of an object store's lock objects.
fn limits() -> Capabilities {
    Capabilities::default()
        .with_key_limits(MAX_PARTITION_BYTES, MAX_SORT_BYTES)
        .with_max_record_bytes(MAX_RECORD_BYTES)
}

/// Whether `error` says the PUT's condition failed: nothing was written.
/// `updating`: the PUT was conditional on an object version, where a 404
/// means the object is gone; for a create, a 404 means the bucket is.
pub(crate) fn condition_failed(error: &object_store::Error, updating: bool) -> bool {
    match error {
        object_store::Error::Precondition { .. }
        | object_store::Error::AlreadyExists { .. }
        | object_store::Error::NotModified { .. } => true,
        object_store::Error::NotFound { .. } => updating,
        _ => false,
    }
}

#[async_trait]
impl ConditionalStore for BucketStore {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let path = self.inner.layout.path(key);
        Ok(self.read(&path).await?.map(|known| known.record))
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let path = self.inner.layout.path(key);
        // Checked on a record with no data kept, then on the one written:
        // bad input is refused before any request.
        check_record(&new.stored_on(key, None)?)?;
        let mut fresh: Option<Base> = None;
        for _ in 0..=RACED_WRITES {
            let base = match self.plan(&path, &expect, fresh.take()).await? {
                Plan::Write(base) => base,
                Plan::Reject(current) => return Ok(Outcome::Rejected { current }),
            };
            let record = new.stored_on(key, base.as_ref().map(|known| &known.record))?;
            check_record(&record)?;
            let updating = base.is_some();
            let mode = match &base {
                None => PutMode::Create,
                Some(known) => PutMode::Update(known.version.clone()),
            };
            let payload = PutPayload::from(body::encode(&record));
            let written = self
                .inner
                .objects
                .put_opts(&path, payload, PutOptions::from(mode))
                .await;
            match written {
                Ok(result) => {
                    let version = UpdateVersion {
                        e_tag: result.e_tag,
                        version: result.version,
                    };
                    self.inner.versions.remember(
                        &path,
                        Known {
                            record: record.clone(),
                            version,
                        },
                    );
                    return Ok(Outcome::Applied(record));
                }
                Err(error) if condition_failed(&error, updating) => {
                    tracing::debug!(%path, %error, "conditional write refused; reading the current record");
                    let current = self
                        .read(&path)
                        .await
                        .map_err(|error| self.write_error(error))?;
                    match current {
                        // The HTTP client sent the write again after a reply
                        // it lost, and the first one had applied.
                        Some(known) if known.record.rvn == new.rvn => {
                            return Ok(Outcome::Applied(known.record));
                        }
                        current => {
                            let record = current.as_ref().map(|known| &known.record);
                            if !expect.holds_on(record) {
                                return Ok(Outcome::Rejected {
                                    current: record.cloned(),
                                });
                            }
                            // The condition still holds on a newer object:
                            // write again on it.
                            fresh = Some(current);
                        }
                    }
                }
                Err(error) => {
                    // The write may have applied: the version is unknown.
                    self.inner.versions.forget(&path);
                    return Err(self.write_error(classify(
                        Call::Write,
                        &format!("write {path}"),
                        error,
                    )));
                }
            }
        }
        Err(self.write_error(StoreError::unavailable(format!(
            "write {path}: the object changed under {} writes in a row while the condition held; try again",
            RACED_WRITES + 1
        ))))
    }

    async fn delete(&self, key: &LockKey, _expect: Expect) -> Result<Outcome, StoreError> {
        Err(StoreError::invalid(format!(
            "delete {key}: object stores cannot delete conditionally through object_store, and an \
             unconditional delete could remove the next holder's record; release keeps the record, marked released"
        )))
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let layout = &self.inner.layout;
        if partition.is_some_and(str::is_empty) {
            // No lock has an empty partition; its escaped folder would be
            // the whole prefix.
            return Ok(Page::default());
        }
        let prefix = layout.listing(partition);
        let listing = match &cursor {
            None => self.inner.objects.list(Some(&prefix)),
            Some(Cursor(after)) => {
                let after = Path::parse(after).map_err(|e| {
                    StoreError::invalid(format!(
                        "listing cursor {after:?} is not an object path: {e}"
                    ))
                })?;
                self.inner.objects.list_with_offset(Some(&prefix), &after)
            }
        };
        // Listing order is the object path's, lexicographic on every service
        // object_store speaks to, so the last path listed is the cursor.
        let mut listing = listing.filter(|meta| {
            std::future::ready(
                meta.as_ref()
                    .map_or(true, |meta| layout.is_lock(&meta.location)),
            )
        });
        let limit = limit.max(1);
        let mut records = Vec::new();
        let mut last = None;
        while let Some(meta) = listing.next().await {
            let meta =
                meta.map_err(|error| classify(Call::Read, &format!("list {prefix}"), error))?;
            // An object removed between the listing and its read is skipped.
            if let Some(known) = self.read(&meta.location).await? {
                records.push(known.record);
            }
            last = Some(meta.location);
            if records.len() >= limit {
                break;
            }
        }
        let next = if records.len() >= limit {
            last.map(|path| Cursor(path.to_string()))
        } else {
            None
        };
        Ok(Page { records, next })
    }

    fn capabilities(&self) -> Capabilities {
        limits()
            .with_conditional_delete(false)
            // Records are deleted behind the store's back only (a
            // lifecycle rule, by hand): new ones start at the clock's floor.
            .with_fences_after_deletion(lock_core::FencesAfterDeletion::ClockFloor)
            .with_requests(RequestCosts::VERSIONED_OBJECTS)
            .with_clock(StoreClock::Wall {
                granularity: LAST_MODIFIED_GRANULARITY,
            })
    }
}

/// How coarse an object's `Last-Modified` is: HTTP dates are whole seconds.
const LAST_MODIFIED_GRANULARITY: std::time::Duration = std::time::Duration::from_secs(1);
