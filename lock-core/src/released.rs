//! Releases a store announces to waiters in other processes.
//!
//! Without announcements, a waiter in another process learns that a lock
//! was released only when it next polls: a hand-off costs up to a poll
//! period. A store that can tell (PostgreSQL's `NOTIFY`, an etcd watch,
//! Redis pub/sub) gives the client a [`ReleaseFeed`]
//! ([`ConditionalStore::release_feed`](crate::ConditionalStore::release_feed)):
//! a waiter subscribes, and when a release of its lock is announced it tries
//! at once.
//!
//! An announcement is only a hint. It is never trusted for safety: the
//! waiter's write is conditional like any other, and a lost, late, repeated
//! or false announcement costs at most a poll period or a refused write.
//! Waiters keep polling, with jitter, at their poll period.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::broadcast;

use crate::LockKey;

/// How many announcements a slow waiter may fall behind before it misses
/// some (it then wakes, as if its own had come).
const BACKLOG: usize = 1024;

/// The listener a feed starts at its first subscriber.
type Start = Box<dyn FnOnce(ReleaseAnnouncer) + Send>;

/// The releases one store announces; cheap to clone. Made by a store, which
/// gives it the code that listens to the server, run once, at the first
/// [`subscribe`](Self::subscribe) (so a store nobody waits on opens no
/// listening connection).
#[derive(Clone)]
pub struct ReleaseFeed {
    inner: Arc<Inner>,
}

struct Inner {
    sender: broadcast::Sender<LockKey>,
    start: Mutex<Option<Start>>,
    /// Dropped with the feed: listeners waiting on
    /// [`ReleaseAnnouncer::closed`] stop then, even on a quiet channel.
    _alive: tokio::sync::watch::Sender<()>,
    alive: tokio::sync::watch::Receiver<()>,
}

impl std::fmt::Debug for ReleaseFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseFeed")
            .field("subscribers", &self.inner.sender.receiver_count())
            .finish_non_exhaustive()
    }
}

impl ReleaseFeed {
    /// A feed whose announcements come from `listen`, called once with the
    /// [`ReleaseAnnouncer`] when the first waiter subscribes (inside the
    /// waiter's runtime, so it may spawn a task). The listener should stop
    /// once [`ReleaseAnnouncer::announce`] returns false: nobody holds the
    /// feed any more.
    pub fn new(listen: impl FnOnce(ReleaseAnnouncer) + Send + 'static) -> Self {
        let (sender, _) = broadcast::channel(BACKLOG);
        let (alive_sender, alive) = tokio::sync::watch::channel(());
        Self {
            inner: Arc::new(Inner {
                sender,
                start: Mutex::new(Some(Box::new(listen))),
                _alive: alive_sender,
                alive,
            }),
        }
    }

    /// A feed announced by hand (tests, a store in this process): nothing
    /// starts when a waiter subscribes.
    pub fn manual() -> (Self, ReleaseAnnouncer) {
        let feed = Self::new(|_| {});
        let announcer = feed.announcer();
        (feed, announcer)
    }

    /// Announce that `key` was released.
    pub fn announce(&self, key: LockKey) {
        // No subscriber: nobody waits.
        let _ = self.inner.sender.send(key);
    }

    /// A handle that announces without keeping the feed alive.
    pub fn announcer(&self) -> ReleaseAnnouncer {
        ReleaseAnnouncer {
            inner: Arc::downgrade(&self.inner),
            alive: self.inner.alive.clone(),
        }
    }

    /// Watch the announcements from now on (the listener starts at the
    /// first call).
    pub fn subscribe(&self) -> ReleaseWatch {
        let receiver = self.inner.sender.subscribe();
        let start = self
            .inner
            .start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(start) = start {
            start(self.announcer());
        }
        ReleaseWatch { receiver }
    }
}

/// What a store's listener announces releases with; it does not keep the
/// feed alive.
#[derive(Clone, Debug)]
pub struct ReleaseAnnouncer {
    inner: Weak<Inner>,
    alive: tokio::sync::watch::Receiver<()>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseFeed").finish_non_exhaustive()
    }
}

impl ReleaseAnnouncer {
    /// Announce that `key` was released: false once the feed is gone (the
    /// listener may stop).
    pub fn announce(&self, key: LockKey) -> bool {
        match self.inner.upgrade() {
            Some(inner) => {
                let _ = inner.sender.send(key);
                true
            }
            None => false,
        }
    }

    /// Whether the feed is gone (the listener may stop).
    pub fn is_closed(&self) -> bool {
        self.inner.strong_count() == 0
    }

    /// Resolves once the feed is gone: a listener selects on it beside its
    /// server's messages, so it stops (and closes its connection) when the
    /// store is dropped, even on a channel where nothing is released.
    pub async fn closed(&self) {
        let mut alive = self.alive.clone();
        while alive.changed().await.is_ok() {}
    }
}

/// One waiter's subscription to a [`ReleaseFeed`].
#[derive(Debug)]
pub struct ReleaseWatch {
    receiver: broadcast::Receiver<LockKey>,
}

impl ReleaseWatch {
    /// Wait until a release `wanted` says is of interest is announced. A
    /// waiter that fell behind wakes too (its release may be among those it
    /// missed). Never returns once the feed is gone: polling goes on.
    pub async fn released(&mut self, wanted: impl Fn(&LockKey) -> bool) {
        loop {
            match self.receiver.recv().await {
                Ok(key) if wanted(&key) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// Whether a released key belongs to the locks named `name` that a
/// semaphore or a reader-writer lock keeps (sort keys of the partition
/// `name`, or partitions `name#...` on a store without sort keys).
pub(crate) fn in_partition(name: &str) -> impl Fn(&LockKey) -> bool + use<> {
    let name = name.to_owned();
    move |key: &LockKey| {
        let partition = key.partition();
        partition == name
            || partition
                .strip_prefix(name.as_str())
                .is_some_and(|rest| rest.starts_with('#'))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_watch_wakes_for_its_key_only_and_the_listener_starts_once() {
        let started = Arc::new(AtomicUsize::new(0));
        let feed = ReleaseFeed::new({
            let started = started.clone();
            move |_| {
                started.fetch_add(1, Ordering::SeqCst);
            }
        });
        assert_eq!(started.load(Ordering::SeqCst), 0, "nobody waits yet");
        let mut watch = feed.subscribe();
        let _second = feed.subscribe();
        assert_eq!(started.load(Ordering::SeqCst), 1);
        feed.announce(LockKey::new("other"));
        feed.announce(LockKey::new("job"));
        let woke = tokio::time::timeout(
            Duration::from_secs(1),
            watch.released(|key| *key == LockKey::new("job")),
        )
        .await;
        assert!(woke.is_ok());
        let nothing = tokio::time::timeout(
            Duration::from_secs(1),
            watch.released(|key| *key == LockKey::new("job")),
        )
        .await;
        assert!(nothing.is_err(), "no second announcement");
    }

    #[tokio::test(start_paused = true)]
    async fn an_announcer_outliving_its_feed_says_so() {
        let (feed, announcer) = ReleaseFeed::manual();
        assert!(announcer.announce(LockKey::new("job")));
        let still_open = tokio::time::timeout(Duration::from_secs(1), announcer.closed()).await;
        assert!(still_open.is_err(), "the feed lives");
        drop(feed);
        assert!(announcer.is_closed());
        assert!(!announcer.announce(LockKey::new("job")));
        let closed = tokio::time::timeout(Duration::from_secs(1), announcer.closed()).await;
        assert!(closed.is_ok(), "a listener waiting on closed() stops");
    }
}
