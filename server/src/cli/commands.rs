//! Each client command as one typed call of `app::api` and the line it prints.
use super::args::RunsCommand;
use super::render::{one_line, sessions_table, snippet, started, to_wire, untrusted};
use super::{Command, Failure, Outcome};
use app::api::native::{Answer, CallError, Client};
use app::api::{self, Endpoint};
use app::wire::{
    CreateSession, DecideToolCall, DecidedBy, Decision, PostMessage, Regenerate, RunId, ToolCallId,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Calls the API and renders the answer: the JSON line with `--json`, else a human line.
pub async fn execute(cmd: &Command) -> Outcome<String> {
    let client = super::client(cmd.conn())?;
    Ok(answer(&client, cmd).await?.printed)
}

/// What a command printed, and the run it started, if any.
struct Printed {
    printed: String,
    run_id: Option<app::wire::RunId>,
}

async fn answer(client: &Client, cmd: &Command) -> Outcome<Printed> {
    let client = client.clone();
    let mut run_id = None;
    let (raw, line) = match cmd {
        Command::Sessions { all, search, .. } => {
            let q = search.join(" ");
            let first = [("q", q.as_str())];
            let mut a = call_with_query(&client, &api::LIST_SESSIONS, &[], &first, None).await?;
            let mut list = a.value.sessions;
            // `--all`: page after page (of up to 1000) until none follows.
            let mut next = a.value.next_before;
            while let Some(before) = next.as_ref().filter(|_| *all).cloned() {
                let page = [
                    ("q", q.as_str()),
                    ("limit", "1000"),
                    ("before", before.as_str()),
                ];
                a = call_with_query(&client, &api::LIST_SESSIONS, &[], &page, None).await?;
                list.extend(a.value.sessions);
                next = a.value.next_before;
            }
            let mut shown = sessions_table(&list);
            if next.is_some() {
                shown.push_str("\n(newest 100 shown: --all lists every one, --search narrows)");
            }
            let raw = if *all {
                serde_json::to_string(&app::wire::SessionList {
                    sessions: list,
                    next_before: None,
                })
                .unwrap_or_default()
            } else {
                a.raw
            };
            (raw, shown)
        }
        Command::New {
            title,
            model,
            fallbacks,
            no_fallbacks,
            auto_retry,
            ..
        } => {
            let auto_retry = match auto_retry {
                Some(mode) => Some(
                    serde_json::from_value(serde_json::Value::String(mode.clone()))
                        .map_err(|e| Failure::Other(format!("--auto-retry {mode}: {e}")))?,
                ),
                None => None,
            };
            let fallbacks = fallback_chain(fallbacks, *no_fallbacks);
            let body = CreateSession {
                title: title.clone(),
                model: model.clone(),
                auto_retry,
                fallbacks,
                ..CreateSession::default()
            };
            let a = call(&client, &api::CREATE_SESSION, &[], Some(&body)).await?;
            let id = a.value.session.id.to_string();
            (a.raw, id)
        }
        Command::Send { session, text, .. } => {
            let body = PostMessage {
                content: text.join(" "),
            };
            let a = call(
                &client,
                &api::POST_MESSAGE,
                &[session.as_str()],
                Some(&body),
            )
            .await?;
            let r = &a.value;
            run_id = Some(r.run_id.clone());
            let line = format!(
                "sent to {session}: message {}, run {} ({})",
                r.message_id,
                r.run_id,
                started(r.queued)
            );
            (a.raw, line)
        }
        Command::Regenerate {
            session, message, ..
        } => {
            let body = Regenerate::default();
            let a = call(
                &client,
                &api::REGENERATE,
                &[session.as_str(), message.as_str()],
                Some(&body),
            )
            .await?;
            let r = &a.value;
            let mut line = format!(
                "regenerated {session} from message {message}: run {} ({})",
                r.run_id,
                started(r.queued)
            );
            if !r.superseded.is_empty() {
                line.push_str(&format!(", {} message(s) superseded", r.superseded.len()));
            }
            if r.tools_superseded > 0 {
                line.push_str(&format!(
                    " (they had run {} tool call(s); the new run may run them again)",
                    r.tools_superseded
                ));
            }
            (a.raw, line)
        }
        Command::Cancel { session, run, .. } => {
            let a = call(
                &client,
                &api::CANCEL_RUN,
                &[session.as_str(), run.as_str()],
                None,
            )
            .await?;
            let line = format!("cancelled run {}", a.value.id);
            (a.raw, line)
        }
        Command::Retry {
            session,
            cancel: true,
            ..
        } => {
            let a = call(
                &client,
                &api::CANCEL_WAITING_RETRY,
                &[session.as_str()],
                None,
            )
            .await?;
            (a.raw, format!("cancelled the waiting retry of {session}"))
        }
        Command::Retry { session, .. } => {
            let a = call(&client, &api::RETRY, &[session.as_str()], None).await?;
            let r = &a.value;
            run_id = Some(r.run_id.clone());
            let line = format!("retried {session}: {}, run {}", to_wire(&r.kind), r.run_id);
            (a.raw, line)
        }
        Command::Approvals { .. } => {
            let a = call(&client, &api::APPROVALS, &[], None).await?;
            (a.raw, super::render::approvals_table(&a.value))
        }
        Command::Approve {
            run,
            call: cid,
            always,
            ..
        } => {
            let decision = if *always {
                Decision::AllowAlways
            } else {
                Decision::AllowOnce
            };
            decided(&client, run, cid, decision, None).await?
        }
        Command::Deny {
            run,
            call: cid,
            always,
            reason,
            ..
        } => {
            let decision = if *always {
                Decision::RejectAlways
            } else {
                Decision::RejectOnce
            };
            decided(&client, run, cid, decision, reason.clone()).await?
        }
        Command::Tools { .. } => {
            let a = call(&client, &api::TOOLS, &[], None).await?;
            (a.raw, super::render::tools_table(&a.value.servers))
        }
        Command::Models { .. } => {
            let a = call(&client, &api::MODELS, &[], None).await?;
            (a.raw, super::render::models_table(&a.value))
        }
        Command::Runs {
            command: RunsCommand::Show { run, .. },
        } => {
            let a = call(&client, &api::RUN, &[run.as_str()], None).await?;
            let line = super::timeline::run_timeline(&a.value);
            (a.raw, line)
        }
        Command::Mcp { .. } => return Err(Failure::Other("`mcp` speaks MCP on stdio".into())),
    };
    let printed = if cmd.conn().json {
        one_line(&raw)
    } else {
        line
    };
    Ok(Printed { printed, run_id })
}

/// `approve` / `deny`: the decision posted, and the call as decided.
async fn decided(
    client: &Client,
    run: &RunId,
    cid: &ToolCallId,
    decision: Decision,
    reason: Option<String>,
) -> Outcome<(String, String)> {
    let body = DecideToolCall {
        decision,
        reason,
        from: None,
        by: Some(DecidedBy::Cli),
    };
    let a = call(
        client,
        &api::DECIDE_TOOL_CALL,
        &[run.as_str(), cid.as_str()],
        Some(&body),
    )
    .await?;
    let c = &a.value.call;
    let what = if decision.allows() {
        "allowed: it runs now and the turn goes on"
    } else {
        "denied: the model is told, and the turn goes on"
    };
    let remembered = match decision {
        Decision::AllowAlways | Decision::RejectAlways => {
            format!(" ({} remembered for this session)", c.tool)
        }
        _ => String::new(),
    };
    Ok((a.raw, format!("{}/{} {what}{remembered}", c.server, c.tool)))
}

/// `--fallbacks` as the API takes it: `None` (the catalogue's chain) unless one was given or
/// `--no-fallbacks` asked for none; blank entries (`--fallbacks ''`) are dropped.
fn fallback_chain(given: &[String], none: bool) -> Option<Vec<String>> {
    let chain: Vec<String> = given
        .iter()
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .map(str::to_string)
        .collect();
    (none || !given.is_empty()).then_some(chain)
}

/// `send --follow` / `retry --follow`: the command, its line, then the run it started, to
/// its end (see `follow`).
pub async fn execute_and_follow(cmd: &Command) -> Outcome<std::process::ExitCode> {
    let client = super::client(cmd.conn())?;
    let session = match cmd {
        Command::Send { session, .. } | Command::Retry { session, .. } => session,
        _ => {
            return Err(Failure::Other(
                "only send and retry can follow a run".into(),
            ))
        }
    };
    // Events after this snapshot are replayed: nothing the run does is missed.
    let after = call(&client, &api::SESSION, &[session.as_str()], None)
        .await?
        .value
        .last_event_id;
    let Printed { printed, run_id } = answer(&client, cmd).await?;
    if cmd.conn().json {
        println!("{printed}");
    } else {
        println!("{}", untrusted(&printed));
    }
    let run_id =
        run_id.ok_or_else(|| Failure::Other("the answer named no run to follow".into()))?;
    super::follow::follow(&client, session, &run_id, after).await
}

/// One call, its failures said the way an operator at a terminal needs them.
async fn call<Req: Serialize, Resp: DeserializeOwned>(
    client: &Client,
    endpoint: &Endpoint<Req, Resp>,
    args: &[&str],
    body: Option<&Req>,
) -> Outcome<Answer<Resp>> {
    call_with_query(client, endpoint, args, &[], body).await
}

/// [`call`] with a query string.
async fn call_with_query<Req: Serialize, Resp: DeserializeOwned>(
    client: &Client,
    endpoint: &Endpoint<Req, Resp>,
    args: &[&str],
    query: &[(&str, &str)],
    body: Option<&Req>,
) -> Outcome<Answer<Resp>> {
    let url = client.url(&endpoint.url(args));
    client
        .call_with_query(endpoint, args, query, body)
        .await
        .map_err(|e| match e {
            CallError::Transport { connect: true, message, .. } => Failure::Other(format!(
                "the server is unreachable at {}: {message}",
                client.base()
            )),
            CallError::Transport { timeout: true, .. } => Failure::Other(format!(
                "the server at {} did not answer in time",
                client.base()
            )),
            CallError::Transport { message, .. } => {
                Failure::Other(format!("the request to {url} failed: {message}"))
            }
            CallError::Api { status: 401, .. } | CallError::Unexpected { status: 401, .. } => Failure::Other(
                "the token was rejected (401): set MULLIGAN_TOKEN (or --token) to the server's token".into(),
            ),
            CallError::Api { status, raw, error } if (400..500).contains(&status) => {
                Failure::Refused {
                    body: one_line(&raw),
                    error,
                }
            }
            CallError::Api { status, error, .. } => Failure::Other(format!(
                "the server failed ({status}): {}: {}",
                error.error.code, error.error.message
            )),
            CallError::Unexpected { status, raw, why } => Failure::Other(format!(
                "the answer from {url} ({status}) is not the API's JSON (is MULLIGAN_URL a Mulligan server?): {why}: {}",
                snippet(&raw)
            )),
        })
}
