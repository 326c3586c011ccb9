//! Tier 1 against a fake provider over real HTTP: which failures are retried, how long it
//! waits, when it hands off, and that nothing is retried after the first delta.
use testkit as common;

use app::wire::{Event, MessageStatus, RetryClass, RunStatus};
use common::fake::Script;
use common::setup;
use serde_json::json;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(10);

fn status(code: u16, headers: Vec<(&'static str, String)>) -> Script {
    Script::Status {
        code,
        headers,
        body: json!({"error": {"message": format!("status {code}")}}),
    }
}

#[tokio::test]
async fn two_503s_then_success_completes_with_three_attempts() {
    let (fake, server) = setup("flaky").await;
    fake.push(status(503, vec![]))
        .push(status(503, vec![]))
        .push(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "hi").await;
    let events = sse.until(WAIT, common::run_ended(&receipt.run_id)).await;
    let waits: Vec<u32> = events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Attempt(a) => Some(a.n),
            _ => None,
        })
        .collect();
    assert_eq!(
        waits,
        vec![2, 3],
        "each wait is announced before its attempt"
    );
    let run = server.run(&receipt.run_id).await;
    assert_eq!((run.status, run.tier1_attempts), (RunStatus::Completed, 3));
    let (_, detail) = server.get(&format!("/runs/{}", receipt.run_id)).await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3);
    assert!(attempts[0]["error"].as_str().unwrap().contains("503"));
    assert!(attempts[0]["retry_in_ms"].is_i64());
    assert!(attempts[2].get("error").is_none());
    assert_eq!(fake.seen().len(), 3);
}

#[tokio::test]
async fn a_short_retry_after_is_slept_exactly() {
    let (fake, server) = setup("retry-after").await;
    fake.push(status(429, vec![("retry-after", "2".into())]))
        .push(Script::reply(&["ok"]));
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= Duration::from_millis(2000),
        "second request came after {gap:?}"
    );
}

#[tokio::test]
async fn retry_after_ms_is_honoured() {
    let (fake, server) = setup("retry-after-ms").await;
    fake.push(status(503, vec![("retry-after-ms", "700".into())]))
        .push(Script::reply(&["ok"]));
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    assert_eq!(
        server.wait_run_end(&receipt.run_id).await.status,
        RunStatus::Completed
    );
    let seen = fake.seen();
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(700));
}

#[tokio::test]
async fn a_long_retry_after_fails_at_once_with_retry_after_until() {
    let (fake, server) = setup("quota").await;
    fake.set_default(status(429, vec![("retry-after", "3000".into())]));
    let sid = server.create_session().await;
    let before = server::clock::now_ms();
    let started = Instant::now();
    let receipt = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "handed off in {:?}",
        started.elapsed()
    );
    assert_eq!(run.status, RunStatus::Failed);
    let retry = run.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::RateLimited, true)
    );
    let until = retry
        .retry_after_until
        .expect("absolute next-eligible time");
    let want = before + 3_000_000;
    assert!(
        (want..want + 2_000).contains(&until),
        "until {until}, want ≈ {want}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.seen().len(), 1, "exactly one request");
    let reply = server.detail(&sid).await.messages.pop().unwrap();
    assert_eq!(reply.retry.unwrap().retry_after_until, Some(until));
}

#[tokio::test]
async fn permanent_failures_are_not_retried() {
    let (fake, server) = setup("auth").await;
    fake.set_default(status(401, vec![]));
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    let retry = run.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::AuthFailed, false)
    );
    assert_eq!(run.tier1_attempts, 1);
    assert_eq!(fake.seen().len(), 1);
}

#[tokio::test]
async fn a_stream_cut_after_the_first_delta_is_never_retried_in_run() {
    let (fake, server) = setup("cut").await;
    fake.push(Script::Stream {
        deltas: vec!["part ".into(), "ial".into()],
        every: Duration::from_millis(5),
        finish: false,
    });
    fake.set_default(Script::reply(&["should not be asked"]));
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let retry = run.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::StreamInterrupted, true)
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fake.seen().len(), 1, "one request");
    let reply = server.detail(&sid).await.messages.pop().unwrap();
    assert_eq!(reply.status, Some(MessageStatus::Failed));
    assert_eq!(reply.content, "part ial", "partial text kept");
}

#[tokio::test]
async fn cancel_aborts_a_tier1_sleep_at_once() {
    let (fake, server) = setup("cancel-sleep").await;
    fake.push(status(503, vec![("retry-after", "20".into())]));
    fake.set_default(Script::reply(&["too late"]));
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "hi").await;
    sse.until(
        WAIT,
        |e| matches!(e, Event::Attempt(a) if a.retry_in_ms == 20_000),
    )
    .await;
    let started = Instant::now();
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", receipt.run_id),
            json!({}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "cancel took {:?}",
        started.elapsed()
    );
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")));
    // The runner stopped sleeping: the session is free at once, so a new prompt starts now
    // (it would stay queued behind a runner still asleep for the rest of the 20 s). It then
    // honours the provider's advice itself: the cooldown holds it, with no request.
    let next = server.send(&sid, "again").await;
    server
        .wait_run_status(&next.run_id, RunStatus::Running)
        .await;
    assert_eq!(fake.seen().len(), 1, "no request after the cancel");
}
