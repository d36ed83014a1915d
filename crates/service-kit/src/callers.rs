//! Who is calling, and how fast: the named credentials a service accepts (single secrets
//! from its environment, and a credentials file read again on SIGHUP), the role check every
//! protected route makes, and each caller's request rate.
//!
//! A presented bearer secret is found by its SHA-256 digest, so no comparison runs over a
//! secret and the file holds no secret. A caller whose client certificate the service's
//! client CA verified (mutual TLS) is found by the certificate's name, which only the accept
//! loop writes into [`VERIFIED_CLIENT_HEADER`] (it removes any such header a client sent). Rates are per replica: a caller talking to three
//! replicas gets three times its rate, as with any limit kept without a shared store.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use lock_api::{CallerProof, CredentialEntry, ErrorCode, parse_credentials, secret_sha256};

use crate::error::ApiError;

/// A caller that proved who it is.
pub type Caller = Arc<CredentialEntry>;

/// The header the accept loop sets to the first DNS name of a client certificate its client
/// CA verified, on every request of that connection; it removes any such header a client
/// sent, so handlers can trust it.
pub const VERIFIED_CLIENT_HEADER: &str = "x-verified-client-certificate";

/// Default sustained requests a second per caller per replica: a ceiling, not a budget. A
/// fleet that shares one credential (`LOCK_CLIENT_TOKEN`) sends a replica its whole load,
/// and a replica on two cores serves about 5,000 requests a second (`harness bench locks`
/// ran into 2,000 at 8 clients on a hot key), so the default never throttles a shared
/// credential; a deployment that wants one client's flood refused gives each client its own
/// credential with its own `rps=`.
pub const REQUESTS_PER_SECOND_DEFAULT: u32 = 10_000;
/// Default requests a caller may send at once above its rate (a fleet starting together).
pub const BURST_DEFAULT: u32 = 20_000;

/// Counts every rate and quota decision by limit and outcome (bounded labels: no caller
/// names, whose number the operator's file decides).
pub const CREDENTIAL_LIMIT_TOTAL: &str = "credential_limit_total";
/// The limits [`CREDENTIAL_LIMIT_TOTAL`] counts.
pub const LIMITS: [&str; 3] = ["requests", "sessions", "waiters"];

/// Counts one decision of `limit` (one of [`LIMITS`]).
pub fn count_limit(limit: &'static str, allowed: bool) {
    let outcome = if allowed { "allowed" } else { "refused" };
    metrics::counter!(CREDENTIAL_LIMIT_TOTAL, "limit" => limit, "outcome" => outcome).increment(1);
}

/// The request rate every caller gets unless its line in the file says otherwise.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct RateDefaults {
    /// Sustained requests a second one caller may send to this replica; more answer 429
    /// `RATE_LIMITED` with `Retry-After`.
    #[arg(long = "limits.requests-per-second", env = "LIMIT_REQUESTS_PER_SECOND", default_value_t = REQUESTS_PER_SECOND_DEFAULT, value_parser = clap::value_parser!(u32).range(1..))]
    pub requests_per_second: u32,
    /// Requests one caller may send at once above its rate.
    #[arg(long = "limits.burst", env = "LIMIT_BURST", default_value_t = BURST_DEFAULT, value_parser = clap::value_parser!(u32).range(1..))]
    pub burst: u32,
}

impl Default for RateDefaults {
    fn default() -> Self {
        Self {
            requests_per_second: REQUESTS_PER_SECOND_DEFAULT,
            burst: BURST_DEFAULT,
        }
    }
}

/// The credentials a service accepts and each caller's request budget.
#[derive(Debug)]
pub struct Callers {
    known_roles: &'static [&'static str],
    fixed: Vec<CredentialEntry>,
    file: Option<PathBuf>,
    book: RwLock<Arc<Book>>,
    rate: RateDefaults,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// One snapshot of the accepted credentials.
#[derive(Debug, Default)]
struct Book {
    by_proof: HashMap<CallerProof, Caller>,
    roles: HashSet<String>,
}

impl Callers {
    /// The credentials of `fixed` (from the environment) and of `file`, whose roles must be
    /// among `known_roles`. With a file, a task reloads it on every SIGHUP (logged
    /// `credentials_reloaded`, or `credentials_reload_failed` keeping the credentials in
    /// force). Call from within the runtime, before the service serves.
    pub fn load(
        known_roles: &'static [&'static str],
        fixed: Vec<CredentialEntry>,
        file: Option<&Path>,
        rate: RateDefaults,
    ) -> Result<Arc<Self>, String> {
        let callers = Arc::new(Self {
            known_roles,
            fixed,
            file: file.map(Path::to_owned),
            book: RwLock::new(Arc::default()),
            rate,
            buckets: Mutex::new(HashMap::new()),
        });
        callers.reload()?;
        metrics::describe_counter!(
            CREDENTIAL_LIMIT_TOTAL,
            "Rate and quota decisions per credentialed request, session open and waiting acquire, by limit and outcome."
        );
        for limit in LIMITS {
            for outcome in ["allowed", "refused"] {
                metrics::counter!(CREDENTIAL_LIMIT_TOTAL, "limit" => limit, "outcome" => outcome)
                    .increment(0);
            }
        }
        if callers.file.is_some() {
            let reloaded = callers.clone();
            crate::hangup::on_sighup("the credentials file", move || match reloaded.reload() {
                Ok(names) => {
                    tracing::info!(event = "credentials_reloaded", credentials = ?names, "accepting exactly these credentials");
                }
                Err(err) => {
                    tracing::error!(event = "credentials_reload_failed", error = %err, "kept the credentials in force");
                }
            })?;
        }
        Ok(callers)
    }

    /// Reads the file again and, when it parses, accepts exactly its credentials and the
    /// environment's from now on; returns their names. A file that does not parse changes
    /// nothing (the error says which line and why).
    pub fn reload(&self) -> Result<Vec<String>, String> {
        let mut entries = self.fixed.clone();
        if let Some(path) = &self.file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("credentials file {}: {e}", path.display()))?;
            let listed = parse_credentials(&text, self.known_roles)
                .map_err(|e| format!("credentials file {}: {e}", path.display()))?;
            entries.extend(listed);
        }
        let mut book = Book::default();
        for entry in entries {
            if book.by_proof.values().any(|c| c.name == entry.name) {
                return Err(format!(
                    "credential {} is named twice (the environment and the file)",
                    entry.name
                ));
            }
            book.roles.extend(entry.roles.iter().cloned());
            if book
                .by_proof
                .insert(entry.proof.clone(), Arc::new(entry))
                .is_some()
            {
                return Err(
                    "two credentials share one secret or certificate: each caller needs its own"
                        .into(),
                );
            }
        }
        let mut names: Vec<String> = book.by_proof.values().map(|c| c.name.clone()).collect();
        names.sort();
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name, _| names.contains(name));
        *self.book.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(book);
        Ok(names)
    }

    /// Whether any accepted credential has `role` (else its routes are disabled).
    pub fn has_role(&self, role: &str) -> bool {
        self.book
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .roles
            .contains(role)
    }

    /// The caller, if it has `role`: the credential of the verified client certificate the
    /// request came with, else of `Authorization: Bearer <secret>` (scheme
    /// case-insensitive); `what` names the operation in refusals. No credential with the
    /// role: 403 `FORBIDDEN` (the operation is disabled); a missing or unknown secret or
    /// certificate, or one without the role: 401.
    pub fn authorize(
        &self,
        headers: &HeaderMap,
        role: &str,
        what: &str,
    ) -> Result<Caller, ApiError> {
        let book = self
            .book
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if !book.roles.contains(role) {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("{what} is disabled: no credential is configured"),
            ));
        }
        let presented = crate::auth::presented_bearer(headers)?;
        let by_certificate = headers
            .get(VERIFIED_CLIENT_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|name| {
                book.by_proof
                    .get(&CallerProof::Certificate(name.to_ascii_lowercase()))
            })
            .filter(|caller| caller.has_role(role));
        by_certificate
            .or_else(|| {
                presented
                    .and_then(|secret| {
                        book.by_proof
                            .get(&CallerProof::Secret(secret_sha256(secret)))
                    })
                    .filter(|caller| caller.has_role(role))
            })
            .cloned()
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::Unauthenticated,
                    format!("Authorization: a valid bearer token is required for {what}"),
                )
            })
    }

    /// Takes one request from `caller`'s budget, or refuses it: 429 `RATE_LIMITED` with
    /// `Retry-After`.
    pub fn admit(&self, caller: &CredentialEntry) -> Result<(), ApiError> {
        let rate = caller
            .limits
            .requests_per_second
            .unwrap_or(self.rate.requests_per_second);
        let burst = caller.limits.burst.unwrap_or(self.rate.burst);
        let now = Instant::now();
        let wait = self
            .buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(caller.name.clone())
            .or_insert_with(|| Bucket::full(burst, now))
            .take(rate, burst, now);
        count_limit("requests", wait.is_none());
        match wait {
            None => Ok(()),
            Some(wait) => Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "credential {} is over its {rate} requests a second on this replica; retry in {} ms",
                    caller.name,
                    wait.as_millis().max(1)
                ),
            )
            .retry_after(wait)),
        }
    }
}

/// A token bucket: `tokens` requests may go now; it refills at the rate up to the burst.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes one token at `now`; `None` when it went, else how long until one is there.
    fn take(&mut self, rate: u32, burst: u32, now: Instant) -> Option<Duration> {
        let rate = f64::from(rate);
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(burst));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            None
        } else {
            Some(Duration::from_secs_f64((1.0 - self.tokens) / rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const ROLES: &[&str] = &["client", "admin"];

    fn bearer(secret: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {secret}")).unwrap(),
        );
        headers
    }

    fn file(lines: &[String]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), lines.join("\n")).unwrap();
        file
    }

    #[tokio::test]
    async fn each_caller_is_found_by_its_secret_and_refused_without_its_role() {
        let app = CredentialEntry::from_secret("app-a", &["client"], "a-secret");
        let ops = CredentialEntry::from_secret("ops", &["admin"], "o-secret");
        let f = file(&[app.line(), ops.line()]);
        let env = CredentialEntry::from_secret("lock-client", &["client"], "env-secret");
        let callers =
            Callers::load(ROLES, vec![env], Some(f.path()), RateDefaults::default()).unwrap();
        let who = |secret: &str, role: &str| {
            callers
                .authorize(&bearer(secret), role, "x")
                .map(|c| c.name.clone())
                .map_err(|e| e.code.status)
        };
        assert_eq!(who("a-secret", "client"), Ok("app-a".into()));
        assert_eq!(who("env-secret", "client"), Ok("lock-client".into()));
        assert_eq!(who("o-secret", "admin"), Ok("ops".into()));
        assert_eq!(who("o-secret", "client"), Err(401), "a role it lacks");
        assert_eq!(who("a-secre", "client"), Err(401));
        assert_eq!(who("", "client"), Err(401));
        assert_eq!(
            callers
                .authorize(&HeaderMap::new(), "client", "x")
                .map_err(|e| e.code.status)
                .err(),
            Some(401)
        );
        // Revoking one caller: its line leaves the file, a SIGHUP-equivalent reload.
        std::fs::write(f.path(), ops.line()).unwrap();
        assert_eq!(
            callers.reload(),
            Ok(vec!["lock-client".to_owned(), "ops".to_owned()])
        );
        assert_eq!(who("a-secret", "client"), Err(401));
        assert_eq!(who("env-secret", "client"), Ok("lock-client".into()));
        // A file that does not parse keeps the credentials in force.
        std::fs::write(f.path(), "ops admin - sha256:00").unwrap();
        assert!(callers.reload().unwrap_err().contains("line 1: secret"));
        assert_eq!(who("o-secret", "admin"), Ok("ops".into()));
    }

    #[tokio::test]
    async fn a_verified_client_certificate_is_its_credential_without_a_secret() {
        let mut app = CredentialEntry::from_secret("app-c", &["client"], "unused");
        app.proof = CallerProof::Certificate("app-c.clients".into());
        let bearer_app = CredentialEntry::from_secret("app-d", &["client"], "d-secret");
        let callers =
            Callers::load(ROLES, vec![app, bearer_app], None, RateDefaults::default()).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            VERIFIED_CLIENT_HEADER,
            HeaderValue::from_static("App-C.clients"),
        );
        let who = |headers: &HeaderMap| {
            callers
                .authorize(headers, "client", "x")
                .map(|c| c.name.clone())
                .map_err(|e| e.code.status)
        };
        assert_eq!(who(&headers), Ok("app-c".into()));
        assert_eq!(who(&bearer("unused")), Err(401), "no secret stands for it");
        // A certificate of no credential falls back to the bearer secret.
        let mut other = bearer("d-secret");
        other.insert(
            VERIFIED_CLIENT_HEADER,
            HeaderValue::from_static("x.clients"),
        );
        assert_eq!(who(&other), Ok("app-d".into()));
    }

    #[tokio::test]
    async fn a_role_nobody_has_is_disabled_and_a_shared_secret_is_refused() {
        let callers = Callers::load(ROLES, vec![], None, RateDefaults::default()).unwrap();
        let refused = callers
            .authorize(&bearer("x"), "admin", "revoke")
            .unwrap_err();
        assert_eq!(refused.code.status, 403);
        let twins = vec![
            CredentialEntry::from_secret("a", &["client"], "same"),
            CredentialEntry::from_secret("b", &["admin"], "same"),
        ];
        let err = Callers::load(ROLES, twins, None, RateDefaults::default()).unwrap_err();
        assert!(err.contains("share one secret or certificate"), "{err}");
    }

    #[test]
    fn a_bucket_lets_the_burst_through_then_the_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(3, t0);
        for _ in 0..3 {
            assert_eq!(bucket.take(10, 3, t0), None);
        }
        let wait = bucket.take(10, 3, t0).unwrap();
        assert!((95..=100).contains(&wait.as_millis()), "{wait:?}");
        assert_eq!(bucket.take(10, 3, t0 + Duration::from_millis(100)), None);
        assert!(
            bucket
                .take(10, 3, t0 + Duration::from_millis(100))
                .is_some()
        );
        // Idle for long: never more than the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(bucket.take(10, 3, later), None);
        }
        assert!(bucket.take(10, 3, later).is_some());
    }

    #[test]
    fn a_caller_over_its_rate_is_told_when_to_come_back() {
        let mut entry = CredentialEntry::from_secret("app", &["client"], "s");
        entry.limits.requests_per_second = Some(1);
        entry.limits.burst = Some(2);
        let callers = Callers {
            known_roles: ROLES,
            fixed: vec![],
            file: None,
            book: RwLock::default(),
            rate: RateDefaults::default(),
            buckets: Mutex::default(),
        };
        assert!(callers.admit(&entry).is_ok());
        assert!(callers.admit(&entry).is_ok());
        let refused = callers.admit(&entry).unwrap_err();
        assert_eq!(
            (refused.code.code, refused.code.status),
            ("RATE_LIMITED", 429)
        );
        assert_eq!(refused.retry_after_secs, Some(1));
        let other = CredentialEntry::from_secret("other", &["client"], "t");
        assert!(
            callers.admit(&other).is_ok(),
            "one caller's budget is its own"
        );
    }
}
