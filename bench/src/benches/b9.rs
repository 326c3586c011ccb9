//! B9 approvals (issue 36): many runs waiting for the operator's decision at once on one
//! instance cost nothing per run (resident memory, threads, open connections and files as
//! with none waiting), survive a restart all still waiting, and each, decided, reaches its
//! tool within a few milliseconds and runs once.
use crate::client::Server;
use crate::fake::Fake;
use crate::report::{percentile, Table};
use crate::{Opts, R};
use app::api;
use app::wire::{Approvals, RunDetail, RunStatus};
use fake_provider::Script;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Resident memory the waiting runs may add, in KiB.
const RSS_BUDGET_KB: u64 = 16 * 1024;

pub async fn run(opts: &Opts, fake: &Arc<Fake>, t: &mut Table) -> R<()> {
    once(opts, fake, t, "SQLite", vec![]).await?;
    if let Some(base) = &opts.b7_postgres {
        let db = super::b7::fresh_database(base).await?;
        once(
            opts,
            fake,
            t,
            "PostgreSQL",
            vec![("MULLIGAN_DATABASE_URL", db)],
        )
        .await?;
    }
    Ok(())
}

async fn once(
    opts: &Opts,
    fake: &Arc<Fake>,
    t: &mut Table,
    db: &str,
    extra: Vec<(&'static str, String)>,
) -> R<()> {
    let n = opts.b9_runs.max(1);
    let model = format!("b9-writes-{}", db.to_ascii_lowercase());
    let server = Server::start(&fake.url, &extra).await?;
    let bench = format!("B9 approvals ×{n} ({db})");
    // Sessions first: the idle baseline has them all, with nothing waiting.
    let sessions: Vec<R<String>> = futures::stream::iter(0..n)
        .map(|_| server.create_session(&model))
        .buffer_unordered(32)
        .collect()
        .await;
    let sessions: Vec<String> = sessions.into_iter().collect::<R<_>>()?;
    // Each session has one turn first, so the idle baseline has its pools, event windows
    // and client connections as warm as the waiting runs will find them.
    fake.push_for(&model, vec![Script::reply(&["warm"]); n]);
    let warm = post_all(&server, &sessions, "warm up").await?;
    for rid in &warm {
        until_ended(&server, rid, Instant::now() + Duration::from_secs(60)).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = server.holdings();

    let call = Script::call(
        "",
        "rename",
        "mulligan__rename_session",
        json!({"title": "renamed by B9"}),
    );
    fake.push_for(&model, vec![call; n]);
    post_all(&server, &sessions, "rename yourself").await?;
    let waiting = until_waiting(&server, n).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = server.holdings();
    let grew = held.0.saturating_sub(idle.0);
    t.row(
        &bench,
        "RSS over idle · threads · open fds (idle → waiting)",
        String::new(),
        format!("+{:.1} MiB", grew as f64 / 1024.0),
        format!(
            "threads {} → {} · fds {} → {}",
            idle.1, held.1, idle.2, held.2
        ),
        "≤ 16 MiB; threads, fds no more",
        Some(grew <= RSS_BUDGET_KB && held.1 <= idle.1 && held.2 <= idle.2),
    );

    // A restart with every run waiting: all still wait, read once the server answers (not
    // waited for), each run `awaiting_approval`.
    let server = server.restart(&fake.url, &extra).await?;
    let after = waiting_now(&server).await?;
    let mut still = 0;
    for w in &after.approvals {
        let v = server.get(&api::RUN.url(&[w.run_id.as_str()])).await?;
        let d: RunDetail = serde_json::from_value(v).map_err(|e| format!("run: {e}"))?;
        still += usize::from(d.run.status == RunStatus::AwaitingApproval);
    }
    t.row(
        &bench,
        "waiting before · after a restart (runs still waiting)",
        String::new(),
        format!(
            "{} · {} ({still})",
            waiting.approvals.len(),
            after.approvals.len()
        ),
        String::new(),
        &format!("{n} · {n} ({n})"),
        Some(waiting.approvals.len() == n && after.approvals.len() == n && still == n),
    );
    // Correctness, judged in `--smoke` too: a restart that lost or ended a wait fails B9.
    if after.approvals.len() != n || still != n {
        return Err(format!(
            "after a restart {} of {n} calls wait and {still} runs are awaiting_approval",
            after.approvals.len()
        ));
    }
    let asked_before = fake.requests(&model);

    // Each decided: from the decision sent to the call's start recorded (just before the
    // tool is sent), on the one clock of this machine.
    fake.push_for(&model, vec![Script::reply(&["Done."]); n]);
    let mut sent_at = Vec::with_capacity(n);
    for w in &after.approvals {
        let at = now_ms();
        let (status, body) = server
            .post(
                &api::DECIDE_TOOL_CALL.url(&[w.run_id.as_str(), w.call.id.as_str()]),
                json!({"decision": "allow_once"}),
            )
            .await?;
        if status != 200 {
            return Err(format!("decision: {status} {body}"));
        }
        sent_at.push((w.run_id.to_string(), at));
    }
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 10);
    let mut latencies = Vec::with_capacity(n);
    let mut ran_once = 0;
    for (rid, at) in &sent_at {
        let detail = until_ended(&server, rid, deadline).await?;
        if detail.run.status != RunStatus::Completed {
            return Err(format!("run {rid} ended {:?}", detail.run.status));
        }
        let call = detail.tool_calls.first().ok_or("no tool call")?;
        latencies.push(call.started_at.saturating_sub(*at).max(0));
        // Once: one call recorded, sent once, ended ok; one step after it.
        ran_once += usize::from(
            detail.tool_calls.len() == 1
                && call.status == app::wire::ToolCallStatus::Ok
                && detail.run.tools_executed == 1
                && detail.run.steps == 2,
        );
    }
    // Each turn went on with exactly one request after its call: none sent twice.
    let went_on = fake.requests(&model).saturating_sub(asked_before);
    let ran_once = if went_on == n as u64 { ran_once } else { 0 };
    let p50 = percentile(&mut latencies, 50.0).unwrap_or(0);
    let p99 = percentile(&mut latencies, 99.0).unwrap_or(0);
    t.row(
        &bench,
        "decision → the call sent, p50 · p99 (after the restart)",
        String::new(),
        format!("{p50} ms · {p99} ms"),
        format!("{ran_once} of {n} ran once ({went_on} requests after)"),
        "p99 ≤ 50 ms; each once",
        Some(p99 <= 50 && ran_once == n),
    );
    server.stop().await;
    if ran_once != n {
        return Err(format!(
            "{ran_once} of {n} decided calls ran once ({went_on} provider requests after them)"
        ));
    }
    Ok(())
}

/// Posts `content` to each session, 32 at a time; answers the runs.
async fn post_all(server: &Server, sessions: &[String], content: &str) -> R<Vec<String>> {
    let posted: Vec<R<String>> = futures::stream::iter(sessions.iter())
        .map(|sid| async { Ok(server.post_message(sid, content).await?.run_id.to_string()) })
        .buffer_unordered(32)
        .collect()
        .await;
    posted.into_iter().collect()
}

/// Waits until run `rid` ended (by `deadline`); answers it with its tool calls.
async fn until_ended(server: &Server, rid: &str, deadline: Instant) -> R<RunDetail> {
    loop {
        let v = server.get(&api::RUN.url(&[rid])).await?;
        let d: RunDetail = serde_json::from_value(v).map_err(|e| format!("run: {e}"))?;
        if !d.run.status.is_active() {
            return Ok(d);
        }
        if Instant::now() > deadline {
            return Err(format!("run {rid} did not end"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every call waiting for a decision now, all of `GET /approvals`' pages.
async fn waiting_now(server: &Server) -> R<Approvals> {
    let mut all = Approvals::default();
    let mut before: Option<String> = None;
    loop {
        let mut url = format!("{}?limit=1000", api::APPROVALS.url(&[]));
        if let Some(b) = &before {
            url.push_str(&format!("&before={b}"));
        }
        let v = server.get(&url).await?;
        let page: Approvals = serde_json::from_value(v).map_err(|e| format!("approvals: {e}"))?;
        all.approvals.extend(page.approvals);
        match page.next_before {
            Some(next) => before = Some(next.to_string()),
            None => return Ok(all),
        }
    }
}

/// Waits until `n` calls wait for a decision; answers them.
async fn until_waiting(server: &Server, n: usize) -> R<Approvals> {
    let deadline = Instant::now() + Duration::from_secs(60 + n as u64 / 10);
    loop {
        let list = waiting_now(server).await?;
        if list.approvals.len() >= n {
            return Ok(list);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {n} calls came to wait",
                list.approvals.len()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
