//! [`Connection`]: one gRPC channel to the members of an etcd cluster,
//! which adds etcd's request metadata (a leader is required; the login's
//! token) and logs in again when etcd says the token expired.

use std::sync::{Arc, PoisonError, RwLock};

use futures_util::StreamExt;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status, Streaming};

use super::etcdserverpb::auth_client::AuthClient;
use super::etcdserverpb::kv_client::KvClient;
use super::etcdserverpb::watch_client::WatchClient;
use super::etcdserverpb::{
    AuthenticateRequest, RangeRequest, RangeResponse, TxnRequest, TxnResponse, WatchRequest,
    WatchResponse,
};

/// The members to send to, each configured (scheme, TLS, timeouts,
/// keep-alive); requests are balanced over those that answer.
#[derive(Clone, Debug)]
pub(crate) struct Endpoints(pub Vec<Endpoint>);

/// A channel to the members, cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) struct Connection {
    channel: Channel,
    metadata: Metadata,
    login: Option<Arc<Login>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("user", &self.login.as_ref().map(|login| &login.name))
            .finish_non_exhaustive()
    }
}

/// A user's name and password, to log in with again when the token expires.
struct Login {
    name: String,
    password: String,
    /// Held while logging in again: concurrent requests that found the
    /// token expired log in once.
    renewing: tokio::sync::Mutex<()>,
}

/// The metadata every request carries.
#[derive(Clone, Default)]
struct Metadata {
    token: Arc<RwLock<Option<AsciiMetadataValue>>>,
}

impl Metadata {
    fn token(&self) -> Option<AsciiMetadataValue> {
        self.token
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_token(&self, token: AsciiMetadataValue) {
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = Some(token);
    }
}

impl Interceptor for Metadata {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        // A member cut off from its cluster answers at once that it has no
        // leader, instead of holding the request until it times out.
        require_leader(&mut request);
        if let Some(token) = self.token() {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

fn require_leader<T>(request: &mut Request<T>) {
    request
        .metadata_mut()
        .insert("hasleader", AsciiMetadataValue::from_static("true"));
}

type Intercepted = InterceptedService<Channel, Metadata>;

impl Connection {
    /// A channel balanced over `endpoints`, which connects when a request
    /// is sent; with a `user`, it logs in now (etcd's `Authenticate`), so a
    /// wrong password fails here.
    pub async fn open(
        endpoints: &Endpoints,
        user: Option<&(String, String)>,
    ) -> Result<Self, Status> {
        let connection = Self {
            channel: Channel::balance_list(endpoints.0.iter().cloned()),
            metadata: Metadata::default(),
            login: user.map(|(name, password)| {
                Arc::new(Login {
                    name: name.clone(),
                    password: password.clone(),
                    renewing: tokio::sync::Mutex::new(()),
                })
            }),
        };
        if let Some(login) = &connection.login {
            connection.log_in(login).await?;
        }
        Ok(connection)
    }

    /// Ask etcd for a token (the request carries none) and send it from now
    /// on.
    async fn log_in(&self, login: &Login) -> Result<(), Status> {
        let mut request = Request::new(AuthenticateRequest {
            name: login.name.clone(),
            password: login.password.clone(),
        });
        require_leader(&mut request);
        let answer = AuthClient::new(self.channel.clone())
            .authenticate(request)
            .await?;
        let token = AsciiMetadataValue::try_from(answer.into_inner().token).map_err(|_| {
            Status::internal("etcd answered the login with a token that is not ASCII")
        })?;
        self.metadata.set_token(token);
        Ok(())
    }

    /// Log in again, unless another request did since `stale` was sent.
    async fn renew(&self, login: &Login, stale: Option<AsciiMetadataValue>) -> Result<(), Status> {
        let _renewing = login.renewing.lock().await;
        if self.metadata.token() != stale {
            return Ok(());
        }
        self.log_in(login).await
    }

    fn kv(&self) -> KvClient<Intercepted> {
        KvClient::with_interceptor(self.channel.clone(), self.metadata.clone())
    }

    /// `request` sent by `send`; sent once more after logging in again when
    /// etcd refused it for an expired token (it refuses those before
    /// applying anything, so a write is not made twice).
    async fn logged_in<Q, A, F, R>(&self, request: Q, send: F) -> Result<A, Status>
    where
        Q: Clone,
        F: Fn(Q) -> R,
        R: Future<Output = Result<Response<A>, Status>>,
    {
        let stale = self.metadata.token();
        match (send(request.clone()).await, &self.login) {
            (Err(status), Some(login)) if expired(&status) => {
                self.renew(login, stale)
                    .await
                    .map_err(|error| not_logged_in_again(&error))?;
                send(request).await.map(Response::into_inner)
            }
            (answer, _) => answer.map(Response::into_inner),
        }
    }

    /// A range request (a read of one key, or a listing).
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse, Status> {
        self.logged_in(
            request,
            |request| async move { self.kv().range(request).await },
        )
        .await
    }

    /// A transaction.
    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse, Status> {
        self.logged_in(
            request,
            |request| async move { self.kv().txn(request).await },
        )
        .await
    }

    /// A watch made by `request`: what it sees, until the [`Watch`] is
    /// dropped. The stream of requests stays open while it lives (etcd keeps
    /// a watch while its client's side is open) and ends when it is dropped,
    /// which closes the gRPC stream: dropping the replies alone would leave
    /// the stream, the member's watcher and the connection behind.
    pub async fn watch(&self, request: WatchRequest) -> Result<Watch, Status> {
        let watch = |request: WatchRequest| async move {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let until_dropped = futures_util::stream::once(async move {
                // Resolves when the `Watch` (its sender) is dropped.
                let _ = stopped.await;
            })
            .filter_map(|()| std::future::ready(None));
            let requests = futures_util::stream::iter([request]).chain(until_dropped);
            let answer = WatchClient::with_interceptor(self.channel.clone(), self.metadata.clone())
                .watch(requests)
                .await?;
            Ok(answer.map(|replies| Watch {
                replies,
                _stop: stop,
            }))
        };
        self.logged_in(request, watch).await
    }
}

/// A watch in progress: its replies; dropping it ends the watch.
#[derive(Debug)]
pub(crate) struct Watch {
    replies: Streaming<WatchResponse>,
    /// Dropped with the watch: ends the stream of requests.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Watch {
    /// The next reply; `None` once etcd ended the watch.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>, Status> {
        self.replies.message().await
    }
}

/// Whether etcd refused a request for its token, before applying anything,
/// in a way logging in again mends: a token it no longer knows ("invalid
/// auth token": expired, or the member restarted), or one issued before the
/// last change to its users, roles or permissions ("revision of auth store
/// is old").
fn expired(status: &Status) -> bool {
    let message = status.message();
    (status.code() == Code::Unauthenticated && message.contains("invalid auth token"))
        || (status.code() == Code::InvalidArgument
            && message.contains("revision of auth store is old"))
}

/// The request was refused before anything applied, and logging in again
/// failed (`status`): refused credentials read as unauthenticated, anything
/// else as a refusal the next try may pass (never as a write that may have
/// applied).
fn not_logged_in_again(status: &Status) -> Status {
    let message = format!(
        "etcd refused the login token and logging in again failed: {}",
        status.message()
    );
    match status.code() {
        Code::InvalidArgument | Code::Unauthenticated | Code::PermissionDenied => {
            Status::unauthenticated(message)
        }
        // Classified as nothing applied: the next try may pass.
        _ => Status::failed_precondition(message),
    }
}
