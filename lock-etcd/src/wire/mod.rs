//! etcd's v3 API over gRPC: the messages and clients generated from etcd's
//! `.proto` files, and the [`Connection`] the store sends them on.
//!
//! The generated code is kept in `generated/` rather than made by a build
//! script, so that building lock-etcd (and lockctl and the Python wheel,
//! which carry it) needs no `protoc`. The test `generated_code` makes it
//! again from etcd's `.proto` files and fails when it differs.

mod connection;
pub(crate) mod requests;

pub(crate) use connection::{Connection, Endpoints};

// Generated code: what tonic-prost-build makes, unchanged. Only the KV,
// Watch and Auth clients and their messages are used. The packages are
// siblings (the generated code names `super::mvccpb`), under one set of
// allowances.
#[allow(
    dead_code,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
mod generated {
    pub(crate) mod etcdserverpb {
        include!("generated/etcdserverpb.rs");
    }
    pub(crate) mod mvccpb {
        include!("generated/mvccpb.rs");
    }
    pub(crate) mod authpb {
        include!("generated/authpb.rs");
    }
}

pub(crate) use generated::{etcdserverpb, mvccpb};
