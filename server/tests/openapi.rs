//! The OpenAPI document: `docs/openapi.json` is the generated one, it lists every route the
//! router mounts under `/api/v1`, and the server serves it. `MULLIGAN_BLESS=1` rewrites the
//! committed file.
use testkit as common;

use server::http::openapi;
use std::path::PathBuf;

const REGENERATE: &str = "MULLIGAN_BLESS=1 cargo test -p server --test openapi";

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = openapi::json();
    let path = committed_path();
    if std::env::var_os("MULLIGAN_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated).expect("docs/openapi.json is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/openapi.json differs from the generated document (first at line {}: \
             committed {:?}, generated {:?}); regenerate it with `{REGENERATE}` and commit it",
            first + 1,
            committed.lines().nth(first).unwrap_or("<end>"),
            generated.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

#[test]
fn every_mounted_route_is_documented_and_nothing_else() {
    let doc = serde_json::to_value(openapi::document()).unwrap();
    let mut mounted: Vec<(String, String)> = server::http::api_route_table()
        .into_iter()
        .map(|r| (r.path.to_string(), r.method.as_str().to_ascii_lowercase()))
        .collect();
    let mut documented: Vec<(String, String)> = doc["paths"]
        .as_object()
        .expect("the document has paths")
        .iter()
        .flat_map(|(path, item)| {
            let item = item.as_object().expect("a path item is an object");
            ["get", "post", "patch", "delete", "put"]
                .into_iter()
                .filter(|m| item.contains_key(*m))
                .map(move |m| (path.clone(), m.to_string()))
        })
        .collect();
    mounted.sort();
    documented.sort();
    assert_eq!(documented, mounted);
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(doc["servers"][0]["url"], app::api::PREFIX);
}

#[tokio::test]
async fn the_server_serves_the_document_behind_the_token() {
    let (_fake, server) = common::setup("openapi").await;
    let (status, served) = server.get(app::api::OPENAPI.path).await;
    assert_eq!(status, 200);
    let generated: serde_json::Value = serde_json::from_str(&openapi::json()).unwrap();
    assert_eq!(served, generated);
    let anonymous = reqwest::get(server.url(app::api::OPENAPI.path))
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}
