//! What lockctl writes to stdout: text for people, JSON for programs. Messages
//! and errors go to stderr whatever the format.

use std::io::Write;

use lock_core::{DetachedLock, LockInfo, LockKey};
use serde::Serialize;

use crate::args::OutputFormat;
use crate::exit::CliError;
use crate::text::{duration, printable};

/// A lock as `show` and `list` print it.
#[derive(Debug, Serialize)]
pub struct LockJson {
    /// The partition key.
    pub key: String,
    /// The sort key, if any.
    pub sort_key: Option<String>,
    /// Owner name of the record's last writer.
    pub owner: String,
    /// `true` unless the record is released. A held record whose holder died
    /// stays "held" until someone takes it over after its lease.
    pub held: bool,
    /// Fencing token of the latest acquisition (0 for records written by
    /// libraries without fences).
    pub fence: u64,
    /// The lease the holder promised, in milliseconds.
    pub lease_ms: u128,
    /// The record version (changes on every write; `release --version` takes it).
    pub version: String,
    /// The data stored with the lock, as UTF-8 (invalid bytes replaced).
    pub data: Option<String>,
}

impl From<&LockInfo> for LockJson {
    fn from(info: &LockInfo) -> Self {
        Self {
            key: info.key.partition().to_owned(),
            sort_key: info.key.sort().map(str::to_owned),
            owner: info.owner.clone(),
            held: !info.released,
            fence: info.fence.get(),
            lease_ms: info.lease.as_millis(),
            version: info.version.clone(),
            data: info
                .data
                .as_deref()
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned()),
        }
    }
}

/// What `acquire` prints.
#[derive(Debug, Serialize)]
pub struct AcquiredJson {
    /// The partition key.
    pub key: String,
    /// The sort key, if any.
    pub sort_key: Option<String>,
    /// Fencing token.
    pub fence: u64,
    /// Record version, for `release --version`.
    pub version: String,
    /// Owner name written.
    pub owner: String,
    /// Lease written, in milliseconds.
    pub lease_ms: u128,
}

impl From<&DetachedLock> for AcquiredJson {
    fn from(lock: &DetachedLock) -> Self {
        Self {
            key: lock.key().partition().to_owned(),
            sort_key: lock.key().sort().map(str::to_owned),
            fence: lock.fence().get(),
            version: lock.version().as_str().to_owned(),
            owner: lock.owner().to_owned(),
            lease_ms: lock.lease().as_millis(),
        }
    }
}

/// Write `value` as one line of JSON.
pub fn json(value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string(value).map_err(|error| CliError::Io {
        what: "encoding JSON output",
        source: std::io::Error::other(error),
    })?;
    line(&text)
}

/// Write `text` and a newline to stdout, reporting a closed pipe as an error.
pub fn line(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(CliError::io("writing to stdout"))
}

/// Print one lock in `format`.
pub fn lock(format: OutputFormat, key: &LockKey, info: Option<&LockInfo>) -> Result<(), CliError> {
    match format {
        OutputFormat::Json => json(&info.map(LockJson::from)),
        OutputFormat::Text => match info {
            None => line(&format!("lock {}: no record", printable(&key.to_string()))),
            Some(info) => {
                let mut text = format!(
                    "key:      {}\nstate:    {}\nowner:    {}\nfence:    {}\nlease:    {}\nversion:  {}",
                    printable(&info.key.to_string()),
                    if info.released { "released" } else { "held" },
                    printable(&info.owner),
                    info.fence,
                    duration(info.lease),
                    printable(&info.version),
                );
                if let Some(data) = &info.data {
                    text.push_str(&format!(
                        "\ndata:     {}",
                        printable(&String::from_utf8_lossy(data))
                    ));
                }
                line(&text)
            }
        },
    }
}

/// Print locks as a table or a JSON array.
pub fn locks(format: OutputFormat, infos: &[LockInfo]) -> Result<(), CliError> {
    match format {
        OutputFormat::Json => json(&infos.iter().map(LockJson::from).collect::<Vec<_>>()),
        OutputFormat::Text => {
            let rows: Vec<[String; 6]> = infos
                .iter()
                .map(|info| {
                    [
                        printable(&info.key.to_string()).into_owned(),
                        if info.released { "released" } else { "held" }.to_owned(),
                        printable(&info.owner).into_owned(),
                        info.fence.to_string(),
                        duration(info.lease),
                        printable(&info.version).into_owned(),
                    ]
                })
                .collect();
            let header = ["KEY", "STATE", "OWNER", "FENCE", "LEASE", "VERSION"].map(str::to_owned);
            let mut widths = header.clone().map(|h| h.len());
            for row in &rows {
                for (width, cell) in widths.iter_mut().zip(row) {
                    *width = (*width).max(cell.chars().count());
                }
            }
            let mut text = String::new();
            for row in std::iter::once(&header).chain(&rows) {
                let cells: Vec<String> = row
                    .iter()
                    .zip(widths)
                    .map(|(cell, width)| format!("{cell:<width$}"))
                    .collect();
                text.push_str(cells.join("  ").trim_end());
                text.push('\n');
            }
            text.pop();
            line(&text)
        }
    }
}

/// Quote `value` for a POSIX shell when it needs it, so `eval "$(lockctl
/// acquire ...)"` is safe whatever the owner name or key holds.
pub fn shell_quote(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@%+,=".contains(&b));
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("host-1a2b"), "host-1a2b");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }
}
