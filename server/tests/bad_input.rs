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
