//! The layers every service's router gets: body limit, timeout, per-route metrics, JSON
//! errors for anything below that answered without them, and request tracing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use metrics::Label;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::error::{ApiError, code_for_status};

/// Largest error body a lower layer produced that is quoted into our JSON message.
const QUOTED_BODY_MAX_BYTES: usize = 1024;

/// The body limit in force, for messages (set by [`common_layers`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Names and constant labels of a service's request metrics.
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    /// Counter of requests by route, method and status.
    pub requests_total: &'static str,
    /// Histogram of request latency by route and method.
    pub duration_seconds: &'static str,
    /// Labels on every sample (e.g. `service`, `backend`).
    pub labels: Vec<(&'static str, String)>,
}

impl RequestMetrics {
    /// HELP text of the two families (their label sets are known only per request).
    fn describe(&self) {
        metrics::describe_counter!(
            self.requests_total,
            "HTTP requests answered, by matched route template, method and status code."
        );
        metrics::describe_histogram!(
            self.duration_seconds,
            metrics::Unit::Seconds,
            "Time from entering the metrics layer to the response, by route and method."
        );
    }

    /// `http_requests_total` and `http_request_duration_seconds` labelled `service`.
    pub fn for_service(service: &'static str) -> Self {
        Self {
            requests_total: "http_requests_total",
            duration_seconds: "http_request_duration_seconds",
            labels: vec![("service", service.to_owned())],
        }
    }
}

/// Wraps `router` (already holding its state) in the common layers.
pub fn common_layers(
    router: Router,
    body_limit_bytes: usize,
    timeout: Duration,
    metrics: RequestMetrics,
) -> Router {
    metrics.describe();
    router
        .layer(DefaultBodyLimit::max(body_limit_bytes))
        .layer(axum::Extension(BodyLimit(body_limit_bytes)))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            timeout,
        ))
        .layer(middleware::from_fn_with_state(Arc::new(metrics), track))
        .layer(middleware::map_response(jsonify_errors))
        .layer(TraceLayer::new_for_http().make_span_with(route_span))
}

/// The span of one request: its method and route template, never its URI (a session's
/// path carries its id, a capability).
fn route_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    tracing::debug_span!("request", method = %request.method(), route)
}

/// Counts and times every request by route.
async fn track(
    State(metrics): State<Arc<RequestMetrics>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method()).to_owned();
    let response = next.run(request).await;
    let mut labels: Vec<Label> = metrics
        .labels
        .iter()
        .map(|(k, v)| Label::new(*k, v.clone()))
        .collect();
    labels.push(Label::new("route", route));
    labels.push(Label::new("method", method));
    metrics::histogram!(metrics.duration_seconds, labels.clone())
        .record(started.elapsed().as_secs_f64());
    labels.push(Label::new("status", response.status().as_u16().to_string()));
    metrics::counter!(metrics.requests_total, labels).increment(1);
    response
}

/// The `method` label: a standard method's name, or `OTHER`. Any token is a valid HTTP
/// method, so labelling by the raw name would let every caller add a series that never
/// goes away; unmatched routes are likewise one `route="unmatched"`.
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    let known = [
        (Method::GET, "GET"),
        (Method::POST, "POST"),
        (Method::PUT, "PUT"),
        (Method::DELETE, "DELETE"),
        (Method::HEAD, "HEAD"),
        (Method::OPTIONS, "OPTIONS"),
        (Method::PATCH, "PATCH"),
        (Method::TRACE, "TRACE"),
        (Method::CONNECT, "CONNECT"),
    ];
    known
        .into_iter()
        .find(|(m, _)| m == method)
        .map_or("OTHER", |(_, name)| name)
}

/// Turns any error answer that is not already our JSON (router 405, timeouts, limits) into
/// `{"code","message"}`, keeping the status.
pub async fn jsonify_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let text = axum::body::to_bytes(response.into_body(), QUOTED_BODY_MAX_BYTES)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut out = ApiError::new(code_for_status(status), message).into_response();
    *out.status_mut() = status;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn made_up_methods_share_one_label() {
        assert_eq!(method_label(&Method::POST), "POST");
        assert_eq!(method_label(&Method::DELETE), "DELETE");
        for raw in ["FOO", "BREW", "get", "X1"] {
            let method = Method::from_bytes(raw.as_bytes()).expect("a token");
            assert_eq!(method_label(&method), "OTHER", "{raw}");
        }
    }
}
