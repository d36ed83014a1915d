//! `fence_check` in PostgreSQL gives the Rust rule's verdict on every case of
//! `fence_kit::cases()`, moves the fence as a claim does, and keeps a refused writer's
//! transaction from writing anything.

use fence_kit::postgres::{
    CHECK_SQL, FENCED_OUT_SQLSTATE, INVALID_SQLSTATE, MIGRATION, SHARED_CHECK_SQL, fence_error,
};
use fence_kit::{FenceRule, Open, cases, check_fence};
use lock_api::ErrorCode;
use sqlx::{Connection, Executor, PgConnection, Row};

async fn database() -> PgConnection {
    let db = test_support::fresh_database().await;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    conn.execute(MIGRATION).await.unwrap();
    conn.execute(MIGRATION)
        .await
        .expect("the migration applies again over itself");
    conn
}

async fn fence_of(conn: &mut PgConnection, resource: &str) -> Option<(i64, String)> {
    sqlx::query("SELECT token, grant_id FROM fence_kit_fences WHERE resource = $1")
        .bind(resource)
        .fetch_optional(conn)
        .await
        .unwrap()
        .map(|row| (row.get("token"), row.get("grant_id")))
}

/// Runs `fence_check` for `case` on its own resource and returns whether it passed; the
/// fence afterwards must be the presented grant after a passed claim, unchanged otherwise.
async fn run(conn: &mut PgConnection, n: usize, case: &fence_kit::Case) -> bool {
    let resource = format!("case-{n}");
    if case.fence.token > 0 {
        sqlx::query("INSERT INTO fence_kit_fences (resource, token, grant_id) VALUES ($1, $2, $3)")
            .bind(&resource)
            .bind(case.fence.token)
            .bind(case.fence.grant)
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    let mut tx = conn.begin().await.unwrap();
    let query = match case.rule {
        FenceRule::Shared => sqlx::query(SHARED_CHECK_SQL),
        FenceRule::Claim | FenceRule::Holder => sqlx::query(CHECK_SQL),
    };
    let query = query
        .bind(&resource)
        .bind(case.presented.token)
        .bind(case.presented.grant);
    let query = match case.rule {
        FenceRule::Shared => query,
        FenceRule::Claim | FenceRule::Holder => query.bind(case.rule == FenceRule::Claim),
    };
    let answer = query.fetch_one(&mut *tx).await;
    let passed = match answer {
        Ok(row) => {
            let fence: i64 = row.get(0);
            tx.commit().await.unwrap();
            let expected = if case.rule == FenceRule::Claim {
                case.presented.token
            } else {
                case.fence.token
            };
            assert_eq!(fence, expected, "the fence after {case:?}");
            true
        }
        Err(sqlx::Error::Database(err)) => {
            // No grant is the caller's mistake (22023); any other refusal is the fence's.
            let (sqlstate, code) = if case.presented.grant.is_empty() {
                (INVALID_SQLSTATE, ErrorCode::InvalidArgument)
            } else {
                (FENCED_OUT_SQLSTATE, ErrorCode::FencedOut)
            };
            assert_eq!(err.code().as_deref(), Some(sqlstate), "{case:?}: {err}");
            let typed = fence_error(sqlstate, err.message()).unwrap();
            assert_eq!(typed.code, code);
            tx.rollback().await.unwrap();
            false
        }
        Err(other) => panic!("{case:?}: {other}"),
    };
    let after = fence_of(conn, &resource)
        .await
        .unwrap_or((0, String::new()));
    let moved = passed && case.rule == FenceRule::Claim;
    let expected = if moved {
        (case.presented.token, case.presented.grant.to_owned())
    } else {
        (case.fence.token, case.fence.grant.to_owned())
    };
    assert_eq!(after, expected, "the stored fence after {case:?}");
    passed
}

#[tokio::test]
async fn the_sql_fence_gives_the_rust_rules_verdict_on_every_case() {
    let mut conn = database().await;
    let cases = cases();
    for (n, case) in cases.iter().enumerate() {
        let sql = run(&mut conn, n, case).await;
        let rust = check_fence(case.rule, case.presented, case.fence, Open).is_ok();
        assert_eq!(
            (sql, rust),
            (case.passes, case.passes),
            "case {n}: {case:?}"
        );
    }
}

#[tokio::test]
async fn a_fenced_out_writer_keeps_nothing_it_wrote_in_its_transaction() {
    let mut conn = database().await;
    conn.execute("CREATE TABLE notes (resource text, body text)")
        .await
        .unwrap();
    let check = |token: i64, grant: &'static str, claim: bool| {
        sqlx::query(CHECK_SQL)
            .bind("doc")
            .bind(token)
            .bind(grant)
            .bind(claim)
    };
    check(7, "new", true).execute(&mut conn).await.unwrap();

    // A zombie (token 6) writes first, then asks the fence: its whole transaction goes.
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO notes VALUES ('doc', 'from the zombie')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let refused = check(6, "old", false).execute(&mut *tx).await.unwrap_err();
    let sqlx::Error::Database(err) = refused else {
        panic!("{refused}")
    };
    assert_eq!(err.code().as_deref(), Some(FENCED_OUT_SQLSTATE));
    assert!(err.message().contains("fence 7"), "{}", err.message());
    drop(tx);
    let notes: i64 = sqlx::query_scalar("SELECT count(*) FROM notes")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(notes, 0, "a refused writer's transaction wrote nothing");
    assert_eq!(fence_of(&mut conn, "doc").await, Some((7, "new".into())));

    // A claim in a transaction that rolls back leaves the fence where it was.
    let mut tx = conn.begin().await.unwrap();
    check(9, "later", true).execute(&mut *tx).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(fence_of(&mut conn, "doc").await, Some((7, "new".into())));
}

#[tokio::test]
async fn bad_arguments_are_refused_with_a_typed_error_and_no_fence_row() {
    let mut conn = database().await;
    for (resource, token) in [("doc", 0_i64), ("doc", -3), ("", 5)] {
        let err = sqlx::query(CHECK_SQL)
            .bind(resource)
            .bind(token)
            .bind("g")
            .bind(true)
            .execute(&mut conn)
            .await
            .unwrap_err();
        let sqlx::Error::Database(err) = err else {
            panic!("{err}")
        };
        let code = err.code().unwrap_or_default().into_owned();
        let typed = fence_error(&code, err.message())
            .unwrap_or_else(|| panic!("untyped: {code} {}", err.message()));
        assert_eq!(
            typed.code,
            ErrorCode::InvalidArgument,
            "{resource:?} {token}"
        );
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM fence_kit_fences")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    assert_eq!(
        fence_error("23505", "duplicate key"),
        None,
        "not the fence's error"
    );
}
