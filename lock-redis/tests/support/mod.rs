//! Shared set-up of the Redis tests: the server `./scripts/test` started,
//! stores under fresh prefixes, a factory for the conformance suite, and
//! servers a test starts itself (another policy, a replica, ACL users).
//!
//! `tests/redis.rs` is compiled twice: as the test binary `redis`, on Redis,
//! and into the binary `valkey` (`tests/valkey.rs`), on Valkey. Which server
//! a binary uses is decided here, by the name of the binary.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{LockClient, StoreError};
use lock_redis::{RedisStore, RedisStoreBuilder, Timeouts};
use lock_testkit::{Cleanup, FreshStore, StoreFactory};

/// Every wait on a future that might never resolve is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The server this test binary runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Redis,
    Valkey,
}

impl Server {
    /// Valkey for the test binary `valkey`, Redis for every other.
    pub fn of_this_binary() -> Self {
        if env!("CARGO_CRATE_NAME") == "valkey" {
            Self::Valkey
        } else {
            Self::Redis
        }
    }

    /// The variables `./scripts/test` sets: the URL, the one asking to skip,
    /// and the binary tests start servers of their own with.
    fn variables(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Redis => ("LOCK_REDIS_URL", "LOCK_REDIS_SKIP", "LOCK_REDIS_BIN"),
            Self::Valkey => ("LOCK_VALKEY_URL", "LOCK_VALKEY_SKIP", "LOCK_VALKEY_BIN"),
        }
    }

    /// The server's binary where no variable names one.
    fn binary_on_path(self) -> &'static str {
        match self {
            Self::Redis => "redis-server",
            Self::Valkey => "valkey-server",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Redis => "Redis",
            Self::Valkey => "Valkey",
        }
    }
}

/// The test server (`redis://127.0.0.1:PORT`), from `LOCK_REDIS_URL`, or
/// `LOCK_VALKEY_URL` in the `valkey` binary (set by `./scripts/test`).
/// Without it the test fails and says how to run it, unless
/// `LOCK_REDIS_SKIP=1` (`LOCK_VALKEY_SKIP=1`) asks to skip, which is printed.
pub fn url() -> Option<String> {
    let server = Server::of_this_binary();
    let (url, skip, _) = server.variables();
    lock_testkit::server_from_env(url, skip, server.name())
}

/// A prefix no other test uses.
pub fn prefix(name: &str) -> String {
    format!("test:{name}-{}", uuid::Uuid::new_v4().simple())
}

/// A store on `url` under `prefix`, with these builder settings.
pub async fn store_with(
    url: &str,
    prefix: &str,
    configure: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> RedisStore {
    configure(
        RedisStore::builder(url, prefix)
            .timeouts(Timeouts::default().with_request(Duration::from_secs(2))),
    )
    .connect()
    .await
    .expect("valid store configuration")
}

/// A store on `url` under `prefix`.
pub async fn store_at(url: &str, prefix: &str) -> RedisStore {
    store_with(url, prefix, |builder| builder).await
}

/// A store under a fresh prefix on the test server.
pub async fn fresh_store() -> Option<RedisStore> {
    let url = url()?;
    Some(store_at(&url, &prefix("locks")).await)
}

/// A lock client on `store`.
pub fn client(store: RedisStore, owner: &str, lease: Duration) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(lease)
        .build()
        .expect("valid client configuration")
}

/// Fresh prefixes for the conformance suite (left on the throw-away server,
/// which is removed when the run ends).
#[derive(Clone, Copy, Debug)]
pub struct PrefixFactory;

#[async_trait]
impl StoreFactory for PrefixFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        let Some(url) = url() else {
            return Ok(None);
        };
        let store = store_at(&url, &prefix("conformance")).await;
        Ok(Some(FreshStore::with_cleanup(store, Cleanup::none())))
    }
}

/// A free port of 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// A server a test started; killed and its directory removed on drop.
#[derive(Debug)]
pub struct OwnServer {
    pub port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl OwnServer {
    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kill the server (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server of the test's own, with the binary `./scripts/test` installed
/// (`LOCK_REDIS_BIN`, or `LOCK_VALKEY_BIN` in the `valkey` binary; else
/// `redis-server` or `valkey-server` on the PATH) and
/// `extra` arguments; `None` when the tests are skipped. Waits until it
/// answers `PING`.
pub async fn start_server(extra: &[&str]) -> Option<OwnServer> {
    url()?;
    let server = Server::of_this_binary();
    let (_, _, binary) = server.variables();
    let binary = std::env::var(binary).unwrap_or_else(|_| server.binary_on_path().into());
    let port = free_port();
    let dir =
        std::env::temp_dir().join(format!("lock-redis-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a directory for the server");
    let child = Command::new(&binary)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("start {binary}: {error}"));
    let server = OwnServer { port, child, dir };
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let client = lock_redis::redis::Client::open(server.url()).expect("a valid URL");
        if let Ok(mut connection) = client.get_multiplexed_async_connection().await {
            let pong: Result<String, _> = lock_redis::redis::cmd("PING")
                .query_async(&mut connection)
                .await;
            if pong.is_ok() {
                return Some(server);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "redis-server on port {port} did not answer within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server of the test's own whose clock is `ahead` ahead of this host's
/// (libfaketime, `FAKETIME=+Ns`), or `None` when it does not come up within
/// 5 s: libfaketime 0.9.10 hangs Debian's `redis-server` 7.0 at start (its
/// allocator reads the clock before libfaketime is ready), while Valkey's
/// binary runs under it. The library is preloaded into the server itself
/// rather than run through the `faketime` command, which forks: killing the
/// command would leave the server running.
pub async fn start_server_ahead(ahead: Duration) -> Option<OwnServer> {
    url()?;
    let server = Server::of_this_binary();
    let (_, _, binary) = server.variables();
    let binary = std::env::var(binary).unwrap_or_else(|_| server.binary_on_path().into());
    let library = faketime_library();
    let port = free_port();
    let dir =
        std::env::temp_dir().join(format!("lock-redis-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("a directory for the server");
    let child = Command::new(&binary)
        .env("LD_PRELOAD", &library)
        .env("FAKETIME", format!("+{}s", ahead.as_secs()))
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| panic!("start {binary}: {error}"));
    let server = OwnServer { port, child, dir };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        let client = lock_redis::redis::Client::open(server.url()).expect("a valid URL");
        if let Ok(Ok(mut connection)) = tokio::time::timeout(
            Duration::from_secs(1),
            client.get_multiplexed_async_connection(),
        )
        .await
        {
            let pong: Result<Result<String, _>, _> = tokio::time::timeout(
                Duration::from_secs(1),
                lock_redis::redis::cmd("PING").query_async(&mut connection),
            )
            .await;
            if matches!(pong, Ok(Ok(_))) {
                return Some(server);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// libfaketime's library, where Debian's package `libfaketime` (a
/// dependency of `faketime`, which `./scripts/test` installs) puts it.
fn faketime_library() -> std::path::PathBuf {
    let mut candidates = vec![std::path::PathBuf::from(
        "/usr/lib/faketime/libfaketime.so.1",
    )];
    if let Ok(entries) = std::fs::read_dir("/usr/lib") {
        candidates.extend(
            entries
                .flatten()
                .map(|entry| entry.path().join("faketime/libfaketime.so.1")),
        );
    }
    candidates
        .into_iter()
        .find(|path| path.is_file())
        .expect("libfaketime.so.1 under /usr/lib: install Debian's faketime (./scripts/test does)")
}

/// The server's clock (`TIME`), in milliseconds.
pub async fn server_millis(url: &str) -> i64 {
    let time: Vec<String> = lock_redis::redis::from_redis_value(command(url, &["TIME"]).await)
        .expect("TIME answers seconds and microseconds");
    let seconds: i64 = time[0].parse().expect("seconds");
    let micros: i64 = time[1].parse().expect("microseconds");
    seconds * 1000 + micros / 1000
}

/// Copy the key `key` from `from` to `to` as it is (`DUMP`, `RESTORE`), as a
/// slot migration or a restore from a backup does.
pub async fn copy_key(from: &str, to: &str, key: &str) {
    let dumped: Vec<u8> =
        lock_redis::redis::from_redis_value(command(from, &["DUMP", key]).await).expect("DUMP");
    let client = lock_redis::redis::Client::open(to).expect("a valid URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect for set-up");
    let () = lock_redis::redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(dumped)
        .query_async(&mut connection)
        .await
        .expect("RESTORE");
}

/// The least-privilege user `docs/redis.md` documents (section
/// Permissions), read from the doc itself so the tests and the doc cannot
/// drift: the words of its `ACL SETUSER locks ...` line.
pub fn documented_user() -> Vec<String> {
    let doc = include_str!("../../../docs/redis.md");
    let line = doc
        .lines()
        .find(|line| line.starts_with("ACL SETUSER locks "))
        .expect("docs/redis.md shows the user's ACL SETUSER line");
    line.split_whitespace().map(str::to_owned).collect()
}

/// Make the documented user (`locks`, password `secret`) on `url`.
pub async fn create_documented_user(url: &str) {
    let words = documented_user();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    command(url, &words).await;
}

/// How many `command` calls `url` refused (`rejected_calls` of `INFO
/// commandstats`: a denied permission among them).
pub async fn rejected_calls(url: &str, command_name: &str) -> u64 {
    let info: String =
        lock_redis::redis::from_redis_value(command(url, &["INFO", "commandstats"]).await)
            .expect("INFO answers text");
    let prefix = format!("cmdstat_{command_name}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|field| field.strip_prefix("rejected_calls="))
        })
        .map_or(0, |count| count.trim().parse().expect("a count"))
}

/// What a test's `tracing` subscriber wrote.
#[derive(Clone, Debug, Default)]
pub struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Run one command on `url` (for set-up: ACL users, replication).
pub async fn command(url: &str, args: &[&str]) -> lock_redis::redis::Value {
    let client = lock_redis::redis::Client::open(url).expect("a valid URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect for set-up");
    let mut cmd = lock_redis::redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(&mut connection)
        .await
        .expect("a set-up command")
}
