//! The record in a key's value: a small JSON document that carries the key
//! it belongs to, so a listing needs no key decoding and `etcdctl get`
//! shows a person what is held.
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

/// The value format this version writes and reads.
const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct Value {
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

/// `record` as a value.
pub(crate) fn encode(record: &LockRecord) -> Vec<u8> {
    let value = Value {
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
    // Serialising this plain struct cannot fail; an empty value would be
    // refused when read back.
    serde_json::to_vec(&value).unwrap_or_default()
}

/// The record in the value of the etcd key `key`.
pub(crate) fn decode(key: &str, bytes: &[u8]) -> Result<LockRecord, StoreError> {
    let corrupt = |what: String| {
        StoreError::other(format!(
            "the etcd key {key} does not hold a lock record this version can read ({what}); \
             move it out of the lock prefix"
        ))
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    if value.format != FORMAT {
        return Err(corrupt(format!("format {}", value.format)));
    }
    let data = match value.data {
        None => None,
        Some(text) => Some(
            STANDARD
                .decode(text)
                .map_err(|e| corrupt(format!("data: {e}")))?,
        ),
    };
    let lock = match value.sort {
        None => LockKey::new(value.partition),
        Some(sort) => LockKey::with_sort(value.partition, sort),
    };
    Ok(LockRecord {
        key: lock,
        owner: value.owner,
        rvn: Rvn::from_stored(value.rvn),
        lease: Duration::from_millis(value.lease_ms),
        released: value.released,
        fence: Fence(value.fence),
        data,
        expires_at: value.expires_at,
        written: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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
            assert_eq!(decode("k", &encode(&record)).unwrap(), record);
        }
    }

    #[test]
    fn foreign_values_are_refused_with_the_key() {
        let good = String::from_utf8(encode(&record(LockKey::new("a"), None))).unwrap();
        for bad in [
            "".to_owned(),
            "{}".to_owned(),
            good.replace("\"format\":1", "\"format\":2"),
            good.replace("\"data\":null", "\"data\":\"***\""),
        ] {
            let error = decode("locks/r/a/-", bad.as_bytes()).unwrap_err();
            assert!(error.message().contains("locks/r/a/-"), "{error}");
        }
    }
}
