//! Every bad input of CONTRACT §2 answers its status and error shape and changes nothing.
use testkit as common;

use app::wire::ErrorCode;
use common::fake::FakeProvider;
use common::{config, temp_dir, TestServer};
use serde_json::{json, Value};
use std::time::Duration;

async fn snapshot(server: &TestServer, sid: &str) -> (Value, Value) {
    let (_, list) = server.get("/sessions").await;
    let (_, detail) = server
        .get(&format!("/sessions/{sid}?include_superseded=true"))
        .await;
    (list, detail)
}

fn assert_error(status: u16, body: &Value, want_status: u16, want_code: ErrorCode, case: &str) {
    assert_eq!(status, want_status, "{case}: {body}");
    assert_eq!(body["error"]["code"], want_code.as_str(), "{case}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{case}: a human message: {body}"
    );
}

#[tokio::test]
async fn bad_input_gets_the_contract_error_and_changes_nothing() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("bad"), &fake.url)).await;
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hello").await;
    // Settled: the run's end has reached this instance's event stream too (on PostgreSQL
    // events arrive through the shared log, a moment after the state).
    server
        .events(&sid, Some(0))
        .await
        .until(Duration::from_secs(10), common::run_ended(&receipt.run_id))
        .await;
    let before = snapshot(&server, &sid).await;
    let http = &server.http;
    let messages = server.url(&format!("/sessions/{sid}/messages"));

    // No token, wrong token.
    for (case, req) in [
        ("no token", http.get(server.url("/sessions"))),
        (
            "wrong token",
            http.get(server.url("/sessions")).bearer_auth("wrong"),
        ),
        (
            "no token on post",
            http.post(&messages).json(&json!({"content": "x"})),
        ),
        (
            "wrong cookie",
            http.get(server.url("/sessions"))
                .header("cookie", "mulligan_token=nope"),
        ),
    ] {
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        assert_error(
            status,
            &r.json().await.unwrap(),
            401,
            ErrorCode::Unauthorized,
            case,
        );
    }

    let authed = |req: reqwest::RequestBuilder| req.bearer_auth(&server.token);
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, ErrorCode)> = vec![
        (
            "malformed JSON",
            authed(http.post(&messages))
                .header("content-type", "application/json")
                .body("{\"content\": "),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "not JSON",
            authed(http.post(&messages))
                .header("content-type", "text/plain")
                .body("hello"),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "wrong type",
            authed(http.post(&messages)).json(&json!({"content": 5})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "missing content",
            authed(http.post(&messages)).json(&json!({})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "empty content",
            authed(http.post(&messages)).json(&json!({"content": "   \n "})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "oversized content",
            authed(http.post(&messages)).json(&json!({"content": "x".repeat(100_001)})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "2 MiB body",
            authed(http.post(&messages))
                .header("content-type", "application/json")
                .body(format!(
                    "{{\"content\": \"{}\"}}",
                    "y".repeat(2 * 1024 * 1024)
                )),
            413,
            ErrorCode::PayloadTooLarge,
        ),
        (
            "unknown session",
            authed(http.get(server.url("/sessions/s_nope"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "post to unknown session",
            authed(http.post(server.url("/sessions/s_nope/messages")))
                .json(&json!({"content": "x"})),
            404,
            ErrorCode::NotFound,
        ),
        (
            "unknown run",
            authed(http.get(server.url("/runs/r_nope"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "cancel unknown run",
            authed(http.post(server.url(&format!("/sessions/{sid}/runs/r_nope/cancel")))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "events of unknown session",
            authed(http.get(server.url("/sessions/s_nope/events"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "a session id with a space",
            authed(http.get(server.url("/sessions/s%20nope"))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "a run id of 200 bytes",
            authed(http.get(server.url(&format!("/runs/{}", "r".repeat(200))))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "regenerate from a message id with a slash",
            authed(http.post(server.url(&format!("/sessions/{sid}/messages/m%2F1/regenerate"))))
                .json(&json!({})),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "regenerate with an empty if_last_run",
            authed(http.post(server.url(&format!(
                "/sessions/{sid}/messages/{}/regenerate",
                receipt.message_id
            ))))
            .json(&json!({"if_last_run": ""})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow a session id with a quote",
            authed(http.get(server.url("/events?sessions=s%22x:0"))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow no session",
            authed(http.get(server.url("/events"))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow an empty list",
            authed(http.get(server.url("/events?sessions=%20"))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow from a bad event id",
            authed(http.get(server.url(&format!("/events?sessions={sid}:abc")))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow a session twice",
            authed(http.get(server.url(&format!("/events?sessions={sid}:1,{sid}:2")))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow too many sessions",
            authed(http.get(server.url(&format!(
                "/events?sessions={}",
                (0..=app::wire::MAX_FOLLOWED)
                    .map(|i| format!("s_{i}:0"))
                    .collect::<Vec<_>>()
                    .join(",")
            )))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "follow an unknown session",
            authed(http.get(server.url(&format!("/events?sessions={sid}:0,s_nope:0")))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "bad Last-Event-ID",
            authed(http.get(server.url(&format!("/sessions/{sid}/events"))))
                .header("last-event-id", "abc"),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "bad include_superseded",
            authed(http.get(server.url(&format!("/sessions/{sid}?include_superseded=maybe")))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "unknown route",
            authed(http.get(server.url("/nope"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "empty title",
            authed(http.patch(server.url(&format!("/sessions/{sid}"))))
                .json(&json!({"title": " "})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "bad auto_retry",
            authed(http.patch(server.url(&format!("/sessions/{sid}"))))
                .json(&json!({"auto_retry": "sometimes"})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "unknown parent",
            authed(http.post(server.url("/sessions"))).json(&json!({"parent_id": "s_nope"})),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "cancel an ended run",
            authed(
                http.post(server.url(&format!("/sessions/{sid}/runs/{}/cancel", receipt.run_id))),
            ),
            409,
            ErrorCode::Conflict,
        ),
    ];
    for (case, req, want_status, want_code) in cases {
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert_error(status, &body, want_status, want_code, case);
    }

    // Unknown fields are ignored: this one is accepted (and is the only change).
    assert_eq!(
        snapshot(&server, &sid).await,
        before,
        "refused requests changed nothing"
    );
    let r = authed(http.post(&messages))
        .json(&json!({"content": "ok", "extra": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let receipt: app::wire::Receipt = r.json().await.unwrap();
    server.wait_run_end(&receipt.run_id).await;
    assert_eq!(
        fake.seen().len(),
        2,
        "only the accepted prompts reached the provider"
    );
}

/// Wrong methods, unknown routes and unparsable paths or queries: every `/api/v1` refusal is
/// the contract's JSON error, never axum's plain text or an empty body.
#[tokio::test]
async fn every_api_refusal_has_the_contract_shape() {
    let (_fake, server) = common::setup("shape").await;
    let sid = server.create_session().await;
    let http = &server.http;
    let authed = |req: reqwest::RequestBuilder| req.bearer_auth(&server.token);
    let raw = |path: &str| format!("{}{path}", server.base);
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, ErrorCode)> = vec![
        (
            "PUT /sessions",
            authed(http.put(server.url("/sessions"))).json(&json!({})),
            405,
            ErrorCode::InvalidRequest,
        ),
        (
            "DELETE /sessions/:sid",
            authed(http.delete(server.url(&format!("/sessions/{sid}")))),
            405,
            ErrorCode::InvalidRequest,
        ),
        (
            "GET /sessions/:sid/messages",
            authed(http.get(server.url(&format!("/sessions/{sid}/messages")))),
            405,
            ErrorCode::InvalidRequest,
        ),
        (
            "limit not a number",
            authed(http.get(server.url("/sessions?limit=abc"))),
            422,
            ErrorCode::InvalidRequest,
        ),
        (
            "limit twice",
            authed(http.get(server.url("/sessions?limit=1&limit=2"))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "include_superseded twice",
            authed(http.get(server.url(&format!(
                "/sessions/{sid}?include_superseded=true&include_superseded=maybe"
            )))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "last_event_id twice",
            authed(http.get(server.url(&format!(
                "/sessions/{sid}/events?last_event_id=1&last_event_id=2"
            )))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "session id not UTF-8",
            authed(http.get(server.url("/sessions/%FF"))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "run id not UTF-8",
            authed(http.get(server.url("/runs/%FF%FE"))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "message id not UTF-8",
            authed(http.post(server.url(&format!("/sessions/{sid}/messages/%C3%28/regenerate")))),
            400,
            ErrorCode::InvalidRequest,
        ),
        (
            "unknown nested route",
            authed(http.get(server.url(&format!("/sessions/{sid}/nope/deeper")))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "the prefix itself",
            authed(http.get(raw("/api/v1"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "the prefix with a slash",
            authed(http.get(raw("/api/v1/"))),
            404,
            ErrorCode::NotFound,
        ),
        (
            "unknown route, wrong method",
            authed(http.put(server.url("/nope"))),
            404,
            ErrorCode::NotFound,
        ),
    ];
    for (case, req, want_status, want_code) in cases {
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{case}: {status} answered {text:?}, not JSON"));
        assert_error(status, &body, want_status, want_code, case);
    }
    // An allowed method is still named in the 405's `Allow` header.
    let r = authed(http.put(server.url("/sessions")))
        .send()
        .await
        .unwrap();
    let allow = r
        .headers()
        .get("allow")
        .map(|v| v.to_str().unwrap().to_string());
    assert!(
        allow
            .as_deref()
            .is_some_and(|a| a.contains("GET") && a.contains("POST")),
        "{allow:?}"
    );
}

/// A session's title and model are at most 200 characters (after trim), on create and on
/// rename; a longer one is refused and stores nothing.
#[tokio::test]
async fn titles_and_models_are_bounded() {
    let (_fake, server) = common::setup("bounds").await;
    let at = "é".repeat(200);
    let over = "é".repeat(201);
    for (case, body) in [
        ("title", json!({"title": over})),
        ("model", json!({"model": over})),
        ("padded model", json!({"model": format!(" {over} ")})),
    ] {
        let (status, answer) = server.post("/sessions", body).await;
        assert_error(status, &answer, 422, ErrorCode::InvalidRequest, case);
    }
    let (_, list) = server.get("/sessions").await;
    assert_eq!(list["sessions"], json!([]), "nothing was created");

    let (status, created) = server
        .post(
            "/sessions",
            json!({"title": format!(" {at} "), "model": at}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        (created["title"].as_str(), created["model"].as_str()),
        (Some(at.as_str()), Some(at.as_str()))
    );
    let sid = created["id"].as_str().unwrap();
    let path = format!("/sessions/{sid}");
    let (status, answer) = server.patch(&path, json!({"title": over})).await;
    assert_error(
        status,
        &answer,
        422,
        ErrorCode::InvalidRequest,
        "patched title",
    );
    let (status, answer) = server.patch(&path, json!({"title": "short"})).await;
    assert_eq!((status, answer["title"].as_str()), (200, Some("short")));
}
