//! Checking that a bucket can hold locks: it exists, the credentials may
//! read, write and list under the prefix, and its PUTs are conditional.

use futures_util::StreamExt as _;
use lock_core::{Rvn, StoreError};
use object_store::path::Path;
use object_store::{GetOptions, PutMode, PutOptions, PutPayload, UpdateVersion};

use crate::errors::{BucketError, Call, classify};
use crate::store::BucketStore;

impl BucketStore {
    /// Check that the bucket can hold locks, with one probe object under the
    /// prefix (removed at the end; its name is never a lock's): it is
    /// created only if absent, a second create is refused, an update on
    /// its version applies and one on the version it replaced is refused, a
    /// read returns what was written, and the prefix can be listed. Seven
    /// requests.
    ///
    /// Buckets are created with the cloud's own tools; this creates nothing
    /// that stays (on a versioned bucket the probe's old versions and delete
    /// marker do, until a lifecycle rule removes them).
    pub async fn validate_bucket(&self) -> Result<(), BucketError> {
        let url = self.url().to_owned();
        let objects = self.object_store();
        let probe = self
            .prefix()
            .clone()
            .join(format!(".probe-{}", Rvn::fresh().as_str()));
        let put = |mode: PutMode, text: &'static str| {
            objects.put_opts(
                &probe,
                PutPayload::from_static(text.as_bytes()),
                PutOptions::from(mode),
            )
        };
        let store_error = |what: &str, error| BucketError::Store {
            url: url.clone(),
            source: classify(Call::Write, &format!("{what} {probe}"), error),
        };
        let no_conditional = |what: &str| BucketError::NoConditionalWrites {
            url: url.clone(),
            what: what.to_owned(),
        };

        let outcome = async {
            let created = match put(PutMode::Create, "first").await {
                Ok(created) => created,
                Err(error @ object_store::Error::NotFound { .. }) => {
                    return Err(BucketError::Missing {
                        url: url.clone(),
                        source: classify(Call::Write, &format!("create {probe}"), error),
                    });
                }
                Err(
                    error @ (object_store::Error::NotImplemented { .. }
                    | object_store::Error::NotSupported { .. }),
                ) => {
                    return Err(no_conditional(&format!(
                        "a create-if-absent PUT is not implemented ({error})"
                    )));
                }
                Err(error) => return Err(store_error("create", error)),
            };
            match put(PutMode::Create, "second").await {
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {}
                Ok(_) => return Err(no_conditional("a create-if-absent PUT overwrote an object")),
                Err(error) => return Err(store_error("create again", error)),
            }
            let first = UpdateVersion::from(created);
            match put(PutMode::Update(first.clone()), "updated").await {
                Ok(_) => {}
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {
                    return Err(no_conditional(
                        "a PUT with If-Match on the current version was refused",
                    ));
                }
                Err(
                    error @ (object_store::Error::NotImplemented { .. }
                    | object_store::Error::NotSupported { .. }),
                ) => {
                    return Err(no_conditional(&format!(
                        "a PUT with If-Match is not implemented ({error})"
                    )));
                }
                Err(error) => return Err(store_error("update", error)),
            }
            // The first version is stale now, whatever the service versions
            // objects by (ETag, generation).
            match put(PutMode::Update(first), "stale").await {
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => {}
                Ok(_) => {
                    return Err(no_conditional(
                        "a PUT with If-Match on a replaced version applied",
                    ));
                }
                Err(error) => return Err(store_error("update a stale version of", error)),
            }
            let read = objects
                .get_opts(&probe, GetOptions::default())
                .await
                .map_err(|error| store_error("read", error))?
                .bytes()
                .await
                .map_err(|error| store_error("read", error))?;
            if read.as_ref() != b"updated" {
                return Err(no_conditional(
                    "a read did not return the last write before it",
                ));
            }
            list_one(objects.as_ref(), self.prefix())
                .await
                .map_err(|source| BucketError::Store {
                    url: url.clone(),
                    source,
                })
        }
        .await;
        // The probe goes whatever the checks found (a create whose reply was
        // lost may have made it). A missing bucket has nothing to remove.
        let removed = objects
            .delete_stream(
                futures_util::stream::once(std::future::ready(Ok(probe.clone()))).boxed(),
            )
            .next()
            .await;
        outcome?;
        match removed {
            Some(Err(object_store::Error::NotFound { .. })) | Some(Ok(_)) | None => Ok(()),
            Some(Err(error)) => Err(store_error("remove", error)),
        }
    }
}

/// List one object under `prefix` (the credentials may list it).
async fn list_one(
    objects: &dyn object_store::ObjectStore,
    prefix: &Path,
) -> Result<(), StoreError> {
    match objects.list(Some(prefix)).next().await {
        Some(Err(error)) => Err(classify(Call::Read, &format!("list {prefix}"), error)),
        _ => Ok(()),
    }
}
