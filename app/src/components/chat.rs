//! The chat view of one session: loads a snapshot, then follows the session's events
//! (messages, deltas, runs) live; holds the composer.
use super::composer::Composer;
use super::reply::MessageView;
use super::retry_banner::{Retrier, RetryBanner};
use super::use_sessions;
use crate::client::{api, fetch_json, EventStream};
use crate::wire::{
    AttemptEvent, AutoRetry, ClientConfig, Event, Message, Run, RunStatus, RunSummary, Session,
    SessionDetail, SessionStatus,
};
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

/// The open session's state, shared by its parts.
#[derive(Clone, Copy)]
pub struct Chat {
    pub session: RwSignal<Option<Session>>,
    /// Each message in its own signal, so a delta re-renders only its reply.
    pub messages: RwSignal<Vec<(String, RwSignal<Message>)>>,
    pub runs: RwSignal<Vec<Run>>,
    pub error: RwSignal<Option<String>>,
    /// The latest Tier 1 wait announced for a run ("attempt 2 in 4 s").
    pub attempt: RwSignal<Option<AttemptEvent>>,
    pub retrier: Retrier,
    pub config: RwSignal<Option<ClientConfig>>,
    /// Whether superseded messages (earlier attempts) are shown.
    pub show_superseded: RwSignal<bool>,
}

impl Chat {
    fn new() -> Self {
        Chat {
            session: RwSignal::new(None),
            messages: RwSignal::new(Vec::new()),
            runs: RwSignal::new(Vec::new()),
            error: RwSignal::new(None),
            attempt: RwSignal::new(None),
            retrier: Retrier::new(),
            config: RwSignal::new(None),
            show_superseded: RwSignal::new(false),
        }
    }

    /// Whether this page's Tier 2 retries failures (`auto_retry: browser`); a background
    /// session's retries wait on the server, and `off` waits for the operator.
    fn browser_retries(&self) -> bool {
        self.session.with_untracked(|s| {
            s.as_ref()
                .is_none_or(|s| s.auto_retry == AutoRetry::Browser)
        })
    }

    fn load(&self, d: SessionDetail) {
        self.session.set(Some(d.session));
        self.messages.set(
            d.messages
                .into_iter()
                .map(|m| (m.id.clone(), RwSignal::new(m)))
                .collect(),
        );
        let last_turn = d.runs.iter().rev().find(|r| r.held_by.is_none()).cloned();
        self.runs.set(d.runs);
        self.error.set(None);
        if let Some(run) = last_turn.filter(|_| self.browser_retries()) {
            self.retrier.observe(&run, false);
        }
    }

    /// Applies one live event.
    pub fn apply(&self, event: Event) {
        match event {
            Event::Message(m) => {
                let slot = self
                    .messages
                    .with_untracked(|ms| ms.iter().find(|(id, _)| *id == m.id).map(|(_, s)| *s));
                match slot {
                    // A superseded message stays, folded away (see `show_superseded`).
                    Some(s) => s.set(m),
                    None => self
                        .messages
                        .update(|ms| ms.push((m.id.clone(), RwSignal::new(m)))),
                }
            }
            Event::Delta(d) => {
                let slot = self.messages.with_untracked(|ms| {
                    ms.iter()
                        .find(|(id, _)| *id == d.message_id)
                        .map(|(_, s)| *s)
                });
                if let Some(s) = slot {
                    s.update(|m| {
                        if d.seq > m.delta_seq.unwrap_or(0) {
                            m.content.push_str(&d.text);
                            m.delta_seq = Some(d.seq);
                        }
                    });
                }
            }
            Event::Run(r) => {
                if self.browser_retries() || r.status != RunStatus::Failed {
                    self.retrier.observe(&r, true);
                }
                self.runs
                    .update(|rs| match rs.iter_mut().find(|x| x.id == r.id) {
                        Some(slot) => *slot = r,
                        None => rs.push(r),
                    });
                self.refresh_session_state();
            }
            Event::Session(s) => {
                // Never two retries for one failure: leaving `browser` stops this page's.
                if s.auto_retry != AutoRetry::Browser
                    && matches!(
                        self.retrier.state.get_untracked(),
                        crate::tier2::State::Armed { .. }
                    )
                {
                    self.retrier.feed(crate::tier2::Input::OperatorCancel);
                }
                self.session.set(Some(s));
                self.refresh_session_state();
            }
            Event::Attempt(a) => self.attempt.set(Some(a)),
        }
    }

    /// The session's status and last run, derived from its runs, into the chat and the list.
    fn refresh_session_state(&self) {
        let runs = self.runs.get_untracked();
        let busy = runs
            .iter()
            .any(|r| r.status.is_active() && r.held_by.is_none());
        let last: Option<RunSummary> = runs.last().map(Run::summary);
        self.session.update(|s| {
            if let Some(s) = s {
                s.status = if busy {
                    SessionStatus::Running
                } else {
                    SessionStatus::Idle
                };
                s.last_run = last;
            }
        });
        if let Some(s) = self.session.get_untracked() {
            use_sessions().upsert(s);
        }
    }

    /// How many agent replies were superseded (earlier attempts).
    pub fn superseded_replies(&self) -> usize {
        self.messages.with(|ms| {
            ms.iter()
                .filter(|(_, m)| m.with(|m| m.superseded && m.role == crate::wire::Role::Agent))
                .count()
        })
    }

    /// The open session's id, once loaded.
    pub fn session_id(&self) -> Option<String> {
        self.session
            .with_untracked(|s| s.as_ref().map(|s| s.id.clone()))
    }

    /// The run that is executing now, if any.
    pub fn running_run(&self) -> Option<Run> {
        self.runs
            .with(|rs| rs.iter().find(|r| r.status == RunStatus::Running).cloned())
    }
}

#[component]
pub fn SessionView() -> impl IntoView {
    let params = use_params_map();
    let sid = Memo::new(move |_| params.read().get("id").unwrap_or_default());
    let chat = Chat::new();
    provide_context(chat);
    provide_context(chat.retrier);
    Effect::new(move |_| {
        leptos::task::spawn_local(async move {
            if let Ok(c) = fetch_json::<ClientConfig>("GET", &api("/config"), None).await {
                chat.config.set(Some(c));
            }
        });
    });
    let stream = StoredValue::new_local(None::<EventStream>);
    Effect::new(move |_| {
        let id = sid.get();
        stream.set_value(None);
        chat.retrier.reset(&id);
        chat.messages.set(Vec::new());
        chat.session.set(None);
        leptos::task::spawn_local(async move {
            match fetch_json::<SessionDetail>(
                "GET",
                &api(&format!("/sessions/{id}?include_superseded=true")),
                None,
            )
            .await
            {
                Ok(detail) => {
                    let after = detail.last_event_id;
                    chat.load(detail);
                    let url = api(&format!("/sessions/{id}/events?last_event_id={after}"));
                    stream.set_value(EventStream::open(&url, move |_, ev| chat.apply(ev)));
                }
                Err(e) => chat.error.set(Some(e.explain())),
            }
        });
    });
    on_cleanup(move || stream.set_value(None));

    view! {
        <section class="chat" aria-label="Chat">
            <header class="chat-head">
                <h1>{move || chat.session.get().map(|s| s.title).unwrap_or_else(|| "Loading…".into())}</h1>
                <span class="model">{move || chat.session.get().map(|s| s.model)}</span>
                <AutoRetrySetting/>
                {move || {
                    let n = chat.superseded_replies();
                    (n > 0).then(|| {
                        let label = move || match (chat.show_superseded.get(), n) {
                            (true, _) => "Hide earlier attempts".to_string(),
                            (false, 1) => "1 earlier attempt".to_string(),
                            (false, n) => format!("{n} earlier attempts"),
                        };
                        view! {
                            <button class="secondary fold" aria-pressed=move || chat.show_superseded.get().to_string()
                                on:click=move |_| chat.show_superseded.update(|v| *v = !*v)>{label}</button>
                        }
                    })
                }}
            </header>
            <Show when=move || chat.error.get().is_some()>
                <p class="error" role="alert">{move || chat.error.get()}</p>
            </Show>
            <ol class="messages" aria-live="polite">
                <For each=move || chat.messages.get() key=|(id, _)| id.clone() let:item>
                    <MessageView message=item.1/>
                </For>
            </ol>
            <Show when=move || chat.session.get().is_some() && chat.messages.with(|m| m.is_empty())>
                <p class="empty">"Send the first message below."</p>
            </Show>
            <RetryBanner/>
            <Composer session_id=sid/>
        </section>
    }
}

/// The session's `auto_retry` setting: retry in this tab, on the server, or not at all.
#[component]
fn AutoRetrySetting() -> impl IntoView {
    let chat = expect_context::<Chat>();
    let current = move || {
        chat.session
            .with(|s| s.as_ref().map(|s| s.auto_retry).unwrap_or_default())
    };
    let change = move |ev: leptos::ev::Event| {
        let Some(value) = AutoRetry::parse(&event_target_value(&ev)) else {
            return;
        };
        let Some(sid) = chat.session_id() else {
            return;
        };
        leptos::task::spawn_local(async move {
            // `{"auto_retry":"…"}`, written out: `serde_json::Value` costs the browser bundle.
            let body = format!(r#"{{"auto_retry":"{}"}}"#, value.as_str());
            match fetch_json::<Session>("PATCH", &api(&format!("/sessions/{sid}")), Some(body))
                .await
            {
                Ok(s) => {
                    chat.session.set(Some(s));
                    chat.refresh_session_state();
                }
                Err(e) => chat.error.set(Some(e.explain())),
            }
        });
    };
    view! {
        <label class="auto-retry" title="Who retries a failed turn: this tab, the server (keeps trying with the tab closed), or no one">
            "Auto retry "
            <select on:change=change prop:value=move || current().as_str()>
                <option value="browser">"in this tab"</option>
                <option value="background">"on the server"</option>
                <option value="off">"off"</option>
            </select>
        </label>
    }
}
