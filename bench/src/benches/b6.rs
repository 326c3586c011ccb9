//! B6 added latency per tool-call step: agent turns with one built-in tool call each.
use super::{all, EVENT_WAIT};
use crate::client::{Events, Server};
use crate::fake::{clock_us, Fake};
use crate::R;
use app::wire::{Event, RunStatus, ToolCallStatus};
use futures::StreamExt;

/// One agent turn of B6 (two model steps, one built-in tool call between them).
pub struct B6Turn {
    /// The fake's `[DONE]` of the tool-call answer → the follow-up request's arrival (µs).
    pub added_us: u64,
    /// `[DONE]` → the call's start event at this client (µs; SSE transit included).
    pub to_start_seen_us: u64,
    /// The call's start event → its end event, both at this client (µs).
    pub start_to_end_seen_us: u64,
    /// The call's end event at this client → the follow-up's arrival (µs; negative when the
    /// request came first).
    pub end_seen_to_next_us: i64,
    /// The call's own `finished_at − started_at` (ms, as recorded).
    pub tool_ms: i64,
}

/// B6: `sessions` sessions at once, each subscribed first, then each running `turns` turns one
/// after the other. Every turn must complete with 2 steps and 1 tool executed.
pub async fn b6(
    server: &std::sync::Arc<Server>,
    fake: &std::sync::Arc<Fake>,
    sessions: usize,
    turns: usize,
    tag: &str,
) -> R<Vec<B6Turn>> {
    let model = crate::fake::tool_model(1);
    let subscribed: Vec<R<(String, Events)>> = futures::stream::iter(0..sessions)
        .map(|_| async {
            let sid = server.create_session(&model).await?;
            let events = server.events(&sid).await?;
            Ok((sid, events))
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let subscribed = subscribed.into_iter().collect::<R<Vec<_>>>()?;
    let tasks = subscribed
        .into_iter()
        .enumerate()
        .map(|(w, (sid, mut events))| {
            let (server, fake) = (server.clone(), fake.clone());
            let tag = tag.to_string();
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(turns);
                for t in 0..turns {
                    let key = format!("b6 {tag} s{w} t{t}");
                    out.push(b6_turn(&server, &fake, &mut events, &sid, &key).await?);
                }
                Ok(out)
            })
        })
        .collect();
    Ok(all(tasks).await?.into_iter().flatten().collect())
}

/// Posts `key` and follows the turn to its end; checks it, and takes its timings.
async fn b6_turn(
    server: &Server,
    fake: &Fake,
    events: &mut Events,
    sid: &str,
    key: &str,
) -> R<B6Turn> {
    let rid = server.post_message(sid, key).await?.run_id;
    let mut texts: Vec<(u32, String)> = Vec::new();
    let mut start_seen = None;
    let mut end_seen = None;
    let mut tool_ms = 0;
    loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        let now = clock_us();
        match e {
            Event::Delta(d) if d.run_id == rid => texts.push((d.step, d.text)),
            Event::ToolCall(c) if c.run_id == rid => {
                let call = c.call;
                if call.server != "mulligan" || call.tool != "list_sessions" || call.step != 1 {
                    return Err(format!(
                        "unexpected call {}/{} at step {}",
                        call.server, call.tool, call.step
                    ));
                }
                match call.status {
                    ToolCallStatus::Running if start_seen.is_none() => start_seen = Some(now),
                    ToolCallStatus::Ok if end_seen.is_none() => {
                        end_seen = Some(now);
                        let end = call.finished_at.ok_or("an ended call has no finished_at")?;
                        tool_ms = end - call.started_at;
                    }
                    other => return Err(format!("unexpected tool_call event ({other:?})")),
                }
            }
            Event::Run(r) if r.id == rid && !r.status.is_active() => {
                if r.status != RunStatus::Completed {
                    return Err(format!(
                        "run ended {:?}: {}",
                        r.status,
                        r.error_message.unwrap_or_default()
                    ));
                }
                break;
            }
            _ => {}
        }
    }
    let want = [
        (1, crate::fake::TOOL_ASK_TEXT.to_string()),
        (2, crate::fake::TOOL_REPLY_TEXT.to_string()),
    ];
    if texts != want {
        return Err(format!("deltas {texts:?}, expected {want:?}"));
    }
    let run = server.run(&rid).await?;
    if run.steps != 2 || run.tools_executed != 1 {
        return Err(format!(
            "run has {} steps and {} tools executed, expected 2 and 1",
            run.steps, run.tools_executed
        ));
    }
    let seen = fake.tool_step(key).ok_or("the fake never saw this turn")?;
    if seen.asks != 1 || seen.follow_ups != 1 {
        return Err(format!(
            "the fake saw {} tool-call requests and {} follow-ups, expected 1 and 1",
            seen.asks, seen.follow_ups
        ));
    }
    let (Some(done), Some(next), Some(start_seen), Some(end_seen)) =
        (seen.asked_done_us, seen.follow_up_us, start_seen, end_seen)
    else {
        return Err("a turn's step or call went unseen".into());
    };
    Ok(B6Turn {
        added_us: next.saturating_sub(done),
        to_start_seen_us: start_seen.saturating_sub(done),
        start_to_end_seen_us: end_seen.saturating_sub(start_seen),
        end_seen_to_next_us: next as i64 - end_seen as i64,
        tool_ms,
    })
}
