//! Background retries (`auto_retry: "background"`): a retryable failure waits on the
//! session row and fires from the server — after its delay, after a restart, once — and
//! every surface can see it and end it.
use testkit as common;

use app::wire::{
    ErrorCode, Event, ProvenanceKind, RetryClass, RunKind, RunStatus, Session, WaitingRetry,
};
use common::fake::{FakeProvider, Script};
use common::{config, run_ended, temp_dir, TestServer};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);

fn overloaded() -> Script {
    Script::Status {
        code: 503,
        headers: vec![],
        body: json!({"error": {"message": "overloaded"}}),
    }
}

/// A server whose background retries wait `base_ms` first (one Tier 1 attempt, to be quick).
fn cfg(dir: &Path, fake: &FakeProvider, base_ms: u64) -> server::config::Config {
    let mut c = config(dir, &fake.url);
    c.tier1_max_attempts = 1;
    c.tier2_base_ms = base_ms;
    c
}

async fn background_session(server: &TestServer) -> String {
    let (status, body) = server
        .post("/sessions", json!({"auto_retry": "background"}))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["auto_retry"], "background");
    body["id"].as_str().unwrap().to_string()
}

async fn session(server: &TestServer, sid: &str) -> Session {
    server.detail(sid).await.session
}

/// Polls until the session's waiting retry is set, and answers it.
async fn waiting(server: &TestServer, sid: &str) -> WaitingRetry {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(w) = session(server, sid).await.waiting_retry {
            return w;
        }
        assert!(Instant::now() < deadline, "no waiting retry appeared");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_retryable_failure_waits_then_fires_on_the_server_and_completes() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-fire"), &fake, 600)).await;
    fake.push(overloaded());
    let sid = background_session(&server).await;
    let mut sse = server.events(&sid, None).await;
    let failed_at = Instant::now();
    let first = server.send(&sid, "long job").await;
    assert_eq!(
        server.wait_run_end(&first.run_id).await.status,
        RunStatus::Failed
    );

    let w = waiting(&server, &sid).await;
    assert_eq!((w.attempt, w.reason.clone()), (1, RetryClass::Overloaded));
    let seen = sse
        .until(
            WAIT,
            |e| matches!(e, Event::Session(s) if s.waiting_retry.is_some()),
        )
        .await;
    let Event::Session(announced) = &seen.last().unwrap().1 else {
        unreachable!()
    };
    assert_eq!(
        announced.waiting_retry.as_ref(),
        Some(&w),
        "announced on SSE"
    );

    // It fires by itself (no browser here), as a resend of the same prompt, and completes.
    let seen = sse
        .until(WAIT, |e| {
            matches!(e, Event::Run(r) if r.id != first.run_id && r.status == RunStatus::Completed)
        })
        .await;
    assert!(
        failed_at.elapsed() >= Duration::from_millis(600),
        "not before its delay"
    );
    let Event::Run(retried) = &seen.last().unwrap().1 else {
        unreachable!()
    };
    assert_eq!(retried.kind, RunKind::Resend);
    assert_eq!(retried.anchor_message_id, first.message_id);
    let p = retried.provenance.clone().expect("provenance");
    assert_eq!(
        (p.kind.clone(), p.manual),
        (ProvenanceKind::AutoResume, Some(false))
    );
    assert_eq!(session(&server, &sid).await.waiting_retry, None);
    assert_eq!(fake.seen().len(), 2, "one failed request, one retry");
}

#[tokio::test]
async fn a_failing_background_retry_counts_on_and_backs_off() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-again"), &fake, 300)).await;
    fake.push(overloaded()).push(overloaded());
    let sid = background_session(&server).await;
    server.send(&sid, "go").await;
    let first = waiting(&server, &sid).await;
    assert_eq!(first.attempt, 1);
    // The first retry fails too: the next one is attempt 2, twice the wait.
    let deadline = Instant::now() + WAIT;
    let second = loop {
        match session(&server, &sid).await.waiting_retry {
            Some(w) if w.attempt == 2 => break w,
            _ => {}
        }
        assert!(Instant::now() < deadline, "no second waiting retry");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let now = common::now_ms();
    assert!(
        second.fires_at - now <= 600 && second.fires_at - now > 300,
        "{second:?}"
    );
    let detail = server.detail(&sid).await;
    let last = detail.runs.last().unwrap();
    assert_eq!(last.status, RunStatus::Failed);
}

#[tokio::test]
async fn a_waiting_retry_survives_a_restart_and_fires_after_it() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("bg-restart");
    let mut server = TestServer::start(cfg(&dir, &fake, 1500)).await;
    fake.push(overloaded());
    let sid = background_session(&server).await;
    let first = server.send(&sid, "survive").await;
    let w = waiting(&server, &sid).await;
    server.stop().await;

    let server = TestServer::start(cfg(&dir, &fake, 1500)).await;
    assert_eq!(session(&server, &sid).await.waiting_retry, Some(w.clone()));
    let deadline = Instant::now() + WAIT;
    loop {
        let runs = server.detail(&sid).await.runs;
        if runs.len() == 2 && runs[1].status == RunStatus::Completed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the retry never completed: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(common::now_ms() >= w.fires_at, "fired at its time");
    assert_eq!(
        server.detail(&sid).await.runs[0].id,
        first.run_id,
        "the failed run stays"
    );
}

#[tokio::test]
async fn retry_now_takes_the_waiting_retry_over_and_only_one_run_goes() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-now"), &fake, 1500)).await;
    fake.push(overloaded());
    let sid = background_session(&server).await;
    server.send(&sid, "now please").await;
    waiting(&server, &sid).await;
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let rid = body["run_id"].as_str().unwrap().to_string();
    assert_eq!(
        session(&server, &sid).await.waiting_retry,
        None,
        "taken over"
    );
    assert_eq!(server.wait_run_end(&rid).await.status, RunStatus::Completed);
    // Past the time it would have fired: nothing more ran.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(server.detail(&sid).await.runs.len(), 2);
    assert_eq!(fake.seen().len(), 2);
}

#[tokio::test]
async fn cancel_ends_the_waiting_retry_and_an_explicit_retry_still_works() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-cancel"), &fake, 1000)).await;
    fake.push(overloaded());
    let sid = background_session(&server).await;
    let first = server.send(&sid, "then stop").await;
    waiting(&server, &sid).await;
    let path = format!("/sessions/{sid}/waiting-retry");
    let (status, body) = server.delete(&path).await;
    assert_eq!(status, 200, "{body}");
    let s: Session = serde_json::from_value(body).unwrap();
    assert_eq!(s.waiting_retry, None);
    let (status, body) = server.delete(&path).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::Conflict.as_str()))
    );
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(server.detail(&sid).await.runs.len(), 1, "it never fired");
    // The failed turn is still there to retry by hand.
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let _ = first;
}

#[tokio::test]
async fn leaving_background_ends_the_waiting_retry_and_a_cancelled_run_never_waits() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-patch"), &fake, 1000)).await;
    fake.push(overloaded());
    let sid = background_session(&server).await;
    server.send(&sid, "x").await;
    waiting(&server, &sid).await;
    let (status, body) = server
        .patch(
            &format!("/sessions/{sid}"),
            json!({"auto_retry": "browser"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let s: Session = serde_json::from_value(body).unwrap();
    assert_eq!(s.waiting_retry, None);

    // Stop during a turn: cancelled, not failed, so nothing waits.
    server
        .patch(
            &format!("/sessions/{sid}"),
            json!({"auto_retry": "background"}),
        )
        .await;
    fake.push(Script::slow(200, Duration::from_millis(20)));
    let mut sse = server.events(&sid, None).await;
    let r = server.send(&sid, "long").await;
    sse.until(WAIT, |e| matches!(e, Event::Delta(_))).await;
    let (status, _) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", r.run_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 200);
    sse.until(WAIT, run_ended(&r.run_id)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(session(&server, &sid).await.waiting_retry, None);
}

fn bad_key() -> Script {
    Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {"message": "bad key"}}),
    }
}

/// Waits until the wall clock is `ms` past `at` (a waiting retry's time, say).
async fn past(at: i64, ms: i64) {
    while common::now_ms() < at + ms {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_newer_prompt_ends_the_waiting_retry_and_it_never_fires_on_that_turn() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-newer"), &fake, 1500)).await;
    fake.push(overloaded()).push(bad_key());
    let sid = background_session(&server).await;
    let a = server.send(&sid, "A").await;
    let w = waiting(&server, &sid).await;
    // B fails in a way no retry helps: nothing may send it again.
    let b = server.send(&sid, "B").await;
    assert_eq!(
        server.wait_run_end(&b.run_id).await.status,
        RunStatus::Failed
    );
    assert_eq!(
        session(&server, &sid).await.waiting_retry,
        None,
        "the newer prompt ended the retry waiting for A"
    );
    past(w.fires_at, 1000).await;
    let runs = server.detail(&sid).await.runs;
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [a.run_id.as_str(), b.run_id.as_str()], "{runs:#?}");
    assert_eq!(fake.seen().len(), 2, "A once, B once");
}

#[tokio::test]
async fn released_prompts_end_the_waiting_retry_of_the_turn_they_were_held_behind() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-release"), &fake, 1500)).await;
    // A streams a little, slowly, then is cut (retryable); B queues behind it and is held.
    fake.push(Script::Stream {
        deltas: vec!["half".into()],
        every: Duration::from_millis(300),
        finish: false,
    })
    .push(bad_key());
    let sid = background_session(&server).await;
    let a = server.send(&sid, "A").await;
    let b = server.send(&sid, "B").await;
    assert_eq!(
        server.wait_run_end(&a.run_id).await.status,
        RunStatus::Failed
    );
    let w = waiting(&server, &sid).await;
    assert_eq!(
        server
            .run(&b.run_id)
            .await
            .held_by
            .as_ref()
            .map(|id| id.as_str()),
        Some(a.run_id.as_str())
    );
    let (status, body) = server
        .post(&format!("/sessions/{sid}/release"), json!({}))
        .await;
    assert_eq!((status, body["released"].clone()), (200, json!([b.run_id])));
    assert_eq!(
        server.wait_run_end(&b.run_id).await.status,
        RunStatus::Failed
    );
    assert_eq!(session(&server, &sid).await.waiting_retry, None);
    past(w.fires_at, 1000).await;
    assert_eq!(server.detail(&sid).await.runs.len(), 2);
    assert_eq!(fake.seen().len(), 2, "B was not sent again");
}

#[tokio::test]
async fn a_background_retry_continues_a_tool_turn_without_running_its_tool_again() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(cfg(&temp_dir("bg-tools"), &fake, 300)).await;
    fake.push(Script::call(
        "Looking. ",
        "c1",
        "mulligan__list_sessions",
        json!({}),
    ))
    .push(overloaded())
    .push(Script::reply(&["Done."]));
    let sid = background_session(&server).await;
    let first = server.send(&sid, "list them").await;
    let failed = server.wait_run_end(&first.run_id).await;
    assert_eq!(
        (failed.status, failed.tools_executed),
        (RunStatus::Failed, 1)
    );
    waiting(&server, &sid).await;

    let deadline = Instant::now() + WAIT;
    let next = loop {
        let runs = server.detail(&sid).await.runs;
        if let Some(r) = runs.get(1).filter(|r| !r.status.is_active()) {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no retry ended: {runs:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (next.status, next.kind, next.tools_executed),
        (RunStatus::Completed, RunKind::Continuation, 0),
        "{next:#?}"
    );
    let p = next.provenance.clone().expect("provenance");
    assert_eq!(
        (p.kind, p.manual),
        (ProvenanceKind::AutoResume, Some(false))
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 3, "the call, the failed step, the continuation");
    let sent = seen[2].body["messages"].as_array().unwrap().clone();
    let result = sent
        .iter()
        .find(|m| m["tool_call_id"] == "c1")
        .expect("the recorded result goes with the continuation");
    assert_eq!(result["role"], "tool");
    // One call in the whole session: the continuation asked for none and ran none.
    let calls: usize = server
        .detail(&sid)
        .await
        .messages
        .iter()
        .flat_map(|m| m.parts.iter().flatten())
        .filter(|p| matches!(p, app::wire::Part::ToolCall { .. }))
        .count();
    assert_eq!(calls, 1);
}
