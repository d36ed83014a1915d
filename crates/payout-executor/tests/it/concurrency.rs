//! `EXECUTOR_CONCURRENCY` on the real executor loop: the SDK's real client on a manual fake
//! clock over the in-memory lock service (as `Rig` builds it, with leases long enough that the
//! hop budget, the submit's own timeout, outlasts every poll), and a fake payment-resource and
//! rail-proxy whose submit holds every request at a gate the test opens. What is observed is
//! the number of submits held at the gate at once (each under its own grant of the one
//! session), never a duration: with the key at N, N payouts are in flight together and never
//! more; if the loop ran one payout at a time, the poll for N in flight runs into its deadline.
//! On the same loop, each write's headroom (`payout_write_headroom_seconds`) as its guard saw it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use lock_api::{LockKey, LossReason};
use lock_client::LockClient;
use lock_client::metrics::GUARD_HEADROOM_SECONDS;
use lock_client::test_util::FakeClock;
use lock_client::test_util::{MemoryTransport, RIG_START_NANOS};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use payout_executor::guard::{WRITE_HEADROOM_SECONDS, WRITE_STEPS};
use payout_executor::{Config, Executor};
use serde_json::{Value, json};

use crate::loss::{events, logs};

/// Session TTL and lease: 63 s usable at the default margin of 0.30.
const LEASE: Duration = Duration::from_secs(90);
/// The submit's timeout (the hop budget), longer than any poll: a submit held at the gate is
/// never given up while a test looks. 30 s × 1.3 fits what a 90 s lease leaves after a tick.
const HOP_BUDGET: &str = "30s";
/// The heartbeat period: the clock only moves when a test moves it, so the heartbeat stays
/// out of the way until then. One period on, a grant has 33 s left, under two periods: the
/// tick renews it.
const PERIOD: Duration = Duration::from_secs(30);
/// How long a poll waits for what it expects before the test fails.
const DEADLINE: Duration = Duration::from_secs(20);
/// How often a poll looks.
const POLL: Duration = Duration::from_millis(5);

/// Polls `what` until it answers `Some`, or panics naming `waiting_for` after [`DEADLINE`].
async fn poll<T>(waiting_for: &str, mut what: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = what() {
            return found;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "no {waiting_for} within {DEADLINE:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// payment-resource and rail-proxy in one: offers, P2, submit (held at the
/// gate), P3; what the executor did, in order.
#[derive(Debug)]
struct Fake {
    states: Mutex<BTreeMap<i64, &'static str>>,
    claims: Mutex<Vec<i64>>,
    submits: Mutex<Vec<i64>>,
    posts: Mutex<Vec<i64>>,
    /// Claims held before they are answered, while closed (open unless a test closes it).
    claim_gate: tokio::sync::watch::Sender<bool>,
    /// Submits held at the gate now, and the most ever held at once.
    held: AtomicUsize,
    most_held: AtomicUsize,
    gate: tokio::sync::watch::Sender<bool>,
}

impl Fake {
    fn new(ids: impl IntoIterator<Item = i64>) -> Arc<Self> {
        Arc::new(Self {
            states: Mutex::new(ids.into_iter().map(|id| (id, "PENDING")).collect()),
            claims: Mutex::default(),
            submits: Mutex::default(),
            posts: Mutex::default(),
            claim_gate: tokio::sync::watch::channel(true).0,
            held: AtomicUsize::new(0),
            most_held: AtomicUsize::new(0),
            gate: tokio::sync::watch::channel(false).0,
        })
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    fn claims(&self) -> Vec<i64> {
        self.claims.lock().unwrap().clone()
    }

    fn posts(&self) -> Vec<i64> {
        self.posts.lock().unwrap().clone()
    }

    fn submits(&self) -> Vec<i64> {
        self.submits.lock().unwrap().clone()
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    fn set(&self, id: i64, state: &'static str) -> Json<Value> {
        self.states.lock().unwrap().insert(id, state);
        Json(json!({ "payout_id": id, "state": state }))
    }

    /// Serves on a loopback port; returns its base URL.
    async fn serve(self: &Arc<Self>) -> String {
        #[derive(serde::Deserialize)]
        struct OfferAsk {
            limit: usize,
        }
        /// The offers of one executor: its pending payouts, oldest first (nobody else asks).
        async fn offers(State(fake): State<Arc<Fake>>, Json(ask): Json<OfferAsk>) -> Json<Value> {
            let states = fake.states.lock().unwrap();
            let open: Vec<Value> = states
                .iter()
                // Only unclaimed ones: a payout abandoned mid-attempt is not retried here.
                .filter(|(_, state)| **state == "PENDING")
                .take(ask.limit)
                .map(|(id, state)| json!({ "payout_id": id, "state": state }))
                .collect();
            Json(Value::Array(open))
        }
        async fn claim(State(fake): State<Arc<Fake>>, Path(id): Path<i64>) -> Json<Value> {
            fake.claims.lock().unwrap().push(id);
            let answer = fake.set(id, "CLAIMED");
            let mut gate = fake.claim_gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            answer
        }
        /// Counts a submit held at the gate until it is answered or its caller goes away.
        struct Held(Arc<Fake>);
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.held.fetch_sub(1, Ordering::SeqCst);
            }
        }
        async fn submit(State(fake): State<Arc<Fake>>, Path(id): Path<i64>) -> Json<Value> {
            fake.submits.lock().unwrap().push(id);
            let now = fake.held.fetch_add(1, Ordering::SeqCst) + 1;
            let held = Held(fake.clone());
            fake.most_held.fetch_max(now, Ordering::SeqCst);
            let _ = fake.set(id, "SUBMITTED");
            let mut gate = fake.gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            drop(held);
            Json(json!({ "payout_id": id, "outcome": "ACKED" }))
        }
        async fn post_outcome(State(fake): State<Arc<Fake>>, Path(id): Path<i64>) -> Json<Value> {
            fake.posts.lock().unwrap().push(id);
            fake.set(id, "SETTLED")
        }
        let router = Router::new()
            .route("/v1/offers", post(offers))
            .route("/v1/payouts/{id}/claim", post(claim))
            .route("/v1/payouts/{id}/submit", post(submit))
            .route("/v1/payouts/{id}/post", post(post_outcome))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        url
    }
}

/// An executor's loop, running until `stop` says so.
struct Running {
    executor: Arc<Executor>,
    stop: tokio::sync::watch::Sender<bool>,
    loop_task: tokio::task::JoinHandle<()>,
}

/// An executor over a real client on a fake clock and the in-memory lock service, and the
/// fake services at `url`, with `concurrency` (the default when `None`).
async fn start(url: &str, concurrency: Option<u32>) -> (Running, RigParts) {
    let clock = FakeClock::new(RIG_START_NANOS);
    let service = Arc::new(MemoryTransport::new());
    let client = LockClient::builder(["http://replica-a", "http://replica-b"])
        // The fake services speak plain HTTP on loopback, said so.
        .tls(lock_client::ClientTls::plaintext())
        .session_ttl(LEASE)
        .default_ttl(LEASE)
        .heartbeat_period(PERIOD)
        .build_with(Arc::new(clock.clone()), service.clone(), service.clone())
        .unwrap();
    let mut args = vec![
        "payout-executor".to_owned(),
        "--executor-id".into(),
        "executor-c".into(),
        "--payment-url".into(),
        url.to_owned(),
        "--rail-proxy-url".into(),
        url.to_owned(),
        "--poll-interval".into(),
        "10ms".into(),
        "--rail.hop-budget".into(),
        HOP_BUDGET.into(),
    ];
    if let Some(n) = concurrency {
        args.extend(["--concurrency".into(), n.to_string()]);
    }
    let config = Config::try_parse_from(args).unwrap();
    let executor = Arc::new(Executor::with_client(config, client).await.unwrap());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let loop_task = tokio::spawn({
        let executor = executor.clone();
        async move { executor.run(stopped).await }
    });
    (
        Running {
            executor,
            stop,
            loop_task,
        },
        RigParts { clock, service },
    )
}

/// The lock side the test drives and reads: the client's clock and the lock service.
struct RigParts {
    clock: FakeClock,
    service: Arc<MemoryTransport>,
}

impl Running {
    /// Stops the loop, waits for it (it finishes the attempts in flight), closes the session.
    async fn stop(self) {
        self.stop.send_replace(true);
        tokio::time::timeout(DEADLINE, self.loop_task)
            .await
            .expect("the loop returns once its attempts in flight finished")
            .unwrap();
        self.executor.shutdown().await;
    }
}

fn key(id: i64) -> LockKey {
    LockKey::parse(format!("payout:{id}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_number_of_payouts_are_in_flight_at_once_in_one_session_and_no_more() {
    let ids: Vec<i64> = (101..=112).collect();
    let fake = Fake::new(ids.iter().copied());
    let url = fake.serve().await;
    let (running, rig) = start(&url, Some(4)).await;

    poll("4 submits held at the gate at once", || {
        (fake.held() >= 4).then_some(())
    })
    .await;
    // Nothing can finish while the gate is closed, so no fifth attempt may have started.
    assert_eq!(fake.held(), 4, "never more than 4 at once");
    assert_eq!(fake.claims().len(), 4, "claims: {:?}", fake.claims());
    let holders: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| rig.service.holder(&key(*id)).is_some())
        .collect();
    assert_eq!(holders.len(), 4, "each in-flight payout under its own lock");
    assert_eq!(
        rig.service.count("create_session"),
        1,
        "one lock session for the process"
    );

    fake.open_gate();
    poll("every payout posted", || {
        (fake.posts().len() == ids.len()).then_some(())
    })
    .await;
    running.stop().await;
    let mut posted = fake.posts();
    posted.sort_unstable();
    assert_eq!(posted, ids, "each payout posted once");
    assert_eq!(
        fake.most_held.load(Ordering::SeqCst),
        4,
        "never more than 4 at once"
    );
    assert_eq!(rig.service.count("create_session"), 1, "still one session");
    assert_eq!(rig.service.count("delete_session"), 1, "closed at shutdown");
    for id in &ids {
        assert_eq!(rig.service.holder(&key(*id)), None, "payout:{id} released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_one_payout_is_in_flight_at_a_time() {
    let ids: Vec<i64> = (201..=203).collect();
    let fake = Fake::new(ids.iter().copied());
    let url = fake.serve().await;
    let (running, rig) = start(&url, None).await;
    poll("a submit held at the gate", || {
        (fake.held() >= 1).then_some(())
    })
    .await;
    assert_eq!(fake.held(), 1, "one attempt at a time by default");
    assert_eq!(fake.claims().len(), 1, "claims: {:?}", fake.claims());
    fake.open_gate();
    poll("every payout posted", || {
        (fake.posts().len() == ids.len()).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(fake.most_held.load(Ordering::SeqCst), 1);
    assert_eq!(rig.service.count("create_session"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_payouts_in_flight_finish_and_starts_no_more() {
    let ids: Vec<i64> = (301..=306).collect();
    let fake = Fake::new(ids.iter().copied());
    let url = fake.serve().await;
    let (running, rig) = start(&url, Some(3)).await;
    poll("3 submits held at the gate at once", || {
        (fake.held() >= 3).then_some(())
    })
    .await;
    assert_eq!(fake.held(), 3, "never more than 3 at once");
    let in_flight = fake.claims();
    // The stop lands while three payouts are held mid-submit; then the rail answers.
    running.stop.send_replace(true);
    fake.open_gate();
    running.stop().await;
    let mut posted = fake.posts();
    posted.sort_unstable();
    let mut expected = in_flight.clone();
    expected.sort_unstable();
    assert_eq!(posted, expected, "the three in flight were finished");
    assert_eq!(
        fake.claims(),
        in_flight,
        "no attempt started after the stop"
    );
    for id in &ids {
        assert_eq!(rig.service.holder(&key(*id)), None, "payout:{id} released");
    }
    assert_eq!(rig.service.count("delete_session"), 1, "session closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_grant_stops_its_own_payout_and_leaves_the_others_in_flight_alone() {
    let ids = [401_i64, 402];
    let fake = Fake::new(ids);
    let url = fake.serve().await;
    logs();
    let (running, rig) = start(&url, Some(2)).await;
    poll("both submits held at the gate", || {
        (fake.held() >= 2).then_some(())
    })
    .await;
    let (lost, kept) = (ids[0], ids[1]);
    // Mid-submit, the lock service drops one grant (an admin revoke); the next tick, a period
    // on, renews both grants: that one's renewal is refused and the SDK delivers the loss.
    rig.service.revoke(&key(lost));
    rig.clock.advance(PERIOD);
    poll("the listener to abandon the revoked payout", || {
        events("payout_abandoned")
            .iter()
            .any(|l| l["payout_id"] == lost && l["reason"] == LossReason::RenewRefused.as_str())
            .then_some(())
    })
    .await;
    fake.open_gate();
    poll("the kept payout posted", || {
        (fake.posts() == [kept]).then_some(())
    })
    .await;
    let outcome = |id: i64| {
        poll("the attempt's outcome", move || {
            events("payout_attempted")
                .into_iter()
                .find(|l| l["payout_id"] == id)
                .map(|l| l["outcome"].as_str().unwrap_or_default().to_owned())
        })
    };
    assert_eq!(outcome(lost).await, "lost", "no write after the loss");
    assert_eq!(outcome(kept).await, "acked", "its neighbour carried on");
    assert!(
        !fake.posts().contains(&lost),
        "the lost payout was never posted by this worker"
    );
    poll("the kept payout released", || {
        rig.service.holder(&key(kept)).is_none().then_some(())
    })
    .await;
    running.stop().await;
}

/// A loss the SDK makes known while a write is on its way stops every later write of that
/// payout, counted where the executor sends them (the fake services take every request and
/// refuse none, so a write the executor attempts after the loss is seen, not fenced). For the
/// claim: no submit, no post; for the submit: no post. The lock service drops the grant while
/// the write is held (an admin revoke); the next tick's renewal is refused and the listener
/// abandons the payout; then the held write is answered.
async fn a_loss_known_during(step: &str) {
    let id = if step == "claim" { 601 } else { 602 };
    let fake = Fake::new([id]);
    if step == "claim" {
        fake.claim_gate.send_replace(false);
    }
    let url = fake.serve().await;
    logs();
    let (running, rig) = start(&url, None).await;
    poll(&format!("the {step} held"), || match step {
        "claim" => (fake.claims() == [id]).then_some(()),
        _ => (fake.held() == 1).then_some(()),
    })
    .await;
    rig.service.revoke(&key(id));
    rig.clock.advance(PERIOD);
    poll("the listener to abandon the payout", || {
        events("payout_abandoned")
            .iter()
            .any(|l| l["payout_id"] == id)
            .then_some(())
    })
    .await;
    fake.claim_gate.send_replace(true);
    fake.open_gate();
    let outcome = poll("the attempt's outcome", || {
        events("payout_attempted")
            .into_iter()
            .find(|l| l["payout_id"] == id)
            .map(|l| l["outcome"].as_str().unwrap_or_default().to_owned())
    })
    .await;
    running.stop().await;
    assert_eq!(outcome, "lost", "{step}: the attempt ends lost");
    let later_writes = match step {
        "claim" => [fake.submits(), fake.posts()].concat(),
        _ => fake.posts(),
    };
    assert!(
        later_writes.is_empty(),
        "{step}: the executor wrote {later_writes:?} after the loss was known"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_known_during_the_claim_stops_the_submit_and_the_post() {
    a_loss_known_during("claim").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_known_during_the_submit_stops_the_post() {
    a_loss_known_during("submit").await;
}

/// The value of the sample line `name{labels} value` on `recorder`'s page.
fn sample(recorder: &PrometheusRecorder, name: &str, labels: &str) -> f64 {
    let page = recorder.handle().render();
    let prefix = format!("{name}{{{labels}}} ");
    let line = page
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("{prefix}is not exported:\n{page}"));
    line[prefix.len()..].trim().parse().unwrap()
}

/// One thread: the recorder local to the test's thread sees the loop's writes (its tasks run
/// on it) and no other test's. The fake clock never moves, so every guard sees the whole
/// usable lease: 0.7 × 90 s.
#[tokio::test(flavor = "current_thread")]
async fn every_write_records_the_headroom_its_guard_saw_by_step() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let _local = metrics::set_default_local_recorder(&recorder);
    let fake = Fake::new([501]);
    fake.open_gate();
    let url = fake.serve().await;
    let (running, _rig) = start(&url, None).await;
    for step in WRITE_STEPS {
        let labels = format!(r#"step="{step}""#);
        let count = sample(
            &recorder,
            &format!("{WRITE_HEADROOM_SECONDS}_count"),
            &labels,
        );
        assert_eq!(count, 0.0, "{step}: registered at start, without a sample");
    }
    poll("the payout posted", || {
        (fake.posts() == [501]).then_some(())
    })
    .await;
    running.stop().await;
    let usable = LEASE.as_secs_f64() * 0.7;
    for step in WRITE_STEPS {
        let labels = format!(r#"step="{step}""#);
        let count = sample(
            &recorder,
            &format!("{WRITE_HEADROOM_SECONDS}_count"),
            &labels,
        );
        let sum = sample(&recorder, &format!("{WRITE_HEADROOM_SECONDS}_sum"), &labels);
        assert_eq!(count, 1.0, "{step}: one write");
        assert!(
            (sum - usable).abs() < 1e-6,
            "{step}: {sum} s, not {usable} s"
        );
    }
    // The SDK records each of those guards' held-checks in the same process.
    let backend = r#"backend="memory""#;
    let checks = sample(
        &recorder,
        &format!("{GUARD_HEADROOM_SECONDS}_count"),
        backend,
    );
    assert_eq!(checks, 3.0, "one held-check per guard");
}
