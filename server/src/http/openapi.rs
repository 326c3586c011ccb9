//! The OpenAPI 3.1 document of `/api/v1`, built from the endpoint table in `app::api` and the
//! wire types' schemas: served at `GET /api/v1/openapi.json`, kept in `docs/openapi.json`.
mod build;

use app::api;
use build::{Doc, JSON};
use utoipa::openapi::{ContentBuilder, ObjectBuilder, OpenApi, ResponseBuilder, Type};

/// The document, pretty-printed with a final newline: what `docs/openapi.json` holds.
pub fn json() -> String {
    let mut out = document()
        .to_pretty_json()
        .expect("an OpenAPI document always serializes");
    out.push('\n');
    out
}

/// The document: every endpoint of the table, in the table's words. Maps are sorted
/// (`BTreeMap`), so the same table gives the same bytes.
pub fn document() -> OpenApi {
    let mut doc = Doc::default();
    macro_rules! endpoint {
        ($name:ident, $status:literal, $summary:literal $(, $query:expr)* $(,)?) => {
            doc.endpoint(&api::$name, stringify!($name), $status, $summary, &[$($query),*])
        };
    }
    endpoint!(
        CREATE_SESSION,
        201,
        "Create a session; its agent token is shown this once"
    );
    endpoint!(
        LIST_SESSIONS,
        200,
        "List sessions, newest first, a page at a time (`next_before` asks for the next)",
        ("limit", "How many, at most: 1 to 1000 (default 100)"),
        (
            "before",
            "The next page: the previous page's `next_before` (its last session id)"
        ),
        (
            "q",
            "Words of the title: only sessions whose title holds each of them (any case)"
        ),
    );
    endpoint!(
        SESSION,
        200,
        "One session with its messages and runs",
        (
            "include_superseded",
            "`true` to include superseded messages"
        ),
    );
    endpoint!(
        PATCH_SESSION,
        200,
        "Change a session's title, retry setting, tools, fallbacks or approval mode; forget remembered tool grants"
    );
    endpoint!(
        POST_MESSAGE,
        202,
        "Post an operator message and start (or queue) a run"
    );
    endpoint!(RELEASE, 200, "Let prompts held behind a failed turn go on");
    endpoint!(RETRY, 200, "Retry the failed last turn now");
    endpoint!(
        CANCEL_WAITING_RETRY,
        200,
        "Cancel a background waiting retry"
    );
    endpoint!(
        REGENERATE,
        202,
        "Supersede everything after an operator message and run again from it"
    );
    endpoint!(CANCEL_RUN, 200, "Stop a queued or running run");
    endpoint!(
        DISMISS_RETRY,
        200,
        "Cancel Tier 2 for a failed run: nothing arms it again"
    );
    endpoint!(RUN, 200, "One run with its Tier 1 attempts");
    endpoint!(
        DECIDE_TOOL_CALL,
        200,
        "Decide a tool call waiting for approval (operator only; an agent token is 403): 409 approval.decided or approval.not_waiting"
    );
    endpoint!(
        APPROVALS,
        200,
        "The tool calls waiting for approval, oldest first, a page at a time (`next_before` asks for the next; operator only)",
        ("limit", "How many, at most: 1 to 1000 (default 100)"),
        (
            "before",
            "The next page: the previous page's `next_before` (its last call id)"
        ),
    );
    endpoint!(
        PROVIDERS,
        200,
        "The provider cooldowns in force (no secrets) and each model's outage"
    );
    endpoint!(
        MODELS,
        200,
        "The catalogue's models, their status and fallback chains"
    );
    endpoint!(
        CLEAR_COOLDOWN,
        200,
        "End a provider cooldown; answers the ones still in force"
    );
    endpoint!(CONFIG, 200, "The Tier 2 policy for the browser");
    endpoint!(TOOLS, 200, "The tool sources, their status and their tools");
    doc.events();
    doc.route(
        api::OPENAPI,
        "openapi",
        "This document",
        ResponseBuilder::new()
            .description("The OpenAPI 3.1 document")
            .content(
                JSON,
                ContentBuilder::new()
                    .schema(Some(ObjectBuilder::new().schema_type(Type::Object)))
                    .build(),
            )
            .build(),
        Vec::new(),
    );
    doc.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_name_has_its_data_schema() {
        let names: Vec<&str> = build::event_data(&mut Vec::new())
            .into_iter()
            .map(|(n, _, _)| n)
            .collect();
        assert_eq!(names, app::wire::EVENT_NAMES);
    }

    /// A field typed by an alias (`Millis`) is named after the aliased type unless it says
    /// `#[cfg_attr(feature = "openapi", schema(value_type = i64))]`.
    #[test]
    fn no_component_is_a_primitive() {
        let doc = serde_json::to_value(document()).unwrap();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in schemas.keys() {
            assert!(
                name.starts_with(|c: char| c.is_ascii_uppercase()),
                "component {name:?}: give the field `schema(value_type = …)`"
            );
        }
    }

    #[test]
    fn every_reference_names_a_component() {
        let doc = serde_json::to_value(document()).unwrap();
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let pointer = r.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{r} names nothing");
        }
    }

    fn collect_refs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(serde_json::Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|v| collect_refs(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }
}
