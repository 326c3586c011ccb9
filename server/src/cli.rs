//! CONTRACT §4 client commands (`sessions`, `send`, `regenerate`, `cancel`, `retry`, `mcp`):
//! thin clients of a running server's HTTP API (`mcp` bridges stdio to its `/mcp`, see
//! `server::mcp`). This module owns their arguments, how they find
//! the server and the token, their human and `--json` output, and their exit codes
//! (0 success, 2 the server refused with the contract's error, 1 anything else).
use app::wire::{ApiError, Receipt, RetryReceipt, Run, Session, SessionList};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Value};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the server is, how to authenticate, and how to print.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// Base URL of the running server.
    #[arg(long, env = "MULLIGAN_URL", default_value = "http://127.0.0.1:3000")]
    url: String,
    /// Operator token (default: the one the server keeps in `./data/token`).
    #[arg(long, env = "MULLIGAN_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Print the API's JSON answer as is, on one line.
    #[arg(long)]
    json: bool,
}

/// The client commands, flattened beside `serve` in `mulligan`'s subcommands.
#[derive(Subcommand, Clone, Debug)]
pub enum Command {
    /// List sessions, newest first.
    Sessions {
        #[command(flatten)]
        conn: Conn,
    },
    /// Post an operator message to a session (starts or queues a run).
    Send {
        /// The session's id.
        session: String,
        /// The message; several words are joined with spaces.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run a session again from one of its operator messages.
    Regenerate {
        /// The session's id.
        session: String,
        /// The operator message to regenerate from.
        message: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop a queued or running run.
    Cancel {
        /// The session's id.
        session: String,
        /// The run's id.
        run: String,
        #[command(flatten)]
        conn: Conn,
    },
    /// Retry a session's failed last turn now (`--cancel`: cancel its waiting background retry).
    Retry {
        /// The session's id.
        session: String,
        /// Cancel the session's waiting background retry instead.
        #[arg(long)]
        cancel: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// MCP over stdio: bridges to the running server's `/mcp` with MULLIGAN_TOKEN (the
    /// operator's token, or a session's agent token to act on its sub-sessions).
    Mcp {
        #[command(flatten)]
        conn: Conn,
    },
}

/// Why a command failed.
enum Failure {
    /// The server refused (a 4xx in the contract's shape): exit 2.
    Refused { body: String, error: ApiError },
    /// Anything else, said plainly: exit 1.
    Other(String),
}

type Outcome<T> = Result<T, Failure>;

/// Runs a client command to its exit code; prints nothing but its answer or its error.
pub fn run(cmd: Command) -> ExitCode {
    let json = conn_of(&cmd).json;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    if let Command::Mcp { conn } = &cmd {
        let bridged = Client::new(conn).and_then(|c| rt.block_on(bridge_stdio(c)));
        return match bridged {
            Ok(()) => ExitCode::SUCCESS,
            Err(f) => fail(f, false),
        };
    }
    match rt.block_on(execute(cmd)) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(f) => fail(f, json),
    }
}

fn conn_of(cmd: &Command) -> &Conn {
    match cmd {
        Command::Sessions { conn }
        | Command::Send { conn, .. }
        | Command::Regenerate { conn, .. }
        | Command::Cancel { conn, .. }
        | Command::Retry { conn, .. }
        | Command::Mcp { conn } => conn,
    }
}

fn fail(f: Failure, json: bool) -> ExitCode {
    match f {
        Failure::Refused { body, error } => {
            if json {
                println!("{body}");
            } else {
                eprintln!("{}: {}", error.error.code, error.error.message);
            }
            ExitCode::from(2)
        }
        Failure::Other(why) => {
            eprintln!("mulligan: {why}");
            ExitCode::from(1)
        }
    }
}

/// Calls the API and renders the answer: the JSON line with `--json`, else a human line.
async fn execute(cmd: Command) -> Outcome<String> {
    let client = Client::new(conn_of(&cmd))?;
    let json = conn_of(&cmd).json;
    let (path, method, body): (Vec<&str>, Method, Option<Value>) = match &cmd {
        Command::Sessions { .. } => (vec!["sessions"], Method::GET, None),
        Command::Send { session, text, .. } => (
            vec!["sessions", session, "messages"],
            Method::POST,
            Some(serde_json::json!({ "content": text.join(" ") })),
        ),
        Command::Regenerate {
            session, message, ..
        } => (
            vec!["sessions", session, "messages", message, "regenerate"],
            Method::POST,
            Some(serde_json::json!({})),
        ),
        Command::Cancel { session, run, .. } => (
            vec!["sessions", session, "runs", run, "cancel"],
            Method::POST,
            None,
        ),
        Command::Retry {
            session,
            cancel: true,
            ..
        } => (
            vec!["sessions", session, "waiting-retry"],
            Method::DELETE,
            None,
        ),
        Command::Retry { session, .. } => (vec!["sessions", session, "retry"], Method::POST, None),
        Command::Mcp { .. } => return Err(Failure::Other("`mcp` speaks MCP on stdio".into())),
    };
    let (raw, value) = client.call(method, &path, body).await?;
    if json {
        return Ok(one_line(&raw));
    }
    human(&cmd, value)
}

/// The answer as the server sent it, on one line (JSON strings never hold a raw newline).
fn one_line(raw: &str) -> String {
    raw.trim().replace(['\n', '\r'], "")
}

fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Outcome<T> {
    serde_json::from_value(value)
        .map_err(|e| Failure::Other(format!("the server's answer has an unexpected shape: {e}")))
}

fn human(cmd: &Command, value: Value) -> Outcome<String> {
    Ok(match cmd {
        Command::Sessions { .. } => sessions_table(&parse::<SessionList>(value)?.sessions),
        Command::Send { session, .. } => {
            let r: Receipt = parse(value)?;
            format!(
                "sent to {session}: message {}, run {} ({})",
                r.message_id,
                r.run_id,
                started(r.queued)
            )
        }
        Command::Regenerate {
            session, message, ..
        } => {
            let r: Receipt = parse(value)?;
            let mut line = format!(
                "regenerated {session} from message {message}: run {} ({})",
                r.run_id,
                started(r.queued)
            );
            if !r.superseded.is_empty() {
                line.push_str(&format!(", {} message(s) superseded", r.superseded.len()));
            }
            line
        }
        Command::Cancel { .. } => format!("cancelled run {}", parse::<Run>(value)?.id),
        Command::Retry {
            session,
            cancel: true,
            ..
        } => {
            parse::<Session>(value)?;
            format!("cancelled the waiting retry of {session}")
        }
        Command::Retry { session, .. } => {
            let r: RetryReceipt = parse(value)?;
            format!("retried {session}: {}, run {}", to_wire(&r.kind), r.run_id)
        }
        Command::Mcp { .. } => return Err(Failure::Other("`mcp` speaks MCP on stdio".into())),
    })
}

fn started(queued: bool) -> &'static str {
    if queued {
        "queued"
    } else {
        "started"
    }
}

fn to_wire<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// id, title, model, status, last run (status and retry class).
fn sessions_table(sessions: &[Session]) -> String {
    if sessions.is_empty() {
        return "no sessions".into();
    }
    let mut rows =
        vec![["ID", "TITLE", "MODEL", "STATUS", "LAST RUN", "AUTO RETRY"].map(String::from)];
    let now = server::clock::now_ms();
    for s in sessions {
        let title: String = if s.title.chars().count() > 40 {
            s.title.chars().take(39).chain(['…']).collect()
        } else {
            s.title.clone()
        };
        let last = match &s.last_run {
            None => "-".to_string(),
            Some(r) => match &r.retry {
                Some(c) => format!("{} ({})", to_wire(&r.status), c.retry_class),
                None => to_wire(&r.status),
            },
        };
        rows.push([
            s.id.clone(),
            title,
            s.model.clone(),
            to_wire(&s.status),
            last,
            match &s.waiting_retry {
                Some(w) => format!(
                    "{}: retry {} in {}s ({})",
                    s.auto_retry.as_str(),
                    w.attempt,
                    ((w.fires_at - now).max(0) + 999) / 1000,
                    w.reason
                ),
                None => s.auto_retry.as_str().to_string(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// An authenticated client of `<url>/api/v1`.
struct Client {
    http: reqwest::Client,
    base: Url,
    token: String,
}

impl Client {
    fn new(conn: &Conn) -> Outcome<Client> {
        let base = Url::parse(conn.url.trim())
            .ok()
            .filter(|u| u.scheme() == "http" || u.scheme() == "https")
            .ok_or_else(|| {
                Failure::Other(format!(
                    "`{}` is not an http(s) URL: set MULLIGAN_URL (or --url), e.g. http://127.0.0.1:3000",
                    conn.url
                ))
            })?;
        let token = resolve_token(conn.token.as_deref())?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client { http, base, token })
    }

    /// `<base>/api/v1/<segments…>`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(["api", "v1"]).extend(segments);
        }
        url
    }

    /// Sends the request; a 2xx JSON answer comes back as its text and its value.
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<Value>,
    ) -> Outcome<(String, Value)> {
        let url = self.url(segments);
        let mut req = self
            .http
            .request(method, url.clone())
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            Failure::Other(if e.is_connect() {
                format!(
                    "the server is unreachable at {}: {}",
                    self.base,
                    root_cause(&e)
                )
            } else if e.is_timeout() {
                format!("the server at {} did not answer in time", self.base)
            } else {
                format!("the request to {url} failed: {e}")
            })
        })?;
        let status = resp.status();
        let raw = resp
            .text()
            .await
            .map_err(|e| Failure::Other(format!("reading the answer from {url} failed: {e}")))?;
        let value: Option<Value> = serde_json::from_str(&raw).ok();
        if status == StatusCode::UNAUTHORIZED {
            return Err(Failure::Other(
                "the token was rejected (401): set MULLIGAN_TOKEN (or --token) to the server's token".into(),
            ));
        }
        let api_error = value
            .clone()
            .and_then(|v| serde_json::from_value::<ApiError>(v).ok());
        match (status, value, api_error) {
            (s, Some(v), _) if s.is_success() => Ok((raw, v)),
            (s, _, Some(error)) if s.is_client_error() => Err(Failure::Refused {
                body: one_line(&raw),
                error,
            }),
            (s, _, Some(e)) => Err(Failure::Other(format!(
                "the server failed ({s}): {}: {}",
                e.error.code, e.error.message
            ))),
            (s, _, None) => Err(Failure::Other(format!(
                "the answer from {url} ({s}) is not the API's JSON (is MULLIGAN_URL a Mulligan server?): {}",
                snippet(&raw)
            ))),
        }
    }
}

/// The innermost error of a chain ("Connection refused", not "error sending request").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn snippet(raw: &str) -> String {
    let s: String = raw.trim().chars().take(200).collect();
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

/// The flag or `MULLIGAN_TOKEN`, else the token the server keeps in `./data/token`
/// (`$MULLIGAN_DATA_DIR/token` when that is set).
fn resolve_token(given: Option<&str>) -> Outcome<String> {
    if let Some(t) = given.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(t.to_string());
    }
    let dir = std::env::var_os("MULLIGAN_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "./data".into());
    let path = dir.join("token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        _ => Err(Failure::Other(format!(
            "no token: set MULLIGAN_TOKEN (or pass --token) to the server's token \
             (the one in the URL `mulligan serve` prints); found none in {}",
            path.display()
        ))),
    }
}

// ---- `mulligan mcp`: a bridge, not a second MCP server (see `server::mcp`) ----

/// MCP over stdio, bridged to `<url>/mcp`: each JSON-RPC line read on stdin is posted there
/// with the token; each message of the answer (JSON or SSE) is written back as one line on
/// stdout. Ends when stdin closes and every request has been answered.
async fn bridge_stdio(client: Client) -> Outcome<()> {
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
    client: Client,
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
        for (name, value) in self.headers.lock().expect("headers").iter() {
            req = req.header(*name, value);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                return fail(format!(
                    "the server is unreachable at {}: {}",
                    self.client.base,
                    root_cause(&e)
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
            use eventsource_stream::Eventsource;
            use futures::StreamExt;
            let mut events = resp.bytes_stream().eventsource();
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
        let mut headers = self.headers.lock().expect("headers");
        headers.retain(|(n, _)| *n != name);
        headers.push((name, value));
    }
}
