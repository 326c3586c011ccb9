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

/// `data:` frames of a Chat Completions stream asking for `mulligan__list_sessions`, its
/// arguments (`{}` padded with spaces) in `fragments` pieces, then done.
fn argument_fragments(fragments: usize) -> Vec<String> {
    let chunk = |delta: serde_json::Value| {
        format!(
            "data: {}",
            json!({"choices": [{"index": 0, "delta": delta}]})
        )
    };
    let call = |f: serde_json::Value| chunk(json!({"tool_calls": [f]}));
    let mut frames = vec![call(json!({
        "index": 0, "id": "call_slow", "type": "function",
        "function": {"name": "mulligan__list_sessions", "arguments": "{"}
    }))];
    for _ in 0..fragments {
        frames.push(call(json!({"index": 0, "function": {"arguments": " "}})));
    }
    frames.push(call(json!({"index": 0, "function": {"arguments": "}"}})));
    frames.push(format!(
        "data: {}",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    ));
    frames.push("data: [DONE]".into());
    frames
}

/// A step that streams only tool-call argument fragments, each well within the idle limit
/// but together far past it, is alive: its call runs once, and no attempt is retried.
#[tokio::test]
async fn tool_call_fragments_keep_a_step_alive_past_the_idle_limit() {
    let fake = FakeProvider::start().await;
    let mut cfg = config(&temp_dir("idle-fragments"), &fake.url);
    cfg.stream_idle_ms = 400;
    let server = TestServer::start(cfg).await;
    fake.push(Script::Frames {
        frames: argument_fragments(10),
        every: Duration::from_millis(150),
    });
    fake.push(Script::reply(&["listed"]));
    let sid = server.create_session().await;
    let r = server.send(&sid, "list them").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error_message);
    let seen = fake.seen();
    assert_eq!(seen.len(), 2, "one request per step");
    assert_eq!(run.tier1_attempts, 2, "one attempt per step");
    let answered = seen[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["role"] == "tool" && m["tool_call_id"] == "call_slow");
    assert!(
        answered,
        "Tier 1 sent the first step again instead of running its call"
    );
}

/// Anthropic `ping` events and thinking deltas, one well within the idle limit after
/// another, keep a step alive until its text comes.
#[tokio::test]
async fn anthropic_pings_and_thinking_keep_a_step_alive_past_the_idle_limit() {
    let fake = FakeProvider::start().await;
    let mut cfg = config(&temp_dir("idle-pings"), &fake.url);
    cfg.stream_idle_ms = 400;
    cfg.provider = server::config::ProviderKind::Anthropic;
    let server = TestServer::start(cfg).await;
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}");
    let mut frames = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
    )];
    for _ in 0..5 {
        frames.push(event("ping", json!({"type": "ping"})));
    }
    frames.push(event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
    ));
    for _ in 0..5 {
        frames.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm "}}),
        ));
    }
    frames.push(event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    frames.push(event(
        "content_block_delta",
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "pong"}}),
    ));
    frames.push(event(
        "message_delta",
        json!({"type": "message_delta", "usage": {"output_tokens": 4}}),
    ));
    frames.push(event("message_stop", json!({"type": "message_stop"})));
    fake.push(Script::Frames {
        frames,
        every: Duration::from_millis(150),
    });
    let sid = server.create_session().await;
    let r = server.send(&sid, "ping?").await;
    let run = server.wait_run_end(&r.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error_message);
    assert_eq!(run.tier1_attempts, 1, "Tier 1 sent the step again");
    assert_eq!(fake.seen().len(), 1);
    assert_eq!(
        server.detail(&sid).await.messages.pop().unwrap().content,
        "pong"
    );
}
