//! The operator UI: the session list, the chat view and its parts.
pub mod chat;
pub mod composer;
pub mod cooldown_note;
pub mod reply;
pub mod retry_banner;
pub mod session_list;

use crate::wire::Session;
use leptos::prelude::*;

/// Every session the list shows, shared by the list and the open chat.
#[derive(Clone, Copy)]
pub struct Sessions(pub RwSignal<Vec<Session>>);

pub fn provide_sessions() {
    provide_context(Sessions(RwSignal::new(Vec::new())));
}

pub fn use_sessions() -> Sessions {
    expect_context::<Sessions>()
}

impl Sessions {
    /// Puts a session's new state in the list (adding it first when new).
    pub fn upsert(&self, s: Session) {
        self.0
            .update(|list| match list.iter_mut().find(|x| x.id == s.id) {
                Some(slot) => *slot = s,
                None => list.insert(0, s),
            });
    }
}

/// A short local time, `14:32`, for a time in epoch millis.
pub fn hhmm(ms: i64) -> String {
    #[cfg(feature = "hydrate")]
    {
        let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
        format!("{:02}:{:02}", d.get_hours(), d.get_minutes())
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let mins = ms / 60_000;
        format!("{:02}:{:02}", (mins / 60) % 24, mins % 60)
    }
}
