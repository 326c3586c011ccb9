//! Every page's line about the tool calls waiting for the operator ("2 tool calls wait for
//! your approval: …", with links to their sessions), from `GET /approvals` and kept by the
//! open session's events, and the tab's title counting them ("(2) … — Mulligan").
use super::use_sessions;
use crate::api;
use crate::client::fetch_json;
use crate::nav::Page;
use crate::wire::{
    Approvals as Answer, Run, RunStatus, SessionId, SessionStatus, ToolCallEvent, ToolCallStatus,
    WaitingCall,
};
use leptos::prelude::*;

/// How often the line is looked at again while a call waits (the outage banners' pace).
const REFRESH_MS: u64 = 5000;

/// The calls waiting for the operator, shared by the page's parts.
#[derive(Clone, Copy)]
pub struct Approvals {
    pub waiting: RwSignal<Vec<WaitingCall>>,
    /// More calls wait than the first page the line reads (100: `GET /approvals`).
    pub more: RwSignal<bool>,
    /// The page's own title (the open session's), which the count goes before.
    pub title: RwSignal<Option<String>>,
}

impl Approvals {
    /// Keeps the list as the open session's `tool_call` event says, without asking the
    /// server: a call that starts waiting joins it, one decided or ended leaves it.
    pub fn heard_call(&self, session_id: &SessionId, event: &ToolCallEvent) {
        let call = &event.call;
        let waits = call.status == ToolCallStatus::AwaitingApproval
            && call.approval.as_ref().is_some_and(|a| a.decision.is_none());
        let listed = self
            .waiting
            .with_untracked(|w| w.iter().position(|c| c.call.id == call.id));
        match (listed, waits) {
            (Some(i), true) => self.waiting.update(|w| w[i].call = call.clone()),
            (Some(i), false) => self.waiting.update(|w| {
                w.remove(i);
            }),
            (None, true) => self.waiting.update(|w| {
                w.push(WaitingCall {
                    session_id: session_id.clone(),
                    run_id: event.run_id.clone(),
                    waiting_since: call.approval.as_ref().map_or(0, |a| a.asked_at),
                    call: call.clone(),
                })
            }),
            (None, false) => {}
        }
    }

    /// A `run` event of the open session: a run no longer waiting takes its calls off the
    /// list (a cancel, a Regenerate, the last decision).
    pub fn heard_run(&self, run: &Run) {
        if run.status == RunStatus::AwaitingApproval {
            return;
        }
        if self
            .waiting
            .with_untracked(|w| w.iter().any(|c| c.run_id == run.id))
        {
            self.waiting.update(|w| w.retain(|c| c.run_id != run.id));
        }
    }

    /// The run of waiting call `call`, when the list has it.
    pub fn run_of(&self, call: &str) -> Option<String> {
        self.waiting.with_untracked(|w| {
            w.iter()
                .find(|c| c.call.id.as_str() == call)
                .map(|c| c.run_id.to_string())
        })
    }

    /// Shows `title` (the open session's, `None` elsewhere) as the page's title: the tab's
    /// title is drawn again only when it changed.
    pub fn set_title(&self, title: Option<String>) {
        super::set_if_changed(&self.title, title);
    }
}

pub fn provide_approvals() {
    provide_context(Approvals {
        waiting: RwSignal::new(Vec::new()),
        more: RwSignal::new(false),
        title: RwSignal::new(None),
    });
}

pub fn use_approvals() -> Option<Approvals> {
    use_context::<Approvals>()
}

/// The tab's title: `(n) ` before the page's own while `n` calls wait.
pub fn titled(waiting: usize, title: Option<&str>) -> String {
    let own = crate::nav::title(title);
    match waiting {
        0 => own,
        n => format!("({n}) {own}"),
    }
}

/// "1 tool call waits for your approval" / "2 tool calls wait for your approval"; `more`:
/// the list is a first page, and more wait ("100 or more tool calls wait …").
pub fn words(waiting: usize, more: bool) -> String {
    match (waiting, more) {
        (n, true) => format!("{n} or more tool calls wait for your approval"),
        (1, false) => "1 tool call waits for your approval".into(),
        (n, false) => format!("{n} tool calls wait for your approval"),
    }
}

#[component]
pub fn ApprovalsLine() -> impl IntoView {
    let approvals = use_approvals()?;
    let waiting = approvals.waiting;
    let sessions = use_sessions();
    // Only the latest look's answer counts (answers may cross).
    let looks = StoredValue::new(0u64);
    let load = move || {
        let look = looks.get_value() + 1;
        looks.set_value(look);
        leptos::task::spawn_local(async move {
            let url = api::APPROVALS.url(&[]);
            // A failed look keeps what shows: the next one tries again.
            if let Ok(a) = fetch_json::<Answer>(api::APPROVALS.method(), &url, None).await {
                if looks.try_get_value() == Some(look) {
                    approvals.more.try_set(a.next_before.is_some());
                    waiting.try_set(a.approvals);
                }
            }
        })
    };
    // The listed sessions that need approval: the list's own refresh shows a new one.
    let asking = Memo::new(move |_| {
        sessions
            .with_each(|s| (s.status == SessionStatus::AwaitingApproval).then(|| s.id.to_string()))
    });
    // Looked at again when the list of sessions that ask changes (another session's call
    // starts waiting or is decided) and while a call waits; the open session's own events
    // keep it meanwhile ([`Approvals::heard_call`]), so no event costs a request.
    Effect::new(move |_| {
        asking.track();
        load();
    });
    let watching =
        Memo::new(move |_| waiting.with(|w| !w.is_empty()) || !asking.with(Vec::is_empty));
    Effect::new(move |_| {
        if watching.get() {
            if let Ok(h) = set_interval(load, std::time::Duration::from_millis(REFRESH_MS)) {
                on_cleanup(move || h.clear());
            }
        }
    });
    // Each session once, in the order its first call began waiting.
    let links = move || {
        let mut ids: Vec<SessionId> = Vec::new();
        waiting.with(|w| {
            for c in w {
                if !ids.contains(&c.session_id) {
                    ids.push(c.session_id.clone());
                }
            }
        });
        ids.into_iter()
            .enumerate()
            .map(|(k, id)| {
                let title = sessions.title_of(&id);
                let text = title.filter(|t| !t.trim().is_empty()).unwrap_or_else(|| id.to_string());
                let comma = (k > 0).then_some(", ");
                view! { {comma}<a class="approvals-session" href=Page::session_path(&id)>{text}</a> }
            })
            .collect_view()
    };
    Some(
        view! {
            <Show when=move || waiting.with(|w| !w.is_empty())>
                <div class="approvals" role="status" aria-label="Tool calls waiting">
                    <p class="approvals-line">
                        <strong>{move || words(waiting.with(Vec::len), approvals.more.get())}</strong>
                        ": " {links}
                    </p>
                </div>
            </Show>
        }
        .into_any(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_title_and_the_line_count_the_waiting_calls() {
        assert_eq!(titled(0, Some("fix it")), "fix it — Mulligan");
        assert_eq!(titled(2, Some("fix it")), "(2) fix it — Mulligan");
        assert_eq!(titled(1, None), "(1) Mulligan");
        assert_eq!(words(1, false), "1 tool call waits for your approval");
        assert_eq!(words(3, false), "3 tool calls wait for your approval");
        assert_eq!(
            words(100, true),
            "100 or more tool calls wait for your approval"
        );
    }
}
