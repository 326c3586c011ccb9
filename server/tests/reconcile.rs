//! The periodic reconcile (SQLite, and PostgreSQL in its pass): a run recorded `running` by
//! this instance with no live task here is ended `failed`/`interrupted` within the reconcile
//! period, and runs that are executing are left alone.
use testkit as common;

use app::wire::{RetryClass, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, database_url, temp_dir, TestServer};
use std::time::{Duration, Instant};

/// Runs one statement with one text parameter on the server's database.
async fn execute(server: &TestServer, sql: &str, arg: &(impl std::fmt::Display + ?Sized)) {
    let url = database_url(&server.data_dir)
        .unwrap_or_else(|| format!("sqlite://{}", server.data_dir.join("mulligan.db").display()));
    if url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        sqlx::query(sql)
            .bind(arg.to_string())
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(sql)
            .bind(arg.to_string())
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }
}

#[tokio::test]
async fn a_run_recorded_running_here_without_a_task_is_ended_interrupted() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("reconcile"), &fake.url);
    c.reconcile_ms = 100;
    let server = TestServer::start(c).await;
    let sid = server.create_session().await;

    // A run that streams across several reconcile passes is left alone.
    fake.push(Script::slow(30, Duration::from_millis(20)));
    let first = server.send(&sid, "stream for a while").await;
    let run = server.wait_run_end(&first.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:#?}");

    // The same run recorded `running` again (owner: this instance), with no task behind it,
    // as a runner that died without recording its end would leave it, and a prompt sent at
    // once, which waits behind it. Should a reconcile pass come between the two, it has ended
    // the run before the prompt arrived and the prompt ran instead: mark that run and try again.
    let mut stale = first.run_id.clone();
    let mut tries = 0;
    let (marked, queued) = loop {
        execute(
            &server,
            "UPDATE runs SET status = 'running', finished_at = NULL WHERE id = $1",
            &stale,
        )
        .await;
        let marked = Instant::now();
        let sent = server.send(&sid, "behind it").await;
        if sent.queued {
            break (marked, sent);
        }
        tries += 1;
        assert!(tries < 20, "a reconcile pass always came before the prompt");
        let ran = server.wait_run_end(&sent.run_id).await;
        assert_eq!(ran.status, RunStatus::Completed, "{ran:#?}");
        stale = sent.run_id;
    };
    let run = server.wait_run_end(&stale).await;
    let took = marked.elapsed();
    assert_eq!(run.status, RunStatus::Failed, "{run:#?}");
    let class = run.retry.expect("classified");
    assert_eq!(
        (class.retryable, class.retry_class.clone()),
        (true, RetryClass::Interrupted)
    );
    assert!(took < Duration::from_secs(5), "ended after {took:?}");
    // The prompt behind it is held behind the failure, as after any interrupted run.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let runs = server.detail(&sid).await.runs;
        let q = runs.iter().find(|r| r.id == queued.run_id).unwrap();
        if q.held_by.as_ref().map(|id| id.as_str()) == Some(stale.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "not held: {q:#?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
