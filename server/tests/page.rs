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
    let policy = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    let status = r.status().as_u16();
    let html = r.text().await.unwrap();
    scripts_only_by_nonce(&policy, &html, path);
    (status, html)
}

/// The nonce of a page's Content-Security-Policy, after checking that the policy lets only
/// this server's scripts and the inline scripts carrying the nonce run (and WebAssembly be
/// instantiated), allows no plugin and no `<base>`, and forbids framing; and that every
/// `<script>` of the HTML carries that nonce and no element has an inline event handler.
fn scripts_only_by_nonce(policy: &str, html: &str, path: &str) -> String {
    let directives: Vec<&str> = policy.split(';').map(str::trim).collect();
    let script_src = directives
        .iter()
        .find_map(|d| d.strip_prefix("script-src "))
        .unwrap_or_else(|| panic!("{path}: no script-src in {policy:?}"));
    let sources: Vec<&str> = script_src.split_whitespace().collect();
    let nonce = sources
        .iter()
        .find_map(|s| s.strip_prefix("'nonce-")?.strip_suffix('\''))
        .unwrap_or_else(|| panic!("{path}: no nonce in {policy:?}"));
    assert!(nonce.len() >= 16, "{path}: a short nonce {nonce:?}");
    let mut rest: Vec<&str> = sources
        .iter()
        .copied()
        .filter(|s| !s.starts_with("'nonce-"))
        .collect();
    rest.sort_unstable();
    assert_eq!(rest, ["'self'", "'wasm-unsafe-eval'"], "{path}: {policy:?}");
    for d in [
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(directives.contains(&d), "{path}: {d} in {policy:?}");
    }
    let tags: Vec<&str> = html
        .match_indices("<script")
        .map(|(at, _)| &html[at..at + html[at..].find('>').unwrap_or(0)])
        .collect();
    for tag in &tags {
        assert!(
            tag.contains(&format!(" nonce=\"{nonce}\"")),
            "{path}: a script without the nonce: {tag}"
        );
    }
    // Attributes like onclick= are inline script no nonce can allow.
    let lower = html.to_ascii_lowercase();
    let handler = lower.match_indices(" on").find(|(at, _)| {
        let name: String = lower[at + 1..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase())
            .collect();
        name.len() > 2 && lower[at + 1 + name.len()..].starts_with('=')
    });
    assert!(
        handler.is_none(),
        "{path}: an inline event handler: {}",
        handler.map_or("", |(at, _)| &html[at..(at + 60).min(html.len())])
    );
    nonce.to_string()
}

/// Every page, the one of an unknown path too, has that policy, and each response its own
/// nonce.
#[tokio::test]
async fn a_page_runs_only_its_own_scripts_by_a_nonce_per_response() {
    let fake = FakeProvider::start().await;
    let server = TestServer::start(config(&temp_dir("page-csp"), &fake.url)).await;
    let sid = server.create_session().await;
    let mut nonces = Vec::new();
    for path in [
        "/".to_string(),
        format!("/s/{sid}"),
        "/".into(),
        "/no/such/page".into(),
    ] {
        let r = server
            .http
            .get(format!("{}{path}", server.base))
            .header("cookie", format!("mulligan_token={}", server.token))
            .send()
            .await
            .unwrap();
        let policy = r
            .headers()
            .get("content-security-policy")
            .unwrap_or_else(|| panic!("{path}: no policy"))
            .to_str()
            .unwrap()
            .to_string();
        let html = r.text().await.unwrap();
        assert!(
            html.contains("<script"),
            "{path}: the page has scripts: {html}"
        );
        nonces.push(scripts_only_by_nonce(&policy, &html, &path));
    }
    let mut distinct = nonces.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        nonces.len(),
        "one nonce per response: {nonces:?}"
    );
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
    // The tab's title is the session's, its markup as text.
    assert!(
        html.contains(
            "<title>rendered 4 &lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; — Mulligan</title>"
        ),
        "{html}"
    );

    // Signed out: how to sign in, and nothing of the operator's.
    let (status, html) = page(&server, &format!("/s/{last}"), false).await;
    assert_eq!(status, 200);
    let shown = visible(&html);
    assert!(shown.contains("Not signed in"), "{shown}");
    // Nothing of the operator's anywhere in the HTML, shown or in the page's data: no
    // title, prompt, reply, agent token hash or the operator's token.
    for i in 0..titles.len() {
        assert!(!html.contains(&format!("rendered {i}")), "a title: {html}");
    }
    for theirs in [
        "a question for the page",
        "the server wrote this reply",
        "wrote this reply",
        server.token.as_str(),
    ] {
        assert!(
            !html.contains(theirs),
            "{theirs:?} is in the signed-out page: {html}"
        );
    }
    assert!(!html.contains("agent_token"), "{html}");

    // A session that is not there says so, in the page.
    let (_, html) = page(&server, "/s/s_0000", true).await;
    let (_, body) = server.get("/sessions/s_0000").await;
    let message = body["error"]["message"].as_str().unwrap().to_string();
    assert!(visible(&html).contains(&message), "{message:?} in {html}");
}
