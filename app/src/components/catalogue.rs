//! The provider catalogue as the page knows it (`GET /models`, read once): the new-session
//! form's model choices and which models are sent no tools.
use crate::api;
use crate::client::fetch_json;
use crate::wire::{Millis, ModelInfo, ModelList, ModelStatus};
use leptos::prelude::*;

/// The catalogue's models, once read (`None` before, or when reading failed: the model field
/// stays free text).
#[derive(Clone, Copy)]
pub struct Catalogue {
    pub list: RwSignal<Option<ModelList>>,
    asked: StoredValue<bool>,
}

pub fn provide_catalogue() {
    provide_context(Catalogue {
        list: RwSignal::new(None),
        asked: StoredValue::new(false),
    });
}

pub fn use_catalogue() -> Option<Catalogue> {
    use_context::<Catalogue>()
}

impl Catalogue {
    /// Reads the catalogue, the first time only (a failure is not retried: the field stays
    /// free text).
    pub fn load_once(&self) {
        if self.asked.get_value() {
            return;
        }
        self.asked.set_value(true);
        let list = self.list;
        leptos::task::spawn_local(async move {
            let url = api::MODELS.url(&[]);
            if let Ok(models) = fetch_json::<ModelList>(api::MODELS.method(), &url, None).await {
                list.set(Some(models));
            }
        });
    }

    /// Whether the catalogue says `provider` is an ACP agent (CONTRACT §9).
    pub fn is_agent(&self, provider: &str) -> bool {
        self.list.with(|l| {
            l.as_ref().is_some_and(|l| {
                l.models
                    .iter()
                    .any(|m| m.provider == provider && m.kind == "acp")
            })
        })
    }

    /// Whether the catalogue says `model` (an id, or a bare model name) is sent no tools.
    pub fn tools_off(&self, model: &str) -> bool {
        self.list.with(|l| {
            l.as_ref().is_some_and(|l| {
                l.models
                    .iter()
                    .find(|m| names(m, model))
                    .is_some_and(|m| !m.tools)
            })
        })
    }
}

/// Whether `name` (`<provider>/<model>`, or a bare model) names catalogue entry `m`.
pub fn names(m: &ModelInfo, name: &str) -> bool {
    m.id == name
        || m.id
            .strip_prefix(m.provider.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            == Some(name)
}

/// What the model field says of a model beside its id: "default · ok", "cooling until
/// 14:09 · tools off". `at` writes a moment as the operator reads it.
pub fn option_label(m: &ModelInfo, default_model: &str, at: impl Fn(Millis) -> String) -> String {
    let mut words = String::new();
    if m.id == default_model {
        words.push_str("default · ");
    }
    match (&m.status, m.cooling_until) {
        (ModelStatus::Ok, _) => words.push_str("ok"),
        (ModelStatus::Cooling, Some(t)) => {
            words.push_str("cooling until ");
            words.push_str(&at(t));
        }
        (ModelStatus::Down, Some(t)) => {
            words.push_str("down, next probe ");
            words.push_str(&at(t));
        }
        (s, _) => words.push_str(s.as_str()),
    }
    if !m.tools {
        words.push_str(" · tools off");
    }
    words
}

/// The model field's choices (a `<datalist>` with id `list_id`): every catalogue model,
/// labelled; empty until the catalogue is read, or when it could not be.
#[component]
pub fn ModelOptions(list_id: &'static str) -> impl IntoView {
    let catalogue = use_catalogue();
    Effect::new(move |_| {
        if let Some(c) = catalogue {
            c.load_once();
        }
    });
    let options = move || {
        catalogue
            .and_then(|c| {
                c.list
                    .with(|l| l.as_ref().map(|l| options(l, crate::clock::at)))
            })
            .unwrap_or_default()
            .into_iter()
            .map(|(value, label)| view! { <option value=value label=label></option> })
            .collect_view()
    };
    view! { <datalist id=list_id>{options}</datalist> }
}

/// The datalist's options: each model's id and its label.
pub fn options(list: &ModelList, at: impl Fn(Millis) -> String + Copy) -> Vec<(String, String)> {
    list.models
        .iter()
        .map(|m| (m.id.clone(), option_label(m, &list.default_model, at)))
        .collect()
}

/// The field's placeholder: the default model once known.
pub fn placeholder() -> String {
    use_catalogue()
        .and_then(|c| c.list.with(|l| l.as_ref().map(|l| l.default_model.clone())))
        .filter(|d| !d.is_empty())
        .map_or_else(
            || "model (default)".to_string(),
            |d| format!("model (default: {d})"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(id: &str, status: &str, until: Option<Millis>, tools: bool) -> ModelInfo {
        ModelInfo {
            id: id.into(),
            provider: id.split('/').next().unwrap_or_default().into(),
            kind: "openai".into(),
            tools,
            status: ModelStatus::parse(status),
            cooling_until: until,
            fallbacks: vec![],
        }
    }

    #[test]
    fn options_say_status_tools_and_default() {
        let at = |ms: Millis| format!("@{ms}");
        assert_eq!(
            option_label(&model("demo/demo", "ok", None, true), "demo/demo", at),
            "default · ok"
        );
        assert_eq!(
            option_label(&model("a/big", "cooling", Some(9), false), "demo/demo", at),
            "cooling until @9 · tools off"
        );
        assert_eq!(
            option_label(&model("a/big", "down", None, true), "", at),
            "down"
        );
    }

    /// Rendered as the server renders views (HTML needs Leptos' `ssr`).
    #[cfg(feature = "ssr")]
    #[test]
    fn options_are_views_with_their_text_escaped() {
        let list = ModelList {
            models: vec![
                model("demo/demo", "ok", None, true),
                model("x/\"><b>", "ok", None, true),
            ],
            default_model: "demo/demo".into(),
        };
        let options = options(&list, |_| String::new());
        assert_eq!(options[0], ("demo/demo".into(), "default · ok".into()));
        let html = options
            .into_iter()
            .map(|(value, label)| view! { <option value=value label=label></option> })
            .collect_view()
            .to_html();
        assert!(
            html.contains(r#"<option value="x/&quot;&gt;&lt;b&gt;" label="ok"></option>"#),
            "{html}"
        );
    }

    #[test]
    fn a_bare_name_finds_its_entry() {
        let m = model("demo/demo-agent", "ok", None, true);
        assert!(names(&m, "demo/demo-agent"));
        assert!(names(&m, "demo-agent"));
        assert!(!names(&m, "agent"));
        assert!(!names(&m, "demo/demo"));
    }
}
