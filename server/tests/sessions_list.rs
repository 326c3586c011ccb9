//! `GET /sessions?limit=&before=&q=`: newest first, 100 to a page by default, `next_before`
//! to the next, a search over titles; each session with its last run.
use testkit as common;

use app::wire::ErrorCode;
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::Value;

async fn ids(server: &TestServer, query: &str) -> Vec<String> {
    let (status, body) = server.get(&format!("/sessions{query}")).await;
    assert_eq!(status, 200, "{query}: {body}");
    ids_in(&body)
}

/// The ids of a list's sessions, in order.
fn ids_in(body: &Value) -> Vec<String> {
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
        "?q=a%20b%20c%20d%20e%20f%20g%20h%20i",
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

async fn titled(server: &TestServer, title: &str) -> String {
    let (status, body) = server
        .post("/sessions", serde_json::json!({"title": title}))
        .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_page_is_100_sessions_and_next_before_leads_to_the_rest() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("pages-100"), &fake.url)).await;
    let mut made = Vec::new();
    for _ in 0..103 {
        made.push(server.create_session().await);
    }
    made.reverse();
    let (status, first) = server.get("/sessions").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids_in(&first), made[..100], "the newest 100");
    assert_eq!(first["next_before"], Value::from(made[99].clone()));
    let (_, rest) = server.get(&format!("/sessions?before={}", made[99])).await;
    assert_eq!(ids_in(&rest), made[100..]);
    assert!(rest.get("next_before").is_none(), "the last page: {rest}");
    // A page that ends exactly at the last session says nothing follows.
    let (_, exact) = server.get("/sessions?limit=103").await;
    assert_eq!(ids_in(&exact).len(), 103);
    assert!(exact.get("next_before").is_none(), "{exact}");
}

#[tokio::test]
async fn q_keeps_the_sessions_whose_title_holds_every_word() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("search"), &fake.url)).await;
    let fix = titled(&server, "Deploy fix for the API").await;
    let deploy = titled(&server, "deploy docs").await;
    let percent = titled(&server, "100% coverage_plan").await;
    let _other = titled(&server, "Lunch").await;
    let server = &server;
    let search = |q: &'static str| async move { ids(server, &format!("?q={q}")).await };
    assert_eq!(search("deploy").await, [deploy.as_str(), fix.as_str()]);
    assert_eq!(
        search("DEPLOY%20api").await,
        [fix.as_str()],
        "every word, any case"
    );
    assert_eq!(search("api%20deploy").await, [fix.as_str()], "in any order");
    // `%` and `_` are the title's characters, not patterns.
    assert_eq!(search("100%25").await, [percent.as_str()]);
    assert_eq!(search("e_p").await, [percent.as_str()]);
    assert_eq!(search("%25").await, [percent]);
    assert!(
        search("_").await.len() == 1,
        "only the title with an underscore"
    );
    assert!(search("nothing").await.is_empty());
    // A search pages like the list.
    let (_, page) = server.get("/sessions?q=deploy&limit=1").await;
    assert_eq!(page["next_before"], Value::from(deploy.clone()));
    let (_, next) = server
        .get(&format!("/sessions?q=deploy&limit=1&before={deploy}"))
        .await;
    assert_eq!(next["sessions"][0]["id"], Value::from(fix));
    let long = "x".repeat(201);
    let (status, body) = server.get(&format!("/sessions?q={long}")).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], ErrorCode::InvalidRequest.as_str());
}
