//! Start-up and request hardening: an operator-chosen token must be long and URL/cookie
//! safe, the data dir is private, cookie-authenticated changes must come from this origin,
//! and the demo endpoint exists only with the demo provider.
use testkit as common;

use app::wire::ErrorCode;
use common::fake::FakeProvider;
use common::{config, temp_dir, TestServer};
use serde_json::json;

/// A release rate the interval cannot hold (past 1000 per second it would be 0 ms: no limit).
#[tokio::test]
async fn a_release_rate_past_1000_per_second_is_refused_at_start() {
    let fake = FakeProvider::start().await;
    let mut c = config(&temp_dir("release-rate"), &fake.url);
    c.release_per_s = 1001;
    let err = match server::start(c, false).await {
        Ok(_) => panic!("1001 per second was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("MULLIGAN_RELEASE_PER_S"), "{err}");
}

#[tokio::test]
async fn a_weak_or_unsafe_operator_token_is_refused_at_start() {
    let fake = FakeProvider::start().await;
    for (token, says) in [
        ("short-secret", "at least 32"),
        (
            "0123456789abcdef0123456789abcdef;x",
            "breaks a URL or a cookie",
        ),
        (
            "0123456789abcdef0123456789abcdef x",
            "breaks a URL or a cookie",
        ),
    ] {
        let mut c = config(&temp_dir("weak-token"), &fake.url);
        c.token = Some(token.into());
        let err = match server::start(c, false).await {
            Ok(_) => panic!("{token:?} was accepted"),
            Err(e) => e,
        };
        assert!(matches!(err, server::StartError::Token(_)), "{err:?}");
        let err = err.to_string();
        assert!(
            err.contains(says) && err.contains("MULLIGAN_TOKEN"),
            "{err}"
        );
    }
    let mut c = config(&temp_dir("good-token"), &fake.url);
    c.token = Some("0123456789abcdef0123456789abcdef".into());
    let mut server = TestServer::start(c).await;
    assert_eq!(server.get("/sessions").await.0, 200);
    server.stop().await;
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_dir_is_created_private() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeProvider::start().await;
    let base = temp_dir("private-dir");
    let mut c = config(&base, &fake.url);
    // A data dir that does not exist yet (the harness makes `base` itself).
    let dir = base.join("nested").join("data");
    c.data_dir = dir.clone();
    let mut server = TestServer::start(c).await;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mode = std::fs::metadata(dir.join("token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    server.stop().await;
}

#[tokio::test]
async fn cookie_requests_that_change_state_must_come_from_this_origin() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("csrf"), &fake.url)).await;
    let cookie = format!("mulligan_token={}", server.token);
    let post = |headers: &[(&str, String)]| {
        let mut req = server
            .http
            .post(server.url("/sessions"))
            .header("cookie", &cookie)
            .json(&json!({"title": "x"}));
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send()
    };
    let cross = post(&[("sec-fetch-site", "cross-site".into())])
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);
    let body: serde_json::Value = cross.json().await.unwrap();
    assert_eq!(body["error"]["code"], ErrorCode::Forbidden.as_str());
    assert_eq!(post(&[]).await.unwrap().status(), 403, "no origin at all");
    let other_port = format!("http://127.0.0.1:{}", 1);
    assert_eq!(
        post(&[("origin", other_port)]).await.unwrap().status(),
        403,
        "another port of the same host is same-site, not same-origin"
    );
    assert_eq!(
        server.get("/sessions").await.1["sessions"],
        json!([]),
        "nothing was made"
    );

    let same = post(&[("sec-fetch-site", "same-origin".into())])
        .await
        .unwrap();
    assert_eq!(same.status(), 201);
    let origin = server.base.clone();
    assert_eq!(post(&[("origin", origin)]).await.unwrap().status(), 201);
    // Reads with the cookie, and the bearer token from anywhere, are unaffected.
    let read = server
        .http
        .get(server.url("/sessions"))
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    let (status, _) = server.post("/sessions", json!({"title": "bearer"})).await;
    assert_eq!(status, 201);
}

/// The status of an anonymous request to the built-in demo endpoint.
async fn anonymous_demo_post(server: &TestServer) -> u16 {
    let body =
        json!({"model": "demo", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let r = server
        .http
        .post(format!("{}/demo/v1/chat/completions", server.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

#[tokio::test]
async fn the_demo_endpoint_exists_only_with_the_demo_provider() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("no-demo"), &fake.url)).await;
    assert_eq!(
        anonymous_demo_post(&server).await,
        404,
        "the demo endpoint answered with the openai provider"
    );

    let mut c = config(&temp_dir("demo"), &fake.url);
    c.provider = server::config::ProviderKind::Demo;
    c.base_url = None;
    let demo = TestServer::start(c).await;
    assert_eq!(anonymous_demo_post(&demo).await, 200);
}

/// Beside a catalogue, the demo endpoint is served only when the catalogue names `demo`,
/// whatever `MULLIGAN_PROVIDER` says (its default is `demo`): else anyone could stream from it.
#[tokio::test]
async fn beside_a_catalogue_the_demo_endpoint_exists_only_when_it_names_demo() {
    let fake = FakeProvider::start().await;
    for (tag, demo, want) in [
        ("catalogue-no-demo", false, 404),
        ("catalogue-demo", true, 200),
    ] {
        let dir = temp_dir(tag);
        let mut providers = json!({"gw": {"kind": "openai", "base_url": fake.url,
                                         "models": [{"id": "fake-model"}]}});
        if demo {
            providers["demo"] = json!({});
        }
        let catalogue = json!({"providers": providers});
        let mut c = common::config_with_catalogue(&dir, &fake.url, &catalogue);
        // The setting at its default.
        c.provider = server::config::ProviderKind::Demo;
        c.base_url = None;
        let server = TestServer::start(c).await;
        assert_eq!(
            anonymous_demo_post(&server).await,
            want,
            "{tag}: an anonymous POST to the demo"
        );
        let (_, models) = server.get("/models").await;
        let listed = models["models"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "demo/demo");
        assert_eq!(listed, demo, "{tag}: {models}");
    }
}

#[tokio::test]
async fn mcp_finds_an_agent_token_s_session_and_refuses_a_wrong_one() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("mcp-agent"), &fake.url)).await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let (status, body) = server.post("/sessions", json!({})).await;
        assert_eq!(status, 201, "{body}");
        tokens.push(body["agent_token"].as_str().unwrap().to_string());
    }
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    let call = |token: String| {
        server
            .http
            .post(format!("{}/mcp", server.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
            .send()
    };
    for t in &tokens {
        assert_eq!(
            call(t.clone()).await.unwrap().status(),
            200,
            "agent token refused"
        );
    }
    let wrong = call(format!("{}x", tokens[0])).await.unwrap();
    assert_eq!(wrong.status(), 401);
    let body: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], ErrorCode::Unauthorized.as_str());
}
