//! The engine with a provider that panics: the run still ends (`failed`/`internal`,
//! retryable, partial text kept) and the session's next prompt runs; a command whose caller
//! stops waiting right after its commit still starts what it committed; a background retry
//! the database cannot queue stays waiting, and one that outlived its turn never fires; a
//! settings change waits for the session's lock.
use super::{Engine, EngineConfig};
use crate::events::EventHub;
use crate::llm::{ChatRequest, DeltaStream, Provider, ProviderError, StreamItem};
use crate::store::Store;
use app::wire::RunId;
use app::wire::SessionId;
use app::wire::{AutoRetry, RetryClass, Run, RunStatus};
use futures::future::BoxFuture;
use futures::StreamExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Call 1 panics while opening, call 2 panics after its first delta, later calls answer.
#[derive(Default)]
struct Panicking {
    calls: AtomicU32,
}

impl Provider for Panicking {
    fn open(&self, _req: ChatRequest) -> BoxFuture<'_, Result<DeltaStream, ProviderError>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            match call {
                1 => panic!("a bug while opening"),
                2 => {
                    let items = futures::stream::iter([Ok(StreamItem::Delta("par".into()))]).chain(
                        futures::stream::once(async {
                            panic!("a bug mid-stream");
                            #[allow(unreachable_code)]
                            Ok(StreamItem::Done)
                        }),
                    );
                    Ok(items.boxed())
                }
                _ => Ok(futures::stream::iter([
                    Ok(StreamItem::Delta("fine".into())),
                    Ok(StreamItem::Done),
                ])
                .boxed()),
            }
        })
    }
}

async fn engine() -> Engine {
    engine_at(app::wire::Backoff::CONTRACT).await.0
}

/// An engine whose background retries wait as `background` says, and its database's URL.
async fn engine_at(background: app::wire::Backoff) -> (Engine, String) {
    let dir = std::env::temp_dir().join(format!("mulligan-engine-{}", crate::clock::new_id("t")));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("m.db").display());
    let store = Store::open(&url).await.unwrap();
    let (hub, _writer) = EventHub::start(store.clone()).await.unwrap();
    let cfg = EngineConfig {
        instance: crate::clock::new_id("i"),
        default_model: "demo".into(),
        reconcile_every: Duration::from_secs(30),
        approval_timeout: Duration::from_secs(3600),
        background,
        parking: crate::retry::parking::Parking {
            probe: background,
            release_per_s: 2,
        },
        run: crate::run::RunConfig {
            stream_idle: Duration::from_secs(5),
            save_every: Duration::from_millis(250),
            delta_window: Duration::ZERO,
            tier1: crate::retry::policy::Policy {
                max_attempts: 1,
                base: Duration::from_millis(10),
                cap: Duration::from_secs(1),
            },
            spend_limit_tokens: None,
            context_tokens: None,
            max_reply_bytes: 1 << 20,
            max_run: Duration::from_secs(60),
            max_steps: 20,
            tool_timeout: Duration::from_secs(120),
            parking: crate::retry::parking::Parking {
                probe: background,
                release_per_s: 2,
            },
        },
    };
    let tools = crate::tools::Toolbox::new(crate::mcp_client::McpServers::empty(), vec![]);
    let engine = Engine::new(
        store,
        hub,
        crate::providers::setup::only(Arc::new(Panicking::default())),
        tools,
        cfg,
    );
    (engine, url)
}

async fn ended(engine: &Engine, run_id: &RunId) -> Run {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let run = engine.store().run(run_id).await.unwrap();
        if !run.status.is_active() {
            return run;
        }
        assert!(Instant::now() < deadline, "run {run_id} never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_runner_that_panics_ends_its_run_and_the_queue_moves_on() {
    let engine = engine().await;
    let session = engine
        .store()
        .create_session(&crate::store::NewSession::plain("m", "hash"))
        .await
        .unwrap();
    let first = engine.post_message(&session.id, "one").await.unwrap();
    // Queued behind the first: it must start once the first has ended.
    let second = engine.post_message(&session.id, "two").await.unwrap();

    let run = ended(&engine, &first.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.clone().expect("classified");
    assert_eq!(
        (class.retry_class, class.retryable),
        (RetryClass::Internal, true)
    );
    assert!(run
        .error_message
        .unwrap_or_default()
        .contains("a bug while opening"));
    // The run leaves the active set just after its end is recorded: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.runs().get(&first.run_id).is_some() {
        assert!(Instant::now() < deadline, "no longer active here");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Held behind the failure, as any prompt queued behind a failed turn.
    engine.release(&session.id).await.unwrap();
    let run = ended(&engine, &second.run_id).await;
    assert_eq!(
        run.status,
        RunStatus::Failed,
        "the second call panics mid-stream"
    );
    assert_eq!(
        run.retry.expect("classified").retry_class,
        RetryClass::Internal
    );
    let reply = engine
        .store()
        .message(run.reply_message_id.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        reply.content, "par",
        "the text streamed before the panic is kept"
    );

    let third = engine.post_message(&session.id, "three").await.unwrap();
    let run = ended(&engine, &third.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "the session goes on");
}

async fn session(engine: &Engine, auto_retry: AutoRetry) -> SessionId {
    engine
        .store()
        .create_session(&crate::store::NewSession {
            title: "t",
            model: "m",
            parent_id: None,
            agent_token_hash: "hash",
            auto_retry,
            tools: &[],
            fallbacks: None,
            approval: app::wire::ApprovalMode::Policy,
        })
        .await
        .unwrap()
        .id
}

/// Records a background retry of `run_id` waiting in the session, due in a minute.
async fn leave_retry_waiting(engine: &Engine, sid: &SessionId, run_id: &RunId) {
    let waiting = app::wire::WaitingRetry {
        attempt: 1,
        fires_at: crate::clock::now_ms() + 60_000,
        reason: RetryClass::Overloaded,
    };
    engine
        .store()
        .set_waiting_retry(sid, run_id, &waiting, None)
        .await
        .unwrap();
}

/// Polls `command` (and nothing else does) until `committed` sees its write in the store,
/// then drops it unfinished, as a client hanging up drops its request. Answers whether it
/// was dropped so (`false`: it finished first).
async fn drop_after_commit<F, C>(command: F, committed: impl Fn() -> C) -> bool
where
    F: std::future::Future,
    C: std::future::Future<Output = bool>,
{
    let mut command = std::pin::pin!(command);
    loop {
        if futures::poll!(command.as_mut()).is_ready() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        if committed().await {
            return true;
        }
    }
}

#[tokio::test]
async fn a_prompt_whose_caller_hangs_up_right_after_the_commit_still_runs() {
    let engine = engine().await;
    let mut cut = 0;
    for _ in 0..20 {
        let sid = session(&engine, AutoRetry::Off).await;
        let started = || async {
            let runs = engine.store().runs(&sid).await.unwrap();
            runs.iter().any(|r| r.status != RunStatus::Queued)
        };
        if drop_after_commit(engine.post_message(&sid, "go"), started).await {
            cut += 1;
        }
        let run = engine.store().runs(&sid).await.unwrap().pop();
        let Some(run) = run else { continue };
        // Not left `running` with no task (until a reconcile fails it).
        let run = ended(&engine, &run.id).await;
        assert!(run.finished_at.is_some(), "{run:?}");
        if cut >= 3 {
            break;
        }
    }
    assert!(cut > 0, "no post was dropped after its commit");
}

#[tokio::test]
async fn prompts_released_by_a_caller_that_hangs_up_still_run() {
    let engine = engine().await;
    let sid = session(&engine, AutoRetry::Off).await;
    // Both queued before the first starts: the second is held when the first fails.
    let queue = |content| crate::store::NewRun::prompt(&sid, content);
    let first = engine.store().dispatch(queue("one"), None).await.unwrap();
    let second = engine.store().dispatch(queue("two"), None).await.unwrap();
    engine.start_next(&sid).await.unwrap();
    assert_eq!(
        ended(&engine, &first.run.id).await.status,
        RunStatus::Failed
    );
    let held = engine.store().run(&second.run.id).await.unwrap();
    assert_eq!(held.held_by.as_ref(), Some(&first.run.id));
    let released = || async {
        let run = engine.store().run(&second.run.id).await.unwrap();
        run.held_by.is_none()
    };
    assert!(
        drop_after_commit(engine.release(&sid), released).await,
        "dropped after the release was committed"
    );
    // Not left queued for ever.
    let run = ended(&engine, &second.run.id).await;
    assert!(run.started_at.is_some(), "{run:?}");
}

#[tokio::test]
async fn the_pump_starts_a_queued_run_that_nothing_started() {
    let engine = engine().await;
    let sid = session(&engine, AutoRetry::Off).await;
    // Queued, not started: what a dispatch cut off after its commit used to leave.
    let queued = engine
        .store()
        .dispatch(crate::store::NewRun::prompt(&sid, "stranded"), None)
        .await
        .unwrap()
        .run;
    assert_eq!(queued.status, RunStatus::Queued);
    engine.pump_periodically();
    let run = ended(&engine, &queued.id).await;
    assert!(run.started_at.is_some(), "{run:?}");
}

#[tokio::test]
async fn a_background_retry_the_database_cannot_queue_stays_waiting() {
    let quick = app::wire::Backoff {
        base_ms: 50,
        cap_ms: 50,
    };
    let (engine, url) = engine_at(quick).await;
    let sid = session(&engine, AutoRetry::Background).await;
    let first = engine.post_message(&sid, "one").await.unwrap();
    assert_eq!(
        ended(&engine, &first.run_id).await.status,
        RunStatus::Failed
    );
    let waiting = || async {
        let rec = engine.store().session(&sid).await.unwrap();
        rec.session.waiting_retry
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting().await.is_none() {
        assert!(Instant::now() < deadline, "no waiting retry");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every new run fails to be written: the retry cannot be queued.
    use sqlx::Connection;
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER no_runs BEFORE INSERT ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .execute(&mut db)
    .await
    .unwrap();
    engine.fire_background_retries();
    // Several passes of the loop past its time.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(waiting().await.is_some(), "the waiting retry was lost");
    assert_eq!(engine.store().runs(&sid).await.unwrap().len(), 1);

    sqlx::query("DROP TRIGGER no_runs")
        .execute(&mut db)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.store().runs(&sid).await.unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "the retry never fired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_waiting_retry_whose_run_is_no_longer_the_last_turn_ends_without_firing() {
    let quick = app::wire::Backoff {
        base_ms: 50,
        cap_ms: 50,
    };
    let (engine, _) = engine_at(quick).await;
    let sid = session(&engine, AutoRetry::Background).await;
    let one = engine.post_message(&sid, "one").await.unwrap();
    assert_eq!(ended(&engine, &one.run_id).await.status, RunStatus::Failed);
    // A newer turn fails too (retryable, so a retry of it would go).
    let two = engine.post_message(&sid, "two").await.unwrap();
    assert_eq!(ended(&engine, &two.run_id).await.status, RunStatus::Failed);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut w = loop {
        let rec = engine.store().session(&sid).await.unwrap();
        if let (Some(w), Some(run)) = (rec.session.waiting_retry, rec.retry_run_id) {
            if run == two.run_id {
                break w;
            }
        }
        assert!(Instant::now() < deadline, "no waiting retry for two");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // A retry left waiting for the first turn (as one from before a newer turn could be).
    w.fires_at = crate::clock::now_ms();
    engine
        .store()
        .set_waiting_retry(&sid, &one.run_id, &w, None)
        .await
        .unwrap();
    engine.fire_background_retries();
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine
        .store()
        .session(&sid)
        .await
        .unwrap()
        .session
        .waiting_retry
        .is_some()
    {
        assert!(Instant::now() < deadline, "the stale retry never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        engine.store().runs(&sid).await.unwrap().len(),
        2,
        "nothing fired on the newer turn"
    );
}

/// A session leaving `background` while a failure is being recorded under its lock: the
/// change waits for the lock, so the retry that failure left waiting is ended, not left to
/// fire in a session that no longer retries in the background.
#[tokio::test]
async fn leaving_background_waits_for_the_lock_and_ends_the_retry_left_under_it() {
    let engine = engine().await;
    let sid = session(&engine, AutoRetry::Background).await;
    let held = engine.locks().lock(&sid).await.unwrap();
    let change = tokio::spawn({
        let engine = engine.clone();
        let sid = sid.clone();
        async move { engine.update_settings(&sid, off()).await }
    });
    // Time for a change that does not wait for the lock to be done before the retry is left.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!change.is_finished(), "the change waits for the lock");
    leave_retry_waiting(&engine, &sid, &RunId::new("r_failed_under_the_lock")).await;
    drop(held);
    let changed = change.await.unwrap().unwrap();
    assert_eq!(changed.auto_retry, AutoRetry::Off);
    let now = engine.store().session(&sid).await.unwrap().session;
    assert_eq!(
        (now.auto_retry, now.waiting_retry),
        (AutoRetry::Off, None),
        "no retry waits in a session that left background"
    );
}

/// A settings change whose caller hangs up while it waits for the session's lock: it is
/// carried to its end once the lock is free, both writes and the announcement, never cut
/// between leaving `background` and ending the retry waiting there.
#[tokio::test]
async fn a_settings_change_whose_caller_hangs_up_is_carried_to_its_end() {
    let engine = engine().await;
    let sid = session(&engine, AutoRetry::Background).await;
    leave_retry_waiting(&engine, &sid, &RunId::new("r_failed")).await;
    let mut events = engine.hub().subscribe(&sid, None).live;
    let held = engine.locks().lock(&sid).await.unwrap();
    let change = engine.update_settings(&sid, off());
    // The caller gives up while the change waits for the lock: its future is dropped.
    assert!(tokio::time::timeout(Duration::from_millis(100), change)
        .await
        .is_err());
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = engine.store().session(&sid).await.unwrap().session;
        if (now.auto_retry, now.waiting_retry.is_none()) == (AutoRetry::Off, true) {
            break;
        }
        assert!(Instant::now() < deadline, "the change was cut: {now:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let announced = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("the change is announced")
        .unwrap();
    assert_eq!(announced.name, "session");
}

/// A change of a session's retry setting to `off`.
fn off() -> crate::store::SessionChange {
    crate::store::SessionChange {
        auto_retry: Some(AutoRetry::Off),
        ..Default::default()
    }
}
