//! Agent turns with tools (CONTRACT §6), against the scripted provider and the built-in
//! `mulligan` tools: a turn loops through model steps and tool calls; a failure after a tool
//! ran keeps the turn's steps, and a retry continues it without running the tool again.
use testkit as common;

use app::wire::{ErrorCode, Part, RetryClass, RunKind, RunStatus, ToolCallStatus};
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::{json, Value};

/// A session with a sub-session whose model has its own (default) scripts. The parent
/// trusts its tools: these tests are about calls that run (approval.rs is about asking).
async fn family(server: &TestServer, fake: &FakeProvider) -> (String, String) {
    let parent = server.create_session().await;
    let (status, body) = server
        .patch(&format!("/sessions/{parent}"), json!({"approval": "trust"}))
        .await;
    assert_eq!(status, 200, "{body}");
    fake.push_for("child-model", vec![]);
    let (status, child) = server
        .post(
            "/sessions",
            json!({"title": "child", "parent_id": parent, "model": "child-model"}),
        )
        .await;
    assert_eq!(status, 201, "{child}");
    (parent, child["id"].as_str().unwrap().to_string())
}

/// Scripts a turn whose first step sends `content` to `child` (call `call_send`) and whose
/// second step fails on every Tier 1 attempt.
fn fails_after_sending(fake: &FakeProvider, text: &str, child: &str, content: &str) {
    fake.push(Script::call(
        text,
        "call_send",
        "mulligan__send_message",
        json!({"session": child, "content": content}),
    ));
    for _ in 0..3 {
        fake.push(Script::unavailable());
    }
}

/// The messages a provider request carried.
fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// The operator messages of a session.
async fn prompts(server: &TestServer, sid: &str) -> Vec<String> {
    server
        .detail(sid)
        .await
        .messages
        .into_iter()
        .filter(|m| m.role == app::wire::Role::Operator)
        .map(|m| m.content)
        .collect()
}

fn parent_requests(fake: &FakeProvider) -> Vec<Value> {
    fake.seen()
        .into_iter()
        .map(|s| s.body)
        .filter(|b| b["model"] == "fake-model")
        .collect()
}

#[tokio::test]
async fn a_turn_calls_a_tool_then_answers_with_its_result() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-turn"), &fake.url)).await;
    let (sid, child) = family(&server, &fake).await;
    fake.push(Script::call(
        "Let me look. ",
        "call_1",
        "mulligan__list_sessions",
        json!({}),
    ));
    fake.push(Script::reply(&["Found ", "one."]));

    let sent = server.send(&sid, "what are my sub-sessions?").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!((run.steps, run.tools_executed), (2, 1));

    let detail = server.detail(&sid).await;
    let reply = detail
        .messages
        .iter()
        .find(|m| m.run_id.as_ref().map(|id| id.as_str()) == Some(run.id.as_str()))
        .unwrap();
    assert_eq!(reply.content, "Let me look. Found one.");
    let parts = reply
        .parts
        .clone()
        .expect("a reply with a tool call has parts");
    assert_eq!(parts.len(), 3, "{parts:#?}");
    assert_eq!(
        parts[0],
        Part::Text {
            text: "Let me look. ".into()
        }
    );
    let Part::ToolCall { call } = &parts[1] else {
        panic!("{parts:#?}")
    };
    assert_eq!(
        (call.server.as_str(), call.tool.as_str()),
        ("mulligan", "list_sessions")
    );
    assert_eq!(call.status, ToolCallStatus::Ok);
    assert!(
        call.result.as_deref().unwrap().contains(&child),
        "{call:#?}"
    );
    assert!(call.finished_at.is_some());

    let asked = parent_requests(&fake);
    assert_eq!(asked.len(), 2);
    let tools: Vec<&str> = asked[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"mulligan__send_message"), "{tools:?}");
    // The second step carries the first step's call and its result.
    let second = messages(&asked[1]);
    let n = second.len();
    assert_eq!(second[n - 2]["role"], "assistant");
    assert_eq!(second[n - 2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(second[n - 1]["role"], "tool");
    assert_eq!(second[n - 1]["tool_call_id"], "call_1");
    assert!(second[n - 1]["content"].as_str().unwrap().contains(&child));

    // The operator's Regenerate may run the tools again, and says how many had run.
    fake.push(Script::reply(&["Again."]));
    let (status, receipt) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", sent.message_id),
            json!({"if_last_run": run.id, "manual": true}),
        )
        .await;
    assert_eq!(status, 202, "{receipt}");
    assert_eq!(receipt["tools_superseded"], 1);
}

#[tokio::test]
async fn a_failure_after_a_tool_ran_is_continued_and_the_tool_never_runs_again() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-continue"), &fake.url)).await;
    let (sid, child) = family(&server, &fake).await;
    fails_after_sending(&fake, "Sending. ", &child, "do it once");

    let sent = server.send(&sid, "tell the child").await;
    let failed = server.wait_run_end(&sent.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert!(failed.retry.as_ref().unwrap().retryable);
    assert_eq!(failed.tools_executed, 1);
    assert_eq!(prompts(&server, &child).await, ["do it once"]);

    // Retry now continues the turn: the kept step is sent, the tool is not run again.
    fake.push(Script::reply(&["Done."]));
    let (status, retry) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["kind"], "continuation");
    let next = server.wait_run_end(retry["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(next.kind, RunKind::Continuation);
    assert_eq!(
        prompts(&server, &child).await,
        ["do it once"],
        "the tool ran once"
    );

    let last = parent_requests(&fake).pop().unwrap();
    let msgs = messages(&last);
    let asked = msgs
        .iter()
        .position(|m| m["tool_calls"][0]["id"] == "call_send")
        .expect("the kept call is sent");
    assert_eq!(msgs[asked + 1]["role"], "tool");
    assert_eq!(msgs[asked + 1]["tool_call_id"], "call_send");
    let last_text = msgs.last().unwrap()["content"].as_str().unwrap();
    assert!(
        last_text.contains("Check what already finished"),
        "{last_text}"
    );
}

#[tokio::test]
async fn tier2_over_a_turn_whose_tool_ran_continues_it_instead_of_regenerating() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-tier2"), &fake.url)).await;
    let (sid, child) = family(&server, &fake).await;
    fails_after_sending(&fake, "", &child, "only once");
    let sent = server.send(&sid, "go").await;
    let failed = server.wait_run_end(&sent.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");

    // What the browser's countdown sends: Regenerate with the run it saw, not manual.
    fake.push(Script::reply(&["Finished."]));
    let (status, receipt) = server
        .post(
            &format!("/sessions/{sid}/messages/{}/regenerate", sent.message_id),
            json!({"if_last_run": failed.id}),
        )
        .await;
    assert_eq!(status, 202, "{receipt}");
    let next = server
        .wait_run_end(receipt["run_id"].as_str().unwrap())
        .await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(next.kind, RunKind::Continuation);
    assert_eq!(prompts(&server, &child).await, ["only once"]);
    // The failed turn's reply (its tool call) is kept, not superseded.
    let kept = server.detail(&sid).await.messages;
    assert!(kept
        .iter()
        .any(|m| m.run_id.as_ref().map(|id| id.as_str()) == Some(failed.id.as_str())));
}

#[tokio::test]
async fn unknown_tools_and_malformed_arguments_are_results_the_model_sees() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-bad-calls"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::ToolCalls {
        text: String::new(),
        calls: vec![
            // An id that cannot go back to a provider as is: replaced by Mulligan's own.
            ("c 1\n".into(), "nope__x".into(), "{}".into()),
            ("c2".into(), "mulligan__list_sessions".into(), "{bad".into()),
        ],
    });
    fake.push(Script::reply(&["Sorry."]));
    let sent = server.send(&sid, "try").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!(run.tools_executed, 0, "neither call reached a tool");

    let msgs = messages(&parent_requests(&fake)[1]);
    let results: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), 2);
    let ids: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_1_1", "c2"]);
    assert!(
        results[0].contains("no tool named \"nope__x\""),
        "{results:?}"
    );
    assert!(results[1].contains("not a JSON object"), "{results:?}");
    let detail = server.detail(&sid).await;
    let parts = detail.messages.last().unwrap().parts.clone().unwrap();
    let calls: Vec<_> = parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { call } => Some(call.status),
            Part::Text { .. } => None,
        })
        .collect();
    assert_eq!(calls, [ToolCallStatus::Error, ToolCallStatus::Error]);
}

#[tokio::test]
async fn a_turn_that_keeps_asking_for_tools_fails_max_steps() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("agent-max-steps"), &fake.url);
    c.max_steps = 3;
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;
    fake.set_default(Script::call(
        "",
        "again",
        "mulligan__list_sessions",
        json!({}),
    ));
    let sent = server.send(&sid, "loop").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Failed, "{run:#?}");
    let class = run.retry.unwrap();
    assert_eq!(
        (class.retry_class.clone(), class.retryable),
        (RetryClass::MaxSteps, false)
    );
    assert_eq!((run.steps, run.tools_executed), (3, 3));
    assert_eq!(parent_requests(&fake).len(), 3);
    // Each step's provider call succeeded: no attempt is recorded as failed.
    let (_, detail) = server.get(&format!("/runs/{}", run.id)).await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{detail}");
    assert!(
        attempts.iter().all(|a| a.get("error").is_none()),
        "{detail}"
    );
}

#[tokio::test]
async fn tool_sources_are_listed_and_chosen_per_session() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-sources"), &fake.url)).await;
    let (status, tools) = server.get("/tools").await;
    assert_eq!(status, 200, "{tools}");
    assert_eq!(tools["servers"][0]["name"], "mulligan");
    assert_eq!(tools["servers"][0]["transport"], "builtin");
    assert_eq!(tools["servers"][0]["status"], "ready");
    assert!(tools["servers"][0]["tools"].as_array().unwrap().len() >= 4);

    let sid = server.create_session().await;
    assert_eq!(server.detail(&sid).await.session.tools, ["mulligan"]);
    let (status, err) = server
        .patch(&format!("/sessions/{sid}"), json!({"tools": ["nope"]}))
        .await;
    assert_eq!(status, 422, "{err}");
    assert_eq!(err["error"]["code"], ErrorCode::InvalidRequest.as_str());
    assert_eq!(
        server.detail(&sid).await.session.tools,
        ["mulligan"],
        "unchanged"
    );
    let (status, s) = server
        .patch(&format!("/sessions/{sid}"), json!({"tools": []}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["tools"], json!([]));
    // A session without tool sources offers the model none.
    let sent = server.send(&sid, "hi").await;
    server.wait_run_end(&sent.run_id).await;
    assert!(parent_requests(&fake)[0].get("tools").is_none());
}

#[tokio::test]
async fn every_step_counts_toward_the_spend_limit() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("agent-spend"), &fake.url);
    // The tool step reports 11 tokens and the answer 7: only both together pass 15.
    c.spend_limit_tokens = Some(15);
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;
    fake.push(Script::call("", "c1", "mulligan__list_sessions", json!({})));
    fake.push(Script::reply(&["ok"]));
    let first = server.send(&sid, "one").await;
    let run = server.wait_run_end(&first.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let next = server.send(&sid, "two").await;
    let run = server.wait_run_end(&next.run_id).await;
    assert_eq!(run.status, RunStatus::Failed, "{run:#?}");
    assert_eq!(
        run.retry.unwrap().retry_class,
        RetryClass::SpendLimitExceeded
    );
}

#[tokio::test]
async fn the_demo_agent_shows_a_continued_tool_turn_offline() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("agent-demo"), &fake.url);
    c.provider = server::config::ProviderKind::Demo;
    c.base_url = None;
    c.api_key = None;
    c.model = None;
    c.demo_delta_ms = 1;
    let server = TestServer::start(c).await;
    let (status, s) = server
        .post("/sessions", json!({"model": "demo-agent-flaky"}))
        .await;
    assert_eq!(status, 201, "{s}");
    let sid = s["id"].as_str().unwrap().to_string();
    let sent = server.send(&sid, "what do I have?").await;
    let failed = server.wait_run_end(&sent.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert_eq!(failed.tools_executed, 1);
    assert!(failed.retry.as_ref().unwrap().retryable);

    let (status, retry) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["kind"], "continuation");
    let next = server.wait_run_end(retry["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(
        next.tools_executed, 0,
        "the tool ran once, in the first run"
    );
    let detail = server.detail(&sid).await;
    let answer = detail.messages.last().unwrap();
    // The continuation answers from the kept result of the call that ran.
    assert!(
        answer.content.contains("no sub-sessions"),
        "{}",
        answer.content
    );
}

#[tokio::test]
async fn an_agents_list_sessions_pages_through_its_descendants_only() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("agent-family"), &fake.url)).await;
    let parent = server.create_session().await;
    let _stranger = server.create_session().await;
    let child = |p: String| {
        let server = &server;
        async move {
            let (status, s) = server
                .post("/sessions", json!({"parent_id": p, "model": "child-model"}))
                .await;
            assert_eq!(status, 201, "{s}");
            s["id"].as_str().unwrap().to_string()
        }
    };
    let c1 = child(parent.clone()).await;
    let c2 = child(parent.clone()).await;
    let c3 = child(parent.clone()).await;
    let grandchild = child(c1.clone()).await;
    fake.push(Script::ToolCalls {
        text: String::new(),
        calls: vec![
            (
                "p1".into(),
                "mulligan__list_sessions".into(),
                json!({"limit": 2}).to_string(),
            ),
            (
                "p2".into(),
                "mulligan__list_sessions".into(),
                json!({"limit": 2, "before": c3}).to_string(),
            ),
        ],
    });
    fake.push(Script::reply(&["ok"]));
    let sent = server.send(&parent, "who are my descendants?").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let reply = server.detail(&parent).await.messages.pop().unwrap();
    let pages: Vec<Vec<String>> = reply
        .parts
        .unwrap()
        .into_iter()
        .filter_map(|p| match p {
            Part::ToolCall { call } => Some(call),
            Part::Text { .. } => None,
        })
        .map(|call| {
            let v: Value = serde_json::from_str(call.result.as_deref().unwrap()).unwrap();
            v["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    // Newest first: the grandchild, then the children; never the parent or a stranger.
    assert_eq!(pages, [vec![grandchild, c3], vec![c2, c1]]);
}
