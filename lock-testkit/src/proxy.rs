//! A TCP proxy that breaks the network on command, for fault drills against a
//! real server (the DynamoDB emulator in this workspace's tests).
//!
//! [`FaultProxy::start`] listens on a free loopback port and forwards every
//! connection to the upstream address. [`FaultProxy::set`] changes what happens
//! to traffic from then on, including on connections already open:
//!
//! * [`ProxyMode::Pass`]: forward both ways.
//! * [`ProxyMode::Blackhole`]: a partition. Nothing more is forwarded either way;
//!   connections stay open and silent until the client gives up. (A connection
//!   cut half-way through a request is closed towards the server, so the server
//!   never waits for the rest of a request that will not come.)
//! * [`ProxyMode::DelayReplies`]: requests go through at once; each reply is
//!   held back for a while (once per reply, however many chunks it comes in),
//!   as on a slow or distant link.
//! * [`ProxyMode::LoseReplies`]: requests reach the server, which applies them;
//!   the client's connection is reset when the reply arrives, so the client
//!   cannot know whether its write applied.
//! * [`ProxyMode::Reset`]: connections are reset before anything reaches the
//!   server.
//! * [`ProxyMode::FailSomeExchanges`]: a seeded fraction of requests on any
//!   connection, open or new, fail: in turn, reset before the request is
//!   forwarded and after the server answered (for servers that keep
//!   connections open).
//! * [`ProxyMode::ResetSome`]: a seeded fraction of new connections fail, in
//!   turn before the request is forwarded (nothing applied) and after the
//!   server answered (applied, reply lost).
//!
//! The failures these two modes draw alternate in kind, so a short run sees
//! both kinds whatever its seed.
//!
//! The proxy runs on its own thread with its own runtime, so it serves sync
//! tests (which start binaries) and async tests alike, and keeps serving while
//! a test's runtime is busy or paused. It stops when dropped.
//!
//! ```no_run
//! use lock_testkit::proxy::{FaultProxy, ProxyMode};
//!
//! # fn main() -> std::io::Result<()> {
//! let proxy = FaultProxy::start("127.0.0.1:8000")?;
//! let endpoint = proxy.url(); // point the client here
//! proxy.set(ProxyMode::Blackhole); // partition
//! proxy.set(ProxyMode::Pass); // heal
//! # let _ = endpoint;
//! # Ok(())
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum ProxyMode {
    /// Forward both ways.
    Pass,
    /// Forward nothing; keep connections open and silent.
    Blackhole,
    /// Forward requests at once and each reply after this delay.
    DelayReplies(Duration),
    /// Forward requests; reset the client's connection when the reply arrives.
    LoseReplies,
    /// Reset connections before anything is forwarded.
    Reset,
    /// Each new connection fails with probability `fraction`: in turn before
    /// the request is forwarded and after the reply arrived (reply lost). Drawn from `seed`, so a run can be replayed.
    ResetSome {
        /// Probability that a connection fails, 0.0 to 1.0.
        fraction: f64,
        /// Seed of the draws.
        seed: u64,
    },
    /// Each request (a chunk from the client) fails with probability
    /// `fraction`, on connections already open too: in turn reset before the
    /// request is forwarded and after the server's reply arrived (reply
    /// lost). Drawn from `seed`. For servers that keep connections open
    /// (PostgreSQL), where [`ResetSome`](Self::ResetSome) reaches only new ones.
    FailSomeExchanges {
        /// Probability that a request fails, 0.0 to 1.0.
        fraction: f64,
        /// Seed of the draws.
        seed: u64,
    },
}

/// What a request drawn under [`ProxyMode::FailSomeExchanges`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exchange {
    Forward,
    ResetBeforeForwarding,
    LoseReply,
}

/// A fault scripted for the next connections, ahead of the mode (see
/// [`FaultProxy::fail_next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptedFault {
    /// Forward the connection untouched (to let one through before a fault).
    Forward,
    /// Reset the connection before anything reaches the server.
    ResetBeforeForwarding,
    /// Forward the request; reset the connection when the reply arrives.
    LoseReply,
}

/// Counts of what the proxy did, for a test to check its faults happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: u64,
    /// Connections reset before anything reached the server.
    pub reset_before_forwarding: u64,
    /// Connections reset after the server answered (the reply was lost).
    pub replies_lost: u64,
    /// Connections that were silenced by a blackhole.
    pub blackholed: u64,
}

/// What a connection does, decided when it is accepted (for `ResetSome`) and
/// re-read from the mode at every chunk (for everything else).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnectionFate {
    /// Follow the proxy's mode.
    FollowMode,
    /// Reset before forwarding anything.
    ResetBeforeForwarding,
    /// Forward the request, reset when the reply arrives.
    LoseReply,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    mode: watch::Sender<ProxyMode>,
    stats: Mutex<ProxyStats>,
    rng: Mutex<Option<Draws>>,
    script: Mutex<std::collections::VecDeque<ScriptedFault>>,
    /// Replies still to lose, on whichever connection they come
    /// ([`FaultProxy::lose_next_replies`]).
    replies_to_lose: Mutex<u64>,
}

impl Shared {
    fn mode(&self) -> ProxyMode {
        *self.mode.borrow()
    }

    fn count(&self, update: impl FnOnce(&mut ProxyStats)) {
        update(&mut self.stats.lock().unwrap_or_else(PoisonError::into_inner));
    }

    /// Whether a scripted lost reply is due ([`FaultProxy::lose_next_replies`]),
    /// counting it off if so.
    fn take_reply_to_lose(&self) -> bool {
        let mut left = self
            .replies_to_lose
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = *left > 0;
        *left = left.saturating_sub(1);
        due
    }

    /// The fate of a connection accepted now.
    fn fate(&self) -> ConnectionFate {
        let scripted = self
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        match scripted {
            Some(ScriptedFault::ResetBeforeForwarding) => {
                return ConnectionFate::ResetBeforeForwarding;
            }
            Some(ScriptedFault::LoseReply) => return ConnectionFate::LoseReply,
            Some(ScriptedFault::Forward) => return ConnectionFate::FollowMode,
            None => {}
        }
        let ProxyMode::ResetSome { fraction, seed } = self.mode() else {
            return ConnectionFate::FollowMode;
        };
        match self.draw(fraction, seed) {
            Exchange::Forward => ConnectionFate::FollowMode,
            Exchange::ResetBeforeForwarding => ConnectionFate::ResetBeforeForwarding,
            Exchange::LoseReply => ConnectionFate::LoseReply,
        }
    }

    /// The next seeded draw: a failure with probability `fraction`. The
    /// failures alternate in kind (the first one's kind drawn too), so that
    /// even a short run sees both: reset before forwarding and reply lost.
    fn draw(&self, fraction: f64, seed: u64) -> Exchange {
        let mut draws = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        // A new seed starts a new sequence; the same seed continues it.
        if draws.as_ref().is_none_or(|d| d.seed != seed) {
            let mut rng = fastrand::Rng::with_seed(seed);
            let reset_next = rng.bool();
            *draws = Some(Draws {
                seed,
                rng,
                reset_next,
            });
        }
        let Some(draws) = draws.as_mut() else {
            return Exchange::Forward;
        };
        if draws.rng.f64() >= fraction {
            return Exchange::Forward;
        }
        let reset = draws.reset_next;
        draws.reset_next = !reset;
        if reset {
            Exchange::ResetBeforeForwarding
        } else {
            Exchange::LoseReply
        }
    }
}

/// The seeded sequence behind [`ProxyMode::ResetSome`] and
/// [`ProxyMode::FailSomeExchanges`].
#[derive(Debug)]
struct Draws {
    seed: u64,
    rng: fastrand::Rng,
    /// The kind of the next failure drawn.
    reset_next: bool,
}

/// A fault-injecting TCP proxy on a loopback port; stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    local: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listen on a free port of 127.0.0.1 and forward to `upstream`, which may
    /// be an address (`127.0.0.1:8000`) or a URL (`http://127.0.0.1:8000`).
    /// Starts in [`ProxyMode::Pass`].
    pub fn start(upstream: &str) -> std::io::Result<Self> {
        let upstream = parse_upstream(upstream)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let (mode, _) = watch::channel(ProxyMode::Pass);
        let shared = Arc::new(Shared {
            upstream,
            mode,
            stats: Mutex::new(ProxyStats::default()),
            rng: Mutex::new(None),
            script: Mutex::new(std::collections::VecDeque::new()),
            replies_to_lose: Mutex::new(0),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", local.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(listener) else {
                        return;
                    };
                    tokio::select! {
                        () = accept_loop(listener, serving) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime here drops every connection task, which
                // closes their sockets.
            })?;
        Ok(Self {
            shared,
            local,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.local
    }

    /// `http://` and the address clients connect to, for an endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.local)
    }

    /// Change what happens to traffic from now on, on open connections too.
    pub fn set(&self, mode: ProxyMode) {
        self.shared.mode.send_replace(mode);
    }

    /// Apply `fault` to the next `connections` connections accepted, whatever
    /// the mode. The emulator closes every connection after one request, so
    /// for it this is "the next requests".
    pub fn fail_next(&self, fault: ScriptedFault, connections: usize) {
        self.shared
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(std::iter::repeat_n(fault, connections));
    }

    /// Lose the next `replies` replies from the server, on connections already
    /// open or new, whatever the mode: each connection is reset when its reply
    /// arrives. For servers that keep connections open (PostgreSQL), where
    /// [`fail_next`](Self::fail_next) reaches only new connections.
    pub fn lose_next_replies(&self, replies: u64) {
        *self
            .shared
            .replies_to_lose
            .lock()
            .unwrap_or_else(PoisonError::into_inner) += replies;
    }

    /// The current mode.
    pub fn mode(&self) -> ProxyMode {
        self.shared.mode()
    }

    /// What the proxy has done so far.
    pub fn stats(&self) -> ProxyStats {
        *self
            .shared
            .stats
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn parse_upstream(upstream: &str) -> std::io::Result<SocketAddr> {
    let address = upstream
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/');
    address.parse().map_err(|error| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("upstream {upstream:?} is not an IP address and port: {error}"),
        )
    })
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of file descriptors or similar: try again shortly.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        shared.count(|s| s.connections += 1);
        let fate = shared.fate();
        tokio::spawn(serve(client, fate, shared.clone()));
    }
}

/// Reset `stream`: the peer sees ECONNRESET, not an orderly close.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Keep a connection open and read (and drop) whatever the client sends, until
/// it closes: a partitioned peer that never answers.
async fn silence(mut client: TcpStream) {
    let mut sink = [0u8; 4096];
    while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// What `mode` does to a connection (with `server`, its side towards the
/// server once connected): a blackhole partitions it (the server never sees
/// the rest, so it does not wait for a request body that will not come; the
/// client hears nothing more until it gives up), a reset resets it; both end
/// it (`None`). Any other mode lets it go on.
async fn under_mode(
    client: TcpStream,
    server: Option<TcpStream>,
    shared: &Shared,
    mode: ProxyMode,
) -> Option<(TcpStream, Option<TcpStream>)> {
    match mode {
        ProxyMode::Blackhole => {
            shared.count(|s| s.blackholed += 1);
            drop(server);
            silence(client).await;
            None
        }
        ProxyMode::Reset => {
            shared.count(|s| s.reset_before_forwarding += 1);
            reset(client);
            None
        }
        _ => Some((client, server)),
    }
}

/// Forward one connection both ways, applying the mode to every chunk and to
/// every change of mode while it is open. One task owns both sockets, so a
/// reset is a reset (no orderly close of one half first).
async fn serve(client: TcpStream, fate: ConnectionFate, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    if fate == ConnectionFate::ResetBeforeForwarding {
        shared.count(|s| s.reset_before_forwarding += 1);
        reset(client);
        return;
    }
    let Some((mut client, _)) = under_mode(client, None, &shared, shared.mode()).await else {
        return;
    };
    let Ok(mut server) = TcpStream::connect(shared.upstream).await else {
        reset(client);
        return;
    };
    let _ = server.set_nodelay(true);
    let mut mode_changes = shared.mode.subscribe();
    let mut from_client = vec![0u8; 16 * 1024];
    let mut from_server = vec![0u8; 16 * 1024];
    let (mut client_open, mut server_open) = (true, true);
    // A reply may come in several chunks (headers, then body): only its first
    // waits out a delay, so every request sees the delay once, as on a link
    // with that much more round-trip time.
    let mut reply_begun = false;
    // A request drawn to lose its reply (FailSomeExchanges).
    let mut lose_reply = false;
    while client_open || server_open {
        tokio::select! {
            read = client.read(&mut from_client), if client_open => {
                let n = match read {
                    Ok(0) | Err(_) => {
                        client_open = false;
                        let _ = server.shutdown().await;
                        continue;
                    }
                    Ok(n) => n,
                };
                if let ProxyMode::FailSomeExchanges { fraction, seed } = shared.mode() {
                    match shared.draw(fraction, seed) {
                        Exchange::ResetBeforeForwarding => {
                            shared.count(|s| s.reset_before_forwarding += 1);
                            reset(client);
                            return;
                        }
                        Exchange::LoseReply => lose_reply = true,
                        Exchange::Forward => {}
                    }
                }
                let Some((still_open, Some(to_server))) =
                    under_mode(client, Some(server), &shared, shared.mode()).await
                else {
                    return;
                };
                (client, server) = (still_open, to_server);
                reply_begun = false;
                if server.write_all(&from_client[..n]).await.is_err() {
                    reset(client);
                    return;
                }
            }
            read = server.read(&mut from_server), if server_open => {
                let n = match read {
                    Ok(0) | Err(_) => {
                        server_open = false;
                        let _ = client.shutdown().await;
                        continue;
                    }
                    Ok(n) => n,
                };
                let mode = shared.mode();
                if fate == ConnectionFate::LoseReply
                    || mode == ProxyMode::LoseReplies
                    || std::mem::take(&mut lose_reply)
                    || shared.take_reply_to_lose()
                {
                    // The server has answered, so the request applied; the
                    // client learns nothing.
                    shared.count(|s| s.replies_lost += 1);
                    reset(client);
                    return;
                }
                if let ProxyMode::DelayReplies(delay) = mode
                    && !reply_begun
                {
                    tokio::time::sleep(delay).await;
                }
                reply_begun = true;
                let Some((still_open, Some(to_server))) =
                    under_mode(client, Some(server), &shared, mode).await
                else {
                    return;
                };
                (client, server) = (still_open, to_server);
                if client.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
            }
            changed = mode_changes.changed() => {
                if changed.is_err() {
                    return;
                }
                // A partition or a reset reaches open connections at once, not
                // only when they next carry data (an idle pooled connection
                // included).
                let Some((still_open, Some(to_server))) =
                    under_mode(client, Some(server), &shared, shared.mode()).await
                else {
                    return;
                };
                (client, server) = (still_open, to_server);
            }
        }
    }
}
