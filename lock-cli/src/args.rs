//! The command line: global options, subcommands and their arguments (clap
//! derive). Parsing only; the commands live in `commands/`.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use lock_core::LockKey;

/// Exit codes, shown at the end of `--help` (and documented in docs/cli.md).
const EXIT_CODES: &str = "\
Exit codes:
  0    success (for `run`: the command's own exit code is returned)
  1    error (store unreachable, table missing, permission denied, a forced
       release not confirmed, ...)
  2    usage error (bad option, bad duration, `release --force` with no
       terminal and no --yes)
  3    timed out waiting for the lock (the message names the holder)
  4    the lock was lost while `run` held it (the command got SIGTERM)
  5    `run`: the command ran for --max-time and was stopped (SIGTERM)
  126  `run`: the command could not be executed
  127  `run`: the command was not found
  128+N  `run`: the command was killed by signal N

AWS settings (region, credentials, endpoint) come from the usual places:
environment (AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL, ...), ~/.aws/config
and ~/.aws/credentials, SSO, web identity and instance roles.

On PostgreSQL: --store postgres://user:password@host:port/database (or
LOCKCTL_STORE); --table names the table (default `locks`).
In a bucket: --store s3://bucket/prefix, gs://bucket/prefix or
az://container/prefix; settings from the service's environment variables
(AWS_*, GOOGLE_*, AZURE_*), and for S3 --region and --endpoint-url.
On etcd: --store etcd://user:password@host:2379,host2:2379/prefix (etcds://
for TLS). On Redis or Valkey: --store redis://host:6379?prefix=locks
(rediss://, valkey://; a Redis Cluster node's URL for a cluster).
lockctl's own settings come from LOCKCTL_* variables; the LOCK_* variables
describe a lock (what `run` gives its command, what `acquire` prints).";

/// Run a command under a distributed lock, and inspect and manage locks, on a
/// DynamoDB or PostgreSQL table, in an S3, GCS or Azure bucket, in etcd, or
/// in Redis or Valkey.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, about, after_help = EXIT_CODES, args_override_self = true)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Where the locks live: `dynamodb`, a PostgreSQL connection string
    /// (`postgres://user:password@host:port/database`), a bucket and prefix
    /// (`s3://bucket/prefix`, `gs://bucket/prefix`, `az://container/prefix`),
    /// etcd (`etcd://host:2379/prefix`), or Redis or Valkey
    /// (`redis://host:6379?prefix=locks`) [default: dynamodb]
    #[arg(long, global = true, env = "LOCKCTL_STORE", value_name = "STORE", value_parser = text(), hide_env_values = true)]
    pub store: Option<String>,

    /// Lock table [default: `locks`; `DynamoDBLockTable` with --layout
    /// python-dynamodb-lock; `lockTable` with --layout java]
    #[arg(long, global = true, env = "LOCKCTL_TABLE", value_parser = text())]
    pub table: Option<String>,

    /// AWS region (overrides AWS_REGION and the profile's region)
    #[arg(long, global = true, value_parser = text())]
    pub region: Option<String>,

    /// DynamoDB or S3 endpoint URL, for a local emulator or an S3-compatible
    /// service (overrides AWS_ENDPOINT_URL)
    #[arg(long, global = true, value_name = "URL", value_parser = text())]
    pub endpoint_url: Option<String>,

    /// Table layout: this library's own, python-dynamodb-lock's, or the Java
    /// AmazonDynamoDBLockClient's (the names Python's `layout=` takes;
    /// `default` and `python` are accepted too)
    #[arg(long, global = true, value_enum, default_value_t = LayoutName::Native, env = "LOCKCTL_LAYOUT")]
    pub layout: LayoutName,

    /// Owner name written into the lock [default: host name + random suffix]
    #[arg(long, global = true, env = "LOCKCTL_OWNER", value_parser = text())]
    pub owner: Option<String>,

    /// The most any two hosts' wall clocks (and the service's) differ: with
    /// it, a crashed holder's lock on DynamoDB or a bucket is taken over once
    /// its last write's time + lease × 1.01 + this has passed (and one second
    /// more in a bucket, whose times are whole seconds), the first time
    /// lockctl looks, instead of after watching it for a lease. A host whose
    /// clock is off by more can take a live holder's lock early (fences still
    /// refuse the old holder). Accepted on PostgreSQL, Redis and etcd, where
    /// it changes nothing [default: off]
    #[arg(long, global = true, env = "LOCKCTL_MAX_CLOCK_DIFFERENCE", value_parser = parse_duration, value_name = "DURATION")]
    pub max_clock_difference: Option<Duration>,

    /// Do not take a crashed holder's lock over by the store's own clock
    /// (PostgreSQL's; Redis's and Valkey's, that of the node that wrote the
    /// record): watch it unchanged for a lease instead, which relies on no
    /// clock but this machine's
    #[arg(long, global = true, env = "LOCKCTL_NO_STORE_CLOCK")]
    pub no_store_clock: bool,

    /// Leave a lock whose holder went silent (crashed, cut off) alone this
    /// much longer than its lease, for resources that cannot check fences;
    /// give every client of the lock the same [default: none]
    #[arg(long, global = true, env = "LOCKCTL_LOCK_DELAY", value_parser = parse_duration, value_name = "DURATION")]
    pub lock_delay: Option<Duration>,

    /// Output format of what goes to stdout
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// On an error, print every cause down to the AWS SDK's own (by default
    /// only lockctl's and the lock library's)
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,

    /// At exit, print the lock library's metrics (store calls, acquires,
    /// heartbeats, losses; see docs/operations.md) to stderr as one line of
    /// JSON, `{"metrics": [...]}`, for CI jobs and cron logs
    #[arg(long, global = true)]
    pub metrics: bool,
}

/// The table layouts `lock-dynamodb` ships, by the names of
/// `lock_dynamodb::Layout::named`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayoutName {
    /// This library's layout (fences kept across release)
    #[value(alias = "default")]
    Native,
    /// python-dynamodb-lock's layout (`lock_key`/`sort_key`; release deletes)
    #[value(name = "python-dynamodb-lock", alias = "python")]
    PythonDynamodbLock,
    /// The Java AmazonDynamoDBLockClient's layout (`key`; `isReleased`)
    Java,
}

/// How stdout is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable text (`acquire`: shell variable assignments)
    Text,
    /// One JSON document
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Acquire a lock, run a command while holding it, release it when the
    /// command exits, and exit with the command's exit code.
    ///
    /// The command gets LOCK_KEY (the lock's name), LOCK_SORT_KEY (with
    /// --sort-key), LOCK_FENCE, LOCK_FENCE_KEY (the name the fence goes with
    /// at a fence check) and LOCK_OWNER in its environment, and not
    /// LOCKCTL_OWNER (a lockctl it starts gets an owner name of its own).
    /// The lock is heartbeaten while it runs. SIGINT, SIGTERM and SIGHUP are
    /// forwarded to it. If the lease can no longer be trusted (someone released
    /// or took the lock, or heartbeats failed), the command gets SIGTERM, then
    /// SIGKILL after the grace period, and lockctl exits with 4.
    #[command(
        after_help = "Example:\n  lockctl --table locks run nightly-report --min-hold 30m --max-time 2h -- ./report.sh --full"
    )]
    Run(RunArgs),

    /// Campaign for leadership of a lock among every `lockctl elect` (and
    /// every other candidate) on it, run the command while leading, and
    /// campaign again when its leadership ends.
    ///
    /// The command runs under `run`'s supervision: the same environment
    /// (LOCK_FENCE is the leadership's fence), signals forwarded, and SIGTERM
    /// then SIGKILL before the lease can end when leadership can no longer be
    /// trusted; lockctl then campaigns again and restarts the command when it
    /// leads again. When the command exits by itself, lockctl resigns (another
    /// candidate may lead) and campaigns again after --restart-delay, or, with
    /// --exit-with-command, exits with the command's exit code. SIGTERM,
    /// SIGINT or SIGHUP to lockctl: forwarded to a running command, then
    /// lockctl resigns and exits with the command's code (128+N while
    /// campaigning).
    #[command(
        after_help = "Example (one scheduler in the fleet, restarted elsewhere if its host dies):\n  lockctl --table locks elect scheduler --lease 10s -- ./scheduler --fence-from-env"
    )]
    Elect(ElectArgs),

    /// Acquire a lock without heartbeating it, and print its fence and version
    /// (for scripts: release it later with `release --version`, or let the lease
    /// run out).
    #[command(
        after_help = "Example:\n  vars=$(lockctl acquire deploy --lease 15m --wait 1m) || exit $?\n  eval \"$vars\"\n  ./deploy.sh --fence \"$LOCK_FENCE\"\n  lockctl release deploy --version \"$LOCK_VERSION\"\n(Check the exit status before eval: `eval \"$(false)\"` succeeds.)"
    )]
    Acquire(AcquireArgs),

    /// Release a lock by the version `acquire` printed, or (--force) whoever
    /// holds it.
    Release(ReleaseArgs),

    /// Show one lock's record.
    Show(ShowArgs),

    /// List the locks in the table.
    List(ListArgs),

    /// Create the table for the chosen layout (on-demand billing, TTL on the
    /// expiry attribute when the layout has one), and wait until it is active.
    CreateTable(CreateTableArgs),

    /// Check that the table exists and fits the chosen layout.
    ValidateTable,

    /// (internal) Become the command of `run`, killed when lockctl dies.
    #[command(name = "__exec", hide = true)]
    Exec(ExecArgs),

    /// (internal) The watchdog of `run`: kills the command at the end of the
    /// safe time if lockctl cannot.
    #[command(name = "__watchdog", hide = true)]
    Watchdog,
}

/// `__exec` (internal).
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// lockctl's process id.
    #[arg(long)]
    pub parent: i32,

    /// The command and its arguments.
    #[arg(required = true, last = true)]
    pub command: Vec<OsString>,
}

/// The lock a command is about.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The lock's name (its partition key)
    #[arg(value_parser = text())]
    pub key: String,

    /// Sort key, for fine-grained locks under one partition (tables with a sort
    /// key only)
    #[arg(long, value_name = "SORT", value_parser = text())]
    pub sort_key: Option<String>,
}

impl KeyArgs {
    /// The lock key.
    pub fn lock_key(&self) -> LockKey {
        match &self.sort_key {
            Some(sort) => LockKey::with_sort(self.key.clone(), sort.clone()),
            None => LockKey::new(self.key.clone()),
        }
    }
}

/// How a lock is taken (run and acquire).
#[derive(Debug, Args)]
pub struct TakeArgs {
    /// How long to wait for the lock when someone else holds it. A holder that
    /// stopped heartbeating is taken over once its record has not changed for
    /// its lease × 1.01. For `run`, 0 means: exit 3 as soon as the holder is
    /// seen alive (about one of its heartbeat periods), take over a holder that
    /// is dead; for `acquire`, 0 makes one attempt.
    #[arg(long, value_parser = parse_duration, default_value = "0s", value_name = "DURATION")]
    pub wait: Duration,

    /// Data to store with the lock (readable with `show`); `-` reads it from
    /// standard input
    #[arg(long, value_parser = text())]
    pub data: Option<String>,

    /// Read the data to store with the lock from this file (for data larger
    /// than a command line may hold)
    #[arg(long, value_name = "PATH", conflicts_with = "data")]
    pub data_file: Option<std::path::PathBuf>,

    /// Remove the data the previous holder left (by default it is kept, and
    /// the command finds it with `lockctl show`)
    #[arg(long, conflicts_with_all = ["data", "data_file"])]
    pub clear_data: bool,
}

/// `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock.
    #[command(flatten)]
    pub key: KeyArgs,

    /// More locks to hold with KEY, all or nothing: they are taken in one
    /// fixed order (so runs asking for overlapping sets never deadlock), each
    /// with its own fence, within one --wait; the command sees LOCK_KEYS and
    /// LOCK_FENCES (one `key=fence` per line, each key as fences name it)
    #[arg(
        value_name = "MORE_KEYS",
        value_parser = text(),
        conflicts_with_all = ["shared", "exclusive", "permits", "sort_key"]
    )]
    pub more_keys: Vec<String>,

    /// Run alongside other --shared runs on KEY, never beside an --exclusive
    /// one: a read of the reader-writer lock KEY. LOCK_FENCE is the fence of
    /// the last --exclusive run, LOCK_FENCE_KEY the lock's write lock (the
    /// name every reader and writer of KEY fences under)
    #[arg(long, conflicts_with_all = ["exclusive", "permits"])]
    pub shared: bool,

    /// Run with no --shared run on KEY: the write of the reader-writer lock
    /// KEY. It waits for the --shared runs inside to end; once it waits, new
    /// --shared runs wait behind it
    #[arg(long, conflicts_with = "permits")]
    pub exclusive: bool,

    /// With --shared or --exclusive: room for N --shared runs on KEY at once
    /// (every run on KEY must say the same N)
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub readers: u32,

    /// How the lock is taken.
    #[command(flatten)]
    pub take: TakeArgs,

    /// Lease: how long the lock stays trusted without a heartbeat (heartbeats
    /// every quarter of it); from 1s to 365 days
    #[arg(long, value_parser = parse_lease, default_value = "20s", value_name = "DURATION")]
    pub lease: Duration,

    /// How long the command may take to exit after SIGTERM before SIGKILL.
    /// SIGTERM comes when heartbeats have failed long enough that only this
    /// much safe time is left, so the command is dead before anyone can take
    /// the lock over. At most the safe time minus two heartbeat periods (8.8s
    /// for a 20s lease) [default: a quarter of the lease, at most 10s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub grace: Option<Duration>,

    /// Keep the lock held until this long after it was acquired, even if the
    /// command exits sooner (one final write; lockctl then exits with the
    /// command's code). A host whose timer fires up to this late (timer
    /// lateness plus clock skew) finds the lock held and skips the job
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_hold: Option<Duration>,
    /// Stop the command when it has run this long: SIGTERM, then SIGKILL
    /// after the grace period; the lock is released and lockctl exits with 5
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_time: Option<Duration>,
    /// Run the command in lockctl's process group, so it can read from the
    /// terminal and gets terminal signals (Ctrl-C) directly (lockctl then
    /// forwards SIGTERM and SIGHUP but not SIGINT); by default it gets its own
    /// process group and signals go to the whole group (the command and its
    /// children)
    #[arg(long)]
    pub foreground: bool,

    /// Let up to N commands run at once under KEY: take one of the N permits
    /// of the semaphore KEY instead of the lock KEY (every run on KEY must
    /// say the same N). LOCK_SORT_KEY then names the permit's slot
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub permits: Option<u32>,

    /// The command and its arguments
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The lock.
    #[command(flatten)]
    pub key: KeyArgs,

    /// Lease: how long leadership stays trusted without a heartbeat, and about
    /// how long the fleet goes without a leader when the leader's host dies
    /// (× 1.01, plus a poll); from 1s to 365 days
    #[arg(long, value_parser = parse_lease, default_value = "20s", value_name = "DURATION")]
    pub lease: Duration,

    /// How long the command may take to exit after SIGTERM before SIGKILL,
    /// as for `run` [default: a quarter of the lease, at most 10s]
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub grace: Option<Duration>,

    /// Data the leader stores with the lock (its address, say), shown by
    /// `lockctl show` and to the other candidates
    #[arg(long, value_parser = text())]
    pub data: Option<String>,

    /// When the command exits by itself, resign and exit with its exit code
    /// (by default lockctl resigns and campaigns again)
    #[arg(long)]
    pub exit_with_command: bool,

    /// After the command exited by itself, wait this long before campaigning
    /// again (so a command that fails at once is not restarted in a loop)
    #[arg(long, value_parser = parse_duration, default_value = "1s", value_name = "DURATION")]
    pub restart_delay: Duration,

    /// Run the command in lockctl's process group, as for `run`
    #[arg(long)]
    pub foreground: bool,

    /// The command and its arguments
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `acquire`.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// The lock.
    #[command(flatten)]
    pub key: KeyArgs,

    /// How the lock is taken.
    #[command(flatten)]
    pub take: TakeArgs,

    /// Lease: nothing heartbeats the lock, so it is held for this long unless
    /// released first; from 1s to 365 days
    #[arg(long, value_parser = parse_lease, value_name = "DURATION")]
    pub lease: Duration,
}

/// `release`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("how").required(true).args(["version", "force"]))]
pub struct ReleaseArgs {
    /// The lock.
    #[command(flatten)]
    pub key: KeyArgs,

    /// Release only if the lock is still at this version (as printed by
    /// `acquire` or `show`)
    #[arg(long, value_name = "VERSION", value_parser = text())]
    pub version: Option<String>,

    /// Release the lock whoever holds it (asks for confirmation)
    #[arg(long)]
    pub force: bool,

    /// With --force: do not ask for confirmation
    #[arg(long, short = 'y', requires = "force", conflicts_with = "version")]
    pub yes: bool,
}

/// `show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The lock.
    #[command(flatten)]
    pub key: KeyArgs,
}

/// `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the locks of this partition key
    #[arg(long, value_name = "P", value_parser = text())]
    pub partition: Option<String>,
}

/// `create-table`.
#[derive(Debug, Args)]
pub struct CreateTableArgs {
    /// Do not enable DynamoDB time to live on the expiry attribute
    #[arg(long)]
    pub no_ttl: bool,

    /// How long to wait for the table to become active
    #[arg(long, value_parser = parse_duration, default_value = "5m", value_name = "DURATION")]
    pub wait: Duration,
}

/// A lease: a duration within [`MIN_LEASE`](crate::deadline::MIN_LEASE) and
/// [`MAX_LEASE`](crate::deadline::MAX_LEASE).
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    crate::deadline::check_lease(lease)?;
    Ok(lease)
}

/// A text argument. Arguments arrive as bytes; one that is not UTF-8 is
/// refused by clap with a message naming the argument (clap's own `String`
/// parser says only that "one or more arguments" were not UTF-8).
fn text() -> impl clap::builder::TypedValueParser<Value = String> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new().try_map(|value: OsString| {
        value.into_string().map_err(|value| {
            format!(
                "{:?} is not valid UTF-8 (lock names, owners and data are stored as text)",
                value
            )
        })
    })
}

/// A duration such as `30s`, `5m`, `1h30m` or `500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{text:?} has no unit: write for example {text}s or {text}m"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("{error} (write a duration such as 30s, 5m, 1h30m or 500ms)"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `--layout` takes the names `lock_dynamodb::Layout::named` and
    /// Python's `layout=` take, and the old spellings as aliases.
    #[test]
    fn layouts_have_one_vocabulary_with_rust_and_python() {
        use clap::Parser;
        let layout_of = |name: &str| {
            Cli::try_parse_from(["lockctl", "--layout", name, "show", "job"])
                .map(|cli| cli.global.layout)
        };
        for name in lock_dynamodb::Layout::NAMES {
            let parsed = layout_of(name).unwrap();
            assert_eq!(parsed.flag(), name);
            assert_eq!(
                parsed.layout().preset_name(),
                lock_dynamodb::Layout::named(name).unwrap().preset_name()
            );
        }
        assert_eq!(layout_of("default").unwrap(), LayoutName::Native);
        assert_eq!(layout_of("python").unwrap(), LayoutName::PythonDynamodbLock);
        assert!(layout_of("pyhton").is_err());
        assert_eq!(
            Cli::try_parse_from(["lockctl", "show", "job"])
                .unwrap()
                .global
                .layout,
            LayoutName::Native
        );
    }

    /// The numeric codes a listing names: `0`, `126 / 127`; `128+N` is
    /// left out (it is not one code).
    fn codes_in(lines: impl Iterator<Item = String>) -> Vec<(u8, String)> {
        let mut codes = Vec::new();
        for line in lines {
            let mut words = line.split_whitespace().peekable();
            let mut numbers = Vec::new();
            while let Some(word) = words.peek() {
                if let Ok(code) = word.parse::<u8>() {
                    numbers.push(code);
                } else if *word != "/" {
                    break;
                }
                words.next();
            }
            if words.peek().is_some_and(|word| word.starts_with('+')) {
                continue;
            }
            let meaning = words.collect::<Vec<_>>().join(" ");
            codes.extend(numbers.into_iter().map(|code| (code, meaning.clone())));
        }
        codes.sort();
        codes
    }

    /// The exit codes `--help` lists, docs/cli.md lists and `exit.rs` uses
    /// are the same, and say the same of a refused confirmation.
    #[test]
    fn help_docs_and_code_agree_on_exit_codes() {
        use crate::exit;
        let in_code = [
            exit::OK,
            exit::ERROR,
            exit::USAGE,
            exit::TIMED_OUT,
            exit::LOST,
            exit::MAX_TIME,
            exit::CANNOT_EXECUTE,
            exit::NOT_FOUND,
        ];
        // --help: the lines under "Exit codes:" up to the first blank one,
        // continuation lines joined to the code they continue.
        let mut help_lines: Vec<String> = Vec::new();
        for line in EXIT_CODES
            .lines()
            .skip_while(|line| !line.starts_with("Exit codes:"))
            .skip(1)
            .take_while(|line| !line.trim().is_empty())
        {
            let starts_code = line
                .split_whitespace()
                .next()
                .is_some_and(|word| word.chars().next().is_some_and(|c| c.is_ascii_digit()));
            match help_lines.last_mut() {
                Some(last) if !starts_code => {
                    last.push(' ');
                    last.push_str(line.trim());
                }
                _ => help_lines.push(line.trim().to_owned()),
            }
        }
        let help = codes_in(help_lines.into_iter());
        // docs/cli.md: the rows of the table under "## Exit codes".
        let docs_text = include_str!("../../docs/cli.md");
        let docs = codes_in(
            docs_text
                .lines()
                .skip_while(|line| line.trim() != "## Exit codes")
                .skip(1)
                .take_while(|line| !line.starts_with("## "))
                .filter(|line| line.starts_with("| ") && !line.starts_with("| code"))
                .map(|line| line.trim_matches('|').replacen(" | ", " ", 1)),
        );
        let numbers = |codes: &[(u8, String)]| {
            let mut numbers: Vec<u8> = codes.iter().map(|(code, _)| *code).collect();
            numbers.dedup();
            numbers
        };
        assert_eq!(numbers(&help), in_code, "--help: {help:?}");
        assert_eq!(numbers(&docs), in_code, "docs/cli.md: {docs:?}");
        for (source, codes) in [("--help", &help), ("docs/cli.md", &docs)] {
            let says = |code: u8| {
                codes
                    .iter()
                    .find(|(c, _)| *c == code)
                    .map(|(_, meaning)| meaning.to_lowercase())
                    .unwrap_or_default()
            };
            assert!(
                says(exit::ERROR).contains("not confirmed"),
                "{source}: {codes:?}"
            );
            assert!(
                !says(exit::USAGE).contains("confirmation refused"),
                "{source}"
            );
            assert!(
                says(exit::MAX_TIME).contains("max-time"),
                "{source}: {codes:?}"
            );
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("30").unwrap_err().contains("30s"));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("").is_err());
    }
}
