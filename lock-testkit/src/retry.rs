//! [`RetryingStore`]: retries and ambiguity resolution over a store that fails,
//! so that a fault-injected store still meets the contract.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::layer::{StoreCall, StoreLayer, StoreOp, StoreReply};
use lock_core::{ConditionalStore, LockKey, LockRecord, ManyOutcome, Outcome, StoreError};

/// Retries throttled and failed calls and resolves ambiguous writes by RVN, so a
/// store behind the fault injector passes the conformance suite.
///
/// * Every call is sent again after a retryable error, up to 64 attempts.
/// * A `put` whose outcome is ambiguous is resolved with a consistent read: if the
///   stored record carries the RVN of the write, the write applied and is reported
///   as applied; otherwise it is sent again. A `put` rejected with the current
///   record carrying its own RVN is reported as applied too (an earlier attempt
///   won: no other write carries that RVN).
/// * A `put_many` whose outcome is ambiguous is resolved the same way, key by
///   key: applied if every key carries its write's RVN.
/// * A `delete` reads the record first; if the delete's outcome is ambiguous and
///   the record is gone afterwards, the delete is reported as applied with the
///   record it read.
///
/// This is a test layer: it assumes an ambiguous write has settled by the time the
/// read that resolves it is answered (true of the fault injector, where "applied,
/// response lost" applies before returning). The lock client does not need it: it
/// resolves ambiguity itself, with deadlines.
#[derive(Clone, Debug)]
pub struct RetryingStore<S> {
    inner: S,
    retry: Retry,
}

impl<S: ConditionalStore> RetryingStore<S> {
    /// Wrap `inner`, giving each call up to 64 attempts.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            retry: Retry { attempts: 64 },
        }
    }
}

lock_core::store_via_layer!(impl[S: ConditionalStore] for RetryingStore<S>,
    |this| (&this.retry, &this.inner as &dyn ConditionalStore));

/// The layer: one retry loop for every call.
#[derive(Clone, Copy, Debug)]
struct Retry {
    attempts: u32,
}

impl Retry {
    async fn backoff(attempt: u32) {
        tokio::time::sleep(Duration::from_micros(100 << attempt.min(6))).await;
    }

    /// A consistent read of `key`, retried like any call.
    async fn read(
        &self,
        key: &LockKey,
        next: &dyn ConditionalStore,
    ) -> Result<Option<LockRecord>, StoreError> {
        self.call(StoreCall::Get { key }, next).await?.into_record()
    }
}

#[async_trait]
impl StoreLayer for Retry {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let own_rvn = match &call {
            StoreCall::Put { new, .. } => Some(new.rvn.clone()),
            _ => None,
        };
        let mut attempt = 0;
        loop {
            // What a delete would remove: the record it reports if its outcome
            // is ambiguous and the key is gone afterwards.
            let before = match (call.op(), call.key()) {
                (StoreOp::Delete, Some(key)) => self.read(key, next).await?,
                _ => None,
            };
            let error = match call.clone().send(next).await {
                Ok(StoreReply::Outcome(Outcome::Rejected {
                    current: Some(record),
                })) if Some(&record.rvn) == own_rvn.as_ref() => {
                    return Ok(Outcome::Applied(record).into());
                }
                Ok(reply) => return Ok(reply),
                Err(error) if error.is_retryable() && attempt + 1 < self.attempts => error,
                Err(error) => return Err(error),
            };
            attempt += 1;
            // Several writes, all or none: applied if every key carries its
            // write's RVN.
            if error.is_ambiguous()
                && let StoreCall::PutMany { writes } = &call
            {
                let mut records = Vec::with_capacity(writes.len());
                for write in writes {
                    match self.read(&write.key, next).await? {
                        Some(record) if record.rvn == write.new.rvn => records.push(record),
                        _ => break,
                    }
                }
                if records.len() == writes.len() {
                    return Ok(ManyOutcome::Applied(records).into());
                }
            }
            if error.is_ambiguous()
                && let Some(key) = call.key()
            {
                match call.op() {
                    StoreOp::Put => {
                        if let Some(record) = self.read(key, next).await?
                            && Some(&record.rvn) == own_rvn.as_ref()
                        {
                            return Ok(Outcome::Applied(record).into());
                        }
                    }
                    StoreOp::Delete => {
                        if let Some(record) = before
                            && self.read(key, next).await?.is_none()
                        {
                            return Ok(Outcome::Applied(record).into());
                        }
                    }
                    StoreOp::Get | StoreOp::List | StoreOp::PutMany => {}
                }
            }
            Self::backoff(attempt).await;
        }
    }
}
