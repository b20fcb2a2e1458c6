//! A record's hash fields (see [`scripts`](crate::scripts)) to and from a
//! [`LockRecord`], and the shapes of the scripts' replies.

use std::collections::HashMap;
use std::time::Duration;

use lock_core::{Fence, LockKey, LockRecord, Rvn, StoreError, WriteTime};
use redis::Value;

/// A reply this store cannot read: a script of another version, or keys
/// under the prefix that are not lock records.
pub(crate) fn unreadable(what: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::other(format!(
        "{what}: Redis answered in a shape this version cannot read ({detail}); keep other keys out of the lock prefix"
    ))
}

/// The items of an array reply.
pub(crate) fn array(what: &str, value: Value) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        other => Err(unreadable(
            what,
            format!("expected an array, got {other:?}"),
        )),
    }
}

/// A text reply (the node's `run_id`); empty when absent or not text.
pub(crate) fn text(value: Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes).unwrap_or_default(),
        Value::SimpleString(text) => text,
        _ => String::new(),
    }
}

/// An integer reply.
pub(crate) fn integer(what: &str, value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(number) => Ok(*number),
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| unreadable(what, "expected an integer")),
        other => Err(unreadable(
            what,
            format!("expected an integer, got {other:?}"),
        )),
    }
}

/// The bytes of a string reply.
pub(crate) fn bytes(what: &str, value: Value) -> Result<Vec<u8>, StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.into_bytes()),
        Value::Int(number) => Ok(number.to_string().into_bytes()),
        other => Err(unreadable(
            what,
            format!("expected a string, got {other:?}"),
        )),
    }
}

/// A record from its hash fields (a flat field, value, field, value...
/// array; empty for an absent key), read when the clock of the node `node`
/// (its `run_id`) said `now_ms`: `None` when absent.
pub(crate) fn decode(
    what: &str,
    fields: Value,
    now_ms: i64,
    node: &str,
) -> Result<Option<LockRecord>, StoreError> {
    let items = array(what, fields)?;
    if items.is_empty() {
        return Ok(None);
    }
    let mut map: HashMap<String, Vec<u8>> = HashMap::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let (Some(field), Some(value)) = (items.next(), items.next()) {
        let field = String::from_utf8(bytes(what, field)?)
            .map_err(|_| unreadable(what, "a field name is not UTF-8"))?;
        map.insert(field, bytes(what, value)?);
    }
    let text = |field: &str| -> Result<String, StoreError> {
        let value = map
            .get(field)
            .ok_or_else(|| unreadable(what, format!("no field {field:?}")))?;
        String::from_utf8(value.clone())
            .map_err(|_| unreadable(what, format!("field {field:?} is not UTF-8")))
    };
    let number = |field: &str| -> Result<u64, StoreError> {
        text(field)?
            .parse()
            .map_err(|_| unreadable(what, format!("field {field:?} is not a number")))
    };
    let key = match map.get("s") {
        None => LockKey::new(text("p")?),
        Some(_) => LockKey::with_sort(text("p")?, text("s")?),
    };
    // The age on the server's clock, at the instant of the read (both
    // taken in one script), only when the node reading is the node that
    // stamped the record: another node's clock may be ahead of it by any
    // amount (a failover, a slot migration, a restore copy the hash as it
    // is), and every age read there would be that much too old. Then the
    // age is unknown and a waiter watches the record for a lease.
    let stamped_here = !node.is_empty() && map.get("n").is_some_and(|n| n == node.as_bytes());
    let written = if stamped_here {
        let written_ms = i64::try_from(number("t")?).unwrap_or(i64::MAX);
        // Both readings are truncated to milliseconds: the write may have
        // come up to 1 ms after its stamp, so 1 ms comes off, and the age is
        // never more than the truth. A clock that stepped back gives 0.
        let age_ms = now_ms.saturating_sub(written_ms).saturating_sub(1);
        Some(WriteTime::Ago(Duration::from_millis(
            u64::try_from(age_ms).unwrap_or(0),
        )))
    } else {
        None
    };
    Ok(Some(LockRecord {
        key,
        owner: text("o")?,
        rvn: Rvn::from_stored(text("v")?),
        lease: Duration::from_millis(number("l")?),
        released: text("x")? == "1",
        fence: Fence(number("f")?),
        data: map.get("d").cloned(),
        expires_at: match map.get("e") {
            None => None,
            Some(_) => Some(number("e")?),
        },
        written,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn string(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_hash_becomes_the_record_with_its_age_on_the_servers_clock() {
        let fields = Value::Array(vec![
            string("p"),
            string("jobs"),
            string("s"),
            string("a"),
            string("o"),
            string("w1"),
            string("v"),
            string("rvn-1"),
            string("l"),
            string("20000"),
            string("x"),
            string("0"),
            string("f"),
            string("7"),
            string("t"),
            string("1000"),
            string("n"),
            string("node-a"),
            string("d"),
            Value::BulkString(vec![0, 255]),
        ]);
        let record = decode("read", fields.clone(), 1250, "node-a")
            .unwrap()
            .unwrap();
        assert_eq!(record.key, LockKey::with_sort("jobs", "a"));
        assert_eq!(record.owner, "w1");
        assert_eq!(record.fence, Fence(7));
        assert_eq!(record.data, Some(vec![0, 255]));
        assert!(!record.released);
        // 250 ms on paper, 1 ms off for the truncation of both stamps.
        assert_eq!(
            record.written,
            Some(WriteTime::Ago(Duration::from_millis(249)))
        );
        // Read on another node (a failover, a migration, a restore), or on a
        // node that cannot say which it is: its clock is not the one that
        // stamped the record, and the age is unknown.
        for node in ["node-b", ""] {
            let record = decode("read", fields.clone(), 1250, node).unwrap().unwrap();
            assert_eq!(record.written, None, "read on {node:?}");
        }
        // A server clock that stepped back: age 0, never more.
        let fields = Value::Array(vec![
            string("p"),
            string("j"),
            string("o"),
            string("w"),
            string("v"),
            string("r"),
            string("l"),
            string("1"),
            string("x"),
            string("1"),
            string("f"),
            string("1"),
            string("t"),
            string("5000"),
            string("n"),
            string("node-a"),
        ]);
        let record = decode("read", fields, 10, "node-a").unwrap().unwrap();
        assert_eq!(record.written, Some(WriteTime::Ago(Duration::ZERO)));
        assert!(record.released);
        assert_eq!(
            decode("read", Value::Array(vec![]), 0, "node-a").unwrap(),
            None
        );
        // A record of an earlier version, without `n`: no age.
        let fields = Value::Array(vec![
            string("p"),
            string("j"),
            string("o"),
            string("w"),
            string("v"),
            string("r"),
            string("l"),
            string("1"),
            string("x"),
            string("0"),
            string("f"),
            string("1"),
            string("t"),
            string("5000"),
        ]);
        let record = decode("read", fields, 6000, "node-a").unwrap().unwrap();
        assert_eq!(record.written, None);
    }

    /// Both stamps are `TIME` truncated to milliseconds: a write at
    /// 1000.999 ms read at 1001.000 ms differ by 1 ms on paper and by a
    /// microsecond in truth. The age is rounded down by that millisecond, so
    /// it never exceeds the truth.
    #[test]
    fn an_age_is_never_more_than_the_truth() {
        let stamped = |written: &str| {
            Value::Array(vec![
                string("p"),
                string("j"),
                string("o"),
                string("w"),
                string("v"),
                string("r"),
                string("l"),
                string("1"),
                string("x"),
                string("0"),
                string("f"),
                string("1"),
                string("t"),
                string(written),
                string("n"),
                string("node-a"),
            ])
        };
        // Every pair of true instants (in microseconds) whose truncations are
        // the stamps: the age reported is at most the least true age.
        for (written_ms, read_ms) in [(1000_i64, 1000_i64), (1000, 1001), (1000, 1250)] {
            let record = decode("read", stamped(&written_ms.to_string()), read_ms, "node-a")
                .unwrap()
                .unwrap();
            let Some(WriteTime::Ago(age)) = record.written else {
                panic!("an age, on the node that wrote");
            };
            // Written as late as written_ms + 0.999, read as early as read_ms.
            let least_truth_us = (read_ms * 1000 - (written_ms * 1000 + 999)).max(0);
            assert!(
                age.as_micros() <= u128::try_from(least_truth_us).unwrap(),
                "stamped {written_ms}, read {read_ms}: age {age:?} > {least_truth_us} µs"
            );
        }
    }

    #[test]
    fn a_hash_that_is_not_a_record_is_refused() {
        let error = decode(
            "read k",
            Value::Array(vec![string("p"), string("x")]),
            0,
            "n",
        )
        .unwrap_err();
        assert!(error.message().contains("read k"), "{error}");
        assert!(decode("read k", string("nope"), 0, "n").is_err());
    }
}
