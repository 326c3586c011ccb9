//! Secrets a provider or tool server echoes back (the API key, an MCP server's `env` value,
//! a bearer token) are `[redacted]` in what Mulligan stores, serves and sends to a model.
use testkit as common;

use app::wire::{Part, RetryClass, RunStatus, ToolCallStatus};
use common::fake::{FakeProvider, Script};
use common::{config, setup, temp_dir, TestServer, API_KEY};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Every answer about the run and its session, as one text.
async fn served(
    server: &TestServer,
    sid: &str,
    run_id: &(impl std::fmt::Display + ?Sized),
) -> String {
    let mut all = String::new();
    for path in [
        format!("/sessions/{sid}?include_superseded=true"),
        format!("/runs/{run_id}"),
        "/sessions".into(),
    ] {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, 200, "{path}: {body}");
        all.push_str(&body.to_string());
    }
    all
}

#[tokio::test]
async fn a_provider_quoting_the_api_key_is_stored_and_served_redacted() {
    let (fake, server) = setup("redact-provider").await;
    let sid = server.create_session().await;

    // 401 whose body quotes the key, as some proxies do.
    fake.push(Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {
            "type": "invalid_request_error",
            "message": format!("Incorrect API key provided: {API_KEY}. Check your key."),
        }}),
    });
    let sent = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.retry.unwrap().retry_class, RetryClass::AuthFailed);
    let message = run.error_message.unwrap();
    assert!(
        message.contains("Incorrect API key provided: [redacted]. Check your key."),
        "{message}"
    );
    let all = served(&server, &sid, &sent.run_id).await;
    assert!(!all.contains(API_KEY), "the key is served: {all}");

    // 500s quoting the key and another bearer credential, on every Tier 1 attempt.
    fake.set_default(Script::Status {
        code: 500,
        headers: vec![],
        body: json!({"error": {"message": format!(
            "upstream refused Authorization: Bearer {API_KEY} (also tried Bearer Zm9vYmFyYmF6cXV4MTIz)"
        )}}),
    });
    let sent = server.send(&sid, "again").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.retry.unwrap().retry_class, RetryClass::ServerError);
    let message = run.error_message.unwrap();
    assert!(
        message.contains("Bearer [redacted] (also tried Bearer [redacted])"),
        "{message}"
    );
    let (_, detail) = server.get(&format!("/runs/{}", sent.run_id)).await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert!(attempts.len() > 1, "{detail}");
    assert!(
        attempts.iter().all(|a| a["error"]
            .as_str()
            .is_some_and(|e| e.contains("[redacted]"))),
        "{detail}"
    );
    let all = served(&server, &sid, &sent.run_id).await;
    assert!(!all.contains(API_KEY), "the key is served: {all}");
    assert!(
        !all.contains("Zm9vYmFyYmF6cXV4MTIz"),
        "a token is served: {all}"
    );
}

/// A catalogue provider's `headers` value is a secret like an `api_key_env` key: a gateway
/// that quotes the `api-key` header it was sent (Azure-style) is stored and served redacted.
#[tokio::test]
async fn a_gateway_quoting_a_catalogue_header_is_stored_and_served_redacted() {
    const HEADER_KEY: &str = "0123abcd4567efgh89ij-gateway-key";
    let fake = FakeProvider::start().await;
    let dir = temp_dir("redact-header");
    let catalogue = json!({
        "providers": {"gw": {"kind": "openai", "base_url": fake.url,
                             "headers": {"api-key": HEADER_KEY},
                             "models": [{"id": "fake-model"}]}},
        "default_model": "gw/fake-model"
    });
    let server =
        TestServer::start(common::config_with_catalogue(&dir, &fake.url, &catalogue)).await;
    let sid = server.create_session().await;

    fake.push(Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {
            "code": "401",
            "message": format!("Access denied due to invalid api-key {HEADER_KEY}. Make sure to provide a valid key."),
        }}),
    });
    let sent = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let message = run.error_message.unwrap();
    assert!(
        message.contains("invalid api-key [redacted]. Make sure"),
        "{message}"
    );
    let (_, detail) = server.get(&format!("/runs/{}", sent.run_id)).await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert!(!attempts.is_empty(), "{detail}");
    assert!(
        attempts.iter().all(|a| a["error"]
            .as_str()
            .is_some_and(|e| e.contains("[redacted]"))),
        "{detail}"
    );
    let all = served(&server, &sid, &sent.run_id).await;
    assert!(
        !all.contains(HEADER_KEY),
        "the header's key is served: {all}"
    );
}

/// A key quoted again and again past the 1,024-character cut: the cut lands inside one
/// quote (at one of the two offsets at least), and none of that quote's characters is kept.
#[tokio::test]
async fn a_key_cut_short_by_the_error_bound_leaves_none_of_its_characters() {
    const KEY: &str = "pk-live-0123456789abcdef-XYZ";
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("redact-cut"), &fake.url);
    c.api_key = Some(KEY.into());
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;
    for pad in ["", "z"] {
        fake.push(Script::Status {
            code: 401,
            headers: vec![],
            body: json!({"error": {
                "type": "invalid_request_error",
                "message": format!("{pad}{}", KEY.repeat(100)),
            }}),
        });
        let sent = server.send(&sid, "hi").await;
        let run = server.wait_run_end(&sent.run_id).await;
        let message = run.error_message.unwrap();
        assert!(message.contains("[redacted]…"), "{message}");
        assert!(!message.contains(&KEY[..4]), "a cut key shows: {message}");
    }
}

/// The reference `server-everything`, installed from end2end's lockfile.
fn everything() -> std::path::PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../end2end/node_modules/.bin/mcp-server-everything");
    assert!(
        path.exists(),
        "{} is missing: run scripts/toolchain.sh --browser (it installs end2end's npm packages)",
        path.display()
    );
    path
}

/// Sorted first in the child's environment, so `get-env`'s answer shows it within the
/// result's bound.
const ENV_NAME: &str = "AAAA_MULLIGAN_TEST_TOKEN";
const ENV_SECRET: &str = "mcp-env-secret-value-0042";

#[tokio::test]
async fn a_tool_result_echoing_an_mcp_env_value_is_stored_and_sent_redacted() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("redact-tool");
    let mcp = dir.join("mcp.json");
    let servers = json!({"mcpServers": {
        "every": {"command": everything(), "env": {ENV_NAME: ENV_SECRET}},
    }});
    std::fs::write(&mcp, servers.to_string()).unwrap();
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
    fake.push(Script::call("", "env1", "every__get-env", json!({})));
    fake.push(Script::reply(&["Seen."]));
    let sent = server.send(&sid, "show me the environment").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");

    let detail = server.detail(&sid).await;
    let call = detail
        .messages
        .iter()
        .flat_map(|m| m.parts.iter().flatten())
        .find_map(|p| match p {
            Part::ToolCall { call } => Some(call.clone()),
            Part::Text { .. } => None,
        })
        .expect("the tool call is recorded");
    assert_eq!(call.status, ToolCallStatus::Ok, "{call:#?}");
    let result = call.result.unwrap_or_default();
    // Only the line of interest is shown: the rest is this process's environment.
    let line = result.lines().find(|l| l.contains(ENV_NAME));
    assert_eq!(
        line.map(str::trim),
        Some(format!("\"{ENV_NAME}\": \"[redacted]\",").as_str()),
        "the stored result"
    );
    let all = served(&server, &sid, &sent.run_id).await;
    assert!(!all.contains(ENV_SECRET), "the env value is served");

    let sent_to_model: Value = fake.seen().pop().unwrap().body;
    let tool_message = sent_to_model["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "env1")
        .cloned()
        .expect("the result is sent to the model");
    assert!(tool_message.to_string().contains("[redacted]"));
    assert!(
        !sent_to_model.to_string().contains(ENV_SECRET),
        "the env value reached the model"
    );
}

/// The operator token the child-process test chooses (long enough for `MULLIGAN_TOKEN`).
const OPERATOR_TOKEN: &str = "operator-token-for-the-child-env-test-0099";

/// A stdio server started by `mulligan serve` sees none of Mulligan's settings, keys or
/// token (CONTRACT §6): a wrapper records its environment before it becomes the reference
/// server, and a tool result quoting the token is stored and served `[redacted]`.
#[tokio::test]
async fn a_stdio_server_sees_no_setting_or_key_and_a_quoted_token_is_redacted() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("child-env");
    let recorded = dir.join("child.env");
    let mcp = dir.join("mcp.json");
    let script = format!(
        "env > '{}'; exec '{}'",
        recorded.display(),
        everything().display()
    );
    let servers = json!({"mcpServers": {
        "every": {"command": "sh", "args": ["-c", script], "env": {"TOOL_OWN": "kept"}},
    }});
    std::fs::write(&mcp, servers.to_string()).unwrap();
    let db = common::database_url(&dir)
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("mulligan.db").display()));
    let (mut child, server) = common::serve(
        &dir,
        &fake.url,
        &dir.join("serve.log"),
        Some(db.clone()),
        &[
            ("MULLIGAN_TOKEN", OPERATOR_TOKEN),
            ("MULLIGAN_MCP_CONFIG", mcp.to_str().unwrap()),
            ("OPENAI_API_KEY", "sk-a-provider-key-in-the-environment"),
        ],
    )
    .await;
    assert_eq!(server.token, OPERATOR_TOKEN);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !recorded.exists() || std::fs::read_to_string(&recorded).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the server never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let env = std::fs::read_to_string(&recorded).unwrap();
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k))
        .collect();
    for leaked in [OPERATOR_TOKEN, API_KEY, "sk-a-provider-key", &db] {
        assert!(!env.contains(leaked), "the child saw {leaked:?}:\n{env}");
    }
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("MULLIGAN_") && *n != "RUST_LOG"),
        "the child saw Mulligan's settings: {names:?}"
    );
    assert!(names.contains(&"PATH"), "PATH passes: {names:?}");
    assert!(
        env.lines().any(|l| l == "TOOL_OWN=kept"),
        "its own env: {env}"
    );

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
    let quote = format!("the token is {OPERATOR_TOKEN}");
    fake.push(Script::call(
        "",
        "echo1",
        "every__echo",
        json!({"message": quote}),
    ));
    fake.push(Script::reply(&["Echoed."]));
    let sent = server.send(&sid, "echo the token").await;
    let run = server.wait_run_end(&sent.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    let detail = server.detail(&sid).await;
    let result = detail
        .messages
        .iter()
        .flat_map(|m| m.parts.iter().flatten())
        .find_map(|p| match p {
            Part::ToolCall { call } => call.result.clone(),
            Part::Text { .. } => None,
        })
        .expect("the tool's result is recorded");
    assert!(
        result.contains("the token is [redacted]"),
        "the stored result: {result}"
    );
    // The arguments are what the model sent and what ran, shown as they are; what the tool
    // answered is served redacted wherever it appears.
    let (_, shown) = server.get(&format!("/runs/{}", sent.run_id)).await;
    assert_eq!(
        shown["tool_calls"][0]["result"], "Echo: the token is [redacted]",
        "{shown}"
    );
    let _ = child.kill().await;
}
