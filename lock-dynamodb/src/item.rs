//! Conversion between lock records and DynamoDB items for a [`Layout`]: keys,
//! attribute encodings, size checks and listing cursors.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use lock_core::{Capabilities, Cursor, Fence, LimitError, LockKey, LockRecord, Rvn, StoreError};

use crate::Layout;
use crate::layout::{LeaseEncoding, ReleasedEncoding};

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Longest partition key value DynamoDB accepts, in UTF-8 bytes.
pub const MAX_PARTITION_KEY_BYTES: usize = 2048;
/// Longest sort key value DynamoDB accepts, in UTF-8 bytes.
pub const MAX_SORT_KEY_BYTES: usize = 1024;
/// Largest item DynamoDB accepts, in bytes (attribute names and values).
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// What a number attribute can take at most, counted for every number so that the
/// size check never under-estimates.
const MAX_NUMBER_BYTES: usize = 21;

/// The stored sort key value for `key` (`None` when the table has no sort key).
fn sort_value<'a>(layout: &'a Layout, key: &'a LockKey) -> Option<&'a str> {
    layout
        .sort_key()
        .map(|_| key.sort().unwrap_or(layout.no_sort_value()))
}

/// DynamoDB's key and item limits, with sort keys as `layout` has them.
pub(crate) fn limits(layout: &Layout) -> Capabilities {
    Capabilities::default()
        .with_sort_keys(layout.sort_key().is_some())
        .with_key_limits(MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES)
        .with_max_record_bytes(MAX_ITEM_BYTES)
}

/// Check a key against the layout and DynamoDB's limits, before any write.
pub(crate) fn check_key(layout: &Layout, key: &LockKey) -> Result<(), StoreError> {
    limits(layout).check_key(key).map_err(|limit| match limit {
        LimitError::SortKeyUnsupported { .. } => StoreError::invalid(format!(
            "lock {key} has a sort key, but the table layout ({}) has none: use a key without one, or add a sort key with Layout::with_sort_key",
            layout.preset_name()
        )),
        other => other.into(),
    })
}

/// The primary key attributes of `key` (checked).
pub(crate) fn key_item(layout: &Layout, key: &LockKey) -> Result<Item, StoreError> {
    check_key(layout, key)?;
    let mut item = Item::with_capacity(2);
    item.insert(
        layout.partition_key().to_owned(),
        AttributeValue::S(key.partition().to_owned()),
    );
    if let (Some(name), Some(value)) = (layout.sort_key(), sort_value(layout, key)) {
        item.insert(name.to_owned(), AttributeValue::S(value.to_owned()));
    }
    Ok(item)
}

/// Encode a lease in the layout's encoding.
pub(crate) fn encode_lease(encoding: LeaseEncoding, lease: Duration) -> AttributeValue {
    let millis = lease.as_millis();
    match encoding {
        LeaseEncoding::MillisNumber => AttributeValue::N(millis.to_string()),
        LeaseEncoding::MillisString => AttributeValue::S(millis.to_string()),
        LeaseEncoding::SecondsNumber => {
            let (secs, rest) = (millis / 1000, millis % 1000);
            if rest == 0 {
                AttributeValue::N(secs.to_string())
            } else {
                let fraction = format!("{rest:03}");
                AttributeValue::N(format!("{secs}.{}", fraction.trim_end_matches('0')))
            }
        }
    }
}

/// Decode a lease; lenient about `N` versus `S`, strict about the unit.
fn decode_lease(encoding: LeaseEncoding, value: &AttributeValue) -> Option<Duration> {
    let text = match value {
        AttributeValue::N(n) | AttributeValue::S(n) => n.trim(),
        _ => return None,
    };
    match encoding {
        LeaseEncoding::MillisNumber | LeaseEncoding::MillisString => text
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis)
            .or_else(|| {
                let millis = text.parse::<f64>().ok()?;
                Duration::try_from_secs_f64(millis / 1000.0).ok()
            }),
        LeaseEncoding::SecondsNumber => {
            let secs = text.parse::<f64>().ok()?;
            Duration::try_from_secs_f64(secs).ok()
        }
    }
}

/// The value of the released attribute for `released`; `None` means "remove it".
pub(crate) fn encode_released(
    encoding: ReleasedEncoding,
    released: bool,
) -> Option<AttributeValue> {
    match (encoding, released) {
        (ReleasedEncoding::Bool, released) => Some(AttributeValue::Bool(released)),
        (ReleasedEncoding::PresentAsOne, true) => Some(AttributeValue::S("1".into())),
        (ReleasedEncoding::PresentAsOne, false) => None,
    }
}

/// The value that marks a record released, for conditions.
pub(crate) fn released_marker(encoding: ReleasedEncoding) -> AttributeValue {
    match encoding {
        ReleasedEncoding::Bool => AttributeValue::Bool(true),
        ReleasedEncoding::PresentAsOne => AttributeValue::S("1".into()),
    }
}

fn decode_released(encoding: ReleasedEncoding, value: Option<&AttributeValue>) -> bool {
    match (encoding, value) {
        (_, None) => false,
        (ReleasedEncoding::Bool, Some(AttributeValue::Bool(b))) => *b,
        // The Java client treats the attribute's presence as "released".
        (ReleasedEncoding::PresentAsOne, Some(AttributeValue::Null(_))) => false,
        (ReleasedEncoding::PresentAsOne, Some(_)) => true,
        (ReleasedEncoding::Bool, Some(AttributeValue::S(s))) => {
            matches!(s.as_str(), "1" | "true" | "TRUE" | "True")
        }
        (ReleasedEncoding::Bool, Some(AttributeValue::N(n))) => n.trim() == "1",
        (ReleasedEncoding::Bool, Some(_)) => false,
    }
}

/// Read a lock record from an item. Missing fence reads as 0, missing released as
/// false, missing owner as empty; a missing key, RVN or lease is an error.
pub(crate) fn record_from_item(
    layout: &Layout,
    table: &str,
    item: &Item,
) -> Result<LockRecord, StoreError> {
    let bad = |what: &str| {
        StoreError::other(format!(
            "an item in DynamoDB table {table:?} is not a lock record of layout {}: {what}",
            layout.preset_name()
        ))
    };
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s.clone()),
        _ => None,
    };
    let partition = string(layout.partition_key())
        .ok_or_else(|| bad(&format!("no string attribute {:?}", layout.partition_key())))?;
    let sort = match layout.sort_key() {
        Some(name) => {
            let value =
                string(name).ok_or_else(|| bad(&format!("no string attribute {name:?}")))?;
            (value != layout.no_sort_value()).then_some(value)
        }
        None => None,
    };
    let key = match sort {
        Some(sort) => LockKey::with_sort(partition, sort),
        None => LockKey::new(partition),
    };
    let rvn = string(layout.rvn())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad(&format!("lock {key} has no attribute {:?}", layout.rvn())))?;
    let (lease_name, lease_encoding) = layout.lease();
    let lease = item
        .get(lease_name)
        .and_then(|v| decode_lease(lease_encoding, v))
        .ok_or_else(|| {
            bad(&format!(
                "lock {key} has no readable lease attribute {lease_name:?} ({lease_encoding:?})"
            ))
        })?;
    let owner = string(layout.owner()).unwrap_or_default();
    let released = layout
        .released()
        .is_some_and(|(name, encoding)| decode_released(encoding, item.get(name)));
    let fence = match item.get(layout.fence()) {
        Some(AttributeValue::N(n)) => n.trim().parse::<u64>().map_err(|_| {
            bad(&format!(
                "lock {key} has fence {n:?}, not an unsigned integer"
            ))
        })?,
        _ => 0,
    };
    let data = if layout.data_as_attributes() {
        crate::attributes::data_from_item(layout, item)
    } else {
        layout.data().and_then(|name| match item.get(name) {
            Some(AttributeValue::B(blob)) => Some(blob.as_ref().to_vec()),
            Some(AttributeValue::S(s)) => Some(s.as_bytes().to_vec()),
            _ => None,
        })
    };
    let expires_at = layout.expires_at().and_then(|name| match item.get(name) {
        Some(AttributeValue::N(n)) => n
            .trim()
            .parse::<u64>()
            .ok()
            .or_else(|| n.trim().parse::<f64>().ok().map(|f| f.max(0.0) as u64)),
        _ => None,
    });
    // Stored to the millisecond, truncated: one more millisecond is never
    // earlier than the writer's clock read when it built the request. A
    // stamp beside another RVN was left by a writer that does not stamp.
    let written = layout.written().and_then(|name| match item.get(name) {
        Some(AttributeValue::S(stamp)) => match stamp.split_once(' ') {
            Some((ms, stamped_rvn)) if stamped_rvn == rvn => {
                ms.parse::<u64>().ok().and_then(|ms| {
                    std::time::UNIX_EPOCH.checked_add(Duration::from_millis(ms.saturating_add(1)))
                })
            }
            _ => None,
        },
        _ => None,
    });
    Ok(LockRecord {
        key,
        owner,
        rvn: Rvn::from_stored(rvn),
        lease,
        released,
        fence: Fence(fence),
        data,
        expires_at,
        written: written.map(lock_core::WriteTime::At),
    })
}

/// The writer's wall clock now, as the write-time attribute stores it: epoch
/// milliseconds (truncated), a space, and the RVN written with it. `None`
/// when the clock reads before 2025: a host whose clock was never set would
/// stamp every lock decades old, so it stamps none (the version then carries
/// no stamp of its own, and is watched).
pub(crate) fn written_now(rvn: &str) -> Option<AttributeValue> {
    /// 2025-01-01T00:00:00Z, in milliseconds.
    const SANE_SINCE_MS: u128 = 1_735_689_600_000;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    (ms >= SANE_SINCE_MS).then(|| AttributeValue::S(format!("{ms} {rvn}")))
}

/// Seconds since the Unix epoch, for default expiry times.
pub(crate) fn epoch_seconds_in(after: Duration) -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_add(after)
        .as_secs()
}

/// The size DynamoDB counts for an attribute (name plus value), never less than
/// the real one.
pub(crate) fn attribute_size(name: &str, value: &AttributeValue) -> usize {
    name.len() + value_size(value)
}

/// The size DynamoDB counts for a value: documents cost 3 bytes plus 1 per
/// element on top of their elements (and a map's member names).
fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(_) => MAX_NUMBER_BYTES,
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| k.len() + value_size(v) + 1)
                .sum::<usize>()
        }
        AttributeValue::L(l) => 3 + l.iter().map(|v| value_size(v) + 1).sum::<usize>(),
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.len() * MAX_NUMBER_BYTES,
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        // Not written by this crate; counted generously.
        _ => MAX_ITEM_BYTES,
    }
}

/// Encode a listing cursor from a `LastEvaluatedKey`.
pub(crate) fn encode_cursor(layout: &Layout, last: &Item) -> Option<Cursor> {
    let partition = match last.get(layout.partition_key()) {
        Some(AttributeValue::S(s)) => s,
        _ => return None,
    };
    let sort = layout.sort_key().and_then(|name| match last.get(name) {
        Some(AttributeValue::S(s)) => Some(s.as_str()),
        _ => None,
    });
    Some(Cursor(match sort {
        Some(sort) => format!("s{}:{partition}{sort}", partition.len()),
        None => format!("p{}:{partition}", partition.len()),
    }))
}

/// Decode a listing cursor into an `ExclusiveStartKey`.
pub(crate) fn decode_cursor(layout: &Layout, cursor: &Cursor) -> Result<Item, StoreError> {
    let invalid = || {
        StoreError::invalid(format!(
            "listing cursor {:?} was not produced by this DynamoDB store",
            cursor.0
        ))
    };
    let text = cursor.0.as_str();
    let flag = text.chars().next().ok_or_else(invalid)?;
    let rest = &text[flag.len_utf8()..];
    let (len, rest) = rest.split_once(':').ok_or_else(invalid)?;
    let len: usize = len.parse().map_err(|_| invalid())?;
    if !rest.is_char_boundary(len.min(rest.len())) || len > rest.len() {
        return Err(invalid());
    }
    let (partition, sort) = rest.split_at(len);
    let mut item = Item::new();
    item.insert(
        layout.partition_key().to_owned(),
        AttributeValue::S(partition.to_owned()),
    );
    match (flag, layout.sort_key()) {
        ('s', Some(name)) => {
            item.insert(name.to_owned(), AttributeValue::S(sort.to_owned()));
        }
        ('p', None) if sort.is_empty() => {}
        _ => return Err(invalid()),
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn leases_round_trip_in_every_encoding() {
        for encoding in [
            LeaseEncoding::MillisNumber,
            LeaseEncoding::SecondsNumber,
            LeaseEncoding::MillisString,
        ] {
            for lease in [
                Duration::from_millis(1500),
                Duration::from_secs(30),
                Duration::from_millis(1),
            ] {
                let value = encode_lease(encoding, lease);
                assert_eq!(decode_lease(encoding, &value), Some(lease), "{value:?}");
            }
        }
        assert_eq!(
            encode_lease(LeaseEncoding::SecondsNumber, Duration::from_millis(1500)),
            AttributeValue::N("1.5".into())
        );
        assert_eq!(
            encode_lease(LeaseEncoding::MillisString, Duration::from_secs(20)),
            AttributeValue::S("20000".into())
        );
        // python-dynamodb-lock writes Decimal.from_float(30.0)
        assert_eq!(
            decode_lease(
                LeaseEncoding::SecondsNumber,
                &AttributeValue::N("30.0".into())
            ),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            decode_lease(
                LeaseEncoding::SecondsNumber,
                &AttributeValue::N("-1".into())
            ),
            None
        );
    }

    #[test]
    fn released_encodings() {
        let java = ReleasedEncoding::PresentAsOne;
        assert!(decode_released(java, Some(&AttributeValue::S("1".into()))));
        assert!(!decode_released(java, None));
        assert_eq!(encode_released(java, false), None);
        let native = ReleasedEncoding::Bool;
        assert!(decode_released(native, Some(&AttributeValue::Bool(true))));
        assert!(!decode_released(native, Some(&AttributeValue::Bool(false))));
    }

    #[test]
    fn cursors_round_trip() {
        let layout = Layout::python_dynamodb_lock();
        let mut last = Item::new();
        last.insert("lock_key".into(), AttributeValue::S("a:b€".into()));
        last.insert("sort_key".into(), AttributeValue::S("x:1".into()));
        let cursor = encode_cursor(&layout, &last).unwrap();
        assert_eq!(decode_cursor(&layout, &cursor).unwrap(), last);

        let native = Layout::native();
        last.remove("sort_key");
        let cursor = encode_cursor(&native, &last).unwrap();
        assert_eq!(decode_cursor(&native, &cursor).unwrap(), last);
        for bad in ["", "p", "p9:abc", "x1:a", "p2:€", "s1:ab"] {
            assert!(
                decode_cursor(&native, &Cursor(bad.into())).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn key_checks() {
        let native = Layout::native();
        assert!(check_key(&native, &LockKey::new("")).is_err());
        assert!(check_key(&native, &LockKey::new("a".repeat(2048))).is_ok());
        assert!(check_key(&native, &LockKey::new("a".repeat(2049))).is_err());
        assert!(check_key(&native, &LockKey::with_sort("a", "b")).is_err());
        let sorted = Layout::native().with_sort_key("sk");
        assert!(check_key(&sorted, &LockKey::with_sort("a", "b".repeat(1024))).is_ok());
        assert!(check_key(&sorted, &LockKey::with_sort("a", "b".repeat(1025))).is_err());
        assert!(check_key(&sorted, &LockKey::with_sort("a", "")).is_err());
        assert_eq!(
            key_item(&sorted, &LockKey::new("a")).unwrap().get("sk"),
            Some(&AttributeValue::S("-".into()))
        );
    }

    #[test]
    fn foreign_items_read_with_defaults() {
        let layout = Layout::java_lock_client();
        let mut item = Item::new();
        item.insert("key".into(), AttributeValue::S("k".into()));
        item.insert("ownerName".into(), AttributeValue::S("java".into()));
        item.insert("leaseDuration".into(), AttributeValue::S("20000".into()));
        item.insert("recordVersionNumber".into(), AttributeValue::S("r1".into()));
        let record = record_from_item(&layout, "t", &item).unwrap();
        assert_eq!(record.fence, Fence(0));
        assert!(!record.released);
        assert_eq!(record.lease, Duration::from_secs(20));
        item.remove("recordVersionNumber");
        assert!(record_from_item(&layout, "t", &item).is_err());
    }
}
