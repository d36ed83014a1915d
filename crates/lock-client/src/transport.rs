//! The transport seam: session and heartbeat logic speak [`Transport`], so the same code runs over
//! real HTTP ([`HttpTransport`], reqwest) or a simulated network. This module and its HTTP
//! implementation are the only place that knows the lock surface's paths (open, heartbeat and close
//! a session; acquire, renew, release, proclaim, inspect and revoke a lock; watch).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use lock_api::{
    AcquireRequest, AcquireSetRequest, CreateSessionRequest, CreateSessionResponse, ErrorBody,
    ErrorCode, HeartbeatResponse, LockGrant, LockInfo, LockKey, LockOutcome, ProclaimRequest,
    ReleaseRequest, ReleaseResponse, RenewRequest, RevokeReason, RevokeRequest, SessionId,
    SetGrant,
};

use tls_kit::{POOL_IDLE_TIMEOUT_MS, bearer_headers};

use crate::config::Credential;

/// One call of the lock surface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Open a session.
    CreateSession(CreateSessionRequest),
    /// Heartbeat a session: keep it alive.
    Heartbeat(SessionId),
    /// Close a session.
    DeleteSession(SessionId),
    /// Acquire a key.
    Acquire(LockKey, AcquireRequest),
    /// Acquire a set of keys, all or none.
    AcquireSet(AcquireSetRequest),
    /// Renew a lease.
    Renew(LockKey, RenewRequest),
    /// Release a grant.
    Release(LockKey, ReleaseRequest),
    /// Change what a grant announces (an election's leader).
    Proclaim(LockKey, ProclaimRequest),
    /// Inspect: who holds the key (operators and tools; never a safety decision).
    Inspect(LockKey),
    /// Revoke the key's grant, presenting the operators' credential (`LOCK_ADMIN_TOKEN`)
    /// instead of the transport's own.
    Revoke(LockKey, Credential, Option<RevokeReason>),
}

impl Call {
    /// A short name for logs and metrics.
    #[cfg(any(test, feature = "test-util"))]
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateSession(_) => "create_session",
            Self::Heartbeat(_) => "heartbeat",
            Self::DeleteSession(_) => "delete_session",
            Self::Acquire(..) => "acquire",
            Self::AcquireSet(..) => "acquire_set",
            Self::Renew(..) => "renew",
            Self::Release(..) => "release",
            Self::Proclaim(..) => "proclaim",
            Self::Inspect(_) => "inspect",
            Self::Revoke(..) => "revoke",
        }
    }
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A session was opened (201).
    Session(CreateSessionResponse),
    /// A heartbeat was answered (200).
    Heartbeat(HeartbeatResponse),
    /// A session was closed (204).
    Deleted,
    /// A grant, from an acquire or a renew (200).
    Grant(LockGrant),
    /// A set's grants (200).
    Grants(SetGrant),
    /// A release's answer (200).
    Released(ReleaseResponse),
    /// A proclaim was applied (204).
    Proclaimed,
    /// An inspect's answer (200).
    Info(LockInfo),
    /// A revoke's answer (200).
    Revoked(LockOutcome),
}

/// A failed call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The server answered with an error body.
    #[error("HTTP {status} {}: {}", body.code.as_str(), body.message)]
    Status {
        /// HTTP status.
        status: u16,
        /// The `{"code","message"}` body.
        body: ErrorBody,
    },
    /// No answer: connection refused or reset, timeout, or an unreadable answer. The call
    /// may or may not have been applied.
    #[error("no usable answer: {0}")]
    Unreachable(String),
}

impl TransportError {
    /// The server's message, or what went wrong when nothing answered.
    pub fn message(&self) -> &str {
        match self {
            Self::Status { body, .. } => &body.message,
            Self::Unreachable(what) => what,
        }
    }

    /// The error code, when the server answered one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Status { body, .. } => Some(body.code),
            Self::Unreachable(_) => None,
        }
    }
}

/// Sends one call to one endpoint.
#[async_trait]
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Sends `call` to the replica at `endpoint` (a base URL).
    async fn send(&self, endpoint: &str, call: Call) -> Result<Reply, TransportError>;

    /// Opens W1 at `endpoint` for the keys under `prefix`, after `after` (`None`: from now):
    /// the stream's bytes. A transport without streams cannot watch.
    async fn watch(
        &self,
        endpoint: &str,
        prefix: &str,
        after: Option<u64>,
    ) -> Result<Box<dyn WatchBody>, TransportError> {
        let _ = (endpoint, prefix, after);
        Err(TransportError::Unreachable(
            "this transport cannot watch".into(),
        ))
    }
}

/// The bytes of an open watch stream, as they come.
#[async_trait]
pub trait WatchBody: Send {
    /// The next bytes; `None` when the stream ended.
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, TransportError>;
}

/// How long one watch stream may stay open before it is reopened (after its position).
const WATCH_STREAM_MAX: Duration = Duration::from_secs(3600);

#[async_trait]
impl WatchBody for reqwest::Response {
    async fn chunk(&mut self) -> Result<Option<Vec<u8>>, TransportError> {
        match reqwest::Response::chunk(self).await {
            Ok(bytes) => Ok(bytes.map(|b| b.to_vec())),
            Err(e) => Err(TransportError::Unreachable(e.without_url().to_string())),
        }
    }
}

/// The production transport: reqwest over HTTP/1.1 with a per-request timeout. Create one per
/// runtime: the heartbeat thread owns its own, so a busy application runtime never carries
/// heartbeat connections.
#[derive(Debug, Clone)]
pub struct HttpTransport {
    http: reqwest::Client,
}

impl HttpTransport {
    /// A transport whose every request times out after `request_timeout`, presents
    /// `credential` as a bearer token and trusts `tls`'s CA.
    pub fn new(
        request_timeout: Duration,
        credential: Option<&Credential>,
        tls: &tls_kit::ClientTls,
    ) -> Result<Self, TransportError> {
        let headers = match credential {
            Some(credential) => bearer_headers(credential.expose()).ok_or_else(|| {
                TransportError::Unreachable("LOCK_CLIENT_TOKEN is not a valid header value".into())
            })?,
            None => reqwest::header::HeaderMap::new(),
        };
        let builder = tls
            .apply(reqwest::Client::builder())
            .map_err(|e| TransportError::Unreachable(e.to_string()))?;
        let http = builder
            .timeout(request_timeout)
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_TIMEOUT_MS))
            .default_headers(headers)
            .build()
            .map_err(|e| TransportError::Unreachable(format!("build HTTP client: {e}")))?;
        Ok(Self { http })
    }

    async fn json<T: serde::de::DeserializeOwned>(
        request: reqwest::RequestBuilder,
        expected: reqwest::StatusCode,
    ) -> Result<T, TransportError> {
        let response = Self::checked(request, expected).await?;
        response.json::<T>().await.map_err(|e| {
            TransportError::Unreachable(format!("unreadable answer: {}", e.without_url()))
        })
    }

    async fn checked(
        request: reqwest::RequestBuilder,
        expected: reqwest::StatusCode,
    ) -> Result<reqwest::Response, TransportError> {
        let response = request
            .send()
            .await
            // Without the URL: a session's path carries its id, and this error is logged.
            .map_err(|e| TransportError::Unreachable(e.without_url().to_string()))?;
        let status = response.status();
        if status == expected {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str::<ErrorBody>(&text).unwrap_or_else(|_| ErrorBody {
            code: ErrorCode::Internal,
            message: format!("unexpected HTTP {status}: {text}"),
        });
        Err(TransportError::Status {
            status: status.as_u16(),
            body,
        })
    }
}

#[async_trait]
impl Transport for HttpTransport {
    async fn watch(
        &self,
        endpoint: &str,
        prefix: &str,
        after: Option<u64>,
    ) -> Result<Box<dyn WatchBody>, TransportError> {
        let base = endpoint.trim_end_matches('/');
        let mut query = vec![("prefix", prefix.to_owned())];
        query.extend(after.map(|a| ("after", a.to_string())));
        let request = (self.http.get(format!("{base}/v1/watch")))
            .query(&query)
            .timeout(WATCH_STREAM_MAX);
        let response = Self::checked(request, reqwest::StatusCode::OK).await?;
        Ok(Box::new(response))
    }

    async fn send(&self, endpoint: &str, call: Call) -> Result<Reply, TransportError> {
        use reqwest::StatusCode as S;
        let base = endpoint.trim_end_matches('/');
        match call {
            Call::CreateSession(body) => {
                let request = self.http.post(format!("{base}/v1/sessions")).json(&body);
                Self::json(request, S::CREATED).await.map(Reply::Session)
            }
            Call::Heartbeat(session) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/sessions/{}/heartbeat", session.expose()));
                Self::json(request, S::OK).await.map(Reply::Heartbeat)
            }
            Call::DeleteSession(session) => {
                let request = self
                    .http
                    .delete(format!("{base}/v1/sessions/{}", session.expose()));
                Self::checked(request, S::NO_CONTENT)
                    .await
                    .map(|_| Reply::Deleted)
            }
            Call::Acquire(key, body) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/locks/{key}/acquire"))
                    .json(&body);
                Self::json(request, S::OK).await.map(Reply::Grant)
            }
            Call::AcquireSet(body) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/lock-sets/acquire"))
                    .json(&body);
                Self::json(request, S::OK).await.map(Reply::Grants)
            }
            Call::Renew(key, body) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/locks/{key}/renew"))
                    .json(&body);
                Self::json(request, S::OK).await.map(Reply::Grant)
            }
            Call::Release(key, body) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/locks/{key}/release"))
                    .json(&body);
                Self::json(request, S::OK).await.map(Reply::Released)
            }
            Call::Proclaim(key, body) => {
                let request = self
                    .http
                    .post(format!("{base}/v1/locks/{key}/proclaim"))
                    .json(&body);
                Self::checked(request, S::NO_CONTENT)
                    .await
                    .map(|_| Reply::Proclaimed)
            }
            Call::Inspect(key) => {
                let request = self.http.get(format!("{base}/v1/locks/{key}"));
                Self::json(request, S::OK).await.map(Reply::Info)
            }
            Call::Revoke(key, admin, reason) => {
                // A request header replaces the default one: only the admin credential goes.
                let headers = bearer_headers(admin.expose()).ok_or_else(|| {
                    TransportError::Unreachable(
                        "the admin credential is not a valid header value".into(),
                    )
                })?;
                let mut request = self
                    .http
                    .post(format!("{base}/v1/locks/{key}/revoke"))
                    .headers(headers);
                if reason.is_some() {
                    request = request.json(&RevokeRequest { reason });
                }
                Self::json(request, S::OK).await.map(Reply::Revoked)
            }
        }
    }
}
