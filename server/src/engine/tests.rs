//! The engine with a provider that panics: the run still ends (`failed`/`internal`,
//! retryable, partial text kept) and the session's next prompt runs; a settings change waits
//! for the session's lock.
use super::{Engine, EngineConfig};
use crate::events::EventHub;
use crate::llm::{ChatRequest, DeltaStream, Provider, ProviderError, StreamItem};
use crate::store::Store;
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
    let dir = std::env::temp_dir().join(format!("mulligan-engine-{}", crate::clock::new_id("t")));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("m.db").display());
    let store = Store::open(&url).await.unwrap();
    let (hub, _writer) = EventHub::start(store.clone()).await.unwrap();
    let cfg = EngineConfig {
        instance: crate::clock::new_id("i"),
        stream_idle: Duration::from_secs(5),
        save_every: Duration::from_millis(250),
        tier1: crate::retry::policy::Policy {
            max_attempts: 1,
            base: Duration::from_millis(10),
            cap: Duration::from_secs(1),
        },
        spend_limit_tokens: None,
        context_tokens: None,
        max_reply_bytes: 1 << 20,
        max_run: Duration::from_secs(60),
        reconcile_every: Duration::from_secs(30),
        max_steps: 20,
        tool_timeout: Duration::from_secs(120),
        background: app::wire::Backoff::CONTRACT,
    };
    let tools = crate::tools::Toolbox::new(crate::mcp_client::McpServers::empty(), vec![]);
    Engine::new(store, hub, Arc::new(Panicking::default()), tools, cfg)
}

async fn ended(engine: &Engine, run_id: &str) -> Run {
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
        .create_session("t", "m", None, "hash", AutoRetry::Off, &[])
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
    while engine.active(&first.run_id).is_some() {
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
        .message(run.reply_message_id.as_deref().unwrap())
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

/// A session leaving `background` while a failure is being recorded under its lock: the
/// change waits for the lock, so the retry that failure left waiting is ended, not left to
/// fire in a session that no longer retries in the background.
#[tokio::test]
async fn leaving_background_waits_for_the_lock_and_ends_the_retry_left_under_it() {
    let engine = engine().await;
    let session = engine
        .store()
        .create_session("t", "m", None, "hash", AutoRetry::Background, &[])
        .await
        .unwrap();
    let sid = session.id.clone();
    let held = engine.lock(&sid).await.unwrap();
    let change = tokio::spawn({
        let engine = engine.clone();
        let sid = sid.clone();
        async move {
            engine
                .update_settings(&sid, None, Some(AutoRetry::Off), None)
                .await
        }
    });
    // Time for a change that does not wait for the lock to be done before the retry is left.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!change.is_finished(), "the change waits for the lock");
    let waiting = app::wire::WaitingRetry {
        attempt: 1,
        fires_at: crate::clock::now_ms() + 60_000,
        reason: RetryClass::Overloaded,
    };
    engine
        .store()
        .set_waiting_retry(&sid, &waiting)
        .await
        .unwrap();
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
