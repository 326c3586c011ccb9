//! The session list: the newest sessions with their state (older ones a page at a time, a
//! search over titles), and the form that creates one.
use super::{use_hydrated, use_sessions};
use crate::api;
use crate::client::{fetch_json, ClientError};
use crate::clock::{at, at_utc, at_with_hint, now_ms};
use crate::nav::{use_nav, Page};
use crate::page_data::take_sessions;
use crate::wire::{
    CreateSession, RunStatus, Session, SessionId, SessionList as List, SessionStatus,
};
use leptos::prelude::*;

/// How often the list refreshes the states of sessions that are not open.
const REFRESH_MS: u64 = 3000;

#[component]
pub fn SessionList() -> impl IntoView {
    let sessions = use_sessions();
    let error = RwSignal::new(None::<String>);
    // The newest page is in the page the server rendered; without it (a page the server
    // rendered without data), the browser reads it at once. It refreshes from there.
    let first = take_sessions();
    let loading = RwSignal::new(first.is_none());
    // Where the next (older) page starts, when there is one; and the words searched for.
    let next_before = RwSignal::new(None::<SessionId>);
    let search = RwSignal::new(String::new());
    match first {
        Some(Ok(list)) => {
            sessions.replace(list.sessions);
            next_before.set(list.next_before);
        }
        Some(Err(e)) => error.set(Some(e)),
        None => {}
    }
    // Reads the newest sessions again, as many as are shown (a page at least, at most the
    // largest page): what the list holds stays bounded by what the operator asked to see.
    // Bumped when older sessions are added or a search starts: a refresh asked for before
    // that would undo it, and is dropped.
    let epoch = StoredValue::new(0u32);
    let load = move || {
        let shown = sessions.len_untracked();
        let limit = shown.clamp(PAGE, MAX_PAGE);
        let q = search.get_untracked();
        let asked = epoch.get_value();
        leptos::task::spawn_local(async move {
            let url = list_url(&q, limit, None);
            match fetch_json::<List>(api::LIST_SESSIONS.method(), &url, None).await {
                Ok(list) if epoch.get_value() == asked => {
                    sessions.replace(list.sessions);
                    sessions.refreshed.update(|n| *n = n.wrapping_add(1));
                    next_before.set(list.next_before);
                    error.set(None);
                }
                Ok(_) => {}
                Err(e) => error.set(Some(e.explain())),
            }
            loading.set(false);
        })
    };
    let older = move |_| {
        let Some(before) = next_before.get_untracked() else {
            return;
        };
        let q = search.get_untracked();
        leptos::task::spawn_local(async move {
            let url = list_url(&q, PAGE, Some(&before));
            match fetch_json::<List>(api::LIST_SESSIONS.method(), &url, None).await {
                Ok(list) if next_before.with_untracked(|n| n.as_ref() == Some(&before)) => {
                    epoch.set_value(epoch.get_value().wrapping_add(1));
                    sessions.extend(list.sessions);
                    next_before.set(list.next_before);
                    error.set(None);
                }
                Ok(_) => {}
                Err(e) => error.set(Some(e.explain())),
            }
        })
    };
    // A search shows its first page, a quarter second after the last key.
    let typed = StoredValue::new(0u32);
    let on_search = move |ev| {
        search.set(event_target_value(&ev));
        let n = typed.get_value().wrapping_add(1);
        typed.set_value(n);
        let _ = set_timeout(
            move || {
                if typed.get_value() == n {
                    epoch.set_value(epoch.get_value().wrapping_add(1));
                    sessions.replace(Vec::new());
                    loading.set(true);
                    load();
                }
            },
            std::time::Duration::from_millis(250),
        );
    };
    Effect::new(move |_| {
        if loading.get_untracked() {
            load();
        }
        if let Ok(handle) = set_interval(load, std::time::Duration::from_millis(REFRESH_MS)) {
            on_cleanup(move || handle.clear());
        }
    });
    view! {
        <nav class="sidebar" aria-label="Sessions">
            <div class="brand"><a href="/">"Mulligan"</a></div>
            <NewSession/>
            <label class="sr-only" for="session-search">"Search sessions"</label>
            <input id="session-search" class="session-search" type="search"
                placeholder="Search titles" prop:value=search on:input=on_search/>
            <Entries error loading searching=Signal::derive(move || search.with(|s| !s.trim().is_empty()))/>
            <Show when=move || next_before.with(Option::is_some)>
                <button type="button" class="secondary older" on:click=older>"Show older sessions"</button>
            </Show>
        </nav>
    }
}

/// A page of the list as the browser asks for it (`GET /sessions`), and the largest.
const PAGE: usize = 100;
const MAX_PAGE: usize = 1000;

/// `GET /sessions` of `limit` sessions older than `before`, whose titles hold `q`'s words.
fn list_url(q: &str, limit: usize, before: Option<&SessionId>) -> String {
    let mut url = format!("{}?limit={limit}", api::LIST_SESSIONS.url(&[]));
    if !q.trim().is_empty() {
        url.push_str("&q=");
        url.push_str(&encode(q.trim()));
    }
    if let Some(b) = before {
        url.push_str("&before=");
        url.push_str(&encode(b.as_str()));
    }
    url
}

/// `s` percent-encoded for a query string (every byte but letters, digits and `-._~`).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    api::encode_segment(s, &mut out);
    out
}

/// The list's entries, or why there are none.
#[component]
fn Entries(
    error: RwSignal<Option<String>>,
    loading: RwSignal<bool>,
    searching: Signal<bool>,
) -> impl IntoView {
    let sessions = use_sessions();
    view! {
        <Show when=move || error.get().is_some()>
            <p class="error" role="alert">{move || error.get()}</p>
        </Show>
        <ul class="sessions">
            <For each=move || sessions.rows() key=|(id, _)| id.clone() let:row>
                <Entry row=row.1/>
            </For>
        </ul>
        <Show when=move || sessions.is_empty() && error.get().is_none()>
            <p class="empty">{move || match (loading.get(), searching.get()) {
                (true, _) => "Loading sessions…",
                (false, true) => "No session's title has those words.",
                (false, false) => "No sessions yet.",
            }}</p>
        </Show>
    }
}

/// One session of the list, drawn from its own signal: its change redraws what changed in
/// this entry alone.
#[component]
fn Entry(row: ArcRwSignal<Session>) -> impl IntoView {
    let nav = use_nav();
    let hydrated = use_hydrated();
    let refreshed = use_sessions().refreshed;
    let row = RwSignal::from(row);
    let id = row.with_untracked(|s| s.id.clone());
    let href = Page::session_path(&id);
    let current = Signal::derive(move || nav.is_session(&id));
    // A scheduled retry's words say how long is left: redrawn by each refresh of the list.
    let label = Memo::new(move |_| {
        let label = row.with(state_label);
        if label.0 == "scheduled" {
            refreshed.track();
        }
        label
    });
    let active = Memo::new(move |_| row.with(last_activity));
    let title = move || row.with(|s| s.title.clone());
    let model = move || row.with(|s| s.model.clone());
    view! {
        <li class=move || format!("session {}", label.with(|l| l.0))>
            <a href=href class:current=current aria-current=move || current.get().then_some("page")>
                <span class="title" title=title>{title}</span>
                <span class="meta">
                    <span class="model" title=model>{model}</span>
                    // The server writes times in UTC; the browser redraws them in its zone (a
                    // text that changes: hydration keeps the server's until it does).
                    <time class="activity" title="Last activity">{move || if hydrated.get() { at(active.get()) } else { at_utc(active.get()) }}</time>
                </span>
                <span class=move || format!("state {}", label.with(|l| l.0))>{move || {
                    hydrated.track();
                    label.with(|l| l.1.clone())
                }}</span>
            </a>
        </li>
    }
}

/// The session's state for the list: a CSS class and the words shown.
pub fn state_label(s: &Session) -> (&'static str, String) {
    if s.status == SessionStatus::AwaitingApproval {
        return ("needs-approval", "needs approval".into());
    }
    if s.status == SessionStatus::Running {
        return ("running", "running".into());
    }
    if let Some(w) = &s.waiting_retry {
        return (
            "scheduled",
            format!("retry scheduled {}", at_with_hint(w.fires_at, now_ms())),
        );
    }
    match &s.last_run {
        Some(r) if r.status == RunStatus::Failed => match &r.retry {
            Some(c) if c.retryable => match c.retry_after_until {
                Some(t) if t > now_ms() => (
                    "scheduled",
                    format!("failed · retry after {}", at_with_hint(t, now_ms())),
                ),
                _ => ("retryable", "failed · retryable".into()),
            },
            _ => ("failed", "failed (not retryable)".into()),
        },
        Some(r) if r.status == RunStatus::Cancelled => ("idle", "stopped".into()),
        _ => ("idle", "idle".into()),
    }
}

/// When the session last did something: its last run's end, or when that run was asked for
/// while it is queued or running, else the session's creation.
pub fn last_activity(s: &Session) -> i64 {
    s.last_run
        .as_ref()
        .and_then(|r| r.finished_at.or(r.created_at))
        .unwrap_or(s.created_at)
        .max(s.created_at)
}

#[component]
fn NewSession() -> impl IntoView {
    let sessions = use_sessions();
    let title = RwSignal::new(String::new());
    let model = RwSignal::new(String::new());
    let busy = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let navigate = leptos_router::hooks::use_navigate();
    let create = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if busy.get_untracked() {
            return;
        }
        busy.set(true);
        let body = CreateSession {
            auto_retry: None,
            title: Some(title.get_untracked()).filter(|t| !t.trim().is_empty()),
            model: Some(model.get_untracked()).filter(|m| !m.trim().is_empty()),
            parent_id: None,
            tools: None,
            fallbacks: None,
            approval: None,
        };
        let navigate = navigate.clone();
        leptos::task::spawn_local(async move {
            let body = serde_json::to_string(&body).ok();
            // The answer is a `CreatedSession`: its session, flattened, plus the agent token,
            // which the list does not show. Read as a `Session` (unknown fields are ignored),
            // it skips `#[serde(flatten)]`'s buffering, which costs the browser bundle.
            let res: Result<Session, ClientError> = fetch_json(
                api::CREATE_SESSION.method(),
                &api::CREATE_SESSION.url(&[]),
                body,
            )
            .await;
            busy.set(false);
            match res {
                Ok(session) => {
                    title.set(String::new());
                    error.set(None);
                    let id = session.id.clone();
                    sessions.upsert(session);
                    navigate(&Page::session_path(&id), Default::default());
                }
                Err(e) => error.set(Some(e.explain())),
            }
        });
    };
    view! {
        <form class="new-session" on:submit=create>
            <label class="sr-only" for="new-title">"Title"</label>
            <input id="new-title" placeholder="New session title" prop:value=title
                on:input=move |ev| title.set(event_target_value(&ev))/>
            <label class="sr-only" for="new-model">"Model"</label>
            <input id="new-model" placeholder=super::catalogue::placeholder list="models" prop:value=model
                on:input=move |ev| model.set(event_target_value(&ev))/>
            <super::catalogue::ModelOptions list_id="models"/>
            <button type="submit" disabled=move || busy.get()>"New session"</button>
            <Show when=move || error.get().is_some()>
                <p class="error" role="alert">{move || error.get()}</p>
            </Show>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(last_run: serde_json::Value) -> Session {
        let mut s = serde_json::json!({
            "id": "s_1", "title": "t", "model": "demo", "status": "running", "created_at": 1_000,
        });
        if !last_run.is_null() {
            s["last_run"] = last_run;
        }
        serde_json::from_value(s).expect("a session")
    }

    #[test]
    fn a_list_url_encodes_its_search_and_cursor() {
        assert_eq!(list_url("", 100, None), "/api/v1/sessions?limit=100");
        assert_eq!(
            list_url(" deploy fix&x=1 ", 100, Some(&SessionId::new("s_1"))),
            "/api/v1/sessions?limit=100&q=deploy%20fix%26x%3D1&before=s_1"
        );
        assert_eq!(encode("é"), "%C3%A9");
    }

    #[test]
    fn last_activity_is_the_last_runs_end_or_its_request() {
        assert_eq!(last_activity(&session(serde_json::Value::Null)), 1_000);
        let running = serde_json::json!({
            "id": "r_1", "status": "running", "kind": "prompt", "created_at": 5_000,
        });
        assert_eq!(
            last_activity(&session(running)),
            5_000,
            "a running run counts"
        );
        let ended = serde_json::json!({
            "id": "r_1", "status": "completed", "kind": "prompt",
            "created_at": 5_000, "finished_at": 9_000,
        });
        assert_eq!(last_activity(&session(ended)), 9_000);
    }
}
