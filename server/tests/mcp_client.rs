//! The MCP client against the reference servers (filesystem, everything) over stdio and
//! streamable HTTP: tools listed, calls answered, failures, cancellation, timeouts, restarts.
use app::wire::{ToolServer, ToolServerStatus, ToolTransport};
use serde_json::{json, Map, Value};
use server::mcp_client::{CallEnd, McpServers, ServerSpec, TransportSpec};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const START_WITHIN: Duration = Duration::from_secs(30);
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

fn stdio(name: &str, command: &Path, args: &[&str]) -> ServerSpec {
    ServerSpec {
        name: name.into(),
        transport: TransportSpec::Stdio {
            command: command.to_string_lossy().into_owned(),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: vec![],
            cwd: None,
        },
        approval: Default::default(),
    }
}

/// Servers that end when the test does.
struct Started {
    servers: McpServers,
    stop: CancellationToken,
}

impl Drop for Started {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn start(specs: Vec<ServerSpec>) -> Started {
    let stop = CancellationToken::new();
    Started {
        servers: McpServers::start(specs, server::redact::Redactor::default(), stop.clone()),
        stop,
    }
}

async fn ready(s: &Started, name: &str) -> ToolServer {
    let ok = s
        .servers
        .wait_until(START_WITHIN, |all| {
            all.iter()
                .any(|t| t.name == name && t.status == ToolServerStatus::Ready)
        })
        .await;
    let snapshot = s.servers.servers();
    assert!(ok, "{name} never became ready: {snapshot:?}");
    snapshot.into_iter().find(|t| t.name == name).unwrap()
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("arguments are an object"),
    }
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mulligan-mcp-{tag}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    // The filesystem server resolves symlinks (e.g. /tmp on macOS).
    dir.canonicalize().unwrap()
}

#[tokio::test]
async fn filesystem_server_lists_tools_and_writes_then_reads_a_file() {
    let dir = temp_dir("fs");
    let fs = testkit::node_bin("mcp-server-filesystem");
    let s = start(vec![stdio("fs", &fs, &[dir.to_str().unwrap()])]);
    s.servers.settled(START_WITHIN).await;
    let server = ready(&s, "fs").await;
    assert_eq!(server.transport, ToolTransport::Stdio);
    assert_eq!(server.error, None);
    let tool = |n: &str| server.tools.iter().find(|t| t.name == n).cloned();
    let write = tool("write_file").expect("write_file listed");
    assert_eq!(write.destructive, Some(true));
    assert_eq!(write.read_only, Some(false));
    assert!(write.input_schema["properties"]["content"].is_object());
    let read = tool("read_text_file").expect("read_text_file listed");
    assert_eq!(read.read_only, Some(true));
    assert!(read.description.is_some());

    let cancel = CancellationToken::new();
    let file = dir.join("note.txt");
    let end = s
        .servers
        .call(
            "fs",
            "write_file",
            args(json!({"path": file, "content": "hello from mulligan"})),
            CALL_TIMEOUT,
            &cancel,
        )
        .await;
    assert!(
        matches!(
            &end,
            CallEnd::Done {
                is_error: false,
                ..
            }
        ),
        "{end:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "hello from mulligan"
    );
    let end = s
        .servers
        .call(
            "fs",
            "read_text_file",
            args(json!({"path": file})),
            CALL_TIMEOUT,
            &cancel,
        )
        .await;
    match end {
        CallEnd::Done {
            text,
            is_error: false,
        } => assert!(text.contains("hello from mulligan"), "{text}"),
        other => panic!("{other:?}"),
    }

    // A path outside the allowed directory: the server answers with isError.
    let end = s
        .servers
        .call(
            "fs",
            "read_text_file",
            args(json!({"path": "/etc/hostname"})),
            CALL_TIMEOUT,
            &cancel,
        )
        .await;
    match end {
        CallEnd::Done {
            text,
            is_error: true,
        } => assert!(!text.is_empty()),
        other => panic!("{other:?}"),
    }

    // Unknown tool and unknown server: not sent, and the text says what exists.
    let end = s
        .servers
        .call("fs", "rm_rf", Map::new(), CALL_TIMEOUT, &cancel)
        .await;
    match end {
        CallEnd::NotSent { text } => {
            assert!(
                text.contains("rm_rf") && text.contains("write_file"),
                "{text}"
            )
        }
        other => panic!("{other:?}"),
    }
    let end = s
        .servers
        .call("nope", "write_file", Map::new(), CALL_TIMEOUT, &cancel)
        .await;
    match end {
        CallEnd::NotSent { text } => assert!(text.contains("\"nope\"") && text.contains("fs")),
        other => panic!("{other:?}"),
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_server_that_cannot_start_is_failed_and_calls_are_not_sent() {
    let missing = Path::new("/nonexistent/mcp-server-missing");
    let s = start(vec![stdio("gone", missing, &[])]);
    s.servers.settled(START_WITHIN).await;
    let server = &s.servers.servers()[0];
    assert_eq!(server.status, ToolServerStatus::Failed);
    let error = server.error.as_deref().unwrap();
    assert!(
        error.contains("cannot start") && error.contains("mcp-server-missing"),
        "{error}"
    );
    assert!(server.tools.is_empty());
    let end = s
        .servers
        .call(
            "gone",
            "anything",
            Map::new(),
            CALL_TIMEOUT,
            &CancellationToken::new(),
        )
        .await;
    match end {
        CallEnd::NotSent { text } => assert!(text.contains("not available"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn secrets_in_env_stay_out_of_errors() {
    // `sh` prints its environment to stderr and exits: not an MCP server.
    let spec = ServerSpec {
        name: "leaky".into(),
        transport: TransportSpec::Stdio {
            command: "sh".into(),
            args: vec!["-c".into(), "echo \"key=$API_KEY\" >&2; exit 3".into()],
            env: vec![("API_KEY".into(), "sk-very-secret".into())],
            cwd: None,
        },
        approval: Default::default(),
    };
    let s = start(vec![spec]);
    s.servers.settled(START_WITHIN).await;
    let server = &s.servers.servers()[0];
    assert_eq!(server.status, ToolServerStatus::Failed);
    let error = server.error.as_deref().unwrap();
    assert!(!error.contains("sk-very-secret"), "{error}");
    assert!(
        error.contains("[redacted]") && error.contains("exited"),
        "{error}"
    );
}

#[tokio::test]
async fn cancel_during_a_long_call_ends_it_within_a_second() {
    let s = start(vec![stdio(
        "every",
        &testkit::node_bin("mcp-server-everything"),
        &[],
    )]);
    let server = ready(&s, "every").await;
    assert!(
        server
            .tools
            .iter()
            .any(|t| t.name == "trigger-long-running-operation"),
        "{server:?}"
    );
    let cancel = CancellationToken::new();
    let call = {
        let servers = s.servers.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            servers
                .call(
                    "every",
                    "trigger-long-running-operation",
                    args(json!({"duration": 30, "steps": 30})),
                    CALL_TIMEOUT,
                    &cancel,
                )
                .await
        })
    };
    // Let the request reach the server; the outcome is the same if it had not.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let end = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .expect("the call ends within 1 s of the cancel")
        .unwrap();
    assert_eq!(end, CallEnd::Cancelled);
    assert!(cancelled_at.elapsed() < Duration::from_secs(1));

    // The server is still usable after the cancellation.
    let end = s
        .servers
        .call(
            "every",
            "echo",
            args(json!({"message": "still here"})),
            CALL_TIMEOUT,
            &CancellationToken::new(),
        )
        .await;
    match end {
        CallEnd::Done {
            text,
            is_error: false,
        } => assert!(text.contains("still here"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_call_past_its_timeout_is_lost() {
    let s = start(vec![stdio(
        "every",
        &testkit::node_bin("mcp-server-everything"),
        &[],
    )]);
    ready(&s, "every").await;
    let began = Instant::now();
    let end = s
        .servers
        .call(
            "every",
            "trigger-long-running-operation",
            args(json!({"duration": 20, "steps": 4})),
            Duration::from_millis(500),
            &CancellationToken::new(),
        )
        .await;
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    match end {
        CallEnd::Lost { text } => assert!(text.contains("0.5 s"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn structured_and_image_results_become_text() {
    let s = start(vec![stdio(
        "every",
        &testkit::node_bin("mcp-server-everything"),
        &[],
    )]);
    ready(&s, "every").await;
    let cancel = CancellationToken::new();
    let end = s
        .servers
        .call("every", "get-tiny-image", Map::new(), CALL_TIMEOUT, &cancel)
        .await;
    match end {
        CallEnd::Done {
            text,
            is_error: false,
        } => assert!(text.contains("[image: image/png,"), "{text}"),
        other => panic!("{other:?}"),
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_killed_server_is_restarted() {
    let s = start(vec![stdio(
        "every",
        &testkit::node_bin("mcp-server-everything"),
        &[],
    )]);
    ready(&s, "every").await;
    let pid = s.servers.pid("every").expect("a stdio server has a pid");
    // SAFETY: kill(2) on the child this test's registry started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let failed = s
        .servers
        .wait_until(Duration::from_secs(10), |all| {
            all[0].status == ToolServerStatus::Failed
        })
        .await;
    assert!(failed, "{:?}", s.servers.servers());
    let error = s.servers.servers()[0].error.clone().unwrap();
    assert!(error.contains("retrying in"), "{error}");
    let back = s
        .servers
        .wait_until(START_WITHIN, |all| all[0].status == ToolServerStatus::Ready)
        .await;
    assert!(back, "{:?}", s.servers.servers());
    assert_ne!(s.servers.pid("every"), Some(pid));
    let end = s
        .servers
        .call(
            "every",
            "echo",
            args(json!({"message": "back"})),
            CALL_TIMEOUT,
            &CancellationToken::new(),
        )
        .await;
    assert!(
        matches!(
            end,
            CallEnd::Done {
                is_error: false,
                ..
            }
        ),
        "{end:?}"
    );
}

#[tokio::test]
async fn shutdown_ends_the_children() {
    let s = start(vec![stdio(
        "every",
        &testkit::node_bin("mcp-server-everything"),
        &[],
    )]);
    ready(&s, "every").await;
    let pid = s.servers.pid("every").unwrap();
    let servers = s.servers.clone();
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(pid) {
        assert!(Instant::now() < deadline, "child {pid} outlived shutdown");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(servers);
}

/// Whether `pid` names a live, unreaped-or-running process (zombies count as ended).
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// server-everything's streamable HTTP mode on a free port, ended with the test.
struct HttpServer {
    child: tokio::process::Child,
    port: u16,
}

impl HttpServer {
    fn spawn() -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(testkit::node_bin("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        HttpServer { child, port }
    }
}

#[tokio::test]
async fn streamable_http_server_lists_tools_answers_and_cancels() {
    let mut http = HttpServer::spawn();
    let spec = ServerSpec {
        name: "web".into(),
        transport: TransportSpec::Http {
            url: format!("http://127.0.0.1:{}/mcp", http.port),
            headers: vec![("X-Test".into(), "secret-header-value".into())],
        },
        approval: Default::default(),
    };
    // The server may not listen yet at the first attempt: it is retried.
    let s = start(vec![spec]);
    let server = ready(&s, "web").await;
    assert_eq!(server.transport, ToolTransport::Http);
    assert!(server.tools.iter().any(|t| t.name == "echo"), "{server:?}");
    let end = s
        .servers
        .call(
            "web",
            "echo",
            args(json!({"message": "over http"})),
            CALL_TIMEOUT,
            &CancellationToken::new(),
        )
        .await;
    match end {
        CallEnd::Done {
            text,
            is_error: false,
        } => assert!(text.contains("over http"), "{text}"),
        other => panic!("{other:?}"),
    }

    let cancel = CancellationToken::new();
    let call = {
        let servers = s.servers.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            servers
                .call(
                    "web",
                    "trigger-long-running-operation",
                    args(json!({"duration": 30, "steps": 30})),
                    CALL_TIMEOUT,
                    &cancel,
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    cancel.cancel();
    let end = tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .expect("the call ends within 1 s of the cancel")
        .unwrap();
    assert_eq!(end, CallEnd::Cancelled);

    // The HTTP server goes away: the source fails (without showing the header's value).
    let _ = http.child.kill().await;
    let failed = s
        .servers
        .wait_until(START_WITHIN, |all| {
            all[0].status == ToolServerStatus::Failed
        })
        .await;
    let snapshot = s.servers.servers();
    assert!(failed, "{snapshot:?}");
    assert!(!format!("{snapshot:?}").contains("secret-header-value"));
}
