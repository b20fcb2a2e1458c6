//! Shared set-up of the etcd tests: the server `./scripts/test` started,
//! stores under fresh prefixes, a factory for the conformance suite, and
//! members of clusters a test starts itself (for auth and fail-over).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{LockClient, StoreError};
use lock_etcd::{EtcdStore, EtcdStoreBuilder, Timeouts};
use lock_testkit::{Cleanup, FreshStore, StoreFactory};

/// Every wait on a future that might never resolve is bounded by this.
pub const LIMIT: Duration = Duration::from_secs(30);

/// The test server (`host:port`), from `LOCK_ETCD_ENDPOINT` (set by
/// `./scripts/test`). Without it the test fails and says how to run it,
/// unless `LOCK_ETCD_SKIP=1` asks to skip, which is printed.
pub fn endpoint() -> Option<String> {
    lock_testkit::server_from_env("LOCK_ETCD_ENDPOINT", "LOCK_ETCD_SKIP", "etcd")
}

/// A prefix no other test uses.
pub fn prefix(name: &str) -> String {
    format!("test/{name}-{}", uuid::Uuid::new_v4().simple())
}

/// A store on `endpoint` under `prefix`.
pub async fn store_at(endpoint: &str, prefix: &str) -> EtcdStore {
    store_with(endpoint, prefix, |builder| builder).await
}

/// A store on `endpoint` under `prefix`, with these builder settings.
pub async fn store_with(
    endpoint: &str,
    prefix: &str,
    configure: impl FnOnce(EtcdStoreBuilder) -> EtcdStoreBuilder,
) -> EtcdStore {
    configure(
        EtcdStore::builder([endpoint], prefix)
            .timeouts(Timeouts::default().with_request(Duration::from_secs(2))),
    )
    .connect()
    .await
    .expect("valid store configuration")
}

/// A store under a fresh prefix on the test server.
pub async fn fresh_store() -> Option<EtcdStore> {
    let endpoint = endpoint()?;
    Some(store_at(&endpoint, &prefix("locks")).await)
}

/// A lock client on `store`.
pub fn client(store: EtcdStore, owner: &str, lease: Duration) -> LockClient {
    LockClient::builder(store)
        .owner(owner)
        .lease(lease)
        .build()
        .expect("valid client configuration")
}

/// A client of etcd's own API (not the store's), for what an operator or
/// another program does to the keys: write them, delete them, manage users.
pub async fn raw_client(endpoint: &str) -> etcd_client::Client {
    etcd_client::Client::connect([endpoint], None)
        .await
        .expect("an etcd client connects")
}

/// Fresh prefixes for the conformance suite, removed after each case passes.
#[derive(Clone, Copy, Debug)]
pub struct PrefixFactory;

#[async_trait]
impl StoreFactory for PrefixFactory {
    async fn create(&self) -> Result<Option<FreshStore>, StoreError> {
        let Some(endpoint) = endpoint() else {
            return Ok(None);
        };
        let prefix = prefix("conformance");
        let store = store_at(&endpoint, &prefix).await;
        let cleanup = Cleanup::new(move || async move {
            let mut kv = raw_client(&endpoint).await.kv_client();
            let options = etcd_client::DeleteOptions::new().with_prefix();
            let _ = kv.delete(format!("{prefix}/"), Some(options)).await;
        });
        Ok(Some(FreshStore::with_cleanup(store, cleanup)))
    }
}

/// A free port of 127.0.0.1 (it may be taken before it is used; the members
/// are started again on other ports then).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// One etcd member a test started; killed and its data removed on drop.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    /// `127.0.0.1:PORT`, where clients connect.
    pub endpoint: String,
    child: Child,
    data: std::path::PathBuf,
}

impl Member {
    /// Kill the member (SIGKILL): its clients' connections fail at once.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// One member serving TLS with the certificates in `LOCK_ETCD_TLS_DIR`
/// (`server.crt` for the name `localhost`, signed by `ca.crt`), asking
/// clients for a certificate `ca.crt` signed; `None` when the etcd tests are
/// skipped. Its endpoint is `localhost:PORT`. Waits until it listens.
pub async fn start_tls_member() -> Option<(Member, std::path::PathBuf)> {
    endpoint()?;
    let tls = std::path::PathBuf::from(
        std::env::var("LOCK_ETCD_TLS_DIR").expect("./scripts/test sets LOCK_ETCD_TLS_DIR"),
    );
    let binary = std::env::var("LOCK_ETCD_BIN").unwrap_or_else(|_| "etcd".into());
    let (client, peer) = (free_port(), free_port());
    let data =
        std::env::temp_dir().join(format!("lock-etcd-tls-{}", uuid::Uuid::new_v4().simple()));
    let path = |name: &str| tls.join(name).to_string_lossy().into_owned();
    let child = Command::new(&binary)
        .args(["--name", "tls"])
        .arg("--data-dir")
        .arg(&data)
        .args([
            "--listen-client-urls",
            &format!("https://127.0.0.1:{client}"),
            "--advertise-client-urls",
            &format!("https://localhost:{client}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("tls=http://127.0.0.1:{peer}"),
            "--cert-file",
            &path("server.crt"),
            "--key-file",
            &path("server.key"),
            "--client-cert-auth",
            "--trusted-ca-file",
            &path("ca.crt"),
            "--logger",
            "zap",
            "--log-level",
            "error",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start an etcd member (LOCK_ETCD_BIN, or etcd on PATH)");
    let member = Member {
        name: "tls".into(),
        endpoint: format!("localhost:{client}"),
        child,
        data,
    };
    let deadline = tokio::time::Instant::now() + LIMIT;
    while tokio::net::TcpStream::connect(("127.0.0.1", client))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the TLS member did not listen within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some((member, tls))
}

/// A cluster of `size` members on loopback, started by the test with the
/// etcd binary `./scripts/test` installed (`LOCK_ETCD_BIN`), `extra`
/// arguments given to each; `None` when the etcd tests are skipped. Waits
/// until every member answers.
pub async fn start_cluster(size: usize, extra: &[&str]) -> Option<Vec<Member>> {
    endpoint()?;
    let binary = std::env::var("LOCK_ETCD_BIN").unwrap_or_else(|_| "etcd".into());
    let token = uuid::Uuid::new_v4().simple().to_string();
    let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
        .collect();
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let mut members = Vec::new();
    for (i, (client, peer)) in ports.iter().enumerate() {
        let name = format!("m{i}");
        let data = base.join(format!("lock-etcd-test-{token}-{name}"));
        let child = Command::new(&binary)
            .args(["--name", &name])
            .arg("--data-dir")
            .arg(&data)
            .args([
                "--listen-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--advertise-client-urls",
                &format!("http://127.0.0.1:{client}"),
                "--listen-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-advertise-peer-urls",
                &format!("http://127.0.0.1:{peer}"),
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-token",
                &token,
                "--initial-cluster-state",
                "new",
                "--logger",
                "zap",
                "--log-level",
                "error",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start an etcd member (LOCK_ETCD_BIN, or etcd on PATH)");
        members.push(Member {
            name,
            endpoint: format!("127.0.0.1:{client}"),
            child,
            data,
        });
    }
    let deadline = tokio::time::Instant::now() + LIMIT;
    for member in &members {
        loop {
            let answered = async {
                let store = store_at(&member.endpoint, "health").await;
                lock_core::ConditionalStore::get(&store, &lock_core::LockKey::new("x")).await
            };
            if tokio::time::timeout(Duration::from_secs(3), answered)
                .await
                .is_ok_and(|read| read.is_ok())
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd member {} did not answer within {LIMIT:?}",
                member.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Some(members)
}
