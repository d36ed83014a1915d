//! Two invariants, unique rising tokens and conservative expiry, from the services' logs: the
//! lock-server's audit trail (every grant, renewal, release and session event with the store's
//! own `expires_at`) and the SDK's loss lines in the executors' logs (`session_lost` /
//! `lease_expired` with `deadline_offset_ms`).
//!
//! - Tokens (I3): per key, tokens strictly rise in grant order and no token is granted to two
//!   sessions; every token a payout's fence, submission or rail transfer carries was granted
//!   for that payout's key.
//! - Conservative expiry (I4): every loss a client declared by its own deadline lies before the
//!   server's expiry of that grant (the earlier of the grant's and its session's last
//!   `expires_at`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context, bail};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde_json::Value;

/// One grant as the lock-server logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// When it was logged.
    pub at: DateTime<Utc>,
    /// The key.
    pub key: String,
    /// Its token.
    pub token: i64,
    /// The holder's session (its tag).
    pub session: String,
    /// The grant id its proofs name (`GrantId::as_text`).
    pub grant: String,
}

/// A loss a client declared (the SDK's `session_lost` / `lease_expired` line): of one
/// grant, or of a session that held nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredLoss {
    /// The session.
    pub session: String,
    /// The lost grant's key and token; `None` for a session that held nothing.
    pub grant: Option<(String, i64)>,
    /// The SDK's reason (`deadline_passed`, `renew_refused`, ...).
    pub reason: String,
    /// The conservative deadline in wall time (log time minus `deadline_offset_ms`).
    pub deadline: DateTime<Utc>,
}

/// The lock-server's audit trail, merged over replicas.
#[derive(Debug, Default)]
pub struct Audit {
    /// Every grant, in log order per replica, then sorted by time.
    pub grants: Vec<Grant>,
    /// Latest `expires_at` per (key, token), from grants and renewals.
    grant_expiry: HashMap<(String, i64), DateTime<Utc>>,
    /// Latest `expires_at` per session, from creation and extensions.
    session_expiry: HashMap<String, DateTime<Utc>>,
    /// Sessions by owner, in creation order.
    pub sessions_by_owner: BTreeMap<String, Vec<String>>,
    /// Sessions closed by their owners.
    pub closed: BTreeSet<String>,
}

/// The JSON lines of a log (other lines skipped).
pub(crate) fn lines(log: &str) -> impl Iterator<Item = Value> + '_ {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
}

/// An RFC 3339 field of a log line.
pub(crate) fn time(line: &Value, field: &str) -> anyhow::Result<DateTime<Utc>> {
    let text = line[field]
        .as_str()
        .with_context(|| format!("{field} missing in {line}"))?;
    Ok(DateTime::parse_from_rfc3339(text)
        .with_context(|| format!("{field} of {line}"))?
        .with_timezone(&Utc))
}

fn text(line: &Value, field: &str) -> anyhow::Result<String> {
    line[field]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("{field} missing in {line}"))
}

fn int(line: &Value, field: &str) -> anyhow::Result<i64> {
    line[field]
        .as_i64()
        .with_context(|| format!("{field} missing in {line}"))
}

impl Audit {
    /// Reads the logs of every lock-server replica.
    pub fn from_logs<'a>(logs: impl IntoIterator<Item = &'a str>) -> anyhow::Result<Self> {
        let mut audit = Self::default();
        for log in logs {
            for line in lines(log) {
                match line["event"].as_str() {
                    Some("lock_granted") | Some("lock_renewed") => {
                        let key = text(&line, "key")?;
                        let token = int(&line, "token")?;
                        let expires = time(&line, "expires_at")?;
                        let slot = audit
                            .grant_expiry
                            .entry((key.clone(), token))
                            .or_insert(expires);
                        *slot = (*slot).max(expires);
                        if line["event"] == "lock_granted" {
                            audit.grants.push(Grant {
                                at: time(&line, "timestamp")?,
                                key,
                                token,
                                session: text(&line, "session")?,
                                grant: text(&line, "grant")?,
                            });
                        }
                    }
                    Some("session_created") | Some("session_extended") => {
                        let session = text(&line, "session")?;
                        let expires = time(&line, "expires_at")?;
                        if line["event"] == "session_created" {
                            audit
                                .sessions_by_owner
                                .entry(text(&line, "owner")?)
                                .or_default()
                                .push(session.clone());
                        }
                        let slot = audit.session_expiry.entry(session).or_insert(expires);
                        *slot = (*slot).max(expires);
                    }
                    Some("session_closed") => {
                        audit.closed.insert(text(&line, "session")?);
                    }
                    _ => {}
                }
            }
        }
        audit.grants.sort_by_key(|g| g.at);
        Ok(audit)
    }

    /// Tokens granted for `key`.
    pub fn tokens(&self, key: &str) -> BTreeSet<i64> {
        self.grants
            .iter()
            .filter(|g| g.key == key)
            .map(|g| g.token)
            .collect()
    }

    /// The token check (I3) over every key: tokens strictly rise in grant order (a
    /// same-session re-grant repeats its token), and no token goes to two sessions.
    pub fn check_tokens(&self) -> anyhow::Result<()> {
        let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
        for grant in &self.grants {
            by_key.entry(&grant.key).or_default().push(grant);
        }
        for (key, grants) in by_key {
            let mut owner: HashMap<i64, &str> = HashMap::new();
            let mut last: Option<i64> = None;
            for grant in grants {
                match owner.get(&grant.token) {
                    Some(session) if *session != grant.session => bail!(
                        "I3: {key} token {} granted to two sessions ({session} and {})",
                        grant.token,
                        grant.session
                    ),
                    Some(_) => continue, // a re-grant to the same session
                    None => {}
                }
                if let Some(previous) = last
                    && grant.token <= previous
                {
                    bail!(
                        "I3: {key} granted token {} after token {previous}",
                        grant.token
                    );
                }
                owner.insert(grant.token, &grant.session);
                last = Some(grant.token);
            }
        }
        Ok(())
    }

    /// The server's expiry of `key`'s grant `token`: the earlier of the grant's and its
    /// session's latest `expires_at`.
    pub fn server_expiry(&self, key: &str, token: i64) -> Option<DateTime<Utc>> {
        let grant = self
            .grants
            .iter()
            .find(|g| g.key == key && g.token == token)?;
        let lease = *self.grant_expiry.get(&(key.to_owned(), token))?;
        let session = *self.session_expiry.get(&grant.session)?;
        Some(lease.min(session))
    }

    /// Conservative expiry (I4): for every loss in `losses` by a deadline or an expiry, the
    /// client's deadline lies before the server's expiry of that grant (or of that session,
    /// when it held nothing). Returns how many losses it checked.
    pub fn check_conservative(&self, losses: &[DeclaredLoss]) -> anyhow::Result<usize> {
        let mut checked = 0;
        // A loss by the client's own deadline, or one the server reported as an expiry: either
        // way the client's deadline must lie before the server's expiry. (Other reasons —
        // a revoke, a closed session — end a grant before any expiry.)
        for loss in losses
            .iter()
            .filter(|l| matches!(l.reason.as_str(), "deadline_passed" | "session_expired"))
        {
            let expiry = match &loss.grant {
                Some((key, token)) => self.server_expiry(key, *token).with_context(|| {
                    format!("I4: {key} token {token} was declared lost but the lock-server never granted it")
                })?,
                None => *self.session_expiry.get(&loss.session).with_context(|| {
                    format!(
                        "I4: session {} was declared lost but the lock-server never created it",
                        loss.session
                    )
                })?,
            };
            if loss.deadline >= expiry {
                bail!(
                    "I4: the client's deadline for {loss:?} is not before the server's expiry ({expiry})"
                );
            }
            checked += 1;
        }
        Ok(checked)
    }
}

/// The losses the SDK declared in an executor's log.
pub fn declared_losses(log: &str) -> anyhow::Result<Vec<DeclaredLoss>> {
    let mut losses = Vec::new();
    for line in lines(log) {
        if !matches!(
            line["event"].as_str(),
            Some("session_lost") | Some("lease_expired")
        ) {
            continue;
        }
        let offset = int(&line, "deadline_offset_ms")?;
        let grant = if line["key"].is_null() {
            None
        } else {
            Some((text(&line, "key")?, int(&line, "token")?))
        };
        losses.push(DeclaredLoss {
            session: text(&line, "session")?,
            grant,
            reason: text(&line, "reason")?,
            deadline: time(&line, "timestamp")? - ChronoDuration::milliseconds(offset),
        });
    }
    Ok(losses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(at: &str, key: &str, token: i64, session: &str, expires: &str) -> String {
        format!(
            r#"{{"timestamp":"{at}","event":"lock_granted","key":"{key}","token":{token},"session":"{session}","grant":"g","expires_at":"{expires}"}}"#
        )
    }

    fn session(event: &str, id: &str, expires: &str) -> String {
        format!(
            r#"{{"timestamp":"2026-01-01T00:00:00Z","event":"{event}","session":"{id}","owner":"w","expires_at":"{expires}"}}"#
        )
    }

    fn loss(at: &str, key: &str, token: i64, offset_ms: i64) -> String {
        format!(
            r#"{{"timestamp":"{at}","event":"session_lost","session":"s1","key":"{key}","token":{token},"reason":"deadline_passed","deadline_offset_ms":{offset_ms}}}"#
        )
    }

    fn audit(lines: &[String]) -> Audit {
        Audit::from_logs([lines.join("\n").as_str()]).unwrap_or_else(|e| panic!("{e}"))
    }

    const T0: &str = "2026-01-01T00:00:01Z";
    const T1: &str = "2026-01-01T00:00:02Z";
    const EXP: &str = "2026-01-01T00:00:10Z";

    #[test]
    fn rising_tokens_and_same_session_regrants_pass() {
        let a = audit(&[
            session("session_created", "s1", EXP),
            grant(T0, "k", 1, "s1", EXP),
            grant(T0, "k", 1, "s1", EXP),
            grant(T1, "k", 2, "s2", EXP),
        ]);
        assert!(a.check_tokens().is_ok());
        assert_eq!(a.tokens("k"), BTreeSet::from([1, 2]));
        assert_eq!(a.sessions_by_owner["w"], vec!["s1".to_owned()]);
    }

    #[test]
    fn a_planted_non_rising_token_fails_i3() {
        let a = audit(&[grant(T0, "k", 2, "s1", EXP), grant(T1, "k", 1, "s2", EXP)]);
        assert!(a.check_tokens().is_err());
    }

    #[test]
    fn a_planted_token_granted_twice_fails_i3() {
        let a = audit(&[grant(T0, "k", 1, "s1", EXP), grant(T1, "k", 1, "s2", EXP)]);
        assert!(a.check_tokens().is_err());
    }

    #[test]
    fn a_deadline_after_the_server_expiry_fails_i4() {
        let a = audit(&[
            session("session_created", "s1", "2026-01-01T00:00:05Z"),
            grant(T0, "k", 1, "s1", EXP),
        ]);
        // Session expiry 00:00:05 bounds the grant (lease until 00:00:10).
        assert_eq!(
            a.server_expiry("k", 1),
            Some(
                "2026-01-01T00:00:05Z"
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}"))
            )
        );
        let before = declared_losses(&loss("2026-01-01T00:00:09Z", "k", 1, 5_000))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a.check_conservative(&before).ok(), Some(1));
        let after = declared_losses(&loss("2026-01-01T00:00:09Z", "k", 1, 3_000))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            a.check_conservative(&after).is_err(),
            "deadline 00:00:06 > 00:00:05"
        );
        let unknown = declared_losses(&loss(T1, "k", 9, 0)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            a.check_conservative(&unknown).is_err(),
            "a token never granted"
        );
        let session_only = r#"{"timestamp":"2026-01-01T00:00:09Z","event":"session_lost","session":"s1","reason":"deadline_passed","deadline_offset_ms":3000}"#;
        let losses = declared_losses(session_only).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(losses[0].grant, None);
        assert!(
            a.check_conservative(&losses).is_err(),
            "the session's deadline too"
        );
        // The server said "expired" while the client's own deadline was still 1 s ahead.
        let told = r#"{"timestamp":"2026-01-01T00:00:09Z","event":"session_lost","session":"s1","reason":"session_expired","deadline_offset_ms":-1000}"#;
        let losses = declared_losses(told).unwrap_or_else(|e| panic!("{e}"));
        assert!(a.check_conservative(&losses).is_err(), "{losses:?}");
    }
}
