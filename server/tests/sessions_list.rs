//! `GET /sessions?limit=&before=`: newest first, in pages, each session with its last run.
use testkit as common;

use app::wire::ErrorCode;
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::Value;

async fn ids(server: &TestServer, query: &str) -> Vec<String> {
    let (status, body) = server.get(&format!("/sessions{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn sessions_are_listed_newest_first_in_pages() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("pages"), &fake.url)).await;
    let mut made = Vec::new();
    for _ in 0..7 {
        made.push(server.create_session().await);
    }
    made.reverse(); // newest first
                    // The newest has a run: the list carries it as its last run.
    fake.push(Script::reply(&["hi"]));
    let r = server.send(&made[0], "hello").await;
    server.wait_run_end(&r.run_id).await;

    assert_eq!(ids(&server, "").await, made, "no limit: all of them");
    let mut paged = Vec::new();
    let mut query = "?limit=3".to_string();
    loop {
        let page = ids(&server, &query).await;
        assert!(page.len() <= 3);
        paged.extend(page.clone());
        match page.last() {
            Some(last) if page.len() == 3 => query = format!("?limit=3&before={last}"),
            _ => break,
        }
    }
    assert_eq!(paged, made, "the pages join up to the whole list, in order");

    let (_, body) = server.get("/sessions?limit=1").await;
    let last_run = &body["sessions"][0]["last_run"];
    assert_eq!(last_run["id"], Value::from(r.run_id.to_string()), "{body}");
    assert_eq!(last_run["status"], "completed");

    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?limit=-1",
        "?before=s_nope",
    ] {
        let (status, body) = server.get(&format!("/sessions{bad}")).await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert_eq!(
            body["error"]["code"],
            ErrorCode::InvalidRequest.as_str(),
            "{bad}: {body}"
        );
    }
}
