//! The built-in tools' inputs and schemas, without an engine.
use super::*;
use app::wire::ErrorCode;

fn parse<T: BuiltinTool>(args: Value) -> Result<T> {
    input::<T>(args)
}

#[test]
fn inputs_parse_into_their_types_or_say_what_is_wrong() {
    let list = parse::<ListSessions>(Value::Null).unwrap();
    assert_eq!((list.limit, list.before, list.q), (None, None, None));
    let send = parse::<SendMessage>(json!({"session": "s", "content": "hi"})).unwrap();
    assert_eq!((send.session.as_str(), send.content.as_str()), ("s", "hi"));
    let missing = parse::<SendMessage>(json!({"session": "s"})).unwrap_err();
    assert_eq!(missing.code(), ErrorCode::InvalidRequest);
    assert!(missing.message.contains("content"), "{}", missing.message);
    let wrong = parse::<RetrySession>(json!({"session": 7})).unwrap_err();
    assert!(wrong.message.contains("retry_session"), "{}", wrong.message);
    let not_an_id = parse::<StopSession>(json!({"session": "a b"})).unwrap_err();
    assert!(
        not_an_id.message.contains("an id holds only"),
        "{}",
        not_an_id.message
    );
    let limit = parse::<ListSessions>(json!({"limit": -1})).unwrap_err();
    assert_eq!(limit.code(), ErrorCode::InvalidRequest);
    assert!(parse::<ListModels>(Value::Null).is_ok());
}

#[tokio::test]
async fn a_tool_that_is_not_built_in_is_not_found() {
    struct NoCommands;
    impl Commands for NoCommands {
        async fn is_descendant(&self, _: &SessionId, _: &SessionId) -> Result<bool> {
            unreachable!()
        }
        async fn sessions(
            &self,
            _: Option<u64>,
            _: Option<String>,
            _: Option<&str>,
            _: Option<&SessionId>,
        ) -> Result<app::wire::SessionList> {
            unreachable!()
        }
        async fn post_message(&self, _: &SessionId, _: &str) -> Result<Receipt> {
            unreachable!()
        }
        async fn retry(&self, _: &SessionId, _: Option<&str>) -> Result<RetryReceipt> {
            unreachable!()
        }
        async fn stop(&self, _: &SessionId) -> Result<Run> {
            unreachable!()
        }
        async fn model_list(&self) -> ModelList {
            unreachable!()
        }
        async fn rename(&self, _: &SessionId, _: &str) -> Result<app::wire::Session> {
            unreachable!()
        }
        async fn approvals(&self) -> Result<app::wire::Approvals> {
            Ok(Default::default())
        }
        async fn decide(
            &self,
            _: &app::wire::RunId,
            _: &app::wire::ToolCallId,
            _: app::wire::Decision,
            _: Option<String>,
        ) -> Result<app::wire::ToolCall> {
            unreachable!()
        }
    }
    let unknown = run(&NoCommands, &Caller::Operator, "rm_rf", json!({}))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::NotFound);
    // Dispatch is by the input's type: the operator's tool answers, an agent is refused.
    let listed = run(
        &NoCommands,
        &Caller::Operator,
        "list_approvals",
        Value::Null,
    )
    .await
    .unwrap();
    assert_eq!(listed, json!({"approvals": []}));
    let agent = Caller::Agent(SessionId::new("s"));
    let refused = run(&NoCommands, &agent, "list_approvals", Value::Null)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ErrorCode::Forbidden);
}

/// The schemas come from the input types: their fields, their bounds and their doc
/// comments, the ids as the strings `parse` takes; and an agent is offered no operator tool.
#[test]
fn schemas_are_the_input_types() {
    let tools = tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "list_sessions",
            "send_message",
            "retry_session",
            "stop_session",
            "list_models",
            "rename_session",
            "list_approvals",
            "decide_tool_call"
        ]
    );
    let send = tools.iter().find(|t| t.name == "send_message").unwrap();
    let schema = Value::Object((*send.input_schema).clone());
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["session", "content"]));
    assert_eq!(schema["properties"]["content"]["minLength"], 1);
    assert_eq!(
        schema["properties"]["content"]["maxLength"],
        app::wire::MAX_CONTENT_CHARS
    );
    assert_eq!(
        schema["properties"]["content"]["description"],
        "The message."
    );
    assert_eq!(schema["properties"]["session"]["type"], "string");
    assert_eq!(
        schema["properties"]["session"]["maxLength"],
        app::wire::MAX_ID_BYTES
    );
    let list = tools.iter().find(|t| t.name == "list_sessions").unwrap();
    let limit = &list.input_schema["properties"]["limit"];
    assert_eq!(
        (limit["minimum"].clone(), limit["maximum"].clone()),
        (json!(1), json!(1000))
    );
    let decide = tools.iter().find(|t| t.name == "decide_tool_call").unwrap();
    assert_eq!(
        decide.input_schema["properties"]["decision"]["enum"],
        json!(["allow_once", "allow_always", "reject_once", "reject_always"])
    );
    for t in &tools {
        assert_eq!(t.input_schema["type"], "object", "{}", t.name);
        let out = t
            .output_schema
            .as_ref()
            .expect("every tool says what it answers");
        assert_eq!(out["type"], "object", "{}", t.name);
    }
    let read_only = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        t.annotations.as_ref().and_then(|a| a.read_only_hint)
    };
    assert_eq!(read_only("list_models"), Some(true));
    assert_eq!(read_only("list_approvals"), Some(true));
    assert_eq!(read_only("rename_session"), Some(false));
    // A model is never offered the operator's tools.
    let offered: Vec<String> = infos().into_iter().map(|t| t.name).collect();
    assert!(!offered.iter().any(|n| operator_only(n)));
    assert!(offered.iter().any(|n| n == "rename_session"));
    assert_eq!(offered.len(), 6);
}
