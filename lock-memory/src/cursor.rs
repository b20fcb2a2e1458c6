//! The listing cursor: the last key of a page, encoded so that any partition and
//! sort key round-trip exactly.
//!
//! The format is `<partition length in bytes>:<partition>` followed by `n` (no sort
//! key) or `s<sort key>`. Callers treat it as opaque.

use lock_core::{Cursor, LockKey, StoreError};

/// The cursor that resumes a listing after `key`.
pub(crate) fn encode(key: &LockKey) -> Cursor {
    let partition = key.partition();
    let tail = match key.sort() {
        Some(sort) => format!("s{sort}"),
        None => "n".to_owned(),
    };
    Cursor(format!("{}:{partition}{tail}", partition.len()))
}

/// The key a cursor of [`encode`] resumes after; `Invalid` for anything else.
pub(crate) fn decode(cursor: &Cursor) -> Result<LockKey, StoreError> {
    let bad = || {
        StoreError::invalid(format!(
            "{:?} is not a listing cursor of the in-memory store; pass back the `next` of a page",
            cursor.0
        ))
    };
    let (len, rest) = cursor.0.split_once(':').ok_or_else(bad)?;
    let len: usize = len.parse().map_err(|_| bad())?;
    if len > rest.len() || !rest.is_char_boundary(len) {
        return Err(bad());
    }
    let (partition, tail) = rest.split_at(len);
    if tail == "n" {
        Ok(LockKey::new(partition))
    } else if let Some(sort) = tail.strip_prefix('s') {
        Ok(LockKey::with_sort(partition, sort))
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for key in [
            LockKey::new("a"),
            LockKey::new("a:b"),
            LockKey::new("5:xn"),
            LockKey::with_sort("p", "s"),
            LockKey::with_sort("p:q", "n"),
            LockKey::with_sort("p", ""),
            LockKey::with_sort("é", "ü"),
        ] {
            assert_eq!(decode(&encode(&key)).ok(), Some(key));
        }
    }

    #[test]
    fn foreign_cursors_are_invalid() {
        for text in ["", "x", "9:ab", "1:ab", "a:bn", "2:éx", "1:a"] {
            let error = decode(&Cursor(text.into())).err();
            assert_eq!(
                error.map(|e| e.kind()),
                Some(lock_core::StoreErrorKind::Invalid),
                "{text:?}"
            );
        }
    }
}
