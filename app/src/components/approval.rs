//! A tool call's question to the operator (CONTRACT §8): the card on a waiting call (what it
//! is, its arguments, what its source says of it; Allow once, Always allow, Deny) and a
//! decided call's answer in words, for the card and the timeline.
use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{
    is_tab_id, Approval, DecideToolCall, DecidedBy, DecidedCall, Decision, Message, Millis, Part,
    ToolAnnotations, ToolCall, MAX_DECISION_REASON_CHARS,
};
use leptos::prelude::*;

/// The card shows at most this many characters of the arguments.
const ARGS_CHARS: usize = 4000;

/// What the tool's source says it does, in words: "reads only", "may change or delete",
/// "reaches outside"; "may change things" when it says none of these.
pub fn annotation_words(a: Option<&ToolAnnotations>) -> String {
    let a = a.copied().unwrap_or_default();
    let mut said = Vec::new();
    if a.read_only == Some(true) {
        said.push("reads only");
    } else if a.destructive == Some(true) {
        said.push("may change or delete");
    }
    if a.open_world == Some(true) {
        said.push("reaches outside");
    }
    if said.is_empty() {
        return "may change things".into();
    }
    said.join(" · ")
}

/// The decision in words, a rejection with its reason: "Allowed once", "Denied: too
/// broad", "Timed out — nobody decided".
pub fn decision_words(d: Decision, reason: Option<&str>) -> String {
    let word = match d {
        Decision::AllowOnce => "Allowed once",
        Decision::AllowAlways => "Always allowed",
        Decision::RejectOnce => "Denied",
        Decision::RejectAlways => "Always denied",
        Decision::TimedOut => "Timed out — nobody decided",
    };
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) if !d.allows() && d != Decision::TimedOut => format!("{word}: {r}"),
        _ => word.to_string(),
    }
}

/// Where the decision came from: "from this tab", "from another tab", "from the CLI",
/// "through the API", "through MCP" (`this_tab`: the reading tab's id); `None` when unsaid.
pub fn decided_by(a: &Approval, this_tab: Option<&str>) -> Option<&'static str> {
    Some(match (a.by, a.from.as_deref()) {
        (_, Some(f)) if Some(f) == this_tab => "from this tab",
        (_, Some(f)) if is_tab_id(f) => "from another tab",
        (Some(DecidedBy::Page), _) => "from a page",
        (Some(DecidedBy::Cli), _) => "from the CLI",
        (Some(DecidedBy::Api), _) => "through the API",
        (Some(DecidedBy::Mcp), _) => "through MCP",
        (None, _) => return None,
    })
}

/// A decided call's line: "Allowed once · from this tab · 14:02" (`at` writes a moment);
/// `None` while undecided.
pub fn decided_line(
    a: &Approval,
    this_tab: Option<&str>,
    at: impl Fn(Millis) -> String,
) -> Option<String> {
    let d = a.decision?;
    let mut line = decision_words(d, a.reason.as_deref());
    if let Some(by) = decided_by(a, this_tab).filter(|_| d != Decision::TimedOut) {
        line.push_str(" · ");
        line.push_str(by);
    }
    if let Some(t) = a.decided_at {
        line.push_str(" · ");
        line.push_str(&at(t));
    }
    Some(line)
}

/// The timeline's words for an asked call: "asked before rename_session (mulligan) ·
/// allowed once by page, this tab · waited 3.4 s" (`took` writes a duration; `now` ends a
/// wait still going).
pub fn asked_row(
    c: &ToolCall,
    this_tab: Option<&str>,
    now: Millis,
    took: impl Fn(Millis) -> String,
) -> Option<String> {
    let a = c.approval.as_ref()?;
    let mut text = format!("asked before {} ({}) · ", c.tool, c.server);
    let Some(d) = a.decision else {
        text.push_str(&format!(
            "waiting for a decision · {} so far",
            took(now - a.asked_at)
        ));
        return Some(text);
    };
    // The decision's words mid-sentence: its first letter small (the reason as written).
    let words = decision_words(d, a.reason.as_deref());
    let mut first = words.chars();
    text.extend(first.next().map(|c| c.to_ascii_lowercase()));
    text.push_str(first.as_str());
    if d != Decision::TimedOut {
        if let Some(by) = a.by {
            text.push_str(&format!(" by {}", by.as_str()));
        }
        let tab = match a.from.as_deref() {
            Some(f) if Some(f) == this_tab => Some("this tab"),
            Some(f) if is_tab_id(f) => Some("another tab"),
            _ => None,
        };
        if let Some(tab) = tab {
            text.push_str(if a.by.is_some() { ", " } else { " from " });
            text.push_str(tab);
        }
    }
    if let Some(t) = a.decided_at {
        text.push_str(&format!(" · waited {}", took(t - a.asked_at)));
    }
    Some(text)
}

/// `text`'s first `chars` characters, and how many it has when it was cut.
fn bounded(text: &str, chars: usize) -> (String, Option<usize>) {
    match text.char_indices().nth(chars) {
        Some((at, _)) => (format!("{}…", &text[..at]), Some(text.chars().count())),
        None => (text.to_string(), None),
    }
}

/// Posts the operator's decision on call `call_id` of run `run_id`, from this tab. The
/// answer's call goes into the message at once (its `tool_call` event follows); a refusal
/// (another tab decided first: 409) shows the server's words in `error`, and the session is
/// read again so the page shows what was decided.
fn decide(
    (run_id, call_id): (String, String),
    decision: Decision,
    reason: Option<String>,
    message: RwSignal<Message>,
    busy: RwSignal<bool>,
    error: RwSignal<Option<String>>,
    chat: Option<Chat>,
) {
    if busy.get_untracked() {
        return;
    }
    busy.set(true);
    error.set(None);
    leptos::task::spawn_local(async move {
        let body = serde_json::to_string(&DecideToolCall {
            decision,
            reason,
            from: crate::client::tab_id(),
            by: Some(DecidedBy::Page),
        })
        .ok();
        let url = api::DECIDE_TOOL_CALL.url(&[&run_id, &call_id]);
        let method = api::DECIDE_TOOL_CALL.method();
        match fetch_json::<DecidedCall>(method, &url, body).await {
            Ok(d) => message.update(|m| m.apply_tool_call(d.call)),
            Err(e) => {
                error.set(Some(e.explain()));
                if e.status == 409 {
                    if let Some(chat) = chat {
                        chat.resync();
                    }
                }
            }
        }
        busy.set(false);
    });
}

/// The run that asked for call `i` of the message: the waiting list's word for it, else
/// the reply's run.
fn ids_of(
    m: &Message,
    i: usize,
    approvals: Option<super::approvals::Approvals>,
) -> Option<(String, String)> {
    let Some(Part::ToolCall { call }) = m.parts.as_ref()?.get(i) else {
        return None;
    };
    let run = approvals
        .and_then(|a| a.run_of(call.id.as_str()))
        .or_else(|| m.run_id.as_ref().map(|r| r.to_string()))?;
    Some((run, call.id.to_string()))
}

/// The card on a waiting call: call `i` of the message, with `args` its arguments as
/// indented JSON. `busy` and `error` outlive the card (the answer may come after it went).
#[component]
pub fn ApprovalCard(
    message: RwSignal<Message>,
    i: usize,
    args: String,
    busy: RwSignal<bool>,
    error: RwSignal<Option<String>>,
) -> impl IntoView {
    let (server, tool, says) =
        message.with_untracked(|m| match m.parts.as_ref().and_then(|p| p.get(i)) {
            Some(Part::ToolCall { call }) => (
                call.server.clone(),
                call.tool.clone(),
                annotation_words(call.annotations.as_ref()),
            ),
            _ => Default::default(),
        });
    let denying = RwSignal::new(false);
    let reason = RwSignal::new(String::new());
    let reason_input = NodeRef::<leptos::html::Input>::new();
    let deny_button = NodeRef::<leptos::html::Button>::new();
    // The reason's field takes the focus when it opens (Deny by keyboard goes on typing).
    Effect::new(move |_| {
        if let Some(el) = reason_input.get() {
            let _ = el.focus();
        }
    });
    // Read here: an event handler runs outside the component's owner.
    let chat = use_context::<Chat>();
    let approvals = super::approvals::use_approvals();
    let send = move |decision: Decision, reason: Option<String>| {
        if let Some(ids) = message.with_untracked(|m| ids_of(m, i, approvals)) {
            decide(ids, decision, reason, message, busy, error, chat);
        }
    };
    let cancel = move || {
        denying.set(false);
        if let Some(el) = deny_button.get_untracked() {
            let _ = el.focus();
        }
    };
    let confirm = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let text: String = reason
            .get_untracked()
            .trim()
            .chars()
            .take(MAX_DECISION_REASON_CHARS)
            .collect();
        send(Decision::RejectOnce, Some(text).filter(|t| !t.is_empty()));
    };
    let (shown, total) = bounded(&args, ARGS_CHARS);
    let note = total.map(|n| {
        view! {
            <p class="hint approval-cut">
                {format!(
                    "Showing the first {ARGS_CHARS} of {n} characters; `mulligan approvals --json` prints them whole."
                )}
            </p>
        }
    });
    // An agent's question lives in its process (CONTRACT §9). The catalogue is read by the
    // sidebar's new-session form.
    let catalogue = super::catalogue::use_catalogue();
    let agent = catalogue.is_some_and(|c| c.is_agent(&server));
    let held = agent.then(|| {
        view! {
            <p class="hint">"The agent holds this question: a Mulligan restart interrupts the run, and its retry may ask again."</p>
        }
    });
    let name = format!("{server}/{tool}");
    let always = format!("Always allow {tool} here");
    let group = format!("Approve {name}?");
    view! {
        <div class="approval-card" role="group" aria-label=group>
            <p class="approval-ask">
                <strong>"Waiting for your approval: "</strong>
                <code class="approval-tool">{name}</code>
                " "<span class="approval-says">{says}</span>
            </p>
            <details class="approval-args" open=true>
                <summary>"Arguments"</summary>
                <pre>{shown}</pre>
                {note}
            </details>
            {held}
            <div class="approval-actions">
                <button type="button" class="approve" data-testid="approve-once"
                    disabled=move || busy.get()
                    on:click=move |_| send(Decision::AllowOnce, None)>"Allow once"</button>
                <button type="button" class="secondary approve-always" data-testid="approve-always"
                    aria-label=always.clone() disabled=move || busy.get()
                    on:click=move |_| send(Decision::AllowAlways, None)>
                    "Always allow " <code>{tool.clone()}</code> " here"
                </button>
                <button type="button" class="deny" data-testid="deny" node_ref=deny_button
                    aria-expanded=move || denying.get().to_string()
                    disabled=move || busy.get()
                    on:click=move |_| denying.set(true)>"Deny"</button>
            </div>
            <Show when=move || denying.get()>
                <form class="deny-form" on:submit=confirm
                    on:keydown=move |ev: leptos::ev::KeyboardEvent| {
                        if ev.key() == "Escape" {
                            ev.prevent_default();
                            cancel();
                        }
                    }>
                    <label for=format!("deny-reason-{i}")>"Why (optional; the model is told)"</label>
                    <input id=format!("deny-reason-{i}") class="deny-reason" data-testid="deny-reason"
                        node_ref=reason_input maxlength=MAX_DECISION_REASON_CHARS.to_string()
                        prop:value=reason on:input=move |ev| reason.set(event_target_value(&ev))/>
                    <button type="submit" class="deny-confirm" data-testid="deny-confirm"
                        disabled=move || busy.get()>"Deny this call"</button>
                    <button type="button" class="secondary" on:click=move |_| cancel()>"Cancel"</button>
                </form>
            </Show>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(decision: Option<Decision>, by: Option<DecidedBy>, from: Option<&str>) -> Approval {
        Approval {
            asked_at: 1_000,
            decision,
            reason: None,
            decided_at: decision.map(|_| 4_400),
            by,
            from: from.map(str::to_string),
        }
    }

    #[test]
    fn annotations_read_as_words() {
        assert_eq!(annotation_words(None), "may change things");
        let a = |r, d, o| ToolAnnotations {
            read_only: r,
            destructive: d,
            idempotent: None,
            open_world: o,
        };
        assert_eq!(
            annotation_words(Some(&a(Some(true), None, None))),
            "reads only"
        );
        assert_eq!(
            annotation_words(Some(&a(Some(false), Some(true), Some(true)))),
            "may change or delete · reaches outside"
        );
        assert_eq!(
            annotation_words(Some(&a(Some(false), Some(false), None))),
            "may change things"
        );
    }

    #[test]
    fn a_decided_call_says_what_who_and_when() {
        let at = |ms: Millis| format!("t{ms}");
        let tab = Some("tab-1");
        let a = approval(Some(Decision::AllowOnce), Some(DecidedBy::Page), tab);
        assert_eq!(
            decided_line(&a, tab, at).unwrap(),
            "Allowed once · from this tab · t4400"
        );
        let mut a = approval(
            Some(Decision::RejectOnce),
            Some(DecidedBy::Page),
            Some("tab-2"),
        );
        a.reason = Some("not now".into());
        assert_eq!(
            decided_line(&a, tab, at).unwrap(),
            "Denied: not now · from another tab · t4400"
        );
        let a = approval(Some(Decision::TimedOut), None, None);
        assert_eq!(
            decided_line(&a, tab, at).unwrap(),
            "Timed out — nobody decided · t4400"
        );
        let a = approval(Some(Decision::AllowAlways), Some(DecidedBy::Cli), None);
        assert_eq!(
            decided_line(&a, tab, at).unwrap(),
            "Always allowed · from the CLI · t4400"
        );
        assert_eq!(decided_line(&approval(None, None, None), tab, at), None);
    }

    #[test]
    fn long_arguments_are_cut_with_their_length() {
        assert_eq!(bounded("abc", 5), ("abc".into(), None));
        assert_eq!(bounded("abcdef", 3), ("abc…".into(), Some(6)));
    }
}
