//! The connection the store's requests go on: to one primary (a multiplexed
//! connection), or to a Redis Cluster (the cluster client's connection, which
//! sends each request to the primary of its keys' slot). Both are one
//! [`ConnectionLike`](redis::aio::ConnectionLike), so scripts run the same
//! way on either.

use lock_core::StoreError;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};

use crate::builder::Timeouts;

/// Where the store connects. One per store: the variants' sizes do not
/// matter.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    /// One primary (standalone Redis or Valkey).
    Single(redis::Client),
    /// A Redis Cluster, found from a seed node.
    Cluster(ClusterClient),
}

/// How the store opens a connection: where, and its timeouts.
#[derive(Clone, Debug)]
pub(crate) struct Connector {
    pub target: Target,
    /// A client of the URL the store was given: pub/sub goes there (in a
    /// cluster, a published message reaches every node).
    pub seed: redis::Client,
    pub timeouts: Timeouts,
}

/// A connection of either kind.
#[derive(Clone)]
pub(crate) enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Connector {
    /// Whether the store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// A new connection, within the connect timeout; every request on it
    /// times out after the request timeout.
    pub async fn open(&self) -> Result<Link, StoreError> {
        let limit = self.timeouts.connect.saturating_mul(2);
        let opened = match &self.target {
            Target::Single(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeouts.connect))
                    .set_response_timeout(Some(self.timeouts.request));
                tokio::time::timeout(
                    limit,
                    client.get_multiplexed_async_connection_with_config(&config),
                )
                .await
                .map(|opened| opened.map(Link::Single))
            }
            Target::Cluster(client) => tokio::time::timeout(limit, client.get_async_connection())
                .await
                .map(|opened| opened.map(Link::Cluster)),
        };
        match opened {
            Ok(Ok(link)) => Ok(link),
            // Nothing of a request was sent on a connection not open.
            Ok(Err(error)) => {
                let unauthorized = matches!(error.kind(), redis::ErrorKind::AuthenticationFailed)
                    || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"));
                let message = format!("connect: {error}");
                Err(if unauthorized {
                    StoreError::unauthorized(message)
                } else {
                    StoreError::unavailable(message)
                }
                .with_source(error))
            }
            Err(_) => Err(StoreError::unavailable(format!(
                "connect: no connection within {limit:?}"
            ))),
        }
    }
}

/// The cluster client for `seed` (one node's URL), with the timeouts, and
/// no retries of its own: a request re-sent after a lost reply could apply
/// twice (the lock client resolves ambiguity itself).
pub(crate) fn cluster_client(seed: &str, timeouts: Timeouts) -> redis::RedisResult<ClusterClient> {
    ClusterClient::builder([seed])
        .connection_timeout(timeouts.connect)
        .response_timeout(timeouts.request)
        .retries(0)
        .build()
}

impl Link {
    /// This link with replies awaited up to `timeout` (for `WAIT`, which
    /// blocks up to its own timeout). A cluster link keeps its own.
    pub fn with_response_timeout(mut self, timeout: std::time::Duration) -> Self {
        if let Link::Single(connection) = &mut self {
            connection.set_response_timeout(timeout);
        }
        self
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::Single(connection) => connection.req_packed_command(cmd),
            Link::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Link::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Single(connection) => connection.get_db(),
            Link::Cluster(connection) => connection.get_db(),
        }
    }
}
