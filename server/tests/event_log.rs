//! The event log's retention and resume edges (SQLite, and PostgreSQL in its pass): a long
//! stream's `delta` rows do not stay in the log once its run has ended, a resume over the
//! pruned range still ends with the whole reply, and an absurd `Last-Event-ID` is harmless.
use testkit as common;

use app::wire::Event;
use common::fake::{FakeProvider, Script};
use common::{config, database_url, run_ended, temp_dir, TestServer};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

/// `(all event rows, delta rows)` of a session, read from the server's database.
async fn event_rows(server: &TestServer, sid: &str) -> (i64, i64) {
    let url = database_url(&server.data_dir)
        .unwrap_or_else(|| format!("sqlite://{}", server.data_dir.join("mulligan.db").display()));
    let sql = "SELECT COUNT(*), COALESCE(SUM(CASE WHEN name = 'delta' THEN 1 ELSE 0 END), 0)
               FROM events WHERE session_id = $1";
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let n: (i64, i64) = sqlx::query_as(sql)
            .bind(sid)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    } else {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let n: (i64, i64) = sqlx::query_as(sql)
            .bind(sid)
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }
}

fn fast(n: usize) -> Script {
    Script::Stream {
        deltas: (0..n).map(|i| format!("d{i} ")).collect(),
        every: Duration::from_micros(100),
        finish: true,
    }
}

#[tokio::test]
async fn long_streams_leave_a_bounded_number_of_event_rows() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("retention"), &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let mut bounds = Vec::new();
    for round in 0..2 {
        fake.push(fast(3000));
        let receipt = server.send(&sid, &format!("round {round}")).await;
        let seen = sse.until(WAIT, run_ended(&receipt.run_id)).await;
        let deltas = seen
            .iter()
            .filter(|(_, e)| matches!(e, Event::Delta(_)))
            .count();
        assert_eq!(deltas, 3000, "a live subscriber gets every delta");
        // The rows of the ended run's deltas go; a handful of run/message events stay.
        let deadline = Instant::now() + WAIT;
        loop {
            let (all, delta_rows) = event_rows(&server, &sid).await;
            if delta_rows == 0 {
                bounds.push(all);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{delta_rows} delta rows of ended runs are still in the log"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let detail = server.detail(&sid).await;
    let want: String = (0..3000).map(|i| format!("d{i} ")).collect();
    assert_eq!(detail.messages.last().unwrap().content, want);
    assert!(
        bounds.iter().all(|n| *n <= 12 * 2),
        "event rows after each round: {bounds:?} (6000 deltas were streamed)"
    );
}

#[tokio::test]
async fn a_resume_over_pruned_deltas_gets_the_whole_reply_and_every_other_event() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("resume-pruned");
    let mut server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    fake.push(fast(200));
    let receipt = server.send(&sid, "go").await;
    let all = sse.until(WAIT, run_ended(&receipt.run_id)).await;
    drop(sse);
    // A restart empties memory: the resume is served from the log.
    server.stop().await;
    let server = TestServer::start(config(&dir, &fake.url)).await;
    let cut = all
        .iter()
        .find(|(_, e)| matches!(e, Event::Delta(d) if d.seq == 10))
        .unwrap()
        .0;
    let mut resumed = server.events(&sid, Some(cut)).await;
    let again = resumed.until(WAIT, run_ended(&receipt.run_id)).await;
    let not_deltas = |v: &[(i64, Event)]| -> Vec<i64> {
        v.iter()
            .filter(|(id, e)| *id > cut && !matches!(e, Event::Delta(_)))
            .map(|(id, _)| *id)
            .collect()
    };
    assert_eq!(
        not_deltas(&again),
        not_deltas(&all),
        "every other event, in order"
    );
    let want: String = (0..200).map(|i| format!("d{i} ")).collect();
    let last_reply = again.iter().rev().find_map(|(_, e)| match e {
        Event::Message(m)
            if m.run_id.as_ref().map(|id| id.as_str()) == Some(receipt.run_id.as_str()) =>
        {
            Some(m.content.clone())
        }
        _ => None,
    });
    assert_eq!(
        last_reply,
        Some(want),
        "the message snapshot holds the whole reply"
    );
}

/// `Last-Event-ID: i64::MAX` resumes after everything: nothing of the history comes back,
/// and a later turn's events still do. `i64::MIN` resumes from the start: the whole history.
#[tokio::test]
async fn the_largest_last_event_id_resumes_after_everything() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("max-id"), &fake.url)).await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "before").await;
    server.wait_run_end(&first.run_id).await;

    let mut sse = server.events(&sid, Some(i64::MAX)).await;
    let second = server.send(&sid, "after").await;
    let (_, event) = sse.next(WAIT).await;
    let ids_of_first = |e: &Event| match e {
        Event::Run(r) => r.id == first.run_id,
        Event::Message(m) => m.run_id.as_ref().map(|id| id.as_str()) == Some(first.run_id.as_str()),
        _ => false,
    };
    assert!(!ids_of_first(&event), "history came back: {event:?}");
    let seen = sse.until(WAIT, run_ended(&second.run_id)).await;
    assert!(
        !seen.iter().any(|(_, e)| ids_of_first(e)),
        "nothing of the first turn: {seen:?}"
    );

    let mut sse = server.events(&sid, Some(i64::MIN)).await;
    let replayed = sse.until(WAIT, run_ended(&first.run_id)).await;
    assert!(
        replayed.iter().any(|(_, e)| ids_of_first(e)),
        "the first turn replayed: {replayed:?}"
    );
    let health = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "the server is still up");
}

/// A crash while a reply streams (one delta every 4 ms), a restart, and a resume with the
/// last id the page saw: the recovered run's end reaches the page. Ids the page saw before
/// the crash are never given again, so nothing new hides below its `Last-Event-ID`.
#[tokio::test]
async fn after_a_crash_a_resumed_stream_learns_the_run_ended() {
    let fake = FakeProvider::start().await;
    fake.push(Script::slow(3000, Duration::from_millis(4)));
    let dir = temp_dir("crash-resume");
    let (server, crashable) = TestServer::start_crashable(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "stream for a while").await;
    let mut deltas = 0;
    let seen = sse
        .until(WAIT, |e| {
            deltas += usize::from(matches!(e, Event::Delta(_)));
            deltas == 150
        })
        .await;
    let last_seen = seen.last().unwrap().0;
    crashable.crash();
    drop(sse);

    let server = TestServer::start(config(&dir, &fake.url)).await;
    let mut resumed = server.events(&sid, Some(last_seen)).await;
    let after = resumed.until(WAIT, run_ended(&receipt.run_id)).await;
    assert!(
        after.iter().all(|(id, _)| *id > last_seen),
        "an event at or below Last-Event-ID {last_seen}: {:?}",
        after.iter().map(|(id, _)| *id).collect::<Vec<_>>()
    );
    let Some((_, Event::Run(run))) = after.last() else {
        unreachable!("until ends on the run's end")
    };
    assert_eq!(run.status, app::wire::RunStatus::Failed);
    assert!(
        after
            .iter()
            .any(|(_, e)| matches!(e, Event::Message(m) if m.run_id.as_ref().map(|id| id.as_str()) == Some(receipt.run_id.as_str()))),
        "the reply's final snapshot came too"
    );
}
