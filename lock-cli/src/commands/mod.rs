//! One module per group of subcommands; each returns the exit code on success.

mod acquire;
mod elect;
mod inspect;
mod release;
mod run;
mod table;

use lock_core::{
    AcquireOptions, LockClient, LockError, LockGroup, LockGuard, LockKey, Permit, ReadGuard,
    StoreErrorKind, WriteGuard,
};
use lock_dynamodb::TableError;

use crate::args::{Cli, Command, Global, TakeArgs};
use crate::child::Signals;
use crate::exit::CliError;
use crate::progress::Progress;

/// Run the chosen subcommand.
pub async fn dispatch(cli: &Cli) -> Result<u8, CliError> {
    let global = &cli.global;
    let result = match &cli.command {
        Command::Run(args) => run::run(global, args).await,
        Command::Elect(args) => elect::elect(global, args).await,
        Command::Acquire(args) => acquire::acquire(global, args).await,
        Command::Release(args) => release::release(global, args).await,
        Command::Show(args) => inspect::show(global, args).await,
        Command::List(args) => inspect::list(global, args).await,
        Command::CreateTable(args) => table::create(global, args).await,
        Command::ValidateTable => table::validate(global).await,
        Command::Exec(_) | Command::Watchdog => Err(CliError::Usage(
            "this subcommand is lockctl's own, for `run`".into(),
        )),
    };
    result.map_err(|error| with_table_hint(error, global))
}

/// A lock operation on a missing table says how to create it from here.
fn with_table_hint(error: CliError, global: &Global) -> CliError {
    match error {
        CliError::Lock(
            LockError::Store { ref source, .. } | LockError::List { ref source, .. },
        ) if source.kind() == StoreErrorKind::NotFound => {
            tracing::debug!(%error, "table not found");
            if let Ok(crate::connect::StoreKind::Bucket(url)) = global.store_kind() {
                return CliError::MissingBucket {
                    url: url.to_owned(),
                    hint: create_table_hint(global),
                };
            }
            CliError::MissingTable {
                store: global.store_name(),
                table: global.table_name().to_owned(),
                hint: create_table_hint(global),
            }
        }
        CliError::Lock(ref lock) if is_key_schema_mismatch(lock) => {
            let CliError::Lock(source) = error else {
                return error;
            };
            CliError::WrongTable {
                source,
                hint: format!(
                    "check the table with: lockctl --table {} --layout {} validate-table; \
                     pass the --layout it was made for (native, python-dynamodb-lock, java), or another --table",
                    global.table_name(),
                    global.layout.flag()
                ),
            }
        }
        other => other,
    }
}

/// Whether `error` comes from a DynamoDB table whose key schema is not the
/// layout's: lock-dynamodb puts a [`TableError::KeySchemaMismatch`] in the
/// source chain of such a refusal.
fn is_key_schema_mismatch(error: &LockError) -> bool {
    let mut layer: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = layer {
        if let Some(TableError::KeySchemaMismatch { .. }) = error.downcast_ref::<TableError>() {
            return true;
        }
        layer = error.source();
    }
    false
}

/// The lockctl command that creates the table in use.
pub fn create_table_hint(global: &Global) -> String {
    if let Ok(crate::connect::StoreKind::Bucket(url)) = global.store_kind() {
        return format!(
            "buckets are made with the cloud's own tools; then check it with: lockctl --store {url} validate-table"
        );
    }
    if matches!(
        global.store_kind(),
        Ok(crate::connect::StoreKind::Postgres(_))
    ) {
        // The connection string carries a password: never repeated here.
        return format!(
            "create it with: lockctl --store <the same connection string> --table {} create-table",
            global.table_name()
        );
    }
    format!(
        "create it with: lockctl --table {} --layout {} create-table",
        global.table_name(),
        global.layout.flag()
    )
}

/// Acquire `key` with the whole wait budget in one call, reporting progress on
/// stderr meanwhile. A caught signal gives up the wait.
///
/// With `unless_dead`, one attempt (`--wait 0s`, what cron jobs use) is "busy
/// unless dead": it skips a holder seen alive (its record changed), but watches a
/// record that does not change until it may be taken over, so a crashed holder's
/// lock is freed instead of every later run skipping it. (`acquire` does not ask
/// for it: the locks it takes are held without heartbeats, so to it every
/// holder would look dead.)
pub async fn take(
    client: &LockClient,
    key: &LockKey,
    take: &TakeArgs,
    unless_dead: bool,
    min_hold: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<LockGuard, CliError> {
    let mut options = AcquireOptions::new()
        .wait(take.wait)
        .busy_unless_dead(unless_dead && take.wait.is_zero());
    if let Some(hold) = min_hold {
        options = options.min_hold(hold);
    }
    if let Some(data) = data(take)? {
        options = options.data(data);
    } else if take.clear_data {
        options = options.clear_data();
    }
    let (progress, options) = Progress::start(key, options);
    let result = tokio::select! {
        result = client.acquire(key.clone(), options) => result,
        signal = signals.next() => {
            progress.finish(None).await;
            return Err(CliError::Interrupted { signal });
        }
    };
    match &result {
        Ok(guard) => {
            progress
                .finish(Some(&format!(
                    "acquired lock {} (fence {})",
                    crate::text::printable(&key.to_string()),
                    guard.fence()
                )))
                .await;
        }
        Err(_) => progress.finish(None).await,
    }
    result.map_err(CliError::Lock)
}

/// One permit of the semaphore `key` with `permits` permits, as [`take`]
/// takes a lock: waiting up to `--wait`; with `unless_dead` and `--wait 0s`
/// (a cron run), busy unless dead: skip once every permit's holder was seen
/// alive, take over a permit whose record does not change for its lease.
pub async fn take_permit(
    client: &LockClient,
    key: &LockKey,
    permits: u32,
    take: &TakeArgs,
    unless_dead: bool,
    min_hold: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<Permit, CliError> {
    if key.sort().is_some() {
        return Err(CliError::Usage(
            "--permits and --sort-key: a semaphore's permits are its own sort keys; drop --sort-key".into(),
        ));
    }
    let semaphore = client.semaphore(key.partition(), permits)?;
    let mut options = AcquireOptions::new()
        .wait(take.wait)
        .busy_unless_dead(unless_dead && take.wait.is_zero());
    if let Some(hold) = min_hold {
        options = options.min_hold(hold);
    }
    if let Some(data) = data(take)? {
        options = options.data(data);
    } else if take.clear_data {
        options = options.clear_data();
    }
    let taken = tokio::select! {
        taken = semaphore.acquire(options) => taken,
        signal = signals.next() => return Err(CliError::Interrupted { signal }),
    };
    let permit = taken?;
    eprintln!(
        "lockctl: acquired permit {} of {} of semaphore {} (fence {})",
        permit.slot() + 1,
        permits,
        crate::text::printable(key.partition()),
        permit.fence()
    );
    Ok(permit)
}

/// What `run --shared` or `run --exclusive` holds of a reader-writer lock.
pub enum RwHeld {
    /// A read.
    Read(ReadGuard),
    /// The write.
    Write(WriteGuard),
}

/// A read (`exclusive` false) or the write of the reader-writer lock `key`
/// with room for `readers`, as [`take`] takes a lock: waiting up to
/// `--wait` (`--wait 0s`: one attempt).
pub async fn take_rw(
    client: &LockClient,
    key: &LockKey,
    readers: u32,
    exclusive: bool,
    take: &TakeArgs,
    min_hold: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<RwHeld, CliError> {
    if key.sort().is_some() {
        return Err(CliError::Usage(
            "--shared or --exclusive and --sort-key: a reader-writer lock's records are its own sort keys; drop --sort-key".into(),
        ));
    }
    let lock = client.rw_lock(key.partition(), readers)?;
    let options = options(take, min_hold)?;
    let once = take.wait.is_zero();
    let taken = async {
        Ok::<_, LockError>(match (exclusive, once) {
            (false, true) => lock.try_read(options).await?.map(RwHeld::Read),
            (false, false) => Some(RwHeld::Read(lock.read(options).await?)),
            (true, true) => lock.try_write(options).await?.map(RwHeld::Write),
            (true, false) => Some(RwHeld::Write(lock.write(options).await?)),
        })
    };
    let taken = tokio::select! {
        taken = taken => taken?,
        signal = signals.next() => return Err(CliError::Interrupted { signal }),
    };
    let Some(held) = taken else {
        return Err(CliError::Lock(LockError::AcquireTimeout {
            key: key.clone(),
            holder: None,
            waited: take.wait,
        }));
    };
    let name = crate::text::printable(key.partition());
    match &held {
        RwHeld::Read(read) => eprintln!(
            "lockctl: reading under reader-writer lock {name} (reader {} of {readers}, writer fence {})",
            read.slot_index() + 1,
            read.fence()
        ),
        RwHeld::Write(write) => eprintln!(
            "lockctl: writing under reader-writer lock {name} (fence {})",
            write.fence()
        ),
    }
    Ok(held)
}

/// Every key of `keys`, all or nothing (`LockClient::acquire_all`), within
/// `--wait`.
pub async fn take_all(
    client: &LockClient,
    keys: &[LockKey],
    take: &TakeArgs,
    min_hold: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<LockGroup, CliError> {
    let options = options(take, min_hold)?;
    let group = tokio::select! {
        group = client.acquire_all(keys.iter().cloned(), options) => group?,
        signal = signals.next() => return Err(CliError::Interrupted { signal }),
    };
    let fences: Vec<String> = group
        .fences()
        .map(|(key, fence)| {
            format!(
                "{} (fence {fence})",
                crate::text::printable(&key.to_string())
            )
        })
        .collect();
    eprintln!(
        "lockctl: acquired locks {}{}",
        fences.join(", "),
        if group.taken_at_once() {
            " (in one request)"
        } else {
            ""
        }
    );
    Ok(group)
}

/// The acquire options `--min-hold` and the data arguments ask for.
fn options(
    take: &TakeArgs,
    min_hold: Option<std::time::Duration>,
) -> Result<AcquireOptions, CliError> {
    let mut options = AcquireOptions::new().wait(take.wait);
    if let Some(hold) = min_hold {
        options = options.min_hold(hold);
    }
    if let Some(data) = data(take)? {
        options = options.data(data);
    } else if take.clear_data {
        options = options.clear_data();
    }
    Ok(options)
}

/// The data to store with the lock: `--data TEXT`, `--data -` (standard
/// input) or `--data-file PATH`. Read before anything is written.
fn data(take: &TakeArgs) -> Result<Option<Vec<u8>>, CliError> {
    use std::io::Read;
    match (&take.data, &take.data_file) {
        (Some(text), _) if text == "-" => {
            let mut data = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut data)
                .map_err(CliError::io("reading the data from standard input"))?;
            Ok(Some(data))
        }
        (Some(text), _) => Ok(Some(text.as_bytes().to_vec())),
        (None, Some(path)) => std::fs::read(path).map(Some).map_err(|source| {
            CliError::Usage(format!(
                "cannot read --data-file {}: {source}",
                path.display()
            ))
        }),
        (None, None) => Ok(None),
    }
}

/// Shut `client` down before lockctl exits, on every path: an acquire that
/// gave up or was interrupted may have left a write whose answer was lost,
/// and the client releases it in the background; a dropped guard's release
/// runs there too. Bounded by the client's shutdown timeout. What could not be
/// released is said, with when it frees itself.
pub async fn finish(client: &LockClient) {
    let report = match client.shutdown().await {
        Ok(report) => report,
        // Already shut down: nothing left to wait for.
        Err(_) => return,
    };
    let unreleased = report
        .failed
        .iter()
        .map(|(key, error)| (key, format!("releasing it failed: {error}")))
        .chain(
            report
                .timed_out
                .iter()
                .map(|key| (key, "releasing it did not finish in time".to_owned())),
        );
    for (key, why) in unreleased {
        // Also an acquire that gave up after a write whose answer was lost:
        // that write may have applied, under a version nobody was shown.
        let key = crate::text::printable(&key.to_string()).into_owned();
        eprintln!(
            "lockctl: warning: lock {key} may still be held by this lockctl ({}); \
             it frees itself when its lease ({}) runs out; see it with: lockctl show {key}",
            crate::text::printable(&why),
            crate::text::duration(client.lease())
        );
    }
}
