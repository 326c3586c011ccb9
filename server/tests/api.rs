//! The HTTP API against a real server (real SQLite file, real HTTP) and a fake provider.
use testkit as common;

use app::wire::{ErrorCode, Event, MessageStatus, RetryClass, Role, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, run_ended, setup, temp_dir, TestServer, API_KEY};
use serde_json::json;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_prompt_streams_to_completion_over_sse() {
    let (fake, server) = setup("stream").await;
    fake.push(Script::reply(&["Hello", ", ", "operator", "."]));
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "  hi there  ").await;
    assert!(!receipt.queued);
    let events = sse.until(WAIT, run_ended(&receipt.run_id)).await;

    let deltas: Vec<_> = events
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Delta(d) => Some((d.seq, d.text.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas.iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        deltas.iter().map(|d| d.1.as_str()).collect::<String>(),
        "Hello, operator."
    );
    let ids: Vec<i64> = events.iter().map(|(id, _)| *id).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "event ids increase: {ids:?}"
    );
    let Event::Run(last) = &events.last().unwrap().1 else {
        unreachable!()
    };
    assert_eq!(last.status, RunStatus::Completed);

    let detail = server.detail(&sid).await;
    assert_eq!(detail.messages.len(), 2);
    assert_eq!(detail.messages[0].role, Role::Operator);
    assert_eq!(detail.messages[0].content, "hi there", "content is trimmed");
    let reply = &detail.messages[1];
    assert_eq!(
        (reply.role, reply.status),
        (Role::Agent, Some(MessageStatus::Complete))
    );
    assert_eq!(reply.content, "Hello, operator.");
    assert_eq!(
        reply.run_id.as_ref().map(|id| id.as_str()),
        Some(receipt.run_id.as_str())
    );
    // The provider got the conversation with the operator's words.
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body["messages"],
        json!([{"role": "user", "content": "hi there"}])
    );
    assert_eq!(seen[0].body["stream"], json!(true));
}

#[tokio::test]
async fn prompts_queue_in_order_behind_the_active_run() {
    let (fake, server) = setup("queue").await;
    fake.push(Script::slow(10, Duration::from_millis(30)));
    fake.push(Script::reply(&["second"]));
    let sid = server.create_session().await;
    let first = server.send(&sid, "one").await;
    let second = server.send(&sid, "two").await;
    assert!(!first.queued);
    assert!(second.queued, "the second prompt waits for the first run");
    assert_eq!(server.run(&second.run_id).await.status, RunStatus::Queued);
    let (_, s) = server.get(&format!("/sessions/{sid}")).await;
    assert_eq!(s["session"]["status"], "running");

    let a = server.wait_run_end(&first.run_id).await;
    let b = server.wait_run_end(&second.run_id).await;
    assert_eq!(
        (a.status, b.status),
        (RunStatus::Completed, RunStatus::Completed)
    );
    assert!(
        b.started_at.unwrap() >= a.finished_at.unwrap(),
        "one active run per session"
    );
    // The second call carried the whole conversation, in order.
    let roles: Vec<String> = fake.seen()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(roles[0], "user:one");
    assert!(roles[1].starts_with("assistant:w0 "));
    assert_eq!(roles[2], "user:two");
    let detail = server.detail(&sid).await;
    let order: Vec<&str> = detail.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(order[0], "one");
    assert_eq!(order[2], "two");
    assert_eq!(order[3], "second");
}

#[tokio::test]
async fn sse_resumes_after_last_event_id() {
    let (fake, server) = setup("resume").await;
    // More deltas than the live ring holds: the resume gets older ones from the hub's
    // window, where they are kept by their fields and rendered again.
    fake.push(Script::Stream {
        deltas: (0..3 * server::events::RING)
            .map(|i| format!("w{i} \"q\"\n"))
            .collect(),
        every: Duration::from_millis(1),
        finish: true,
    });
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "go").await;
    let all = sse.until(WAIT, run_ended(&receipt.run_id)).await;
    let cut = all[3].0;
    let mut resumed = server.events(&sid, Some(cut)).await;
    let again = resumed.until(WAIT, run_ended(&receipt.run_id)).await;
    let want: Vec<i64> = all.iter().map(|e| e.0).filter(|id| *id > cut).collect();
    assert_eq!(again.iter().map(|e| e.0).collect::<Vec<_>>(), want);
    assert_eq!(
        again.iter().map(|e| e.1.clone()).collect::<Vec<_>>(),
        all[4..].iter().map(|e| e.1.clone()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn sse_resumes_from_the_log_after_a_restart() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("resume-restart");
    let mut server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "go").await;
    let all = sse.until(WAIT, run_ended(&receipt.run_id)).await;
    drop(sse);
    server.stop().await;
    let server = TestServer::start(config(&dir, &fake.url)).await;
    let mut resumed = server.events(&sid, Some(all[0].0)).await;
    let again = resumed.until(WAIT, run_ended(&receipt.run_id)).await;
    // The ended run's deltas may have been pruned from the log (its final `message` event
    // holds the text): every other event comes again, in order.
    let not_deltas = |v: &[(i64, Event)]| -> Vec<i64> {
        v.iter()
            .filter(|(_, e)| !matches!(e, Event::Delta(_)))
            .map(|(id, _)| *id)
            .collect()
    };
    assert_eq!(not_deltas(&again), not_deltas(&all[1..]));
}

#[tokio::test]
async fn data_and_token_survive_a_restart() {
    let fake = FakeProvider::start().await;
    let dir = temp_dir("restart");
    let mut server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "remember me").await;
    server.wait_run_end(&receipt.run_id).await;
    let before = server.detail(&sid).await;
    let token = server.token.clone();
    server.stop().await;

    let server = TestServer::start(config(&dir, &fake.url)).await;
    assert_eq!(
        server.token, token,
        "the generated token is kept in the data dir"
    );
    let after = server.detail(&sid).await;
    assert_eq!(after.messages, before.messages);
    assert_eq!(after.runs, before.runs);
}

#[tokio::test]
async fn a_stop_mid_stream_leaves_the_run_interrupted_with_its_partial_text() {
    let fake = FakeProvider::start().await;
    fake.push(Script::slow(200, Duration::from_millis(20)));
    let dir = temp_dir("interrupt");
    let mut server = TestServer::start(config(&dir, &fake.url)).await;
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "long one").await;
    sse.until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 3))
        .await;
    server.stop().await;

    let server = TestServer::start(config(&dir, &fake.url)).await;
    let run = server.run(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.expect("classified");
    assert_eq!(
        (class.retry_class.clone(), class.retryable),
        (RetryClass::Interrupted, true)
    );
    let reply = server.detail(&sid).await.messages.pop().unwrap();
    assert_eq!(reply.status, Some(MessageStatus::Failed));
    assert!(
        reply.content.starts_with("w0 w1 w2 "),
        "partial text kept: {:?}",
        reply.content
    );
    assert_eq!(reply.retry.unwrap().retry_class, RetryClass::Interrupted);
}

#[tokio::test]
async fn cancel_records_cancelled_and_the_next_prompt_runs() {
    let (fake, server) = setup("cancel").await;
    fake.push(Script::slow(500, Duration::from_millis(10)));
    fake.push(Script::reply(&["after"]));
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let first = server.send(&sid, "long").await;
    let second = server.send(&sid, "next").await;
    sse.until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 2))
        .await;

    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", first.run_id),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert!(
        body.get("retry").is_none(),
        "a cancelled run has no classification"
    );
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", first.run_id),
            json!({}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some(ErrorCode::Conflict.as_str()))
    );

    let next = server.wait_run_end(&second.run_id).await;
    assert_eq!(next.status, RunStatus::Completed);
    let detail = server.detail(&sid).await;
    let stopped = detail
        .messages
        .iter()
        .find(|m| m.run_id.as_ref().map(|id| id.as_str()) == Some(first.run_id.as_str()))
        .unwrap();
    assert_eq!(stopped.status, Some(MessageStatus::Cancelled));
    assert!(
        stopped.content.starts_with("w0 w1 "),
        "partial text kept: {:?}",
        stopped.content
    );
}

#[tokio::test]
async fn a_queued_run_can_be_cancelled_before_it_starts() {
    let (fake, server) = setup("cancel-queued").await;
    fake.push(Script::slow(20, Duration::from_millis(20)));
    let sid = server.create_session().await;
    let first = server.send(&sid, "one").await;
    let second = server.send(&sid, "two").await;
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{}/cancel", second.run_id),
            json!({}),
        )
        .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")));
    server.wait_run_end(&first.run_id).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fake.seen().len(),
        1,
        "the cancelled prompt never reached the provider"
    );
}

#[tokio::test]
async fn streamed_text_is_stored_while_the_reply_streams() {
    let (fake, server) = setup("save").await;
    fake.push(Script::slow(100, Duration::from_millis(20)));
    let sid = server.create_session().await;
    let mut sse = server.events(&sid, None).await;
    let receipt = server.send(&sid, "go").await;
    let seen = sse
        .until(WAIT, |e| matches!(e, Event::Delta(d) if d.seq == 20))
        .await;
    let Event::Delta(d) = &seen.last().unwrap().1 else {
        unreachable!()
    };
    // Saved on the saver's timer (every 250 ms) while the reply still streams.
    let first20: String = (0..20).map(|i| format!("w{i} ")).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stored = server.stored_content(&d.message_id).await;
        if stored.starts_with(&first20) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "stored {stored:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let run = server.run(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Running, "checked mid-stream");
}

#[tokio::test]
async fn a_provider_failure_is_classified_on_the_run_and_the_reply() {
    let (fake, server) = setup("classify").await;
    fake.push(Script::Status {
        code: 503,
        headers: vec![],
        body: json!({"error": {"message": "busy"}}),
    });
    fake.set_default(Script::Status {
        code: 503,
        headers: vec![],
        body: json!({"error": {"message": "busy"}}),
    });
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let detail = server.detail(&sid).await;
    let reply = detail.messages.last().unwrap();
    assert_eq!(
        reply.run_id.as_ref().map(|id| id.as_str()),
        Some(receipt.run_id.as_str())
    );
    let retry = reply.retry.clone().unwrap();
    assert_eq!(
        (retry.retry_class.clone(), retry.retryable),
        (RetryClass::Overloaded, true)
    );
    assert!(reply.error_message.as_deref().unwrap().contains("busy"));
    assert_eq!(detail.session.last_run.unwrap().status, RunStatus::Failed);
}

#[tokio::test]
async fn the_api_key_reaches_the_provider_and_nothing_else() {
    let (fake, server) = setup("secret").await;
    fake.push(Script::Status {
        code: 401,
        headers: vec![],
        body: json!({"error": {"message": "bad key"}}),
    });
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hi").await;
    server.wait_run_end(&receipt.run_id).await;
    assert_eq!(
        fake.seen()[0].authorization.as_deref(),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    for path in [
        "/sessions".to_string(),
        format!("/sessions/{sid}"),
        format!("/runs/{}", receipt.run_id),
        "/config".into(),
    ] {
        let (_, body) = server.get(&path).await;
        assert!(!body.to_string().contains(API_KEY), "{path} leaks the key");
    }
    let page = server
        .http
        .get(format!("{}/", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains(API_KEY));
}

#[tokio::test]
async fn the_page_and_healthz_are_served_and_the_token_link_sets_a_cookie() {
    let (_fake, server) = setup("page").await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let health = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let page = http.get(format!("{}/", server.base)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Mulligan"));

    let link = http
        .get(format!("{}/?token={}", server.base, server.token))
        .send()
        .await
        .unwrap();
    assert_eq!(link.status(), 303);
    let cookie = link.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly"));
    let pair = cookie.split(';').next().unwrap();
    let api = http
        .get(server.url("/sessions"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200, "the cookie authenticates the API");
    let wrong = http
        .get(format!("{}/?token=nope", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let cfg: serde_json::Value = http
        .get(server.url("/config"))
        .header("cookie", pair)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (cfg["tier2_base_ms"].as_u64(), cfg["tier2_cap_ms"].as_u64()),
        (Some(2000), Some(300000))
    );
}
