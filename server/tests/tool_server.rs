//! Agent turns against a tool server of the test's own (the official `rmcp` SDK over
//! streamable HTTP), which reports what reached it: cancelling a run during a call sends MCP
//! `notifications/cancelled` that the tool sees; a call past `MULLIGAN_TOOL_TIMEOUT_MS` is
//! cancelled at the server and the turn goes on with the error; an `isError` result reaches
//! the model as the tool's answer, and the turn completes.
use testkit as common;

use app::wire::{Part, RunStatus, ToolCall, ToolCallStatus};
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What the probe saw, in order.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// `slow` began.
    Started,
    /// `slow` saw `notifications/cancelled` for its request.
    Cancelled,
}

/// The probe's tools: `slow` waits (up to a minute) for a cancel; `broken` answers `isError`.
#[derive(Clone)]
struct Probe {
    seen: UnboundedSender<Seen>,
}

fn tool(name: &str, about: &str) -> Tool {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    Tool::new(name.to_string(), about.to_string(), Arc::new(schema))
}

impl ServerHandler for Probe {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("probe", "1"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("slow", "Waits a minute unless cancelled."),
            tool("broken", "Always fails."),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "slow" => {
                let _ = self.seen.send(Seen::Started);
                tokio::select! {
                    _ = context.ct.cancelled() => {
                        let _ = self.seen.send(Seen::Cancelled);
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                    _ = tokio::time::sleep(Duration::from_secs(60)) => {
                        Ok(CallToolResult::success(vec![ContentBlock::text("slept")]).into())
                    }
                }
            }
            "broken" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("the disk is on fire")]).into())
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// The probe served on a free port: its `/mcp` URL and what it sees.
async fn probe() -> (String, UnboundedReceiver<Seen>) {
    let (tx, rx) = unbounded_channel();
    let service = StreamableHttpService::new(
        move || Ok(Probe { seen: tx.clone() }),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

/// A Mulligan whose one tool source is the probe, ready; `tool_timeout_ms` per call.
async fn started(tag: &str, url: &str, tool_timeout_ms: u64) -> (FakeProvider, TestServer) {
    let fake = FakeProvider::start().await;
    let dir = temp_dir(tag);
    let path = dir.join("mcp.json");
    std::fs::write(
        &path,
        // It never asks: these tests are about calls that run (approval.rs asks).
        json!({"mcpServers": {"probe": {"url": url, "approval": "never"}}}).to_string(),
    )
    .unwrap();
    let mut c = config(&dir, &fake.url);
    c.mcp_config = Some(path);
    c.tool_timeout_ms = tool_timeout_ms;
    let server = TestServer::start(c).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, tools) = server.get("/tools").await;
        let ready = tools["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"] == "probe" && s["status"] == "ready");
        if ready {
            return (fake, server);
        }
        assert!(
            Instant::now() < deadline,
            "the probe never became ready: {tools}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next thing the probe saw, within `within`.
async fn next_seen(rx: &mut UnboundedReceiver<Seen>, within: Duration) -> Seen {
    tokio::time::timeout(within, rx.recv())
        .await
        .expect("the probe saw something in time")
        .expect("the probe is up")
}

async fn calls_of(
    server: &TestServer,
    sid: &str,
    run_id: &(impl std::fmt::Display + ?Sized),
) -> Vec<ToolCall> {
    let run_id = run_id.to_string();
    let detail = server.detail(sid).await;
    detail
        .messages
        .iter()
        .filter(|m| m.run_id.as_ref().is_some_and(|id| *id == run_id))
        .flat_map(|m| m.parts.iter().flatten())
        .filter_map(|p| match p {
            Part::ToolCall { call } => Some(call.clone()),
            Part::Text { .. } => None,
        })
        .collect()
}

/// The `tool` message the model was sent in the run's last request.
fn tool_answer(fake: &FakeProvider) -> String {
    let last = fake.seen().pop().expect("a provider request").body;
    let messages: Vec<Value> = last["messages"].as_array().cloned().unwrap_or_default();
    let answer = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("a tool message in {last}"));
    answer["content"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn cancelling_a_run_during_a_call_cancels_it_at_the_tool_server() {
    let (url, mut seen) = probe().await;
    let (fake, server) = started("probe-cancel", &url, 120_000).await;
    let sid = server.create_session().await;
    fake.push(Script::call("", "s1", "probe__slow", json!({})));
    let sent = server.send(&sid, "wait for it").await;
    assert_eq!(
        next_seen(&mut seen, Duration::from_secs(15)).await,
        Seen::Started
    );

    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", sent.run_id),
            json!({}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    assert_eq!(
        next_seen(&mut seen, Duration::from_secs(2)).await,
        Seen::Cancelled,
        "notifications/cancelled reached the tool"
    );
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Cancelled, "{run:#?}");
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls[0].status, ToolCallStatus::Cancelled, "{calls:#?}");
    assert_eq!(fake.seen().len(), 1, "no model step after the cancel");
}

#[tokio::test]
async fn a_call_past_the_tool_timeout_is_cancelled_and_the_turn_goes_on() {
    let (url, mut seen) = probe().await;
    let (fake, server) = started("probe-timeout", &url, 500).await;
    let sid = server.create_session().await;
    fake.push(Script::call("", "s1", "probe__slow", json!({})));
    fake.push(Script::reply(&["It", " timed", " out."]));
    let sent = server.send(&sid, "wait for it").await;
    assert_eq!(
        next_seen(&mut seen, Duration::from_secs(15)).await,
        Seen::Started
    );
    assert_eq!(
        next_seen(&mut seen, Duration::from_secs(5)).await,
        Seen::Cancelled,
        "the timed-out call was cancelled at the server"
    );
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls[0].status, ToolCallStatus::Error, "{calls:#?}");
    let told = tool_answer(&fake);
    assert!(told.contains("0.5 s"), "the model learns the limit: {told}");
    assert!(
        told.contains("check before calling it again"),
        "the model learns the outcome is unknown: {told}"
    );
}

#[tokio::test]
async fn an_is_error_result_reaches_the_model_and_the_turn_completes() {
    let (url, _seen) = probe().await;
    let (fake, server) = started("probe-error", &url, 120_000).await;
    let sid = server.create_session().await;
    fake.push(Script::call("", "b1", "probe__broken", json!({})));
    fake.push(Script::reply(&["The", " tool", " failed."]));
    let sent = server.send(&sid, "try the broken one").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let calls = calls_of(&server, &sid, &run.id).await;
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0].status, ToolCallStatus::Error, "{calls:#?}");
    assert!(
        tool_answer(&fake).contains("the disk is on fire"),
        "the tool's own error text reaches the model"
    );
    let detail = server.detail(&sid).await;
    let reply = detail
        .messages
        .iter()
        .rev()
        .find(|m| m.run_id.as_ref().map(|id| id.as_str()) == Some(run.id.as_str()))
        .unwrap();
    assert!(reply.content.contains("The tool failed."), "{reply:#?}");
}
