//! Counting semaphores: at most `permits` holders at once, each holding one of
//! `permits` ordinary locks (slots) with everything a lock has (lease,
//! heartbeats, `lost()`, a fence per slot, release on drop).
//!
//! A poll reads every slot (one partition query where the store has sort
//! keys; one read per slot otherwise), then tries the free slots one
//! conditional write each, and a slot whose holder has kept one record
//! version for `lease × (1 + drift)` (a crashed holder) by the usual takeover.
//! Tasks of one client take turns polling, first come first served, and a
//! permit released on this client while one of them waits is handed to it:
//! one conditional write on the released permit's version (the next fence),
//! instead of a release, a read and an acquire.
//!
//! The permit count is part of each slot's name (`permit-00003-of-8`), so a
//! semaphore opened with another count finds slots of the other count and is
//! refused; without sort keys, a header record holds the count instead.

use std::collections::VecDeque;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Mutex as FairMutex, Notify};

use crate::clock::{Instant, later};
use crate::retry::Retry;
use crate::shared::Shared;
use crate::turns::{Handoff, Successors};
use crate::{
    AcquireOptions, DataUpdate, Expect, FenceUpdate, LockClient, LockError, LockGuard, LockKey,
    LockRecord, LockView, NewRecord, Rvn,
};

/// The most permits a semaphore may have: each is a record read on every poll.
pub const MAX_PERMITS: u32 = 1_000;

/// A counting semaphore on one name; see [`LockClient::semaphore`]. Cheap to
/// clone. Every handle of one name and count on one client (clones, and
/// each `semaphore()` call's) shares one local queue.
#[derive(Clone, Debug)]
pub struct Semaphore {
    shared: Arc<SemaphoreShared>,
}

#[derive(Debug)]
struct SemaphoreShared {
    client: LockClient,
    name: String,
    permits: u32,
    /// What its slots are called: a semaphore's permits, or a reader-writer
    /// lock's reader slots.
    slots: SlotKind,
    /// Shared by every handle of this name and count on this client.
    local: Arc<OnClient>,
}

/// What the handles of one semaphore (name and count) on one client share,
/// however many times it was opened: one queue of tasks, so they poll one at
/// a time and permits are handed between them.
#[derive(Debug, Default)]
struct OnClient {
    /// The task of this client that polls the store now; the others wait in
    /// line for it (tokio's mutex is first come, first served).
    poller: FairMutex<()>,
    /// This client's tasks waiting for a permit, and the permits released to
    /// them.
    queue: Arc<LocalQueue>,
    /// Without sort keys: the header holding the count has been checked.
    header_checked: std::sync::atomic::AtomicBool,
}

/// The tasks of one client waiting for a permit of one semaphore, and the
/// permits its holders released to them: each permit's lock goes to the queue
/// (as the lock's [`Successors`]) when it is released while a task waits.
/// Kept apart from the semaphore (no client in it), since every permit's
/// lock holds it.
#[derive(Debug, Default)]
struct LocalQueue {
    state: Mutex<Local>,
    /// A permit was released on this client, or handed to the queue.
    released: Notify,
}

#[derive(Debug, Default)]
struct Local {
    /// Tasks inside `acquire` or `try_acquire`.
    waiting: usize,
    /// Permits handed over and not yet taken: the slot, its key and version.
    handed: VecDeque<(u32, LockKey, Handoff)>,
}

impl LocalQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, Local> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The oldest permit handed over, if any.
    fn take(&self) -> Option<(u32, LockKey, Handoff)> {
        self.state().handed.pop_front()
    }
}

impl Successors for LocalQueue {
    fn offer(&self, key: &LockKey, handoff: Handoff) -> Result<(), Handoff> {
        // Decided under the lock that also counts the waiters out, so a
        // hand-off is never left with nobody to take or release it.
        let mut state = self.state();
        let slot = slot_of(key);
        let (Some(slot), true) = (slot, state.waiting > 0) else {
            return Err(handoff);
        };
        state.handed.push_back((slot, key.clone(), handoff));
        drop(state);
        self.released.notify_one();
        Ok(())
    }
}

/// A task counted among a semaphore's local waiters while it lives; the last
/// to leave releases what was handed over and not taken. It counts as an
/// acquire running too, so shutdown waits for it, and for that release.
struct Waiting {
    queue: Arc<LocalQueue>,
    client: Arc<Shared>,
    /// Dropped after `drop` has started the releases (fields drop after it).
    _running: crate::shared::AcquiringOwned,
}

impl Waiting {
    fn new(queue: &Arc<LocalQueue>, client: &Arc<Shared>) -> Self {
        queue.state().waiting += 1;
        Self {
            queue: queue.clone(),
            client: client.clone(),
            _running: client.acquiring_owned(),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let left = {
            let mut state = self.queue.state();
            state.waiting -= 1;
            if state.waiting == 0 {
                std::mem::take(&mut state.handed)
            } else {
                VecDeque::new()
            }
        };
        for (_, key, handoff) in left {
            self.client.release_handoff(key, handoff);
        }
    }
}

/// One permit of a [`Semaphore`]: a held lock on one of its slots. Derefs to
/// the lock's [`LockView`] (fence, state, `lost()`, data); released by
/// [`release`](Self::release) or, in the background, when dropped.
#[derive(Debug)]
#[must_use = "dropping a permit releases it"]
pub struct Permit {
    view: LockView,
    guard: Option<LockGuard>,
    slot: u32,
    semaphore: Arc<SemaphoreShared>,
}

/// What a set of slots is for, which names its records: a semaphore's
/// permits (`permit-00003-of-8`) or a reader-writer lock's readers
/// (`reader-00003-of-8`), so the two never read each other's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    Permit,
    Reader,
}

impl SlotKind {
    fn prefix(self) -> &'static str {
        match self {
            SlotKind::Permit => "permit-",
            SlotKind::Reader => "reader-",
        }
    }

    /// Without sort keys: the record holding the count.
    fn header(self) -> &'static str {
        match self {
            SlotKind::Permit => "permits",
            SlotKind::Reader => "readers",
        }
    }
}

impl LockClient {
    /// A counting semaphore named `name` with `permits` permits: at most
    /// `permits` holders (on any clients) whose leases are safe at any
    /// instant. Every client must open it with the same count; one that does
    /// not is refused on its first acquire ([`LockError::PermitsMismatch`])
    /// once the store shows the other count: at once without sort keys (a
    /// header record holds the count, written by the first opener); with sort
    /// keys, from the first poll after the other count's first permit was
    /// taken (two first openers polling at the very same moment can each take
    /// one permit before either sees the other's).
    ///
    /// Refused before anything is written when `permits` is 0 or more than
    /// [`MAX_PERMITS`], or the name does not fit the store's keys.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Result<Semaphore, LockError> {
        self.slots(name.into(), permits, SlotKind::Permit)
    }

    /// `permits` slots of `kind` named `name` (a semaphore, or a reader-writer
    /// lock's readers), checked as [`semaphore`](Self::semaphore) says.
    pub(crate) fn slots(
        &self,
        name: String,
        permits: u32,
        kind: SlotKind,
    ) -> Result<Semaphore, LockError> {
        self.inner.ensure_running()?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(LockError::InvalidInput {
                reason: format!(
                    "semaphore {name}: {permits} permits; a semaphore has 1 to {MAX_PERMITS}"
                ),
                source: None,
            });
        }
        // The longest key it writes must fit the store.
        self.inner.validate_input(
            &slot_key(&self.inner, &name, kind, permits - 1, permits),
            None,
        )?;
        if !self.inner.caps.sort_keys {
            self.inner.validate_input(
                &header_key(&name, kind),
                Some(permits.to_string().as_bytes()),
            )?;
        }
        let local = self
            .inner
            .named::<OnClient>(&format!("{name}\u{0}{permits}\u{0}{}", kind.prefix()));
        Ok(Semaphore {
            shared: Arc::new(SemaphoreShared {
                client: self.clone(),
                name,
                permits,
                slots: kind,
                local,
            }),
        })
    }
}

/// The key of slot `slot` (from 0) of semaphore `name` with `permits`.
pub(crate) fn slot_key(
    shared: &Shared,
    name: &str,
    kind: SlotKind,
    slot: u32,
    permits: u32,
) -> LockKey {
    let slot = format!("{}{slot:05}-of-{permits}", kind.prefix());
    if shared.caps.sort_keys {
        LockKey::with_sort(name, slot)
    } else {
        LockKey::new(format!("{name}#{slot}"))
    }
}

/// Without sort keys: the record that holds the permit count.
fn header_key(name: &str, kind: SlotKind) -> LockKey {
    LockKey::new(format!("{name}#{}", kind.header()))
}

/// The slot a slot's key names (either layout of [`slot_key`], either kind).
fn slot_of(key: &LockKey) -> Option<u32> {
    let name = match key.sort() {
        Some(sort) => sort,
        None => key.partition().rsplit_once('#')?.1,
    };
    [SlotKind::Permit, SlotKind::Reader]
        .into_iter()
        .find_map(|kind| parse_slot(kind, name))
        .map(|(slot, _)| slot)
}

/// The slot and permit count a slot's sort key names, if it is one of `kind`.
fn parse_slot(kind: SlotKind, sort: &str) -> Option<(u32, u32)> {
    let rest = sort.strip_prefix(kind.prefix())?;
    let (slot, permits) = rest.split_once("-of-")?;
    Some((slot.parse().ok()?, permits.parse().ok()?))
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.shared.permits
    }

    /// Take a permit, waiting while all are held, up to the options' wait
    /// budget (by default long enough to take over a crashed holder's
    /// permit). The options' lease, data and hold limits apply to the permit;
    /// `reentrant` and `only_if_exists` are refused.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Permit, LockError> {
        // Busy-unless-dead is a wait rule of its own, as for a lock.
        let wait = self.shared.client.inner.config.wait_for(&options);
        self.take(options, wait)
            .await?
            .ok_or_else(|| LockError::AcquireTimeout {
                key: LockKey::new(self.shared.name.clone()),
                holder: None,
                waited: wait,
            })
    }

    /// One poll: a permit if one is free (or held by a crashed holder whose
    /// lease has run out as this client has seen it), `None` otherwise.
    /// Options that ask to wait are refused, as for
    /// [`LockClient::try_acquire`].
    ///
    /// With [`AcquireOptions::busy_unless_dead`] it is "busy unless dead",
    /// as for a lock: `None` as soon as every permit's holder has been seen
    /// alive (its record changed while this client watched, within about
    /// one heartbeat period), but a permit whose record does not change is
    /// watched until it may be taken over (`lease × (1 + drift)`), and taken
    /// — what a cron job running under a semaphore needs, so that a crashed
    /// holder's permit is reclaimed instead of skipped forever.
    pub async fn try_acquire(&self, options: AcquireOptions) -> Result<Option<Permit>, LockError> {
        if let Some(wait) = options.wait.filter(|wait| !wait.is_zero()) {
            return Err(crate::ConfigError::WaitOnTryAcquire { wait }.into());
        }
        self.take(options, Duration::ZERO).await
    }

    pub(crate) async fn take(
        &self,
        options: AcquireOptions,
        wait: Duration,
    ) -> Result<Option<Permit>, LockError> {
        let semaphore = &self.shared;
        let shared = semaphore.client.inner.clone();
        shared.ensure_running()?;
        if options.reentrant || options.only_if_exists {
            return Err(LockError::InvalidInput {
                reason: format!(
                    "semaphore {}: a permit cannot be reentrant or only-if-exists",
                    semaphore.name
                ),
                source: None,
            });
        }
        // The options a permit's lock is taken with, checked as an acquire
        // checks them, before anything is read (an invalid lease must not
        // wait to be refused).
        let longest = slot_key(
            &shared,
            &semaphore.name,
            semaphore.slots,
            semaphore.permits - 1,
            semaphore.permits,
        );
        shared.check_acquire(&longest, &options)?;
        let started = shared.clock.now();
        let deadline = later(started, wait);
        let refresh = options
            .refresh_period
            .unwrap_or(shared.config.refresh_period);
        let _waiting = Waiting::new(&semaphore.local.queue, &shared);
        // Our turn to poll; a one-attempt take does not queue behind another.
        let _turn = if wait.is_zero() {
            match semaphore.local.poller.try_lock() {
                Ok(turn) => turn,
                Err(_) => return Ok(None),
            }
        } else {
            tokio::select! {
                turn = semaphore.local.poller.lock() => turn,
                () = shared.pause_until(deadline) => {
                    shared.ensure_running()?;
                    return Ok(None);
                }
            }
        };
        // One attempt on one slot: a slot seen free that another client took
        // meanwhile is busy, not watched (busy-unless-dead would watch it).
        let one_attempt = options.clone().wait(Duration::ZERO).busy_unless_dead(false);
        // Busy-unless-dead: the slots whose holders were seen alive; the wait
        // budget ends the wait only once all of them were.
        let unless_dead = options.busy_unless_dead;
        let mut alive = vec![false; semaphore.permits as usize];
        // Releases the store announces (a slot freed by another process),
        // watched from before the first read.
        let mut releases = shared.watch_releases();
        let in_semaphore = crate::released::in_partition(&semaphore.name);
        loop {
            shared.ensure_running()?;
            // A permit released to this client's waiters: one write on its
            // version. Refused if anyone wrote since (its lease ran out and
            // was taken over): then the slot is polled as any other.
            while let Some((slot, key, handoff)) = semaphore.local.queue.take() {
                let handed = shared
                    .acquire_handed(key, one_attempt.clone(), Some(handoff))
                    .await;
                match handed {
                    Ok(guard) => return Ok(Some(self.permit(guard, slot))),
                    Err(LockError::AcquireTimeout { .. } | LockError::AlreadyHeld { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
            let slots = self.read_slots(deadline).await?;
            // The wall clock before the monotonic one (see `ClockTrust::credit`).
            let wall_now = shared.clock.wall_now();
            let now = shared.clock.now();
            // Free slots first (one write each), from a random start so that
            // clients polling together spread over them.
            let start = fastrand::u32(..semaphore.permits);
            let order = (0..semaphore.permits).map(|i| (start + i) % semaphore.permits);
            let mut next_takeover: Option<Instant> = None;
            let mut due = Vec::new();
            let mut free = Vec::new();
            for slot in order {
                match &slots[slot as usize] {
                    None => free.push(slot),
                    Some(record) if record.released => free.push(slot),
                    Some(record)
                        if record.owner == shared.config.owner
                            && shared.holds_version(&record.key, record.rvn.as_str()) =>
                    {
                        alive[slot as usize] = true;
                    }
                    Some(record) => {
                        let (sighting, watched) = shared.sight(record, now, wall_now);
                        // Due when watched long enough, or when a final write's
                        // min hold has ended (as an acquire judges it).
                        let (at, final_hold) = crate::protocol::acquiring::held_until(
                            record,
                            watched,
                            now,
                            wall_now,
                            crate::protocol::Broken::Nothing,
                        );
                        // A holder that wrote since this client first looked, or
                        // one keeping its permit to the end of a min hold on purpose.
                        alive[slot as usize] |= sighting.changed || final_hold;
                        if at <= now {
                            due.push(slot);
                        } else {
                            next_takeover = Some(next_takeover.map_or(at, |next| next.min(at)));
                        }
                    }
                }
            }
            for slot in free.into_iter().chain(due) {
                let key = slot_key(
                    &shared,
                    &semaphore.name,
                    semaphore.slots,
                    slot,
                    semaphore.permits,
                );
                match semaphore.client.try_acquire(key, one_attempt.clone()).await {
                    Ok(Some(guard)) => return Ok(Some(self.permit(guard, slot))),
                    Ok(None) => {}
                    Err(error) => return Err(error),
                }
            }
            let now = shared.clock.now();
            // Busy-unless-dead: a permit whose holder has not been seen alive
            // is watched until it may be taken over, whatever the budget.
            let budget_applies = !unless_dead || alive.iter().all(|alive| *alive);
            if budget_applies && now >= deadline {
                return Ok(None);
            }
            let poll = later(now, shared.backoff.jitter(refresh));
            let mut wake = next_takeover.map_or(poll, |at| at.min(poll));
            if budget_applies {
                wake = wake.min(deadline);
            }
            tokio::select! {
                // Shutdown ends the pause too; the loop's check says so.
                _ = shared.pause_until_released(wake, releases.as_mut(), &in_semaphore) => {}
                () = semaphore.local.queue.released.notified() => {}
            }
        }
    }

    /// The key of slot `slot`.
    pub(crate) fn slot_key(&self, slot: u32) -> LockKey {
        let semaphore = &self.shared;
        slot_key(
            &semaphore.client.inner,
            &semaphore.name,
            semaphore.slots,
            slot,
            semaphore.permits,
        )
    }

    /// Resolves when a permit of this semaphore is released on this client.
    pub(crate) async fn released_here(&self) {
        self.shared.local.queue.released.notified().await;
    }

    /// A permit holding `guard`'s slot, whose lock goes to this client's
    /// waiters when it is released while one waits.
    fn permit(&self, guard: LockGuard, slot: u32) -> Permit {
        let view = guard.view();
        view.held.set_successors(self.shared.local.queue.clone());
        Permit {
            view,
            guard: Some(guard),
            slot,
            semaphore: self.shared.clone(),
        }
    }

    /// The records of every slot (`None` for a slot with no record), read
    /// with retries until `deadline`; refused if the store holds slots of
    /// another permit count.
    pub(crate) async fn read_slots(
        &self,
        deadline: Instant,
    ) -> Result<Vec<Option<LockRecord>>, LockError> {
        let semaphore = &self.shared;
        let shared = &semaphore.client.inner;
        let mut retry = Retry::until(&shared.backoff, deadline);
        loop {
            let read = if shared.caps.sort_keys {
                self.read_partition().await
            } else {
                self.read_each().await
            };
            match read {
                Ok(slots) => return Ok(slots),
                Err(ReadError::Lock(error)) => return Err(error),
                Err(ReadError::Store(error)) => match retry.after(error, shared.clock.now()) {
                    // Ends at shutdown too (the caller's loop says so).
                    Ok(wake) => {
                        shared.pause_until(wake).await;
                        shared.ensure_running()?;
                    }
                    Err(error) => {
                        return Err(LockError::Store {
                            key: LockKey::new(semaphore.name.clone()),
                            source: error,
                        });
                    }
                },
            }
        }
    }

    /// With sort keys: the semaphore's partition, in one query per page.
    async fn read_partition(&self) -> Result<Vec<Option<LockRecord>>, ReadError> {
        let semaphore = &self.shared;
        let shared = &semaphore.client.inner;
        let mut slots = vec![None; semaphore.permits as usize];
        let mut cursor = None;
        loop {
            let page = shared
                .store
                .list(
                    Some(&semaphore.name),
                    cursor.clone(),
                    semaphore.permits as usize + 1,
                )
                .await?;
            for record in page.records {
                let Some((slot, permits)) = record
                    .key
                    .sort()
                    .and_then(|sort| parse_slot(semaphore.slots, sort))
                else {
                    continue;
                };
                if permits != semaphore.permits {
                    return Err(ReadError::Lock(self.mismatch(permits)));
                }
                if let Some(place) = slots.get_mut(slot as usize) {
                    *place = Some(record);
                }
            }
            match crate::Cursor::after(cursor.as_ref(), page.next)? {
                Some(next) => cursor = Some(next),
                None => return Ok(slots),
            }
        }
    }

    /// Without sort keys: the header (once), then one read per slot.
    async fn read_each(&self) -> Result<Vec<Option<LockRecord>>, ReadError> {
        use std::sync::atomic::Ordering;
        let semaphore = &self.shared;
        let shared = &semaphore.client.inner;
        if !semaphore.local.header_checked.load(Ordering::Acquire) {
            self.check_header().await?;
            semaphore
                .local
                .header_checked
                .store(true, Ordering::Release);
        }
        let mut slots = Vec::with_capacity(semaphore.permits as usize);
        for slot in 0..semaphore.permits {
            let key = slot_key(
                shared,
                &semaphore.name,
                semaphore.slots,
                slot,
                semaphore.permits,
            );
            slots.push(shared.store.get(&key).await?);
        }
        Ok(slots)
    }

    /// Without sort keys: the header record says the count; written by the
    /// first client to open the semaphore (a record nobody acquires).
    async fn check_header(&self) -> Result<(), ReadError> {
        let semaphore = &self.shared;
        let shared = &semaphore.client.inner;
        let key = header_key(&semaphore.name, semaphore.slots);
        let count = semaphore.permits.to_string().into_bytes();
        let stored = match shared.store.get(&key).await? {
            Some(record) => record,
            None => {
                // Held, not released: a second first opener's vacant write
                // is then refused and it reads this count. Nobody acquires
                // this key; its lease is the longest.
                let new = NewRecord {
                    owner: shared.config.owner.clone(),
                    rvn: Rvn::fresh(),
                    lease: crate::MAX_LEASE,
                    released: false,
                    fence: FenceUpdate::Next,
                    data: DataUpdate::Replace(count.clone()),
                    expires_at: None,
                };
                match shared.store.put(&key, Expect::Vacant, new).await? {
                    crate::Outcome::Applied(_) => return Ok(()),
                    crate::Outcome::Rejected {
                        current: Some(current),
                    } => current,
                    crate::Outcome::Rejected { current: None } => {
                        match shared.store.get(&key).await? {
                            Some(current) => current,
                            None => return Ok(()),
                        }
                    }
                }
            }
        };
        let found = stored.data.as_deref().map(String::from_utf8_lossy);
        match found.as_deref().and_then(|text| text.parse::<u32>().ok()) {
            Some(permits) if permits == semaphore.permits => Ok(()),
            Some(permits) => Err(ReadError::Lock(self.mismatch(permits))),
            None => Err(ReadError::Lock(LockError::InvalidInput {
                reason: format!(
                    "semaphore {}: its header record {} does not hold a permit count; it is not a semaphore's",
                    semaphore.name, key
                ),
                source: None,
            })),
        }
    }

    fn mismatch(&self, found: u32) -> LockError {
        let name = self.shared.name.clone();
        match self.shared.slots {
            SlotKind::Permit => LockError::PermitsMismatch {
                name,
                permits: self.shared.permits,
                found,
            },
            SlotKind::Reader => LockError::ReadersMismatch {
                name,
                readers: self.shared.permits,
                found,
            },
        }
    }
}

/// Why reading the slots failed: the store (retried), or the semaphore itself.
enum ReadError {
    Store(crate::StoreError),
    Lock(LockError),
}

impl From<crate::StoreError> for ReadError {
    fn from(error: crate::StoreError) -> Self {
        ReadError::Store(error)
    }
}

impl Permit {
    /// Which slot this permit holds (from 0).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Release the permit (one conditional write); the next task of this
    /// client waiting for the semaphore looks at once.
    pub async fn release(mut self) -> Result<(), LockError> {
        let released = match self.guard.take() {
            Some(guard) => guard.release().await,
            None => Ok(()),
        };
        self.semaphore.local.queue.released.notify_one();
        released
    }

    /// [`release`](Self::release), storing `data` in the released slot's
    /// record in the same write (see [`LockGuard::release_with_data`]).
    pub async fn release_with_data(mut self, data: impl Into<Vec<u8>>) -> Result<(), LockError> {
        let released = match self.guard.take() {
            Some(guard) => guard.release_with_data(data).await,
            None => Ok(()),
        };
        self.semaphore.local.queue.released.notify_one();
        released
    }
}

impl Permit {
    /// Stop heartbeating the permit without releasing it (see
    /// [`LockGuard::detach`]): its slot stays held until its lease runs out
    /// or it is released by version.
    pub async fn detach(mut self) -> Result<crate::DetachedLock, LockError> {
        match self.guard.take() {
            Some(guard) => guard.detach().await,
            None => Err(LockError::Lost {
                key: self.view.key().clone(),
                reason: crate::LostReason::Released,
            }),
        }
    }
}

impl Deref for Permit {
    type Target = LockView;

    fn deref(&self) -> &LockView {
        &self.view
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        // The guard releases in the background; a local waiter looks once
        // that release's write has ended.
        let held = self.view.held.clone();
        let clock = self.view.inner.clock.clone();
        let released = async move {
            held.until(clock.as_ref(), crate::held::Until::ReleaseWritten)
                .await
        };
        drop(guard);
        let semaphore = self.semaphore.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                released.await;
                semaphore.local.queue.released.notify_one();
            });
        }
    }
}
