//! The real `mulligan` binary as an operator runs it: killed with SIGKILL mid-stream and
//! started again, its run ends `interrupted` with the partial text kept; the API key never
//! reaches its logs.
mod common;

use common::fake::{FakeProvider, Script};
use common::{database_url, serve, temp_dir, API_KEY};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn kill_9_mid_stream_then_restart_marks_the_run_interrupted_and_logs_no_secret() {
    let fake = FakeProvider::start().await;
    fake.push(Script::slow(400, Duration::from_millis(10)));
    let dir = temp_dir("kill9");
    let log = dir.join("server.log");
    let (mut child, base, token) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    let http = reqwest::Client::new();
    let api = |p: &str| format!("{base}/api/v1{p}");
    let session: Value = http
        .post(api("/sessions"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = session["id"].as_str().unwrap().to_string();
    let receipt: Value = http
        .post(api(&format!("/sessions/{sid}/messages")))
        .bearer_auth(&token)
        .json(&json!({"content": "stream for a while"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rid = receipt["run_id"].as_str().unwrap().to_string();
    // Let it stream past a save (every 250 ms), then kill it without warning.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, base, token) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    let api = |p: &str| format!("{base}/api/v1{p}");
    // SQLite: recorded at start. PostgreSQL: once the killed instance's lease lapses.
    let mut run = Value::Null;
    for _ in 0..150 {
        run = http
            .get(api(&format!("/runs/{rid}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if run["run"]["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(run["run"]["status"], "failed");
    assert_eq!(
        run["run"]["retry"],
        json!({"retryable": true, "retry_class": "interrupted"})
    );
    let detail: Value = http
        .get(api(&format!("/sessions/{sid}")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reply = detail["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let text = reply["content"].as_str().unwrap();
    assert!(text.starts_with("w0 w1 w2 "), "partial text kept: {text:?}");
    assert_eq!(reply["status"], "failed");

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("interrupted"), "the log says what happened");
    assert!(!logs.contains(API_KEY), "the API key reached the log");
    assert!(!logs.contains(&token), "the operator token reached the log");
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
    let (mut child, base, token) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let http = reqwest::Client::new();
    let api = |base: &str, p: &str| format!("{base}/api/v1{p}");
    let session: Value = http
        .post(api(&base, "/sessions"))
        .bearer_auth(&token)
        .json(&json!({"auto_retry": "background"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = session["id"].as_str().unwrap().to_string();
    http.post(api(&base, &format!("/sessions/{sid}/messages")))
        .bearer_auth(&token)
        .json(&json!({"content": "walk away"}))
        .send()
        .await
        .unwrap();
    let get = |base: String, token: String| {
        let http = http.clone();
        let sid = sid.clone();
        async move {
            http.get(format!("{base}/api/v1/sessions/{sid}"))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let mut waiting = Value::Null;
    for _ in 0..100 {
        waiting = get(base.clone(), token.clone()).await["session"]["waiting_retry"].clone();
        if !waiting.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiting["attempt"], 1, "a waiting retry before the kill");
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, base, token) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let mut detail = Value::Null;
    for _ in 0..200 {
        detail = get(base.clone(), token.clone()).await;
        let runs = detail["runs"].as_array().unwrap();
        if runs.len() == 2 && runs[1]["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let runs = detail["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{detail}");
    assert_eq!(runs[1]["status"], "completed");
    assert_eq!(runs[1]["kind"], "resend");
    assert!(detail["session"]["waiting_retry"].is_null());
    assert_eq!(fake.seen().len(), 2);
}
