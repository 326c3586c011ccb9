//! Regenerate and retry-now through the one dispatch path: supersession, `if_last_run`,
//! the atomic claim and its refusals, resend vs continuation, held prompts.
use testkit as common;

use app::wire::{
    ErrorCode, PromptId, ProvenanceKind, Receipt, RetryReceipt, Role, RunKind, RunStatus,
};
use common::fake::Script;
use common::{held_behind_a_failure, setup, TestServer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn fail_401() -> Script {
    Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {"message": "bad key"}}),
    }
}

fn cut_after(words: &[&str]) -> Script {
    Script::Stream {
        deltas: words.iter().map(|w| w.to_string()).collect(),
        every: Duration::from_millis(5),
        finish: false,
    }
}

async fn retry(server: &TestServer, sid: &str) -> (u16, Value) {
    server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await
}

#[tokio::test]
async fn regenerate_supersedes_later_messages_and_reruns_from_the_anchor() {
    let (fake, server) = setup("regen").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "first").await;
    server.wait_run_end(&first.run_id).await;
    let second = server.send(&sid, "second").await;
    server.wait_run_end(&second.run_id).await;
    let before = server.detail(&sid).await;
    assert_eq!(before.messages.len(), 4);

    fake.push(Script::reply(&["again"]));
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", first.message_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let receipt: Receipt = serde_json::from_value(body).unwrap();
    assert_eq!(
        receipt.message_id, first.message_id,
        "no new operator message"
    );
    let superseded: Vec<&str> = before.messages[1..].iter().map(|m| m.id.as_str()).collect();
    assert_eq!(receipt.superseded, superseded);
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(
        (run.status, run.kind, run.attempt),
        (RunStatus::Completed, RunKind::Regenerate, 2)
    );

    let after = server.detail(&sid).await;
    let visible: Vec<(&str, Role)> = after
        .messages
        .iter()
        .map(|m| (m.content.as_str(), m.role))
        .collect();
    assert_eq!(
        visible,
        vec![("first", Role::Operator), ("again", Role::Agent)]
    );
    assert_eq!(
        after.messages[0], before.messages[0],
        "the anchor row is untouched"
    );
    let all = server
        .get(&format!("/sessions/{sid}?include_superseded=true"))
        .await
        .1;
    let all = all["messages"].as_array().unwrap();
    assert_eq!(all.len(), 5, "superseded messages are kept");
    assert_eq!(all.iter().filter(|m| m["superseded"] == true).count(), 3);
    // The provider saw only the anchor prompt.
    assert_eq!(
        fake.seen().last().unwrap().body["messages"],
        json!([{"role": "user", "content": "first"}])
    );
}

#[tokio::test]
async fn regenerate_refuses_what_is_not_an_operator_prompt_of_the_session() {
    let (_fake, server) = setup("regen-bad").await;
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&r.run_id).await;
    let reply = run.reply_message_id.unwrap();
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{reply}/regenerate"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some(ErrorCode::InvalidRequest.as_str()))
    );
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/m_nope/regenerate"),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some(ErrorCode::NotFound.as_str()))
    );
    let other = server.create_session().await;
    let (status, _) = server
        .post(
            &format!("/sessions/{other}/messages/{}/regenerate", r.message_id),
            json!({}),
        )
        .await;
    assert_eq!(
        status, 404,
        "a message of another session is not found here"
    );
    assert_eq!(
        server.detail(&sid).await.runs.len(),
        1,
        "nothing was dispatched"
    );
}

#[tokio::test]
async fn a_tabs_regenerate_carries_its_tab_and_a_bad_tab_id_changes_nothing() {
    let (fake, server) = setup("regen-tab").await;
    fake.push(fail_401());
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    server.wait_run_end(&r.run_id).await;
    let path = format!("/sessions/{sid}/messages/{}/regenerate", r.message_id);
    for bad in [
        "Tab-1",
        "tab-",
        "tab-1; drop",
        "window-1",
        &format!("tab-{}", "a".repeat(33)),
    ] {
        let (status, body) = server
            .post(&path, json!({"if_last_run": r.run_id, "from": bad}))
            .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (422, Some(ErrorCode::InvalidRequest.as_str())),
            "{bad}"
        );
    }
    assert_eq!(
        server.detail(&sid).await.runs.len(),
        1,
        "nothing was dispatched"
    );
    // The timeline tells this tab's retry from another tab's by it.
    let (status, body) = server
        .post(&path, json!({"if_last_run": r.run_id, "from": "tab-3f2a"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let run = server.run(body["run_id"].as_str().unwrap()).await;
    let p = run.provenance.expect("a regenerate's provenance");
    assert_eq!(p.from.as_deref(), Some("tab-3f2a"));
    assert_eq!(p.manual, None, "a tab's Tier 2 is not the operator's click");
}

#[tokio::test]
async fn concurrent_regenerates_with_one_if_last_run_start_exactly_one_run() {
    let (fake, server) = setup("regen-race").await;
    fake.push(fail_401());
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Failed
    );
    let server = Arc::new(server);
    let calls = (0..16).map(|_| {
        let server = server.clone();
        let (sid, mid, rid) = (sid.clone(), r.message_id.clone(), r.run_id.clone());
        tokio::spawn(async move {
            server
                .post(
                    &format!("/sessions/{sid}/messages/{mid}/regenerate"),
                    json!({"if_last_run": rid}),
                )
                .await
        })
    });
    let results: Vec<(u16, Value)> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let accepted = results.iter().filter(|(s, _)| *s == 202).count();
    assert_eq!(accepted, 1, "{results:?}");
    for (status, body) in results.iter().filter(|(s, _)| *s != 202) {
        assert_eq!(
            (*status, body["error"]["code"].as_str()),
            (409, Some(ErrorCode::RegenerateStale.as_str()))
        );
    }
    assert_eq!(server.detail(&sid).await.runs.len(), 2, "one new run");
    // A stale token after that run went through is still refused.
    let (status, _) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", r.message_id),
            json!({"if_last_run": r.run_id}),
        )
        .await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn retry_refuses_when_nothing_failed_and_while_busy() {
    let (fake, server) = setup("retry-refuse").await;
    let sid = server.create_session().await;
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::RetryNothingFailed.as_str())),
        "no turn yet"
    );
    let r = server.send(&sid, "ok").await;
    server.wait_run_end(&r.run_id).await;
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::RetryNothingFailed.as_str())),
        "completed"
    );

    fake.push(Script::slow(100, Duration::from_millis(10)));
    let r = server.send(&sid, "long").await;
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::RetryBusy.as_str())),
        "running"
    );
    server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", r.run_id),
            json!({}),
        )
        .await;
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::RetryNothingFailed.as_str())),
        "cancelled"
    );
    let (status, _) = retry(&server, "s_nope").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_failed_turn_without_output_is_resent_once_for_concurrent_clicks() {
    let (fake, server) = setup("resend").await;
    fake.push(fail_401());
    let sid = server.create_session().await;
    let r = server.send(&sid, "same prompt").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Failed
    );
    fake.push(Script::slow(20, Duration::from_millis(10)));
    let server = Arc::new(server);
    let calls = (0..8).map(|_| {
        let (server, sid) = (server.clone(), sid.clone());
        tokio::spawn(async move { retry(&server, &sid).await })
    });
    let results: Vec<(u16, Value)> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let ok: Vec<&Value> = results
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    assert_eq!(ok.len(), 1, "{results:?}");
    for (status, body) in results.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*status, 409);
        let code = body["error"]["code"].as_str().unwrap();
        assert!(
            code == ErrorCode::RetryBusy.as_str() || code == ErrorCode::RetryNothingFailed.as_str(),
            "{code}"
        );
    }
    let receipt: RetryReceipt = serde_json::from_value(ok[0].clone()).unwrap();
    assert_eq!(receipt.kind, RunKind::Resend);
    assert_eq!(receipt.prompt_id, format!("{}~resume-1", r.message_id));
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(
        (run.status, run.anchor_message_id.as_str()),
        (RunStatus::Completed, r.message_id.as_str())
    );
    let p = run.provenance.unwrap();
    assert_eq!(
        (
            p.kind.clone(),
            p.prompt_id.as_ref().map(|id| id.as_str()),
            p.attempt,
            p.manual
        ),
        (
            ProvenanceKind::AutoResume,
            Some(r.message_id.as_str()),
            Some(1),
            Some(true)
        )
    );

    let detail = server.detail(&sid).await;
    assert_eq!(
        detail
            .messages
            .iter()
            .filter(|m| m.role == Role::Operator)
            .count(),
        1,
        "no new operator message"
    );
    assert_eq!(
        detail.messages.len(),
        2,
        "the empty failed reply is superseded"
    );
    assert_eq!(fake.seen().len(), 2);
    assert_eq!(
        fake.seen()[1].body["messages"],
        json!([{"role": "user", "content": "same prompt"}])
    );
}

#[tokio::test]
async fn a_failed_turn_with_output_gets_a_continuation_and_attempts_count_up() {
    let (fake, server) = setup("continue").await;
    fake.push(cut_after(&["half ", "done"]));
    let sid = server.create_session().await;
    let r = server.send(&sid, "write a lot").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Failed
    );

    fake.push(cut_after(&["more"]));
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(status, 200, "{body}");
    let first: RetryReceipt = serde_json::from_value(body).unwrap();
    assert_eq!(
        (first.kind, first.prompt_id.clone()),
        (
            RunKind::Continuation,
            PromptId::of_message(&r.message_id).resume(1)
        )
    );
    assert_eq!(
        server.wait_run_end(&first.run_id).await.status,
        RunStatus::Failed
    );

    fake.push(Script::reply(&["finished"]));
    let (_, body) = retry(&server, &sid).await;
    let second: RetryReceipt = serde_json::from_value(body).unwrap();
    assert_eq!(
        second.prompt_id,
        PromptId::of_message(&r.message_id).resume(2),
        "attempt ids count up per prompt"
    );
    assert_eq!(
        server.wait_run_end(&second.run_id).await.status,
        RunStatus::Completed
    );

    let detail = server.detail(&sid).await;
    let contents: Vec<&str> = detail.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents[0], "write a lot");
    assert_eq!(contents[1], "half done", "the partial reply is kept");
    assert!(
        contents[2].contains("cut off by stream interrupted"),
        "{}",
        contents[2]
    );
    let cont = &detail.messages[2];
    assert_eq!(cont.role, Role::Operator);
    assert_eq!(cont.provenance.as_ref().unwrap().manual, Some(true));
    // The model saw its partial reply, then the continuation.
    let sent = &fake.seen()[1].body["messages"];
    assert_eq!(
        sent[1],
        json!({"role": "assistant", "content": "half done"})
    );
    assert!(sent[2]["content"]
        .as_str()
        .unwrap()
        .starts_with("Your previous turn was cut off"));
}

#[tokio::test]
async fn prompts_queued_behind_a_failure_are_held_until_its_retry_completes() {
    let (fake, server) = setup("held").await;
    let sid = server.create_session().await;
    let (_failed, queued) = held_behind_a_failure(&fake, &server, &sid).await;
    assert_eq!(
        server.detail(&sid).await.session.status,
        app::wire::SessionStatus::Idle
    );

    fake.push(Script::reply(&["one done"]))
        .push(Script::reply(&["two done"]));
    let (status, body) = retry(&server, &sid).await;
    assert_eq!(
        status, 200,
        "held prompts do not make the session busy: {body}"
    );
    let receipt: RetryReceipt = serde_json::from_value(body).unwrap();
    let retried = server.wait_run_end(&receipt.run_id).await;
    let two = server.wait_run_end(&queued.run_id).await;
    assert_eq!(two.status, RunStatus::Completed);
    assert!(
        two.started_at.unwrap() >= retried.finished_at.unwrap(),
        "the retry ran first"
    );
    let detail = server.detail(&sid).await;
    let contents: Vec<&str> = detail.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        contents,
        vec!["one", "two", "one done", "two done"],
        "the held prompt was not superseded"
    );
}

#[tokio::test]
async fn release_lets_held_prompts_go_on() {
    let (fake, server) = setup("release").await;
    let sid = server.create_session().await;
    let (_failed, queued) = held_behind_a_failure(&fake, &server, &sid).await;
    let (status, body) = server
        .post(&format!("/sessions/{sid}/release"), json!({}))
        .await;
    assert_eq!(
        (status, body["released"].clone()),
        (200, json!([queued.run_id]))
    );
    assert_eq!(
        server.wait_run_end(&queued.run_id).await.status,
        RunStatus::Completed
    );
}

#[tokio::test]
async fn three_held_prompts_are_released_in_order_with_their_ids() {
    let (fake, server) = setup("release-three").await;
    let sid = server.create_session().await;
    // The first turn waits out an advised 2 s in Tier 1, then fails; three prompts queue
    // behind it meanwhile (checked: it is still running once they are in).
    fake.push(Script::Status {
        code: 503,
        headers: vec![("retry-after-ms", "2000".into())],
        body: json!({"error": {"type": "server_error", "message": "busy"}}),
    })
    .push(fail_401());
    let failing = server.send(&sid, "one").await;
    let queued: Vec<Receipt> = vec![
        server.send(&sid, "two").await,
        server.send(&sid, "three").await,
        server.send(&sid, "four").await,
    ];
    assert_eq!(
        server.run(failing.run_id.as_str()).await.status,
        RunStatus::Running,
        "the three prompts were posted while the first turn ran"
    );
    assert_eq!(
        server.wait_run_end(&failing.run_id).await.status,
        RunStatus::Failed
    );
    let ids: Vec<&str> = queued.iter().map(|r| r.run_id.as_str()).collect();
    for id in &ids {
        let held = server.run(id).await;
        assert_eq!(
            (held.status, held.held_by.as_ref().map(|id| id.as_str())),
            (RunStatus::Queued, Some(failing.run_id.as_str())),
            "{id} is held behind the failure"
        );
    }

    fake.push(Script::reply(&["two done"]))
        .push(Script::reply(&["three done"]))
        .push(Script::reply(&["four done"]));
    let (status, body) = server
        .post(&format!("/sessions/{sid}/release"), json!({}))
        .await;
    assert_eq!((status, body["released"].clone()), (200, json!(ids)));
    let mut ended = Vec::new();
    for id in &ids {
        let run = server.wait_run_end(id).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
        ended.push(run);
    }
    for pair in ended.windows(2) {
        assert!(
            pair[1].started_at.unwrap() >= pair[0].finished_at.unwrap(),
            "one after the other, in order"
        );
    }
    let prompts: Vec<String> = fake
        .seen()
        .iter()
        .skip(fake.seen().len() - 3)
        .map(|s| {
            let messages = s.body["messages"].as_array().unwrap();
            messages.last().unwrap()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(prompts, ["two", "three", "four"]);
    let (status, body) = server
        .post(&format!("/sessions/{sid}/release"), json!({}))
        .await;
    assert_eq!((status, body), (200, json!({"released": []})));
}
