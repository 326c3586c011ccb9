//! Several instances on one PostgreSQL database (`MULLIGAN_TEST_DATABASE=postgres` with
//! `MULLIGAN_TEST_POSTGRES_URL`; the README's test command sets both when PostgreSQL is
//! reachable): a run executes on exactly one instance, events reach every instance in one
//! order, claims hold across instances, cancel crosses them, a dead instance's run is ended.
use testkit as common;

use app::wire::{ErrorCode, Event, RetryClass, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, fresh_postgres_database, on_postgres, postgres_url, serve, temp_dir};
use common::{run_ended, TestServer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// Why these tests are ignored in the SQLite pass (scripts/test's PostgreSQL pass runs them
/// with `--include-ignored`).
const NEEDS_PG: &str = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)";

/// Two in-process instances on one fresh database.
async fn two_instances(tag: &str) -> (FakeProvider, String, TestServer, TestServer) {
    two_instances_with(tag, |_| {}).await
}

/// [`two_instances`] with each instance's settings adjusted by `adjust`.
async fn two_instances_with(
    tag: &str,
    adjust: impl Fn(&mut server::config::Config),
) -> (FakeProvider, String, TestServer, TestServer) {
    assert!(
        on_postgres(),
        "{NEEDS_PG}: set MULLIGAN_TEST_DATABASE=postgres and MULLIGAN_TEST_POSTGRES_URL"
    );
    let db = fresh_postgres_database(&postgres_url().expect("MULLIGAN_TEST_POSTGRES_URL"));
    let fake = FakeProvider::start().await;
    let mut ca = config(&temp_dir(&format!("{tag}-a")), &fake.url);
    ca.database_url = Some(db.clone());
    adjust(&mut ca);
    let mut cb = config(&temp_dir(&format!("{tag}-b")), &fake.url);
    cb.database_url = Some(db.clone());
    adjust(&mut cb);
    // Both start at once: the migrations must not race.
    let (a, b) = tokio::join!(TestServer::start(ca), TestServer::start(cb));
    (fake, db, a, b)
}

fn fail_401() -> Script {
    Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {"message": "bad key"}}),
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_prompt_posted_on_one_instance_streams_on_the_other_in_order() {
    let (fake, _db, a, b) = two_instances("stream").await;
    fake.push(Script::slow(60, Duration::from_millis(5)));
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, None).await;
    let receipt = a.send(&sid, "hello").await;
    let seen = on_b.until(WAIT, run_ended(&receipt.run_id)).await;
    let deltas: Vec<u64> = seen
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Delta(d) => Some(d.seq),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        (1..=60).collect::<Vec<_>>(),
        "every delta once, in order"
    );
    let ids: Vec<i64> = seen.iter().map(|(id, _)| *id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids increase: {ids:?}");
    let detail = b.detail(&sid).await;
    let reply = detail.messages.last().unwrap();
    let want: String = (0..60).map(|i| format!("w{i} ")).collect();
    assert_eq!(reply.content, want);
    // Resuming on A from the middle of B's stream gets exactly the rest.
    let middle = ids[ids.len() / 2];
    let mut resumed = a.events(&sid, Some(middle)).await;
    let rest = resumed.until(WAIT, run_ended(&receipt.run_id)).await;
    assert_eq!(
        rest.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        ids[ids.len() / 2 + 1..].to_vec()
    );
    assert_eq!(fake.seen().len(), 1, "one instance executed the run");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn concurrent_regenerates_split_across_instances_start_one_run() {
    let (fake, _db, a, b) = two_instances("regen").await;
    // The prompt fails, and so does the one regenerate that goes through.
    fake.push(fail_401());
    fake.push(fail_401());
    let sid = a.create_session().await;
    let r = a.send(&sid, "hi").await;
    assert_eq!(a.wait_run_end(&r.run_id).await.status, RunStatus::Failed);
    let servers = [Arc::new(a), Arc::new(b)];
    let calls = (0..16).map(|i| {
        let server = servers[i % 2].clone();
        let (sid, mid, rid) = (sid.clone(), r.message_id.clone(), r.run_id.clone());
        tokio::spawn(async move {
            server
                .post(
                    &format!("/sessions/{sid}/messages/{mid}/regenerate"),
                    json!({"if_last_run": rid}),
                )
                .await
        })
    });
    let results: Vec<(u16, Value)> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        results.iter().filter(|(s, _)| *s == 202).count(),
        1,
        "{results:?}"
    );
    for (status, body) in results.iter().filter(|(s, _)| *s != 202) {
        assert_eq!(
            (*status, body["error"]["code"].as_str()),
            (409, Some(ErrorCode::RegenerateStale.as_str()))
        );
    }
    assert_eq!(servers[1].detail(&sid).await.runs.len(), 2, "one new run");

    // Retry-now's claim holds across instances too.
    let regen = servers[0].detail(&sid).await.runs[1].id.clone();
    servers[0].wait_run_end(&regen).await;
    let calls = (0..8).map(|i| {
        let server = servers[i % 2].clone();
        let sid = sid.clone();
        tokio::spawn(async move {
            server
                .post(&format!("/sessions/{sid}/retry"), json!({}))
                .await
        })
    });
    let results: Vec<(u16, Value)> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        results.iter().filter(|(s, _)| *s == 200).count(),
        1,
        "{results:?}"
    );
    assert_eq!(servers[1].detail(&sid).await.runs.len(), 3, "one retry run");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn cancel_on_one_instance_stops_a_run_executing_on_the_other_within_a_second() {
    let (fake, _db, a, b) = two_instances("cancel").await;
    fake.push(Script::slow(500, Duration::from_millis(20)));
    let sid = a.create_session().await;
    let mut on_a = a.events(&sid, None).await;
    let receipt = a.send(&sid, "long").await;
    on_a.until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 3))
        .await;
    let asked = Instant::now();
    let (status, body) = b
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", receipt.run_id),
            json!({}),
        )
        .await;
    let took = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert!(took < Duration::from_secs(1), "cancel took {took:?}");
    assert_eq!(a.run(&receipt.run_id).await.status, RunStatus::Cancelled);
    let reply = a.detail(&sid).await.messages.last().unwrap().clone();
    assert!(reply.content.starts_with("w0 w1 w2 "), "partial text kept");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_killed_instance_s_run_is_marked_interrupted_by_another() {
    let (fake, db, _a, b) = two_instances("kill").await;
    fake.push(Script::slow(2000, Duration::from_millis(10)));
    let dir = temp_dir("kill-child");
    let log = dir.join("server.log");
    let (mut child, on_child) = serve(&dir, &fake.url, &log, Some(db), &[]).await;
    let sid = on_child.create_session().await;
    let rid = on_child.send(&sid, "stream for a while").await.run_id;
    // A prompt queued behind it (posted on B) is held once the run is found interrupted.
    let queued = b.send(&sid, "and then this").await;
    assert!(queued.queued);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let killed = Instant::now();

    let run = b.wait_run_end(&rid).await;
    let noticed = killed.elapsed();
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.expect("classified");
    assert_eq!(
        (class.retryable, class.retry_class.clone()),
        (true, RetryClass::Interrupted)
    );
    assert!(
        noticed < Duration::from_secs(10),
        "noticed after {noticed:?}"
    );
    let detail = b.detail(&sid).await;
    let reply = detail
        .messages
        .iter()
        .find(|m| m.run_id.as_ref().map(|id| id.as_str()) == Some(rid.as_str()))
        .unwrap();
    assert!(reply.content.starts_with("w0 w1 w2 "), "partial text kept");
    // The hold follows the run's end under the same session lock, a moment later.
    let mut held = None;
    for _ in 0..40 {
        let runs = b.detail(&sid).await.runs;
        held = runs.into_iter().find(|r| r.id == queued.run_id);
        if held.as_ref().is_some_and(|r| r.held_by.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = held.unwrap();
    assert_eq!(held.status, RunStatus::Queued);
    assert_eq!(
        held.held_by.as_ref().map(|id| id.as_str()),
        Some(rid.as_str()),
        "{held:#?}"
    );
    eprintln!("a dead instance's run was recorded interrupted after {noticed:?}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_background_retry_fires_once_with_two_instances() {
    let (fake, _db, a, b) = two_instances("bg").await;
    let sid = {
        let (status, body) = b
            .post("/sessions", json!({"auto_retry": "background"}))
            .await;
        assert_eq!(status, 201);
        body["id"].as_str().unwrap().to_string()
    };
    // Every Tier 1 attempt of the first run fails; the background retry (2 s later) does not.
    for _ in 0..3 {
        fake.push(Script::Status {
            code: 503,
            headers: vec![],
            body: json!({"error": {"message": "overloaded"}}),
        });
    }
    let first = b.send(&sid, "both see it due").await;
    assert_eq!(
        b.wait_run_end(&first.run_id).await.status,
        RunStatus::Failed
    );
    let deadline = Instant::now() + WAIT;
    loop {
        let runs = b.detail(&sid).await.runs;
        if runs.iter().any(|r| r.status == RunStatus::Completed) {
            break;
        }
        assert!(Instant::now() < deadline, "no retry completed: {runs:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = b.detail(&sid).await.runs;
    assert_eq!(runs.len(), 2, "fired once: {runs:?}");
    assert_eq!(fake.seen().len(), 4, "three Tier 1 attempts, one retry");
    assert_eq!(a.detail(&sid).await.session.waiting_retry, None);
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_cooldown_one_instance_met_holds_the_other_and_a_clear_ends_it_for_both() {
    let (fake, _db, a, b) = two_instances("cool").await;
    let limited = || Script::Status {
        code: 429,
        headers: vec![("retry-after", "3000".into())],
        body: json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
    };
    fake.push(limited());
    let on_a = a.create_session().await;
    let r = a.send(&on_a, "first").await;
    let until = a
        .wait_run_end(&r.run_id)
        .await
        .retry
        .unwrap()
        .retry_after_until;
    let on_b = b.create_session().await;
    let r = b.send(&on_b, "second").await;
    let held = b.wait_run_end(&r.run_id).await;
    assert_eq!(held.retry.unwrap().retry_after_until, until);
    assert_eq!(fake.seen().len(), 1, "B sent nothing");

    let (_, listed) = b.get("/providers").await;
    let key = listed["cooldowns"][0]["key"].as_str().unwrap().to_string();
    let cleared = a
        .http
        .delete(a.url("/providers/cooldowns"))
        .bearer_auth(&a.token)
        .json(&json!({ "key": key }))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), 200);
    let r = b.send(&on_b, "third").await;
    assert_eq!(b.wait_run_end(&r.run_id).await.status, RunStatus::Completed);
    assert_eq!(fake.seen().len(), 2, "cleared on A, B sends again");
}

/// Two instances with 8 connections each and 80 sessions (10× the pool) posting,
/// regenerating and cancelling at once, each streamed over SSE from the other instance:
/// every run ends, no session ever has two running runs, every stream sees every run's end,
/// no request fails with a 5xx and neither instance declares the other dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_small_pool_under_ten_times_as_many_sessions_never_deadlocks_or_loses_events() {
    const POOL: u32 = 8;
    const SESSIONS: usize = 10 * POOL as usize;
    let (fake, db, a, b) = two_instances_with("load", |c| {
        c.database_max_connections = POOL;
    })
    .await;
    fake.set_default(Script::slow(20, Duration::from_millis(5)));
    let servers = [Arc::new(a), Arc::new(b)];

    // Watches the runs table the whole time: never two running runs in one session.
    let watch_pool = sqlx::PgPool::connect(&db).await.unwrap();
    let stop_watch = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn({
        let stop = stop_watch.clone();
        async move {
            let mut doubled: Vec<(String, i64)> = Vec::new();
            while !stop.is_cancelled() {
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT session_id, COUNT(*) FROM runs WHERE status = 'running'
                     GROUP BY session_id HAVING COUNT(*) > 1",
                )
                .fetch_all(&watch_pool)
                .await
                .unwrap();
                doubled.extend(rows);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            watch_pool.close().await;
            doubled
        }
    });

    let mut sids = Vec::new();
    for i in 0..SESSIONS {
        sids.push(servers[i % 2].create_session().await);
    }
    // Each session's stream, on the instance it was not created on, records the runs it
    // saw end.
    let ended: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<app::wire::RunId>>>> =
        Arc::default();
    let mut readers = Vec::new();
    for (i, sid) in sids.iter().enumerate() {
        let mut sse = servers[(i + 1) % 2].events(sid, None).await;
        let (ended, sid) = (ended.clone(), sid.clone());
        readers.push(tokio::spawn(async move {
            loop {
                let (_, e) = sse.next(Duration::from_secs(120)).await;
                if let Event::Run(r) = e {
                    if !r.status.is_active() {
                        ended
                            .lock()
                            .unwrap()
                            .entry(sid.clone())
                            .or_default()
                            .push(r.id);
                    }
                }
            }
        }));
    }

    let started = Instant::now();
    let work = sids.iter().enumerate().map(|(i, sid)| {
        let (x, y) = (servers[i % 2].clone(), servers[(i + 1) % 2].clone());
        let sid = sid.clone();
        tokio::spawn(async move {
            let first = x.send(&sid, "first").await;
            let post = format!("/sessions/{sid}/messages");
            let regenerate = format!("/sessions/{sid}/messages/{}/regenerate", first.message_id);
            let cancel = format!("/sessions/{sid}/runs/{}/cancel", first.run_id);
            let (p, r, c) = tokio::join!(
                y.post(&post, json!({"content": "second"})),
                x.post(&regenerate, json!({})),
                y.post(&cancel, json!({})),
            );
            for (what, (status, body)) in [("post", p), ("regenerate", r), ("cancel", c)] {
                assert!(
                    matches!(status, 200 | 202 | 409),
                    "{what} in {sid} answered {status}: {body}"
                );
            }
        })
    });
    for w in futures::future::join_all(work).await {
        w.unwrap();
    }

    // Every run ends.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut all_runs = std::collections::HashMap::new();
    for (i, sid) in sids.iter().enumerate() {
        loop {
            let runs = servers[i % 2].detail(sid).await.runs;
            if runs.iter().all(|r| !r.status.is_active()) {
                all_runs.insert(sid.clone(), runs);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "runs of {sid} never ended: {runs:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    eprintln!(
        "{} runs in {SESSIONS} sessions ended {:?} after the first post",
        all_runs.values().map(Vec::len).sum::<usize>(),
        started.elapsed()
    );
    // Every stream saw every run of its session end.
    for (sid, runs) in &all_runs {
        loop {
            let seen = ended.lock().unwrap().get(sid).cloned().unwrap_or_default();
            let missing: Vec<&str> = runs
                .iter()
                .map(|r| r.id.as_str())
                .filter(|id| !seen.iter().any(|s| s == id))
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the stream of {sid} never saw {missing:?} end"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for r in readers {
        r.abort();
    }
    stop_watch.cancel();
    let doubled = watcher.await.unwrap();
    assert!(
        doubled.is_empty(),
        "sessions with two running runs: {doubled:?}"
    );
    // Nobody was declared dead: no run was recorded interrupted.
    for runs in all_runs.values() {
        for r in runs {
            assert!(
                r.retry.as_ref().map(|c| &c.retry_class) != Some(&RetryClass::Interrupted),
                "an instance was declared dead: {r:#?}"
            );
            assert!(
                matches!(r.status, RunStatus::Completed | RunStatus::Cancelled),
                "{r:#?}"
            );
        }
    }
}

/// An event batch the database refuses for a while is written once it can be: a stream on
/// the other instance still gets every delta and the run's end (nothing dropped).
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn events_the_log_refuses_for_a_while_are_written_later_not_dropped() {
    let (fake, db, a, b) = two_instances("refused").await;
    fake.push(Script::slow(40, Duration::from_millis(25)));
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, None).await;
    let admin = sqlx::PgPool::connect(&db).await.unwrap();
    let receipt = a.send(&sid, "through an outage").await;
    on_b.until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 2))
        .await;
    // For a second and a half every write to the log fails (well beyond three tries).
    sqlx::query("ALTER TABLE events RENAME TO events_away")
        .execute(&admin)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    sqlx::query("ALTER TABLE events_away RENAME TO events")
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let seen = on_b.until(WAIT, run_ended(&receipt.run_id)).await;
    let deltas: Vec<u64> = seen
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Delta(d) => Some(d.seq),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        (3..=40).collect::<Vec<_>>(),
        "every delta after the outage began"
    );
}

/// An instance wrongly taken for dead learns that its run was ended elsewhere and stops
/// streaming it (within a heartbeat or two), so no session streams two replies at once.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_run_ended_elsewhere_stops_streaming_on_its_instance() {
    let (fake, db, a, _b) = two_instances("ended-elsewhere").await;
    fake.push(Script::slow(400, Duration::from_millis(20)));
    let sid = a.create_session().await;
    let mut on_a = a.events(&sid, None).await;
    let receipt = a.send(&sid, "long").await;
    on_a.until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 3))
        .await;
    // What another instance records when it takes this one for dead.
    let admin = sqlx::PgPool::connect(&db).await.unwrap();
    sqlx::query("UPDATE runs SET status = 'failed', finished_at = 0 WHERE id = $1")
        .bind(receipt.run_id.as_str())
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let ended = Instant::now();
    // The runner stops: its reply stops growing well before the 8 s the stream would take.
    let deadline = ended + Duration::from_secs(5);
    let mut last = 0;
    let mut quiet_since = Instant::now();
    loop {
        if let Ok((_, Event::Delta(d))) =
            tokio::time::timeout(Duration::from_millis(100), on_a.next(WAIT)).await
        {
            last = d.seq;
            quiet_since = Instant::now();
        }
        if quiet_since.elapsed() > Duration::from_millis(800) {
            break;
        }
        assert!(Instant::now() < deadline, "still streaming (delta {last})");
    }
    assert!(last < 300, "stopped at delta {last} of 400");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_tool_turn_continued_from_either_instance_never_runs_its_tool_again() {
    let (fake, _db, a, b) = two_instances("tool-continue").await;
    // Its tool runs unasked: this test is about continuing (approval.rs is about asking).
    let (status, parent) = a
        .post("/sessions", json!({"title": "test", "approval": "trust"}))
        .await;
    assert_eq!(status, 201, "{parent}");
    let parent = parent["id"].as_str().unwrap().to_string();
    fake.push_for("child-model", vec![]);
    let (status, child) = a
        .post(
            "/sessions",
            json!({"parent_id": parent, "model": "child-model"}),
        )
        .await;
    assert_eq!(status, 201, "{child}");
    let child = child["id"].as_str().unwrap().to_string();
    fake.push(Script::call(
        "",
        "send",
        "mulligan__send_message",
        json!({"session": child, "content": "exactly once"}),
    ));
    for _ in 0..3 {
        fake.push(Script::unavailable());
    }
    let sent = a.send(&parent, "go").await;
    let failed = a.wait_run_end(&sent.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed, "{failed:#?}");
    fake.set_default(Script::reply(&["continued"]));

    // Retry now on A and Tier 2's Regenerate on B, twice each, at once: one continuation.
    let retry_path = format!("/sessions/{parent}/retry");
    let regen_path = format!("/sessions/{parent}/messages/{}/regenerate", sent.message_id);
    let regen_body = json!({"if_last_run": failed.id});
    let answers = tokio::join!(
        a.post(&retry_path, json!({})),
        b.post(&regen_path, regen_body.clone()),
        a.post(&retry_path, json!({})),
        b.post(&regen_path, regen_body.clone()),
    );
    let answers = [answers.0, answers.1, answers.2, answers.3];
    let started: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| (200..300).contains(status))
        .map(|(_, body)| body)
        .collect();
    assert_eq!(started.len(), 1, "{answers:?}");
    let rid = started[0]["run_id"].as_str().unwrap();
    let run = b.wait_run_end(rid).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");
    assert_eq!(run.kind, app::wire::RunKind::Continuation);
    let prompts: Vec<String> = a
        .detail(&child)
        .await
        .messages
        .into_iter()
        .filter(|m| m.role == app::wire::Role::Operator)
        .map(|m| m.content)
        .collect();
    assert_eq!(prompts, ["exactly once"]);
}

/// Issue 35, item 8: a follower whose `LISTEN` connection drops mid-run misses the deltas
/// sent meanwhile (they are only in notifications). Its subscribers never see the text with
/// a hole in it: the reply catches up from the owner's saved text and grows again before the
/// run ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_follower_that_lost_its_listener_catches_up_mid_reply() {
    let (fake, db, a, b) = two_instances("catch-up").await;
    let want: String = (0..60).map(|i| format!("w{i} ")).collect();
    fake.push(Script::slow(60, Duration::from_millis(50)));
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, None).await;
    let receipt = a.send(&sid, "hello").await;

    // The page's rule: a delta past the text's count is appended, a message replaces it.
    let mut text = String::new();
    let mut seq = 0u64;
    let mut apply = |e: &Event| {
        match e {
            Event::Delta(d) if d.run_id == receipt.run_id && d.seq > seq => {
                text.push_str(&d.text);
                seq = d.seq;
            }
            Event::Message(m) if m.run_id.as_ref() == Some(&receipt.run_id) => {
                text = m.content.clone();
                seq = m.delta_seq.unwrap_or(0);
            }
            _ => {}
        }
        assert!(
            want.starts_with(&text),
            "the reply shown has a hole: {text:?}"
        );
        (
            text.len(),
            matches!(e, Event::Run(r) if r.id == receipt.run_id && !r.status.is_active()),
        )
    };
    let mut shown = 0;
    while shown < "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 ".len() {
        let (_, e) = on_b.next(WAIT).await;
        shown = apply(&e).0;
    }

    // Every instance's event listener loses its connection for 400 ms.
    let name = db
        .split('?')
        .next()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    let admin = sqlx::PgPool::connect(&postgres_url().unwrap())
        .await
        .unwrap();
    let until = Instant::now() + Duration::from_millis(400);
    while Instant::now() < until {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND query LIKE '%mulligan_events%' AND pid <> pg_backend_pid()",
        )
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    admin.close().await;
    let cut_at = shown;

    let mut grew_before_the_end = false;
    loop {
        let (_, e) = on_b.next(WAIT).await;
        let (len, ended) = apply(&e);
        if ended {
            break;
        }
        grew_before_the_end |= len > cut_at + "w20 w21 ".len();
    }
    assert!(grew_before_the_end, "the reply grew again only at its end");
    let detail = b.detail(&sid).await;
    assert_eq!(detail.messages.last().unwrap().content, want);
}
