//! Releases announced by PostgreSQL: every release and delete statement
//! calls `pg_notify('<table>:released', '["partition","sort"]')`
//! (`sql.rs`), delivered when it commits; [`listen`] relays them to the
//! store's [`ReleaseFeed`](lock_core::ReleaseFeed) from a connection of its
//! own (`LISTEN`), since a pooled connection's notifications are dropped.
//!
//! Once listening, it sends itself a probe on the channel: a connection that
//! does not hear its own `NOTIFY` — PgBouncer in transaction mode, which runs
//! `LISTEN` on a server connection it then hands to others — never hears a
//! release either, and that is said once, at warn, instead of waiters
//! silently polling.

use futures_util::StreamExt as _;
use lock_core::{LockKey, ReleaseAnnouncer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Relay the releases announced on `channel` to `announcer` until nobody
/// holds the feed, opening the connection again half a second or so after
/// it fails (waiters poll meanwhile, and a release announced while it was
/// down is not seen: a hint only).
pub(crate) async fn listen(
    config: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
    channel: String,
    announcer: ReleaseAnnouncer,
) {
    let probe = Probe::on(&channel);
    tokio::select! {
        () = relay(&config, tls.as_ref(), &channel, &probe, &announcer) => {}
        // The store is gone: close the listening connection.
        () = announcer.closed() => {}
    }
}

/// The self-test of a listening connection: a `NOTIFY` it sends itself on
/// `channel` with a payload no release has, which it must hear within
/// [`PROBE_WAIT`].
pub(crate) struct Probe {
    /// Where the probe is sent: the channel listened on (a test sends it
    /// elsewhere, as a pooler that does not carry `LISTEN` in effect does).
    channel: String,
    payload: String,
    /// How long to wait for it ([`PROBE_WAIT`]).
    wait: std::time::Duration,
    /// The warning was given (once per store).
    warned: std::sync::atomic::AtomicBool,
    /// The probe came back (the listener hears its channel).
    heard: std::sync::atomic::AtomicBool,
}

/// How long a listening connection waits for its own probe.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Probe {
    pub(crate) fn on(channel: &str) -> Self {
        Self {
            channel: channel.to_owned(),
            payload: format!("lease_lock probe {}", lock_core::Rvn::fresh().as_str()),
            wait: PROBE_WAIT,
            warned: std::sync::atomic::AtomicBool::new(false),
            heard: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The probe heard back, or not within [`PROBE_WAIT`] on the
    /// connection listening on `listened`: said once, at warn.
    fn unheard(&self, listened: &str) {
        if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                channel = listened,
                "PostgreSQL release announcements do not reach this store: its own NOTIFY on \
                 {listened} did not arrive in {:?} on the connection that LISTENs \
                 (PgBouncer in transaction mode does not carry LISTEN); waiters poll instead. \
                 Point the store at PostgreSQL or a session-mode pool, or turn announcements \
                 off (announce_releases(false))",
                self.wait
            );
        }
    }

    /// Whether the warning was given, and whether the probe came back.
    #[cfg(test)]
    pub(crate) fn outcome(&self) -> (bool, bool) {
        (
            self.warned.load(std::sync::atomic::Ordering::Relaxed),
            self.heard.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

async fn relay(
    config: &tokio_postgres::Config,
    tls: Option<&MakeRustlsConnect>,
    channel: &str,
    probe: &Probe,
    announcer: &ReleaseAnnouncer,
) {
    while !announcer.is_closed() {
        let ended = match tls {
            Some(tls) => connect_and_relay(config, tls.clone(), channel, probe, announcer).await,
            None => {
                connect_and_relay(config, tokio_postgres::NoTls, channel, probe, announcer).await
            }
        };
        match ended {
            Ok(Relay::FeedGone) => return,
            Ok(Relay::ConnectionClosed) => {}
            Err(error) => tracing::debug!(%error, "could not listen on {channel}"),
        }
        let pause = std::time::Duration::from_millis(500 + fastrand::u64(..500));
        tokio::time::sleep(pause).await;
    }
}

/// Why relaying stopped.
enum Relay {
    FeedGone,
    ConnectionClosed,
}

async fn connect_and_relay<T>(
    config: &tokio_postgres::Config,
    tls: T,
    channel: &str,
    probe: &Probe,
    announcer: &ReleaseAnnouncer,
) -> Result<Relay, tokio_postgres::Error>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (client, mut connection) = config.connect(tls).await?;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    let quoted = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
    let listening = client.batch_execute(&quoted);
    tokio::pin!(listening);
    let mut listened = false;
    // Sent once LISTEN is done; its deadline once sent; cleared when heard.
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&probe.channel, &probe.payload];
    let probing = client.query_one("SELECT pg_notify($1, $2)", &params);
    tokio::pin!(probing);
    let (mut probe_sent, mut probe_heard) = (false, false);
    let mut probe_deadline: Option<tokio::time::Instant> = None;
    let far = tokio::time::Instant::now() + std::time::Duration::from_secs(365 * 24 * 3600);
    loop {
        let deadline = tokio::time::sleep_until(probe_deadline.unwrap_or(far));
        tokio::select! {
            done = &mut listening, if !listened => {
                done?;
                listened = true;
            }
            sent = &mut probing, if listened && !probe_sent => {
                sent?;
                probe_sent = true;
                // The notification may come before the statement's reply.
                if !probe_heard {
                    probe_deadline = Some(tokio::time::Instant::now() + probe.wait);
                }
            }
            () = deadline, if probe_deadline.is_some() => {
                probe.unheard(channel);
                probe_deadline = None;
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(notice))) => {
                    if notice.payload() == probe.payload {
                        probe_heard = true;
                        probe.heard.store(true, std::sync::atomic::Ordering::Relaxed);
                        probe_deadline = None;
                        continue;
                    }
                    if let Some(key) = announced(notice.payload())
                        && !announcer.announce(key)
                    {
                        return Ok(Relay::FeedGone);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(error),
                None => return Ok(Relay::ConnectionClosed),
            },
        }
    }
}

/// The lock a notification's payload names (`["partition","sort"]`, the
/// sort key `""` for none).
fn announced(payload: &str) -> Option<LockKey> {
    let (partition, sort): (String, String) = serde_json::from_str(payload).ok()?;
    Some(if sort.is_empty() {
        LockKey::new(partition)
    } else {
        LockKey::with_sort(partition, sort)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Relays on `listened` with `probe` for a while: whether it warned,
    /// and whether it heard the probe.
    async fn probed(listened: &str, probe: Probe) -> Option<(bool, bool)> {
        let url = std::env::var("LOCK_POSTGRES_URL").ok()?;
        let config: tokio_postgres::Config = url.parse().unwrap();
        let (feed, announcer) = lock_core::ReleaseFeed::manual();
        let relaying = relay(&config, None, listened, &probe, &announcer);
        // Long enough to listen, probe and wait out the probe's deadline.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), relaying).await;
        drop(feed);
        Some(probe.outcome())
    }

    fn quick(channel: &str) -> Probe {
        Probe {
            wait: std::time::Duration::from_millis(500),
            ..Probe::on(channel)
        }
    }

    /// A connection that hears its own NOTIFY (straight to PostgreSQL): no
    /// warning. One that does not, as behind PgBouncer in transaction mode
    /// (here: the probe goes to another channel than the one listened on,
    /// which is what such a pooler does in effect): warned.
    #[tokio::test]
    async fn a_listener_that_never_hears_its_own_notify_warns() {
        let channel = format!("probe_{}", fastrand::u64(..));
        let Some(heard) = probed(&channel, quick(&channel)).await else {
            eprintln!("SKIPPED: LOCK_POSTGRES_URL is not set (./scripts/test sets it)");
            return;
        };
        assert_eq!(
            heard,
            (false, true),
            "a direct connection hears its probe, and nothing is said"
        );
        let unheard = probed(&channel, quick(&format!("{channel}_elsewhere"))).await;
        assert_eq!(unheard, Some((true, false)), "a probe never heard is said");
    }

    #[test]
    fn a_payload_names_its_lock() {
        assert_eq!(announced(r#"["jobs",""]"#), Some(LockKey::new("jobs")));
        assert_eq!(
            announced(r#"["jobs","a \"b\""]"#),
            Some(LockKey::with_sort("jobs", "a \"b\""))
        );
        assert_eq!(announced("nonsense"), None);
    }
}
