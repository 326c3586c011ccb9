//! `send --follow` and `retry --follow`: streams one run to the terminal as it happens — its
//! text, each tool call with its status, Tier 1's waits — and ends with the run: exit 0 when
//! it completed, 3 when it failed (with its class and what a retry would do), 4 when it was
//! cancelled. Ctrl-C asks whether to cancel the run.
use super::render::{approval_line, tool_line, untrusted};
use super::{Failure, Outcome};
use app::api::native::Client;
use app::api::{self};
use app::wire::{Event, Run, RunId, RunStatus, SessionId};
use futures::StreamExt;
use server::sse_lines::owned_events;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// The largest event read from the server (a `message` event holds a whole reply).
const MAX_EVENT_BYTES: usize = 16 << 20;

/// How often a dropped event stream is opened again before giving up.
const RECONNECTS: u32 = 5;

/// Follows run `run_id` of `session` from event `after` on.
pub async fn follow(
    client: &Client,
    session: &SessionId,
    run_id: &RunId,
    after: i64,
) -> Outcome<ExitCode> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| Failure::Other(format!("cannot build the HTTP client: {e}")))?;
    let url = client.url(&api::EVENTS.url(&[session.as_str()]));
    let mut last = after;
    let mut reconnects = 0;
    let mut at_line_start = true;
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        let resp = http
            .get(&url)
            .bearer_auth(client.token())
            .header("Last-Event-ID", last.to_string())
            .send()
            .await
            .map_err(|e| Failure::Other(format!("cannot follow the session's events: {e}")))?;
        if !resp.status().is_success() {
            return Err(Failure::Other(format!(
                "the server refused the session's events ({})",
                resp.status()
            )));
        }
        let mut events = std::pin::pin!(owned_events(resp.bytes_stream(), MAX_EVENT_BYTES));
        loop {
            let next = tokio::select! {
                ev = events.next() => ev,
                _ = &mut interrupt => {
                    if ask_to_cancel(run_id).await {
                        let cancelled = client.call(&api::CANCEL_RUN, &[session.as_str(), run_id.as_str()], None).await;
                        if let Err(e) = cancelled {
                            eprintln!("could not cancel: {e:?}");
                        }
                    }
                    interrupt.set(tokio::signal::ctrl_c());
                    continue;
                }
            };
            let Some(Ok(ev)) = next else { break };
            if let Ok(id) = ev.id.parse::<i64>() {
                last = last.max(id);
            }
            let Some(Ok(event)) = Event::parse(&ev.name, &ev.data) else {
                continue;
            };
            match event {
                Event::Delta(d) if d.run_id == *run_id => {
                    print!("{}", untrusted(&d.text));
                    at_line_start = d.text.ends_with('\n');
                    let _ = std::io::stdout().flush();
                }
                Event::ToolCall(t) if t.run_id == *run_id => {
                    if !at_line_start {
                        println!();
                    }
                    if t.call.is_waiting() {
                        // It waits for a decision (CONTRACT §8): say how to give it, and keep
                        // following: the decision resumes the run.
                        println!("{}", untrusted(&approval_line(session, run_id, &t.call)));
                    } else {
                        println!("{}", untrusted(&tool_line(&t.call)));
                    }
                    at_line_start = true;
                }
                Event::Attempt(a) if a.run_id == *run_id => {
                    eprintln!(
                        "[provider failed: {}; Tier 1 tries again in {:.1} s (attempt {})]",
                        untrusted(&a.reason),
                        a.retry_in_ms as f64 / 1000.0,
                        a.n
                    );
                }
                Event::Run(r) if r.id == *run_id && !r.status.is_active() => {
                    if !at_line_start {
                        println!();
                    }
                    return Ok(ended(session, &r));
                }
                _ => {}
            }
        }
        reconnects += 1;
        if reconnects > RECONNECTS {
            return Err(Failure::Other(
                "the session's event stream kept dropping; the run goes on: see `mulligan sessions`".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The last line and the exit code of a run that ended.
fn ended(session: &SessionId, r: &Run) -> ExitCode {
    match r.status {
        RunStatus::Completed => {
            let short = r
                .stop_reason
                .as_deref()
                .map_or_else(String::new, |s| format!(", the agent stopped: {s}"));
            println!(
                "{}",
                untrusted(&format!("[completed: run {}{short}]", r.id))
            );
            ExitCode::SUCCESS
        }
        RunStatus::Cancelled => {
            println!("[cancelled: run {}]", untrusted(r.id.as_str()));
            ExitCode::from(4)
        }
        _ => {
            let class = r.retry.as_ref();
            let what = match class {
                Some(c) if !c.retryable => "a retry will not help: see the error".to_string(),
                _ if r.tools_executed > 0 => format!(
                    "`mulligan retry {session}` continues after {} completed tool call(s)",
                    r.tools_executed
                ),
                _ => format!("`mulligan retry {session}` retries it"),
            };
            let line = format!(
                "[failed ({}): {}; {what}]",
                class.map_or("unclassified", |c| c.retry_class.as_str()),
                r.error_message.as_deref().unwrap_or("no message")
            );
            println!("{}", untrusted(&line));
            ExitCode::from(3)
        }
    }
}

/// Asks on the terminal whether to cancel; anything but yes keeps following.
async fn ask_to_cancel(run_id: &RunId) -> bool {
    eprint!("\nCancel run {}? [y/N] ", untrusted(run_id.as_str()));
    let _ = std::io::stderr().flush();
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    matches!(answer, Ok(Ok(line)) if line.trim().eq_ignore_ascii_case("y") || line.trim().eq_ignore_ascii_case("yes"))
}
