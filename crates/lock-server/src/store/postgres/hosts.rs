//! A `DATABASE_URL` naming several hosts, as libpq reads one:
//! `postgres://user@h1:p1,h2:p2/db?…` (sqlx reads a single host only). [`Hosts`] splits the
//! host list and keeps the rest of the URL, which sqlx reads once per host; it connects the
//! store to the first host that answers writable (`pg_is_in_recovery()` false and not
//! read-only: libpq's `target_session_attrs=read-write`). When a store call fails as
//! unavailable or read-only, it probes again, one probe at a time and at most every
//! [`REPROBE_EVERY_MS`], the current host first, until a host answers writable; a new host
//! takes both pools (`Pool::set_connect_options`), and a connection made before the switch is
//! closed when it is next taken from its pool instead of being used. A single-host URL is read
//! by sqlx as it is and never probed.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use lock_api::Throttle;
use lock_store::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool};

/// At most one probe of the hosts starts per this many milliseconds.
const REPROBE_EVERY_MS: u64 = 500;
/// Budget of one host's probe: connecting and one query.
const PROBE_TIMEOUT_MS: u64 = 1_000;
/// While no host answers writable, at most one log line per this many milliseconds.
const NO_WRITABLE_HOST_LOG_EVERY_MS: u64 = 5_000;
/// Whether the host takes no writes: a standby in recovery, or a database set read-only.
const READ_ONLY_QUERY: &str =
    "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool";

/// A `DATABASE_URL` that names no usable host list.
#[derive(Debug, thiserror::Error)]
pub(super) enum HostsError {
    /// Two commas in a row, or one at an end.
    #[error("DATABASE_URL names an empty host (host {0} of its list)")]
    EmptyHost(usize),
    /// A port that is not a number from 1 to 65535.
    #[error("DATABASE_URL host {0}: the port is not a number from 1 to 65535")]
    BadPort(String),
    /// A URL of one host that sqlx does not read, in sqlx's words (as before hosts were
    /// split).
    #[error("{0}")]
    Url(sqlx::Error),
    /// The URL rebuilt for one host of several is not one sqlx reads.
    #[error("DATABASE_URL host {host}: {reason}")]
    Options {
        /// `host:port`.
        host: String,
        /// sqlx's words.
        reason: String,
    },
}

impl From<HostsError> for StoreError {
    fn from(err: HostsError) -> Self {
        StoreError::Internal(err.to_string())
    }
}

/// One host of the list: what logs call it (never the password) and how to connect to it.
struct Target {
    label: String,
    options: PgConnectOptions,
}

/// The hosts of a `DATABASE_URL` and which of them the store's pools connect to.
pub(super) struct Hosts {
    targets: Vec<Target>,
    /// A setting of every request connection (none of the listeners').
    request_setting: Option<(&'static str, &'static str)>,
    current: AtomicUsize,
    /// The request pool and the listeners' pool, once made.
    pools: OnceLock<(PgPool, PgPool)>,
    /// When the pools last moved to another host: older connections are not used again.
    switched_at: Arc<Mutex<Option<Instant>>>,
    probing: AtomicBool,
    /// A store call was refused as read-only since the last probe: a connection made to the
    /// old host while a switch ran can outlive the switch, so the probe retires them all.
    read_only_seen: AtomicBool,
    last_probe: Mutex<Option<Instant>>,
    no_writable_log: Throttle,
}

impl Hosts {
    /// The hosts of `url`; every request connection gets `request_setting`.
    pub(super) fn parse(
        url: &str,
        request_setting: Option<(&'static str, &'static str)>,
    ) -> Result<Self, HostsError> {
        let hosts = split(url)?;
        let several = hosts.len() > 1;
        let targets = (hosts.into_iter())
            .map(|(label, url)| match PgConnectOptions::from_str(&url) {
                Ok(options) => Ok(Target { label, options }),
                Err(e) if several => Err(HostsError::Options {
                    host: label,
                    reason: e.to_string(),
                }),
                Err(e) => Err(HostsError::Url(e)),
            })
            .collect::<Result<Vec<_>, HostsError>>()?;
        Ok(Self {
            targets,
            request_setting,
            current: AtomicUsize::new(0),
            pools: OnceLock::new(),
            switched_at: Arc::default(),
            probing: AtomicBool::new(false),
            read_only_seen: AtomicBool::new(false),
            last_probe: Mutex::new(None),
            no_writable_log: Throttle::new(Duration::from_millis(NO_WRITABLE_HOST_LOG_EVERY_MS)),
        })
    }

    /// How many hosts the URL names.
    pub(super) fn count(&self) -> usize {
        self.targets.len()
    }

    /// The options of the requests' pool and of the listeners' pool: the one host's, or the
    /// first writable host's, in URL order.
    pub(super) async fn first_writable(
        &self,
    ) -> Result<(PgConnectOptions, PgConnectOptions), StoreError> {
        if self.targets.len() > 1 {
            let at = self.find_writable(0).await.map_err(|report| {
                StoreError::Unavailable(format!("no host of DATABASE_URL takes writes: {report}"))
            })?;
            tracing::info!(event = "store_host_chosen", host = %self.targets[at].label);
            self.current.store(at, Ordering::SeqCst);
        }
        let target = &self.targets[self.current.load(Ordering::SeqCst)];
        Ok((self.request_options(target), target.options.clone()))
    }

    /// `options` for a pool of this store: with several hosts, a connection made before the
    /// last switch is closed when taken, never used.
    pub(super) fn pool_options(&self, options: PgPoolOptions) -> PgPoolOptions {
        if self.targets.len() < 2 {
            return options;
        }
        let switched_at = self.switched_at.clone();
        options.before_acquire(move |_, meta| {
            let switched = *switched_at.lock().unwrap_or_else(PoisonError::into_inner);
            let stale = switched.is_some_and(|at| meta.age > at.elapsed());
            Box::pin(std::future::ready(Ok(!stale)))
        })
    }

    /// The pools a switch moves.
    pub(super) fn attach(&self, pool: &PgPool, listen_pool: &PgPool) {
        let _ = self.pools.set((pool.clone(), listen_pool.clone()));
    }

    /// Passes `err` on; an unavailable or read-only store starts a probe when none runs.
    pub(super) fn saw(self: &Arc<Self>, err: StoreError) -> StoreError {
        let store_failed = matches!(err, StoreError::Unavailable(_) | StoreError::NotLeader(_));
        if matches!(err, StoreError::NotLeader(_)) {
            self.read_only_seen.store(true, Ordering::SeqCst);
        }
        if store_failed && self.targets.len() > 1 && !self.probing.swap(true, Ordering::SeqCst) {
            tokio::spawn(reprobe(Arc::downgrade(self)));
        }
        err
    }

    fn request_options(&self, target: &Target) -> PgConnectOptions {
        match self.request_setting {
            Some(setting) => target.options.clone().options([setting]),
            None => target.options.clone(),
        }
    }

    /// How long until the next probe may start; marks it started then.
    fn next_probe_in(&self) -> Duration {
        let mut last = self
            .last_probe
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let at = last.map_or(now, |t| {
            now.max(t + Duration::from_millis(REPROBE_EVERY_MS))
        });
        *last = Some(at);
        at - now
    }

    /// The index of the first host that answers writable, `first` before the others (which
    /// follow in URL order); otherwise what each host answered.
    async fn find_writable(&self, first: usize) -> Result<usize, String> {
        let order = std::iter::once(first).chain((0..self.targets.len()).filter(|&i| i != first));
        let mut answers = Vec::new();
        for i in order {
            let target = &self.targets[i];
            match probe(&target.options).await {
                Ok(()) => return Ok(i),
                Err(why) => answers.push(format!("{}: {why}", target.label)),
            }
        }
        Err(answers.join("; "))
    }

    /// Points both pools at host `at`, if they are elsewhere. When they are there already but
    /// a call was refused as read-only meanwhile, a connection to the old host outlived the
    /// last switch (its connect began before it): every connection made so far is retired.
    fn use_host(&self, at: usize) {
        let read_only_seen = self.read_only_seen.swap(false, Ordering::SeqCst);
        let from = self.current.swap(at, Ordering::SeqCst);
        if from == at {
            if read_only_seen {
                self.retire_connections();
            }
            return;
        }
        if let Some((pool, listen_pool)) = self.pools.get() {
            pool.set_connect_options(self.request_options(&self.targets[at]));
            listen_pool.set_connect_options(self.targets[at].options.clone());
        }
        self.retire_connections();
        tracing::warn!(
            event = "store_host_switched",
            from = %self.targets[from].label,
            to = %self.targets[at].label,
            "the store's connections move to the host that takes writes"
        );
    }
}

/// Probes until a host answers writable, then moves the pools to it (if it is another).
/// Ends, too, when the store is gone.
async fn reprobe(hosts: Weak<Hosts>) {
    loop {
        let Some(wait) = hosts.upgrade().map(|h| h.next_probe_in()) else {
            return;
        };
        tokio::time::sleep(wait).await;
        let Some(hosts) = hosts.upgrade() else {
            return;
        };
        match hosts
            .find_writable(hosts.current.load(Ordering::SeqCst))
            .await
        {
            Ok(at) => {
                hosts.use_host(at);
                hosts.probing.store(false, Ordering::SeqCst);
                return;
            }
            Err(report) => {
                if let Some(suppressed) = hosts.no_writable_log.allow() {
                    tracing::warn!(event = "store_no_writable_host", suppressed, hosts = %report);
                }
            }
        }
    }
}

impl Hosts {
    /// Connections made before now are closed when next taken (after the options moved: one
    /// made before this instant may be to the old host).
    fn retire_connections(&self) {
        *self
            .switched_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }
}

/// `Ok` when the host at `options` answers and takes writes.
async fn probe(options: &PgConnectOptions) -> Result<(), String> {
    let check = async {
        let mut conn = PgConnection::connect_with(options).await?;
        let read_only: bool = sqlx::query_scalar(READ_ONLY_QUERY)
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        Ok::<_, sqlx::Error>(read_only)
    };
    match tokio::time::timeout(Duration::from_millis(PROBE_TIMEOUT_MS), check).await {
        Ok(Ok(false)) => Ok(()),
        Ok(Ok(true)) => Err("read-only".into()),
        Ok(Err(err)) => Err(err.to_string()),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT_MS} ms")),
    }
}

/// The hosts of `url`, each as `host:port` and as the URL with only that host: `url` itself
/// when it names one host (or is not a URL: sqlx judges it).
fn split(url: &str) -> Result<Vec<(String, String)>, HostsError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(vec![(String::new(), url.to_owned())]);
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    // The password may hold an `@` percent-encoded only; the hosts follow the last one.
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    if !hosts.contains(',') {
        return Ok(vec![(hosts.to_owned(), url.to_owned())]);
    }
    hosts
        .split(',')
        .enumerate()
        .map(|(i, host)| {
            check_host(i + 1, host)?;
            Ok((
                host.to_owned(),
                format!("{scheme}://{userinfo}{host}{tail}"),
            ))
        })
        .collect()
}

/// A host of the list: a name or address (IPv6 in brackets), then `:port` or nothing.
fn check_host(position: usize, host: &str) -> Result<(), HostsError> {
    let port = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((address, after)) if !address.is_empty() => after.strip_prefix(':'),
            _ => return Err(HostsError::EmptyHost(position)),
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if !name.is_empty() => Some(port),
            Some(_) => return Err(HostsError::EmptyHost(position)),
            None if host.is_empty() => return Err(HostsError::EmptyHost(position)),
            None => None,
        },
    };
    match port.map(str::parse::<u16>) {
        None | Some(Ok(1..)) => Ok(()),
        Some(_) => Err(HostsError::BadPort(host.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(url: &str) -> Vec<String> {
        split(url).unwrap().into_iter().map(|(_, u)| u).collect()
    }

    #[test]
    fn one_host_is_the_url_as_it_is() {
        for url in [
            "postgres://u:p@h:5432/db?sslmode=disable",
            "postgres://h/db",
            "postgresql://[::1]:5/db",
            "not a url",
        ] {
            assert_eq!(urls(url), vec![url.to_owned()]);
        }
    }

    #[test]
    fn several_hosts_make_one_url_each_and_keep_the_rest() {
        assert_eq!(
            split("postgres://u:p,w@a:1,[::1]:2,b/db?sslmode=disable&x=1,2").unwrap(),
            vec![
                (
                    "a:1".to_owned(),
                    "postgres://u:p,w@a:1/db?sslmode=disable&x=1,2".to_owned()
                ),
                (
                    "[::1]:2".to_owned(),
                    "postgres://u:p,w@[::1]:2/db?sslmode=disable&x=1,2".to_owned()
                ),
                (
                    "b".to_owned(),
                    "postgres://u:p,w@b/db?sslmode=disable&x=1,2".to_owned()
                ),
            ]
        );
        assert_eq!(
            urls("postgres://a:1,b:2"),
            vec!["postgres://a:1", "postgres://b:2"]
        );
    }

    #[test]
    fn a_bad_host_list_is_a_typed_error_naming_the_host() {
        for (url, expected) in [
            ("postgres://a:1,,b:2/db", "empty host (host 2 of its list)"),
            ("postgres://a:1,/db", "empty host (host 2 of its list)"),
            ("postgres://,a/db", "empty host (host 1 of its list)"),
            ("postgres://a,:5/db", "empty host (host 2 of its list)"),
            ("postgres://a,[]:5/db", "empty host (host 2 of its list)"),
            (
                "postgres://a:1,b:x/db",
                "host b:x: the port is not a number",
            ),
            (
                "postgres://a:1,b:0/db",
                "host b:0: the port is not a number",
            ),
            (
                "postgres://a:70000,b/db",
                "host a:70000: the port is not a number",
            ),
        ] {
            let err = split(url).expect_err(url).to_string();
            assert!(err.contains(expected), "{url}: {err}");
        }
        let err = Hosts::parse("postgres://a:1,b:2/db?sslmode=bogus", None)
            .err()
            .expect("sqlx refuses the options")
            .to_string();
        assert!(err.starts_with("DATABASE_URL host a:1: "), "{err}");
        // One host: sqlx's own words, as before hosts were split.
        let single = "postgres://a:1/db?sslmode=bogus";
        let sqlx_says = PgConnectOptions::from_str(single).expect_err("refused");
        let err = Hosts::parse(single, None).err().expect("refused");
        assert_eq!(
            StoreError::from(err).to_string(),
            StoreError::Internal(sqlx_says.to_string()).to_string()
        );
    }

    #[test]
    fn the_password_never_shows_in_an_error() {
        let err = Hosts::parse("postgres://u:secret@a:1,b:x/db", None)
            .err()
            .expect("a bad port")
            .to_string();
        assert!(!err.contains("secret"), "{err}");
    }
}
