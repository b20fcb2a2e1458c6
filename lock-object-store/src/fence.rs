//! Fences checked at your own objects: a write of an object in a bucket
//! that a lock protects, refused when a newer holder of the lock wrote it,
//! so that a holder whose lease ran out (paused, partitioned) cannot
//! overwrite the next holder's object.
//!
//! Each object written this way carries, in its metadata, the fence that
//! wrote it and the key of that fence's lock. [`FencedObjects::put`] reads
//! the object's metadata (a `HEAD`), decides with the rule of
//! [`lock_core::fencing`] (no fence yet, or the same lock's at least as
//! high), and writes on the version it read (`If-Match` on the ETag, or
//! GCS's generation; `If-None-Match: *` for an object that does not
//! exist), so nothing can slip in between: an object changed since the
//! read makes the write fail, and the put reads and decides again. Two
//! requests per write; see the repository's `docs/fencing.md` for what it
//! costs against a plain `PUT`.
//!
//! # What the write relies on: a version no earlier write had
//!
//! The condition is only as good as the version it names. Azure's ETag and
//! GCS's generation change on every write, but S3's ETag (and MinIO's,
//! R2's, moto's) is the MD5 of the body: a newer holder that writes the
//! same bytes as an older one gives the object back an ETag a paused,
//! stale holder may have read, and that holder's `If-Match` would pass. So
//! by default every fenced write ends the object's body with a *write tag*
//! (a fresh UUID, 36 bytes) that its metadata names
//! ([`WRITE_TAG_METADATA`]): no two fenced writes have the same bytes, and
//! so no two have the same ETag. [`FencedObjects::get`] takes the tag off;
//! a reader of the raw object sees it at the end. On a store whose version
//! changes on every write, [`FencedObjects::versions_change_on_every_write`]
//! writes the bytes as given (a [`BucketStore`](crate::BucketStore) built
//! from an `az://`, `gs://` or `memory://` URL does so itself).
//!
//! ```
//! use std::sync::Arc;
//! use lock_core::{Fence, FenceRefused, LockKey};
//! use lock_object_store::{FencedObjects, ObjectFenceError};
//! use object_store::memory::InMemory;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let objects = FencedObjects::new(Arc::new(InMemory::new()));
//! let key = LockKey::new("reports");
//! objects.put("reports/today.csv", "fresh", &key, Fence(8)).await?;
//! // A holder paused past its lease comes back with fence 7:
//! let stale = objects.put("reports/today.csv", "stale", &key, Fence(7)).await;
//! assert!(matches!(stale, Err(ObjectFenceError::Refused(FenceRefused::Stale { .. }))));
//! let (bytes, fence) = objects.get("reports/today.csv").await?.unwrap();
//! assert_eq!((&bytes[..], fence), (&b"fresh"[..], Some(Fence(8))));
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use lock_core::fencing::{admit, check_input};
use lock_core::{Fence, FenceRefused, LockKey};
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetOptions, ObjectStore, PutMode, PutOptions,
    PutPayload, PutResult, UpdateVersion,
};
use percent_encoding::{NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::store::condition_failed;

/// The metadata entry an object's fence is kept in (Azure takes only
/// identifiers: letters, digits and `_`).
pub const FENCE_METADATA: &str = "lock_fence";
/// The metadata entry the key of the fence's lock is kept in
/// (percent-encoded: metadata travels in HTTP headers).
pub const FENCE_LOCK_METADATA: &str = "lock_fence_lock";
/// The metadata entry naming the write tag at the end of the object's body
/// (see [what the write relies on](self#what-the-write-relies-on-a-version-no-earlier-write-had)).
pub const WRITE_TAG_METADATA: &str = "lock_fence_tag";
/// The longest object name taken, in bytes (S3's and GCS's limit).
pub const MAX_OBJECT_NAME_BYTES: usize = 1_024;

/// How many times a put reads and decides again when the object changed
/// between its read and its write.
const RACED_WRITES: usize = 8;

/// Why a fenced write or read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectFenceError {
    /// The fence was refused (a newer holder wrote the object, or another
    /// lock fences it), or refused before anything was sent.
    #[error(transparent)]
    Refused(#[from] FenceRefused),
    /// The object store failed the request.
    #[error("{action} {path} failed")]
    Store {
        /// What was done: `read` or `write`.
        action: &'static str,
        /// The object.
        path: String,
        /// The object store's error.
        #[source]
        source: object_store::Error,
    },
    /// The object changed between each read and write, every time: other
    /// writers keep writing it; try again.
    #[error("write {path}: the object changed under {tries} writes in a row; try again")]
    Contended {
        /// The object.
        path: String,
        /// Writes tried.
        tries: usize,
    },
}

/// Objects written with a lock's fence: see the [module docs](self).
#[derive(Clone, Debug)]
pub struct FencedObjects {
    objects: Arc<dyn ObjectStore>,
    /// Objects under this prefix are locks' records, never written here.
    locks: Option<Path>,
    /// Every write of the store gets a version no earlier write had, so
    /// bodies need no write tag.
    unique_versions: bool,
}

/// What the object shows of the fence that wrote it.
struct Current {
    /// The lock's key and fence, if a fenced write wrote it.
    fenced: Option<(String, Fence)>,
    version: UpdateVersion,
}

impl FencedObjects {
    /// Fenced objects in `objects` (any object store with conditional
    /// writes: S3, GCS, Azure, in memory), each body ending with a write
    /// tag (see [what the write relies on](self#what-the-write-relies-on-a-version-no-earlier-write-had)).
    pub fn new(objects: Arc<dyn ObjectStore>) -> Self {
        Self {
            objects,
            locks: None,
            unique_versions: false,
        }
    }

    /// The same, refusing paths under `prefix` (where a bucket store keeps
    /// its locks).
    pub(crate) fn beside_locks(objects: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        Self {
            locks: Some(prefix),
            ..Self::new(objects)
        }
    }

    /// Write the bytes as given, with no write tag: only for a store whose
    /// version (the ETag `If-Match` compares, or GCS's generation) changes
    /// on every write, also a write of the same bytes: Azure Blob Storage,
    /// Google Cloud Storage, object_store's `InMemory`. **Not S3** nor an
    /// S3-compatible service: there a stale holder's write would be
    /// admitted after a newer holder wrote the bytes it had read.
    pub fn versions_change_on_every_write(mut self, unique: bool) -> Self {
        self.unique_versions = unique;
        self
    }

    /// Whether each write's body ends with a write tag (see
    /// [`versions_change_on_every_write`](Self::versions_change_on_every_write)).
    pub fn tags_writes(&self) -> bool {
        !self.unique_versions
    }

    /// Write `payload` to the object `path` with fence `fence` of the lock
    /// `lock` (a guard's [`key`](lock_core::LockView::key) and
    /// [`fence`](lock_core::LockView::fence)): written when no fence wrote
    /// the object yet (new, or written before fencing) or the same lock's
    /// fence wrote it and was not higher; refused otherwise with nothing
    /// written. Bad input (fence 0, an empty or invalid path, one longer
    /// than [`MAX_OBJECT_NAME_BYTES`], a path among the locks) is refused
    /// before any request.
    pub async fn put(
        &self,
        path: &str,
        payload: impl Into<PutPayload>,
        lock: &LockKey,
        fence: Fence,
    ) -> Result<PutResult, ObjectFenceError> {
        let lock = lock.to_string();
        let location = self.check(path, &lock, fence)?;
        let (payload, tag) = if self.unique_versions {
            (payload.into(), None)
        } else {
            // One tag for every try of this put: the bytes are this write's.
            let tag = lock_core::Rvn::fresh();
            let tagged = payload
                .into()
                .iter()
                .cloned()
                .chain(std::iter::once(bytes::Bytes::copy_from_slice(
                    tag.as_str().as_bytes(),
                )))
                .collect::<PutPayload>();
            (tagged, Some(tag))
        };
        for _ in 0..RACED_WRITES {
            let current = self.head(&location).await?;
            let fenced = current.as_ref().and_then(|current| current.fenced.as_ref());
            admit(
                path,
                fenced.map(|(lock, fence)| (lock.as_str(), *fence)),
                &lock,
                fence,
            )?;
            let updating = current.is_some();
            let mode = match current {
                None => PutMode::Create,
                Some(current) => PutMode::Update(current.version),
            };
            let mut attributes = Attributes::new();
            attributes.insert(
                Attribute::Metadata(FENCE_METADATA.into()),
                AttributeValue::from(fence.get().to_string()),
            );
            attributes.insert(
                Attribute::Metadata(FENCE_LOCK_METADATA.into()),
                AttributeValue::from(utf8_percent_encode(&lock, NON_ALPHANUMERIC).to_string()),
            );
            if let Some(tag) = &tag {
                attributes.insert(
                    Attribute::Metadata(WRITE_TAG_METADATA.into()),
                    AttributeValue::from(tag.as_str().to_owned()),
                );
            }
            let options = PutOptions {
                mode,
                attributes,
                ..PutOptions::default()
            };
            match self
                .objects
                .put_opts(&location, payload.clone(), options)
                .await
            {
                Ok(result) => return Ok(result),
                // Written (or deleted) since the read: read and decide again.
                Err(error) if condition_failed(&error, updating) => continue,
                Err(source) => {
                    return Err(ObjectFenceError::Store {
                        action: "write",
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        }
        Err(ObjectFenceError::Contended {
            path: path.to_owned(),
            tries: RACED_WRITES,
        })
    }

    /// The object `path` and the fence that wrote it (`None` for an object
    /// no fenced write wrote), or `None` if there is no such object. The
    /// bytes are those the write was given: a write tag is taken off.
    pub async fn get(
        &self,
        path: &str,
    ) -> Result<Option<(bytes::Bytes, Option<Fence>)>, ObjectFenceError> {
        let location = parse(path)?;
        let result = match self
            .objects
            .get_opts(&location, GetOptions::default())
            .await
        {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(read_error(path, source)),
        };
        let fence = fenced(&result.attributes).map(|(_, fence)| fence);
        let tag = result
            .attributes
            .get(&Attribute::Metadata(WRITE_TAG_METADATA.into()))
            .map(|tag| tag.as_ref().to_owned());
        let bytes = result
            .bytes()
            .await
            .map_err(|source| read_error(path, source))?;
        let bytes = match tag {
            Some(tag) if bytes.ends_with(tag.as_bytes()) => bytes.slice(..bytes.len() - tag.len()),
            _ => bytes,
        };
        Ok(Some((bytes, fence)))
    }

    /// The checks made before any request; the object's path.
    fn check(&self, path: &str, lock: &str, fence: Fence) -> Result<Path, FenceRefused> {
        check_input(path, lock, fence)?;
        if path.len() > MAX_OBJECT_NAME_BYTES {
            return Err(FenceRefused::InvalidInput {
                reason: format!(
                    "object name of {} bytes: at most {MAX_OBJECT_NAME_BYTES}",
                    path.len()
                ),
            });
        }
        let location = parse(path)?;
        if let Some(locks) = &self.locks
            && location.prefix_matches(locks)
        {
            return Err(FenceRefused::InvalidInput {
                reason: format!(
                    "object {path} is under the lock prefix {locks}, where the locks' records are: write your objects elsewhere"
                ),
            });
        }
        Ok(location)
    }

    /// The object's fence and version, or `None` if it does not exist.
    async fn head(&self, location: &Path) -> Result<Option<Current>, ObjectFenceError> {
        let options = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match self.objects.get_opts(location, options).await {
            Ok(result) => Ok(Some(Current {
                fenced: fenced(&result.attributes),
                version: UpdateVersion {
                    e_tag: result.meta.e_tag.clone(),
                    version: result.meta.version.clone(),
                },
            })),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(read_error(location.as_ref(), source)),
        }
    }
}

/// `path` as an object path, or what is wrong with it.
fn parse(path: &str) -> Result<Path, FenceRefused> {
    Path::parse(path).map_err(|error| FenceRefused::InvalidInput {
        reason: format!("object name {path:?} is not a valid object path: {error}"),
    })
}

fn read_error(path: &str, source: object_store::Error) -> ObjectFenceError {
    ObjectFenceError::Store {
        action: "read",
        path: path.to_owned(),
        source,
    }
}

/// The lock key and fence an object's metadata names, if both are there.
fn fenced(attributes: &Attributes) -> Option<(String, Fence)> {
    let metadata = |name: &'static str| attributes.get(&Attribute::Metadata(name.into()));
    let fence = metadata(FENCE_METADATA)?.as_ref().parse().ok()?;
    let lock = percent_decode_str(metadata(FENCE_LOCK_METADATA)?.as_ref())
        .decode_utf8()
        .ok()?
        .into_owned();
    Some((lock, Fence(fence)))
}

impl crate::BucketStore {
    /// Fenced objects in this store's bucket, outside its lock prefix (see
    /// [`FencedObjects`]): paths are from the bucket's root. Bodies carry a
    /// write tag unless the store was built from a URL of a service whose
    /// versions change on every write (`az://`, `gs://`, `memory://`).
    pub fn fenced_objects(&self) -> FencedObjects {
        FencedObjects::beside_locks(self.object_store().clone(), self.prefix().clone())
            .versions_change_on_every_write(self.inner.unique_versions)
    }
}
