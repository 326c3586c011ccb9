//! B6 added latency per tool-call step: agent turns with one built-in tool call each.
use super::{all, EVENT_WAIT};
use crate::client::{Events, Server};
use crate::fake::{clock_us, Fake};
use crate::report::{ms, percentile, Table};
use crate::{Opts, R};
use app::wire::{Event, ToolCallStatus};
use std::sync::Arc;
use std::time::Duration;

/// Runs B6 (a warm-up, then turns in a row, then on `--b6-sessions` sessions at once) and
/// puts its rows in the table.
pub async fn run(opts: &Opts, fake: &Arc<Fake>, t: &mut Table) -> R<()> {
    let server = Arc::new(Server::start(&fake.url, &[]).await?);
    let turns = opts.b6_turns.max(1);
    let sessions = opts.b6_sessions.max(1);
    let result = async {
        run_turns(&server, fake, 1, 2, "warm-up").await?; // connections, caches
        let sequential = measured(&server, fake, 1, turns, "seq").await?;
        let concurrent = measured(&server, fake, sessions, turns, "conc").await?;
        Ok::<_, String>((sequential, concurrent))
    }
    .await;
    if let Ok(server) = Arc::try_unwrap(server) {
        server.stop().await;
    }
    let (sequential, concurrent) = result?;
    rows(t, "B6 tool step", "sequential", &sequential);
    rows(
        t,
        &format!("B6 tool step ×{sessions}"),
        &format!("{sessions} sessions at once"),
        &concurrent,
    );
    Ok(())
}

/// One B6 variant's turns, and what it cost around them.
struct B6Measured {
    turns: Vec<B6Turn>,
    wall: Duration,
    /// Provider requests and new provider connections the fake saw.
    requests: u64,
    connections: u64,
    /// The server's CPU time, and how busy the whole machine was (0..1, all cores).
    server_cpu: Duration,
    machine_busy: f64,
}

async fn measured(
    server: &Arc<Server>,
    fake: &Arc<Fake>,
    sessions: usize,
    turns: usize,
    tag: &str,
) -> R<B6Measured> {
    let model = crate::fake::tool_model(1);
    let (requests, connections) = (fake.requests(&model), fake.connections());
    let cpu = server.usage().cpu;
    let machine = crate::client::machine_jiffies();
    let start = std::time::Instant::now();
    let turns = run_turns(server, fake, sessions, turns, tag).await?;
    let wall = start.elapsed();
    let machine_after = crate::client::machine_jiffies();
    let busy = machine_after.0.saturating_sub(machine.0) as f64;
    let total = machine_after.1.saturating_sub(machine.1).max(1) as f64;
    Ok(B6Measured {
        turns,
        wall,
        requests: fake.requests(&model).saturating_sub(requests),
        connections: fake.connections().saturating_sub(connections),
        server_cpu: server.usage().cpu.saturating_sub(cpu),
        machine_busy: busy / total,
    })
}

/// B6's rows for one variant.
fn rows(t: &mut Table, bench: &str, how: &str, m: &B6Measured) {
    let turns = &m.turns;
    let n = turns.len();
    let pct = |f: &dyn Fn(&B6Turn) -> i64, p: f64| {
        let mut v: Vec<i64> = turns.iter().map(f).collect();
        percentile(&mut v, p).unwrap_or_default()
    };
    let ms_of = |us: i64| us as f64 / 1000.0;
    let added = |p| ms_of(pct(&|x| x.added_us as i64, p));
    let (p50, p99, max) = (added(50.0), added(99.0), added(100.0));
    t.row(
        bench,
        &format!("added per step, p50 · p99 of {n} turns ({how})"),
        "".into(),
        format!("{p50:.2} ms · {p99:.2} ms"),
        format!("max {max:.2} ms"),
        "≤ 5 ms p99 on SQLite",
        Some(p99 <= 5.0),
    );
    let seg = |f: &dyn Fn(&B6Turn) -> i64| {
        format!(
            "{:.2} ms (p99 {:.2})",
            ms_of(pct(f, 50.0)),
            ms_of(pct(f, 99.0))
        )
    };
    t.row(
        bench,
        "p50: [DONE] → call start event at the client · → call end event · → next request",
        "".into(),
        format!(
            "{} · {} · {}",
            seg(&|x| x.to_start_seen_us as i64),
            seg(&|x| x.start_to_end_seen_us as i64),
            seg(&|x| x.end_seen_to_next_us),
        ),
        format!(
            "tool's own time p50 · p99: {} ms · {} ms (ms resolution)",
            pct(&|x| x.tool_ms, 50.0),
            pct(&|x| x.tool_ms, 99.0)
        ),
        "(breakdown)",
        None,
    );
    t.row(
        bench,
        "turns per s · server CPU per turn · provider requests (new connections)",
        "".into(),
        format!(
            "{:.0}/s · {:.2} ms · {} ({})",
            n as f64 / m.wall.as_secs_f64().max(1e-9),
            ms(m.server_cpu) / n.max(1) as f64,
            m.requests,
            m.connections
        ),
        format!("machine {:.0}% busy", m.machine_busy * 100.0),
        "(breakdown)",
        None,
    );
    t.row(
        bench,
        "turns completed with 2 steps, 1 tool executed (checked)",
        "".into(),
        format!("{n} of {n}"),
        "".into(),
        "all",
        Some(true),
    );
}

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
pub async fn run_turns(
    server: &std::sync::Arc<Server>,
    fake: &std::sync::Arc<Fake>,
    sessions: usize,
    turns: usize,
    tag: &str,
) -> R<Vec<B6Turn>> {
    let model = crate::fake::tool_model(1);
    let subscribed = super::subscribed(server, &model, sessions).await?;
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
                    out.push(turn(&server, &fake, &mut events, &sid, &key).await?);
                }
                Ok(out)
            })
        })
        .collect();
    Ok(all(tasks).await?.into_iter().flatten().collect())
}

/// Posts `key` and follows the turn to its end; checks it, and takes its timings.
async fn turn(
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
                super::completed(&r)?;
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
