//! The interleaving that admits a stale fenced write where an object's
//! version is a hash of its bytes: `Holding`, an `ObjectStore` wrapper that
//! holds one fenced PUT back until the test lets it go, and `ContentHashed`,
//! an in-memory store whose ETags are a hash of the body, as S3's are
//! (MD5 of a single-part PUT), so the interleaving runs without a server.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use lock_core::{Fence, FenceRefused, LockKey};
use lock_object_store::fence::FENCE_METADATA;
use lock_object_store::object_store::memory::InMemory;
use lock_object_store::object_store::path::Path;
use lock_object_store::object_store::{
    self, Attribute, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};
use lock_object_store::{FencedObjects, ObjectFenceError};
use tokio::sync::oneshot;

/// A PUT held back: `arrived` fires when it reaches the wrapper, and it goes
/// on to the store when `release` is sent.
struct Held {
    fence: String,
    arrived: Option<oneshot::Sender<()>>,
    release: Option<oneshot::Receiver<()>>,
}

/// An `ObjectStore` that holds back the next PUT carrying a given fence.
pub struct Holding {
    inner: Arc<dyn ObjectStore>,
    held: Mutex<Option<Held>>,
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Holding({})", self.inner)
    }
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Holding({})", self.inner)
    }
}

impl Holding {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            held: Mutex::new(None),
        })
    }

    /// Hold the next PUT written with `fence`: the returned receiver fires
    /// when it arrives, and the sender lets it go on.
    pub fn hold_next_put_of(&self, fence: Fence) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (arrived, on_arrival) = oneshot::channel();
        let (release, on_release) = oneshot::channel();
        *self.held.lock().unwrap() = Some(Held {
            fence: fence.get().to_string(),
            arrived: Some(arrived),
            release: Some(on_release),
        });
        (on_arrival, release)
    }
}

#[async_trait]
impl ObjectStore for Holding {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fence = opts
            .attributes
            .get(&Attribute::Metadata(FENCE_METADATA.into()))
            .map(|value| value.as_ref().to_owned());
        let release = {
            let mut held = self.held.lock().unwrap();
            match held.as_mut() {
                Some(hold) if fence.as_deref() == Some(hold.fence.as_str()) => {
                    if let Some(arrived) = hold.arrived.take() {
                        let _ = arrived.send(());
                    }
                    let release = hold.release.take();
                    *held = None;
                    release
                }
                _ => None,
            }
        };
        if let Some(release) = release {
            let _ = release.await;
        }
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// An in-memory `ObjectStore` whose ETag is a hash of the object's bytes
/// (as S3's, MinIO's and R2's are for a single-part PUT), with `If-Match`
/// and `If-None-Match: *` decided on it.
#[derive(Debug, Default)]
pub struct ContentHashed {
    inner: InMemory,
    /// One request at a time, so a condition and its write are one step.
    turn: tokio::sync::Mutex<()>,
}

impl fmt::Display for ContentHashed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHashed")
    }
}

fn content_tag(bytes: &[u8]) -> String {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("\"{:016x}\"", hasher.finish())
}

impl ContentHashed {
    /// The object's bytes and full result, or `None` when absent.
    async fn read(
        &self,
        location: &Path,
    ) -> object_store::Result<Option<(bytes::Bytes, GetResult)>> {
        match self.inner.get_opts(location, GetOptions::default()).await {
            Ok(result) => {
                let meta = result.meta.clone();
                let range = result.range.clone();
                let attributes = result.attributes.clone();
                let bytes = result.bytes().await?;
                let again = GetResult {
                    payload: GetResultPayload::Stream(
                        futures_util::stream::once(futures_util::future::ready(Ok(bytes.clone())))
                            .boxed(),
                    ),
                    meta: ObjectMeta {
                        e_tag: Some(content_tag(&bytes)),
                        version: None,
                        ..meta
                    },
                    range,
                    attributes,
                    extensions: Default::default(),
                };
                Ok(Some((bytes, again)))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }
}

#[async_trait]
impl ObjectStore for ContentHashed {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let _turn = self.turn.lock().await;
        let current = self.read(location).await?;
        let precondition = |reason: &str| object_store::Error::Precondition {
            path: location.to_string(),
            source: reason.to_owned().into(),
        };
        match (&opts.mode, &current) {
            (PutMode::Create, Some(_)) => {
                return Err(object_store::Error::AlreadyExists {
                    path: location.to_string(),
                    source: "the object exists".into(),
                });
            }
            (PutMode::Update(_), None) => {
                return Err(object_store::Error::NotFound {
                    path: location.to_string(),
                    source: "no such object".into(),
                });
            }
            (PutMode::Update(version), Some((_, now))) if version.e_tag != now.meta.e_tag => {
                return Err(precondition("If-Match: the ETag differs"));
            }
            _ => {}
        }
        let bytes = bytes::Bytes::from(payload.clone());
        let options = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        self.inner.put_opts(location, payload, options).await?;
        Ok(PutResult {
            e_tag: Some(content_tag(&bytes)),
            version: None,
            extensions: Default::default(),
        })
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        // A HEAD is answered with the body too: the callers read only the
        // metadata of a HEAD's result.
        _options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let _turn = self.turn.lock().await;
        match self.read(location).await? {
            Some((_, result)) => Ok(result),
            None => Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "no such object".into(),
            }),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Holder A (fence `stale`) wrote `bytes` to `path`; A's next write is
/// admitted on that object's version and held before its PUT; B takes
/// over (fence `stale + 1`) and writes the same bytes; A's PUT goes on. A
/// must be refused as stale, and the object keep B's bytes and fence,
/// whatever the store's versions are made of.
pub async fn a_stale_write_held_past_a_takeover_that_wrote_the_same_bytes_is_refused(
    holding: Arc<Holding>,
    objects: FencedObjects,
    path: &str,
) {
    let key = LockKey::new("reports");
    let (stale, fresh) = (Fence(7), Fence(8));
    objects.put(path, "C", &key, stale).await.unwrap();
    let (arrived, release) = holding.hold_next_put_of(stale);
    let writer = {
        let (objects, path, key) = (objects.clone(), path.to_owned(), key.clone());
        tokio::spawn(async move { objects.put(&path, "S", &key, stale).await })
    };
    tokio::time::timeout(Duration::from_secs(30), arrived)
        .await
        .expect("the stale holder's PUT reached the store in time")
        .unwrap();
    // The takeover redoes the crashed holder's work: the same bytes.
    objects.put(path, "C", &key, fresh).await.unwrap();
    release.send(()).unwrap();
    let stale_write = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the stale write finished in time")
        .unwrap();
    match stale_write {
        Err(ObjectFenceError::Refused(FenceRefused::Stale {
            presented, highest, ..
        })) => assert_eq!((presented, highest), (stale, fresh)),
        other => panic!("the stale holder's write must be refused, got {other:?}"),
    }
    let (bytes, fence) = objects.get(path).await.unwrap().unwrap();
    assert_eq!((&bytes[..], fence), (&b"C"[..], Some(fresh)));
}
