//! `lockctl release`: by version, or forced.

use std::io::{BufRead, IsTerminal, Write};

use lock_core::{LockClient, LockInfo, LockKey, Rvn};
use serde::Serialize;

use crate::args::{Global, OutputFormat, ReleaseArgs};
use crate::exit::{CliError, OK};
use crate::output::{self, LockJson};
use crate::text::printable;

/// What `release` prints as JSON.
#[derive(Debug, Serialize)]
struct Released {
    /// Whether anything was released.
    released: bool,
    /// The lock as it was before the release.
    lock: Option<LockJson>,
}

/// Release by version, or (`--force`) whoever holds the lock.
pub async fn release(global: &Global, args: &ReleaseArgs) -> Result<u8, CliError> {
    let client = global.client(None).await?;
    let key = args.key.lock_key();
    let released = match &args.version {
        Some(version) => Some(
            client
                .release_version(key.clone(), &Rvn::from_stored(version.clone()))
                .await?,
        ),
        None if args.yes => client.force_release(key.clone()).await?,
        None => confirm_and_release(&client, &key).await?,
    };
    match global.output {
        OutputFormat::Json => output::json(&Released {
            released: released.is_some(),
            lock: released.as_ref().map(LockJson::from),
        })?,
        OutputFormat::Text => output::line(&match &released {
            Some(info) => format!(
                "released lock {} (fence {}, held by {})",
                printable(&key.to_string()),
                info.fence,
                printable(&info.owner)
            ),
            None => format!(
                "lock {} is not held: nothing to release",
                printable(&key.to_string())
            ),
        })?,
    }
    Ok(OK)
}

/// Show the holder and ask; release exactly the version the operator saw.
async fn confirm_and_release(
    client: &LockClient,
    key: &LockKey,
) -> Result<Option<LockInfo>, CliError> {
    let info = match client.get_lock(key.clone()).await? {
        Some(info) if !info.released => info,
        _ => return Ok(None),
    };
    if !std::io::stdin().is_terminal() {
        return Err(CliError::Usage(format!(
            "refusing to force-release lock {key} (held by {}) without confirmation: \
             stdin is not a terminal; pass --yes",
            printable(&info.owner)
        )));
    }
    let mut stderr = std::io::stderr().lock();
    write!(
        stderr,
        "Force-release lock {}, held by {} (fence {})? The holder may still be running. [y/N] ",
        printable(&key.to_string()),
        printable(&info.owner),
        info.fence
    )
    .and_then(|()| stderr.flush())
    .map_err(CliError::io("writing the prompt"))?;
    drop(stderr);
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(CliError::io("reading the answer"))?;
    if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        return Err(CliError::NotConfirmed { key: key.clone() });
    }
    let version = Rvn::from_stored(info.version.clone());
    Ok(Some(client.release_version(key.clone(), &version).await?))
}
