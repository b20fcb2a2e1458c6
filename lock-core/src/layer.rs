//! Store layers: a wrapper around a [`ConditionalStore`] that sees each call
//! once, as one value, and writes only what it changes (in the spirit of
//! tower's `Layer` and OpenDAL's layers).
//!
//! A layer implements [`StoreLayer::call`]: it gets the call ([`StoreCall`],
//! the method and its arguments) and the store below (`next`), and returns the
//! reply ([`StoreReply`]). [`StoreCall::send`] makes the call on `next`;
//! anything before it runs before the call, anything after sees the reply.
//! [`Layered`] puts a layer in front of a store and is itself a
//! `ConditionalStore`; a wrapper type with an API of its own routes its
//! methods through its layer with [`store_via_layer!`](crate::store_via_layer).
//!
//! ```
//! use async_trait::async_trait;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use lock_core::{ConditionalStore, LockKey, StoreError};
//! use lock_core::layer::{Layered, StoreCall, StoreLayer, StoreReply};
//! # use lock_core::{Capabilities, Cursor, Expect, LockRecord, NewRecord, Outcome, Page};
//! # #[derive(Debug)]
//! # struct Empty;
//! # #[async_trait]
//! # impl ConditionalStore for Empty {
//! #     async fn get(&self, _: &LockKey) -> Result<Option<LockRecord>, StoreError> { Ok(None) }
//! #     async fn put(&self, _: &LockKey, _: Expect, _: NewRecord) -> Result<Outcome, StoreError> { Ok(Outcome::Rejected { current: None }) }
//! #     async fn delete(&self, _: &LockKey, _: Expect) -> Result<Outcome, StoreError> { Ok(Outcome::Rejected { current: None }) }
//! #     async fn list(&self, _: Option<&str>, _: Option<Cursor>, _: usize) -> Result<Page, StoreError> { Ok(Page::default()) }
//! # }
//!
//! /// Counts the writes that reach the store.
//! #[derive(Debug, Default)]
//! struct CountWrites(AtomicU64);
//!
//! #[async_trait]
//! impl StoreLayer for CountWrites {
//!     async fn call(
//!         &self,
//!         call: StoreCall<'_>,
//!         next: &dyn ConditionalStore,
//!     ) -> Result<StoreReply, StoreError> {
//!         if call.op().is_write() {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!         call.send(next).await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), StoreError> {
//! let store = Layered::new(CountWrites::default(), Empty);
//! store.get(&LockKey::new("job")).await?;
//! assert_eq!(store.layer().0.load(Ordering::Relaxed), 0);
//! # Ok(())
//! # }
//! ```

use async_trait::async_trait;

use crate::{
    Capabilities, ConditionalStore, Cursor, Expect, KeyedWrite, LockKey, LockRecord, ManyOutcome,
    NewRecord, Outcome, Page, StoreError,
};

/// Which store method a call is.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum StoreOp {
    /// [`get`](ConditionalStore::get)
    Get,
    /// [`put`](ConditionalStore::put)
    Put,
    /// [`delete`](ConditionalStore::delete)
    Delete,
    /// [`list`](ConditionalStore::list)
    List,
    /// [`put_many`](ConditionalStore::put_many)
    PutMany,
}

impl StoreOp {
    /// `put`, `delete` and `put_many` write.
    pub fn is_write(self) -> bool {
        matches!(self, StoreOp::Put | StoreOp::Delete | StoreOp::PutMany)
    }

    /// `get` and `list` read.
    pub fn is_read(self) -> bool {
        !self.is_write()
    }
}

/// One call of a store method with its arguments, as the trait takes them:
/// keys borrowed, the rest owned (passing a call on moves it; a layer that
/// calls more than once clones it).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StoreCall<'a> {
    /// [`get`](ConditionalStore::get)
    Get {
        /// The key read.
        key: &'a LockKey,
    },
    /// [`put`](ConditionalStore::put)
    Put {
        /// The key written.
        key: &'a LockKey,
        /// The condition.
        expect: Expect,
        /// The record to write.
        new: NewRecord,
    },
    /// [`delete`](ConditionalStore::delete)
    Delete {
        /// The key deleted.
        key: &'a LockKey,
        /// The condition.
        expect: Expect,
    },
    /// [`list`](ConditionalStore::list)
    List {
        /// Only this partition's records, if given.
        partition: Option<&'a str>,
        /// Where the page starts.
        cursor: Option<Cursor>,
        /// Most records on the page.
        limit: usize,
    },
    /// [`put_many`](ConditionalStore::put_many)
    PutMany {
        /// The writes, all or none.
        writes: Vec<KeyedWrite>,
    },
}

impl<'a> StoreCall<'a> {
    /// Which method this is.
    pub fn op(&self) -> StoreOp {
        match self {
            StoreCall::Get { .. } => StoreOp::Get,
            StoreCall::Put { .. } => StoreOp::Put,
            StoreCall::Delete { .. } => StoreOp::Delete,
            StoreCall::List { .. } => StoreOp::List,
            StoreCall::PutMany { .. } => StoreOp::PutMany,
        }
    }

    /// The key the call is about (`None` for a listing, and for `put_many`,
    /// which is about several: [`StoreCall::PutMany::writes`]).
    pub fn key(&self) -> Option<&'a LockKey> {
        match self {
            StoreCall::Get { key } | StoreCall::Put { key, .. } | StoreCall::Delete { key, .. } => {
                Some(key)
            }
            StoreCall::List { .. } | StoreCall::PutMany { .. } => None,
        }
    }

    /// Make this call on `next`. The reply always has this call's variant.
    pub async fn send(self, next: &dyn ConditionalStore) -> Result<StoreReply, StoreError> {
        Ok(match self {
            StoreCall::Get { key } => StoreReply::Record(next.get(key).await?),
            StoreCall::Put { key, expect, new } => {
                StoreReply::Outcome(next.put(key, expect, new).await?)
            }
            StoreCall::Delete { key, expect } => {
                StoreReply::Outcome(next.delete(key, expect).await?)
            }
            StoreCall::List {
                partition,
                cursor,
                limit,
            } => StoreReply::Page(next.list(partition, cursor, limit).await?),
            StoreCall::PutMany { writes } => StoreReply::Many(next.put_many(writes).await?),
        })
    }
}

/// The reply to a [`StoreCall`]: a record for `get`, an outcome for `put` and
/// `delete`, a page for `list`, the outcome of them all for `put_many`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum StoreReply {
    /// What `get` read.
    Record(Option<LockRecord>),
    /// What `put` or `delete` did.
    Outcome(Outcome),
    /// What `list` found.
    Page(Page),
    /// What `put_many` did.
    Many(ManyOutcome),
}

impl From<Option<LockRecord>> for StoreReply {
    fn from(record: Option<LockRecord>) -> Self {
        StoreReply::Record(record)
    }
}

impl From<Outcome> for StoreReply {
    fn from(outcome: Outcome) -> Self {
        StoreReply::Outcome(outcome)
    }
}

impl From<ManyOutcome> for StoreReply {
    fn from(outcome: ManyOutcome) -> Self {
        StoreReply::Many(outcome)
    }
}

impl From<Page> for StoreReply {
    fn from(page: Page) -> Self {
        StoreReply::Page(page)
    }
}

impl StoreReply {
    /// The record a write applied, if it applied.
    pub fn applied(&self) -> Option<&LockRecord> {
        match self {
            StoreReply::Outcome(Outcome::Applied(record)) => Some(record),
            _ => None,
        }
    }

    /// Whether this is a rejected write (or several, in one request).
    pub fn is_rejected(&self) -> bool {
        matches!(
            self,
            StoreReply::Outcome(Outcome::Rejected { .. })
                | StoreReply::Many(ManyOutcome::Rejected { .. })
        )
    }

    /// The outcome, to change in place.
    pub fn outcome_mut(&mut self) -> Option<&mut Outcome> {
        match self {
            StoreReply::Outcome(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// The page, to change in place.
    pub fn page_mut(&mut self) -> Option<&mut Page> {
        match self {
            StoreReply::Page(page) => Some(page),
            _ => None,
        }
    }

    /// The reply of a `get`; another variant is a layer's mistake, reported as
    /// an error.
    pub fn into_record(self) -> Result<Option<LockRecord>, StoreError> {
        match self {
            StoreReply::Record(record) => Ok(record),
            other => Err(mismatch(StoreOp::Get, &other)),
        }
    }

    /// The reply of a `put` or `delete` (`op`).
    pub fn into_outcome(self, op: StoreOp) -> Result<Outcome, StoreError> {
        match self {
            StoreReply::Outcome(outcome) => Ok(outcome),
            other => Err(mismatch(op, &other)),
        }
    }

    /// The reply of a `list`.
    pub fn into_page(self) -> Result<Page, StoreError> {
        match self {
            StoreReply::Page(page) => Ok(page),
            other => Err(mismatch(StoreOp::List, &other)),
        }
    }

    /// The reply of a `put_many`.
    pub fn into_many(self) -> Result<ManyOutcome, StoreError> {
        match self {
            StoreReply::Many(outcome) => Ok(outcome),
            other => Err(mismatch(StoreOp::PutMany, &other)),
        }
    }

    fn variant(&self) -> &'static str {
        match self {
            StoreReply::Record(_) => "a record",
            StoreReply::Outcome(_) => "an outcome",
            StoreReply::Page(_) => "a page",
            StoreReply::Many(_) => "the outcome of several writes",
        }
    }
}

/// A layer answered a call with the wrong kind of reply. For a write the store
/// below may have applied it: only "ambiguous" is honest.
fn mismatch(op: StoreOp, got: &StoreReply) -> StoreError {
    let message = format!("a store layer answered {op:?} with {}", got.variant());
    tracing::error!("{message}");
    if op.is_write() {
        StoreError::ambiguous(message)
    } else {
        StoreError::other(message)
    }
}

/// A wrapper around a store that sees each call once; see the
/// [module docs](self).
#[async_trait]
pub trait StoreLayer: Send + Sync + std::fmt::Debug + 'static {
    /// Handle `call`, usually by [sending](StoreCall::send) it to `next`. The
    /// default passes it through.
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        call.send(next).await
    }

    /// What the layered store supports, given what `inner` does. The default
    /// changes nothing.
    fn capabilities(&self, inner: Capabilities) -> Capabilities {
        inner
    }
}

/// A store behind a layer: a [`ConditionalStore`] whose every call goes
/// through `layer` to `inner`.
#[derive(Clone, Debug)]
pub struct Layered<L, S> {
    layer: L,
    inner: S,
}

impl<L, S> Layered<L, S> {
    /// `inner` behind `layer`.
    pub fn new(layer: L, inner: S) -> Self {
        Self { layer, inner }
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The store behind the layer.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

/// Implement [`ConditionalStore`] for a wrapper type by routing each method
/// through a [`StoreLayer`]: `|this| (layer, next)` says, for `this: &Self`,
/// which layer handles the calls and which store (`&dyn ConditionalStore`) is
/// below it. For wrappers with an API of their own; others use [`Layered`].
///
/// ```
/// use lock_core::ConditionalStore;
/// use lock_core::layer::StoreLayer;
///
/// /// A layer that changes nothing (every method of `StoreLayer` has a default).
/// #[derive(Debug)]
/// struct PassThrough;
/// impl StoreLayer for PassThrough {}
///
/// /// A wrapper with an API of its own, a store through its layer.
/// #[derive(Debug)]
/// struct Wrapper<S> {
///     inner: S,
///     layer: PassThrough,
/// }
///
/// lock_core::store_via_layer!(impl[S: ConditionalStore] for Wrapper<S>,
///     |this| (&this.layer, &this.inner as &dyn ConditionalStore));
/// ```
#[macro_export]
macro_rules! store_via_layer {
    (impl[$($generics:tt)*] for $ty:ty, |$this:ident| $parts:expr) => {
        #[$crate::__private::async_trait]
        impl<$($generics)*> $crate::ConditionalStore for $ty {
            async fn get(
                &self,
                key: &$crate::LockKey,
            ) -> ::core::result::Result<::core::option::Option<$crate::LockRecord>, $crate::StoreError> {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::call(layer, $crate::layer::StoreCall::Get { key }, next)
                    .await?
                    .into_record()
            }
            async fn put(
                &self,
                key: &$crate::LockKey,
                expect: $crate::Expect,
                new: $crate::NewRecord,
            ) -> ::core::result::Result<$crate::Outcome, $crate::StoreError> {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::call(
                    layer,
                    $crate::layer::StoreCall::Put { key, expect, new },
                    next,
                )
                .await?
                .into_outcome($crate::layer::StoreOp::Put)
            }
            async fn delete(
                &self,
                key: &$crate::LockKey,
                expect: $crate::Expect,
            ) -> ::core::result::Result<$crate::Outcome, $crate::StoreError> {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::call(
                    layer,
                    $crate::layer::StoreCall::Delete { key, expect },
                    next,
                )
                .await?
                .into_outcome($crate::layer::StoreOp::Delete)
            }
            async fn list(
                &self,
                partition: ::core::option::Option<&str>,
                cursor: ::core::option::Option<$crate::Cursor>,
                limit: usize,
            ) -> ::core::result::Result<$crate::Page, $crate::StoreError> {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::call(
                    layer,
                    $crate::layer::StoreCall::List { partition, cursor, limit },
                    next,
                )
                .await?
                .into_page()
            }
            async fn put_many(
                &self,
                writes: ::std::vec::Vec<$crate::KeyedWrite>,
            ) -> ::core::result::Result<$crate::ManyOutcome, $crate::StoreError> {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::call(
                    layer,
                    $crate::layer::StoreCall::PutMany { writes },
                    next,
                )
                .await?
                .into_many()
            }
            fn release_feed(&self) -> ::core::option::Option<$crate::ReleaseFeed> {
                let $this = self;
                let (_layer, next) = $parts;
                next.release_feed()
            }
            fn capabilities(&self) -> $crate::Capabilities {
                let $this = self;
                let (layer, next) = $parts;
                $crate::layer::StoreLayer::capabilities(layer, next.capabilities())
            }
        }
    };
}

store_via_layer!(impl[L: StoreLayer, S: ConditionalStore] for Layered<L, S>,
    |this| (&this.layer, &this.inner as &dyn ConditionalStore));
