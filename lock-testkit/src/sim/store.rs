//! The simulation's store layers: [`Recorder`] tells the world what the store
//! applied, [`ReusesFences`] is the deliberately broken store, and [`ClientLink`]
//! is one client process's connection (latency, faults, pauses, crashes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::layer::{StoreCall, StoreLayer, StoreOp, StoreReply};
use lock_core::{ConditionalStore, FenceUpdate, StoreError};
use lock_memory::Fault;
use tokio::sync::watch;

use super::wall::Stamper;
use super::world::World;

/// Reports every applied write to the [`World`] at the instant it applies.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) world: Arc<World>,
}

#[async_trait]
impl StoreLayer for Recorder {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let key = call.key();
        let new = match &call {
            StoreCall::Put { new, .. } => Some(new.clone()),
            _ => None,
        };
        let many = match &call {
            StoreCall::PutMany { writes } => writes.clone(),
            _ => Vec::new(),
        };
        let reply = call.send(next).await?;
        if let (Some(key), Some(record)) = (key, reply.applied()) {
            match &new {
                Some(new) => self.world.applied_put(key, new, record),
                None => self.world.applied_delete(key, record),
            }
        }
        if let StoreReply::Many(lock_core::ManyOutcome::Applied(records)) = &reply {
            for (write, record) in many.iter().zip(records) {
                self.world.applied_put(&write.key, &write.new, record);
            }
        }
        Ok(reply)
    }
}

/// A broken store: an acquisition of a key that already has a record keeps its
/// fence instead of incrementing it, so two holders share a fence.
#[derive(Debug)]
pub(crate) struct ReusesFences;

#[async_trait]
impl StoreLayer for ReusesFences {
    async fn call(
        &self,
        mut call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        if let StoreCall::Put { key, new, .. } = &mut call
            && new.fence == FenceUpdate::Next
            && next.get(key).await?.is_some()
        {
            // The client sees the write as an acquisition, the recorder too.
            new.fence = FenceUpdate::Keep;
        }
        call.send(next).await
    }

    /// It breaks single writes only: it does not claim several at once.
    fn capabilities(&self, inner: lock_core::Capabilities) -> lock_core::Capabilities {
        inner.with_atomic_writes(None)
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
    pub(crate) gate: watch::Receiver<bool>,
    pub(crate) calls: Mutex<HashMap<String, u64>>,
    /// Stamps this client's writes with its wall clock, in a run on wall
    /// clocks.
    pub(crate) stamper: Option<Stamper>,
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
        // The injector's own draw (and its clamping of the probabilities); its
        // delay is not used here: the latency above is the link's.
        let (fault, _) = self.world.schedule.faults.draw(&mut rng);
        let fault = fault.filter(|_| self.world.faults_on());
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
}

#[async_trait]
impl StoreLayer for ClientLink {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let stream = match (call.op(), call.key()) {
            (StoreOp::Get, Some(key)) => format!("r{key}"),
            (_, Some(key)) => format!("w{key}"),
            (_, None) => "list".to_owned(),
        };
        self.wait_awake().await;
        self.alive()?;
        // Stamped as the request is built, after the client read its send
        // instant and before the request travels.
        if let Some(stamper) = &self.stamper {
            stamper.stamp(&call);
        }
        let (fault, before, after) = self.draw(&stream);
        tokio::time::sleep(before).await;
        self.alive()?;
        let result = match fault {
            Some(Fault::Throttled) => Err(StoreError::throttled("simulated throttle")),
            Some(Fault::Unavailable) => Err(StoreError::unavailable("simulated failure")),
            Some(Fault::AmbiguousNotApplied) => {
                Err(StoreError::ambiguous("simulated timeout before the store"))
            }
            _ => call.send(next).await,
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
