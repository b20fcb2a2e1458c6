//! Per-call options: [`AcquireOptions`] and [`ListOptions`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{Cursor, DataUpdate, LockInfo};

/// How one [`acquire`](crate::LockClient::acquire) behaves.
///
/// The default waits long enough to take over a holder that crashed (see
/// [`wait`](Self::wait)), keeps the data stored with the lock as the previous
/// holder left it, creates the record when absent, is not reentrant, keeps the
/// record on release and sets no hold-time limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct AcquireOptions {
    /// `None`: the default budget, `lease × (1 + drift) + refresh period`.
    pub(crate) wait: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) refresh_period: Option<Duration>,
    pub(crate) data: DataUpdate,
    pub(crate) lease: Option<Duration>,
    pub(crate) only_if_exists: bool,
    pub(crate) reentrant: bool,
    pub(crate) delete_on_release: bool,
    pub(crate) busy_unless_dead: bool,
    pub(crate) observer: Option<WaitObserver>,
}

/// What an acquire calls with each record it learns while it waits (see
/// [`AcquireOptions::on_wait`]).
#[derive(Clone)]
pub(crate) struct WaitObserver(Arc<Observe>);

/// The observer's signature.
type Observe = dyn Fn(Option<&LockInfo>) + Send + Sync;

impl WaitObserver {
    pub(crate) fn saw(&self, info: Option<&LockInfo>) {
        (self.0)(info);
    }
}

impl fmt::Debug for WaitObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WaitObserver")
    }
}

impl PartialEq for WaitObserver {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for WaitObserver {}

impl AcquireOptions {
    /// The defaults: wait long enough to take over a crashed holder, the stored
    /// data kept.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wait up to `budget` for the lock (zero = one attempt; `Duration::MAX` =
    /// forever).
    ///
    /// Without this the budget is zero with
    /// [`busy_unless_dead`](Self::busy_unless_dead) (a wait rule of its own),
    /// and otherwise `lease × (1 + drift) + refresh period` (21.2 s
    /// with the client's defaults), the lease being this acquire's
    /// ([`lease`](Self::lease)) or the client's: long enough to take over a
    /// holder that crashed without releasing, which can only happen once its
    /// record has kept one version for the holder's lease × (1 + drift), plus
    /// one poll. (A holder that wrote a longer lease than this client's is
    /// waited for until the budget ends.)
    ///
    /// The client remembers what it has seen of each key across acquires (the
    /// last 10,000 keys), so repeated short attempts add up: a loop of
    /// one-attempt acquires takes over a dead holder as one long wait would.
    ///
    /// While another task of this client holds or is acquiring the key, the
    /// acquire waits its turn inside the client (first come, first served) and
    /// is handed the lock when that task releases it; with a zero budget it
    /// fails at once with [`LockError::AlreadyHeld`](crate::LockError::AlreadyHeld),
    /// unless the key is only being released (then it waits for that).
    pub fn wait(mut self, budget: Duration) -> Self {
        self.wait = Some(budget);
        self
    }

    /// Keep the lock held for at least `hold` after it was acquired, however
    /// soon it is released: what stops a job that finished in two seconds
    /// from running again on a host whose timer fires a second late.
    ///
    /// A lock released before `hold` has passed since its acquire (by
    /// `release`, a dropped guard, the end of `with_lock`'s work, or
    /// `shutdown`) is not released: one final write gives its record a lease
    /// covering the rest of `hold`, and no heartbeat follows. That write's
    /// record version is marked final, so an acquire with
    /// [`busy_unless_dead`](Self::busy_unless_dead) counts the lock as busy at
    /// once instead of watching for a dead holder; an acquire with a wait
    /// budget takes it over when the rest of `hold` (× (1 + drift)) has passed.
    /// A task of this client waiting for the key is not handed it either.
    /// Released after `hold`, the lock is released as usual.
    ///
    /// Counted on this client's monotonic clock from when the acquire's write
    /// was sent, so a second host whose timer fires up to `hold` after this
    /// acquire (its clock skew plus its lateness) finds the lock held. It does
    /// not extend a lock that is lost, and it cannot be combined with
    /// [`delete_on_release`](Self::delete_on_release) (the record must stay).
    /// At most a year.
    pub fn min_hold(mut self, hold: Duration) -> Self {
        self.min_hold = Some(hold);
        self
    }

    /// Hold the lock for at most `limit` after it was acquired: at `limit`
    /// heartbeats stop, and the guard reports the lease lost with
    /// [`LostReason::MaxHold`](crate::LostReason::MaxHold) ([`LockView::lost`](crate::LockView::lost)
    /// resolves, [`LockView::state`](crate::LockView::state) says so, and
    /// [`with_lock`](crate::LockClient::with_lock) cancels its work). The
    /// record keeps the lease of its last heartbeat until the guard is
    /// released or dropped, which releases it. For work that must never run
    /// longer than `limit`, whatever it does. Not zero, and not shorter than
    /// [`min_hold`](Self::min_hold).
    pub fn max_hold(mut self, limit: Duration) -> Self {
        self.max_hold = Some(limit);
        self
    }

    /// Poll period while waiting, overriding the client's refresh period.
    pub fn refresh_period(mut self, period: Duration) -> Self {
        self.refresh_period = Some(period);
        self
    }

    /// Hold this lock with its own lease instead of the client's: a 10 s leader
    /// lock and a 10 min batch lock from one client. Heartbeats scale with it
    /// (the client's period × this lease / the client's lease: a quarter of it
    /// by default) and so does the safety margin unless the client set one;
    /// the lease is written in the record, so waiters wait it out. It must
    /// meet the client's own rules (a safe time left after drift and margin,
    /// longer than a heartbeat period; at most a year), or the acquire fails
    /// with [`LockError::InvalidConfig`](crate::LockError::InvalidConfig)
    /// before anything is written. (A reentrant acquire that joins an
    /// acquisition of this client takes it as it is, lease and data: this
    /// option and the data options do not apply to it.)
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Store these bytes with the lock, replacing what the previous holder
    /// left (readable by anyone with [`get_lock`](crate::LockClient::get_lock)).
    /// An acquire that fails after its write applied (its answer lost) has
    /// still replaced it: the clean-up releases the record as written.
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = DataUpdate::Replace(data.into());
        self
    }

    /// Remove the data the previous holder left.
    pub fn clear_data(mut self) -> Self {
        self.data = DataUpdate::Clear;
        self
    }

    /// What the acquire does to the stored data, spelt out: [`DataUpdate::Keep`]
    /// (the default: a job resuming from the previous holder's checkpoint finds
    /// it in [`LockView::data`](crate::LockView::data) and in
    /// [`took_over`](crate::LockView::took_over), with no read before the
    /// acquire to race with), [`DataUpdate::Replace`] or [`DataUpdate::Clear`].
    pub fn data_update(mut self, update: DataUpdate) -> Self {
        self.data = update;
        self
    }

    /// Only acquire a lock whose record already exists (held or released);
    /// [`LockError::NotFound`](crate::LockError::NotFound) otherwise.
    pub fn only_if_exists(mut self, yes: bool) -> Self {
        self.only_if_exists = yes;
        self
    }

    /// If this client already holds the lock and trusts it (its lease safe,
    /// no release begun), return another guard for the same acquisition
    /// (same fence) instead of waiting for it. A lock it holds but no longer
    /// trusts is not shared: the acquire then waits for it like any other
    /// acquire of this client (busy at once with a zero wait), so it never
    /// returns a guard that is already unsafe. For nested use by one logical
    /// owner only (a function that takes the lock, called by one that
    /// already holds it): tasks that must exclude each other must not use
    /// it. The lock is released when the last guard is.
    pub fn reentrant(mut self, yes: bool) -> Self {
        self.reentrant = yes;
        self
    }

    /// Call `observer` with the lock's record each time this acquire learns it
    /// while it waits: the reply to each attempt and each poll (`None`: no
    /// record). For progress reports ("held by web-3, fence 41") that cost no
    /// reads of their own. It runs inside the acquire: keep it quick, and never
    /// block in it.
    pub fn on_wait(mut self, observer: impl Fn(Option<&LockInfo>) + Send + Sync + 'static) -> Self {
        self.observer = Some(WaitObserver(Arc::new(observer)));
        self
    }

    /// Busy unless dead: give up as soon as the holder is seen alive (its record
    /// changed while this client watched), but keep watching a record that does
    /// not change until it may be taken over (`lease × (1 + drift)` after it was
    /// first seen), whatever the wait budget. With a zero budget this is what a
    /// cron job wants: skip a live holder within about one of its heartbeat
    /// periods, take over a crashed one's lock instead of skipping forever.
    pub fn busy_unless_dead(mut self, yes: bool) -> Self {
        self.busy_unless_dead = yes;
        self
    }

    /// Delete the record on release instead of marking it released. The next
    /// acquisition creates the record afresh, with a fence as the store's
    /// [`Capabilities::fences_after_deletion`](crate::Capabilities::fences_after_deletion)
    /// says: above every earlier fence of the key on a store that remembers
    /// deleted fences, and on one that starts from the clock's floor as long as
    /// the clock that creates the record again is not behind the one that
    /// created it before by more than the time between a release and the next
    /// acquisition (hosts whose clocks differ by more are the case it misses);
    /// 1 again on a store whose fences restart. Where a resource checks the
    /// fences of this key, keeping the record (the default) never depends on
    /// clocks.
    pub fn delete_on_release(mut self, yes: bool) -> Self {
        self.delete_on_release = yes;
        self
    }
}

/// Which locks [`list_locks`](crate::LockClient::list_locks) and
/// [`list_all`](crate::LockClient::list_all) return, and how many per page.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct ListOptions {
    pub(crate) partition: Option<String>,
    pub(crate) cursor: Option<Cursor>,
    pub(crate) limit: usize,
}

impl Default for ListOptions {
    fn default() -> Self {
        Self {
            partition: None,
            cursor: None,
            limit: 100,
        }
    }
}

impl ListOptions {
    /// The first page of up to 100 locks of every partition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the locks of this partition.
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Continue from the `next` cursor of a previous page.
    pub fn cursor(mut self, cursor: Option<Cursor>) -> Self {
        self.cursor = cursor;
        self
    }

    /// At most this many locks per page (at least 1).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit.max(1);
        self
    }
}
