//! The session's approval mode and its remembered decisions, in the chat header (CONTRACT
//! §8): which tool calls ask first, a plain word when the session asks for nothing, and each
//! "always" decision with a Forget button.
use super::state::Chat;
use crate::api;
use crate::client::fetch_json;
use crate::wire::{ApprovalMode, GrantDecision, PatchSession, Session, ToolGrant};
use leptos::prelude::*;

/// A mode's words in the select.
pub fn mode_words(m: ApprovalMode) -> &'static str {
    match m {
        ApprovalMode::Policy => "Ask by each tool source's policy",
        ApprovalMode::AskAll => "Ask before every tool call",
        ApprovalMode::Trust => "Trust: ask for nothing",
    }
}

/// A remembered decision in words: "Always allowed: mulligan/rename_session".
pub fn grant_words(g: &ToolGrant) -> String {
    let what = match g.decision {
        GrantDecision::Allow => "Always allowed",
        GrantDecision::Reject => "Always denied",
    };
    format!("{what}: {}/{}", g.server, g.tool)
}

/// Patches the open session; the answer is shown, a refusal goes to the chat's error.
fn patch(chat: Chat, body: PatchSession) {
    let Some(sid) = chat.session_id() else {
        return;
    };
    leptos::task::spawn_local(async move {
        let body = serde_json::to_string(&body).ok();
        let url = api::PATCH_SESSION.url(&[sid.as_str()]);
        match fetch_json::<Session>(api::PATCH_SESSION.method(), &url, body).await {
            Ok(s) => {
                chat.set_session(Some(s));
                chat.refresh_session_state();
            }
            Err(e) => chat.error.set(Some(e.explain())),
        }
    });
}

#[component]
pub fn ApprovalSetting() -> impl IntoView {
    let chat = expect_context::<Chat>();
    let mode = Memo::new(move |_| {
        chat.session()
            .with(|s| s.as_ref().map(|s| s.approval).unwrap_or_default())
    });
    let grants = Memo::new(move |_| {
        chat.session().with(|s| {
            s.as_ref()
                .map(|s| s.tool_grants.clone())
                .unwrap_or_default()
        })
    });
    let change = move |ev: leptos::ev::Event| {
        if let Some(m) = ApprovalMode::parse(&event_target_value(&ev)) {
            let body = PatchSession {
                approval: Some(m),
                ..Default::default()
            };
            patch(chat, body);
        }
    };
    let forget = move |g: ToolGrant| {
        let rest: Vec<ToolGrant> =
            grants.with_untracked(|gs| gs.iter().filter(|x| **x != g).cloned().collect());
        let body = PatchSession {
            tool_grants: Some(rest),
            ..Default::default()
        };
        patch(chat, body);
    };
    let options = ApprovalMode::ALL
        .iter()
        .map(|m| view! { <option value=m.as_str()>{mode_words(*m)}</option> })
        .collect_view();
    view! {
        <label class="approval-mode" title="Which tool calls wait for your decision before they run">
            "Approval "
            <select data-testid="approval-mode" on:change=change prop:value=move || mode.get().as_str()>
                {options}
            </select>
        </label>
        <Show when=move || mode.get() == ApprovalMode::Trust>
            <p class="approval-trust" role="note">
                "This session asks for nothing: every tool call runs without your approval."
            </p>
        </Show>
        <Show when=move || grants.with(|g| !g.is_empty())>
            <ul class="approval-grants" aria-label="Remembered decisions">
                <For each=move || grants.get() key=|g| (g.server.clone(), g.tool.clone(), g.decision) let:g>
                    {
                        let words = grant_words(&g);
                        let label = format!("Forget {}/{}", g.server, g.tool);
                        view! {
                            <li class="approval-grant">
                                <span>{words}</span>
                                <button type="button" class="secondary forget" aria-label=label
                                    on:click=move |_| forget(g.clone())>"Forget"</button>
                            </li>
                        }
                    }
                </For>
            </ul>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_grants_read_as_words() {
        assert_eq!(mode_words(ApprovalMode::Trust), "Trust: ask for nothing");
        let g = ToolGrant {
            server: "mulligan".into(),
            tool: "rename_session".into(),
            decision: GrantDecision::Allow,
        };
        assert_eq!(grant_words(&g), "Always allowed: mulligan/rename_session");
    }
}
