//! Around a run: context-overflow compaction, the spend limit, and stalled streams.
use testkit as common;

use app::wire::{RetryClass, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::json;
use std::time::Duration;

fn overflow() -> Script {
    Script::Status {
        code: 400,
        headers: vec![],
        body: json!({"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "too long"}}),
    }
}

#[tokio::test]
async fn an_overflow_compacts_once_and_reruns() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("compact"), &fake.url)).await;
    let sid = server.create_session().await;
    for i in 0..3 {
        let r = server.send(&sid, &format!("turn {i}")).await;
        server.wait_run_end(&r.run_id).await;
    }
    fake.push(overflow()).push(Script::reply(&["fits now"]));
    let r = server.send(&sid, "the anchor prompt").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let seen = fake.seen();
    let before = seen[3].body["messages"].as_array().unwrap().clone();
    let after = seen[4].body["messages"].as_array().unwrap().clone();
    assert_eq!(before.len(), 7);
    assert!(
        after.len() < before.len(),
        "compacted: {} → {}",
        before.len(),
        after.len()
    );
    assert_eq!(
        after.last().unwrap()["content"],
        "the anchor prompt",
        "the anchor prompt is kept"
    );
}

#[tokio::test]
async fn a_second_overflow_fails_the_run_as_context_overflow() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("overflow"), &fake.url)).await;
    let sid = server.create_session().await;
    let r = server.send(&sid, "first").await;
    server.wait_run_end(&r.run_id).await;
    fake.set_default(overflow());
    let r = server.send(&sid, "second").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let retry = run.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::ContextOverflow, false)
    );
    assert_eq!(fake.seen().len(), 3, "one call, one compacted call");
}

#[tokio::test]
async fn a_run_over_the_spend_limit_fails_without_calling_the_provider() {
    let fake = FakeProvider::start().await;
    let mut cfg = config(&temp_dir("spend"), &fake.url);
    cfg.spend_limit_tokens = Some(5);
    let server = TestServer::start(cfg).await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "uses seven tokens").await;
    assert_eq!(
        server.wait_run_end(&first.run_id).await.status,
        RunStatus::Completed
    );
    let second = server.send(&sid, "one more").await;
    let run = server.wait_run_end(&second.run_id).await;
    let retry = run.retry.unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::SpendLimitExceeded, false)
    );
    assert!(run.error_message.unwrap().contains("budget"));
    assert_eq!(fake.seen().len(), 1, "the provider was not contacted");
}

#[tokio::test]
async fn a_stalled_stream_fails_as_stream_interrupted() {
    let fake = FakeProvider::start().await;
    let mut cfg = config(&temp_dir("stall"), &fake.url);
    cfg.stream_idle_ms = 300;
    let server = TestServer::start(cfg).await;
    fake.push(Script::StallAfter {
        deltas: vec!["started ".into()],
        stall: Duration::from_secs(30),
    });
    let sid = server.create_session().await;
    let r = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(
        run.retry.unwrap().retry_class,
        RetryClass::StreamInterrupted
    );
    assert_eq!(
        server.detail(&sid).await.messages.pop().unwrap().content,
        "started "
    );
    assert_eq!(fake.seen().len(), 1);
}
