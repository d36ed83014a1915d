//! The SDK's election against a real lock-server process on a real PostgreSQL (C2 §2.4c):
//! campaigns wait in line, a resign hands the term to the next candidate at once, proclaim
//! keeps the term, a lost term cannot proclaim, and `observe` answers each change in order.

use std::time::Duration;

use harness::stack::start_lock_server;
use lock_api::{LockError, LockKey};
use lock_client::election::{LeaderValue, Observer};
use lock_client::{AcquirePolicy, LockClient};

/// One observed change may take a poll and a request.
const CHANGE_DEADLINE: Duration = Duration::from_secs(5);

fn value(raw: &str) -> LeaderValue {
    LeaderValue::parse(raw).unwrap()
}

fn client(url: &str, ttl: Duration) -> LockClient {
    (harness::stack::lock_client_builder([url]).session_ttl(ttl))
        .build()
        .unwrap()
}

/// The observer's next change, within the deadline; a new term seen before its value landed
/// is passed over for the same term with it.
async fn next(observer: &mut Observer) -> Option<(u64, Option<String>)> {
    loop {
        let change = tokio::time::timeout(CHANGE_DEADLINE, observer.next())
            .await
            .expect("a change within the deadline")
            .unwrap();
        match change.map(|l| (l.term.0, l.value.map(String::from))) {
            Some((_, None)) => continue,
            other => return other,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_lead_in_turn_and_an_observer_sees_every_term_in_order() {
    let db = test_support::fresh_database().await;
    let logs = tempfile::tempdir().unwrap();
    let server = start_lock_server(
        "lock-server",
        &db.url,
        &[("LOCK_TTL_MIN", "50ms".into())],
        logs.path(),
    )
    .await
    .unwrap();
    let (client_a, client_b) = (
        client(&server.url, Duration::from_secs(10)),
        client(&server.url, Duration::from_secs(1)),
    );
    let admin = client_a.admin();
    let name = LockKey::parse("scheduler").unwrap();
    let mut observer = admin.observe(&name);
    assert_eq!(next(&mut observer).await, None, "no leader yet");

    let a = client_a.open_session("a").await.unwrap();
    let b = client_b.open_session("b").await.unwrap();
    let mut leading = (a.campaign(
        &name,
        value("a:80"),
        Duration::from_secs(10),
        &AcquirePolicy::TRY_ONCE,
    ))
    .await
    .unwrap()
    .expect("a free election is won at once");
    let first = leading.term().0;
    assert_eq!(
        next(&mut observer).await,
        Some((first, Some("a:80".into())))
    );
    a.proclaim(&mut leading, value("a:81")).await.unwrap();
    assert_eq!(leading.term().0, first, "proclaim keeps the term");
    assert_eq!(
        next(&mut observer).await,
        Some((first, Some("a:81".into())))
    );

    let follower = tokio::spawn({
        let name = name.clone();
        async move {
            let won = b
                .campaign(
                    &name,
                    value("b:80"),
                    Duration::from_secs(1),
                    &AcquirePolicy::DEFAULT,
                )
                .await;
            (b, won)
        }
    });
    test_support::poll_until("b to wait in line", CHANGE_DEADLINE, || async {
        let info = admin.inspect(&name).await.unwrap()?;
        (info.waiters == 1).then_some(())
    })
    .await;
    a.resign(leading).await.unwrap();
    let (b, won) = follower.await.unwrap();
    let mut leading_b = won.unwrap().expect("handed the term on a's resign");
    let second = leading_b.term().0;
    assert!(second > first, "terms rise: {second} > {first}");
    assert_eq!(
        next(&mut observer).await,
        Some((second, Some("b:80".into())))
    );

    // b's process freezes: the SDK declares the term lost before the server does, and a lost
    // term proclaims nothing.
    client_b.freeze_heartbeat();
    test_support::poll_until("b's term to be declared lost", CHANGE_DEADLINE, || async {
        b.check_still_held(leading_b.handle())
            .is_err()
            .then_some(())
    })
    .await;
    let refused = b.proclaim(&mut leading_b, value("b:81")).await;
    assert!(matches!(refused, Err(LockError::Lost(_))), "{refused:?}");
    assert_eq!(leading_b.value(), &value("b:80"), "nothing changed");
    assert_eq!(
        next(&mut observer).await,
        None,
        "no leader once b's lease ends"
    );
    assert_eq!(admin.leader(&name).await.unwrap(), None);
    a.close().await;
    client_a.close();
}
