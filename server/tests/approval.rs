//! Approval before a tool acts (CONTRACT §8), against the scripted provider, the built-in
//! `mulligan` tools and the reference filesystem MCP server: a call that writes waits,
//! durably, until the operator decides; nothing reaches the tool before Allow; Deny tells
//! the model; a decision is taken once; a retry never asks twice.
use testkit as common;

use app::wire::{
    Decision, ErrorCode, Part, RetryClass, RunKind, RunStatus, SessionStatus, ToolCall,
    ToolCallStatus,
};
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The calls of a run's reply, in order.
async fn calls_of(
    server: &TestServer,
    sid: &str,
    run_id: &(impl std::fmt::Display + ?Sized),
) -> Vec<ToolCall> {
    let run_id = run_id.to_string();
    server
        .detail(sid)
        .await
        .messages
        .iter()
        .find(|m| m.run_id.as_ref().is_some_and(|id| *id == run_id))
        .expect("the run's reply")
        .parts
        .iter()
        .flatten()
        .filter_map(|p| match p {
            Part::ToolCall { call } => Some(call.clone()),
            Part::Text { .. } => None,
        })
        .collect()
}

/// Scripts a step that renames the session (a tool that writes: it asks), then `answer`.
fn renames(fake: &FakeProvider, id: &str, title: &str, answer: &[&str]) {
    fake.push(Script::call(
        "Renaming. ",
        id,
        "mulligan__rename_session",
        json!({"title": title}),
    ));
    fake.push(Script::reply(answer));
}

/// Sends a prompt and waits until its run waits for approval; answers the run id and the
/// waiting call.
async fn until_waiting(server: &TestServer, sid: &str, prompt: &str) -> (String, ToolCall) {
    let sent = server.send(sid, prompt).await;
    let run = server
        .wait_run_status(&sent.run_id, RunStatus::AwaitingApproval)
        .await;
    let calls = calls_of(server, sid, &run.id).await;
    let call = calls
        .into_iter()
        .find(|c| c.status == ToolCallStatus::AwaitingApproval)
        .expect("a waiting call");
    (run.id.to_string(), call)
}

async fn decide(
    server: &TestServer,
    run: &(impl std::fmt::Display + ?Sized),
    call: &(impl std::fmt::Display + ?Sized),
    body: Value,
) -> (u16, Value) {
    server
        .post(&format!("/runs/{run}/tool_calls/{call}/decision"), body)
        .await
}

async fn title(server: &TestServer, sid: &str) -> String {
    server.detail(sid).await.session.title
}

/// The messages of the provider's last request.
fn last_request(fake: &FakeProvider) -> Vec<Value> {
    let body = fake.seen().pop().expect("a request").body;
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_call_that_writes_waits_for_allow_and_then_runs_once() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-allow"), &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "call_r", "Renamed", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;

    // Waiting: asked, with the tool's annotations; nothing ran; the session and the list say so.
    let approval = call.approval.clone().expect("the call asks");
    assert!(approval.decision.is_none() && approval.asked_at > 0);
    assert_eq!(call.annotations.and_then(|a| a.read_only), Some(false));
    assert_eq!(
        title(&server, &sid).await,
        "test",
        "nothing ran before Allow"
    );
    assert_eq!(fake.seen().len(), 1, "no provider request while waiting");
    let detail = server.detail(&sid).await;
    assert_eq!(detail.session.status, SessionStatus::AwaitingApproval);
    let (status, list) = server.get("/approvals").await;
    assert_eq!(status, 200);
    let waiting = list["approvals"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "{list}");
    assert_eq!(waiting[0]["run_id"], run.as_str());
    assert_eq!(waiting[0]["call"]["id"], call.id.as_str());

    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["call"]["approval"]["decision"], "allow_once");
    assert_eq!(body["call"]["approval"]["by"], "api");
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!((ended.steps, ended.tools_executed), (2, 1));
    assert_eq!(title(&server, &sid).await, "Renamed");
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(calls[0].status, ToolCallStatus::Ok, "{calls:#?}");
    assert_eq!(
        calls[0].approval.as_ref().and_then(|a| a.decision),
        Some(Decision::AllowOnce)
    );

    // Decided once: a second decision is refused and changes nothing.
    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "reject_once"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "approval.decided");
    let (_, list) = server.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]));
    assert_eq!(
        server.detail(&sid).await.session.status,
        SessionStatus::Idle
    );
}

#[tokio::test]
async fn deny_sends_nothing_and_the_model_reads_the_refusal_with_its_reason() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-deny"), &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "call_d", "Never", &["Understood."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    let (status, body) = decide(
        &server,
        &run,
        &call.id,
        json!({"decision": "reject_once", "reason": "keep the old title"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["call"]["status"], "denied");
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 0);
    assert_eq!(
        title(&server, &sid).await,
        "test",
        "a denied call never ran"
    );
    let refusal = last_request(&fake)
        .into_iter()
        .find(|m| m["tool_call_id"] == "call_d")
        .expect("the refusal is the call's result");
    let text = refusal["content"].as_str().unwrap();
    assert!(text.contains("operator declined"), "{text}");
    assert!(text.contains("keep the old title"), "{text}");
}

#[tokio::test]
async fn bad_decisions_are_refused_and_change_nothing() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-bad"), &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "call_b", "Renamed", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;

    let cases = [
        (json!({"decision": "maybe"}), 422, "invalid_request"),
        (json!({"decision": "timed_out"}), 422, "invalid_request"),
        (
            json!({"decision": "reject_once", "reason": "x".repeat(2001)}),
            422,
            "invalid_request",
        ),
        (
            json!({"decision": "allow_once", "from": "not a tab"}),
            422,
            "invalid_request",
        ),
    ];
    for (body, want, code) in cases {
        let (status, answer) = decide(&server, &run, &call.id, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (want, Some(code)),
            "{body}: {answer}"
        );
    }
    let (status, answer) =
        decide(&server, &run, "tc_nope", json!({"decision": "allow_once"})).await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = decide(
        &server,
        "r_nope",
        &call.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    // A call of another run: a run of another session, on the same call id.
    let other = server.create_session().await;
    fake.push(Script::reply(&["hi"]));
    let receipt = server.send(&other, "hello").await;
    server.wait_run_end(&receipt.run_id).await;
    let (status, answer) = decide(
        &server,
        &receipt.run_id,
        &call.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, 404, "{answer}");
    assert!(answer["error"]["message"]
        .as_str()
        .unwrap()
        .contains("another run"));

    // Still waiting, undecided, nothing ran.
    let calls = calls_of(&server, &sid, &run).await;
    assert!(calls[0].is_waiting(), "{calls:#?}");
    assert_eq!(title(&server, &sid).await, "test");
    assert_eq!(server.run(&run).await.status, RunStatus::AwaitingApproval);
}

#[tokio::test]
async fn two_decisions_at_once_take_one() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-race"), &fake.url)).await;
    decided_at_once(&fake, &server, &server, "reject_once").await;
}

/// A call waiting on `a`, decided through `a` (allow) and `b` (`second`) at once: one 200,
/// one 409, and the turn goes on once (the call ran at most once).
async fn decided_at_once(fake: &FakeProvider, a: &TestServer, b: &TestServer, second: &str) {
    let sid = a.create_session().await;
    renames(fake, "c1", "Once", &["Done."]);
    let (run, call) = until_waiting(a, &sid, "rename yourself").await;
    let path = format!("/runs/{run}/tool_calls/{}/decision", call.id);
    let (x, y) = tokio::join!(
        a.post(&path, json!({"decision": "allow_once"})),
        b.post(&path, json!({"decision": second})),
    );
    let mut statuses = [x.0, y.0];
    statuses.sort();
    assert_eq!(statuses, [200, 409], "{x:?} {y:?}");
    let ended = a.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed);
    let allowed = [&x, &y]
        .iter()
        .any(|(s, body)| *s == 200 && body["call"]["approval"]["decision"] == "allow_once");
    assert_eq!(
        ended.tools_executed,
        u32::from(allowed),
        "the call ran once if allowed"
    );
    assert_eq!(fake.seen().len(), 2, "the turn went on once");
}

#[tokio::test]
async fn an_agent_token_never_decides() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-agent"), &fake.url)).await;
    let (status, created) = server.post("/sessions", json!({"title": "test"})).await;
    assert_eq!(status, 201);
    let sid = created["id"].as_str().unwrap().to_string();
    let agent = created["agent_token"].as_str().unwrap().to_string();
    renames(&fake, "call_a", "Renamed", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    let http = reqwest::Client::new();
    let url = server.url(&format!("/runs/{run}/tool_calls/{}/decision", call.id));
    let r = http
        .post(&url)
        .bearer_auth(&agent)
        .json(&json!({"decision": "allow_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
    let r = http
        .get(server.url("/approvals"))
        .bearer_auth(&agent)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);

    // Nor through MCP: its own call, with its own token, is refused there too.
    let mcp = |token: &str, args: Value| {
        http.post(format!("{}/mcp", server.base))
            .bearer_auth(token.to_string())
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "decide_tool_call", "arguments": args}}))
            .send()
    };
    let args = json!({"run": run, "call": call.id.as_str(), "decision": "allow_once"});
    let answer: Value = mcp(&agent, args.clone())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("forbidden"), "{text}");
    assert!(server.run(&run).await.status == RunStatus::AwaitingApproval);
    assert_eq!(title(&server, &sid).await, "test");

    // The operator's token decides through MCP.
    let token = server.token.clone();
    let answer: Value = mcp(&token, args).await.unwrap().json().await.unwrap();
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed);
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(
        calls[0].approval.as_ref().and_then(|a| a.by),
        Some(app::wire::DecidedBy::Mcp)
    );

    // Nor on a call of one of its descendants, whose sessions its token otherwise acts on
    // (scripted once the parent's turn took its own answer from the fake).
    let (status, child) = server
        .post("/sessions", json!({"title": "child", "parent_id": sid}))
        .await;
    assert_eq!(status, 201, "{child}");
    let child = child["id"].as_str().unwrap().to_string();
    renames(&fake, "call_c", "Child renamed", &["Done."]);
    let (child_run, child_call) = until_waiting(&server, &child, "rename yourself").await;
    let r = http
        .post(server.url(&format!(
            "/runs/{child_run}/tool_calls/{}/decision",
            child_call.id
        )))
        .bearer_auth(&agent)
        .json(&json!({"decision": "allow_once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        403,
        "a parent's agent decided its child's call"
    );
    let child_args =
        json!({"run": child_run, "call": child_call.id.as_str(), "decision": "allow_once"});
    let answer: Value = mcp(&agent, child_args).await.unwrap().json().await.unwrap();
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        server.run(&child_run).await.status,
        RunStatus::AwaitingApproval,
        "the child's call still waits"
    );
}

#[tokio::test]
async fn always_allow_stops_the_next_question_until_it_is_forgotten() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-always"), &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "c1", "One", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    let (status, _) = decide(&server, &run, &call.id, json!({"decision": "allow_always"})).await;
    assert_eq!(status, 200);
    server.wait_run_end(&run).await;
    let grants = server.detail(&sid).await.session.tool_grants;
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(
        (grants[0].server.as_str(), grants[0].tool.as_str()),
        ("mulligan", "rename_session")
    );

    // The next call of that tool in this session runs without asking.
    renames(&fake, "c2", "Two", &["Done."]);
    let sent = server.send(&sid, "again").await;
    let ended = server.wait_run_end(&sent.run_id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(title(&server, &sid).await, "Two");
    assert!(calls_of(&server, &sid, &ended.id).await[0]
        .approval
        .is_none());

    // Granting by PATCH is refused; forgetting is not, and then it asks again.
    let (status, body) = server
        .patch(
            &format!("/sessions/{sid}"),
            json!({"tool_grants": [{"server": "mulligan", "tool": "send_message", "decision": "allow"}]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let (status, body) = server
        .patch(&format!("/sessions/{sid}"), json!({"tool_grants": []}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tool_grants"], json!([]));
    renames(&fake, "c3", "Three", &["Done."]);
    let (run, _) = until_waiting(&server, &sid, "once more").await;
    assert_eq!(server.run(&run).await.status, RunStatus::AwaitingApproval);
}

#[tokio::test]
async fn trust_asks_nothing_and_ask_all_asks_for_reads_too() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-modes"), &fake.url)).await;
    let (status, trusted) = server
        .post("/sessions", json!({"title": "test", "approval": "trust"}))
        .await;
    assert_eq!(status, 201, "{trusted}");
    assert_eq!(trusted["approval"], "trust");
    let sid = trusted["id"].as_str().unwrap().to_string();
    renames(&fake, "t1", "Trusted", &["Done."]);
    let sent = server.send(&sid, "rename").await;
    let ended = server.wait_run_end(&sent.run_id).await;
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(title(&server, &sid).await, "Trusted");

    let (status, body) = server
        .patch(&format!("/sessions/{sid}"), json!({"approval": "ask_all"}))
        .await;
    assert_eq!(status, 200, "{body}");
    fake.push(Script::call("", "l1", "mulligan__list_sessions", json!({})));
    fake.push(Script::reply(&["Listed."]));
    let (run, call) = until_waiting(&server, &sid, "list").await;
    assert_eq!(call.tool, "list_sessions");
    let (status, _) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200);
    assert_eq!(server.wait_run_end(&run).await.status, RunStatus::Completed);

    let (status, body) = server
        .patch(
            &format!("/sessions/{sid}"),
            json!({"approval": "sometimes"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
}

/// The operator's brake works mid-turn (CONTRACT §8, "Read at each call"): a turn whose
/// first read ran unasked asks for its next one once the session is switched to `ask_all`.
#[tokio::test]
async fn switching_to_ask_all_mid_turn_makes_the_turn_s_next_call_ask() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-brake"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::call("", "l1", "mulligan__list_sessions", json!({})));
    // The second step takes its time, as a model thinking does.
    let chunk = |delta: Value| {
        format!(
            "data: {}",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    fake.push(Script::Frames {
        frames: vec![
            chunk(json!({"content": "Once more. "})),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "l2", "type": "function",
                "function": {"name": "mulligan__list_sessions", "arguments": "{}"}}]}),
            ),
            format!(
                "data: {}",
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ),
            "data: [DONE]".into(),
        ],
        every: Duration::from_millis(500),
    });
    fake.push(Script::reply(&["Listed twice."]));
    let sent = server.send(&sid, "list twice").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let calls = calls_of(&server, &sid, &sent.run_id).await;
        if calls
            .first()
            .is_some_and(|c| c.status == ToolCallStatus::Ok)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first read never ran: {calls:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = server
        .patch(&format!("/sessions/{sid}"), json!({"approval": "ask_all"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let run = server
        .wait_run_status(&sent.run_id, RunStatus::AwaitingApproval)
        .await;
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(
        calls[1].status,
        ToolCallStatus::AwaitingApproval,
        "{calls:#?}"
    );
    let (status, _) = decide(
        &server,
        &run.id,
        &calls[1].id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, 200);
    let ended = server.wait_run_end(&run.id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 2);
}

#[tokio::test]
async fn cancel_while_waiting_ends_cancelled_and_a_prompt_meanwhile_queues() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-cancel"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "",
        "c1",
        "mulligan__rename_session",
        json!({"title": "Never"}),
    ));
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    // A prompt posted while the call waits queues behind it.
    fake.push(Script::reply(&["Second."]));
    let queued = server.send(&sid, "and then this").await;
    assert!(queued.queued, "{queued:?}");
    assert_eq!(server.run(&queued.run_id).await.status, RunStatus::Queued);
    // Retry now refuses: the session is busy, not failed.
    let (status, body) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("retry.busy"))
    );

    let (status, body) = server
        .post(&format!("/sessions/{sid}/runs/{run}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(calls[0].status, ToolCallStatus::Cancelled, "{calls:#?}");
    assert_eq!(title(&server, &sid).await, "test");
    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("approval.not_waiting"))
    );
    // The queued prompt goes on.
    let next = server.wait_run_end(&queued.run_id).await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(title(&server, &sid).await, "test");
}

/// A cancel that reaches a run as it parks for approval (its step done, its park waiting
/// for the session's lock) still ends it `cancelled`, its calls `cancelled`: a cancel
/// answered 200 is never a run that goes on waiting. To line the race up, a settings change
/// holds the session's lock while the test holds the database's writes; the cancel queues
/// for the lock during the step, the park after it.
#[tokio::test]
async fn a_cancel_racing_the_park_for_approval_ends_the_run_cancelled() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-cancel-race");
    let server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let chunk = |delta: Value| {
        format!(
            "data: {}",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    fake.push(Script::Frames {
        frames: vec![
            chunk(json!({"content": "Renaming. "})),
            chunk(json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                "function": {"name": "mulligan__rename_session", "arguments": "{\"title\": \"Never\"}"}}]})),
            format!("data: {}", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            "data: [DONE]".into(),
        ],
        every: Duration::from_millis(300),
    });
    let sent = server.send(&sid, "rename yourself").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server
        .detail(&sid)
        .await
        .messages
        .iter()
        .any(|m| m.content.contains("Renaming."))
    {
        assert!(Instant::now() < deadline, "the step's text never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The step streams on without a write; the settings change takes the session's lock
    // and waits on the database with it; the cancel queues behind it.
    let lock = common::WriteLock::hold(&dir).await;
    let request = |method: reqwest::Method, path: String| {
        let (url, token) = (server.url(&path), server.token.clone());
        tokio::spawn(async move {
            let answer = reqwest::Client::new()
                .request(method, url)
                .bearer_auth(token)
                .json(&json!({}))
                .send()
                .await
                .unwrap();
            (
                answer.status().as_u16(),
                answer.json::<Value>().await.unwrap(),
            )
        })
    };
    let patch = {
        let (url, token) = (
            server.url(&format!("/sessions/{sid}")),
            server.token.clone(),
        );
        tokio::spawn(async move {
            reqwest::Client::new()
                .patch(url)
                .bearer_auth(token)
                .json(&json!({"auto_retry": "off"}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancel = request(
        reqwest::Method::POST,
        format!("/sessions/{sid}/runs/{}/cancel", sent.run_id),
    );
    // The rest of the step (three frames 300 ms apart) ends well within this; its park then
    // queues for the session's lock behind the cancel.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.run(&sent.run_id).await.status, RunStatus::Running);
    lock.release().await;
    assert_eq!(patch.await.unwrap(), 200);
    let (status, body) = cancel.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["status"], "cancelled",
        "the cancel answered 200: {body}"
    );
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Cancelled, "{run:#?}");
    let calls = calls_of(&server, &sid, &sent.run_id).await;
    assert!(
        calls.iter().all(|c| c.status == ToolCallStatus::Cancelled),
        "{calls:#?}"
    );
    let (_, list) = server.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]), "nothing is left to decide");
    assert_eq!(title(&server, &sid).await, "test");
}

/// A decision that is recorded is answered as recorded (200), even when the run cannot
/// resume at once; the approvals loop resumes it, and its call runs once. The test makes
/// the database refuse the resume for a while (a trigger).
#[tokio::test]
async fn a_recorded_decision_is_answered_200_when_the_resume_fails() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-resume-fails");
    let server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "call_r", "Renamed", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    common::execute_sql(
        &dir,
        "CREATE TRIGGER refuse_resume BEFORE UPDATE OF status ON runs
           WHEN OLD.status = 'awaiting_approval' AND NEW.status = 'running'
           BEGIN SELECT RAISE(ABORT, 'the test refuses resumes'); END",
        "CREATE FUNCTION refuse_resume() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'the test refuses resumes'; END $$;
         CREATE TRIGGER refuse_resume BEFORE UPDATE ON runs FOR EACH ROW
           WHEN (OLD.status = 'awaiting_approval' AND NEW.status = 'running')
           EXECUTE FUNCTION refuse_resume()",
    )
    .await;
    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200, "the decision is recorded: {body}");
    assert_eq!(body["call"]["approval"]["decision"], "allow_once");
    assert_eq!(
        server.run(&run).await.status,
        RunStatus::AwaitingApproval,
        "not resumed yet"
    );
    common::execute_sql(
        &dir,
        "DROP TRIGGER refuse_resume",
        "DROP TRIGGER refuse_resume ON runs; DROP FUNCTION refuse_resume()",
    )
    .await;
    // The approvals loop (every 5 s at the default timeout) resumes it.
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!((ended.steps, ended.tools_executed), (2, 1));
    assert_eq!(title(&server, &sid).await, "Renamed");
}

#[tokio::test]
async fn a_crash_while_waiting_leaves_it_waiting_and_allow_runs_it_once() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-crash");
    let (server, crashable) = TestServer::start_crashable(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "c1", "After", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    crashable.crash();

    let mut c = config(&dir, &fake.url);
    // The reconciler looks every 50 ms: it has looked several times before the decision.
    c.reconcile_ms = 50;
    let server = TestServer::start(c).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Never reconciled as interrupted: it still waits, on the new process.
    let waiting = server.run(&run).await;
    assert_eq!(waiting.status, RunStatus::AwaitingApproval, "{waiting:#?}");
    let (_, list) = server.get("/approvals").await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 1, "{list}");
    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200, "{body}");
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 1);
    assert_eq!(title(&server, &sid).await, "After");
}

#[tokio::test]
async fn a_failure_after_an_allowed_call_continues_without_asking_or_running_it_again() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-retry"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "",
        "c1",
        "mulligan__rename_session",
        json!({"title": "Once"}),
    ));
    for _ in 0..3 {
        fake.push(Script::unavailable());
    }
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    let failed = server.wait_run_end(&run).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert_eq!(failed.tools_executed, 1);
    assert_eq!(title(&server, &sid).await, "Once");
    // Renamed back by hand: were the call run again, it would read "Once" again.
    let (status, _) = server
        .patch(&format!("/sessions/{sid}"), json!({"title": "by hand"}))
        .await;
    assert_eq!(status, 200);

    fake.push(Script::reply(&["Finished."]));
    let (status, retry) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["kind"], RunKind::Continuation.as_str());
    let next = server.wait_run_end(retry["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed, "asked again? {next:#?}");
    assert_eq!(next.tools_executed, 0);
    assert_eq!(title(&server, &sid).await, "by hand", "the call ran again");
    let (_, list) = server.get("/approvals").await;
    assert_eq!(list["approvals"], json!([]));
}

#[tokio::test]
async fn a_wait_past_its_timeout_is_a_rejection_the_model_reads() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-timeout");
    let mut c = config(&dir, &fake.url);
    c.approval_timeout_ms = 400;
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;
    renames(&fake, "c1", "Late", &["Noted."]);
    let sent = server.send(&sid, "rename yourself").await;
    let ended = server.wait_run_end(&sent.run_id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    let calls = calls_of(&server, &sid, &ended.id).await;
    assert_eq!(calls[0].status, ToolCallStatus::Denied, "{calls:#?}");
    assert_eq!(
        calls[0].approval.as_ref().and_then(|a| a.decision),
        Some(Decision::TimedOut)
    );
    assert_eq!(title(&server, &sid).await, "test");
    let told = last_request(&fake)
        .into_iter()
        .find(|m| m["tool_call_id"] == "c1")
        .unwrap();
    assert!(told["content"].as_str().unwrap().contains("did not decide"));
}

#[tokio::test]
async fn regenerate_supersedes_a_waiting_run() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-regen"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "",
        "c1",
        "mulligan__rename_session",
        json!({"title": "Never"}),
    ));
    let sent = server.send(&sid, "rename yourself").await;
    server
        .wait_run_status(&sent.run_id, RunStatus::AwaitingApproval)
        .await;
    // A prompt posted while the call waits queues behind it; Regenerate spares it (§3).
    fake.push(Script::reply(&["Second."]));
    let queued = server.send(&sid, "and then this").await;
    assert!(queued.queued, "{queued:?}");
    fake.push(Script::reply(&["Fresh."]));
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", sent.message_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(server.run(&sent.run_id).await.status, RunStatus::Cancelled);
    let spared = body["superseded"].as_array().unwrap();
    assert!(
        !spared.iter().any(|m| m == queued.message_id.as_str()),
        "the queued prompt was superseded: {body}"
    );
    let second = server.wait_run_end(&queued.run_id).await;
    assert_eq!(second.status, RunStatus::Completed, "{second:#?}");
    let next = server.wait_run_end(body["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed);
    assert_eq!(title(&server, &sid).await, "test");
    let detail = server.detail(&sid).await;
    let prompt = detail
        .messages
        .iter()
        .find(|m| m.id == queued.message_id)
        .expect("the queued prompt");
    assert!(
        !prompt.superseded,
        "the queued prompt is shown as superseded"
    );
    let answer = detail
        .messages
        .iter()
        .find(|m| m.run_id.as_ref() == Some(&queued.run_id))
        .expect("its reply");
    assert!(
        !answer.superseded && answer.content == "Second.",
        "{answer:#?}"
    );
}

#[tokio::test]
async fn nothing_reaches_a_real_tool_server_before_allow() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-mcp");
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let files = files.canonicalize().unwrap();
    let mcp = dir.join("mcp.json");
    // Everything Mulligan sends the server, recorded on its way in.
    let sent_log = dir.join("to-server.jsonl");
    let script = format!(
        "tee -a '{}' | exec '{}' '{}'",
        sent_log.display(),
        common::node_bin("mcp-server-filesystem").display(),
        files.display()
    );
    // The default policy: `writes` (read-only tools run, the rest ask).
    std::fs::write(
        &mcp,
        json!({"mcpServers": {"fs": {"command": "sh", "args": ["-c", script]}}}).to_string(),
    )
    .unwrap();
    let mut c = config(&dir, &fake.url);
    c.mcp_config = Some(mcp);
    let server = TestServer::start(c).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.get("/tools").await.1["servers"][1]["status"] != "ready" {
        assert!(
            Instant::now() < deadline,
            "the filesystem server never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sid = server.create_session().await;
    let target = files.join("note.txt");
    let path = target.to_string_lossy().to_string();
    fake.push(Script::call(
        "",
        "ls",
        "fs__list_directory",
        json!({"path": files.to_string_lossy()}),
    ));
    fake.push(Script::call(
        "",
        "w1",
        "fs__write_file",
        json!({"path": path, "content": "hello"}),
    ));
    fake.push(Script::reply(&["Written."]));
    let (run, call) = until_waiting(&server, &sid, "write a note").await;
    assert_eq!(call.tool, "write_file");
    // The read-only listing ran without asking; the write waits and has not happened.
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(calls[0].tool, "list_directory");
    assert_eq!(calls[0].status, ToolCallStatus::Ok);
    assert!(calls[0].approval.is_none());
    // The server heard the listing (the recorder works), and nothing of the write.
    let heard = std::fs::read_to_string(&sent_log).unwrap_or_default();
    assert!(heard.contains("list_directory"), "{heard}");
    assert!(
        !heard.contains("write_file") && !target.exists(),
        "the write reached the server before Allow: {heard}"
    );
    let (status, _) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200);
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello");
    let heard = std::fs::read_to_string(&sent_log).unwrap();
    let writes = heard
        .lines()
        .filter(|l| l.contains("tools/call") && l.contains("write_file"))
        .count();
    assert_eq!(writes, 1, "the write was sent once: {heard}");
    let code = ErrorCode::ApprovalDecided;
    let (status, body) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(code.as_str()))
    );
}

/// An instance of its own on a fresh PostgreSQL database, and that database's URL.
async fn on_fresh_postgres(tag: &str, fake: &FakeProvider) -> (String, TestServer) {
    assert!(
        common::on_postgres(),
        "needs PostgreSQL: set MULLIGAN_TEST_DATABASE=postgres and MULLIGAN_TEST_POSTGRES_URL"
    );
    let db = common::fresh_postgres_database(&common::postgres_url().unwrap());
    let mut c = config(&temp_dir(tag), &fake.url);
    c.database_url = Some(db.clone());
    (db, TestServer::start(c).await)
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn the_owner_killed_the_wait_stays_and_the_other_instance_resumes_it() {
    let fake = FakeProvider::start().await;
    let (db, b) = on_fresh_postgres("approve-kill-b", &fake).await;
    let dir = temp_dir("approve-kill-a");
    let (mut child, a) =
        common::serve(&dir, &fake.url, &dir.join("server.log"), Some(db), &[]).await;
    let sid = a.create_session().await;
    fake.push(Script::call(
        "Renaming. ",
        "c1",
        "mulligan__rename_session",
        json!({"title": "Resumed on B"}),
    ));
    let (run, call) = until_waiting(&a, &sid, "rename yourself").await;
    // A second session streams on A when it dies: B ending that run is the proof that B's
    // takeover pass has looked at A's runs.
    let other = a.create_session().await;
    fake.push(Script::Endless {
        text: "more ".into(),
        every: Duration::from_millis(20),
    });
    let streaming = a.send(&other, "go on for ever").await.run_id;
    a.wait_run_status(&streaming, RunStatus::Running).await;
    fake.push(Script::reply(&["Done."]));
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let taken = b.wait_run_end(&streaming).await;
    assert_eq!(
        (taken.status, taken.retry.clone().map(|c| c.retry_class)),
        (RunStatus::Failed, Some(RetryClass::Interrupted)),
        "{taken:#?}"
    );
    // The takeover passed it by: a waiting run holds nothing and stays waiting.
    assert_eq!(b.run(&run).await.status, RunStatus::AwaitingApproval);
    let (status, body) = decide(&b, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200, "{body}");
    let ended = b.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 1);
    assert_eq!(title(&b, &sid).await, "Resumed on B");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn two_decisions_on_two_instances_take_one() {
    let fake = FakeProvider::start().await;
    let (db, a) = on_fresh_postgres("approve-two-a", &fake).await;
    let mut cb = config(&temp_dir("approve-two-b"), &fake.url);
    cb.database_url = Some(db);
    let b = TestServer::start(cb).await;
    decided_at_once(&fake, &a, &b, "allow_once").await;
}

#[tokio::test]
async fn a_step_s_calls_are_asked_together_and_run_in_their_order_once_all_are_decided() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-step"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::ToolCalls {
        text: "Three things. ".into(),
        calls: vec![
            ("a".into(), "mulligan__list_sessions".into(), "{}".into()),
            (
                "b".into(),
                "mulligan__rename_session".into(),
                json!({"title": "First"}).to_string(),
            ),
            (
                "c".into(),
                "mulligan__rename_session".into(),
                json!({"title": "Second"}).to_string(),
            ),
        ],
    });
    fake.push(Script::reply(&["Done."]));
    let sent = server.send(&sid, "do three things").await;
    let run = server
        .wait_run_status(&sent.run_id, RunStatus::AwaitingApproval)
        .await;
    let calls = calls_of(&server, &sid, &run.id).await;
    let statuses: Vec<_> = calls.iter().map(|c| c.status).collect();
    // The read-only call needs no decision but waits for its step; nothing ran yet.
    assert_eq!(
        statuses,
        [
            ToolCallStatus::Queued,
            ToolCallStatus::AwaitingApproval,
            ToolCallStatus::AwaitingApproval
        ]
    );
    let (_, list) = server.get("/approvals").await;
    assert_eq!(list["approvals"].as_array().unwrap().len(), 2, "{list}");
    let run_id = run.id.to_string();
    decide(
        &server,
        &run_id,
        &calls[2].id,
        json!({"decision": "allow_once"}),
    )
    .await;
    // One of two decided: still waiting, nothing ran.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        server.run(&run_id).await.status,
        RunStatus::AwaitingApproval
    );
    assert_eq!(title(&server, &sid).await, "test");
    decide(
        &server,
        &run_id,
        &calls[1].id,
        json!({"decision": "allow_once"}),
    )
    .await;
    let ended = server.wait_run_end(&run_id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 3);
    // In their order: the second rename ran last.
    assert_eq!(title(&server, &sid).await, "Second");
    let calls = calls_of(&server, &sid, &run_id).await;
    assert!(
        calls.iter().all(|c| c.status == ToolCallStatus::Ok),
        "{calls:#?}"
    );
    assert!(calls[1].started_at <= calls[2].started_at);
    // The model read the three results, in the order it asked.
    let ids: Vec<String> = last_request(&fake)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["a", "b", "c"]);
}

/// `GET /approvals` (CONTRACT §8) lists the waiting calls oldest first with their session,
/// run and wait, a page at a time as `GET /sessions` does; bad paging is refused.
#[tokio::test]
async fn approvals_list_oldest_first_a_page_at_a_time() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-pages"), &fake.url)).await;
    let mut waiting = Vec::new();
    for i in 0..3 {
        let sid = server.create_session().await;
        fake.push(Script::call(
            "",
            &format!("c{i}"),
            "mulligan__rename_session",
            json!({"title": format!("T{i}")}),
        ));
        let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
        waiting.push((sid, run, call));
    }
    let (status, first) = server.get("/approvals?limit=2").await;
    assert_eq!(status, 200, "{first}");
    let page = first["approvals"].as_array().unwrap();
    assert_eq!(page.len(), 2, "{first}");
    for (w, (sid, run, call)) in page.iter().zip(&waiting) {
        assert_eq!(w["session_id"], sid.as_str());
        assert_eq!(w["run_id"], run.as_str());
        assert_eq!(w["call"]["id"], call.id.as_str());
        assert_eq!(w["call"]["status"], "awaiting_approval");
        assert_eq!(w["waiting_since"], call.approval.as_ref().unwrap().asked_at);
    }
    assert_eq!(first["next_before"], waiting[1].2.id.as_str());
    let (status, second) = server
        .get(&format!("/approvals?limit=2&before={}", waiting[1].2.id))
        .await;
    assert_eq!(status, 200, "{second}");
    let page = second["approvals"].as_array().unwrap();
    assert_eq!(page.len(), 1, "{second}");
    assert_eq!(page[0]["call"]["id"], waiting[2].2.id.as_str());
    assert!(second.get("next_before").is_none(), "{second}");
    let (_, all) = server.get("/approvals").await;
    assert_eq!(
        all["approvals"].as_array().unwrap().len(),
        3,
        "100 by default"
    );
    for bad in ["limit=0", "limit=1001", "limit=two", "before=not%20an%20id"] {
        let (status, body) = server.get(&format!("/approvals?{bad}")).await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid_request", "{bad}: {body}");
    }
}

/// "Always deny" (`reject_always`) is remembered: the model reads the refusal, and the next
/// call of that tool in the session is denied without asking, the model told so.
#[tokio::test]
async fn always_deny_refuses_the_next_call_unasked_and_the_model_is_told() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-never"), &fake.url)).await;
    let sid = server.create_session().await;
    renames(&fake, "c1", "One", &["Understood."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    let (status, body) = decide(
        &server,
        &run,
        &call.id,
        json!({"decision": "reject_always", "reason": "keep the title"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.wait_run_end(&run).await.status, RunStatus::Completed);
    let told = last_request(&fake);
    let refusal = told
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the model reads the refusal");
    assert!(
        refusal["content"]
            .as_str()
            .unwrap()
            .contains("keep the title"),
        "{refusal}"
    );
    let grants = server.detail(&sid).await.session.tool_grants;
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0].decision.as_str(), "reject");

    // The next call is denied unasked: nothing waits, nothing ran, the model is told.
    renames(&fake, "c2", "Two", &["Fine."]);
    let sent = server.send(&sid, "rename yourself again").await;
    let ended = server.wait_run_end(&sent.run_id).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(ended.tools_executed, 0);
    let calls = calls_of(&server, &sid, &sent.run_id).await;
    assert_eq!(calls[0].status, ToolCallStatus::Denied, "{calls:#?}");
    assert!(calls[0].approval.is_none(), "it was never asked");
    let told = last_request(&fake);
    let refusal = told.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(
        refusal["content"].as_str().unwrap().contains("declined"),
        "{refusal}"
    );
    assert_eq!(title(&server, &sid).await, "test");
}

/// Sixteen decisions on one waiting call at once, five times over: exactly one is 200, the
/// others 409 `approval.decided` carrying the decision that was taken, and the call runs once.
/// A 2,000-character reason is taken whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_decisions_at_once_take_exactly_one() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-16"), &fake.url)).await;
    let reason = "r".repeat(2000);
    for round in 0..5 {
        let sid = server.create_session().await;
        renames(&fake, &format!("c{round}"), "Once", &["Done."]);
        let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
        let path = format!("/runs/{run}/tool_calls/{}/decision", call.id);
        let answers = futures::future::join_all((0..16).map(|i| {
            let body = if i % 2 == 0 {
                json!({"decision": "allow_once"})
            } else {
                json!({"decision": "reject_once", "reason": reason})
            };
            server.post(&path, body)
        }))
        .await;
        let taken: Vec<&Value> = answers
            .iter()
            .filter(|(s, _)| *s == 200)
            .map(|(_, b)| b)
            .collect();
        assert_eq!(taken.len(), 1, "round {round}: {answers:?}");
        let decision = taken[0]["call"]["approval"]["decision"].clone();
        for (status, body) in answers.iter().filter(|(s, _)| *s != 200) {
            assert_eq!(*status, 409, "{body}");
            assert_eq!(body["error"]["code"], "approval.decided", "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains(decision.as_str().unwrap()),
                "the refusal names the decision taken ({decision}): {body}"
            );
        }
        let ended = server.wait_run_end(&run).await;
        assert_eq!(ended.status, RunStatus::Completed);
        let allowed = decision == "allow_once";
        assert_eq!(ended.tools_executed, u32::from(allowed), "round {round}");
        if !allowed {
            let calls = calls_of(&server, &sid, &run).await;
            assert_eq!(
                calls[0].approval.as_ref().and_then(|a| a.reason.clone()),
                Some(reason.clone()),
                "the 2,000-character reason is kept whole"
            );
        }
    }
}

/// The wait's events on SSE (CONTRACT §8): a `tool_call` when the call starts waiting and
/// when it is decided, a `run` as the run enters and leaves `awaiting_approval`, a `session`
/// saying it needs approval.
#[tokio::test]
async fn the_wait_and_its_decision_are_events() {
    use app::wire::Event;
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("approve-events"), &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    renames(&fake, "c1", "Evented", &["Done."]);
    let sent = server.send(&sid, "rename yourself").await;
    let within = Duration::from_secs(10);
    let (mut asked, mut parked, mut needs) = (None, false, false);
    sse.until(within, |e| {
        match e {
            Event::ToolCall(t) if t.call.status == ToolCallStatus::AwaitingApproval => {
                asked = Some(t.call.clone())
            }
            Event::Run(r) if r.status == RunStatus::AwaitingApproval => parked = true,
            Event::Session(s) if s.status == SessionStatus::AwaitingApproval => needs = true,
            _ => {}
        }
        asked.is_some() && parked && needs
    })
    .await;
    let asked = asked.unwrap();
    assert!(asked
        .approval
        .as_ref()
        .is_some_and(|a| a.decision.is_none()));
    let (status, _) = decide(
        &server,
        &sent.run_id,
        &asked.id,
        json!({"decision": "allow_once"}),
    )
    .await;
    assert_eq!(status, 200);
    let (mut decided, mut resumed) = (false, false);
    sse.until(within, |e| {
        match e {
            Event::ToolCall(t) if t.call.id == asked.id => {
                decided |= t
                    .call
                    .approval
                    .as_ref()
                    .is_some_and(|a| a.decision == Some(Decision::AllowOnce));
            }
            Event::Run(r) if r.id == sent.run_id && r.status == RunStatus::Running => {
                resumed = true
            }
            _ => {}
        }
        decided && resumed
    })
    .await;
    assert_eq!(
        server.wait_run_end(&sent.run_id).await.status,
        RunStatus::Completed
    );
}

/// Waiting is not run time (`MULLIGAN_MAX_RUN_MS` does not count it), and neither Tier 2's
/// nor a background retry arms on a waiting run: it is not a failure (CONTRACT §8).
#[tokio::test]
async fn a_wait_is_not_run_time_and_no_retry_arms_on_it() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("approve-max-run"), &fake.url);
    c.max_run_ms = 1500;
    let server = TestServer::start(c).await;
    let (status, created) = server
        .post(
            "/sessions",
            json!({"title": "test", "auto_retry": "background"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let sid = created["id"].as_str().unwrap().to_string();
    renames(&fake, "c1", "Slow", &["Done."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    // Longer than the run's limit, waiting.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let detail = server.detail(&sid).await;
    assert_eq!(server.run(&run).await.status, RunStatus::AwaitingApproval);
    assert!(
        detail.session.waiting_retry.is_none(),
        "{:?}",
        detail.session
    );
    let (status, _) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200);
    let ended = server.wait_run_end(&run).await;
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    assert_eq!(title(&server, &sid).await, "Slow");
}

/// A wait times out at its bound and not before, also across a restart: the call is
/// `timed_out` (a rejection the model reads) by the next process, once its time came.
#[tokio::test]
async fn a_wait_times_out_at_its_bound_across_a_restart() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-timeout-restart");
    let mut c = config(&dir, &fake.url);
    c.approval_timeout_ms = 3000;
    let mut server = TestServer::start(c.clone()).await;
    let sid = server.create_session().await;
    renames(&fake, "c1", "Late", &["Noted."]);
    let (run, call) = until_waiting(&server, &sid, "rename yourself").await;
    let asked_at = call.approval.as_ref().unwrap().asked_at;
    server.stop().await;
    let server = TestServer::start(c).await;
    // Well before the bound (3 s from the ask) it still waits.
    let early =
        Duration::from_millis(u64::try_from((asked_at + 1500 - common::now_ms()).max(0)).unwrap());
    tokio::time::sleep(early).await;
    assert_eq!(
        server.run(&run).await.status,
        RunStatus::AwaitingApproval,
        "timed out before its bound"
    );
    let ended = server.wait_run_end(&run).await;
    assert!(
        common::now_ms() >= asked_at + 3000,
        "ended before the bound"
    );
    assert_eq!(ended.status, RunStatus::Completed, "{ended:#?}");
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(
        calls[0].approval.as_ref().and_then(|a| a.decision),
        Some(Decision::TimedOut)
    );
    assert_eq!(title(&server, &sid).await, "test");
}

/// A tool source's `"approval"` and `"approval_tools"` from a real `mcpServers` file
/// (CONTRACT §8): `always` makes even a read-only tool ask; a tool set to `never` runs
/// unasked.
#[tokio::test]
async fn a_source_s_approval_and_approval_tools_come_from_its_config_file() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("approve-config");
    let mcp = dir.join("mcp.json");
    std::fs::write(
        &mcp,
        json!({"mcpServers": {"every": {
            "command": common::node_bin("mcp-server-everything"),
            "approval": "always",
            "approval_tools": {"get-sum": "never"},
        }}})
        .to_string(),
    )
    .unwrap();
    let mut c = config(&dir, &fake.url);
    c.mcp_config = Some(mcp);
    let server = TestServer::start(c).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, tools) = server.get("/tools").await;
        let ready = tools["servers"].as_array().is_some_and(|s| {
            s.iter()
                .any(|s| s["name"] == "every" && s["status"] == "ready")
        });
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every never became ready: {tools}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sid = server.create_session().await;
    fake.push(Script::call(
        "",
        "s1",
        "every__get-sum",
        json!({"a": 2, "b": 3}),
    ));
    fake.push(Script::call(
        "",
        "e1",
        "every__echo",
        json!({"message": "hi"}),
    ));
    fake.push(Script::reply(&["Done."]));
    let (run, call) = until_waiting(&server, &sid, "add, then echo").await;
    let calls = calls_of(&server, &sid, &run).await;
    assert_eq!(calls[0].tool, "get-sum");
    assert_eq!(
        calls[0].status,
        ToolCallStatus::Ok,
        "`never`: it ran unasked"
    );
    assert!(calls[0].approval.is_none());
    assert_eq!(call.tool, "echo", "`always`: even a read-only echo asks");
    let (status, _) = decide(&server, &run, &call.id, json!({"decision": "allow_once"})).await;
    assert_eq!(status, 200);
    assert_eq!(server.wait_run_end(&run).await.status, RunStatus::Completed);
}
