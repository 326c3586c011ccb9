//! Provider-wide cooldowns over real HTTP: one advised wait holds every session on that
//! provider, endpoint, key and model (and nothing else), `GET /providers` lists it without
//! secrets, an operator clears it, and `/metrics` counts what it avoided.
use testkit as common;

use app::wire::{ErrorCode, ProvidersResponse, RetryClass, Run, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, setup, temp_dir, TestServer, API_KEY};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn status(code: u16, kind: &str, headers: Vec<(&'static str, String)>) -> Script {
    Script::Status {
        code,
        headers,
        body: json!({"error": {"type": kind, "message": format!("status {code}")}}),
    }
}

fn status_script(code: u16) -> Script {
    status(code, "server_error", vec![])
}

fn wait_3000() -> Vec<(&'static str, String)> {
    vec![("retry-after", "3000".into())]
}

/// Sends a prompt and waits for its run to end.
async fn turn(server: &TestServer, sid: &str, content: &str) -> Run {
    let receipt = server.send(sid, content).await;
    server.wait_run_end(&receipt.run_id).await
}

async fn session_on(server: &TestServer, model: &str) -> String {
    let (status, body) = server
        .post("/sessions", json!({"title": "other model", "model": model}))
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

async fn providers(server: &TestServer) -> (String, ProvidersResponse) {
    let resp = server
        .http
        .get(server.url("/providers"))
        .bearer_auth(&server.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let parsed = serde_json::from_str(&text).unwrap();
    (text, parsed)
}

async fn clear(server: &TestServer, body: Value) -> (u16, Value) {
    let r = server
        .http
        .delete(server.url("/providers/cooldowns"))
        .bearer_auth(&server.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// `/metrics` (no auth) as text.
async fn metrics_text(server: &TestServer) -> String {
    let r = reqwest::get(format!("{}/metrics", server.base))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let kind = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(kind.starts_with("text/plain"), "{kind}");
    r.text().await.unwrap()
}

/// One sample of a counter, e.g. `metric(&text, "mulligan_runs_total{status=\"failed\"}")`.
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

const AVOIDED: &str = "mulligan_provider_requests_avoided_total";

#[tokio::test]
async fn one_429_holds_twenty_runs_on_five_sessions_without_a_request() {
    let (fake, server) = setup("cooldown-20").await;
    fake.push(status(429, "rate_limit_error", wait_3000()));
    fake.set_default(Script::reply(&["fine"]));

    let first = server.create_session().await;
    let failed = turn(&server, &first, "hi").await;
    assert_eq!(failed.status, RunStatus::Failed);
    let until = failed
        .retry
        .as_ref()
        .and_then(|r| r.retry_after_until)
        .expect("a deadline");
    assert_eq!(fake.seen().len(), 1);
    let avoided_before = metric(&metrics_text(&server).await, AVOIDED);

    let mut sessions = Vec::new();
    for _ in 0..5 {
        sessions.push(server.create_session().await);
    }
    let started = Instant::now();
    let runs = futures::future::join_all(sessions.iter().map(|sid| {
        let server = &server;
        async move {
            let mut runs = Vec::new();
            for i in 0..4 {
                runs.push(turn(server, sid, &format!("prompt {i}")).await);
            }
            runs
        }
    }))
    .await;
    let runs: Vec<Run> = runs.into_iter().flatten().collect();
    assert_eq!(runs.len(), 20);
    for run in &runs {
        assert_eq!(run.status, RunStatus::Failed, "{run:?}");
        let retry = run.retry.as_ref().unwrap();
        assert_eq!(
            (
                retry.retry_class.clone(),
                retry.retryable,
                retry.retry_after_until
            ),
            (RetryClass::RateLimited, true, Some(until)),
            "{run:?}"
        );
        assert!(run.error_message.as_deref().unwrap().contains("not sent"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "each failed at once; all took {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fake.seen().len(), 1, "zero requests for the 20 runs");
    let avoided = metric(&metrics_text(&server).await, AVOIDED) - avoided_before;
    assert!(avoided >= 20, "metrics avoided {avoided}");

    // Another model on the same key is not held.
    let other = session_on(&server, "other-model").await;
    assert_eq!(
        turn(&server, &other, "hi").await.status,
        RunStatus::Completed
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].body["model"], "other-model");

    // Another API key on the same endpoint and model is not held either.
    let mut other_key = config(&temp_dir("cooldown-other-key"), &fake.url);
    other_key.api_key = Some("sk-another-key-7".into());
    let second = TestServer::start(other_key).await;
    let sid = second.create_session().await;
    assert_eq!(turn(&second, &sid, "hi").await.status, RunStatus::Completed);
    let seen = fake.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        seen[2].authorization.as_deref(),
        Some("Bearer sk-another-key-7")
    );
    assert!(providers(&second).await.1.cooldowns.is_empty());
    // The first server's cooldown still holds.
    assert_eq!(
        turn(&server, &first, "again").await.status,
        RunStatus::Failed
    );
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn providers_lists_it_without_the_key_and_clearing_it_lets_the_next_run_through() {
    let (fake, server) = setup("cooldown-list").await;
    fake.push(status(429, "rate_limit_error", wait_3000()));
    fake.set_default(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let failed = turn(&server, &sid, "hi").await;
    let until = failed.retry.unwrap().retry_after_until.unwrap();

    let (text, listed) = providers(&server).await;
    assert!(!text.contains(API_KEY), "the key never appears: {text}");
    assert_eq!(listed.cooldowns.len(), 1, "{text}");
    let cooldown = &listed.cooldowns[0];
    assert_eq!(
        (cooldown.until, cooldown.reason.clone()),
        (until, RetryClass::RateLimited)
    );
    assert!(
        cooldown
            .key
            .starts_with(&format!("openai {} model=fake-model key=sha256:", fake.url)),
        "{}",
        cooldown.key
    );
    // Nor in what a run or the session says about the cooldown.
    let (_, detail) = server.get(&format!("/sessions/{sid}")).await;
    assert!(!detail.to_string().contains(API_KEY));

    // Unauthenticated: refused in the contract's shape.
    let r = reqwest::get(server.url("/providers")).await.unwrap();
    assert_eq!(r.status(), 401);

    assert_eq!(turn(&server, &sid, "held").await.status, RunStatus::Failed);
    assert_eq!(fake.seen().len(), 1);

    let (status, body) = clear(&server, json!({"key": cooldown.key})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"cooldowns": [], "models": []}));
    let (status, body) = clear(&server, json!({"key": cooldown.key})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some(ErrorCode::NotFound.as_str()))
    );
    let (status, body) = clear(&server, json!({"nope": 1})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some(ErrorCode::InvalidRequest.as_str()))
    );

    assert_eq!(
        turn(&server, &sid, "through").await.status,
        RunStatus::Completed
    );
    assert_eq!(fake.seen().len(), 2, "the next run made a request");
}

#[tokio::test]
async fn a_quota_answer_cools_down_as_quota_exhausted_apart_from_throttling() {
    let (fake, server) = setup("cooldown-quota").await;
    fake.push(status(429, "insufficient_quota", wait_3000()));
    fake.set_default(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let first = turn(&server, &sid, "hi").await;
    let retry = first.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::QuotaExhausted, false)
    );
    let (_, listed) = providers(&server).await;
    assert_eq!(listed.cooldowns.len(), 1);
    let cooldown = &listed.cooldowns[0];
    assert_eq!(cooldown.reason, RetryClass::QuotaExhausted);

    let held = turn(&server, &sid, "again").await;
    let retry = held.retry.unwrap();
    assert_eq!(
        (
            retry.retry_class.clone(),
            retry.retryable,
            retry.retry_after_until
        ),
        (RetryClass::QuotaExhausted, false, Some(cooldown.until))
    );
    assert_eq!(fake.seen().len(), 1, "no request while out of quota");
}

#[tokio::test]
async fn a_short_advised_wait_holds_other_sessions_until_it_ends() {
    let (fake, server) = setup("cooldown-short").await;
    fake.push(status(
        429,
        "rate_limit_error",
        vec![("retry-after", "2".into())],
    ));
    fake.set_default(Script::reply(&["fine"]));
    let a = server.create_session().await;
    let b = server.create_session().await;
    let ra = server.send(&a, "first").await;
    // Once the 429 is in, B's run must not reach the provider before the advised time.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while providers(&server).await.1.cooldowns.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the 429's cooldown never showed in /providers"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rb = server.send(&b, "second").await;
    assert_eq!(
        server.wait_run_end(&ra.run_id).await.status,
        RunStatus::Completed
    );
    assert_eq!(
        server.wait_run_end(&rb.run_id).await.status,
        RunStatus::Completed
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 3);
    for later in &seen[1..] {
        let gap = later.at - seen[0].at;
        assert!(
            gap >= Duration::from_millis(1990),
            "a request after {gap:?}"
        );
    }
    let (_, detail) = server.get(&format!("/runs/{}", rb.run_id)).await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert!(
        attempts[0]["error"].as_str().unwrap().contains("not sent"),
        "{detail}"
    );
    assert!(attempts[0]["retry_in_ms"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn metrics_count_tier1_attempts_tier2_retries_retry_now_and_run_ends() {
    let (fake, server) = setup("cooldown-metrics").await;
    let before = metrics_text(&server).await;
    for _ in 0..3 {
        fake.push(status_script(500));
    }
    fake.set_default(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let failed = turn(&server, &sid, "hi").await;
    assert_eq!(failed.status, RunStatus::Failed);
    // The browser's Tier 2: a regenerate carrying if_last_run.
    let (status, body) = server
        .post(
            &format!(
                "/sessions/{sid}/messages/{}/regenerate",
                failed.anchor_message_id
            ),
            json!({"if_last_run": failed.id}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_run_end(&run_id).await.status,
        RunStatus::Completed
    );
    let (status, _) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 409);
    // Retry now on a failed run: started.
    for _ in 0..3 {
        fake.push(status_script(500));
    }
    let failed = turn(&server, &sid, "again").await;
    assert_eq!(failed.status, RunStatus::Failed);
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let retried = body["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_run_end(&retried).await.status,
        RunStatus::Completed
    );
    // Retry now while a run streams: busy; then that run is cancelled.
    fake.push(Script::Endless {
        text: "more ".into(),
        every: Duration::from_millis(20),
    });
    let streaming = server.send(&sid, "go on").await;
    server
        .wait_run_status(&streaming.run_id, RunStatus::Running)
        .await;
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", streaming.run_id),
            json!({}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    assert_eq!(
        server.wait_run_end(&streaming.run_id).await.status,
        RunStatus::Cancelled
    );

    let after = metrics_text(&server).await;
    let grew = |series: &str| metric(&after, series) - metric(&before, series);
    assert!(grew("mulligan_tier1_attempts_total{class=\"server_error\"}") >= 3);
    assert!(grew("mulligan_tier1_attempts_total{class=\"ok\"}") >= 1);
    assert!(grew("mulligan_tier2_retries_total") >= 1);
    assert!(grew("mulligan_retry_now_total{outcome=\"nothing_failed\"}") >= 1);
    assert!(grew("mulligan_runs_total{status=\"completed\"}") >= 1);
    assert!(grew("mulligan_runs_total{status=\"superseded\"}") >= 1);
    assert!(grew("mulligan_retry_now_total{outcome=\"started\"}") >= 1);
    assert!(grew("mulligan_retry_now_total{outcome=\"busy\"}") >= 1);
    assert!(grew("mulligan_runs_total{status=\"cancelled\"}") >= 1);
    assert!(grew("mulligan_runs_total{status=\"failed\"}") >= 2);
}

#[tokio::test]
async fn a_cooldown_outlives_a_restart() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("cool-restart");
    let mut server = TestServer::start(config(&dir, &fake.url)).await;
    fake.push(status(429, "rate_limit_error", wait_3000()));
    let sid = server.create_session().await;
    let first = turn(&server, &sid, "one").await;
    let until = first.retry.unwrap().retry_after_until.unwrap();
    server.stop().await;

    let server = TestServer::start(config(&dir, &fake.url)).await;
    let (_, listed) = providers(&server).await;
    assert_eq!(listed.cooldowns.len(), 1);
    assert_eq!(listed.cooldowns[0].until, until);
    let again = turn(&server, &sid, "two").await;
    assert_eq!(again.retry.unwrap().retry_after_until, Some(until));
    assert_eq!(fake.seen().len(), 1, "no request after the restart either");
}
