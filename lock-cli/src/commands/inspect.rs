//! `lockctl show` and `lockctl list`.

use lock_core::ListOptions;

use crate::args::{Global, ListArgs, ShowArgs};
use crate::exit::{CliError, OK};
use crate::output;

/// Print one lock's record (`null` in JSON when there is none).
pub async fn show(global: &Global, args: &ShowArgs) -> Result<u8, CliError> {
    let client = global.client(None).await?;
    let key = args.key.lock_key();
    let info = client.get_lock(key.clone()).await?;
    output::lock(global.output, &key, info.as_ref())?;
    Ok(OK)
}

/// Print every lock (of one partition), sorted by key.
pub async fn list(global: &Global, args: &ListArgs) -> Result<u8, CliError> {
    use futures_util::TryStreamExt;
    let client = global.client(None).await?;
    let mut options = ListOptions::new();
    if let Some(partition) = &args.partition {
        options = options.partition(partition.clone());
    }
    let mut locks: Vec<_> = client.list_all(options).try_collect().await?;
    locks.sort_by(|a, b| a.key.cmp(&b.key));
    output::locks(global.output, &locks)?;
    Ok(OK)
}
