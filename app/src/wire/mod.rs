//! CONTRACT §2 wire types: the only definition of what crosses the API, shared by the server,
//! the browser, the CLI and the tests.

mod config;
mod errors;
mod events;
mod message;
mod run;
mod session;
mod tools;

pub use config::*;
pub use errors::*;
pub use events::*;
pub use message::*;
pub use run::*;
pub use session::*;
pub use tools::*;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_are_snake_case_on_the_wire() {
        assert_eq!(
            serde_json::to_string(&RunStatus::Cancelled).unwrap(),
            "\"cancelled\""
        );
        assert_eq!(
            serde_json::to_string(&RunKind::Continuation).unwrap(),
            "\"continuation\""
        );
        assert_eq!(
            serde_json::to_string(&Role::Operator).unwrap(),
            "\"operator\""
        );
    }

    #[test]
    fn absent_options_are_omitted_and_events_round_trip() {
        let m = Message {
            id: "m1".into(),
            session_id: "s1".into(),
            role: Role::Agent,
            content: "hi".into(),
            created_at: 1,
            superseded: false,
            run_id: Some("r1".into()),
            status: Some(MessageStatus::Failed),
            error_message: None,
            retry: Some(RetryClassification {
                retryable: true,
                retry_class: "overloaded".into(),
                retry_after_until: None,
            }),
            provenance: None,
            delta_seq: None,
            parts: None,
        };
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("error_message").is_none());
        assert_eq!(json["retry"]["retry_class"], "overloaded");
        let ev = Event::Message(m);
        let back = Event::parse(ev.name(), &ev.data_json()).unwrap().unwrap();
        assert_eq!(back, ev);
        assert!(Event::parse("nope", "{}").is_none());
        for name in EVENT_NAMES {
            assert!(Event::parse(name, "{}").is_some(), "{name} parses");
        }
    }
}
