//! [`RetryingStore`]: retries and ambiguity resolution over a store that fails,
//! so that a fault-injected store still meets the contract.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, Expect, LockKey, LockRecord, NewRecord, Outcome, Page,
    StoreError,
};

/// Retries throttled and failed calls and resolves ambiguous writes by RVN, so a
/// store behind the fault injector passes the conformance suite.
///
/// * Reads are retried on any retryable error.
/// * A `put` whose outcome is ambiguous is resolved with a consistent read: if the
///   stored record carries the RVN of the write, the write applied and is reported
///   as applied; otherwise it is sent again. A retried `put` that is rejected with
///   the current record carrying its own RVN is reported as applied too (the
///   earlier attempt won).
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
    attempts: u32,
}

impl<S: ConditionalStore> RetryingStore<S> {
    /// Wrap `inner`, giving each call up to 64 attempts.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            attempts: 64,
        }
    }

    /// Give each call up to `attempts` attempts (at least one).
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    async fn backoff(attempt: u32) {
        tokio::time::sleep(Duration::from_micros(100 << attempt.min(6))).await;
    }

    async fn read(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        let mut attempt = 0;
        loop {
            match self.inner.get(key).await {
                Err(e) if e.is_retryable() && attempt + 1 < self.attempts => {
                    attempt += 1;
                    Self::backoff(attempt).await;
                }
                other => return other,
            }
        }
    }
}

#[async_trait]
impl<S: ConditionalStore> ConditionalStore for RetryingStore<S> {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        self.read(key).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let mut attempt = 0;
        let mut maybe_applied = false;
        loop {
            match self.inner.put(key, expect.clone(), new.clone()).await {
                Ok(Outcome::Rejected { current }) if maybe_applied => {
                    return Ok(match current {
                        Some(record) if record.rvn == new.rvn => Outcome::Applied(record),
                        current => Outcome::Rejected { current },
                    });
                }
                Err(e) if e.is_retryable() && attempt + 1 < self.attempts => {
                    attempt += 1;
                    if e.is_ambiguous() {
                        maybe_applied = true;
                        match self.read(key).await? {
                            Some(record) if record.rvn == new.rvn => {
                                return Ok(Outcome::Applied(record));
                            }
                            _ => {}
                        }
                    }
                    Self::backoff(attempt).await;
                }
                other => return other,
            }
        }
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let mut attempt = 0;
        loop {
            let before = self.read(key).await?;
            match self.inner.delete(key, expect.clone()).await {
                Err(e) if e.is_retryable() && attempt + 1 < self.attempts => {
                    attempt += 1;
                    if e.is_ambiguous()
                        && let Some(record) = before
                        && self.read(key).await?.is_none()
                    {
                        return Ok(Outcome::Applied(record));
                    }
                    Self::backoff(attempt).await;
                }
                other => return other,
            }
        }
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let mut attempt = 0;
        loop {
            match self.inner.list(partition, cursor.clone(), limit).await {
                Err(e) if e.is_retryable() && attempt + 1 < self.attempts => {
                    attempt += 1;
                    Self::backoff(attempt).await;
                }
                other => return other,
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
