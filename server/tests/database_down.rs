//! A database that goes away (CONTRACT §2): a PostgreSQL cluster of the test's own is
//! stopped as a crash would (`pg_ctl stop -m immediate`) while runs stream, and started
//! again. Meanwhile requests answer 503 `database.unavailable` within 5 s and change
//! nothing, `/readyz` says 503 and `/healthz` 200; once it is back, `/readyz` says 200 and
//! every run that was streaming ends complete with its whole text.
use testkit as common;

use app::wire::{ErrorCode, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, Cluster, TestServer};
use serde_json::json;
use std::time::{Duration, Instant};

/// `GET` of a path outside the API, with its status, within `limit`.
async fn status_of(server: &TestServer, path: &str, limit: Duration) -> u16 {
    let get = server.http.get(format!("{}{path}", server.base)).send();
    let answer = tokio::time::timeout(limit, get)
        .await
        .unwrap_or_else(|_| panic!("{path} did not answer within {limit:?}"))
        .expect("an answer");
    answer.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "starts a PostgreSQL cluster of its own (run with --include-ignored in the PostgreSQL pass)"]
async fn requests_say_the_database_is_unavailable_and_runs_end_whole_once_it_is_back() {
    let cluster = Cluster::start("down");
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("db-down"), &fake.url);
    c.database_url = Some(cluster.url());
    let server = TestServer::start(c).await;
    assert_eq!(
        status_of(&server, "/readyz", Duration::from_secs(5)).await,
        200
    );

    // Three runs streaming 30 words over 3 s.
    let expected: String = (0..30).map(|i| format!("w{i} ")).collect();
    fake.set_default(Script::slow(30, Duration::from_millis(100)));
    let mut sent = Vec::new();
    for _ in 0..3 {
        let sid = server.create_session().await;
        let receipt = server.send(&sid, "go").await;
        sent.push((sid, receipt));
    }
    let (before, _) = server.get("/sessions").await;
    assert_eq!(before, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;

    cluster.crash();
    let down = Instant::now();
    for _ in 0..2 {
        let asked = Instant::now();
        let (status, body) = server
            .post("/sessions", json!({"title": "while down"}))
            .await;
        let took = asked.elapsed();
        assert_eq!(status, 503, "{body}");
        assert_eq!(
            body["error"]["code"],
            ErrorCode::DatabaseUnavailable.as_str(),
            "{body}"
        );
        assert!(took <= Duration::from_secs(5), "answered after {took:?}");
    }
    let (status, body) = server.get(&format!("/sessions/{}", sent[0].0)).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (503, &json!("database.unavailable")),
        "{body}"
    );
    // `/readyz` keeps an answer about a second: it says 503 within that of the outage.
    let deadline = Instant::now() + Duration::from_secs(5);
    while status_of(&server, "/readyz", Duration::from_secs(5)).await != 503 {
        assert!(Instant::now() < deadline, "/readyz never said 503");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status_of(&server, "/healthz", Duration::from_secs(1)).await,
        200
    );
    // Out for at least 4 s, past the streams' end.
    if let Some(rest) = Duration::from_secs(4).checked_sub(down.elapsed()) {
        tokio::time::sleep(rest).await;
    }

    cluster.up();
    let deadline = Instant::now() + Duration::from_secs(30);
    while status_of(&server, "/readyz", Duration::from_secs(5)).await != 200 {
        assert!(Instant::now() < deadline, "/readyz never said ready again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing the refused requests asked for was done: the sessions are the three.
    let (status, body) = server.get("/sessions").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["sessions"].as_array().map(Vec::len), Some(3), "{body}");
    for (sid, receipt) in &sent {
        let run = server.wait_run_end(&receipt.run_id).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        let reply = server
            .detail(sid)
            .await
            .messages
            .into_iter()
            .find(|m| m.run_id.as_ref() == Some(&receipt.run_id))
            .expect("the reply");
        assert_eq!(reply.content, expected);
    }
    let (status, body) = server.post("/sessions", json!({"title": "after"})).await;
    assert_eq!(status, 201, "{body}");
}

/// A SQLite file another process holds locked (a backup, a `sqlite3` shell mid-transaction)
/// answers like a database that is down: writes get 503 `database.unavailable` within 5 s
/// and change nothing, reads go on, `/readyz` says 503 (it checks a write); once the lock
/// is let go, everything answers again. On PostgreSQL this suite runs the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_sqlite_answers_unavailable_within_5_s_and_changes_nothing() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("sqlite-locked");
    let mut c = config(&dir, &fake.url);
    if c.database_url.is_some() {
        // The PostgreSQL pass: the file lock is SQLite's; run on SQLite only.
        c.database_url = None;
    }
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;
    let before = server.get("/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        status_of(&server, "/readyz", Duration::from_secs(1)).await,
        200
    );

    let lock = common::WriteLock::hold_sqlite(&dir).await;
    // `/readyz` keeps its last answer about a second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = Instant::now();
    assert_eq!(
        status_of(&server, "/readyz", Duration::from_secs(5)).await,
        503
    );
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        server.post("/sessions", json!({"title": "while locked"})),
    )
    .await
    .expect("an answer within 5 s");
    assert_eq!(answer.0, 503, "{}", answer.1);
    assert_eq!(
        answer.1["error"]["code"], "database.unavailable",
        "{}",
        answer.1
    );
    let sent = tokio::time::timeout(
        Duration::from_secs(5),
        server.post(
            &format!("/sessions/{sid}/messages"),
            json!({"content": "hi"}),
        ),
    )
    .await
    .expect("an answer within 5 s");
    assert_eq!(sent.0, 503, "{}", sent.1);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "three answers took {:?}",
        started.elapsed()
    );
    // Reads go on.
    let (status, _) = server.get(&format!("/sessions/{sid}")).await;
    assert_eq!(status, 200);

    lock.release().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        status_of(&server, "/readyz", Duration::from_secs(5)).await,
        200
    );
    let after = server.get("/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(after, before, "nothing was created while locked");
    assert!(
        server.detail(&sid).await.messages.is_empty(),
        "nothing was posted"
    );
    let sent = server.send(&sid, "hi").await;
    assert_eq!(
        server.wait_run_end(&sent.run_id).await.status,
        RunStatus::Completed
    );
}
