//! Agent turns against real MCP servers (the reference `server-filesystem` and
//! `server-everything`, started by Mulligan over stdio from `MULLIGAN_MCP_CONFIG`): a turn
//! that writes a file; a failure after the write continued without writing again; cancel
//! during a long tool call; and a kill -9 mid-call, whose call reads as interrupted.
use testkit as common;

use app::wire::{Part, RetryClass, RunKind, RunStatus, ToolCall, ToolCallStatus};
use common::fake::{FakeProvider, Script};
use common::{config, database_url, serve, temp_dir, TestServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// An `mcpServers` file with `fs` (on `files`) and `every`, in `dir`. Neither asks for
/// approval: these tests are about executing calls (approval.rs is about asking).
fn mcp_config(dir: &Path, files: &Path) -> PathBuf {
    let path = dir.join("mcp.json");
    let config = json!({"mcpServers": {
        "fs": {"command": common::node_bin("mcp-server-filesystem"), "args": [files], "approval": "never"},
        "every": {"command": common::node_bin("mcp-server-everything"), "approval": "never"},
    }});
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// Waits until every configured source is ready (30 s at most).
async fn tools_ready(server: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, tools) = server.get("/tools").await;
        let servers = tools["servers"].as_array().cloned().unwrap_or_default();
        if servers.len() == 3 && servers.iter().all(|s| s["status"] == "ready") {
            return;
        }
        assert!(Instant::now() < deadline, "tool servers not ready: {tools}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn calls_of(
    server: &TestServer,
    sid: &str,
    run_id: &(impl std::fmt::Display + ?Sized),
) -> Vec<ToolCall> {
    let run_id = run_id.to_string();
    let detail = server.detail(sid).await;
    let reply = detail
        .messages
        .iter()
        .find(|m| m.run_id.as_ref().is_some_and(|id| *id == run_id))
        .expect("the run's reply");
    reply
        .parts
        .iter()
        .flatten()
        .filter_map(|p| match p {
            Part::ToolCall { call } => Some(call.clone()),
            Part::Text { .. } => None,
        })
        .collect()
}

async fn started(tag: &str) -> (FakeProvider, TestServer, PathBuf) {
    let fake = FakeProvider::start().await;
    let dir = temp_dir(tag);
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let files = files.canonicalize().unwrap();
    let mut c = config(&dir, &fake.url);
    c.mcp_config = Some(mcp_config(&dir, &files));
    let server = TestServer::start(c).await;
    tools_ready(&server).await;
    (fake, server, files)
}

#[tokio::test]
async fn a_three_step_turn_writes_a_file_and_a_retry_never_writes_it_again() {
    let (fake, server, files) = started("mcp-write").await;
    let sid = server.create_session().await;
    let target = files.join("note.txt");
    let path = target.to_string_lossy().to_string();
    fake.push(Script::call(
        "Writing. ",
        "w1",
        "fs__write_file",
        json!({"path": path, "content": "hello"}),
    ));
    fake.push(Script::call(
        "Checking. ",
        "r1",
        "fs__read_text_file",
        json!({"path": path}),
    ));
    fake.push(Script::reply(&["It ", "says hello."]));
    let sent = server.send(&sid, "write a note").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!((run.steps, run.tools_executed), (3, 2));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello");
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls.len(), 2);
    assert!(calls
        .iter()
        .all(|c| c.status == ToolCallStatus::Ok && c.server == "fs"));
    assert!(calls[1].result.as_deref().unwrap().contains("hello"));

    // The same turn failing after the write: kept, and continued without writing again.
    let again = files.join("again.txt");
    let path = again.to_string_lossy().to_string();
    fake.push(Script::call(
        "",
        "w2",
        "fs__write_file",
        json!({"path": path, "content": "once"}),
    ));
    for _ in 0..3 {
        fake.push(Script::unavailable());
    }
    let sent = server.send(&sid, "write another").await;
    let failed = server.wait_run_end(&sent.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    assert!(failed.retry.as_ref().unwrap().retryable);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), "once");
    // Were the write sent again, the file would be back.
    std::fs::remove_file(&again).unwrap();
    fake.push(Script::reply(&["Done."]));
    let (status, retry) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["kind"], "continuation");
    let next = server.wait_run_end(retry["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(next.tools_executed, 0);
    assert!(!again.exists(), "the recorded write ran again");
    let last = fake.seen().pop().unwrap().body;
    let result = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "w2")
        .cloned()
        .expect("the kept result is sent");
    assert_eq!(result["role"], "tool");
}

#[tokio::test]
async fn cancel_during_a_long_tool_call_ends_the_run_cancelled_within_a_second() {
    let (fake, server, _files) = started("mcp-cancel").await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "",
        "long",
        "every__trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    ));
    let sent = server.send(&sid, "take your time").await;
    // Wait until the call is running.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let detail = server.detail(&sid).await;
        let running = detail
            .messages
            .iter()
            .flat_map(|m| m.parts.iter().flatten())
            .any(
                |p| matches!(p, Part::ToolCall { call } if call.status == ToolCallStatus::Running),
            );
        if running {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the call never started: {detail:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let at = Instant::now();
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", sent.run_id),
            json!({}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    let run = server.wait_run_end(&sent.run_id).await;
    let took = at.elapsed();
    assert_eq!(run.status, RunStatus::Cancelled, "{run:#?}");
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls[0].status, ToolCallStatus::Cancelled, "{calls:#?}");
}

#[tokio::test]
async fn kill_9_during_a_tool_call_leaves_it_interrupted_and_the_continuation_says_so() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("mcp-kill9");
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let config = mcp_config(&dir, &files.canonicalize().unwrap());
    let env = [("MULLIGAN_MCP_CONFIG", config.to_str().unwrap())];
    let log = dir.join("server.log");
    let (mut child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    tools_ready(&server).await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "Starting the job. ",
        "job",
        "every__trigger-long-running-operation",
        json!({"duration": 5, "steps": 5}),
    ));
    let rid = server.send(&sid, "run the job").await.run_id;
    let deadline = Instant::now() + Duration::from_secs(15);
    while server.run(&rid).await.tools_executed == 0 {
        assert!(Instant::now() < deadline, "the call never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let run = server.wait_run_end(&rid).await;
    assert_eq!(run.status, RunStatus::Failed, "{run:#?}");
    assert_eq!(
        run.retry.as_ref().unwrap().retry_class,
        RetryClass::Interrupted
    );
    let calls = calls_of(&server, &sid, &rid).await;
    assert_eq!(calls[0].status, ToolCallStatus::Interrupted, "{calls:#?}");

    fake.push(Script::reply(&["I will check first."]));
    let (status, retry) = server
        .post(&format!("/sessions/{sid}/retry"), json!({}))
        .await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(retry["kind"], "continuation");
    let next = server.wait_run_end(retry["run_id"].as_str().unwrap()).await;
    assert_eq!(next.status, RunStatus::Completed, "{next:#?}");
    assert_eq!(next.kind, RunKind::Continuation);
    let last: Value = fake.seen().pop().unwrap().body;
    let told = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "job")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .expect("the interrupted call is reported");
    assert!(
        told.contains("outcome of this tool call is unknown"),
        "{told}"
    );
}

/// A server on `mcp_servers` (an `mcpServers` object), not waiting for its tool sources.
async fn started_with(tag: &str, mcp_servers: Value) -> (FakeProvider, TestServer) {
    let fake = FakeProvider::start().await;
    let dir = temp_dir(tag);
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({ "mcpServers": mcp_servers }).to_string()).unwrap();
    let mut c = config(&dir, &fake.url);
    c.mcp_config = Some(path);
    (fake, TestServer::start(c).await)
}

/// The tool names a provider request offered.
fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_turn_sent_while_a_tool_source_starts_waits_for_its_tools() {
    let dir = temp_dir("mcp-slow-files");
    let files = dir.canonicalize().unwrap();
    // `fs` answers MCP only after three seconds.
    let slow = json!({"fs": {
        "approval": "never",
        "command": "sh",
        "args": ["-c", "sleep 3; exec \"$0\" \"$1\"", common::node_bin("mcp-server-filesystem"), files],
    }});
    let (fake, server) = started_with("mcp-slow", slow).await;
    let (_, tools) = server.get("/tools").await;
    assert_eq!(tools["servers"][1]["status"], "starting", "{tools}");
    let sid = server.create_session().await;
    let target = files.join("early.txt");
    let path = target.to_string_lossy().to_string();
    fake.push(Script::call(
        "",
        "w1",
        "fs__write_file",
        json!({"path": path, "content": "early"}),
    ));
    fake.push(Script::reply(&["Written."]));
    let sent = server.send(&sid, "write it now").await;
    // Waiting for `fs`, the run shows as running.
    assert_eq!(server.run(&sent.run_id).await.status, RunStatus::Running);
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!(run.tools_executed, 1);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "early");
    let first = &fake.seen()[0].body;
    assert!(
        offered(first).iter().any(|t| t == "fs__write_file"),
        "{first}"
    );
    assert_eq!(first["messages"][0]["role"], "user", "nothing was missing");
}

#[tokio::test]
async fn a_tool_source_still_starting_after_the_wait_is_named_to_the_model() {
    // `stuck` never answers MCP: it stays `starting` (for 30 s) and the turn goes on without.
    let stuck = json!({"stuck": {"command": "sleep", "args": ["60"]}});
    let (fake, server) = started_with("mcp-stuck", stuck).await;
    let sid = server.create_session().await;
    fake.push(Script::reply(&["Without it, then."]));
    let at = Instant::now();
    let sent = server.send(&sid, "use stuck").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let took = at.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(20),
        "went on after {took:?}"
    );
    let first = &fake.seen()[0].body;
    let note = &first["messages"][0];
    assert_eq!(note["role"], "system", "{first}");
    let text = note["content"].as_str().unwrap();
    assert!(
        text.contains("\"stuck\"") && text.contains("not available"),
        "{text}"
    );
    assert!(offered(first).iter().all(|t| !t.starts_with("stuck__")));
    assert_eq!(first["messages"][1]["content"], "use stuck");
}
