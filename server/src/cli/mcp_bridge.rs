//! `mulligan mcp`: MCP over stdio bridged to a running server's `/mcp` — a bridge, not a
//! second MCP server (see `server::http::mcp`).
use super::{Failure, Outcome};
use reqwest::{StatusCode, Url};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// Where the bridge posts: the server's `/mcp`, with the token.
pub struct Target {
    pub http: reqwest::Client,
    pub base: Url,
    pub token: String,
}

/// MCP over stdio, bridged to `<url>/mcp`: each JSON-RPC line read on stdin is posted there
/// with the token; each message of the answer (JSON or SSE) is written back as one line on
/// stdout. Ends when stdin closes and every request has been answered.
pub async fn bridge_stdio(client: Target) -> Outcome<()> {
    let mut endpoint = client.base.clone();
    if let Ok(mut path) = endpoint.path_segments_mut() {
        path.pop_if_empty().push("mcp");
    }
    let bridge = Arc::new(Bridge {
        client,
        endpoint,
        headers: Mutex::default(),
    });
    // Plain threads for stdin and stdout: blocking reads and writes, one line each.
    let (out, lines_out) = tokio::sync::mpsc::unbounded_channel::<String>();
    let writer = std::thread::spawn(move || write_lines(lines_out));
    let (lines_in, mut stdin) = tokio::sync::mpsc::unbounded_channel::<std::io::Result<String>>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            if lines_in.send(line).is_err() {
                break;
            }
        }
    });
    let mut inflight = tokio::task::JoinSet::new();
    while let Some(line) = stdin.recv().await {
        let line = line.map_err(|e| Failure::Other(format!("reading stdin failed: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let (bridge, out) = (bridge.clone(), out.clone());
        inflight.spawn(async move { bridge.forward(line, out).await });
    }
    while inflight.join_next().await.is_some() {}
    drop(out);
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

/// Writes each message as one line on stdout, flushed, until the channel closes.
fn write_lines(mut lines: tokio::sync::mpsc::UnboundedReceiver<String>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    while let Some(line) = lines.blocking_recv() {
        let line = line.replace(['\n', '\r'], "") + "\n";
        if stdout.write_all(line.as_bytes()).is_err() || stdout.flush().is_err() {
            break;
        }
    }
}

struct Bridge {
    client: Target,
    endpoint: Url,
    /// `MCP-Protocol-Version` and `Mcp-Session-Id` to send once the server has named them.
    headers: Mutex<Vec<(&'static str, String)>>,
}

impl Bridge {
    async fn forward(&self, line: String, out: tokio::sync::mpsc::UnboundedSender<String>) {
        let msg: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let id = msg
            .get("id")
            .cloned()
            .filter(|_| msg.get("method").is_some());
        let fail = |why: String| {
            eprintln!("mulligan mcp: {why}");
            if let Some(id) = &id {
                let err =
                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": why}});
                let _ = out.send(err.to_string());
            }
        };
        let mut req = self
            .client
            .http
            .post(self.endpoint.clone())
            .bearer_auth(&self.client.token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .body(line);
        let headers = self
            .headers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for (name, value) in headers.iter() {
            req = req.header(*name, value);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return fail(format!(
                    "the server is unreachable at {}: {}",
                    self.client.base,
                    app::api::native::root_cause(&e)
                ))
            }
        };
        if let Some(sid) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.remember("mcp-session-id", sid.to_string());
        }
        let status = resp.status();
        let sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut answers = Vec::new();
        if sse {
            use futures::StreamExt;
            // Bounded, generously: a tool's whole answer is one event.
            let events = server::sse_lines::owned_events(resp.bytes_stream(), 64 << 20);
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(ev) if !ev.data.trim().is_empty() => answers.push(ev.data),
                    Ok(_) => {}
                    Err(e) => return fail(format!("the server's event stream broke: {e}")),
                }
            }
        } else {
            match resp.text().await {
                Ok(body) if !body.trim().is_empty() => answers.push(body),
                Ok(_) => {}
                Err(e) => return fail(format!("reading the server's answer failed: {e}")),
            }
        }
        let parsed: Vec<Value> = answers
            .iter()
            .filter_map(|a| serde_json::from_str(a).ok())
            .flat_map(|v| match v {
                Value::Array(batch) => batch,
                one => vec![one],
            })
            .filter(|v| v.get("jsonrpc").is_some())
            .collect();
        if !status.is_success() && parsed.is_empty() {
            let detail = answers.join(" ");
            return fail(if status == StatusCode::UNAUTHORIZED {
                format!("the token was rejected (401): set MULLIGAN_TOKEN to the operator's or a session's agent token ({detail})")
            } else {
                format!("the server answered {status}: {detail}")
            });
        }
        for v in parsed {
            let version = v.pointer("/result/protocolVersion").and_then(Value::as_str);
            if let (Some(version), Some("initialize")) =
                (version, msg.get("method").and_then(Value::as_str))
            {
                self.remember("mcp-protocol-version", version.to_string());
            }
            let _ = out.send(v.to_string());
        }
    }

    fn remember(&self, name: &'static str, value: String) {
        let mut headers = self
            .headers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        headers.retain(|(n, _)| *n != name);
        headers.push((name, value));
    }
}
