//! The few requests the store makes, built from etcd's messages, and what
//! it reads from the answers.

use super::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use super::etcdserverpb::request_op::Request;
use super::etcdserverpb::response_op::Response;
use super::etcdserverpb::watch_request::RequestUnion;
use super::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseOp,
    TxnRequest, TxnResponse, WatchCreateRequest, WatchRequest,
};

/// Read `key` (linearizable: etcd's default).
pub(crate) fn get(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.as_bytes().to_vec(),
        ..RangeRequest::default()
    }
}

/// Read the keys from `from` up to (not including) `end`, at most `limit`,
/// in byte order.
pub(crate) fn range(from: &str, end: &str, limit: i64) -> RangeRequest {
    RangeRequest {
        key: from.as_bytes().to_vec(),
        range_end: end.as_bytes().to_vec(),
        limit,
        ..RangeRequest::default()
    }
}

/// The comparison that `key` was last written at `revision`.
pub(crate) fn written_at(key: &str, revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Mod.into(),
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::ModRevision(revision)),
    }
}

/// The comparison that `key` does not exist (its creation revision is 0).
pub(crate) fn absent(key: &str) -> Compare {
    Compare {
        result: CompareResult::Equal.into(),
        target: CompareTarget::Create.into(),
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::CreateRevision(0)),
    }
}

/// Put `value` at `key`, in a transaction.
pub(crate) fn put_op(key: &str, value: impl Into<Vec<u8>>) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into(),
            ..PutRequest::default()
        })),
    }
}

/// Read `key`, in a transaction.
pub(crate) fn get_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(get(key))),
    }
}

/// Delete `key`, in a transaction.
pub(crate) fn delete_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
            key: key.as_bytes().to_vec(),
            ..DeleteRangeRequest::default()
        })),
    }
}

/// `IF compare THEN success ELSE failure`.
pub(crate) fn txn(
    compare: Vec<Compare>,
    success: Vec<RequestOp>,
    failure: Vec<RequestOp>,
) -> TxnRequest {
    TxnRequest {
        compare,
        success,
        failure,
    }
}

/// Watch every key under `prefix`.
pub(crate) fn watch_prefix(prefix: &str) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..WatchCreateRequest::default()
        })),
    }
}

/// The end of the range of keys that start with `prefix`: the prefix with
/// its last byte below 0xff raised by one (etcd's `GetPrefixRangeEnd`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte is 0xff (or none is given): every key from the prefix on.
    vec![0]
}

/// The revision a transaction committed at (its header's), if etcd gave it.
pub(crate) fn revision(response: &TxnResponse) -> Option<i64> {
    response.header.map(|header| header.revision)
}

/// The read a refused transaction made, if that is what `op` is.
pub(crate) fn read_in(op: Option<&ResponseOp>) -> Option<&RangeResponse> {
    match op?.response.as_ref()? {
        Response::ResponseRange(range) => Some(range),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn a_prefix_range_ends_after_every_key_that_starts_with_it() {
        assert_eq!(prefix_end(b"locks/n/"), b"locks/n0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), [0]);
        assert_eq!(prefix_end(b""), [0]);
    }
}
