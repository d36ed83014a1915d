//! rail-stub: a fake bank. It accepts or rejects transfers with a rail reference, records every
//! request it receives (no dedupe: it is the witness that each payout reaches the rail at most
//! once), and takes scripted faults (delay, timeout, reject, 5xx; per payout or for all) through an
//! admin endpoint. Only callers with the proxy's credential may send transfers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use lock_api::ErrorCode;
use payment_api::{Fault, FaultKind, Received, Transfer, TransferAnswer};
use serde::Deserialize;
use service_kit::{ApiError, ApiJson, LogFormat, RequestMetrics, Service, common_layers};

/// Largest request body.
const BODY_MAX_BYTES: usize = 16 * 1024;
/// Most requests kept in the witness log; older ones are dropped (the log is for tests and
/// demos, not an archive).
pub const RECEIVED_MAX: usize = 1_000_000;
/// Longest scripted delay or hold.
pub const FAULT_MAX_MS: u64 = 120_000;

/// rail-stub settings.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rail-stub",
    version,
    about = "A fake bank rail with scripted faults",
    args_override_self = true
)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "RAIL_STUB_BIND", default_value = "127.0.0.1:8085")]
    pub bind: SocketAddr,
    /// The bearer credential rail-proxy presents; transfers without it are refused (401).
    #[arg(long, env = "RAIL_PROXY_CREDENTIAL", hide_env_values = true)]
    pub proxy_credential: Option<String>,
    /// The bearer token of the admin endpoints (faults, received list).
    #[arg(long, env = "RAIL_STUB_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Budget for one request (must exceed the longest scripted hold).
    #[arg(long, env = "RAIL_STUB_REQUEST_TIMEOUT", default_value = "130s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// Connection limits (header-read/idle timeout, connection cap).
    #[command(flatten)]
    pub http: service_kit::HttpLimits,
}

#[derive(Debug, Default)]
struct Rail {
    received: Vec<Received>,
    next_seq: u64,
    faults: HashMap<Option<i64>, FaultKind>,
}

#[derive(Debug, Clone)]
struct AppState {
    rail: Arc<Mutex<Rail>>,
    proxy_credential: Option<Arc<str>>,
    admin_token: Option<Arc<str>>,
}

impl AppState {
    fn rail(&self) -> std::sync::MutexGuard<'_, Rail> {
        self.rail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

type ApiResult<T> = Result<T, ApiError>;

async fn transfer(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(transfer): ApiJson<Transfer>,
) -> ApiResult<(StatusCode, Json<TransferAnswer>)> {
    service_kit::require_bearer(
        &headers,
        state.proxy_credential.as_deref(),
        "transfers (RAIL_PROXY_CREDENTIAL)",
    )?;
    let (seq, fault) = {
        let mut rail = state.rail();
        rail.next_seq += 1;
        let seq = rail.next_seq;
        if rail.received.len() >= RECEIVED_MAX {
            rail.received.remove(0);
        }
        rail.received.push(Received {
            seq,
            transfer: transfer.clone(),
        });
        let fault = rail
            .faults
            .get(&Some(transfer.payout_id))
            .or_else(|| rail.faults.get(&None))
            .copied();
        (seq, fault)
    };
    metrics::counter!(TRANSFERS_RECEIVED_TOTAL).increment(1);
    tracing::info!(event = "transfer_received", payout_id = transfer.payout_id, token = transfer.presented_token, seq, fault = ?fault);
    let reference = format!("RAIL-{seq:08}");
    let accepted = || {
        (
            StatusCode::OK,
            Json(TransferAnswer {
                status: "accepted".into(),
                rail_reference: reference.clone(),
            }),
        )
    };
    match fault {
        None => Ok(accepted()),
        Some(FaultKind::Delay { delay_ms }) | Some(FaultKind::Timeout { hold_ms: delay_ms }) => {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            Ok(accepted())
        }
        Some(FaultKind::Reject {}) => Ok((
            StatusCode::OK,
            Json(TransferAnswer {
                status: "rejected".into(),
                rail_reference: reference,
            }),
        )),
        Some(FaultKind::Error {}) => Err(ApiError::new(
            ErrorCode::StoreUnavailable,
            "scripted rail failure",
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceivedQuery {
    #[serde(default)]
    payout_id: Option<i64>,
}

async fn received(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ReceivedQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<Vec<Received>>> {
    service_kit::require_bearer(
        &headers,
        state.admin_token.as_deref(),
        "rail-stub admin (RAIL_STUB_ADMIN_TOKEN)",
    )?;
    let Query(query) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    let rail = state.rail();
    let list = rail
        .received
        .iter()
        .filter(|r| query.payout_id.is_none_or(|id| r.transfer.payout_id == id))
        .cloned()
        .collect();
    Ok(Json(list))
}

async fn add_fault(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiJson(fault): ApiJson<Fault>,
) -> ApiResult<StatusCode> {
    service_kit::require_bearer(
        &headers,
        state.admin_token.as_deref(),
        "rail-stub admin (RAIL_STUB_ADMIN_TOKEN)",
    )?;
    let ms = match fault.fault {
        FaultKind::Delay { delay_ms } => Some(("delay_ms", delay_ms)),
        FaultKind::Timeout { hold_ms } => Some(("hold_ms", hold_ms)),
        FaultKind::Reject {} | FaultKind::Error {} => None,
    };
    if let Some((field, ms)) = ms.filter(|(_, ms)| *ms > FAULT_MAX_MS) {
        return Err(ApiError::invalid(
            field,
            format!("{ms} ms is above the {FAULT_MAX_MS} ms limit"),
        ));
    }
    tracing::warn!(event = "fault_scripted", payout_id = ?fault.payout_id, fault = ?fault.fault);
    state.rail().faults.insert(fault.payout_id, fault.fault);
    Ok(StatusCode::NO_CONTENT)
}

async fn clear_faults(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<StatusCode> {
    service_kit::require_bearer(
        &headers,
        state.admin_token.as_deref(),
        "rail-stub admin (RAIL_STUB_ADMIN_TOKEN)",
    )?;
    state.rail().faults.clear();
    Ok(StatusCode::NO_CONTENT)
}

/// The router.
fn router(state: AppState, request_timeout: Duration) -> Router {
    let routes = Router::new()
        .route("/v1/transfers", post(transfer))
        .route("/v1/received", get(received))
        .route("/v1/faults", post(add_fault).delete(clear_faults))
        .route("/health/live", get(service_kit::live))
        .route("/health/ready", get(service_kit::live))
        .route("/metrics", get(service_kit::render_metrics))
        .fallback(service_kit::not_found)
        .with_state(state);
    common_layers(
        routes,
        BODY_MAX_BYTES,
        request_timeout,
        RequestMetrics::for_service("rail-stub"),
    )
}

/// Transfers the stub received (name pinned by the observability contract).
const TRANSFERS_RECEIVED_TOTAL: &str = "rail_transfers_received_total";

/// Binds: a service ready to run.
pub async fn build(config: &Config) -> anyhow::Result<Service> {
    service_kit::install_metrics();
    // Exported from start at zero: an absent series is not a zero.
    metrics::describe_counter!(
        TRANSFERS_RECEIVED_TOTAL,
        "Authenticated, well-formed transfers received, duplicates included (the witness)."
    );
    metrics::counter!(TRANSFERS_RECEIVED_TOTAL).increment(0);
    let clean = |t: &Option<String>| t.as_deref().filter(|t| !t.is_empty()).map(Arc::from);
    let state = AppState {
        rail: Arc::default(),
        proxy_credential: clean(&config.proxy_credential),
        admin_token: clean(&config.admin_token),
    };
    Ok(Service::bind(
        config.bind,
        router(state, config.request_timeout),
        config.http.clone(),
    )
    .await?)
}
