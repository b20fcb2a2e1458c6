//! The record in an object's body: a small JSON document that says which key
//! it belongs to, so a listing (and a person reading the bucket) needs no
//! path decoding.
//!
//! ```json
//! {"format":1,"partition":"orders","sort":null,"owner":"web-1-4f2a9c1e",
//!  "rvn":"…","lease_ms":20000,"released":false,"fence":7,
//!  "data":"aGVsbG8=","expires_at":null}
//! ```

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use lock_core::{Fence, LockKey, LockRecord, Rvn, StoreError};
use serde::{Deserialize, Serialize};

/// The body format this version writes and reads.
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Body {
    format: u32,
    partition: String,
    sort: Option<String>,
    owner: String,
    rvn: String,
    lease_ms: u64,
    released: bool,
    fence: u64,
    /// Base64 (standard alphabet, padded).
    data: Option<String>,
    expires_at: Option<u64>,
}

/// `record` as an object body.
pub(crate) fn encode(record: &LockRecord) -> Vec<u8> {
    let body = Body {
        format: FORMAT,
        partition: record.key.partition().to_owned(),
        sort: record.key.sort().map(str::to_owned),
        owner: record.owner.clone(),
        rvn: record.rvn.as_str().to_owned(),
        lease_ms: u64::try_from(record.lease.as_millis()).unwrap_or(u64::MAX),
        released: record.released,
        fence: record.fence.get(),
        data: record.data.as_ref().map(|data| STANDARD.encode(data)),
        expires_at: record.expires_at,
    };
    // Serialising this plain struct cannot fail; an empty body would be
    // refused when read back.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The record in the body of the object at `path`.
pub(crate) fn decode(path: &str, bytes: &[u8]) -> Result<LockRecord, StoreError> {
    let corrupt = |what: String| {
        StoreError::other(format!(
            "the object {path} is not a lock record this version can read ({what}); \
             move it out of the lock prefix"
        ))
    };
    let body: Body = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if body.format != FORMAT {
        return Err(corrupt(format!("format {}", body.format)));
    }
    let data = match body.data {
        None => None,
        Some(text) => Some(
            STANDARD
                .decode(text)
                .map_err(|e| corrupt(format!("data: {e}")))?,
        ),
    };
    let key = match body.sort {
        None => LockKey::new(body.partition),
        Some(sort) => LockKey::with_sort(body.partition, sort),
    };
    Ok(LockRecord {
        key,
        owner: body.owner,
        rvn: Rvn::from_stored(body.rvn),
        lease: Duration::from_millis(body.lease_ms),
        released: body.released,
        fence: Fence(body.fence),
        data,
        expires_at: body.expires_at,
        written: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn record(key: LockKey, data: Option<Vec<u8>>) -> LockRecord {
        LockRecord {
            key,
            owner: "owner \"1\"".into(),
            rvn: Rvn::fresh(),
            lease: Duration::from_millis(20_500),
            released: true,
            fence: Fence(u64::MAX),
            data,
            expires_at: Some(1_700_000_000),
            written: None,
        }
    }

    #[test]
    fn every_field_survives_the_round_trip() {
        for record in [
            record(LockKey::new("a"), None),
            record(LockKey::with_sort("a", "b"), Some(vec![0, 255, 10])),
            record(LockKey::new("ü"), Some(Vec::new())),
        ] {
            let bytes = encode(&record);
            assert_eq!(decode("p", &bytes).unwrap(), record);
        }
    }

    #[test]
    fn foreign_bodies_are_refused_with_the_path() {
        let good = String::from_utf8(encode(&record(LockKey::new("a"), None))).unwrap();
        for bad in [
            "".to_owned(),
            "{}".to_owned(),
            good.replace("\"format\":1", "\"format\":2"),
            good.replace("\"data\":null", "\"data\":\"***\""),
        ] {
            let error = decode("p/a/lock.json", bad.as_bytes()).unwrap_err();
            assert!(error.message().contains("p/a/lock.json"), "{error}");
        }
    }
}
