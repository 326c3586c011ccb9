//! Who answered a reply, in plain words under it: the fallback its run took ("answered by
//! demo/demo — demo/demo-overloaded was overloaded") and a model that is sent no tools.
use super::catalogue::use_catalogue;
use super::state::Chat;
use crate::wire::{FellBack, Message, RetryClass, Served};
use leptos::prelude::*;

/// What a model that was passed over did, after its id: "was overloaded". (Only these
/// classes hand a step on; any other reads as "could not answer".)
pub fn class_words(class: &RetryClass) -> &'static str {
    match class {
        RetryClass::Overloaded => "was overloaded",
        RetryClass::RateLimited => "was rate limited",
        RetryClass::ServerError => "had a server error",
        RetryClass::Timeout => "timed out",
        RetryClass::Network => "was unreachable",
        _ => "could not answer",
    }
}

/// The sentence for a run's fallbacks, `None` when every step was answered by the first model
/// it asked. Steps answered alike are told once; "step 2 answered by …" when not all were.
pub fn fallback_sentence(served: &[Served]) -> Option<String> {
    let mut groups: Vec<(Vec<u32>, &str, &[FellBack])> = Vec::new();
    for s in served.iter().filter(|s| !s.after.is_empty()) {
        match groups.last_mut() {
            Some((steps, model, after)) if *model == s.model && *after == s.after.as_slice() => {
                steps.push(s.step)
            }
            _ => groups.push((vec![s.step], &s.model, &s.after)),
        }
    }
    let every = groups.len() == 1 && groups[0].0.len() == served.len();
    let mut out = String::new();
    for (steps, model, after) in &groups {
        if !out.is_empty() {
            out.push_str("; ");
        }
        if !every {
            out.push_str(if steps.len() == 1 { "step " } else { "steps " });
            for (i, n) in steps.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&n.to_string());
            }
            out.push(' ');
        }
        out.push_str("answered by ");
        out.push_str(model);
        out.push_str(" — ");
        passed_over(after, &mut out);
    }
    (!out.is_empty()).then_some(out)
}

/// Appends what each passed-over model did: "a/x was rate limited, b/x was unreachable".
/// (Strings are pushed, not joined: `join` costs the browser bundle.)
pub fn passed_over(after: &[FellBack], out: &mut String) {
    for (i, f) in after.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&f.model);
        out.push(' ');
        out.push_str(class_words(&f.retry_class));
    }
}

/// The models of `served` (in order, once each), or `fallback` when none is recorded.
pub fn answering_models(served: &[Served], fallback: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in served {
        if !out.contains(&s.model) {
            out.push(s.model.clone());
        }
    }
    if out.is_empty() {
        out.extend(fallback.map(str::to_string));
    }
    out
}

/// Under an agent reply: why an agent stopped when it was not done ("stopped: max_tokens"),
/// which model answered when its run fell back, and "tools are off for <model>" when the
/// catalogue sends a model of it no tools.
#[component]
pub fn ServedNote(message: RwSignal<Message>) -> impl IntoView {
    let chat = expect_context::<Chat>();
    let catalogue = use_catalogue();
    let run_id = Memo::new(move |_| message.with(|m| m.run_id.clone()));
    // A memo of the words alone: other runs' events leave the note as it is.
    let note = Memo::new(move |_| {
        let id = run_id.get()?;
        let session_model = chat.model().get();
        chat.with_run(&id, |r| {
            let served = r.served.as_slice();
            let mut words = r
                .stop_reason
                .as_ref()
                .map(|s| format!("stopped: {s}"))
                .unwrap_or_default();
            if let Some(fell) = fallback_sentence(served) {
                if !words.is_empty() {
                    words.push_str(" · ");
                }
                words.push_str(&fell);
            }
            let models = answering_models(served, session_model.as_deref());
            for (i, m) in models
                .iter()
                .filter(|m| catalogue.is_some_and(|c| c.tools_off(m)))
                .enumerate()
            {
                words.push_str(match (i, words.is_empty()) {
                    (0, true) => "tools are off for ",
                    (0, false) => " · tools are off for ",
                    _ => ", ",
                });
                words.push_str(m);
            }
            (!words.is_empty()).then_some(words)
        })
        .flatten()
    });
    move || note.get().map(|t| view! { <p class="served">{t}</p> })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(step: u32, model: &str, after: &[(&str, &str)]) -> Served {
        Served {
            step,
            model: model.into(),
            after: after
                .iter()
                .map(|(m, c)| FellBack {
                    model: m.to_string(),
                    retry_class: RetryClass::parse(c),
                })
                .collect(),
        }
    }

    #[test]
    fn a_run_that_fell_back_says_who_answered_and_why() {
        let one = [served(
            1,
            "demo/demo",
            &[("demo/demo-overloaded", "overloaded")],
        )];
        assert_eq!(
            fallback_sentence(&one).as_deref(),
            Some("answered by demo/demo — demo/demo-overloaded was overloaded")
        );
        let chain = [served(
            1,
            "c/x",
            &[("a/x", "rate_limited"), ("b/x", "network")],
        )];
        assert_eq!(
            fallback_sentence(&chain).as_deref(),
            Some("answered by c/x — a/x was rate limited, b/x was unreachable")
        );
    }

    #[test]
    fn only_the_steps_that_fell_back_are_named() {
        let tool_turn = [
            served(1, "demo/demo-agent-flaky", &[]),
            served(
                2,
                "demo/demo-agent",
                &[("demo/demo-agent-flaky", "server_error")],
            ),
        ];
        assert_eq!(
            fallback_sentence(&tool_turn).as_deref(),
            Some("step 2 answered by demo/demo-agent — demo/demo-agent-flaky had a server error")
        );
        let both = [
            served(1, "b/x", &[("a/x", "timeout")]),
            served(2, "b/x", &[("a/x", "timeout")]),
        ];
        assert_eq!(
            fallback_sentence(&both).as_deref(),
            Some("answered by b/x — a/x timed out")
        );
    }

    #[test]
    fn no_fallback_no_sentence() {
        assert_eq!(fallback_sentence(&[]), None);
        assert_eq!(fallback_sentence(&[served(1, "a/x", &[])]), None);
    }

    #[test]
    fn the_answering_models_are_the_served_ones_else_the_sessions() {
        let s = [
            served(1, "a/x", &[]),
            served(2, "b/x", &[]),
            served(3, "a/x", &[]),
        ];
        assert_eq!(answering_models(&s, Some("z")), vec!["a/x", "b/x"]);
        assert_eq!(answering_models(&[], Some("z")), vec!["z"]);
        assert!(answering_models(&[], None).is_empty());
    }
}
