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
    /// A word about what happened to the operator's last action ("Already retried in
    /// another tab — following the new run."), shown in the dock above the composer.
    pub notice: RwSignal<Option<String>>,
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
            notice: RwSignal::new(None),
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
        self.load_runs(d.runs);
        self.error.set(None);
    }

    /// Takes a snapshot's runs and tells Tier 2 about the last turn (restored, not live).
    fn load_runs(&self, runs: Vec<Run>) {
        let last_turn = runs.iter().rev().find(|r| r.held_by.is_none()).cloned();
        let streak = crate::tier2::failed_streak(&runs);
        self.runs.set(runs);
        if let Some(run) = last_turn.filter(|_| self.browser_retries()) {
            self.retrier.observe(&run, false, streak);
        }
    }

    /// Reads the session again and brings this page up to it (after finding that another
    /// tab acted first): messages in place, runs replaced, so the page follows the new run.
    pub fn resync(&self) {
        let Some(id) = self.session_id() else { return };
        let this = *self;
        leptos::task::spawn_local(async move {
            let url = api(&format!("/sessions/{id}?include_superseded=true"));
            match fetch_json::<SessionDetail>("GET", &url, None).await {
                Ok(d) if this.session_id().as_deref() == Some(id.as_str()) => {
                    for m in d.messages {
                        this.apply(Event::Message(m));
                    }
                    this.load_runs(d.runs);
                    this.refresh_session_state();
                }
                Ok(_) => {}
                Err(e) => this.error.set(Some(e.explain())),
            }
        });
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
                self.runs
                    .update(|rs| match rs.iter_mut().find(|x| x.id == r.id) {
                        Some(slot) => *slot = r.clone(),
                        None => rs.push(r.clone()),
                    });
                if self.browser_retries() || r.status != RunStatus::Failed {
                    let streak = self
                        .runs
                        .with_untracked(|rs| crate::tier2::failed_streak(rs));
                    self.retrier.observe(&r, true, streak);
                }
                // The followed run went on (or ended): the notice about the last click is done.
                if r.held_by.is_none()
                    && r.status != RunStatus::Queued
                    && self.notice.with_untracked(|n| n.is_some())
                {
                    self.notice.set(None);
                }
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
                    // (Not a dismissal: the failure is the server's to retry now.)
                    self.retrier.feed(crate::tier2::Input::RunActive);
                }
                self.session.set(Some(s));
                self.refresh_session_state();
            }
            Event::Attempt(a) => self.attempt.set(Some(a)),
            Event::ToolCall(t) => {
                let slot = self.messages.with_untracked(|ms| {
                    ms.iter()
                        .find(|(id, _)| *id == t.message_id)
                        .map(|(_, s)| *s)
                });
                if let Some(s) = slot {
                    s.update(|m| m.apply_tool_call(t.call));
                }
            }
        }
    }

    /// The session's status and last run, derived from its runs, into the chat and the list.
    pub fn refresh_session_state(&self) {
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

    /// Cancels a run (Stop); a refusal goes to `error`.
    pub fn stop_run(&self, run_id: String, error: RwSignal<Option<String>>) {
        let Some(sid) = self.session_id() else { return };
        let this = *self;
        leptos::task::spawn_local(async move {
            let url = api(&format!("/sessions/{sid}/runs/{run_id}/cancel"));
            match fetch_json::<Run>("POST", &url, Some("{}".into())).await {
                Ok(run) => this.apply(Event::Run(run)),
                Err(e) => error.set(Some(e.explain())),
            }
        });
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
        chat.notice.set(None);
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
    let scroller = NodeRef::<leptos::html::Div>::new();
    let on_scroll = follow_the_bottom(chat, scroller);
    // A memo: the header is not rebuilt on every delta.
    let superseded = Memo::new(move |_| chat.superseded_replies());
    let notice = move || {
        chat.notice.get().or_else(|| {
            chat.retrier
                .stale
                .get()
                .then(|| "Already retried in another tab — following the new run.".to_string())
        })
    };

    view! {
        <section class="chat" aria-label="Chat">
            <header class="chat-head">
                <h1>{move || chat.session.get().map(|s| s.title).unwrap_or_else(|| "Loading…".into())}</h1>
                <span class="model" title=move || chat.session.get().map(|s| s.model)>{move || chat.session.get().map(|s| s.model)}</span>
                <AutoRetrySetting/>
                {move || {
                    let n = superseded.get();
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
            <div class="scroller" node_ref=scroller on:scroll=on_scroll>
                <ol class="messages" aria-live="polite">
                    <For each=move || chat.messages.get() key=|(id, _)| id.clone() let:item>
                        <MessageView message=item.1/>
                    </For>
                </ol>
                <Show when=move || chat.session.get().is_some() && chat.messages.with(|m| m.is_empty())>
                    <p class="empty">"Send the first message below."</p>
                </Show>
            </div>
            // Docked under the conversation, always in view: the retry banner and the composer.
            <div class="dock">
                <Show when=move || notice().is_some()>
                    <p class="notice" role="status">{notice}</p>
                </Show>
                <RetryBanner/>
                <Composer session_id=sid/>
            </div>
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

/// Keeps the conversation scrolled to its end while it grows, unless the operator scrolled up
/// to read (more than a few lines from the end). Answers the scroll handler that tracks that.
fn follow_the_bottom(
    chat: Chat,
    scroller: NodeRef<leptos::html::Div>,
) -> impl Fn(leptos::ev::Event) + Copy + 'static {
    let pinned = StoredValue::new(true);
    // Every message's length and parts: tracked, so a delta or a tool call re-runs this (and
    // only this) effect.
    let size = Memo::new(move |_| {
        chat.messages.with(|ms| {
            ms.iter()
                .map(|(_, m)| m.with(|m| m.content.len() + m.parts.as_ref().map_or(1, Vec::len)))
                .sum::<usize>()
        })
    });
    Effect::new(move |_| {
        size.track();
        #[cfg(feature = "hydrate")]
        if let Some(el) = scroller.get_untracked() {
            if pinned.get_value() {
                el.set_scroll_top(el.scroll_height());
            }
        }
    });
    move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(el) = scroller.get_untracked() {
            let gap = el.scroll_height() - el.scroll_top() - el.client_height();
            pinned.set_value(gap < 80);
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (scroller, pinned);
    }
}
