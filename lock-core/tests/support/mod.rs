//! What the lock-core integration tests share: a client with short timings, and
//! a store whose replies arrive late.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::layer::{StoreCall, StoreLayer, StoreReply};
use lock_core::{AcquireOptions, ConditionalStore, Expect, LockClient, NewRecord, StoreError};
use lock_memory::MemoryStore;
use tokio::time::Instant;

/// The lease of [`client`]: safe time 10 s × 0.99 − 0.5 s = 9.4 s, takeover after
/// 10.1 s, heartbeat every 2 s, polls every 0.25–0.5 s.
pub const LEASE: Duration = Duration::from_secs(10);

/// A client with [`LEASE`] and short, fixed timings.
pub fn client(store: impl ConditionalStore, owner: &str) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(LEASE)
        .heartbeat_period(Duration::from_secs(2))
        .refresh_period(Duration::from_millis(500))
        .max_clock_drift(0.01)
        .safety_margin(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// Acquire options waiting up to `budget`.
pub fn wait(budget: Duration) -> AcquireOptions {
    AcquireOptions::new().wait(budget)
}

/// Another task of `client` asking for `name` with `options`.
pub fn waiting(
    client: &LockClient,
    name: &'static str,
    options: AcquireOptions,
) -> tokio::task::JoinHandle<Result<lock_core::LockGuard, lock_core::LockError>> {
    let client = client.clone();
    tokio::spawn(async move { client.acquire(name, options).await })
}

/// `key` held by a client ("dead") that then died, acquired with `options`:
/// its record stays, nobody heartbeats it.
pub async fn dead_holder(store: &MemoryStore, key: &str, options: AcquireOptions) {
    let dead = client(store.clone(), "dead");
    let detached = dead
        .acquire(key, options)
        .await
        .unwrap()
        .detach()
        .await
        .unwrap();
    assert_eq!(detached.fence(), lock_core::Fence(1));
}

/// One call a [`Delayed`] store served: when it was sent and when its reply left.
#[derive(Clone, Debug)]
pub struct Served {
    pub op: &'static str,
    pub expect: Option<Expect>,
    pub new: Option<NewRecord>,
    pub sent: Instant,
    pub replied: Instant,
}

/// A memory store whose calls take effect at once and whose replies arrive late:
/// a request already on the wire, a response still on its way back. The delays
/// can be changed while clients use it.
#[derive(Clone, Debug)]
pub struct Delayed {
    pub inner: MemoryStore,
    delays: Arc<Mutex<Delays>>,
    served: Arc<Mutex<Vec<Served>>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Delays {
    put: Duration,
    get: Duration,
    delete: Duration,
}

impl Delayed {
    pub fn new(inner: MemoryStore) -> Self {
        Self {
            inner,
            delays: Arc::default(),
            served: Arc::default(),
        }
    }

    /// Replies to writes (put, delete, put_many) arrive `delay` after they
    /// applied.
    pub fn delay_writes(&self, delay: Duration) {
        let mut delays = self.delays.lock().unwrap();
        delays.put = delay;
        delays.delete = delay;
    }

    /// Replies to reads arrive `delay` after the read.
    pub fn delay_reads(&self, delay: Duration) {
        self.delays.lock().unwrap().get = delay;
    }

    /// Every call served so far, in the order they were sent.
    pub fn served(&self) -> Vec<Served> {
        self.served.lock().unwrap().clone()
    }

    /// The puts served so far.
    pub fn puts(&self) -> Vec<Served> {
        self.served()
            .into_iter()
            .filter(|call| call.op == "put")
            .collect()
    }
}

#[async_trait::async_trait]
impl StoreLayer for Delayed {
    async fn call(
        &self,
        call: StoreCall<'_>,
        next: &dyn ConditionalStore,
    ) -> Result<StoreReply, StoreError> {
        let delays = *self.delays.lock().unwrap();
        let (op, expect, new, delay) = match &call {
            StoreCall::Get { .. } => ("get", None, None, delays.get),
            StoreCall::Put { expect, new, .. } => {
                ("put", Some(expect.clone()), Some(new.clone()), delays.put)
            }
            StoreCall::Delete { expect, .. } => {
                ("delete", Some(expect.clone()), None, delays.delete)
            }
            StoreCall::PutMany { .. } => ("put_many", None, None, delays.put),
            _ => return call.send(next).await,
        };
        let result = call.send(next).await;
        let sent = Instant::now();
        let index = {
            let mut served = self.served.lock().unwrap();
            served.push(Served {
                op,
                expect,
                new,
                sent,
                replied: sent + delay,
            });
            served.len() - 1
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.served.lock().unwrap()[index].replied = Instant::now();
        result
    }
}

lock_core::store_via_layer!(impl[] for Delayed, |this| (this, &this.inner as &dyn ConditionalStore));

/// `ended` (what `with_lock` or `lead` returned) is the work's cancellation
/// because its lock was let go: `LockError::Lost` with `LostReason::Released`.
pub fn assert_lost_to_release<T: std::fmt::Debug>(ended: &Result<T, lock_core::LockError>) {
    assert!(
        matches!(
            ended,
            Err(lock_core::LockError::Lost {
                reason: lock_core::LostReason::Released,
                ..
            })
        ),
        "{ended:?}"
    );
}
