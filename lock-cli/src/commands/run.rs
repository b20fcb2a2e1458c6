//! `lockctl run`: hold a lock while a command runs, and make sure the command
//! is gone before anyone else can take the lock (see `deadline` for the
//! timeline, `watchdog` and `exec` for a lockctl that is frozen or killed).

use std::ffi::OsString;
use std::process::ExitStatus;
use std::time::Duration;

use lock_core::{
    Fence, LockClient, LockError, LockGroup, LockGuard, LockKey, LockView, LostReason, Permit,
    ReadGuard, WriteGuard,
};
use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::args::{Global, RunArgs};
use crate::child::{self, Running, Signals};
use crate::deadline::{self, KILL_LEAD, Plan};
use crate::exit::CliError;
use crate::text::duration;
use crate::watchdog::Watchdog;

/// Acquire, run the command under the lock, release; the command's exit code.
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, CliError> {
    let (mut signals, client, grace) = prepare(global, args.lease, args.grace).await?;
    let result = hold_and_run(&client, args, grace, &mut signals).await;
    // Whatever happened, leave nothing held: an interrupted or failed acquire
    // may have a write to clean up, a release may still be running.
    super::finish(&client).await;
    result
}

/// What `run` and `elect` need before anything is written: the signals
/// lockctl forwards, a client with `lease`, and the grace period (`--grace`,
/// or the default for the lease), refused if it leaves no room before the
/// end of the safe time.
pub(super) async fn prepare(
    global: &Global,
    lease: Duration,
    grace: Option<Duration>,
) -> Result<(Signals, LockClient, Duration), CliError> {
    let signals = Signals::install()?;
    let client = global.client(Some(lease)).await?;
    let grace = grace.unwrap_or_else(|| deadline::default_grace(lease));
    deadline::check_grace(grace, &client.timing(), client.heartbeat_period())
        .map_err(CliError::Usage)?;
    Ok((signals, client, grace))
}

async fn hold_and_run(
    client: &LockClient,
    args: &RunArgs,
    grace: Duration,
    signals: &mut Signals,
) -> Result<u8, CliError> {
    let key = args.key.lock_key();
    let guard = if !args.more_keys.is_empty() {
        let keys: Vec<LockKey> = std::iter::once(key.clone())
            .chain(args.more_keys.iter().map(LockKey::new))
            .collect();
        Held::Group(super::take_all(client, &keys, &args.take, args.min_hold, signals).await?)
    } else if args.shared || args.exclusive {
        match super::take_rw(
            client,
            &key,
            args.readers,
            args.exclusive,
            &args.take,
            args.min_hold,
            signals,
        )
        .await?
        {
            super::RwHeld::Read(read) => Held::Read(read),
            super::RwHeld::Write(write) => Held::Write(write),
        }
    } else {
        match args.permits {
            None => Held::Lock(
                super::take(client, &key, &args.take, true, args.min_hold, signals).await?,
            ),
            Some(permits) => Held::Permit(
                super::take_permit(
                    client,
                    &key,
                    permits,
                    &args.take,
                    true,
                    args.min_hold,
                    signals,
                )
                .await?,
            ),
        }
    };
    let spec = CommandSpec {
        command: &args.command,
        grace,
        max_time: args.max_time,
        foreground: args.foreground,
    };
    let watched = guard.watched(key.partition(), client.owner());
    let ended = match supervise(client, &watched, &spec, signals).await {
        Ok(ended) => ended,
        Err(error) => {
            release_or_warn(guard, &key.to_string()).await;
            return Err(error);
        }
    };
    let status = ended.status?;
    if let Some(limit) = ended.max_time {
        // Stopped for running too long, with the lease still safe: release.
        release_or_warn(guard, &key.to_string()).await;
        return Err(CliError::MaxTime {
            key,
            limit: duration(limit),
        });
    }
    match ended.stopped {
        Some(why) => {
            // The lease is not to be trusted: try to vacate the record, briefly
            // (the rest goes on in the background, bounded by the shutdown).
            let _ = tokio::time::timeout(Duration::from_secs(1), guard.release()).await;
            Err(CliError::Lost {
                key,
                reason: crate::text::printable(&why).into_owned(),
            })
        }
        None => {
            // The command has ended: release at once.
            release_or_warn(guard, &key.to_string()).await;
            Ok(child::exit_code(status))
        }
    }
}

/// The command to run under a lock, and how: `run`'s and `elect`'s.
pub(super) struct CommandSpec<'a> {
    pub command: &'a [OsString],
    /// From SIGTERM to SIGKILL.
    pub grace: Duration,
    /// `--max-time`.
    pub max_time: Option<Duration>,
    /// `--foreground`.
    pub foreground: bool,
}

/// The leases a command runs under, and what its environment says of them.
pub(super) struct Watched {
    /// Every lease: the command is stopped when the first is no longer safe.
    views: Vec<LockView>,
    /// The variables the command gets.
    env: Vec<(&'static str, String)>,
    /// How lockctl names them in its messages.
    name: String,
}

impl Watched {
    /// One lock (or leadership, or permit): LOCK_KEY, LOCK_SORT_KEY,
    /// LOCK_FENCE_KEY, LOCK_FENCE and LOCK_OWNER, meaning the same as
    /// `acquire` prints. None of them is a setting of lockctl's (those are
    /// LOCKCTL_*), and LOCKCTL_OWNER is taken out, so a lockctl the command
    /// starts writes an owner name of its own.
    pub(super) fn lock(view: &LockView, owner: &str) -> Self {
        let key = view.key();
        let mut env = vec![("LOCK_KEY", key.partition().to_owned())];
        if let Some(sort) = key.sort() {
            env.push(("LOCK_SORT_KEY", sort.to_owned()));
        }
        // The name fence checks take (escaped where the parts hold `/` or
        // `%`): a script cannot join LOCK_KEY and LOCK_SORT_KEY itself.
        env.push(("LOCK_FENCE_KEY", key.to_string()));
        env.push(("LOCK_FENCE", view.fence().to_string()));
        env.push(("LOCK_OWNER", owner.to_owned()));
        Self {
            views: vec![view.clone()],
            env,
            name: key.to_string(),
        }
    }

    /// A read or the write of the reader-writer lock `name`, under the
    /// lease `view` with the writer fence `fence` of the write lock
    /// `writer_key`: LOCK_KEY (the name), LOCK_FENCE_KEY (the write lock's
    /// key, which readers and writers of the lock fence under on every
    /// surface), LOCK_FENCE, LOCK_MODE (`shared` or `exclusive`) and
    /// LOCK_OWNER.
    fn reader_writer(
        view: &LockView,
        name: &str,
        writer_key: &LockKey,
        fence: Fence,
        mode: &str,
        owner: &str,
    ) -> Self {
        Self {
            views: vec![view.clone()],
            env: vec![
                ("LOCK_KEY", name.to_owned()),
                ("LOCK_FENCE_KEY", writer_key.to_string()),
                ("LOCK_FENCE", fence.to_string()),
                ("LOCK_MODE", mode.to_owned()),
                ("LOCK_OWNER", owner.to_owned()),
            ],
            name: name.to_owned(),
        }
    }

    /// Several locks held together: LOCK_KEYS (one per line, as given),
    /// LOCK_FENCES (`key=fence`, one per line, each key named as fences name
    /// it) and LOCK_OWNER.
    fn group(group: &LockGroup, owner: &str) -> Self {
        // The keys as given (more keys take no sort key): a name with `/`
        // stays as the user wrote it here, and is escaped in LOCK_FENCES.
        let keys: Vec<String> = group.keys().map(|key| key.partition().to_owned()).collect();
        let fences: Vec<String> = group
            .fences()
            .map(|(key, fence)| format!("{key}={fence}"))
            .collect();
        Self {
            views: group.guards().iter().map(|guard| guard.view()).collect(),
            env: vec![
                ("LOCK_KEYS", keys.join("\n")),
                ("LOCK_FENCES", fences.join("\n")),
                ("LOCK_OWNER", owner.to_owned()),
            ],
            name: keys.join(", "),
        }
    }

    /// Safe time left: the least of the leases'.
    fn remaining(&self) -> Duration {
        self.views
            .iter()
            .map(LockView::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Resolves when the first lease has ended, with why.
    fn until_ended(&self) -> impl std::future::Future<Output = LostReason> + use<> {
        // Boxed as trait objects: each future is 'static, but its type names
        // the borrow it was made from.
        let ended: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = LostReason> + Send>>> =
            self.views
                .iter()
                .map(|view| Box::pin(view.until_ended()) as _)
                .collect();
        async move {
            if ended.is_empty() {
                return LostReason::Released;
            }
            futures_util::future::select_all(ended).await.0
        }
    }
}

/// Run the command while `lock` is held, under a watchdog, and stop it (and
/// what it left in its process group) before the lease can end: the command
/// is gone when this returns. An error means the command never started; the
/// caller releases the lock.
pub(super) async fn supervise(
    client: &LockClient,
    lock: &Watched,
    spec: &CommandSpec<'_>,
    signals: &mut Signals,
) -> Result<Ended, CliError> {
    // The watchdog first: the command never runs without one.
    let mut watchdog = Watchdog::start()?;
    let mut command = match child::spawn(spec.command, &lock.env, spec.foreground) {
        Ok(command) => command,
        Err(error) => {
            watchdog.done();
            return Err(error);
        }
    };
    watchdog.watch(command.target());
    watchdog.arm(Plan::new(lock.remaining(), spec.grace).watchdog_in);

    let supervisor = Supervisor {
        lock,
        grace: spec.grace,
        max_time: spec.max_time.map(|limit| (Instant::now() + limit, limit)),
        foreground: spec.foreground,
        // Often enough that the watchdog's deadline follows each heartbeat.
        rearm_every: (client.heartbeat_period() / 2).min(Duration::from_secs(1)),
    };
    let ended = supervisor
        .supervise(&mut command, &mut watchdog, signals)
        .await;
    // The command is gone, but what it started in its process group may not
    // be: the lock covers them too.
    supervisor
        .stop_leftovers(&command, &mut watchdog, ended.stopped.is_some())
        .await;
    watchdog.done();
    Ok(ended)
}

/// What `run` holds: a lock, one permit of a semaphore (`--permits`), a read
/// or the write of a reader-writer lock (`--shared`, `--exclusive`), or
/// several locks (more keys).
enum Held {
    Lock(LockGuard),
    Permit(Permit),
    Read(ReadGuard),
    Write(WriteGuard),
    Group(LockGroup),
}

impl Held {
    /// The leases the command runs under, and its environment (`name`: the
    /// KEY argument, a reader-writer lock's name).
    fn watched(&self, name: &str, owner: &str) -> Watched {
        match self {
            Held::Lock(guard) => Watched::lock(guard, owner),
            Held::Permit(permit) => Watched::lock(permit, owner),
            // The slot's own key and fence are not the lock's: each slot is
            // a lock of its own.
            Held::Read(read) => Watched::reader_writer(
                read.slot(),
                name,
                read.writer_key(),
                read.fence(),
                "shared",
                owner,
            ),
            Held::Write(write) => {
                Watched::reader_writer(write, name, write.key(), write.fence(), "exclusive", owner)
            }
            Held::Group(group) => Watched::group(group, owner),
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Permit(permit) => permit.release().await,
            Held::Read(read) => read.release().await,
            Held::Write(write) => write.release().await,
            Held::Group(group) => group.release().await,
        }
    }
}

/// Release, and say so on stderr if that fails (the lease then runs out on
/// its own).
async fn release_or_warn(guard: Held, key: &str) {
    if let Err(error) = guard.release().await {
        eprintln!(
            "lockctl: warning: releasing lock {} failed ({}); it is freed when its lease runs out",
            crate::text::printable(key),
            crate::text::printable(&error.to_string())
        );
    }
}

/// How the command ended, and why lockctl stopped it, if it did.
pub(super) struct Ended {
    pub status: Result<ExitStatus, CliError>,
    /// Why lockctl sent SIGTERM (the lease, or `--max-time`), if it did.
    pub stopped: Option<String>,
    /// Stopped for running `--max-time` (this long), not for the lease.
    pub max_time: Option<Duration>,
    /// lockctl itself was told to stop (SIGTERM, SIGINT or SIGHUP, forwarded
    /// to the command).
    pub signalled: bool,
}

/// Watches the lease and lockctl's signals while the command runs.
struct Supervisor<'a> {
    lock: &'a Watched,
    grace: Duration,
    /// `--max-time`: when the command is stopped, and the limit.
    max_time: Option<(Instant, Duration)>,
    foreground: bool,
    rearm_every: Duration,
}

/// When SIGKILL is due, besides the end of the safe time.
#[derive(Debug, Default)]
struct KillTimes {
    /// The lock is someone else's (stolen, released): the grace period from
    /// that moment, not the safe time, which is over.
    after_loss: Option<Instant>,
    /// A second SIGTERM to lockctl, or `--max-time` reached: the grace
    /// period from then.
    after_signals: Option<Instant>,
}

impl KillTimes {
    /// When lockctl's SIGKILL is due, if it is: `plan` is the lease's timeline
    /// from `now`; `stopped` says SIGTERM was sent.
    fn due_at(&self, now: Instant, plan: &Plan, stopped: bool) -> Option<Instant> {
        let for_lease = match self.after_loss {
            Some(at) => Some(at),
            None => stopped.then(|| now + plan.kill_in),
        };
        [for_lease, self.after_signals].into_iter().flatten().min()
    }
}

impl Supervisor<'_> {
    async fn supervise(
        &self,
        command: &mut Running,
        watchdog: &mut Watchdog,
        signals: &mut Signals,
    ) -> Ended {
        let lost = self.lock.until_ended();
        tokio::pin!(lost);
        let mut lost_seen = false;
        // Why lockctl sent SIGTERM, once it has.
        let mut stopped: Option<String> = None;
        let mut kill = KillTimes::default();
        let mut terms_received = 0u32;
        let mut killed = false;
        let mut max_time: Option<Duration> = None;
        let mut signalled = false;
        loop {
            let now = Instant::now();
            let plan = Plan::new(self.lock.remaining(), self.grace);
            // The watchdog follows the end of the safe time (heartbeats move
            // it), or the kill after a loss, whichever lockctl would act on.
            if !killed {
                match kill.after_loss {
                    Some(at) => watchdog.arm(at.saturating_duration_since(now) + KILL_LEAD),
                    None => watchdog.arm(plan.watchdog_in),
                }
            }
            let term_at = stopped.is_none().then(|| now + plan.term_in);
            let kill_at = if killed {
                None
            } else {
                kill.due_at(now, &plan, stopped.is_some())
            };
            tokio::select! {
                status = command.wait() => return Ended { status, stopped, max_time, signalled },
                signal = signals.next() => {
                    signalled = true;
                    // In the foreground the terminal sends Ctrl-C to the command
                    // itself; forwarding it too would deliver it twice. A SIGINT
                    // sent to lockctl alone is forwarded.
                    if !(self.foreground && signal == Signal::SIGINT && child::terminal_may_have_sent_it()) {
                        command.signal(signal);
                    }
                    if signal == Signal::SIGTERM {
                        terms_received += 1;
                        if terms_received == 2 && kill.after_signals.is_none() {
                            eprintln!(
                                "lockctl: second SIGTERM: SIGKILL to the command in {} unless it exits",
                                duration(self.grace)
                            );
                            kill.after_signals = Some(now + self.grace);
                        }
                    }
                }
                reason = &mut lost, if !lost_seen => {
                    lost_seen = true;
                    let stolen = matches!(reason, LostReason::Stolen { .. } | LostReason::Released);
                    if stolen {
                        // Someone else may hold the lock already: the command
                        // gets its grace period from now, no more.
                        kill.after_loss = Some(now + self.grace);
                    }
                    if stopped.is_none() {
                        let why = format!("lock lost ({reason})");
                        let kill_in = if stolen { self.grace } else { plan.kill_in };
                        self.terminate(command, &why, kill_in);
                        stopped = Some(reason.to_string());
                    }
                }
                () = child::sleep_until(self.max_time.filter(|_| stopped.is_none()).map(|(at, _)| at)) => {
                    if let Some((_, limit)) = self.max_time {
                        let why = format!("it ran for its --max-time of {}", duration(limit));
                        eprintln!(
                            "lockctl: the command {why}: sending SIGTERM, SIGKILL in {}",
                            duration(self.grace)
                        );
                        command.signal(Signal::SIGTERM);
                        kill.after_signals = Some(
                            kill.after_signals.map_or(now + self.grace, |at| at.min(now + self.grace)),
                        );
                        stopped = Some(why);
                        max_time = Some(limit);
                    }
                }
                () = child::sleep_until(term_at) => {
                    // A heartbeat may have moved the safe time on meanwhile.
                    let left = self.lock.remaining();
                    if left <= self.grace {
                        let why = format!(
                            "heartbeats have failed; the lease is safe for {} more",
                            duration(left)
                        );
                        self.terminate(command, &why, Plan::new(left, self.grace).kill_in);
                        stopped = Some(why);
                    }
                }
                () = child::sleep_until(kill_at) => {
                    // Re-checked: a heartbeat may have moved the safe time on.
                    let now = Instant::now();
                    let plan = Plan::new(self.lock.remaining(), self.grace);
                    if kill.due_at(now, &plan, stopped.is_some()).is_some_and(|at| at <= now) {
                        eprintln!("lockctl: the command is still running: sending SIGKILL");
                        command.signal(Signal::SIGKILL);
                        watchdog.disarm();
                        killed = true;
                    }
                }
                () = tokio::time::sleep(self.rearm_every) => {}
            }
        }
    }

    /// The command has exited; processes it started in its process group
    /// may still run. They get SIGTERM and, after the grace period (or at
    /// once when the lock is no longer trusted), SIGKILL, before the lock is
    /// released. (Only a command in its own group: in `--foreground` the
    /// group is lockctl's.)
    async fn stop_leftovers(&self, command: &Running, watchdog: &mut Watchdog, stopped: bool) {
        if !command.group_left() {
            return;
        }
        let give = if stopped {
            Duration::ZERO
        } else {
            Plan::new(self.lock.remaining(), self.grace)
                .kill_in
                .min(self.grace)
        };
        eprintln!(
            "lockctl: the command exited but left processes in its process group: \
             sending them SIGTERM, SIGKILL in {}",
            duration(give)
        );
        command.signal(Signal::SIGTERM);
        let deadline = Instant::now() + give;
        while command.group_left() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if command.group_left() {
            command.signal(Signal::SIGKILL);
            watchdog.disarm();
            // Killed processes leave the group at once (their parent, or
            // init, reaps them); wait for that, briefly.
            let settle = Instant::now() + Duration::from_secs(1);
            while command.group_left() && Instant::now() < settle {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    fn terminate(&self, command: &Running, why: &str, kill_in: Duration) {
        eprintln!(
            "lockctl: lock {} can no longer be trusted ({}): sending SIGTERM to the command, SIGKILL in {}",
            crate::text::printable(&self.lock.name),
            crate::text::printable(why),
            duration(kill_in)
        );
        command.signal(Signal::SIGTERM);
    }
}
