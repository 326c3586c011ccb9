//! The page the server renders: the signed-in operator's session list and the open session
//! are in the first HTML (no script needed to see them); signed out, neither is.
use testkit as common;

use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};

/// The page at `path`, with the operator's cookie when `signed_in`: its status and HTML.
async fn page(server: &TestServer, path: &str, signed_in: bool) -> (u16, String) {
    let mut req = server.http.get(format!("{}{path}", server.base));
    if signed_in {
        req = req.header("cookie", format!("mulligan_token={}", server.token));
    }
    let r = req.send().await.unwrap();
    // It shows the operator's sessions: no other site may frame it.
    assert_eq!(r.headers()["x-frame-options"], "DENY", "{path}");
    assert_eq!(
        r.headers()["content-security-policy"],
        "frame-ancestors 'none'",
        "{path}"
    );
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The HTML without its scripts: what a reader with JavaScript off sees.
fn visible(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find("<script") {
        out.push_str(&rest[..open]);
        rest = rest[open..]
            .find("</script>")
            .map_or("", |close| &rest[open + close + "</script>".len()..]);
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn the_first_html_holds_the_list_and_the_open_session() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("page"), &fake.url)).await;
    let mut titles = Vec::new();
    let mut last = String::new();
    for i in 0..5 {
        let title = format!("rendered {i} </script><b>bold</b>");
        let (status, body) = server
            .post("/sessions", serde_json::json!({ "title": title }))
            .await;
        assert_eq!(status, 201, "{body}");
        last = body["id"].as_str().unwrap().to_string();
        titles.push(title);
    }
    fake.push(Script::reply(&["the server ", "wrote this reply"]));
    let r = server.send(&last, "a question for the page").await;
    server.wait_run_end(&r.run_id).await;

    let (status, html) = page(&server, "/", true).await;
    assert_eq!(status, 200);
    let shown = visible(&html);
    for t in &titles {
        let escaped = t.replace('<', "&lt;").replace('>', "&gt;");
        assert!(shown.contains(&escaped), "{t:?} is in the list: {shown}");
    }
    assert!(!shown.contains("No sessions yet."), "{shown}");
    assert!(!shown.contains("<b>bold</b>"), "a title's markup is text");
    // The data the page hydrates from carries no closing tag either.
    assert!(!html.contains("</script><b>"), "{html}");

    let (status, html) = page(&server, &format!("/s/{last}"), true).await;
    assert_eq!(status, 200);
    let shown = visible(&html);
    assert!(shown.contains("a question for the page"), "{shown}");
    assert!(shown.contains("the server wrote this reply"), "{shown}");
    assert!(
        shown.contains(&format!(r#"<a href="/s/{last}" aria-current="page""#)),
        "the open session is marked in the list: {shown}"
    );

    // Signed out: how to sign in, and nothing of the operator's.
    let (status, html) = page(&server, &format!("/s/{last}"), false).await;
    assert_eq!(status, 200);
    let shown = visible(&html);
    assert!(shown.contains("Not signed in"), "{shown}");
    assert!(!shown.contains("rendered 0"), "{shown}");
    assert!(!shown.contains("a question for the page"), "{shown}");
    assert!(
        !html.contains("a question for the page"),
        "nor in the page's data"
    );

    // A session that is not there says so, in the page.
    let (_, html) = page(&server, "/s/s_0000", true).await;
    let (_, body) = server.get("/sessions/s_0000").await;
    let message = body["error"]["message"].as_str().unwrap().to_string();
    assert!(visible(&html).contains(&message), "{message:?} in {html}");
}
