//! Leader election: a candidate that campaigns for one lock until it resigns or
//! is dropped, on the lock client's own acquire, heartbeats and release.
//!
//! The campaign is a loop of the client's public operations, in one task:
//! acquire the key (waiting as long as it takes), lead while the lease is safe,
//! step down (release) the moment it is not, and campaign again; any error but a
//! shut-down client is retried with jittered, growing pauses. It never gives up
//! on its own. The role is published in a [`watch`] channel, written only by
//! that task, so "stopped leading" (a `Leader` followed by anything else) can
//! only be seen by a candidate that led.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::{
    AcquireOptions, ConfigError, Fence, Instant, LockClient, LockError, LockInfo, LockKey,
    LockView, LostReason,
};

/// The shortest pause [`ElectionOptions::retry`] takes.
const MIN_RETRY: Duration = Duration::from_millis(10);

/// How a candidate campaigns; see [`LockClient::elect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct ElectionOptions {
    lease: Option<Duration>,
    data: Option<Vec<u8>>,
    retry_min: Duration,
    retry_max: Duration,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl ElectionOptions {
    /// The defaults: the client's lease, no data, and after an error a pause of
    /// 1 s growing to 30 s (jittered) before campaigning again.
    pub fn new() -> Self {
        Self {
            lease: None,
            data: None,
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(30),
        }
    }

    /// The leader's lease, instead of the client's: how long the fleet goes
    /// without a leader after the leader's process dies is about
    /// `lease × (1 + drift)` plus a poll.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Data the leader stores with the lock (its address, say), which
    /// followers see in [`Role::Follower`].
    pub fn data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = Some(data.into());
        self
    }

    /// After an error (the store refused or failed for longer than an
    /// acquire retries), pause `min` (at least 10 ms) before campaigning
    /// again, doubling up to `max`, each pause jittered down by up to a half.
    pub fn retry(mut self, min: Duration, max: Duration) -> Self {
        // A zero pause would retry an error no retry can fix in a tight loop.
        self.retry_min = min.max(MIN_RETRY);
        self.retry_max = max.max(self.retry_min);
        self
    }
}

/// Where a candidate stands.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// Campaigning with no leader seen: the key is vacant or released (the
    /// next poll takes it), the candidate waits in its client's queue behind
    /// another candidate of the same client, or it is pausing after an error.
    Campaigning,
    /// Another candidate leads, as the record this candidate last read says.
    /// Learnt from the reads the campaign makes anyway (no extra reads); the
    /// record may be a crashed leader's until its lease has run out.
    Follower {
        /// The leader's owner name (its client's).
        leader: String,
        /// The leader's fence: it rises with each new leadership, so it counts
        /// the transitions.
        fence: Fence,
        /// The data the leader stored with the lock.
        data: Option<Vec<u8>>,
    },
    /// This candidate leads, with a safe lease.
    Leader {
        /// The fence of this leadership: pass it with every write the leader
        /// makes, so a resource can refuse a deposed leader's writes.
        fence: Fence,
        /// When it became leader (tokio time).
        since: Instant,
    },
}

/// A leadership held: what the leader's work needs. Cheap to clone; it does not
/// keep the lock (the campaign does).
#[derive(Clone, Debug)]
pub struct Leadership {
    view: LockView,
    since: Instant,
    /// True once the candidate stepped down, resigned or was dropped: from
    /// then on the leadership is not to be trusted, even while the release
    /// of its lock is still on its way to the store.
    deposed: watch::Receiver<bool>,
}

impl Leadership {
    /// The fence of this leadership.
    pub fn fence(&self) -> Fence {
        self.view.fence()
    }

    /// When it began (tokio time).
    pub fn since(&self) -> Instant {
        self.since
    }

    /// The lock under the leadership: its state, data and watches.
    pub fn view(&self) -> &LockView {
        &self.view
    }

    /// Whether the leadership can be trusted now: the lease is safe and the
    /// candidate has not stepped down, resigned or been dropped.
    pub fn is_safe(&self) -> bool {
        !*self.deposed.borrow() && self.view.is_safe()
    }

    /// Resolves as soon as the leadership can no longer be trusted (the lease
    /// is in danger or lost, or the candidate stepped down, resigned or was
    /// dropped, which reads as [`LostReason::Released`]), with the reason.
    pub fn until_unsafe(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let lease = self.view.until_unsafe();
        let mut deposed = self.deposed.clone();
        async move {
            tokio::select! {
                reason = lease => reason,
                // A closed channel: the campaign is gone, and so is its lock.
                _ = deposed.wait_for(|deposed| *deposed) => LostReason::Released,
            }
        }
    }
}

/// What the campaign task publishes: the role, and the leadership to hand to
/// `leadership()` callers, updated together.
#[derive(Clone, Debug)]
struct Standing {
    role: Role,
    leadership: Option<Leadership>,
    /// How many times this candidate has been elected.
    terms: u64,
    /// The campaign has ended (the client shut down, or the candidate resigned).
    ended: bool,
}

/// A candidate in a leader election, campaigning in the background from
/// [`LockClient::elect`] until [`resign`](Self::resign)ed or dropped (a drop
/// stops the campaign and releases the lock if it leads, in the background).
#[derive(Debug)]
#[must_use = "dropping the election ends its campaign"]
pub struct Election {
    watcher: ElectionWatcher,
    board: Arc<Board>,
    resign: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), LockError>>>,
}

/// A view of one [`Election`]'s candidate, for other tasks: its role, and
/// its leadership to wait for or lead under. Cheap to clone; it neither
/// keeps the campaign going nor ends it (the `Election` does).
#[derive(Clone, Debug)]
pub struct ElectionWatcher {
    key: LockKey,
    standing: watch::Receiver<Standing>,
    roles: watch::Receiver<Role>,
}

impl LockClient {
    /// Campaign to lead `key` among every candidate of every client on this
    /// store: an [`Election`] that acquires the key (waiting as long as it
    /// takes), leads while the lease is safe, steps down the moment it is not,
    /// and campaigns again, after a loss, a store outage or any error (with
    /// jittered pauses), until resigned or dropped.
    ///
    /// Candidates of one client queue inside it like any acquires of one key:
    /// only the first polls the store, and a leader that resigns hands the lock
    /// to the next local candidate in one write. With no local candidate
    /// waiting, resigning releases the record and another process's candidate
    /// takes it at its next poll.
    ///
    /// Refused before anything is written when the key or data do not fit the
    /// store, the lease is invalid, or there is no tokio runtime to campaign on.
    pub fn elect(
        &self,
        key: impl Into<LockKey>,
        options: ElectionOptions,
    ) -> Result<Election, LockError> {
        let key = key.into();
        self.inner.ensure_running()?;
        self.inner.validate_input(&key, options.data.as_deref())?;
        if let Some(lease) = options.lease {
            self.inner.config.check_acquire_lease(lease)?;
        }
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime {
                what: "LockClient::elect",
            })?;
        let (standing_tx, standing) = watch::channel(Standing {
            role: Role::Campaigning,
            leadership: None,
            terms: 0,
            ended: false,
        });
        let (roles_tx, roles) = watch::channel(Role::Campaigning);
        let (resign, resigned) = oneshot::channel();
        let board = Arc::new(Board {
            standing: standing_tx,
            roles: roles_tx,
            term: std::sync::Mutex::new(Term::default()),
        });
        let campaign = Campaign {
            client: self.clone(),
            key: key.clone(),
            options,
            board: board.clone(),
        };
        let task = runtime.spawn(campaign.run(resigned));
        Ok(Election {
            board,
            watcher: ElectionWatcher {
                key,
                standing,
                roles,
            },
            resign: Some(resign),
            task: Some(task),
        })
    }
}

impl ElectionWatcher {
    /// The key campaigned for.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// This candidate's role now.
    pub fn role(&self) -> Role {
        self.roles.borrow().clone()
    }

    /// Whether this candidate leads now with a safe lease (checked at this
    /// instant, not only as last published).
    pub fn is_leader(&self) -> bool {
        self.standing
            .borrow()
            .leadership
            .as_ref()
            .is_some_and(Leadership::is_safe)
    }

    /// A watch of the role: `changed()` wakes on every change.
    pub fn watch(&self) -> watch::Receiver<Role> {
        self.roles.clone()
    }

    /// How many times this candidate has been elected.
    pub fn terms(&self) -> u64 {
        self.standing.borrow().terms
    }

    /// Wait until this candidate leads, and return the leadership.
    /// [`LockError::Shutdown`] once the campaign has ended (the client shut
    /// down, or the candidate resigned).
    pub async fn leadership(&self) -> Result<Leadership, LockError> {
        let mut standing = self.standing.clone();
        let found = standing
            .wait_for(|standing| {
                standing.ended
                    || standing
                        .leadership
                        .as_ref()
                        .is_some_and(Leadership::is_safe)
            })
            .await;
        match found {
            Ok(standing) => standing.leadership.clone().ok_or(LockError::Shutdown),
            // The campaign task is gone (it panicked): nothing will lead.
            Err(_) => Err(LockError::Shutdown),
        }
    }

    /// Wait until this candidate leads, then run `work` with the leadership,
    /// cancelling it (dropping its future) the moment the leadership can no
    /// longer be trusted: `Ok` with what `work` returned, or
    /// [`LockError::Lost`] with the reason it was cancelled. The campaign goes
    /// on either way; call `lead` in a loop for work that runs in every term.
    pub async fn lead<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.leadership().await?;
        let untrusted = leadership.until_unsafe();
        // The step-down's release waits for the work to be dropped.
        let working = leadership.view.begin_work();
        let outcome = tokio::select! {
            biased;
            reason = untrusted => Err(LockError::Lost {
                key: self.key.clone(),
                reason,
            }),
            value = work(leadership) => Ok(value),
        };
        drop(working);
        outcome
    }
}

impl Election {
    /// A view of this candidate for other tasks (it does not keep the
    /// campaign going).
    pub fn watcher(&self) -> ElectionWatcher {
        self.watcher.clone()
    }

    /// The key campaigned for.
    pub fn key(&self) -> &LockKey {
        self.watcher.key()
    }

    /// This candidate's role now.
    pub fn role(&self) -> Role {
        self.watcher.role()
    }

    /// Whether this candidate leads now with a safe lease (checked at this
    /// instant, not only as last published).
    pub fn is_leader(&self) -> bool {
        self.watcher.is_leader()
    }

    /// A watch of the role: `changed()` wakes on every change.
    pub fn watch(&self) -> watch::Receiver<Role> {
        self.watcher.watch()
    }

    /// How many times this candidate has been elected.
    pub fn terms(&self) -> u64 {
        self.watcher.terms()
    }

    /// Wait until this candidate leads, and return the leadership.
    /// [`LockError::Shutdown`] once the campaign has ended (the client shut
    /// down, or the candidate resigned).
    pub async fn leadership(&self) -> Result<Leadership, LockError> {
        self.watcher.leadership().await
    }

    /// Wait until this candidate leads, then run `work` with the leadership,
    /// cancelling it (dropping its future) the moment the leadership can no
    /// longer be trusted: `Ok` with what `work` returned, or
    /// [`LockError::Lost`] with the reason it was cancelled. The campaign goes
    /// on either way; call `lead` in a loop for work that runs in every term.
    pub async fn lead<F, Fut, T>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(Leadership) -> Fut,
        Fut: Future<Output = T>,
    {
        self.watcher.lead(work).await
    }

    /// Stop campaigning. A leader releases the lock (handing it to the next
    /// candidate of this client in one write if one waits; otherwise another
    /// process's candidate takes it at its next poll) and returns how that
    /// release went; a follower stops waiting.
    pub async fn resign(mut self) -> Result<(), LockError> {
        if let Some(resign) = self.resign.take() {
            let _ = resign.send(());
        }
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result,
                // Only a panic in the campaign gets here; nothing is left to release.
                Err(_) => Ok(()),
            },
            None => Ok(()),
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // Nobody may act on this candidate's leadership once it is
            // dropped, nor read it as leading.
            self.board.step_down(true);
            // Dropping the campaign drops its guard or its acquire, and each
            // releases what it holds in the background.
            task.abort();
        }
    }
}

/// Where the campaign publishes its standing, and the role derived from it.
#[derive(Debug)]
struct Board {
    standing: watch::Sender<Standing>,
    roles: watch::Sender<Role>,
    /// The current term and whether the campaign has ended, under one lock:
    /// a step-down and an election are decided one after the other, so a
    /// campaign that has ended never publishes a new term.
    term: std::sync::Mutex<Term>,
}

/// The board's current leadership, if any, and whether the campaign ended.
#[derive(Debug, Default)]
struct Term {
    /// The term's number (`Standing::terms` when it began) and its
    /// "deposed" flag, while this candidate leads.
    current: Option<(u64, watch::Sender<bool>)>,
    /// The campaign has ended: no term may begin.
    ended: bool,
}

impl Board {
    fn term(&self) -> std::sync::MutexGuard<'_, Term> {
        self.term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Begin a term on the lock `view` holds, unless the campaign has ended
    /// (then `None`: the caller releases the lock). Published under the term
    /// lock, so a step-down that ends the campaign comes before or after it,
    /// never in between.
    fn elect(self: &Arc<Self>, view: LockView, since: Instant) -> Option<Leadership> {
        // Only the campaign task begins terms, so the number is known now.
        let number = self.standing.borrow().terms + 1;
        // The moment the lock is let go, by this campaign or by anything else
        // (the client's shutdown, a release by version), the term ends:
        // before the write that lets another leader in. Set before the term
        // is published (and outside the term lock, which the hook takes), so
        // no moment of the term goes without it.
        let board = Arc::downgrade(self);
        view.held.on_leave(move || {
            if let Some(board) = board.upgrade() {
                board.depose(number);
            }
        });
        let mut term = self.term();
        if term.ended || view.held.state().left {
            return None;
        }
        let (deposed_tx, deposed) = watch::channel(false);
        term.current = Some((number, deposed_tx));
        let leadership = Leadership {
            view: view.clone(),
            since,
            deposed,
        };
        let fence = view.fence();
        self.publish(|standing| {
            standing.terms = number;
            standing.leadership = Some(leadership.clone());
            standing.role = Role::Leader { fence, since };
        });
        Some(leadership)
    }

    /// The leadership ends (or the campaign): depose it before anything is
    /// released, then publish that nobody here leads.
    fn step_down(&self, ended: bool) {
        let mut term = self.term();
        self.end_term(&mut term, ended);
    }

    /// Term `number` ends (its lock was let go), if it is still the current one.
    fn depose(&self, number: u64) {
        let mut term = self.term();
        if term
            .current
            .as_ref()
            .is_some_and(|(current, _)| *current == number)
        {
            self.end_term(&mut term, false);
        }
    }

    /// [`step_down`](Self::step_down), under the term lock.
    fn end_term(&self, term: &mut Term, ended: bool) {
        term.ended |= ended;
        if let Some((_, deposed)) = term.current.take() {
            deposed.send_replace(true);
        }
        self.publish(|standing| {
            standing.leadership = None;
            standing.role = Role::Campaigning;
            standing.ended |= ended;
        });
    }

    /// Update the standing, then the public role from it (a role watcher wakes
    /// only when the role changes).
    fn publish(&self, update: impl FnOnce(&mut Standing)) {
        self.standing.send_modify(update);
        let role = self.standing.borrow().role.clone();
        self.roles.send_if_modified(|current| {
            if *current == role {
                return false;
            }
            *current = role;
            true
        });
    }
}

/// The campaign task's state.
struct Campaign {
    client: LockClient,
    key: LockKey,
    options: ElectionOptions,
    board: Arc<Board>,
}

impl Campaign {
    async fn run(self, mut resigned: oneshot::Receiver<()>) -> Result<(), LockError> {
        let result = self.campaign(&mut resigned).await;
        self.board.step_down(true);
        result
    }

    async fn campaign(&self, resigned: &mut oneshot::Receiver<()>) -> Result<(), LockError> {
        let mut failures: u32 = 0;
        loop {
            let acquire = self
                .client
                .acquire(self.key.clone(), self.acquire_options());
            let acquired = tokio::select! {
                biased;
                _ = &mut *resigned => return Ok(()),
                acquired = acquire => acquired,
            };
            let guard = match acquired {
                Ok(guard) => guard,
                Err(LockError::Shutdown) => return Err(LockError::Shutdown),
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let pause = self.pause(failures);
                    tracing::warn!(key = %self.key, %error, ?pause, "campaign failed; campaigning again after a pause");
                    self.publish(|standing| standing.role = Role::Campaigning);
                    tokio::select! {
                        biased;
                        _ = &mut *resigned => return Ok(()),
                        () = self.client.inner.pause_until(self.client.inner.after(pause)) => continue,
                    }
                }
            };
            failures = 0;
            let since = self.client.inner.clock.now();
            let fence = guard.fence();
            if self.board.elect(guard.view(), since).is_none() {
                // Resigned or dropped while the acquire was finishing, or the
                // lock was let go already (a shutdown): no term begins.
                return guard.release().await;
            }
            tracing::info!(key = %self.key, %fence, "elected leader");
            let untrusted = guard.until_unsafe();
            tokio::select! {
                biased;
                _ = &mut *resigned => {
                    self.step_down();
                    return guard.release().await;
                }
                reason = untrusted => {
                    tracing::warn!(key = %self.key, %fence, %reason, "stopped leading: the lease can no longer be trusted");
                    self.step_down();
                    // Released in the background; the next acquire of the key
                    // on this client waits for that release in its queue.
                    drop(guard);
                }
            }
        }
    }

    /// The options of each acquire: wait as long as it takes, and publish the
    /// leader each poll sees.
    fn acquire_options(&self) -> AcquireOptions {
        let board = self.board.clone();
        let mut options =
            AcquireOptions::new()
                .wait(Duration::MAX)
                .on_wait(move |seen: Option<&LockInfo>| {
                    let role = match seen {
                        Some(info) if !info.released => Role::Follower {
                            leader: info.owner.clone(),
                            fence: info.fence,
                            data: info.data.clone(),
                        },
                        _ => Role::Campaigning,
                    };
                    board.publish(|standing| standing.role = role);
                });
        if let Some(lease) = self.options.lease {
            options = options.lease(lease);
        }
        if let Some(data) = &self.options.data {
            options = options.data(data.clone());
        }
        options
    }

    /// Leadership ends: published before the lock is released, so nobody reads
    /// this candidate as leader once another may lead.
    fn step_down(&self) {
        self.board.step_down(false);
    }

    fn publish(&self, update: impl FnOnce(&mut Standing)) {
        self.board.publish(update);
    }

    /// The pause after `failures` errors in a row: the minimum doubled per
    /// failure up to the maximum, jittered down by up to a half.
    fn pause(&self, failures: u32) -> Duration {
        let doubled = self
            .options
            .retry_min
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        let pause = doubled.min(self.options.retry_max);
        pause.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}
