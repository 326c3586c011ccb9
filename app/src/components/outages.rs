//! One banner per model that is out or cooling down (CONTRACT §7), on every page: "demo/x
//! has been down since 14:02 · 7 turns waiting · next try 14:09", from `GET /providers`,
//! looked at again every few seconds while one shows or a listed session waits on a
//! background retry. The line about tool calls waiting for approval shows with them
//! ([`super::approvals`]).
use super::use_sessions;
use crate::api;
use crate::client::fetch_json;
use crate::clock::at;
use crate::wire::{Millis, ModelStatus, ProviderHealth, ProvidersResponse};
use leptos::prelude::*;

/// How often the banners are looked at again while they matter.
const REFRESH_MS: u64 = 5000;

/// The banner's words for one model; `at` writes a moment.
pub fn words(h: &ProviderHealth, at: impl Fn(Millis) -> String) -> String {
    let state = match (&h.status, h.since) {
        (ModelStatus::Down, Some(since)) => format!("has been down since {}", at(since)),
        (ModelStatus::Down, None) => "is down".to_string(),
        (_, Some(since)) => format!("has been cooling down since {}", at(since)),
        (_, None) => "is cooling down".to_string(),
    };
    let mut line = format!("{} {state}", h.model);
    match h.waiting_turns {
        0 => {}
        1 => line.push_str(" · 1 turn waiting"),
        n => line.push_str(&format!(" · {n} turns waiting")),
    }
    if let Some(next) = h.next_probe_at {
        line.push_str(&format!(" · next try {}", at(next)));
    }
    line
}

#[component]
pub fn OutageBanners() -> impl IntoView {
    let models = RwSignal::new(Vec::<ProviderHealth>::new());
    let sessions = use_sessions();
    let load = move || {
        leptos::task::spawn_local(async move {
            let url = api::PROVIDERS.url(&[]);
            // A failed look keeps what shows: the next one tries again.
            if let Ok(p) =
                fetch_json::<ProvidersResponse>(api::PROVIDERS.method(), &url, None).await
            {
                models.set(p.models);
            }
        })
    };
    // Worth watching: a banner shows, or a listed session waits on a background retry (the
    // turns that park behind an outage).
    let watching = Memo::new(move |_| {
        models.with(|m| !m.is_empty()) || sessions.any(|s| s.waiting_retry.is_some())
    });
    Effect::new(move |first: Option<()>| {
        let watch = watching.get();
        if first.is_none() || watch {
            load();
        }
        if watch {
            if let Ok(h) = set_interval(load, std::time::Duration::from_millis(REFRESH_MS)) {
                on_cleanup(move || h.clear());
            }
        }
    });
    view! {
        <super::approvals::ApprovalsLine/>
        <Show when=move || models.with(|m| !m.is_empty())>
            <div class="outages" role="status" aria-label="Models out">
                <For each=move || models.get() key=|h| (h.model.clone(), h.status == ModelStatus::Down, h.since, h.waiting_turns, h.next_probe_at) let:h>
                    <p class="outage">{words(&h, at)}</p>
                </For>
            </div>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(status: ModelStatus, since: Option<Millis>, waiting: u32) -> ProviderHealth {
        ProviderHealth {
            model: "anthropic/claude-x".into(),
            status,
            since,
            waiting_turns: waiting,
            next_probe_at: Some(9),
        }
    }

    #[test]
    fn a_model_out_says_since_when_how_many_wait_and_the_next_try() {
        let at = |ms: Millis| format!("t{ms}");
        assert_eq!(
            words(&health(ModelStatus::Down, Some(2), 7), at),
            "anthropic/claude-x has been down since t2 · 7 turns waiting · next try t9"
        );
        assert_eq!(
            words(&health(ModelStatus::Down, Some(2), 1), at),
            "anthropic/claude-x has been down since t2 · 1 turn waiting · next try t9"
        );
        let mut cooling = health(ModelStatus::Cooling, None, 0);
        assert_eq!(
            words(&cooling, at),
            "anthropic/claude-x is cooling down · next try t9"
        );
        cooling.next_probe_at = None;
        assert_eq!(words(&cooling, at), "anthropic/claude-x is cooling down");
    }
}
