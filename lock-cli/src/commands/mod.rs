//! One module per group of subcommands; each returns the exit code on success.

mod acquire;
mod inspect;
mod release;
mod run;
mod table;

use lock_core::{AcquireOptions, LockClient, LockError, LockGuard, LockKey, StoreErrorKind};

use crate::args::{Cli, Command, Global, TakeArgs};
use crate::child::Signals;
use crate::exit::CliError;
use crate::progress::Progress;

/// Run the chosen subcommand.
pub async fn dispatch(cli: &Cli) -> Result<u8, CliError> {
    let global = &cli.global;
    let result = match &cli.command {
        Command::Run(args) => run::run(global, args).await,
        Command::Acquire(args) => acquire::acquire(global, args).await,
        Command::Release(args) => release::release(global, args).await,
        Command::Show(args) => inspect::show(global, args).await,
        Command::List(args) => inspect::list(global, args).await,
        Command::CreateTable(args) => table::create(global, args).await,
        Command::ValidateTable => table::validate(global).await,
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
            CliError::MissingTable {
                table: global.table_name().to_owned(),
                hint: create_table_hint(global),
            }
        }
        other => other,
    }
}

/// The lockctl command that creates the table in use.
pub fn create_table_hint(global: &Global) -> String {
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
    signals: &mut Signals,
) -> Result<LockGuard, CliError> {
    let mut options = AcquireOptions::new()
        .wait(take.wait)
        .busy_unless_dead(unless_dead && take.wait.is_zero());
    if let Some(data) = &take.data {
        options = options.data(data.as_bytes().to_vec());
    }
    let progress = Progress::start(client, key);
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
                    "acquired lock {key} (fence {})",
                    guard.fence()
                )))
                .await;
        }
        Err(_) => progress.finish(None).await,
    }
    result.map_err(|error| match error {
        LockError::AcquireTimeout {
            key,
            holder,
            waited,
        } => CliError::TimedOut {
            key,
            holder,
            waited,
        },
        other => CliError::Lock(other),
    })
}
