//! Running the `lockctl` binary against the moto emulator: endpoint, fresh
//! tables, scratch directories, and waiting on processes and files with
//! deadlines instead of fixed sleeps.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The emulator's endpoint, from `LOCK_DYNAMODB_ENDPOINT` (set by
/// `./scripts/test`). Without it the test fails and says how to run it, unless
/// `LOCK_DYNAMODB_SKIP=1` asks to skip, which is printed. (The same convention
/// as lock-dynamodb's tests.)
pub fn endpoint() -> Option<String> {
    lock_testkit::server_from_env(
        "LOCK_DYNAMODB_ENDPOINT",
        "LOCK_DYNAMODB_SKIP",
        "lockctl DynamoDB",
    )
}

/// The PostgreSQL test server, from `LOCK_POSTGRES_URL` (set by
/// `./scripts/test`), with the same convention (`LOCK_POSTGRES_SKIP=1`).
pub fn postgres_url() -> Option<String> {
    lock_testkit::server_from_env(
        "LOCK_POSTGRES_URL",
        "LOCK_POSTGRES_SKIP",
        "lockctl PostgreSQL",
    )
}

/// One test's table and scratch directory.
#[derive(Debug)]
pub struct Env {
    pub endpoint: String,
    pub table: String,
    pub dir: PathBuf,
    layout: &'static str,
    /// The PostgreSQL connection string, for an environment on PostgreSQL.
    postgres: Option<String>,
    /// The bucket URL (`s3://bucket/prefix` on moto), for an environment in
    /// a bucket.
    bucket: Option<String>,
    /// A store named by its URL alone (`etcd://127.0.0.1:PORT/prefix`,
    /// `redis://127.0.0.1:PORT?prefix=...`), for an environment in etcd or
    /// Redis.
    store_url: Option<String>,
}

impl Env {
    /// A fresh table name (not created) and scratch directory, or `None` when
    /// the tests are skipped.
    pub fn new(prefix: &str) -> Option<Self> {
        Self::with_layout(prefix, "default")
    }

    /// Like [`Env::new`] for a table of `layout`.
    pub fn with_layout(prefix: &str, layout: &'static str) -> Option<Self> {
        let endpoint = endpoint()?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Self {
            endpoint,
            table: format!("cli-{prefix}-{id}"),
            dir,
            layout,
            postgres: None,
            bucket: None,
            store_url: None,
        })
    }

    /// An environment with no server at all (the endpoint is a loopback port
    /// nobody listens on): for what lockctl must refuse before it sends
    /// anything. A command that reached for the network would fail with exit 1,
    /// not a usage error.
    pub fn offline(prefix: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap();
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            table: format!("cli-{prefix}-{id}"),
            dir,
            layout: "default",
            postgres: None,
            bucket: None,
            store_url: None,
        }
    }

    /// A fresh table name (not created) on the PostgreSQL test server, and a
    /// scratch directory; `lockctl` gets `--store <url>`.
    pub fn postgres(prefix: &str) -> Option<Self> {
        let url = postgres_url()?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Self {
            endpoint: String::new(),
            table: format!("cli_{prefix}_{id}"),
            dir,
            layout: "default",
            postgres: Some(url),
            bucket: None,
            store_url: None,
        })
    }

    /// A fresh prefix in a bucket of moto's S3 (the bucket made if absent),
    /// and a scratch directory; `lockctl` gets `--store s3://...` and
    /// `--endpoint-url`.
    pub fn bucket(prefix: &str) -> Option<Self> {
        const BUCKET: &str = "lockctl-tests";
        let endpoint = endpoint()?;
        lock_testkit::moto_bucket(&endpoint, BUCKET).unwrap();
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Self {
            endpoint,
            table: String::new(),
            dir,
            layout: "default",
            postgres: None,
            bucket: Some(format!("s3://{BUCKET}/cli-{prefix}-{id}")),
            store_url: None,
        })
    }

    /// A fresh prefix in the etcd test server and a scratch directory;
    /// `lockctl` gets `--store etcd://...`.
    pub fn etcd(prefix: &str) -> Option<Self> {
        let endpoint =
            lock_testkit::server_from_env("LOCK_ETCD_ENDPOINT", "LOCK_ETCD_SKIP", "lockctl etcd")?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Self {
            endpoint: String::new(),
            table: String::new(),
            dir,
            layout: "default",
            postgres: None,
            bucket: None,
            store_url: Some(format!("etcd://{endpoint}/cli-{prefix}-{id}")),
        })
    }

    /// A fresh prefix in the Redis test server and a scratch directory;
    /// `lockctl` gets `--store redis://...?prefix=...`.
    pub fn redis(prefix: &str) -> Option<Self> {
        let url =
            lock_testkit::server_from_env("LOCK_REDIS_URL", "LOCK_REDIS_SKIP", "lockctl Redis")?;
        Some(Self::redis_at(prefix, &url))
    }

    /// Locks under a fresh prefix of the Valkey test server, named with a
    /// `valkey://` URL.
    pub fn valkey(prefix: &str) -> Option<Self> {
        let url =
            lock_testkit::server_from_env("LOCK_VALKEY_URL", "LOCK_VALKEY_SKIP", "lockctl Valkey")?;
        let url = url.replacen("redis://", "valkey://", 1);
        Some(Self::redis_at(prefix, &url))
    }

    fn redis_at(prefix: &str, url: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir().join(format!("lockctl-{prefix}-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        Self {
            endpoint: String::new(),
            table: String::new(),
            dir,
            layout: "default",
            postgres: None,
            bucket: None,
            store_url: Some(format!("{url}?prefix=cli-{prefix}-{id}")),
        }
    }

    /// The same table through another PostgreSQL connection string (another
    /// role, TLS settings).
    pub fn with_store_url(mut self, url: String) -> Self {
        self.postgres = Some(url);
        self
    }

    /// Like [`Env::new`], with the table created by `lockctl create-table`.
    pub fn with_table(prefix: &str) -> Option<Self> {
        let env = Self::new(prefix)?;
        env.create_table();
        Some(env)
    }

    /// Create the table with `lockctl create-table`.
    /// The options that point a `lockctl` at this table and server (for
    /// one started by a command under `run`).
    pub fn target_args(&self) -> Vec<String> {
        if let Some(url) = &self.store_url {
            return vec!["--store".into(), url.clone()];
        }
        if let Some(url) = &self.bucket {
            return vec![
                "--store".into(),
                url.clone(),
                "--endpoint-url".into(),
                self.endpoint.clone(),
            ];
        }
        match &self.postgres {
            Some(url) => vec![
                "--store".into(),
                url.clone(),
                "--table".into(),
                self.table.clone(),
            ],
            None => vec![
                "--table".into(),
                self.table.clone(),
                "--endpoint-url".into(),
                self.endpoint.clone(),
                "--layout".into(),
                self.layout.into(),
            ],
        }
    }

    pub fn create_table(&self) {
        let out = self.run(&["create-table"]);
        assert_eq!(out.code, Some(0), "create-table failed: {out:?}");
    }

    /// A `lockctl` command on this table and emulator, with dummy credentials
    /// and nothing from the developer's own AWS configuration.
    pub fn lockctl(&self, args: &[&str]) -> Command {
        self.command(args, true)
    }

    /// Run `lockctl args` with this environment's variables but none of its
    /// options: the arguments say which store.
    pub fn run_bare(&self, args: &[&str]) -> Output {
        let name = format!("run-{}", uuid::Uuid::new_v4().simple());
        let stdout = self.dir.join(format!("{name}.out"));
        let stderr = self.dir.join(format!("{name}.err"));
        let child = self
            .command(args, false)
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Process {
            child,
            stdout,
            stderr,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
        .finish(Duration::from_secs(30))
    }

    fn command(&self, args: &[&str], targeted: bool) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_lockctl"));
        match (&self.postgres, &self.bucket) {
            _ if !targeted => &mut command,
            _ if self.store_url.is_some() => {
                command.args(["--store", self.store_url.as_deref().unwrap_or_default()])
            }
            (_, Some(url)) => command.args(["--store", url, "--endpoint-url", &self.endpoint]),
            (Some(url), None) => command.args(["--store", url, "--table", &self.table]),
            (None, None) => command.args([
                "--table",
                &self.table,
                "--endpoint-url",
                &self.endpoint,
                "--layout",
                self.layout,
            ]),
        };
        command
            .args(args)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("AWS_CONFIG_FILE", "/dev/null")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("LOCKCTL_TABLE")
            .env_remove("LOCKCTL_OWNER")
            .env_remove("LOCKCTL_LAYOUT")
            .env_remove("LOCKCTL_STORE")
            .stdin(Stdio::null());
        command
    }

    /// Run `lockctl args` to the end (at most 30 s) and capture its output.
    pub fn run(&self, args: &[&str]) -> Output {
        let name = format!("run-{}", uuid::Uuid::new_v4().simple());
        let process = self.spawn(&name, args);
        process.finish(Duration::from_secs(30))
    }

    /// Start `lockctl args` in the background, stdout and stderr into files
    /// named after `name` in the scratch directory.
    pub fn spawn(&self, name: &str, args: &[&str]) -> Process {
        let stdout = self.dir.join(format!("{name}.out"));
        let stderr = self.dir.join(format!("{name}.err"));
        let child = self
            .lockctl(args)
            .stdout(File::create(&stdout).unwrap())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Process {
            child,
            stdout,
            stderr,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// A path in the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `lockctl` running in the background.
#[derive(Debug)]
pub struct Process {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    args: Vec<String>,
}

impl Process {
    /// The process id, for signals.
    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    /// Wait for the process to end (killing it and failing the test after
    /// `limit`) and collect its output.
    pub fn finish(mut self, limit: Duration) -> Output {
        let status = wait_child(&mut self.child, limit)
            .unwrap_or_else(|| panic!("lockctl {:?} still running after {limit:?}", self.args));
        Output {
            code: status.code(),
            status,
            stdout: std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            stderr: std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        }
    }

    /// What it wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // A failed assertion must not leave a lockctl behind.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Wait for `child` up to `limit`; kill it and return `None` after that.
fn wait_child(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How a finished `lockctl` ended.
#[derive(Debug)]
pub struct Output {
    pub code: Option<i32>,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Stdout parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}): {self:?}"))
    }
}

/// Wait until `condition` holds, failing the test after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until `path` exists and is not empty; its contents.
pub fn wait_for_file(path: &Path, limit: Duration) -> String {
    let mut contents = String::new();
    wait_until(&format!("{} is written", path.display()), limit, || {
        contents = std::fs::read_to_string(path).unwrap_or_default();
        !contents.trim().is_empty()
    });
    contents
}

/// Three `lockctl run job` processes started together on `env`'s store, each
/// running a shell script that logs its start and end with `$LOCK_FENCE`:
/// the runs take turns (never two inside the script at once) and each run's
/// fence is one more than the run's before it.
pub fn concurrent_runs_never_overlap_and_fences_increase(env: &Env) {
    const LIMIT: Duration = Duration::from_secs(60);
    let log = env.path("log");
    let script = format!(
        "echo \"start $LOCK_FENCE\" >> {log}; sleep 0.3; echo \"end $LOCK_FENCE\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..3)
        .map(|i| {
            env.spawn(
                &format!("run{i}"),
                &[
                    "run", "job", "--wait", "20s", "--lease", "2s", "--", "sh", "-c", &script,
                ],
            )
        })
        .collect();
    for run in runs {
        let out = run.finish(LIMIT);
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // The first run's fence is wherever the store starts a new key (1, or the
    // clock's floor); each run after it is exactly one more.
    let first: u64 = lines
        .first()
        .and_then(|line| line.strip_prefix("start "))
        .and_then(|fence| fence.parse().ok())
        .unwrap_or_else(|| panic!("no first fence in the log: {text}"));
    let expected: Vec<String> = (first..first + 3)
        .flat_map(|fence| [format!("start {fence}"), format!("end {fence}")])
        .collect();
    assert_eq!(
        lines, expected,
        "runs overlapped or fences did not increase: {text}"
    );
}

/// The fence in `text` right after `prefix`, as in `held by first (fence 7)`
/// with the prefix `held by first (fence `; `None` when `prefix` is not there
/// or no number follows it.
pub fn fence_after(text: &str, prefix: &str) -> Option<u64> {
    let (_, rest) = text.split_once(prefix)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Cron runs of `lockctl run pool --permits 2` (the default `--wait 0s`)
/// with real processes: a holder killed with SIGKILL has its permit reclaimed
/// by the next run (after its 2 s lease, not never), and a run while both
/// permits' holders are alive skips with exit 3 within about a heartbeat.
pub fn cron_runs_reclaim_a_crashed_holders_permit(env: &Env) {
    use nix::sys::signal::{Signal, kill, killpg};
    const LIMIT: Duration = Duration::from_secs(60);
    // `lockctl run` of a shell script on one of the 2 permits of "pool".
    fn run_in_pool(script: &str) -> [&str; 10] {
        [
            "run",
            "pool",
            "--permits",
            "2",
            "--lease",
            "2s",
            "--",
            "sh",
            "-c",
            script,
        ]
    }
    // A holder's process, its command's pid and the fence of its permit.
    let holder = |name: &str| {
        let pidfile = env.path(&format!("{name}.pid"));
        let fencefile = env.path(&format!("{name}.fence"));
        let script = format!(
            "echo $LOCK_FENCE > {}; echo $$ > {}; exec sleep 60",
            fencefile.display(),
            pidfile.display()
        );
        let process = env.spawn(name, &run_in_pool(&script));
        let command: i32 = wait_for_file(&pidfile, LIMIT).trim().parse().unwrap();
        let fence: u64 = wait_for_file(&fencefile, LIMIT).trim().parse().unwrap();
        (process, nix::unistd::Pid::from_raw(command), fence)
    };
    let cron = || {
        let started = Instant::now();
        let out = env.run(&run_in_pool("echo $LOCK_FENCE"));
        (out, started.elapsed())
    };
    let (live, live_command, _) = holder("live");
    let (crashed, crashed_command, crashed_fence) = holder("crashed");
    // Both permits held by live holders: the run skips them.
    let (out, waited) = cron();
    assert_eq!(
        out.code,
        Some(3),
        "both permits are held by live holders: {out:?}"
    );
    assert!(waited < Duration::from_secs(4), "skipped after {waited:?}");
    // One holder's host dies: lockctl killed, its command with it.
    kill(crashed.pid(), Signal::SIGKILL).unwrap();
    let out = crashed.finish(LIMIT);
    assert_eq!(out.status.code(), None, "killed by a signal: {out:?}");
    let _ = killpg(crashed_command, Signal::SIGKILL);
    // The next cron run watches the silent permit and takes it over.
    let (out, waited) = cron();
    assert_eq!(
        out.code,
        Some(0),
        "the crashed holder's permit was not reclaimed: {out:?}"
    );
    assert_eq!(
        out.stdout.trim(),
        (crashed_fence + 1).to_string(),
        "a takeover is a new fence for that slot: {out:?}"
    );
    // A lease (2 s) since the crashed holder's last write: watched from this
    // run's first look, or, where the store's clock proves the record's age
    // (PostgreSQL), counted from that write, a heartbeat period (0.5 s) or
    // so before the kill. Half the lease is the least either can take.
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(10),
        "took over after {waited:?}"
    );
    // Both alive again (the live holder, and a new one): skipped again.
    let (again, again_command, _) = holder("again");
    let (out, _) = cron();
    assert_eq!(out.code, Some(3), "{out:?}");
    for (process, command) in [(live, live_command), (again, again_command)] {
        kill(process.pid(), Signal::SIGTERM).unwrap();
        process.finish(LIMIT);
        let _ = killpg(command, Signal::SIGKILL);
    }
}
