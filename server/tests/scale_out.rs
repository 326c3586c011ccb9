//! Scale-out on PostgreSQL (`MULLIGAN_TEST_DATABASE=postgres`; the README's test command runs
//! these in its PostgreSQL pass): connections bounded by design whatever the load, session
//! locks that pin no connection and give up in time, a run's end that survives a database
//! outage, and text with U+0000 (this last one on SQLite too).
use testkit as common;

use app::wire::{ErrorCode, Event, MessageStatus, RunStatus, SessionId};
use common::fake::{FakeProvider, Script};
use common::{config, fresh_postgres_database, on_postgres, postgres_url, temp_dir, TestServer};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Two in-process instances on one fresh database, at the default connection budget.
async fn two_instances(tag: &str) -> (FakeProvider, String, TestServer, TestServer) {
    assert!(
        on_postgres(),
        "needs PostgreSQL: set MULLIGAN_TEST_DATABASE=postgres and MULLIGAN_TEST_POSTGRES_URL"
    );
    let db = fresh_postgres_database(&postgres_url().expect("MULLIGAN_TEST_POSTGRES_URL"));
    let fake = FakeProvider::start().await;
    let mut ca = config(&temp_dir(&format!("{tag}-a")), &fake.url);
    ca.database_url = Some(db.clone());
    let mut cb = config(&temp_dir(&format!("{tag}-b")), &fake.url);
    cb.database_url = Some(db.clone());
    let (a, b) = tokio::join!(TestServer::start(ca), TestServer::start(cb));
    (fake, db, a, b)
}

/// The database's name in its URL.
fn db_name(url: &str) -> String {
    let head = url.split('?').next().unwrap_or(url);
    head.rsplit('/').next().unwrap_or_default().to_string()
}

/// Samples, until stopped, the most connections each instance (by `application_name`) had
/// open to `db` at once.
fn watch_connections(
    db: &str,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<HashMap<String, i64>> {
    let (admin, name) = (postgres_url().unwrap(), db_name(db));
    tokio::spawn(async move {
        let pool = sqlx::PgPool::connect(&admin).await.unwrap();
        let mut peak: HashMap<String, i64> = HashMap::new();
        while !stop.is_cancelled() {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT application_name, COUNT(*) FROM pg_stat_activity
                 WHERE datname = $1 AND application_name LIKE 'mulligan %'
                 GROUP BY application_name",
            )
            .bind(&name)
            .fetch_all(&pool)
            .await
            .unwrap();
            for (app, n) in rows {
                let p = peak.entry(app).or_default();
                *p = (*p).max(n);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pool.close().await;
        peak
    })
}

/// 150 sessions at once over two instances at the default budget, each posting one prompt
/// that streams for about 3 s and followed over SSE from the other instance, subscribing
/// right after the post: every run completes, every stream sees its whole reply and its end,
/// no provider request is doubled, and neither instance ever opens more than its budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn many_sessions_over_two_instances_stay_within_each_instance_s_connections() {
    const SESSIONS: usize = 150;
    const DELTAS: usize = 60;
    let (fake, db, a, b) = two_instances("scale").await;
    fake.set_default(Script::slow(DELTAS, Duration::from_millis(50)));
    let expected: String = (0..DELTAS).map(|i| format!("w{i} ")).collect();
    let servers = [Arc::new(a), Arc::new(b)];
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = watch_connections(&db, stop.clone());

    let mut sids = Vec::new();
    for i in 0..SESSIONS {
        sids.push(servers[i % 2].create_session().await);
    }
    let started = Instant::now();
    let work = sids.iter().enumerate().map(|(i, sid)| {
        let (here, there) = (servers[i % 2].clone(), servers[(i + 1) % 2].clone());
        let (sid, expected) = (sid.clone(), expected.clone());
        tokio::spawn(async move {
            let receipt = here.send(&sid, "go").await;
            // From the start of the log: the stream must miss nothing posted before it.
            let mut sse = there.events(&sid, Some(0)).await;
            let mut text = String::new();
            let mut last_seq = 0;
            let mut final_text = None;
            loop {
                let (_, e) = sse.next(Duration::from_secs(60)).await;
                match e {
                    Event::Delta(d) if d.run_id == receipt.run_id => {
                        assert!(d.seq > last_seq, "{sid}: delta {} after {last_seq}", d.seq);
                        last_seq = d.seq;
                        text.push_str(&d.text);
                    }
                    Event::Message(m)
                        if m.run_id.as_ref() == Some(&receipt.run_id)
                            && m.status == Some(MessageStatus::Complete) =>
                    {
                        final_text = Some(m.content);
                    }
                    Event::Run(r) if r.id == receipt.run_id && !r.status.is_active() => {
                        assert_eq!(r.status, RunStatus::Completed, "{sid}: {r:?}");
                        break;
                    }
                    _ => {}
                }
            }
            assert_eq!(final_text.as_deref(), Some(expected.as_str()), "{sid}");
            assert_eq!(
                text, expected,
                "{sid}: the deltas seen on the other instance"
            );
        })
    });
    for w in futures::future::join_all(work).await {
        w.unwrap();
    }
    let took = started.elapsed();
    stop.cancel();
    let peak = watcher.await.unwrap();

    assert_eq!(fake.seen().len(), SESSIONS, "one provider request per run");
    assert_eq!(peak.len(), 2, "both instances were seen: {peak:?}");
    let budget = i64::from(server::store::DEFAULT_MAX_CONNECTIONS);
    for (instance, n) in &peak {
        assert!(
            *n <= budget,
            "{instance} opened {n} connections (budget {budget})"
        );
    }
    eprintln!("{SESSIONS} sessions in {took:?}; peak connections {peak:?}");
}

/// A session whose lock stays taken (here: by a row no instance holds, as a hung request of
/// another instance would keep it) answers `session.busy` after the bound instead of waiting
/// for ever, and every other session goes on meanwhile.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_session_locked_for_long_answers_busy_and_holds_up_no_other() {
    let (_fake, db, a, _b) = two_instances("busy").await;
    let stuck = a.create_session().await;
    let free = a.create_session().await;
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    sqlx::query(
        "INSERT INTO session_locks (session_id, holder, expires_at) VALUES ($1, 'elsewhere', $2)",
    )
    .bind(&stuck)
    .bind(i64::MAX / 2)
    .execute(&pool)
    .await
    .unwrap();

    let began = Instant::now();
    let post = format!("/sessions/{stuck}/messages");
    let (blocked, other) = tokio::join!(a.post(&post, json!({"content": "hi"})), async {
        let r = a.send(&free, "meanwhile").await;
        (a.wait_run_end(&r.run_id).await, began.elapsed())
    });
    let waited = began.elapsed();
    assert_eq!(blocked.0, 503, "{}", blocked.1);
    assert_eq!(
        blocked.1["error"]["code"],
        json!(ErrorCode::SessionBusy.as_str())
    );
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(20),
        "gave up after {waited:?}"
    );
    assert_eq!(other.0.status, RunStatus::Completed);
    assert!(
        other.1 < Duration::from_secs(5),
        "the free session waited {:?}",
        other.1
    );
    // Nothing of the refused post was kept.
    assert!(a.detail(&stuck).await.messages.is_empty());
    pool.close().await;
}

/// A lock waiter dropped mid-wait (a client hanging up) leaves nothing taken: once the holder
/// lets go, the next taker gets the lock at once, and no row is left behind.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_dropped_lock_waiter_leaves_the_lock_free() {
    assert!(on_postgres(), "needs PostgreSQL");
    let db = fresh_postgres_database(&postgres_url().unwrap());
    let store = server::store::Store::open(&db).await.unwrap();
    let far = || tokio::time::Instant::now() + Duration::from_secs(30);
    for round in 0..20u64 {
        let held = store
            .lock_session(&SessionId::new("s"), far())
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .lock_session(&SessionId::new("s"), far())
                    .await
                    .map(drop)
            }
        });
        // Dropped at a different point of its polling each round.
        tokio::time::sleep(Duration::from_millis(1 + round * 3)).await;
        waiter.abort();
        let _ = waiter.await;
        drop(held);
        let began = Instant::now();
        let again = store
            .lock_session(
                &SessionId::new("s"),
                tokio::time::Instant::now() + Duration::from_secs(2),
            )
            .await;
        assert!(again.is_ok(), "round {round}: the lock stayed taken");
        assert!(
            began.elapsed() < Duration::from_millis(1500),
            "round {round}"
        );
        drop(again);
    }
    // Releases are sent as their guards drop: wait for the table to empty, with a deadline.
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM session_locks")
            .fetch_one(&pool)
            .await
            .unwrap();
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} lock rows left behind");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pool.close().await;
    store.close().await;
}

/// The database refuses every connection for 4 s while 20 runs end: each end is kept and
/// written once the database is back, each reply complete with its whole text, and the
/// other instance takes none of them for orphans.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn run_ends_during_a_database_outage_are_written_when_it_is_back() {
    const RUNS: usize = 20;
    let (fake, db, a, b) = two_instances("outage").await;
    let expected: String = (0..20).map(|i| format!("w{i} ")).collect();
    fake.set_default(Script::slow(20, Duration::from_millis(50)));
    let mut sent = Vec::new();
    for _ in 0..RUNS {
        let sid = a.create_session().await;
        let r = a.send(&sid, "go").await;
        sent.push((sid, r));
    }
    // Out for 4 s from just before the streams end (about 1 s in).
    let admin = sqlx::PgPool::connect(&postgres_url().unwrap())
        .await
        .unwrap();
    let name = db_name(&db);
    tokio::time::sleep(Duration::from_millis(700)).await;
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .execute(&admin)
        .await
        .unwrap();
    let out_until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < out_until {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&name)
        .execute(&admin)
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;

    for (sid, r) in &sent {
        let deadline = Instant::now() + Duration::from_secs(60);
        let run = loop {
            let (status, body) = b.get(&format!("/runs/{}", r.run_id)).await;
            if status == 200 {
                let run: app::wire::Run = serde_json::from_value(body["run"].clone()).unwrap();
                if !run.status.is_active() {
                    break run;
                }
            }
            assert!(Instant::now() < deadline, "run {} never ended", r.run_id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(run.status, RunStatus::Completed, "{sid}: {run:?}");
        let reply = b
            .detail(sid)
            .await
            .messages
            .into_iter()
            .find(|m| m.run_id.as_ref() == Some(&r.run_id))
            .unwrap();
        assert_eq!(reply.content, expected, "{sid}");
    }
}

/// U+0000 from an operator or a provider never fails a write: kept on SQLite, stored as
/// U+FFFD on PostgreSQL, and the run completes with its text.
#[tokio::test]
async fn text_holding_u0000_is_stored_and_the_run_completes() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("nul"), &fake.url)).await;
    let sid = server.create_session().await;
    fake.push(Script::reply(&["a\u{0}", "b"]));
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/messages"),
            json!({"content": "x\u{0}y"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let run_id = body["run_id"].as_str().unwrap().to_string();
    let run = server.wait_run_end(&run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    let nul = if on_postgres() { '\u{FFFD}' } else { '\u{0}' };
    let messages = server.detail(&sid).await.messages;
    assert_eq!(messages[0].content, format!("x{nul}y"));
    assert_eq!(messages[1].content, format!("a{nul}b"));
    let title_patch = server
        .patch(&format!("/sessions/{sid}"), json!({"title": "t\u{0}"}))
        .await;
    assert_eq!(title_patch.0, 200, "{}", title_patch.1);
    assert_eq!(server.detail(&sid).await.session.title, format!("t{nul}"));
}

/// Deltas cross instances without a row each: while a reply streams on A and is followed
/// on B, the log never holds a delta, and B sees every delta in order. An instance that
/// starts mid-stream and is asked for the session from the start of the log sends the
/// reply's text so far as a snapshot, then every later delta: no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn deltas_cross_instances_without_rows_and_a_late_instance_resumes_without_a_gap() {
    const DELTAS: usize = 100;
    let (fake, db, a, b) = two_instances("rows").await;
    fake.push(Script::slow(DELTAS, Duration::from_millis(30)));
    let expected: String = (0..DELTAS).map(|i| format!("w{i} ")).collect();
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, None).await;

    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let rows_watch = tokio::spawn({
        let (pool, stop) = (pool.clone(), stop.clone());
        async move {
            let mut most = 0i64;
            while !stop.is_cancelled() {
                let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE name = 'delta'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                most = most.max(n);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            most
        }
    });
    let receipt = a.send(&sid, "go").await;

    // A third instance, started mid-stream, asked for everything.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut cc = config(&temp_dir("rows-c"), &fake.url);
    cc.database_url = Some(db.clone());
    let c = TestServer::start(cc).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut on_c = c.events(&sid, Some(0)).await;

    let seen_b = on_b
        .until(Duration::from_secs(30), common::run_ended(&receipt.run_id))
        .await;
    let seqs: Vec<u64> = seen_b
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Delta(d) => Some(d.seq),
            _ => None,
        })
        .collect();
    assert_eq!(
        seqs,
        (1..=DELTAS as u64).collect::<Vec<_>>(),
        "B: every delta once, in order"
    );

    // C: the snapshot, then the deltas after it, make the whole reply before its end.
    let seen_c = on_c
        .until(Duration::from_secs(30), common::run_ended(&receipt.run_id))
        .await;
    let mut text = String::new();
    let mut at = 0u64;
    let mut snapshot = false;
    for (_, e) in &seen_c {
        match e {
            Event::Message(m)
                if m.run_id.as_ref() == Some(&receipt.run_id)
                    && m.status == Some(MessageStatus::Streaming)
                    && m.delta_seq.unwrap_or(0) > 0 =>
            {
                snapshot = true;
                text = m.content.clone();
                at = m.delta_seq.unwrap_or(0);
            }
            Event::Delta(d) if d.run_id == receipt.run_id && d.seq > at => {
                assert_eq!(d.seq, at + 1, "C: a gap after delta {at}");
                at = d.seq;
                text.push_str(&d.text);
            }
            _ => {}
        }
    }
    assert!(
        snapshot,
        "C sent no snapshot of the streaming reply: {seen_c:?}"
    );
    assert_eq!(text, expected, "C: the snapshot and the deltas after it");

    stop.cancel();
    let most = rows_watch.await.unwrap();
    assert_eq!(most, 0, "delta rows were written to the log");
    pool.close().await;
}

/// An instance whose lease lapsed (its heartbeats held up for longer than the lease) records
/// no tool call and so executes none: the model's call arrives, the fence refuses it (counted
/// in `/metrics`), and the run's end waits for the lease too; once heartbeats go through
/// again, the run ends without a tool having run, and tools run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn an_instance_whose_lease_lapsed_executes_no_tool() {
    assert!(on_postgres(), "needs PostgreSQL");
    let fake = FakeProvider::start().await;
    let dir = temp_dir("fence");
    let server = TestServer::start(config(&dir, &fake.url)).await;
    let db = common::database_url(&dir).unwrap();
    let sid = server.create_session().await;
    let call = || Script::call("Looking. ", "call_1", "mulligan__list_sessions", json!({}));

    // Heartbeats held up: the instance row locked by another transaction for 7 s, longer
    // than the 5 s lease.
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM instances FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(6_500)).await;
    // The turn never gets past its first step: no reply is queued for a second one.
    let fenced = || async {
        let text = reqwest::get(format!("{}/metrics", server.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("mulligan_fenced_writes_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("the fenced writes counter")
    };
    let fenced_before = fenced().await;
    fake.push(call());
    let sent = server.send(&sid, "look").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while fenced().await == fenced_before {
        assert!(
            Instant::now() < deadline,
            "the fence never refused the tool call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Nothing of the run is written while the lease is lapsed, its end neither.
    assert_eq!(server.run(&sent.run_id).await.status, RunStatus::Running);
    tx.rollback().await.unwrap();
    let run = server.wait_run_end(&sent.run_id).await;
    assert_ne!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.tools_executed, 0, "a tool ran without a lease: {run:?}");
    let recorded: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tool_calls WHERE run_id = $1")
        .bind(sent.run_id.as_str())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(recorded, 0);

    // Heartbeats go through again: a tool turn runs its tool.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        fake.push(call());
        fake.push(Script::reply(&["done"]));
        let sent = server.send(&sid, "look again").await;
        let run = server.wait_run_end(&sent.run_id).await;
        if run.status == RunStatus::Completed {
            assert_eq!(run.tools_executed, 1, "{run:?}");
            break;
        }
        assert!(Instant::now() < deadline, "tools never ran again: {run:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    pool.close().await;
}

/// A delta too large for a notification crosses by id: the follower reads it from the log and
/// delivers it in its place, between the small ones sent whole.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_delta_too_large_to_notify_arrives_in_its_place_on_the_other_instance() {
    let (fake, db, a, b) = two_instances("big-delta").await;
    let big = "y".repeat(9_000);
    fake.push(Script::reply(&["one ", &big, " three"]));
    let sid = a.create_session().await;
    let mut on_b = b.events(&sid, None).await;
    let receipt = a.send(&sid, "go").await;
    let seen = on_b
        .until(Duration::from_secs(30), common::run_ended(&receipt.run_id))
        .await;
    let deltas: Vec<(u64, &str)> = seen
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Delta(d) => Some((d.seq, d.text.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        vec![(1, "one "), (2, big.as_str()), (3, " three")],
        "every delta once, in order, the large one whole"
    );
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE name = 'delta'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1, "only the large delta is a row");
}
