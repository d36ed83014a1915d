//! A fenced key-value service on PostgreSQL. `PUT /kv/{name}` (body: the value, UTF-8, at
//! most 64 KiB) writes for the holder of lock key `kv:{name}`, with `X-Fencing-Token` and
//! `X-Fencing-Proof`; `GET /kv/{name}` reads. Refusals are `{"code","message"}`.
//!
//! Environment: `DATABASE_URL`, `FENCE_PUBLIC_KEYS`, `LISTEN_ADDR` (default 127.0.0.1:8090).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::{Json, Router};
use fence_kit::{FenceError, FenceVerifier, FencedWrite, LockKey, postgres};
use serde_json::json;
use sqlx::PgPool;

/// Largest value accepted.
const VALUE_MAX_BYTES: usize = 64 * 1024;

struct Kv {
    pool: PgPool,
    verifier: FenceVerifier,
}

/// The write: verify the proof for `kv:{name}`, pass the fence, write, in one transaction.
async fn put_value(
    State(kv): State<Arc<Kv>>,
    Path(name): Path<String>,
    write: FencedWrite,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, Refusal> {
    let key = lock_key(&name)?;
    let proven = write.verify(&kv.verifier, &key)?;
    let value = value(body)?;
    let mut tx = kv.pool.begin().await?;
    sqlx::query(postgres::CHECK_SQL)
        .bind(key.as_str())
        .bind(proven.token_i64())
        .bind(proven.grant.as_text())
        .bind(true)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO kv (name, value, token) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET value = $2, token = $3",
    )
    .bind(&name)
    .bind(value)
    .bind(proven.token_i64())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn get_value(State(kv): State<Arc<Kv>>, Path(name): Path<String>) -> Result<String, Refusal> {
    lock_key(&name)?;
    sqlx::query_scalar("SELECT value FROM kv WHERE name = $1")
        .bind(&name)
        .fetch_optional(&kv.pool)
        .await?
        .ok_or_else(|| {
            Refusal::refused(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no value for {name}"),
            )
        })
}

fn lock_key(name: &str) -> Result<LockKey, Refusal> {
    LockKey::parse(format!("kv:{name}")).map_err(|e| {
        Refusal::refused(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            format!("name: {e}"),
        )
    })
}

fn value(body: Result<Bytes, BytesRejection>) -> Result<String, Refusal> {
    let bytes = body.map_err(|e| {
        Refusal::refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            e.body_text(),
        )
    })?;
    String::from_utf8(bytes.to_vec()).map_err(|_| {
        Refusal::refused(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "body: not UTF-8",
        )
    })
}

/// Every refusal leaves as `{"code","message"}`.
enum Refusal {
    Fence(FenceError),
    Other(StatusCode, &'static str, String),
}

impl Refusal {
    fn refused(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self::Other(status, code, message.into())
    }
}

impl From<FenceError> for Refusal {
    fn from(err: FenceError) -> Self {
        Self::Fence(err)
    }
}

impl From<sqlx::Error> for Refusal {
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err
            && let Some(fenced) = db
                .code()
                .and_then(|code| postgres::fence_error(&code, db.message()))
        {
            return Self::Fence(fenced);
        }
        eprintln!("fenced-kv: store error: {err}");
        Self::refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "the store did not answer",
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Self::Fence(err) => err.into_response(),
            Self::Other(status, code, message) => {
                (status, Json(json!({"code": code, "message": message}))).into_response()
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url =
        std::env::var("DATABASE_URL").map_err(|_| anyhow::anyhow!("DATABASE_URL is not set"))?;
    let listen = std::env::var("LISTEN_ADDR").unwrap_or_else(|_| "127.0.0.1:8090".into());
    // An example: it serves plain HTTP, and says so. Its writers send their proofs to it, so
    // put TLS in front of it (or build it on service-kit's TLS) anywhere but loopback.
    let plaintext = std::env::var("UNSAFE_PLAINTEXT_HTTP").unwrap_or_default();
    if !matches!(plaintext.trim(), "true" | "1") {
        anyhow::bail!(
            "fenced-kv serves plain HTTP only: set UNSAFE_PLAINTEXT_HTTP=true (loopback or a network you trust)"
        );
    }
    let verifier = fenced_examples::verifier_from_env()?;
    let pool = PgPool::connect(&url).await?;
    sqlx::raw_sql(postgres::MIGRATION).execute(&pool).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS kv (name text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)",
    )
    .execute(&pool)
    .await?;
    let app = Router::new()
        .route("/kv/{name}", put(put_value).get(get_value))
        .layer(DefaultBodyLimit::max(VALUE_MAX_BYTES))
        .with_state(Arc::new(Kv { pool, verifier }));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    eprintln!("fenced-kv: listening on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown())
        .await?;
    Ok(())
}
