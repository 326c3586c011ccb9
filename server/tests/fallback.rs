//! Providers, plural (CONTRACT §7) over real HTTP with two fake providers in one catalogue:
//! a step falls back to the next model of its chain before its first delta and never after,
//! skips a cooling model without a request, continues a tool turn without re-running its
//! tool, and `GET /models` lists the catalogue.
use testkit as common;

use app::wire::{FellBack, ModelList, RetryClass, RunDetail, RunStatus, Served};
use common::fake::{FakeProvider, Script};
use common::{config_with_catalogue, temp_dir, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

/// The primary (`a/big`) and the fallback (`b/small`, `b/plain` without tools) providers.
struct Two {
    a: FakeProvider,
    b: FakeProvider,
    server: TestServer,
}

async fn two(tag: &str) -> Two {
    let (a, b) = (FakeProvider::start().await, FakeProvider::start().await);
    let dir = temp_dir(tag);
    let catalogue = json!({
        "providers": {
            "a": {"kind": "openai", "base_url": a.url, "models": [{"id": "big"}]},
            "b": {"kind": "openai", "base_url": b.url,
                  "models": [{"id": "small"}, {"id": "plain", "tools": false}]},
            // The built-in demo, named: its entry is in.
            "demo": {}
        },
        "default_model": "a/big",
        "fallbacks": {"a/big": ["b/small"]}
    });
    let server = TestServer::start(config_with_catalogue(&dir, &a.url, &catalogue)).await;
    Two { a, b, server }
}

fn overloaded() -> Script {
    Script::Status {
        code: 529,
        headers: vec![],
        body: json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}),
    }
}

fn limited_for(secs: u64) -> Script {
    Script::Status {
        code: 429,
        headers: vec![("retry-after", secs.to_string())],
        body: json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
    }
}

async fn detail(server: &TestServer, rid: &(impl std::fmt::Display + ?Sized)) -> RunDetail {
    let (status, body) = server.get(&format!("/runs/{rid}")).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// A turn on a new session of the default model; answers its ended run's detail.
async fn turn(t: &Two, body: Value) -> RunDetail {
    let (status, created) = t.server.post("/sessions", body).await;
    assert_eq!(status, 201, "{created}");
    let sid = created["id"].as_str().unwrap();
    let receipt = t.server.send(sid, "hello").await;
    t.server.wait_run_end(&receipt.run_id).await;
    detail(&t.server, &receipt.run_id).await
}

fn served(step: u32, model: &str, after: &[(&str, RetryClass)]) -> Served {
    Served {
        step,
        model: model.into(),
        after: after
            .iter()
            .map(|(m, c)| FellBack {
                model: m.to_string(),
                retry_class: c.clone(),
            })
            .collect(),
    }
}

#[tokio::test]
async fn an_overloaded_model_hands_the_step_to_the_next_one() {
    let t = two("fallback-529").await;
    t.a.set_default(overloaded());
    t.b.set_default(Script::reply(&["from ", "b"]));
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Completed, "{:?}", d.run);
    assert_eq!(
        d.run.served,
        vec![served(1, "b/small", &[("a/big", RetryClass::Overloaded)])]
    );
    // Tier 1 tried the first model its three times, then the fallback once.
    assert_eq!((t.a.seen().len(), t.b.seen().len()), (3, 1));
    let models: Vec<_> = d.attempts.iter().map(|a| a.model.as_deref()).collect();
    assert_eq!(
        models,
        vec![Some("a/big"), Some("a/big"), Some("a/big"), Some("b/small")]
    );
    assert_eq!(t.b.seen()[0].body["model"], "small");
    // Where instances share the database, the detail says which one ran the turn.
    assert_eq!(
        d.instance.is_some(),
        common::on_postgres(),
        "{:?}",
        d.instance
    );
}

#[tokio::test]
async fn an_advised_wait_past_the_window_falls_back_at_once_and_the_cooldown_sends_nothing() {
    let t = two("fallback-429").await;
    t.a.set_default(limited_for(3000));
    t.b.set_default(Script::reply(&["ok"]));
    let first = turn(&t, json!({})).await;
    assert_eq!(first.run.status, RunStatus::Completed);
    assert_eq!(
        first.run.served,
        vec![served(1, "b/small", &[("a/big", RetryClass::RateLimited)])]
    );
    assert_eq!(
        t.a.seen().len(),
        1,
        "no Tier 1 retry of a wait past its window"
    );
    // The cooldown now holds `a/big`: the next turn goes to `b/small` without a request.
    let second = turn(&t, json!({})).await;
    assert_eq!(second.run.status, RunStatus::Completed);
    assert_eq!(
        second.run.served,
        vec![served(1, "b/small", &[("a/big", RetryClass::RateLimited)])]
    );
    assert_eq!(
        t.a.seen().len(),
        1,
        "a cooling model is skipped without a request"
    );
    assert_eq!(t.b.seen().len(), 2);
    let (_, models) = t.server.get("/models").await;
    let models: ModelList = serde_json::from_value(models).unwrap();
    let big = models.models.iter().find(|m| m.id == "a/big").unwrap();
    assert_eq!(big.status.as_str(), "cooling");
    assert!(big.cooling_until.is_some());
    assert_eq!(big.fallbacks, vec!["b/small".to_string()]);
}

#[tokio::test]
async fn a_cooldown_within_tier1_s_window_is_passed_over_not_slept_out() {
    let t = two("fallback-short-cooldown").await;
    // A session without a chain fails at once (the provider says not to retry) and leaves a
    // 20 s cooldown on `a/big`: short enough that Tier 1 alone would sleep it out.
    t.a.push(Script::Status {
        code: 429,
        headers: vec![
            ("retry-after", "20".into()),
            ("x-should-retry", "false".into()),
        ],
        body: json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
    });
    t.b.set_default(Script::reply(&["ok"]));
    let alone = turn(&t, json!({"fallbacks": []})).await;
    assert_eq!(alone.run.status, RunStatus::Failed);
    let started = std::time::Instant::now();
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Completed);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the fallback answered at once, not after the cooldown: {:?}",
        started.elapsed()
    );
    assert_eq!(
        d.run.served,
        vec![served(1, "b/small", &[("a/big", RetryClass::RateLimited)])]
    );
    assert_eq!(t.a.seen().len(), 1, "no request to the cooling model");
    // The pass-over is on the run's record, as an attempt that was not sent.
    let first = &d.attempts[0];
    assert_eq!(first.model.as_deref(), Some("a/big"));
    assert!(
        first
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("not sent"),
        "{first:?}"
    );
}

#[tokio::test]
async fn no_fallback_after_the_first_delta() {
    // An overloaded error that comes after a text delta, in an OpenAI-compatible stream: a
    // class that falls back before a delta, so only the delta keeps it from doing so.
    let t = two("fallback-after-delta").await;
    t.a.set_default(Script::Frames {
        frames: vec![chunk("half "), overloaded_chunk()],
        every: Duration::from_millis(5),
    });
    t.b.set_default(Script::reply(&["never"]));
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Failed);
    assert_eq!(
        d.run.retry.as_ref().map(|r| r.retry_class.clone()),
        Some(RetryClass::Overloaded)
    );
    assert_eq!(
        t.b.seen().len(),
        0,
        "nothing is sent to the fallback mid-reply"
    );
}

/// The same overloaded error as the stream's first event, before any delta: the step falls
/// back.
#[tokio::test]
async fn an_overloaded_error_before_any_delta_falls_back() {
    let t = two("fallback-error-first").await;
    t.a.set_default(Script::Frames {
        frames: vec![overloaded_chunk()],
        every: Duration::from_millis(5),
    });
    t.b.set_default(Script::reply(&["from ", "b"]));
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Completed, "{:?}", d.run);
    assert_eq!(d.run.served[0].model, "b/small");
    assert_eq!(t.b.seen().len(), 1);
}

/// An OpenAI-compatible chunk of text.
fn chunk(text: &str) -> String {
    let c = json!({"id": "c", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": text}}]});
    format!("data: {c}")
}

/// An OpenAI-compatible error chunk saying the model is overloaded.
fn overloaded_chunk() -> String {
    let e = json!({"error": {"type": "overloaded_error", "message": "Overloaded"}});
    format!("data: {e}")
}

#[tokio::test]
async fn a_tool_turn_continues_on_the_fallback_without_running_its_tool_again() {
    let t = two("fallback-tool").await;
    // Step 1 on `a/big` asks for a tool; step 2 finds `a/big` overloaded.
    t.a.push(Script::call("", "c1", "mulligan__list_sessions", json!({})));
    t.a.set_default(overloaded());
    t.b.set_default(Script::reply(&["done"]));
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Completed, "{:?}", d.run);
    assert_eq!((d.run.steps, d.run.tools_executed), (2, 1));
    let tools: Vec<_> = d
        .tool_calls
        .iter()
        .map(|c| (c.step, c.tool.as_str()))
        .collect();
    assert_eq!(
        tools,
        vec![(1, "list_sessions")],
        "the run's detail has its call"
    );
    assert_eq!(
        d.run.served,
        vec![
            served(1, "a/big", &[]),
            served(2, "b/small", &[("a/big", RetryClass::Overloaded)])
        ]
    );
    // The fallback got the recorded call and its result.
    let sent = &t.b.seen()[0].body["messages"];
    let roles: Vec<_> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        roles.ends_with(&["assistant".into(), "tool".into()]),
        "{roles:?}"
    );
}

#[tokio::test]
async fn an_exhausted_chain_fails_as_its_first_model_did() {
    let t = two("fallback-exhausted").await;
    t.a.set_default(overloaded());
    t.b.set_default(Script::unavailable());
    let d = turn(&t, json!({})).await;
    assert_eq!(d.run.status, RunStatus::Failed);
    let retry = d.run.retry.unwrap();
    assert_eq!(retry.retry_class, RetryClass::Overloaded);
    assert!(retry.retryable);
    assert_eq!(
        retry.retry_after_until, None,
        "one model may be asked again at once"
    );
    assert_eq!((t.a.seen().len(), t.b.seen().len()), (3, 3));
}

#[tokio::test]
async fn a_session_chain_overrides_the_catalogue_and_a_tools_off_model_gets_none() {
    let t = two("fallback-session").await;
    t.a.set_default(overloaded());
    t.b.set_default(Script::reply(&["plain"]));
    let d = turn(&t, json!({"fallbacks": ["b/plain"]})).await;
    assert_eq!(
        d.run.served,
        vec![served(1, "b/plain", &[("a/big", RetryClass::Overloaded)])]
    );
    let body = &t.b.seen()[0].body;
    assert_eq!(body["model"], "plain");
    assert!(
        body.get("tools").is_none(),
        "a tools: false model is sent no tools: {body}"
    );
    // The first model was sent the session's tools.
    assert!(t.a.seen()[0].body.get("tools").is_some());
    // No chain at all: the step fails on the first model.
    let d = turn(&t, json!({"fallbacks": []})).await;
    assert_eq!(d.run.status, RunStatus::Failed);
    assert!(d.run.served.is_empty());
}

#[tokio::test]
async fn a_model_whose_provider_refuses_tools_is_sent_none_from_then_on() {
    let t = two("fallback-tools-refused").await;
    t.b.push(Script::Status {
        code: 400,
        headers: vec![],
        body: json!({"error": {"message": "registry.ollama.ai/library/small does not support tools"}}),
    });
    t.b.set_default(Script::reply(&["no tools"]));
    let d = turn(&t, json!({"model": "b/small"})).await;
    assert_eq!(d.run.status, RunStatus::Completed, "{:?}", d.run);
    let seen = t.b.seen();
    assert_eq!(
        seen.len(),
        2,
        "the refused request, then the same one without tools"
    );
    assert!(seen[0].body.get("tools").is_some());
    assert!(seen[1].body.get("tools").is_none(), "{}", seen[1].body);
    let (_, models) = t.server.get("/models").await;
    let models: ModelList = serde_json::from_value(models).unwrap();
    let small = models.models.iter().find(|m| m.id == "b/small").unwrap();
    assert!(!small.tools, "remembered: the page says tools are off");
    // The next turn asks without tools at once.
    turn(&t, json!({"model": "b/small"})).await;
    assert!(t.b.seen()[2].body.get("tools").is_none());
}

#[tokio::test]
async fn models_the_catalogue_lacks_are_refused_with_what_to_write() {
    let t = two("fallback-bad-input").await;
    for (body, status_wanted, says) in [
        (json!({"model": "c/big"}), 422, "GET /models"),
        (json!({"model": "a/nope"}), 422, "has no model"),
        (json!({"fallbacks": ["b/small", "zz"]}), 422, "fallbacks"),
        (json!({"fallbacks": "b/small"}), 422, "expected a sequence"),
    ] {
        let (status, err) = t.server.post("/sessions", body.clone()).await;
        assert_eq!(status, status_wanted, "{body} → {err}");
        assert_eq!(err["error"]["code"], "invalid_request", "{err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(says),
            "{err}"
        );
    }
    let (_, list) = t.server.get("/sessions").await;
    assert_eq!(
        list["sessions"].as_array().map(Vec::len),
        Some(0),
        "nothing created"
    );
    let sid = t.server.create_session().await;
    let (status, err) = t
        .server
        .patch(&format!("/sessions/{sid}"), json!({"fallbacks": ["x/y"]}))
        .await;
    assert_eq!(status, 422, "{err}");
    let (status, s) = t
        .server
        .patch(&format!("/sessions/{sid}"), json!({"fallbacks": ["small"]}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["fallbacks"], json!(["small"]));
    let (_, models) = t.server.get("/models").await;
    let models: ModelList = serde_json::from_value(models).unwrap();
    assert_eq!(models.default_model, "a/big");
    let ids: Vec<_> = models.models.iter().map(|m| m.id.as_str()).collect();
    assert!(
        ids.contains(&"b/plain") && ids.contains(&"demo/demo"),
        "{ids:?}"
    );
    let plain = models.models.iter().find(|m| m.id == "b/plain").unwrap();
    assert!(!plain.tools);
}

/// A model that just failed a step is out for the next turn too (CONTRACT §7): with `a/big`
/// answering 529 to everything, the first turn tries it three times and falls back; the
/// next turns go straight to `b/small` until the outage's probe time, when one step probes
/// `a/big` (failing: out for longer); once `a/big` answers again, a probe ends the outage
/// and turns go to it first again.
#[tokio::test]
async fn a_model_that_failed_a_step_is_passed_over_until_one_step_probes_it() {
    let (a, b) = (FakeProvider::start().await, FakeProvider::start().await);
    let dir = temp_dir("fallback-outage");
    let catalogue = json!({
        "providers": {
            "a": {"kind": "openai", "base_url": a.url, "models": [{"id": "big"}]},
            "b": {"kind": "openai", "base_url": b.url, "models": [{"id": "small"}]},
        },
        "default_model": "a/big",
        "fallbacks": {"a/big": ["b/small"]}
    });
    let mut c = config_with_catalogue(&dir, &a.url, &catalogue);
    // The outage's probe backoff: 1.5 s, then 3 s.
    c.tier2_base_ms = 1500;
    let t = Two {
        a,
        b,
        server: TestServer::start(c).await,
    };
    t.a.set_default(overloaded());
    t.b.set_default(Script::reply(&["from b"]));
    let first = turn(&t, json!({})).await;
    let opened_at = std::time::Instant::now();
    assert_eq!(first.run.status, RunStatus::Completed);
    assert_eq!(t.a.seen().len(), 3, "Tier 1's three tries");

    // Out for the next turn: straight to the fallback, no request to `a/big`.
    let second = turn(&t, json!({})).await;
    assert!(
        opened_at.elapsed() < Duration::from_millis(800),
        "within the rest"
    );
    assert_eq!(second.run.status, RunStatus::Completed);
    assert_eq!(
        t.a.seen().len(),
        3,
        "the second turn asked a/big: {:?}",
        second.run.served
    );
    assert_eq!(second.run.served[0].model, "b/small");
    assert_eq!(second.run.served[0].after[0].model, "a/big");

    // Due: one step probes it (still failing: Tier 1's tries, then the fallback again).
    tokio::time::sleep(Duration::from_millis(1600).saturating_sub(opened_at.elapsed())).await;
    let probe = turn(&t, json!({})).await;
    assert_eq!(probe.run.status, RunStatus::Completed);
    assert_eq!(t.a.seen().len(), 6, "the probe's three tries");
    let reprobed_at = std::time::Instant::now();
    let rested = turn(&t, json!({})).await;
    assert_eq!(rested.run.status, RunStatus::Completed);
    assert_eq!(t.a.seen().len(), 6, "out again after the failed probe");

    // `a/big` is back: the next probe finds it, and turns go to it first again.
    t.a.set_default(Script::reply(&["from a"]));
    tokio::time::sleep(Duration::from_millis(3100).saturating_sub(reprobed_at.elapsed())).await;
    let back = turn(&t, json!({})).await;
    assert_eq!(back.run.served[0].model, "a/big", "{:?}", back.run.served);
    assert!(back.run.served[0].after.is_empty());
    let after = turn(&t, json!({})).await;
    assert_eq!(after.run.served[0].model, "a/big");
    assert_eq!(t.a.seen().len(), 8);
}
