//! The simulation's store layers: [`Recorder`] tells the world what the store
//! applied, [`ReusesFences`] is the deliberately broken store, and [`ClientLink`]
//! is one client process's connection (latency, faults, pauses, crashes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{
    Capabilities, ConditionalStore, Cursor, Expect, FenceUpdate, LockKey, LockRecord, NewRecord,
    Outcome, Page, StoreError,
};
use lock_memory::Fault;
use tokio::sync::watch;

use super::world::World;

/// Reports every applied write to the [`World`] at the instant it applies.
#[derive(Debug)]
pub(crate) struct Recorder<S> {
    pub(crate) inner: S,
    pub(crate) world: Arc<World>,
}

#[async_trait]
impl<S: ConditionalStore> ConditionalStore for Recorder<S> {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        self.inner.get(key).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        let outcome = self.inner.put(key, expect, new.clone()).await?;
        if let Outcome::Applied(record) = &outcome {
            self.world.applied_put(key, &new, record);
        }
        Ok(outcome)
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        let outcome = self.inner.delete(key, expect).await?;
        if let Outcome::Applied(record) = &outcome {
            self.world.applied_delete(key, record);
        }
        Ok(outcome)
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner.list(partition, cursor, limit).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// A broken store: an acquisition of a key that already has a record keeps its
/// fence instead of incrementing it, so two holders share a fence.
#[derive(Debug)]
pub(crate) struct ReusesFences<S>(pub(crate) S);

#[async_trait]
impl<S: ConditionalStore> ConditionalStore for ReusesFences<S> {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        self.0.get(key).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        mut new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        if new.fence == FenceUpdate::Next && self.0.get(key).await?.is_some() {
            new.fence = FenceUpdate::Keep;
        }
        let outcome = self.0.put(key, expect, new).await?;
        // The client sees the write as an acquisition, the recorder too.
        Ok(outcome)
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        self.0.delete(key, expect).await
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.0.list(partition, cursor, limit).await
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

/// One client process's connection to the shared store: seeded latency and
/// faults, stalls while the process is paused, nothing at all once it crashed.
///
/// Faults and latencies are drawn per key from the run's seed and a per-key call
/// counter, so they do not depend on how the calls of different keys interleave.
#[derive(Debug)]
pub(crate) struct ClientLink {
    pub(crate) world: Arc<World>,
    pub(crate) client: usize,
    pub(crate) incarnation: u64,
    pub(crate) shared: Arc<dyn ConditionalStore>,
    pub(crate) gate: watch::Receiver<bool>,
    pub(crate) calls: Mutex<HashMap<String, u64>>,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser: spreads seeds that differ in a few bits.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl ClientLink {
    fn draw(&self, stream: &str) -> (Option<Fault>, Duration, Duration) {
        let n = {
            let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
            let n = calls.entry(stream.to_owned()).or_default();
            *n += 1;
            *n
        };
        let mut h = mix(self.world.schedule.seed);
        for b in stream.bytes() {
            h = mix(h ^ u64::from(b));
        }
        let seed = mix(h ^ mix(((self.client as u64) << 32) ^ self.incarnation) ^ mix(n));
        let mut rng = fastrand::Rng::with_seed(seed);
        let (low, high) = self.world.schedule.latency;
        let latency = low + (high - low).mul_f64(rng.f64());
        let f = self.world.schedule.faults;
        let r = rng.f64();
        let fault = if !self.world.faults_on() {
            None
        } else if r < f.throttle {
            Some(Fault::Throttled)
        } else if r < f.throttle + f.unavailable {
            Some(Fault::Unavailable)
        } else if r < f.throttle + f.unavailable + f.ambiguous_applied {
            Some(Fault::AmbiguousApplied)
        } else if r < f.throttle + f.unavailable + f.ambiguous_applied + f.ambiguous_not_applied {
            Some(Fault::AmbiguousNotApplied)
        } else {
            None
        };
        (fault, latency / 2, latency - latency / 2)
    }

    async fn wait_awake(&self) {
        let mut gate = self.gate.clone();
        // The sender lives in the world for the whole run.
        let _ = gate.wait_for(|paused| !*paused).await;
    }

    fn alive(&self) -> Result<(), StoreError> {
        if !self.world.is_running(self.client, self.incarnation) {
            return Err(StoreError::unavailable("the process crashed"));
        }
        Ok(())
    }

    async fn call<T, F>(&self, stream: &str, op: F) -> Result<T, StoreError>
    where
        F: AsyncOp<T>,
    {
        self.wait_awake().await;
        self.alive()?;
        let (fault, before, after) = self.draw(stream);
        tokio::time::sleep(before).await;
        self.alive()?;
        let result = match fault {
            Some(Fault::Throttled) => Err(StoreError::throttled("simulated throttle")),
            Some(Fault::Unavailable) => Err(StoreError::unavailable("simulated failure")),
            Some(Fault::AmbiguousNotApplied) => {
                Err(StoreError::ambiguous("simulated timeout before the store"))
            }
            _ => op.run(self.shared.as_ref()).await,
        };
        tokio::time::sleep(after).await;
        // A paused process reads the response when it wakes.
        self.wait_awake().await;
        match fault {
            Some(Fault::AmbiguousApplied) => Err(StoreError::ambiguous(
                "simulated lost response (the call applied)",
            )),
            _ => result,
        }
    }
}

/// One store call, boxed so [`ClientLink::call`] can wrap any of them.
#[async_trait]
trait AsyncOp<T>: Send {
    async fn run(self, store: &dyn ConditionalStore) -> Result<T, StoreError>;
}

struct Get<'a>(&'a LockKey);
struct Put<'a>(&'a LockKey, Expect, NewRecord);
struct Delete<'a>(&'a LockKey, Expect);
struct List<'a>(Option<&'a str>, Option<Cursor>, usize);

#[async_trait]
impl AsyncOp<Option<LockRecord>> for Get<'_> {
    async fn run(self, store: &dyn ConditionalStore) -> Result<Option<LockRecord>, StoreError> {
        store.get(self.0).await
    }
}

#[async_trait]
impl AsyncOp<Outcome> for Put<'_> {
    async fn run(self, store: &dyn ConditionalStore) -> Result<Outcome, StoreError> {
        store.put(self.0, self.1, self.2).await
    }
}

#[async_trait]
impl AsyncOp<Outcome> for Delete<'_> {
    async fn run(self, store: &dyn ConditionalStore) -> Result<Outcome, StoreError> {
        store.delete(self.0, self.1).await
    }
}

#[async_trait]
impl AsyncOp<Page> for List<'_> {
    async fn run(self, store: &dyn ConditionalStore) -> Result<Page, StoreError> {
        store.list(self.0, self.1, self.2).await
    }
}

#[async_trait]
impl ConditionalStore for ClientLink {
    async fn get(&self, key: &LockKey) -> Result<Option<LockRecord>, StoreError> {
        self.call(&format!("r{key}"), Get(key)).await
    }

    async fn put(
        &self,
        key: &LockKey,
        expect: Expect,
        new: NewRecord,
    ) -> Result<Outcome, StoreError> {
        self.call(&format!("w{key}"), Put(key, expect, new)).await
    }

    async fn delete(&self, key: &LockKey, expect: Expect) -> Result<Outcome, StoreError> {
        self.call(&format!("w{key}"), Delete(key, expect)).await
    }

    async fn list(
        &self,
        partition: Option<&str>,
        cursor: Option<Cursor>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.call("list", List(partition, cursor, limit)).await
    }

    fn capabilities(&self) -> Capabilities {
        self.shared.capabilities()
    }
}
