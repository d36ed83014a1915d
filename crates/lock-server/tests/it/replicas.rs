//! Active-active replicas on one store (PostgreSQL, etcd): exactly one winner per round, tokens never
//! repeat or go down.

use reqwest::StatusCode;

use crate::support::{StoreAt, TestServer, on_both_backends, token};

const SESSIONS_PER_REPLICA: usize = 8;
const ROUNDS: usize = 10;

async fn two_replicas_race_for_one_key_and_exactly_one_wins_each_round(at: StoreAt) {
    let a = TestServer::start(at.open().await, &[]).await;
    let b = TestServer::start(at.open().await, &[]).await;
    let mut racers = Vec::new();
    for i in 0..SESSIONS_PER_REPLICA {
        racers.push((
            a.api.clone(),
            a.api.session(&format!("a-{i}"), 30_000).await,
        ));
        racers.push((
            b.api.clone(),
            b.api.session(&format!("b-{i}"), 30_000).await,
        ));
    }
    let mut tokens = Vec::new();
    for round in 0..ROUNDS {
        let mut tasks = tokio::task::JoinSet::new();
        for (api, session) in racers.clone() {
            tasks.spawn(async move { api.acquire("hot", &session, 30_000).await });
        }
        let answers = tasks.join_all().await;
        let winners: Vec<u64> = answers
            .iter()
            .filter(|(s, _)| *s == StatusCode::OK)
            .map(|(_, b)| token(b))
            .collect();
        let winner_session = answers
            .iter()
            .find(|(s, _)| *s == StatusCode::OK)
            .and_then(|(_, b)| b["session_id"].as_str())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one winner: {answers:?}"
        );
        assert!(
            answers.iter().all(|(s, b)| *s == StatusCode::OK
                || (*s == StatusCode::CONFLICT && b["code"] == "LOCK_HELD")),
            "round {round}: losers get LOCK_HELD: {answers:?}"
        );
        // Release through the other replica than the one most racers used.
        let releaser = if round % 2 == 0 { &b.api } else { &a.api };
        assert!(releaser.release("hot", &winner_session, winners[0]).await);
        tokens.push(winners[0]);
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens strictly increase: {tokens:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

on_both_backends!(two_replicas_race_for_one_key_and_exactly_one_wins_each_round);
