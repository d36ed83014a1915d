//! The credentials file: named callers, each with the digest of its secret, its roles, the
//! lock owners it may act as, and optional limits. One format for every service
//! (`LOCK_CREDENTIALS_FILE`, `PAYMENT_CREDENTIALS_FILE`) and for `lockctl credential`, which
//! writes its lines. One caller a line, fields separated by whitespace, `#` starts a comment:
//!
//! ```text
//! # name   roles    owners          secret          limits (optional)
//! app-a    client   app-a,app-a-*   sha256:9f86d0…  rps=200 sessions=50 waiters=100
//! ops      admin    -               sha256:60303a…
//! ```
//!
//! `owners` is `*` (any owner), `-` (none: the caller opens no session) or a comma list of
//! owner ids, each exact or a prefix ending in `*`. Secrets are random (32 bytes from
//! `lockctl credential`), not passwords chosen by people, so one SHA-256 is the right digest:
//! a leaked file gives no secret, and no request pays for a password hash. Instead of a
//! secret, `cert:<name>` names a client certificate: a caller whose certificate the
//! service's client CA verified, with `<name>` as its first DNS name, is this credential,
//! with no bearer secret at all (mutual TLS).

use sha2::{Digest, Sha256};

/// Longest credential name: it appears in every audit line.
pub const CREDENTIAL_NAME_MAX_BYTES: usize = 64;
/// Bytes of a secret `lockctl credential` generates: 256 bits, past any guessing.
pub const CREDENTIAL_SECRET_BYTES: usize = 32;
/// The roles of the lock surface's credentials file (`LOCK_CREDENTIALS_FILE`): `client`
/// (every lock route but revoke) and `admin` (revoke).
pub const LOCK_CREDENTIAL_ROLES: &[&str] = &["client", "admin"];
/// The roles of a payments credentials file (`PAYMENT_CREDENTIALS_FILE`, one file for
/// payment-resource and rail-proxy): `creator` (P0), `executor` (the claimable list, P2, P3,
/// rail-proxy's submit), `proxy` (rail-proxy's submissions), `admin` (re-fence), `reader` (a
/// payout, its submission, the ledger summary). Here, beside the format, so `lockctl
/// credential` checks a role without depending on the payment crates.
pub const PAYMENT_CREDENTIAL_ROLES: &[&str] = &["creator", "executor", "proxy", "admin", "reader"];
/// The digest's spelling in the file.
const DIGEST_PREFIX: &str = "sha256:";
/// A client certificate's name's spelling in the file.
const CERTIFICATE_PREFIX: &str = "cert:";

/// How a caller proves it is this credential.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallerProof {
    /// A bearer secret, by its SHA-256.
    Secret([u8; 32]),
    /// A client certificate the service's client CA verified, by its first DNS name.
    Certificate(String),
}

/// A credentials file that does not parse: which line and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct CredentialsError {
    /// 1-based line number (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Which lock owners a credential may open sessions as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerRule {
    /// `*`: any owner.
    Any,
    /// `-`: none.
    Nobody,
    /// Owner ids, exact or a prefix ending in `*`.
    Listed(Vec<String>),
}

impl OwnerRule {
    /// Whether `owner` is one this credential may act as.
    pub fn allows(&self, owner: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Nobody => false,
            Self::Listed(patterns) => patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => owner.starts_with(prefix),
                None => owner == p,
            }),
        }
    }

    fn parse(field: &str) -> Result<Self, String> {
        match field {
            "*" => Ok(Self::Any),
            "-" => Ok(Self::Nobody),
            list => {
                let patterns: Vec<String> = list.split(',').map(str::to_owned).collect();
                for p in &patterns {
                    let bare = p.strip_suffix('*').unwrap_or(p);
                    if bare.is_empty() || bare.contains('*') {
                        return Err(format!(
                            "owners: {p:?} is not an owner id or a prefix ending in '*'"
                        ));
                    }
                }
                Ok(Self::Listed(patterns))
            }
        }
    }

    fn spelling(&self) -> String {
        match self {
            Self::Any => "*".into(),
            Self::Nobody => "-".into(),
            Self::Listed(p) => p.join(","),
        }
    }
}

/// A credential's own limits; `None` takes the service's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// Requests a second (`rps=`), sustained.
    pub requests_per_second: Option<u32>,
    /// Requests at once above the rate (`burst=`).
    pub burst: Option<u32>,
    /// Sessions open at once through one replica (`sessions=`).
    pub sessions: Option<u32>,
    /// Acquires waiting at once on one replica (`waiters=`).
    pub waiters: Option<u32>,
}

/// One caller of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialEntry {
    /// Its name, in every audit line and refusal.
    pub name: String,
    /// What it may do (the service's role names).
    pub roles: Vec<String>,
    /// Which lock owners it may open sessions as.
    pub owners: OwnerRule,
    /// SHA-256 of its secret.
    pub proof: CallerProof,
    /// Its own limits.
    pub limits: LimitOverrides,
}

impl CredentialEntry {
    /// A credential whose secret is given in the clear (a service's environment), with any
    /// owner and the default limits.
    pub fn from_secret(name: &str, roles: &[&str], secret: &str) -> Self {
        Self {
            name: name.to_owned(),
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            owners: OwnerRule::Any,
            proof: CallerProof::Secret(secret_sha256(secret)),
            limits: LimitOverrides::default(),
        }
    }

    /// Whether it has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// Its line in a credentials file.
    pub fn line(&self) -> String {
        let proof = match &self.proof {
            CallerProof::Secret(digest) => {
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                format!("{DIGEST_PREFIX}{hex}")
            }
            CallerProof::Certificate(name) => format!("{CERTIFICATE_PREFIX}{name}"),
        };
        let mut line = format!(
            "{} {} {} {proof}",
            self.name,
            self.roles.join(","),
            self.owners.spelling()
        );
        let l = &self.limits;
        for (key, value) in [
            ("rps", l.requests_per_second),
            ("burst", l.burst),
            ("sessions", l.sessions),
            ("waiters", l.waiters),
        ] {
            if let Some(v) = value {
                line.push_str(&format!(" {key}={v}"));
            }
        }
        line
    }
}

/// SHA-256 of a presented secret (surrounding whitespace is not part of it).
pub fn secret_sha256(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.trim().as_bytes()).into()
}

/// Parses a credentials file. Every role must be one of `known_roles`; names and secrets
/// must be unique (two names on one secret would make the caller ambiguous).
pub fn parse_credentials(
    text: &str,
    known_roles: &[&str],
) -> Result<Vec<CredentialEntry>, CredentialsError> {
    let mut entries: Vec<CredentialEntry> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let err = |message: String| CredentialsError { line, message };
        let entry = parse_line(content, known_roles).map_err(err)?;
        if entries.iter().any(|e| e.name == entry.name) {
            return Err(err(format!("{} is named twice", entry.name)));
        }
        if entries.iter().any(|e| e.proof == entry.proof) {
            return Err(err(format!(
                "{}'s secret or certificate is another credential's: each caller needs its own",
                entry.name
            )));
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn parse_line(content: &str, known_roles: &[&str]) -> Result<CredentialEntry, String> {
    let fields: Vec<&str> = content.split_whitespace().collect();
    let [name, roles, owners, secret, limits @ ..] = fields.as_slice() else {
        return Err(
            "expected: name roles owners sha256:<hex>|cert:<name> [rps=N burst=N sessions=N waiters=N]".into(),
        );
    };
    let name_ok = name.len() <= CREDENTIAL_NAME_MAX_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !name_ok {
        return Err(format!(
            "name {name:?}: 1-{CREDENTIAL_NAME_MAX_BYTES} of a-z, A-Z, 0-9, '-', '_', '.'"
        ));
    }
    let roles: Vec<String> = roles.split(',').map(str::to_owned).collect();
    if let Some(unknown) = roles.iter().find(|r| !known_roles.contains(&r.as_str())) {
        return Err(format!(
            "role {unknown:?} is not one of {}",
            known_roles.join(", ")
        ));
    }
    Ok(CredentialEntry {
        name: (*name).to_owned(),
        roles,
        owners: OwnerRule::parse(owners)?,
        proof: parse_proof(secret)?,
        limits: parse_limits(limits)?,
    })
}

fn parse_proof(field: &str) -> Result<CallerProof, String> {
    let Some(name) = field.strip_prefix(CERTIFICATE_PREFIX) else {
        return parse_digest(field).map(CallerProof::Secret);
    };
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
    if !valid {
        return Err(format!(
            "cert: {name:?} is not a DNS name (letters, digits, '-', '.')"
        ));
    }
    Ok(CallerProof::Certificate(name.to_ascii_lowercase()))
}

fn parse_digest(field: &str) -> Result<[u8; 32], String> {
    let refused = || {
        format!(
            "secret: expected {DIGEST_PREFIX} and 64 hex digits (lockctl credential writes it) or {CERTIFICATE_PREFIX}<name>, got {} characters",
            field.len()
        )
    };
    let hex = field.strip_prefix(DIGEST_PREFIX).ok_or_else(refused)?;
    if hex.len() != 64 {
        return Err(refused());
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or(""), 16)
            .map_err(|_| refused())?;
    }
    Ok(digest)
}

fn parse_limits(fields: &[&str]) -> Result<LimitOverrides, String> {
    let mut limits = LimitOverrides::default();
    for field in fields {
        let (key, value) = field.split_once('=').ok_or_else(|| {
            format!("{field:?}: expected rps=N, burst=N, sessions=N or waiters=N")
        })?;
        let value: u32 = value
            .parse()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| format!("{key}: {value:?} is not a whole number above 0"))?;
        let slot = match key {
            "rps" => &mut limits.requests_per_second,
            "burst" => &mut limits.burst,
            "sessions" => &mut limits.sessions,
            "waiters" => &mut limits.waiters,
            other => {
                return Err(format!(
                    "{other}: not a limit (rps, burst, sessions, waiters)"
                ));
            }
        };
        if slot.replace(value).is_some() {
            return Err(format!("{key} is given twice"));
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLES: &[&str] = &["client", "admin"];

    #[test]
    fn a_line_round_trips_and_its_secret_is_matched_by_digest_only() {
        let mut entry = CredentialEntry::from_secret("app-a", &["client"], "s3cret");
        entry.owners = OwnerRule::Listed(vec!["app-a".into(), "app-a-*".into()]);
        entry.limits.requests_per_second = Some(200);
        entry.limits.waiters = Some(5);
        let line = entry.line();
        assert!(
            line.starts_with("app-a client app-a,app-a-* sha256:"),
            "{line}"
        );
        assert!(line.ends_with(" rps=200 waiters=5"), "{line}");
        assert!(!line.contains("s3cret"));
        let parsed = parse_credentials(&format!("# callers\n\n{line}  # a comment\n"), ROLES);
        assert_eq!(parsed, Ok(vec![entry.clone()]));
        assert_eq!(entry.proof, CallerProof::Secret(secret_sha256(" s3cret\n")));
        assert_ne!(entry.proof, CallerProof::Secret(secret_sha256("s3cre")));
        let by_certificate = parse_credentials("app-b client app-b cert:App-B.clients", ROLES);
        let entry = &by_certificate.unwrap()[0];
        assert_eq!(
            entry.proof,
            CallerProof::Certificate("app-b.clients".into())
        );
        assert_eq!(entry.line(), "app-b client app-b cert:app-b.clients");
    }

    #[test]
    fn owners_are_exact_or_prefixes() {
        let rule = OwnerRule::parse("app-a,exec-*").unwrap();
        assert!(rule.allows("app-a"));
        assert!(rule.allows("exec-7"));
        assert!(!rule.allows("app-ab"), "an exact owner is no prefix");
        assert!(!rule.allows("app-b"));
        assert!(OwnerRule::Any.allows("anyone"));
        assert!(!OwnerRule::Nobody.allows("anyone"));
        for bad in ["*x", "a,,b", "a**", "x*y*"] {
            assert!(OwnerRule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let other = format!("sha256:{}", "cd".repeat(32));
        let cases = [
            ("a client *".to_owned(), 1, "expected: name roles owners"),
            (
                format!("a reader * {digest}"),
                1,
                "role \"reader\" is not one of client, admin",
            ),
            (
                "a client * sha256:abc".to_owned(),
                1,
                "secret: expected sha256:",
            ),
            (
                format!("a client * {}", "ab".repeat(32)),
                1,
                "secret: expected sha256:",
            ),
            (
                format!("a client * sha256:{}", "zz".repeat(32)),
                1,
                "secret: expected",
            ),
            (format!("a/b client * {digest}"), 1, "name \"a/b\""),
            (
                format!("a client * {digest} rps=0"),
                1,
                "rps: \"0\" is not a whole number",
            ),
            (
                format!("a client * {digest} rps=1 rps=2"),
                1,
                "rps is given twice",
            ),
            (
                format!("a client * {digest} speed=1"),
                1,
                "speed: not a limit",
            ),
            (
                format!("a client * {digest}\na admin - {other}"),
                2,
                "a is named twice",
            ),
            (
                format!("a client * {digest}\nb admin - {digest}"),
                2,
                "b's secret or certificate is another",
            ),
            (
                "a client * cert:x\nb admin - cert:X".to_owned(),
                2,
                "b's secret or certificate is another",
            ),
            (
                "a client * cert:".to_owned(),
                1,
                "cert: \"\" is not a DNS name",
            ),
            (
                "a client * cert:a_b".to_owned(),
                1,
                "cert: \"a_b\" is not a DNS name",
            ),
        ];
        for (text, line, wanted) in cases {
            let err = parse_credentials(&text, ROLES).unwrap_err();
            assert_eq!(err.line, line, "{text}: {err}");
            assert!(err.message.starts_with(wanted), "{text}: {err}");
        }
    }
}
