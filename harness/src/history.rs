//! The recorded history of a fault campaign and its checker. The history is read back from
//! what the real processes wrote (the lock-servers' audit trail, every incarnation; the
//! executors' `write` and loss lines), what the rail recorded, and the nemesis's own log; the
//! checker then decides, without trusting any single process:
//!
//! - no double payment: each payout at the rail at most once (I1); tokens unique and rising per
//!   key, every accepted and rail token granted for its payout's key (I3); every declared loss
//!   before the server's expiry (I4); ambiguity is terminal: no accepted write to a payout
//!   after it went `RAIL_AMBIGUOUS` reached the rail again (it follows from the first check);
//! - fences only rise, with windows: no write was accepted whose token the resource had already
//!   superseded (a higher claim answered before the write was sent), so a paused executor whose
//!   grant expired and was taken over is refused and never reaches the rail (refusals are
//!   counted);
//! - mutual exclusion per key, in the spirit of Knossos' and Porcupine's mutex model: each
//!   grant took effect somewhere between its request and its log line, each end somewhere
//!   after its release was invoked or its expiry; a violation is a grant certainly inside the
//!   previous holder's interval (logged before that interval could have ended).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};

use crate::audit::{Audit, declared_losses, time};

/// The steps an executor's `write` line may name.
pub const WRITE_STEPS: [&str; 3] = ["claim", "submit", "post"];
/// The results an executor's `write` line may carry.
pub const WRITE_RESULTS: [&str; 5] = ["ok", "fenced", "terminal", "submitted", "error"];

/// Every line of a service's log, each a JSON object: anything else is an error, so a log
/// format that drifted makes the campaign fail instead of silently emptying its checks. The
/// one exception is the binary's own fatal line, `{binary}: {why}` (a process that could not
/// start, e.g. a replica restarted while its store restarts too), which says nothing the
/// checks read.
fn strict_lines(log: &str, whose: &str, binary: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let fatal = format!("{binary}: ");
    log.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with(&fatal))
        .map(|(n, l)| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .filter(serde_json::Value::is_object)
                .with_context(|| format!("{whose}'s log, line {}: not a JSON object: {l}", n + 1))
        })
        .collect()
}

fn required_i64(line: &serde_json::Value, field: &str) -> anyhow::Result<i64> {
    line[field]
        .as_i64()
        .with_context(|| format!("{field}: missing or not an integer in {line}"))
}

fn required_str<'a>(line: &'a serde_json::Value, field: &str) -> anyhow::Result<&'a str> {
    line[field]
        .as_str()
        .with_context(|| format!("{field}: missing or not a string in {line}"))
}

/// An executor's `write` line, every field required and known.
fn write_op(executor: &str, line: &serde_json::Value) -> anyhow::Result<WriteOp> {
    let step = required_str(line, "step")?;
    let result = required_str(line, "result")?;
    if !WRITE_STEPS.contains(&step) || !WRITE_RESULTS.contains(&result) {
        bail!("{executor}: a write line with an unknown step or result: {line}");
    }
    Ok(WriteOp {
        executor: executor.to_owned(),
        invoked_at: time(line, "invoked_at")?,
        at: time(line, "timestamp")?,
        payout_id: required_i64(line, "payout_id")?,
        step: step.to_owned(),
        token: required_i64(line, "token")?,
        result: result.to_owned(),
        deadline_at: time(line, "deadline_at")?,
    })
}

/// One write an executor made (its `write` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOp {
    /// The executor (owner).
    pub executor: String,
    /// When it was sent.
    pub invoked_at: DateTime<Utc>,
    /// When its answer was logged.
    pub at: DateTime<Utc>,
    /// The payout.
    pub payout_id: i64,
    /// `claim`, `submit` or `post`.
    pub step: String,
    /// The token presented.
    pub token: i64,
    /// `ok`, `fenced`, `terminal`, `submitted` or `error`.
    pub result: String,
    /// The grant's conservative deadline as the guard before the write saw it.
    pub deadline_at: DateTime<Utc>,
}

/// A grant's life as the lock-servers logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSpan {
    /// The key.
    pub key: String,
    /// Its token.
    pub token: i64,
    /// Its session.
    pub session: String,
    /// The session's owner (the executor).
    pub owner: String,
    /// When the grant was logged (after its transaction committed).
    pub granted_at: DateTime<Utc>,
    /// The earliest moment it can have ended: its server expiry, a release or a session close
    /// invoked for it.
    pub ended_at: DateTime<Utc>,
    /// Whether it ended by expiry (not released or closed first).
    pub expired: bool,
}

/// A fault the nemesis injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `pause`, `replica-kill`, `store-restart`, `store-stall`, `proxy-kill`, `rail-fault`.
    pub kind: &'static str,
    /// What it hit (an executor, a replica, ...).
    pub target: String,
    /// When it began.
    pub start: DateTime<Utc>,
    /// When it ended (the process continued or restarted).
    pub end: DateTime<Utc>,
}

/// A rail transfer: payout and presented token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailTransfer {
    /// The payout.
    pub payout_id: i64,
    /// The token presented.
    pub token: i64,
}

/// The whole history of a run.
#[derive(Debug, Default)]
pub struct History {
    /// The lock-servers' audit trail.
    pub audit: Audit,
    /// Grant spans per key, in token order.
    pub spans: BTreeMap<String, Vec<GrantSpan>>,
    /// Every executor write.
    pub writes: Vec<WriteOp>,
    /// Every transfer the rail received.
    pub rail: Vec<RailTransfer>,
    /// The nemesis's faults.
    pub faults: Vec<Fault>,
    /// Losses executors declared, by executor.
    pub losses: Vec<(String, crate::audit::DeclaredLoss)>,
    /// Endpoint rotations the executors' SDKs logged (failovers observed).
    pub failovers: usize,
}

impl History {
    /// Reads a history from the lock-servers' logs (every incarnation) and the executors'
    /// logs (by owner), plus the rail's transfers and the nemesis's faults.
    pub fn read(
        lock_logs: &[String],
        executor_logs: &[(String, String)],
        rail: Vec<RailTransfer>,
        faults: Vec<Fault>,
    ) -> anyhow::Result<Self> {
        let audit = Audit::from_logs(lock_logs.iter().map(String::as_str))?;
        let mut owners: BTreeMap<String, String> = BTreeMap::new();
        for (owner, sessions) in &audit.sessions_by_owner {
            for s in sessions {
                owners.insert(s.clone(), owner.clone());
            }
        }
        // Ends: releases and closes invoked, by (key, token) and by session.
        let mut released: BTreeMap<(String, i64), DateTime<Utc>> = BTreeMap::new();
        let mut closed: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
        for log in lock_logs {
            for line in strict_lines(log, "a lock-server", "lock-server")? {
                match line["event"].as_str() {
                    Some("lock_released") if line["released"] == true => {
                        let key = required_str(&line, "key")?.to_owned();
                        let token = required_i64(&line, "token")?;
                        let at = time(&line, "invoked_at")?;
                        let slot = released.entry((key, token)).or_insert(at);
                        *slot = (*slot).min(at);
                    }
                    Some("session_closed") => {
                        let session = required_str(&line, "session")?.to_owned();
                        closed.insert(session, time(&line, "invoked_at")?);
                    }
                    _ => {}
                }
            }
        }
        let mut spans: BTreeMap<String, Vec<GrantSpan>> = BTreeMap::new();
        let mut seen: BTreeSet<(String, i64)> = BTreeSet::new();
        for grant in &audit.grants {
            if !seen.insert((grant.key.clone(), grant.token)) {
                continue; // a same-session re-grant: one span
            }
            let expiry = audit
                .server_expiry(&grant.key, grant.token)
                .context("a grant without an expiry")?;
            let mut ended_at = expiry;
            let mut expired = true;
            for end in [
                released.get(&(grant.key.clone(), grant.token)).copied(),
                closed.get(&grant.session).copied(),
            ]
            .into_iter()
            .flatten()
            {
                if end < ended_at {
                    ended_at = end;
                    expired = false;
                }
            }
            spans.entry(grant.key.clone()).or_default().push(GrantSpan {
                key: grant.key.clone(),
                token: grant.token,
                session: grant.session.clone(),
                owner: owners.get(&grant.session).cloned().unwrap_or_default(),
                granted_at: grant.at,
                ended_at,
                expired,
            });
        }
        for list in spans.values_mut() {
            list.sort_by_key(|s| s.token);
        }
        let mut writes = Vec::new();
        let mut losses = Vec::new();
        let mut failovers = 0;
        for (executor, log) in executor_logs {
            for line in strict_lines(log, executor, "payout-executor")? {
                match line["event"].as_str() {
                    Some("write") => writes.push(write_op(executor, &line)?),
                    Some("endpoint_rotated") => failovers += 1,
                    Some(_) => {}
                    None => bail!("{executor}: a log line without an event: {line}"),
                }
            }
            for loss in declared_losses(log)? {
                losses.push((executor.clone(), loss));
            }
        }
        writes.sort_by_key(|w| w.at);
        Ok(Self {
            audit,
            spans,
            writes,
            rail,
            faults,
            losses,
            failovers,
        })
    }

    /// Every check; the first violation is the error. Returns the stale writes refused after
    /// a pause that outlived the lease.
    pub fn check(&self) -> anyhow::Result<Vec<WriteOp>> {
        self.check_each_payout_paid_once()?;
        self.check_tokens_granted()?;
        self.check_conservative_expiry()?;
        self.check_mutual_exclusion()?;
        self.check_fences_only_rise()?;
        Ok(self.refused_after_pauses())
    }

    /// No double payment (I1): each payout at the rail at most once.
    fn check_each_payout_paid_once(&self) -> anyhow::Result<()> {
        let mut per_payout: BTreeMap<i64, usize> = BTreeMap::new();
        for t in &self.rail {
            *per_payout.entry(t.payout_id).or_default() += 1;
        }
        if let Some((id, n)) = per_payout.iter().find(|(_, n)| **n > 1) {
            bail!("I1: the rail received payout {id} {n} times");
        }
        Ok(())
    }

    /// Tokens unique and rising per key (I3), and each token the rail saw or a write was
    /// accepted with granted for its payout's key.
    fn check_tokens_granted(&self) -> anyhow::Result<()> {
        self.audit.check_tokens()?;
        let granted = |payout: i64, token: i64| {
            self.audit
                .tokens(&format!("payout:{payout}"))
                .contains(&token)
        };
        for t in &self.rail {
            if !granted(t.payout_id, t.token) {
                bail!(
                    "I3: the rail saw payout {} with token {}, never granted for its key",
                    t.payout_id,
                    t.token
                );
            }
        }
        // The same for accepted writes (I3): each token was granted for its payout's key.
        for w in self.writes.iter().filter(|w| w.result == "ok") {
            if !granted(w.payout_id, w.token) {
                bail!(
                    "I3: {} wrote payout {} with token {}, never granted for its key",
                    w.executor,
                    w.payout_id,
                    w.token
                );
            }
        }
        Ok(())
    }

    /// Conservative expiry (I4) for every grant a write was made under: the deadline the
    /// guard before the write believed never lies after the lock-server's last expiry of that
    /// grant. (A write sent after the expiry is a zombie the fence must stop; a deadline after
    /// it is a client that believed too long.) And for every declared loss by a deadline or
    /// an expiry.
    fn check_conservative_expiry(&self) -> anyhow::Result<()> {
        for w in &self.writes {
            let key = format!("payout:{}", w.payout_id);
            let expiry = self.audit.server_expiry(&key, w.token).with_context(|| {
                format!(
                    "I4: {} wrote payout {} with token {}, never granted for its key",
                    w.executor, w.payout_id, w.token
                )
            })?;
            if w.deadline_at > expiry {
                bail!(
                    "I4: {}'s guard before its {} of payout {} believed token {} held until {}, after the lock-server's expiry ({expiry})",
                    w.executor,
                    w.step,
                    w.payout_id,
                    w.token,
                    w.deadline_at
                );
            }
        }
        let losses: Vec<_> = self.losses.iter().map(|(_, l)| l.clone()).collect();
        self.audit.check_conservative(&losses)?;
        Ok(())
    }

    /// Mutual exclusion per key: no grant before the previous holder's interval ended.
    fn check_mutual_exclusion(&self) -> anyhow::Result<()> {
        for (key, spans) in &self.spans {
            for pair in spans.windows(2) {
                let (a, b) = (&pair[0], &pair[1]);
                if b.granted_at < a.ended_at {
                    bail!(
                        "mutual exclusion: {key} token {} ({}) was granted at {} while token {} ({}) held it until at least {}",
                        b.token,
                        b.owner,
                        b.granted_at,
                        a.token,
                        a.owner,
                        a.ended_at
                    );
                }
            }
        }
        Ok(())
    }

    /// Fences only rise, checked with windows: no write was accepted whose token the resource
    /// had already superseded (a higher claim answered before the write was even sent).
    /// Ordering writes by their answers alone would be wrong: an answer can be logged seconds
    /// after the resource applied it (a paused executor, a stalled store).
    fn check_fences_only_rise(&self) -> anyhow::Result<()> {
        let claims: Vec<&WriteOp> = self
            .writes
            .iter()
            .filter(|w| w.step == "claim" && w.result == "ok")
            .collect();
        for w in self.writes.iter().filter(|w| w.result == "ok") {
            if let Some(c) = claims
                .iter()
                .find(|c| c.payout_id == w.payout_id && c.token > w.token && c.at < w.invoked_at)
            {
                bail!(
                    "{}'s {} of payout {} with token {} was accepted after {} had claimed it with token {}",
                    w.executor,
                    w.step,
                    w.payout_id,
                    w.token,
                    c.executor,
                    c.token
                );
            }
        }
        Ok(())
    }

    /// Writes after a pause that outlived the grant: refused ones are the zombie episodes.
    fn refused_after_pauses(&self) -> Vec<WriteOp> {
        let mut refused = Vec::new();
        for pause in self
            .faults
            .iter()
            .filter(|f| f.kind == "pause" || f.kind == "partition")
        {
            for span in self.spans.values().flatten().filter(|s| {
                s.owner == pause.target
                    && s.granted_at < pause.start
                    && s.expired
                    && s.ended_at < pause.end
            }) {
                let payout: i64 = span
                    .key
                    .strip_prefix("payout:")
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_default();
                refused.extend(
                    self.writes
                        .iter()
                        .filter(|w| {
                            w.executor == pause.target
                                && w.payout_id == payout
                                && w.token == span.token
                                && w.invoked_at >= pause.end
                                && w.result == "fenced"
                        })
                        .cloned(),
                );
            }
        }
        refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: [&str; 6] = [
        "2026-01-01T00:00:01Z",
        "2026-01-01T00:00:02Z",
        "2026-01-01T00:00:03Z",
        "2026-01-01T00:00:04Z",
        "2026-01-01T00:00:05Z",
        "2026-01-01T00:00:09Z",
    ];

    fn session(id: &str, owner: &str) -> String {
        format!(
            r#"{{"timestamp":"{}","event":"session_created","session":"{id}","owner":"{owner}","expires_at":"{}"}}"#,
            T[0], T[5]
        )
    }

    fn grant(at: &str, token: i64, session: &str, expires: &str) -> String {
        format!(
            r#"{{"timestamp":"{at}","event":"lock_granted","key":"payout:1","token":{token},"session":"{session}","grant":"g","lease_ms":2000,"expires_at":"{expires}"}}"#
        )
    }

    fn release(at: &str, token: i64) -> String {
        format!(
            r#"{{"timestamp":"{at}","event":"lock_released","key":"payout:1","token":{token},"released":true,"invoked_at":"{at}"}}"#
        )
    }

    fn write(executor: &str, at: &str, step: &str, token: i64, result: &str) -> (String, String) {
        (
            executor.to_owned(),
            format!(
                r#"{{"timestamp":"{at}","event":"write","payout_id":1,"step":"{step}","token":{token},"result":"{result}","invoked_at":"{at}","deadline_at":"{}"}}"#,
                T[0]
            ),
        )
    }

    fn history(lock: &[String], writes: Vec<(String, String)>, rail: Vec<RailTransfer>) -> History {
        let mut by_executor: BTreeMap<String, String> = BTreeMap::new();
        for (e, line) in writes {
            let log = by_executor.entry(e).or_default();
            log.push_str(&line);
            log.push('\n');
        }
        let logs: Vec<(String, String)> = by_executor.into_iter().collect();
        History::read(&[lock.join("\n")], &logs, rail, Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn good_lock_log() -> Vec<String> {
        vec![
            session("s1", "a"),
            session("s2", "b"),
            grant(T[0], 1, "s1", T[2]),
            release(T[1], 1),
            grant(T[2], 2, "s2", T[4]),
        ]
    }

    #[test]
    fn a_clean_history_passes() {
        let h = history(
            &good_lock_log(),
            vec![
                write("a", T[0], "claim", 1, "ok"),
                write("b", T[2], "claim", 2, "ok"),
                write("b", T[2], "submit", 2, "ok"),
                write("a", T[3], "submit", 1, "fenced"),
            ],
            vec![RailTransfer {
                payout_id: 1,
                token: 2,
            }],
        );
        assert!(h.check().is_ok(), "{:?}", h.check());
    }

    #[test]
    fn a_replica_that_could_not_start_leaves_its_fatal_line_and_nothing_else_passes() {
        let mut lock = good_lock_log();
        lock.push("lock-server: cannot open the store: terminating connection".to_owned());
        let read = |lock: &[String]| History::read(&[lock.join("\n")], &[], Vec::new(), Vec::new());
        assert!(read(&lock).is_ok(), "the binary's own fatal line");
        lock.push("payout-executor: another binary's line".to_owned());
        let err = read(&lock).map(|_| ()).expect_err("strict").to_string();
        assert!(err.contains("not a JSON object"), "{err}");
    }

    #[test]
    fn a_log_that_drifted_from_its_schema_fails_instead_of_going_blind() {
        let read = |executor_log: &str| {
            History::read(
                &[good_lock_log().join("\n")],
                &[("a".to_owned(), executor_log.to_owned())],
                Vec::new(),
                Vec::new(),
            )
            .map(|_| ())
        };
        let (_, good) = write("a", T[0], "claim", 1, "ok");
        assert!(read(&good).is_ok());
        for (bad, why) in [
            (good.replace(r#""token":1,"#, ""), "token"),
            (good.replace(r#""token":1"#, r#""token":"1""#), "token"),
            (
                good.replace(r#""payout_id":1"#, r#""payout":1"#),
                "payout_id",
            ),
            (
                good.replace(r#""result":"ok""#, r#""result":"accepted""#),
                "unknown",
            ),
            (
                good.replace(r#""step":"claim""#, r#""step":"reserve""#),
                "unknown",
            ),
            (good.replace(r#""event":"write","#, ""), "without an event"),
            (
                "thread 'main' panicked at src/main.rs:1:1".to_owned(),
                "not a JSON object",
            ),
        ] {
            let err = read(&bad).expect_err(&bad).to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_planted_double_submission_fails() {
        let h = history(
            &good_lock_log(),
            vec![write("a", T[0], "claim", 1, "ok")],
            vec![
                RailTransfer {
                    payout_id: 1,
                    token: 1,
                },
                RailTransfer {
                    payout_id: 1,
                    token: 2,
                },
            ],
        );
        let err = h.check().expect_err("two transfers of one payout");
        assert!(err.to_string().starts_with("I1"), "{err}");
    }

    #[test]
    fn a_planted_overlapping_grant_fails() {
        // Token 2 is granted at 00:00:02 while token 1 lives until 00:00:03 (no release).
        let lock = vec![
            session("s1", "a"),
            session("s2", "b"),
            grant(T[0], 1, "s1", T[2]),
            grant(T[1], 2, "s2", T[4]),
        ];
        let h = history(&lock, Vec::new(), Vec::new());
        let err = h.check().expect_err("overlapping grants");
        assert!(err.to_string().starts_with("mutual exclusion"), "{err}");
    }

    #[test]
    fn a_planted_non_rising_token_fails() {
        let lock = vec![
            session("s1", "a"),
            session("s2", "b"),
            grant(T[0], 2, "s1", T[1]),
            grant(T[2], 1, "s2", T[4]),
        ];
        let h = history(&lock, Vec::new(), Vec::new());
        let err = h.check().expect_err("a token below its predecessor");
        assert!(err.to_string().starts_with("I3"), "{err}");
    }

    #[test]
    fn a_claim_answered_late_but_applied_first_is_no_violation() {
        // Seen in a campaign: claim 2 was sent at 00:00:01 and answered at 00:00:04 (a stalled
        // store), claim 3 sent and answered at 00:00:03: claim 2 was applied first.
        let lock = vec![
            session("s1", "a"),
            session("s2", "b"),
            grant(T[0], 2, "s1", T[1]),
            grant(T[2], 3, "s2", T[4]),
        ];
        let late = (
            "a".to_owned(),
            format!(
                r#"{{"timestamp":"{}","event":"write","payout_id":1,"step":"claim","token":2,"result":"ok","invoked_at":"{}","deadline_at":"{}"}}"#,
                T[3], T[0], T[0]
            ),
        );
        let h = history(
            &lock,
            vec![late, write("b", T[2], "claim", 3, "ok")],
            Vec::new(),
        );
        assert!(h.check().is_ok(), "{:?}", h.check());
    }

    #[test]
    fn a_guard_that_believed_past_the_servers_expiry_fails_i4() {
        // Grant 1 expires at T[2]; the guard before executor a's submit believed it held
        // until T[3].
        let believed_too_long = (
            "a".to_owned(),
            format!(
                r#"{{"timestamp":"{}","event":"write","payout_id":1,"step":"submit","token":1,"result":"ok","invoked_at":"{}","deadline_at":"{}"}}"#,
                T[1], T[1], T[3]
            ),
        );
        let h = history(&good_lock_log(), vec![believed_too_long], Vec::new());
        let err = h
            .check()
            .expect_err("a deadline after the expiry")
            .to_string();
        assert!(err.starts_with("I4:"), "{err}");
    }

    #[test]
    fn a_superseded_write_that_was_accepted_fails() {
        let h = history(
            &good_lock_log(),
            vec![
                write("b", T[2], "claim", 2, "ok"),
                write("a", T[3], "submit", 1, "ok"),
            ],
            Vec::new(),
        );
        let err = h
            .check()
            .expect_err("a stale submit accepted after a higher claim");
        assert!(err.to_string().contains("was accepted after"), "{err}");
    }
}
