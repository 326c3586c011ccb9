//! `POST /sessions/:sid/runs/:rid/dismiss-retry`: the operator's cancel of Tier 2 is kept on
//! the failed run and announced, is refused on a run that did not fail, and leaves Retry now
//! and Regenerate working.
use testkit as common;

use app::wire::{ErrorCode, Event, Receipt, RetryReceipt, Run, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, now_ms, temp_dir, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

async fn setup(tag: &str) -> (FakeProvider, TestServer) {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir(tag), &fake.url)).await;
    (fake, server)
}

fn overloaded() -> Script {
    Script::Status {
        code: 529,
        headers: vec![],
        body: json!({"error": {"type": "overloaded_error", "message": "busy"}}),
    }
}

async fn dismiss(
    server: &TestServer,
    sid: &str,
    rid: &(impl std::fmt::Display + ?Sized),
) -> (u16, Value) {
    server
        .post(
            &format!("/sessions/{sid}/runs/{rid}/dismiss-retry"),
            json!({}),
        )
        .await
}

/// A session whose first turn failed (retryable): its id and the failed run.
async fn failed_turn(fake: &FakeProvider, server: &TestServer) -> (String, Receipt, Run) {
    fake.set_default(overloaded());
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.retry.as_ref().is_some_and(|c| c.retryable), "{run:?}");
    assert_eq!(run.retry_dismissed_at, None, "not dismissed yet");
    (sid, r, run)
}

#[tokio::test]
async fn dismissing_a_failed_run_is_kept_announced_and_idempotent() {
    let (fake, server) = setup("dismiss").await;
    let (sid, r, _) = failed_turn(&fake, &server).await;
    let mut events = server.events(&sid, None).await;

    let before = now_ms();
    let (status, body) = dismiss(&server, &sid, &r.run_id).await;
    assert_eq!(status, 200, "{body}");
    let run: Run = serde_json::from_value(body).unwrap();
    let at = run.retry_dismissed_at.expect("retry_dismissed_at is set");
    assert!(at >= before && at <= now_ms(), "{at}");
    assert_eq!(run.status, RunStatus::Failed, "still failed");

    // Every open tab hears it.
    let seen = events
        .until(
            Duration::from_secs(5),
            |e| matches!(e, Event::Run(x) if x.id == r.run_id && x.retry_dismissed_at.is_some()),
        )
        .await
        .pop()
        .unwrap();
    assert!(matches!(seen.1, Event::Run(x) if x.retry_dismissed_at == Some(at)));

    // A reload (the snapshot) and the run itself carry it.
    let detail = server.detail(&sid).await;
    assert_eq!(detail.runs[0].retry_dismissed_at, Some(at));
    assert_eq!(server.run(&r.run_id).await.retry_dismissed_at, Some(at));

    // A second dismiss (another tab) keeps the first time.
    let (status, body) = dismiss(&server, &sid, &r.run_id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["retry_dismissed_at"], json!(at));
}

#[tokio::test]
async fn dismiss_is_refused_on_runs_that_did_not_fail_and_unknown_ids() {
    let (fake, server) = setup("dismiss-refused").await;
    fake.push(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let ok = server.send(&sid, "hi").await;
    assert_eq!(
        server.wait_run_end(&ok.run_id).await.status,
        RunStatus::Completed
    );
    let (status, body) = dismiss(&server, &sid, &ok.run_id).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::Conflict.as_str())),
        "{body}"
    );
    assert_eq!(
        server.run(&ok.run_id).await.retry_dismissed_at,
        None,
        "unchanged"
    );

    // A running run is not failed either.
    fake.push(Script::slow(200, Duration::from_millis(20)));
    let running = server.send(&sid, "long").await;
    server
        .wait_run_status(&running.run_id, RunStatus::Running)
        .await;
    let (status, body) = dismiss(&server, &sid, &running.run_id).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::Conflict.as_str())),
        "{body}"
    );
    let (status, _) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", running.run_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 200);

    for (s, r) in [(sid.as_str(), "r-nope"), ("s-nope", ok.run_id.as_str())] {
        let (status, body) = dismiss(&server, s, r).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (404, Some(ErrorCode::NotFound.as_str())),
            "{body}"
        );
    }
    // Another session's run is not found through this one.
    let other = server.create_session().await;
    let (status, body) = dismiss(&server, &other, &ok.run_id).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some(ErrorCode::NotFound.as_str())),
        "{body}"
    );
}

#[tokio::test]
async fn a_dismissed_run_can_still_be_retried_now_and_regenerated() {
    let (fake, server) = setup("dismiss-retry").await;
    let (sid, r, _) = failed_turn(&fake, &server).await;
    let (status, _) = dismiss(&server, &sid, &r.run_id).await;
    assert_eq!(status, 200);

    // Tier 2's Retry now: a Regenerate carrying the dismissed run as `if_last_run`.
    let requests = fake.seen().len();
    fake.push(Script::reply(&["back"]));
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", r.message_id),
            json!({"if_last_run": r.run_id}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let receipt: Receipt = serde_json::from_value(body).unwrap();
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.retry_dismissed_at, None, "a new run starts undismissed");
    assert_eq!(fake.seen().len(), requests + 1, "one new provider request");

    // The session's retry-now too, on a later dismissed failure.
    let again = server.send(&sid, "again").await;
    assert_eq!(
        server.wait_run_end(&again.run_id).await.status,
        RunStatus::Failed
    );
    assert_eq!(dismiss(&server, &sid, &again.run_id).await.0, 200);
    fake.push(Script::reply(&["ok"]));
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let receipt: RetryReceipt = serde_json::from_value(body).unwrap();
    assert_eq!(
        server.wait_run_end(&receipt.run_id).await.status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn a_manual_regenerate_of_a_completed_reply_from_two_tabs_starts_one_run() {
    let (fake, server) = setup("regen-manual").await;
    fake.set_default(Script::reply(&["fine"]));
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Completed
    );
    let path = format!("/sessions/{sid}/messages/{}/regenerate", r.message_id);
    let body = json!({"if_last_run": r.run_id, "manual": true});
    let (a, b) = tokio::join!(
        server.post(&path, body.clone()),
        server.post(&path, body.clone())
    );
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(statuses, [202, 409], "{a:?} {b:?}");
    let refused = if a.0 == 409 { &a.1 } else { &b.1 };
    assert_eq!(
        refused["error"]["code"],
        ErrorCode::RegenerateStale.as_str()
    );
    assert_eq!(server.detail(&sid).await.runs.len(), 2, "one new run");

    // Without `manual`, `if_last_run` still names only a failed run (Tier 2's contract).
    let latest = server.detail(&sid).await.runs[1].id.clone();
    server.wait_run_end(&latest).await;
    let (status, body) = server.post(&path, json!({"if_last_run": latest})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::RegenerateStale.as_str()))
    );
    // With it, the reply the operator saw regenerates.
    let (status, body) = server
        .post(&path, json!({"if_last_run": latest, "manual": true}))
        .await;
    assert_eq!(status, 202, "{body}");
}
