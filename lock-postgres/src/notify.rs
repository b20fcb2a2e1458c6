//! Releases announced by PostgreSQL: every release and delete statement
//! calls `pg_notify('<table>:released', '["partition","sort"]')`
//! (`sql.rs`), delivered when it commits; [`listen`] relays them to the
//! store's [`ReleaseFeed`](lock_core::ReleaseFeed) from a connection of its
//! own (`LISTEN`), since a pooled connection's notifications are dropped.

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
    tokio::select! {
        () = relay(&config, tls.as_ref(), &channel, &announcer) => {}
        // The store is gone: close the listening connection.
        () = announcer.closed() => {}
    }
}

async fn relay(
    config: &tokio_postgres::Config,
    tls: Option<&MakeRustlsConnect>,
    channel: &str,
    announcer: &ReleaseAnnouncer,
) {
    while !announcer.is_closed() {
        let ended = match tls {
            Some(tls) => connect_and_relay(config, tls.clone(), channel, announcer).await,
            None => connect_and_relay(config, tokio_postgres::NoTls, channel, announcer).await,
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
    loop {
        tokio::select! {
            done = &mut listening, if !listened => {
                done?;
                listened = true;
            }
            message = messages.next() => match message {
                Some(Ok(AsyncMessage::Notification(notice))) => {
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
