//! One message of the chat: an operator prompt (with its run's state) or an agent reply
//! (streaming, complete, failed with its classification, or stopped).
use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{
    ErrorCode, Message, MessageStatus, Part, ProvenanceKind, Receipt, Regenerate, RetryClass, Role,
    Run, RunId, RunKind, RunStatus,
};
use leptos::prelude::*;

#[component]
pub fn MessageView(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    // A message's role never changes: read once, so nothing here re-renders on a delta.
    let role = message.with_untracked(|m| m.role);
    let look = Memo::new(move |_| message.with(|m| (m.status, m.superseded)));
    let run_attr = Memo::new(move |_| message.with(|m| m.run_id.clone()));
    let class = move || {
        let (status, superseded) = look.get();
        let role = if role == Role::Operator {
            "operator"
        } else {
            "agent"
        };
        let status = match status {
            Some(MessageStatus::Streaming) => " streaming",
            Some(MessageStatus::Failed) => " failed",
            Some(MessageStatus::Cancelled) => " cancelled",
            _ => "",
        };
        let folded = if superseded { " superseded" } else { "" };
        format!("msg {role}{status}{folded}")
    };
    // The operator prompt's latest run, for "queued"/"held" tags.
    let prompt_run = move || {
        let id = message.with_untracked(|m| m.id.clone());
        chat.with_prompt_run(&id, Run::clone)
    };
    let shown = move || !look.get().1 || chat.show_superseded.get();
    // The continuation a retry added: Mulligan's note, not the operator's words (what the
    // model was told shows on hover).
    if let Some(note) = message.with_untracked(continuation_note) {
        let told = message.with_untracked(|m| m.content.clone());
        let class = move || {
            if look.get().1 {
                "msg note superseded"
            } else {
                "msg note"
            }
        };
        return view! {
            <Show when=shown>
                <li class=class data-role="note" title=told.clone()>
                    <strong>"Mulligan:"</strong>" "{note.clone()}
                </li>
            </Show>
        }
        .into_any();
    }
    // An agent's reply is drawn from its Markdown; the operator's words show as typed.
    let content = move || {
        if role == Role::Agent {
            // The text since the last tool call, read in place (never copied per delta).
            let tail = move |f: &mut dyn FnMut(&str)| message.with(|m| f(m.text_after_parts()));
            view! { {super::tool_call::parts_view(message)} {super::prose::markdown(tail)} }
                .into_any()
        } else {
            (move || message.with(|m| m.content.clone())).into_any()
        }
    };
    view! {
        <Show when=shown>
        <li class=class data-role=if role == Role::Operator { "operator" } else { "agent" }
            data-run=move || run_attr.get().map(String::from)>
            <div class="who">
                {if role == Role::Operator { "You" } else { "Agent" }}
                {(role == Role::Operator).then_some(move || prompt_run().and_then(|r| run_tag(chat, &r)))}
                // At the top of the reply: it does not move while the text grows below it.
                {(role == Role::Agent).then(|| view! { <StopButton message/> })}
            </div>
            // Tool calls show where they happened; the text since the last one streams into
            // its own blocks, and a delta redraws only the block it changed.
            <div class=if role == Role::Agent { "content md" } else { "content" }>{content()}</div>
            {(role == Role::Agent).then(|| view! { <ReplyState message/> })}
            {(role == Role::Agent).then(|| view! { <super::served::ServedNote message/> <super::timeline::Timeline message/> })}
        </li>
        </Show>
    }
    .into_any()
}

/// What a retry's continuation message (an operator-role message the server adds, marked
/// `auto_resume`) says in plain words: "cut off — the provider was overloaded; the turn
/// continues." `None` for any other message.
pub fn continuation_note(m: &Message) -> Option<String> {
    let marked = m
        .provenance
        .as_ref()
        .is_some_and(|p| p.kind == ProvenanceKind::AutoResume);
    if m.role != Role::Operator || !marked {
        return None;
    }
    // "Your previous turn was cut off by stream interrupted (…). Check what …"
    let class = m
        .content
        .strip_prefix("Your previous turn was cut off by ")
        .and_then(|rest| rest.split(['(', '.']).next())
        .map(|word| RetryClass::parse(&word.trim().replace(' ', "_")))
        .unwrap_or_else(|| RetryClass::Other(String::new()));
    let why = match class {
        RetryClass::StreamInterrupted => "the reply stream broke off".to_string(),
        class => {
            let said = super::retry_banner::describe(&class).trim_end_matches('.');
            let said = said.replacen(" is ", " was ", 1);
            match said.strip_prefix("The ") {
                Some(rest) => format!("the {rest}"),
                None => said,
            }
        }
    };
    Some(format!("cut off — {why}; the turn continues."))
}

fn run_tag(chat: Chat, r: &Run) -> Option<AnyView> {
    match r.status {
        RunStatus::Queued if r.held_by.is_some() => {
            let release = move |_| {
                let Some(sid) = chat.session_id() else {
                    return;
                };
                leptos::task::spawn_local(async move {
                    let url = api::RELEASE.url(&[sid.as_str()]);
                    let method = api::RELEASE.method();
                    if let Err(e) =
                        fetch_json::<serde::de::IgnoredAny>(method, &url, Some("{}".into())).await
                    {
                        chat.error.set(Some(e.explain()));
                    }
                });
            };
            Some(
                view! {
                    <span class="tag held">"held behind a failed turn"</span>
                    <button class="secondary" on:click=release>"Run them now"</button>
                }
                .into_any(),
            )
        }
        RunStatus::Queued => Some(view! { <span class="tag queued">"queued"</span> }.into_any()),
        _ => None,
    }
}

/// Stop, shown while the reply's run is queued or running: from the run's status alone, so
/// the button stays the same DOM node while text streams.
#[component]
fn StopButton(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let error = RwSignal::new(None::<String>);
    let run_id = Memo::new(move |_| message.with(|m| m.run_id.clone()));
    let active = Memo::new(move |_| {
        let run = run_id.with(|id| id.as_ref().and_then(|id| chat.with_run(id, |r| r.status)));
        match run {
            Some(s) => s.is_active(),
            None => message.with(|m| m.status == Some(MessageStatus::Streaming)),
        }
    });
    let stop = move |_| {
        if let Some(run_id) = run_id.get_untracked() {
            chat.stop_run(run_id, error);
        }
    };
    view! {
        <Show when=move || active.get()>
            <button class="stop" on:click=stop>"Stop"</button>
            <span class="error">{move || error.get()}</span>
        </Show>
    }
}

#[component]
fn ReplyState(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let stop_error = RwSignal::new(None::<String>);
    let run_id = Memo::new(move |_| message.with(|m| m.run_id.clone()));
    let status = Memo::new(move |_| message.with(|m| m.status));
    // Stop shows while the reply's run is queued or running: from the run's status alone, so
    // the button stays the same DOM node while text streams.
    let run_active = Memo::new(move |_| {
        let run = run_id.with(|id| id.as_ref().and_then(|id| chat.with_run(id, |r| r.status)));
        match run {
            Some(s) => s.is_active(),
            None => status.get() == Some(MessageStatus::Streaming),
        }
    });
    // Regenerate the reply the operator sees: `if_last_run` is its run, so a click in a
    // second tab (or after Tier 2 went) finds it taken and follows the new run instead.
    let regenerate = move |_| {
        let Some(run_id) = run_id.get_untracked() else {
            return;
        };
        let Some(sid) = chat.session_id() else {
            return;
        };
        let anchor = chat.runs.with_untracked(|rs| {
            rs.iter()
                .find(|r| r.id == run_id)
                .map(|r| r.anchor_message_id.clone())
        });
        let Some(anchor) = anchor else { return };
        // Tools may have changed things: running them again is the operator's call.
        let ran = tool_calls_ran(&chat, message, &run_id);
        if ran > 0 && !confirm(&regenerate_question(ran)) {
            return;
        }
        chat.notice.set(None);
        stop_error.set(None);
        leptos::task::spawn_local(async move {
            let url = api::REGENERATE.url(&[sid.as_str(), anchor.as_str()]);
            let body = serde_json::to_string(&Regenerate {
                if_last_run: Some(run_id),
                manual: true,
                from: None,
            })
            .ok();
            match fetch_json::<Receipt>("POST", &url, body).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::RegenerateStale => {
                    chat.notice.set(Some(
                        "Already retried in another tab — following the new run.".into(),
                    ));
                    chat.resync();
                }
                Err(e) => stop_error.set(Some(e.explain())),
            }
        });
    };
    let regenerate_button = move || {
        (!run_active.get()).then(|| {
            view! { <button class="secondary" on:click=regenerate>"Regenerate"</button> }
        })
    };
    let state = move || match status.get() {
        Some(MessageStatus::Streaming) => view! {
            <span class="typing" aria-label="writing">"▍"</span>
            {move || tier1_wait(&chat, run_id.get())}
        }
        .into_any(),
        Some(MessageStatus::Failed) => {
            let (class, retryable, error) = message.with_untracked(|m| {
                (
                    m.retry
                        .as_ref()
                        .map(|r| r.retry_class.clone())
                        .unwrap_or_else(|| RetryClass::Other("unknown".into())),
                    m.retry.as_ref().is_some_and(|r| r.retryable),
                    m.error_message.clone().unwrap_or_default(),
                )
            });
            let tip = format!(
                "class: {class} ({})",
                if retryable {
                    "retryable"
                } else {
                    "not retryable"
                }
            );
            let now = crate::clock::now_ms();
            let error =
                crate::clock::localize_http_dates(&error, |ms| crate::clock::at_with_hint(ms, now));
            view! {
                <strong>"Failed"</strong>
                <span class="class" title=tip>{super::retry_banner::label(&class)}</span>
                <p class="error-message">{error}</p>
            }
            .into_any()
        }
        Some(MessageStatus::Cancelled) => view! { <span class="tag">"Stopped"</span> }.into_any(),
        _ => message
            .with_untracked(|m| provenance_tag(&chat, m))
            .into_any(),
    };
    let failed = move || status.get() == Some(MessageStatus::Failed);
    view! {
        <div class="reply-state" class:failure=failed role=move || failed().then_some("status")>
            {state}
            {regenerate_button}
            <span class="error">{move || stop_error.get()}</span>
        </div>
    }
}

/// How many tool calls the reply's turn ran: the calls it shows, or its run's count if more.
fn tool_calls_ran(chat: &Chat, message: RwSignal<Message>, run_id: &RunId) -> u32 {
    let shown = message.with_untracked(|m| {
        m.parts.iter().flatten().fold(0u32, |n, p| match p {
            Part::ToolCall { .. } => n.saturating_add(1),
            Part::Text { .. } => n,
        })
    });
    let executed = chat.runs.with_untracked(|rs| {
        rs.iter()
            .find(|r| r.id == *run_id)
            .map_or(0, |r| r.tools_executed)
    });
    shown.max(executed)
}

fn regenerate_question(n: u32) -> String {
    if n == 1 {
        "This turn ran 1 tool call; regenerating may run it again. Regenerate?".into()
    } else {
        format!("This turn ran {n} tool calls; regenerating may run them again. Regenerate?")
    }
}

/// Asks the operator in the browser's own dialog; true (go on) where there is no window.
fn confirm(question: &str) -> bool {
    #[cfg(feature = "hydrate")]
    {
        web_sys::window()
            .and_then(|w| w.confirm_with_message(question).ok())
            .unwrap_or(false)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = question;
        true
    }
}

/// "Provider busy — attempt 2 of 3 in 4 s" while Tier 1 waits before this run's next attempt.
fn tier1_wait(chat: &Chat, run_id: Option<crate::wire::RunId>) -> Option<String> {
    let a = chat.attempt.get()?;
    if Some(&a.run_id) != run_id.as_ref() {
        return None;
    }
    let of = chat
        .config
        .with(|c| c.as_ref().map(|c| c.tier1_max_attempts))
        .unwrap_or(0);
    let secs = (a.retry_in_ms + 999) / 1000;
    Some(if of > 0 {
        format!("Provider busy — attempt {} of {of} in {secs} s", a.n)
    } else {
        format!("Provider busy — attempt {} in {secs} s", a.n)
    })
}

/// Marks a reply that a retry produced: resend, continuation or regenerate, with its attempt.
fn provenance_tag(chat: &Chat, m: &Message) -> Option<AnyView> {
    let p = m.provenance.as_ref()?;
    let kind = chat.runs.with_untracked(|rs| {
        rs.iter()
            .find(|r| Some(&r.id) == m.run_id.as_ref())
            .map(|r| r.kind)
    });
    let what = match kind {
        Some(RunKind::Resend) => "resent",
        Some(RunKind::Continuation) => "continued",
        Some(RunKind::Regenerate) => "regenerated",
        _ => "retried",
    };
    let label = match p.attempt {
        Some(n) => format!("{what} (attempt {n})"),
        None => what.to_string(),
    };
    Some(view! { <span class="tag">{label}</span> }.into_any())
}

#[cfg(test)]
mod tests {
    use super::continuation_note;
    use crate::wire::{Message, MessageId, PromptId, Provenance, ProvenanceKind, Role, SessionId};

    fn message(role: Role, content: &str, kind: Option<ProvenanceKind>) -> Message {
        Message {
            id: MessageId::new("m_1"),
            session_id: SessionId::new("s_1"),
            role,
            content: content.into(),
            created_at: 0,
            superseded: false,
            run_id: None,
            status: None,
            error_message: None,
            retry: None,
            provenance: kind.map(|kind| Provenance {
                kind,
                prompt_id: Some(PromptId::new("m_0")),
                attempt: Some(1),
                manual: Some(false),
                from: None,
            }),
            delta_seq: None,
            parts: None,
        }
    }

    fn continuation(content: &str) -> Message {
        message(Role::Operator, content, Some(ProvenanceKind::AutoResume))
    }

    #[test]
    fn a_continuation_reads_as_mulligans_note_in_plain_words() {
        let note = |c: &str| continuation_note(&continuation(c));
        let then =
            ". Check what already finished before going on, then continue from where you stopped.";
        assert_eq!(
            note(&format!(
                "Your previous turn was cut off by overloaded (Overloaded: busy){then}"
            ))
            .as_deref(),
            Some("cut off — the provider was overloaded; the turn continues.")
        );
        assert_eq!(
            note(&format!(
                "Your previous turn was cut off by stream interrupted{then}"
            ))
            .as_deref(),
            Some("cut off — the reply stream broke off; the turn continues.")
        );
        assert_eq!(
            note(&format!(
                "Your previous turn was cut off by server error (HTTP 503: try again.){then}"
            ))
            .as_deref(),
            Some("cut off — the provider had a server error; the turn continues.")
        );
        // A class this build does not know, or wording it does not know: still a note.
        assert_eq!(
            note(&format!("Your previous turn was cut off by an error{then}")).as_deref(),
            Some("cut off — the reply failed; the turn continues.")
        );
        assert_eq!(
            note("Continue.").as_deref(),
            Some("cut off — the reply failed; the turn continues.")
        );
    }

    #[test]
    fn only_a_marked_continuation_is_a_note() {
        let text = "Your previous turn was cut off by overloaded. Check what already finished.";
        // The operator typing the same words is the operator speaking.
        assert_eq!(
            continuation_note(&message(Role::Operator, text, None)),
            None
        );
        let regenerate = Some(ProvenanceKind::Regenerate);
        assert_eq!(
            continuation_note(&message(Role::Operator, text, regenerate)),
            None
        );
        // An agent reply of a retry is the agent's.
        let resumed = Some(ProvenanceKind::AutoResume);
        assert_eq!(
            continuation_note(&message(Role::Agent, text, resumed)),
            None
        );
    }
}
