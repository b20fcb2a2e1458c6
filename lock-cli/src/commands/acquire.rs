//! `lockctl acquire`: take a lock for a script, without a heartbeat.

use lock_core::{DetachedLock, LockClient, LockKey};

use crate::args::{AcquireArgs, Global, OutputFormat};
use crate::child::Signals;
use crate::exit::{CliError, OK};
use crate::output::{self, AcquiredJson, shell_quote};

/// Acquire and detach; print what a later `release --version` needs.
pub async fn acquire(global: &Global, args: &AcquireArgs) -> Result<u8, CliError> {
    let mut signals = Signals::install()?;
    let client = global.client(Some(args.lease)).await?;
    let key = args.key.lock_key();
    let taken = take_and_detach(&client, &key, args, &mut signals).await;
    // Leave nothing held on any path: a failed or interrupted acquire may have
    // a write whose answer was lost, which the client releases in the
    // background. (A detached lock is no longer the client's: it stays held.)
    super::finish(&client).await;
    let lock = taken?;
    match global.output {
        OutputFormat::Json => output::json(&AcquiredJson::from(&lock))?,
        OutputFormat::Text => {
            // Shell assignments: `eval "$(lockctl acquire ...)"` sets them.
            let mut lines = vec![("LOCK_KEY", key.partition().to_owned())];
            if let Some(sort) = key.sort() {
                lines.push(("LOCK_SORT_KEY", sort.to_owned()));
            }
            lines.extend([
                // The name fence checks take (as `run` gives it).
                ("LOCK_FENCE_KEY", key.to_string()),
                ("LOCK_FENCE", lock.fence().to_string()),
                ("LOCK_VERSION", lock.version().to_string()),
                ("LOCK_OWNER", lock.owner().to_owned()),
                ("LOCK_LEASE", crate::text::duration(lock.lease())),
            ]);
            let text: Vec<String> = lines
                .iter()
                .map(|(name, value)| format!("{name}={}", shell_quote(value)))
                .collect();
            output::line(&text.join("\n"))?;
        }
    }
    Ok(OK)
}

async fn take_and_detach(
    client: &LockClient,
    key: &LockKey,
    args: &AcquireArgs,
    signals: &mut Signals,
) -> Result<DetachedLock, CliError> {
    let guard = super::take(client, key, &args.take, false, None, signals).await?;
    Ok(guard.detach().await?)
}
