//! CONTRACT §2 wire types: the only definition of what crosses the API, shared by the server,
//! the browser, the CLI and the tests.

mod config;
mod errors;
mod events;
mod ids;
mod message;
mod models;
mod run;
mod session;
mod text;
mod tools;

pub use config::*;
pub use errors::*;
pub use events::*;
pub use ids::*;
pub use message::*;
pub use models::*;
pub use run::*;
pub use session::*;
pub use text::Word;
pub use tools::*;

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// Every value's JSON is its word (`"rate_limited"`), and the word reads back as it.
    fn pin<T>(all: &[T], words: &[&str])
    where
        T: Word + Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        assert_eq!(all.len(), words.len(), "one word per value");
        for (value, word) in all.iter().zip(words) {
            assert_eq!(Word::as_str(value), *word);
            assert_eq!(T::parse(word).as_ref(), Some(value));
            let json = serde_json::to_string(value).unwrap();
            assert_eq!(json, format!("\"{word}\""));
            assert_eq!(&serde_json::from_str::<T>(&json).unwrap(), value);
        }
    }

    #[test]
    fn every_word_is_pinned_on_the_wire() {
        pin(
            RetryClass::ALL,
            &[
                "rate_limited",
                "overloaded",
                "server_error",
                "network",
                "stream_interrupted",
                "interrupted",
                "timeout",
                "internal",
                "context_overflow",
                "auth_failed",
                "credentials_unresolved",
                "spend_limit_exceeded",
                "quota_exhausted",
                "invalid_request",
                "max_steps",
                "reply_too_large",
                "agent_exited",
                "agent_error",
            ],
        );
        pin(
            ErrorCode::ALL,
            &[
                "unauthorized",
                "forbidden",
                "not_found",
                "invalid_request",
                "payload_too_large",
                "conflict",
                "internal",
                "retry.busy",
                "retry.nothing_failed",
                "retry.stopped",
                "regenerate.stale",
                "session.busy",
                "database.unavailable",
                "storage.full",
                "approval.decided",
                "approval.not_waiting",
                "subsessions.not_family",
                "network",
                "http",
            ],
        );
        pin(
            ProvenanceKind::ALL,
            &["operator", "regenerate", "auto_resume"],
        );
        pin(
            RunStatus::ALL,
            &[
                "queued",
                "running",
                "awaiting_approval",
                "completed",
                "failed",
                "cancelled",
            ],
        );
        pin(
            RunKind::ALL,
            &["prompt", "regenerate", "resend", "continuation"],
        );
        pin(
            MessageStatus::ALL,
            &["streaming", "complete", "failed", "cancelled"],
        );
        pin(Role::ALL, &["operator", "agent"]);
        pin(
            SessionStatus::ALL,
            &["idle", "running", "awaiting_approval"],
        );
        pin(ApprovalMode::ALL, &["policy", "ask_all", "trust"]);
        pin(
            Decision::ALL,
            &[
                "allow_once",
                "allow_always",
                "reject_once",
                "reject_always",
                "timed_out",
            ],
        );
        pin(DecidedBy::ALL, &["page", "cli", "api", "mcp"]);
        pin(AutoRetry::ALL, &["browser", "background", "off"]);
    }

    #[test]
    fn an_unknown_word_keeps_its_place_and_its_text() {
        // An open enum: a newer server's class, code or kind reads as `Other` and writes back
        // the same JSON, so one unknown word never fails a page or a list.
        let run: RetryClassification =
            serde_json::from_str(r#"{"retryable":false,"retry_class":"solar_flare"}"#).unwrap();
        assert_eq!(run.retry_class, RetryClass::Other("solar_flare".into()));
        assert!(!run.retry_class.is_retryable());
        assert_eq!(
            serde_json::to_string(&run).unwrap(),
            r#"{"retryable":false,"retry_class":"solar_flare"}"#
        );
        let e: ApiError =
            serde_json::from_str(r#"{"error":{"code":"retry.later","message":"m"}}"#).unwrap();
        assert_eq!(e.error.code.as_str(), "retry.later");
        let p: Provenance = serde_json::from_str(r#"{"kind":"replay"}"#).unwrap();
        assert_eq!(p.kind, ProvenanceKind::Other("replay".into()));
        // A word is a string: anything else is refused as before.
        assert!(serde_json::from_str::<RetryClass>("5").is_err());
        // A closed enum refuses an unknown word, as serde's derive always did.
        assert!(serde_json::from_str::<RunStatus>("\"paused\"").is_err());
        assert_eq!(RunStatus::parse("paused"), None);
    }

    #[test]
    fn retryable_classes_are_the_contracts() {
        let retryable: Vec<&str> = RetryClass::ALL
            .iter()
            .filter(|c| c.is_retryable())
            .map(RetryClass::as_str)
            .collect();
        assert_eq!(
            retryable,
            [
                "rate_limited",
                "overloaded",
                "server_error",
                "network",
                "stream_interrupted",
                "interrupted",
                "timeout",
                "internal",
                "agent_exited"
            ]
        );
    }

    #[test]
    fn absent_options_are_omitted_and_events_round_trip() {
        let m = Message {
            id: MessageId::new("m1"),
            session_id: SessionId::new("s1"),
            role: Role::Agent,
            content: "hi".into(),
            created_at: 1,
            superseded: false,
            run_id: Some(RunId::new("r1")),
            status: Some(MessageStatus::Failed),
            error_message: None,
            retry: Some(RetryClassification {
                retryable: true,
                retry_class: RetryClass::Overloaded,
                retry_after_until: None,
            }),
            provenance: None,
            delta_seq: None,
            parts: None,
        };
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("error_message").is_none());
        assert_eq!(
            json["retry"]["retry_class"],
            RetryClass::Overloaded.as_str()
        );
        let ev = Event::Message(m);
        let back = Event::parse(ev.name(), &ev.data_json()).unwrap().unwrap();
        assert_eq!(back, ev);
        assert!(Event::parse("nope", "{}").is_none());
        for name in EVENT_NAMES {
            assert!(Event::parse(name, "{}").is_some(), "{name} parses");
        }
        let delta = r#"{"run_id":"r","message_id":"m","seq":1,"text":"a"}"#;
        assert!(matches!(
            Event::parse("delta", delta),
            Some(Ok(Event::Delta(_)))
        ));
        assert!(
            matches!(Event::parse("delta", &format!("{delta} x")), Some(Err(_))),
            "trailing text after the data is refused"
        );
    }
}
