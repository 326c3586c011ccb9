//! CONTRACT promises that no other suite pinned: `Retry-After` as an HTTP date, every
//! retried status and transport failure over real HTTP, an advised wait on the last attempt,
//! `regenerate.stale` for a run that did not fail and for a superseded prompt, the content
//! limit at its edge, and the agent token shown once only.
use testkit as common;

use app::wire::{ErrorCode, Receipt, RetryClass, RunStatus};
use common::fake::Script;
use common::{config, held_behind_a_failure, now_ms, run_ended, setup, temp_dir, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

fn status(code: u16, headers: Vec<(&'static str, String)>) -> Script {
    Script::Status {
        code,
        headers,
        body: json!({"error": {"message": format!("status {code}")}}),
    }
}

/// The answer is the contract's error with exactly `code`.
fn assert_error(answer: &(u16, Value), http: u16, code: ErrorCode) {
    assert_eq!(answer.0, http, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], code.as_str(), "{}", answer.1);
    assert!(
        answer.1["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "a message says why: {}",
        answer.1
    );
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_slept_until_that_time() {
    let (fake, server) = setup("ra-date").await;
    // Whole seconds: an HTTP date has no finer grain. 2–3 s ahead.
    let at_s = now_ms() / 1000 + 3;
    let date = httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(at_s as u64));
    fake.push(status(503, vec![("retry-after", date)]));
    let sid = server.create_session().await;
    let rid = server.send(&sid, "hi").await.run_id;
    let run = server.wait_run_end(&rid).await;
    assert_eq!(run.status, RunStatus::Completed);
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    // The second request came no earlier than the date (the fake's clock is this process').
    let first_sent_ms = now_ms() - seen[0].at.elapsed().as_millis() as i64;
    let gap = seen[1].at.duration_since(seen[0].at).as_millis() as i64;
    assert!(
        first_sent_ms + gap >= at_s * 1000 - 5,
        "the retry came {} ms before the advised date",
        at_s * 1000 - (first_sent_ms + gap)
    );
}

#[tokio::test]
async fn every_retried_status_is_retried_over_http() {
    for code in [429, 500, 502, 503, 504, 529] {
        let (fake, server) = setup(&format!("status-{code}")).await;
        fake.push(status(code, vec![]));
        let sid = server.create_session().await;
        let rid = server.send(&sid, "hi").await.run_id;
        let run = server.wait_run_end(&rid).await;
        assert_eq!(run.status, RunStatus::Completed, "{code}");
        assert_eq!(run.tier1_attempts, 2, "{code}: one retry");
        assert_eq!(fake.seen().len(), 2, "{code}");
    }
}

#[tokio::test]
async fn a_refused_or_reset_connection_is_a_retryable_network_failure() {
    // Refused: nothing listens on the port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    // Reset: accepts, then drops the connection without answering.
    let resetting = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reset_addr = resetting.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = resetting.accept().await {
            let _ = socket.set_zero_linger(); // RST, not FIN
            drop(socket);
        }
    });
    for (tag, addr) in [("refused", closed), ("reset", reset_addr)] {
        let server = TestServer::start(config(&temp_dir(tag), &format!("http://{addr}/v1"))).await;
        let sid = server.create_session().await;
        let rid = server.send(&sid, "hi").await.run_id;
        let run = server.wait_run_end(&rid).await;
        assert_eq!(run.status, RunStatus::Failed, "{tag}");
        let class = run.retry.expect("classified");
        assert_eq!(
            (class.retry_class.clone(), class.retryable),
            (RetryClass::Network, true),
            "{tag}"
        );
        assert_eq!(run.tier1_attempts, 3, "{tag}: Tier 1 tried every attempt");
    }
}

#[tokio::test]
async fn an_advised_wait_on_the_last_attempt_ends_the_run_at_once() {
    let (fake, server) = setup("ra-last").await;
    fake.push(status(503, vec![]));
    fake.push(status(503, vec![]));
    fake.push(status(429, vec![("retry-after", "5".into())]));
    fake.set_default(Script::reply(&["too early"]));
    let sid = server.create_session().await;
    let before = now_ms();
    let rid = server.send(&sid, "hi").await.run_id;
    let run = server.wait_run_end(&rid).await;
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.expect("classified");
    assert_eq!(class.retry_class, RetryClass::RateLimited);
    let until = class.retry_after_until.expect("the advice is handed on");
    assert!(until >= before + 5_000, "until {until} is the advised time");
    assert!(
        run.finished_at.expect("ended") < until,
        "it ended at once instead of sleeping out the last advice"
    );
    assert_eq!(fake.seen().len(), 3, "no request after the last attempt");
}

#[tokio::test]
async fn regenerate_with_a_run_that_did_not_fail_is_stale() {
    let (fake, server) = setup("stale-completed").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "hi").await;
    server.wait_run_end(&first.run_id).await;
    let path = format!("/sessions/{sid}/messages/{}/regenerate", first.message_id);
    let answer = server
        .post(&path, json!({"if_last_run": first.run_id}))
        .await;
    assert_error(&answer, 409, ErrorCode::RegenerateStale);
    assert_eq!(fake.seen().len(), 1, "nothing ran again");
    // Without the condition it is a new intent and runs.
    let (status, body) = server.post(&path, json!({})).await;
    assert_eq!(status, 202, "{body}");
    let receipt: Receipt = serde_json::from_value(body).unwrap();
    assert_eq!(
        server.wait_run_end(&receipt.run_id).await.status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn regenerating_a_superseded_prompt_is_stale_and_changes_nothing() {
    let (fake, server) = setup("stale-superseded").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "one").await;
    server.wait_run_end(&first.run_id).await;
    let second = server.send(&sid, "two").await;
    server.wait_run_end(&second.run_id).await;
    let mut sse = server.events(&sid, None).await;
    // Regenerating the first prompt supersedes the second and its reply.
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", first.message_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let again: Receipt = serde_json::from_value(body).unwrap();
    assert!(again.superseded.contains(&second.message_id), "{again:?}");
    // Its end delivered here too (on a shared log the events follow the run's row), so
    // the snapshot's `last_event_id` stays unless a refusal publishes something.
    sse.until(Duration::from_secs(30), run_ended(&again.run_id))
        .await;
    let before = server
        .get(&format!("/sessions/{sid}?include_superseded=true"))
        .await;
    let requests = fake.seen().len();

    let path = format!("/sessions/{sid}/messages/{}/regenerate", second.message_id);
    for body in [
        json!({}),
        json!({"manual": true}),
        json!({"if_last_run": second.run_id, "manual": true}),
    ] {
        let answer = server.post(&path, body.clone()).await;
        assert_error(&answer, 409, ErrorCode::RegenerateStale);
    }
    assert_eq!(
        server
            .get(&format!("/sessions/{sid}?include_superseded=true"))
            .await,
        before,
        "the refused regenerates changed nothing"
    );
    assert_eq!(fake.seen().len(), requests, "nothing reached the provider");
    let detail = server.detail(&sid).await;
    assert_eq!(
        detail.messages.last().map(|m| m.run_id.clone()),
        Some(Some(again.run_id.clone())),
        "the current reply is still the regenerated one"
    );
}

#[tokio::test]
async fn content_is_limited_to_100000_characters_after_trim() {
    let (_fake, server) = setup("content-edge").await;
    let sid = server.create_session().await;
    let path = format!("/sessions/{sid}/messages");
    // 100,000 characters of which many are multi-byte, padded with whitespace: accepted.
    let at_limit = format!("  {}  ", "é".repeat(100_000));
    let (status, body) = server.post(&path, json!({"content": at_limit})).await;
    assert_eq!(status, 202, "{body}");
    let over = "é".repeat(100_001);
    let answer = server.post(&path, json!({"content": over})).await;
    assert_error(&answer, 422, ErrorCode::InvalidRequest);
    let answer = server.post(&path, json!({"content": " \n\t "})).await;
    assert_error(&answer, 422, ErrorCode::InvalidRequest);
    assert_eq!(
        server.detail(&sid).await.messages.len(),
        2,
        "only the accepted prompt and its reply exist"
    );
}

#[tokio::test]
async fn the_agent_token_is_shown_once_only() {
    let (_fake, server) = setup("agent-token").await;
    let (status, created) = server.post("/sessions", json!({"title": "t"})).await;
    assert_eq!(status, 201, "{created}");
    let token = created["agent_token"].as_str().expect("shown on create");
    assert!(token.len() >= 32);
    let sid = created["id"].as_str().unwrap();
    let (_, list) = server.get("/sessions").await;
    let (_, detail) = server.get(&format!("/sessions/{sid}")).await;
    for (what, answer) in [("list", list), ("detail", detail)] {
        let text = answer.to_string();
        assert!(!text.contains("agent_token"), "{what}: {text}");
        assert!(!text.contains(token), "{what} shows the token");
    }
}

fn contents(detail: &app::wire::SessionDetail) -> Vec<String> {
    detail.messages.iter().map(|m| m.content.clone()).collect()
}

#[tokio::test]
async fn a_completed_regenerate_releases_the_held_prompts_without_superseding_them() {
    let (fake, server) = setup("held-regen").await;
    let sid = server.create_session().await;
    let (_failed, queued) = held_behind_a_failure(&fake, &server, &sid).await;
    let first = &server.detail(&sid).await.messages[0];
    fake.push(Script::reply(&["one done"]))
        .push(Script::reply(&["two done"]));
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", first.id),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let receipt: Receipt = serde_json::from_value(body).unwrap();
    assert!(
        !receipt.superseded.contains(&queued.message_id),
        "the held prompt is not superseded"
    );
    server.wait_run_end(&receipt.run_id).await;
    assert_eq!(
        server.wait_run_end(&queued.run_id).await.status,
        RunStatus::Completed,
        "the held prompt went on after the regenerate completed"
    );
    let detail = server.detail(&sid).await;
    assert_eq!(contents(&detail), ["one", "two", "one done", "two done"]);
}

#[tokio::test]
async fn a_new_prompt_releases_the_held_ones_and_queues_behind_them() {
    let (fake, server) = setup("held-new").await;
    let sid = server.create_session().await;
    let (_failed, queued) = held_behind_a_failure(&fake, &server, &sid).await;
    fake.push(Script::reply(&["two done"]))
        .push(Script::reply(&["three done"]));
    let third = server.send(&sid, "three").await;
    let two = server.wait_run_end(&queued.run_id).await;
    let three = server.wait_run_end(&third.run_id).await;
    assert_eq!(
        (two.status, three.status),
        (RunStatus::Completed, RunStatus::Completed)
    );
    assert!(
        three.started_at >= two.finished_at,
        "the new prompt ran after the released one"
    );
}

#[tokio::test]
async fn held_prompts_stay_held_when_the_retry_fails_again() {
    let (fake, server) = setup("held-again").await;
    let sid = server.create_session().await;
    let (_failed, queued) = held_behind_a_failure(&fake, &server, &sid).await;
    fake.push(status(401, vec![]));
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let retried = body["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_run_end(&retried).await.status,
        RunStatus::Failed
    );
    let held = server.run(&queued.run_id).await;
    assert_eq!(held.status, RunStatus::Queued);
    assert!(held.held_by.is_some(), "still held: {held:?}");
    // Still held after the next failure's end was fully recorded, too: a release answers it.
    let (_, released) = server
        .post(&format!("/sessions/{sid}/release"), json!({}))
        .await;
    assert_eq!(released["released"], json!([queued.run_id]));
}

#[tokio::test]
async fn a_regenerate_queues_behind_an_active_run() {
    let (fake, server) = setup("regen-queued").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "first").await;
    server.wait_run_end(&first.run_id).await;
    fake.push(Script::slow(20, Duration::from_millis(20)));
    let second = server.send(&sid, "second").await;
    server
        .wait_run_status(&second.run_id, RunStatus::Running)
        .await;
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", first.message_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let receipt: Receipt = serde_json::from_value(body).unwrap();
    assert!(receipt.queued, "it waits for the running run");
    let running = server.wait_run_end(&second.run_id).await;
    let regen = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(regen.status, RunStatus::Completed);
    assert!(regen.started_at >= running.finished_at, "one run at a time");
}

#[tokio::test]
async fn sessions_are_listed_newest_first() {
    let (_fake, server) = setup("list-order").await;
    let mut made = Vec::new();
    for _ in 0..3 {
        made.push(server.create_session().await);
    }
    let (_, list) = server.get("/sessions").await;
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    made.reverse();
    assert_eq!(ids, made);
}
