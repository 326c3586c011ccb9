//! Fencing on PostgreSQL (`MULLIGAN_TEST_DATABASE=postgres`; the README's test command runs
//! these in its PostgreSQL pass): every write of a run's progress holds only under the lease
//! (instance and epoch) the run was started under, and a takeover ends a run only while that
//! lease is lapsed. Store-level, with two instance ids on one database and the lapse made by
//! moving an instance's heartbeat back.
use testkit as common;

use app::wire::{MessageId, RunId, RunStatus, ToolCall, ToolCallId, ToolCallStatus};
use common::{fresh_postgres_database, on_postgres, postgres_url};
use server::store::{EndBy, NewRun, NewSession, NewToolCall, Outcome, Started, Store};

struct Db {
    store: Store,
    pool: sqlx::PgPool,
}

async fn open() -> Db {
    assert!(
        on_postgres(),
        "needs PostgreSQL: set MULLIGAN_TEST_DATABASE=postgres and MULLIGAN_TEST_POSTGRES_URL"
    );
    let url = fresh_postgres_database(&postgres_url().expect("MULLIGAN_TEST_POSTGRES_URL"));
    let store = Store::open(&url).await.unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    Db { store, pool }
}

impl Db {
    /// A session with one run started by `owner`.
    async fn started_run(&self, owner: &str) -> Started {
        let s = self
            .store
            .create_session(&NewSession::plain("demo", "hash"))
            .await
            .unwrap();
        self.store
            .dispatch(NewRun::prompt(&s.id, "go"), None)
            .await
            .unwrap();
        self.store
            .start_next(&s.id, owner)
            .await
            .unwrap()
            .expect("the queued run starts")
    }

    /// `instance`'s heartbeat moved back past the lease, as if it had been paused.
    async fn lapse(&self, instance: &str) {
        sqlx::query("UPDATE instances SET seen_at = seen_at - 60000 WHERE id = $1")
            .bind(instance)
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn stored_text(&self, message_id: &MessageId) -> String {
        self.store.message(message_id).await.unwrap().content
    }

    /// Records `run_id`'s end as `by` would: the ended run, or `None` when refused.
    async fn end(
        &self,
        run_id: &RunId,
        status: RunStatus,
        text: &str,
        by: EndBy,
    ) -> Option<app::wire::Run> {
        self.store
            .finish_run(run_id, &outcome(status, text), by)
            .await
            .unwrap()
            .map(|(run, _)| run)
    }

    /// The ids of the runs any instance may take over now.
    async fn orphan_ids(&self) -> Vec<RunId> {
        let orphans = self.store.orphaned_runs().await.unwrap();
        orphans.into_iter().map(|r| r.id).collect()
    }

    async fn status(&self, run_id: &RunId) -> RunStatus {
        self.store.run(run_id).await.unwrap().status
    }

    /// Records a call of `started`'s run as it starts.
    async fn call_started(&self, started: &Started, id: &str) -> server::store::Result<ToolCall> {
        let call = ToolCall {
            id: ToolCallId::new(id),
            step: 1,
            server: "mulligan".into(),
            tool: "list_sessions".into(),
            arguments: serde_json::json!({}),
            status: ToolCallStatus::Running,
            result: None,
            started_at: common::now_ms(),
            finished_at: None,
            approval: None,
            annotations: None,
        };
        self.store
            .tool_call_started(&NewToolCall {
                run_id: &started.run.id,
                message_id: &started.reply.id,
                session_id: &started.run.session_id,
                ord: 0,
                provider_id: id,
                call: &call,
                text_offset: 0,
            })
            .await
            .map(|()| call)
    }
}

fn outcome(status: RunStatus, text: &str) -> Outcome {
    Outcome {
        status,
        content: text.into(),
        error_message: None,
        retry: None,
        tokens_used: 1,
        tool_calls_recorded: true,
        served: Vec::new(),
        asked: Vec::new(),
        stop_reason: None,
    }
}

/// An instance whose runs were taken over after its lease lapsed writes nothing more for the
/// runs it started under that lease (text saves, tool calls, their ends, the run's end), even
/// once its heartbeats go through again and even for a run the takeover has not reached yet;
/// that run counts as orphaned, and a run it starts afterwards writes as usual.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_taken_over_instance_writes_nothing_for_its_old_runs() {
    let db = open().await;
    let (a, b) = ("i-a", "i-b");
    db.store.heartbeat(a).await.unwrap();
    db.store.heartbeat(b).await.unwrap();
    let first = db.started_run(a).await;
    let second = db.started_run(a).await;
    let call = db.call_started(&second, "call-before").await.unwrap();
    db.store
        .save_reply_texts(&[(second.reply.id.to_string(), "before".into(), 1)])
        .await
        .unwrap();
    assert_eq!(db.stored_text(&second.reply.id).await, "before");

    // A pauses past its lease; B takes over its first run (only that one, so far).
    db.lapse(a).await;
    let orphans = db.orphan_ids().await;
    assert!(
        orphans.contains(&first.run.id) && orphans.contains(&second.run.id),
        "{orphans:?}"
    );
    let taken = db
        .end(&first.run.id, RunStatus::Failed, "", EndBy::Takeover)
        .await;
    assert!(taken.is_some(), "the takeover of a lapsed lease is refused");

    // A wakes and beats again: its lease is live, but its epoch moved on.
    db.store.heartbeat(a).await.unwrap();
    db.store
        .save_reply_texts(&[(second.reply.id.to_string(), "after the takeover".into(), 2)])
        .await
        .unwrap();
    assert_eq!(
        db.stored_text(&second.reply.id).await,
        "before",
        "a fenced save landed"
    );
    assert!(
        db.call_started(&second, "call-after").await.is_err(),
        "a tool call was recorded (and so would run) under a lost lease"
    );
    let mut ended = call.clone();
    ended.status = ToolCallStatus::Ok;
    ended.result = Some("done".into());
    assert!(db
        .store
        .tool_call_ended(&ended, &second.run.id, false)
        .await
        .is_err());
    let owner_end = db
        .end(&second.run.id, RunStatus::Completed, "whole", EndBy::Owner)
        .await;
    assert!(
        owner_end.is_none(),
        "the end of a run started under a lost lease was written"
    );
    assert_eq!(db.status(&second.run.id).await, RunStatus::Running);
    assert!(
        db.store.leased_runs_of(a).await.unwrap().is_empty(),
        "A still counts the old run as its own"
    );
    let orphans = db.orphan_ids().await;
    assert_eq!(orphans, vec![second.run.id.clone()]);

    // What A starts now is under its new epoch: its writes land.
    let third = db.started_run(a).await;
    db.store
        .save_reply_texts(&[(third.reply.id.to_string(), "fresh".into(), 1)])
        .await
        .unwrap();
    assert_eq!(db.stored_text(&third.reply.id).await, "fresh");
    let call = db.call_started(&third, "call-new").await.unwrap();
    let mut ended = call.clone();
    ended.status = ToolCallStatus::Ok;
    db.store
        .tool_call_ended(&ended, &third.run.id, false)
        .await
        .unwrap();
    let end = db
        .end(&third.run.id, RunStatus::Completed, "fresh", EndBy::Owner)
        .await;
    assert!(end.is_some());
    assert_eq!(db.status(&third.run.id).await, RunStatus::Completed);
}

/// A takeover re-checks, in the statement that ends the run, that the owner's lease is still
/// lapsed: an owner that beat again between the orphan scan and the end keeps its run, and
/// its own end is written.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_takeover_leaves_a_run_whose_owner_came_back() {
    let db = open().await;
    db.store.heartbeat("i-a").await.unwrap();
    let run = db.started_run("i-a").await;
    db.lapse("i-a").await;
    let orphans = db.store.orphaned_runs().await.unwrap();
    assert_eq!(orphans.len(), 1);

    // The owner beats before the takeover's end is written.
    db.store.heartbeat("i-a").await.unwrap();
    let taken = db
        .end(&run.run.id, RunStatus::Failed, "", EndBy::Takeover)
        .await;
    assert!(taken.is_none(), "a run whose owner is alive was taken over");
    assert_eq!(db.status(&run.run.id).await, RunStatus::Running);

    db.store
        .save_reply_texts(&[(run.reply.id.to_string(), "still mine".into(), 1)])
        .await
        .unwrap();
    let end = db
        .end(
            &run.run.id,
            RunStatus::Completed,
            "still mine, whole",
            EndBy::Owner,
        )
        .await
        .expect("the owner's end is written");
    assert_eq!(end.status, RunStatus::Completed);
    assert_eq!(db.stored_text(&run.reply.id).await, "still mine, whole");
}

/// Issue 35, item 10: a heartbeat that hangs (its row locked by someone else) fails within
/// its 2 s bound instead of holding the lease's only connection, and the next beat goes out
/// on a fresh connection and lands.
#[tokio::test]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn a_hung_heartbeat_is_given_up_and_the_next_one_lands() {
    let db = open().await;
    db.store.heartbeat("i-hung").await.unwrap();
    // Another connection holds the instance's row: the next beat's update waits on it.
    let mut blocker = db.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM instances WHERE id = 'i-hung' FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let asked = std::time::Instant::now();
    let hung = db.store.heartbeat("i-hung").await;
    let took = asked.elapsed();
    assert!(hung.is_err(), "a beat that cannot land reports it");
    assert!(
        took < std::time::Duration::from_secs(4),
        "given up after {took:?}"
    );
    blocker.rollback().await.unwrap();
    let before: i64 = sqlx::query_scalar("SELECT seen_at FROM instances WHERE id = 'i-hung'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let asked = std::time::Instant::now();
    db.store.heartbeat("i-hung").await.unwrap();
    assert!(asked.elapsed() < std::time::Duration::from_secs(2));
    let after: i64 = sqlx::query_scalar("SELECT seen_at FROM instances WHERE id = 'i-hung'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(after > before, "the next beat landed");
    // Judged by the database's clock: the beat holds the database's now, whatever the host's.
    let db_now: i64 =
        sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        (0..2_000).contains(&(db_now - after)),
        "{db_now} vs {after}"
    );
}
