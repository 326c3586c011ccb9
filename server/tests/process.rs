//! The real `mulligan` binary as an operator runs it: killed with SIGKILL mid-stream and
//! started again, its run ends `interrupted` with the partial text kept and a waiting
//! background retry still fires; the API key never reaches its logs.
use testkit as common;

use app::wire::{RetryClass, RunKind, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{database_url, serve, temp_dir, TestServer, API_KEY};
use serde_json::json;
use std::time::{Duration, Instant};

/// Polls until `done` holds for the session's detail (≤ 15 s), and answers it.
async fn wait_for(
    server: &TestServer,
    sid: &str,
    done: impl Fn(&app::wire::SessionDetail) -> bool,
) -> app::wire::SessionDetail {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let detail = server.detail(sid).await;
        if done(&detail) {
            return detail;
        }
        assert!(Instant::now() < deadline, "never reached: {detail:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn kill_9_mid_stream_then_restart_marks_the_run_interrupted_and_logs_no_secret() {
    let fake = FakeProvider::start().await;
    fake.push(Script::slow(400, Duration::from_millis(10)));
    let dir = temp_dir("kill9");
    let log = dir.join("server.log");
    let (mut child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "stream for a while").await.run_id;
    // Let it stream past a save (every 250 ms), then kill it without warning.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    // SQLite: recorded at start. PostgreSQL: once the killed instance's lease lapses.
    let run = server.wait_run_end(&rid).await;
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.expect("classified");
    assert_eq!(
        (class.retryable, class.retry_class.clone()),
        (true, RetryClass::Interrupted)
    );
    let reply = server.detail(&sid).await.messages.last().unwrap().clone();
    assert!(
        reply.content.starts_with("w0 w1 w2 "),
        "partial text kept: {:?}",
        reply.content
    );
    assert_eq!(reply.status, Some(app::wire::MessageStatus::Failed));

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("interrupted"), "the log says what happened");
    assert!(!logs.contains(API_KEY), "the API key reached the log");
    assert!(
        !logs.contains(&server.token),
        "the operator token reached the log"
    );
}

#[tokio::test]
async fn a_waiting_background_retry_survives_kill_9_and_fires_after_the_restart() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Status {
        code: 529,
        headers: vec![],
        body: json!({"error": {"message": "overloaded"}}),
    });
    let dir = temp_dir("bg-kill9");
    let log = dir.join("server.log");
    let env = [
        ("MULLIGAN_TIER1_MAX_ATTEMPTS", "1"),
        ("MULLIGAN_TIER2_BASE_MS", "2500"),
    ];
    let (mut child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let (status, session) = server
        .post("/sessions", json!({"auto_retry": "background"}))
        .await;
    assert_eq!(status, 201);
    let sid = session["id"].as_str().unwrap().to_string();
    server.send(&sid, "walk away").await;
    let waiting = wait_for(&server, &sid, |d| d.session.waiting_retry.is_some()).await;
    assert_eq!(waiting.session.waiting_retry.unwrap().attempt, 1);
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let detail = wait_for(&server, &sid, |d| {
        d.runs.len() == 2 && d.runs[1].status == RunStatus::Completed
    })
    .await;
    assert_eq!(detail.runs[1].kind, RunKind::Resend);
    assert_eq!(detail.session.waiting_retry, None);
    assert_eq!(fake.seen().len(), 2);
}
