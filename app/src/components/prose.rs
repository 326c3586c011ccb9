//! An agent's Markdown ([`crate::markdown`]) drawn as Leptos views: text is always text nodes
//! (nothing is read as HTML), links open in a new tab without access to this one, and each
//! code block has a copy button.
use crate::markdown::{parse_sourced, Align, Block, Inline};
use leptos::html::custom;
use leptos::prelude::*;

/// A text's blocks, redrawn as it changes (a reply streaming): each change parses the text
/// again, and only the blocks whose source changed are drawn again (keyed by place and
/// source), so the blocks above the one growing stay the same nodes.
pub fn markdown(text: Memo<String>) -> impl IntoView {
    let blocks = move || {
        text.with(|t| {
            let blocks = parse_sourced(t).into_iter().enumerate();
            blocks
                .map(|(i, (source, b))| ((i, source.to_string()), b))
                .collect::<Vec<_>>()
        })
    };
    view! {
        <For each=blocks key=|(key, _)| key.clone() let:((_, b))>
            {block(b)}
        </For>
    }
}

/// One element of a reply, with its attributes and children. Every element is drawn through
/// this one type (a tag by name), so the browser bundle holds the code to draw and hydrate
/// it once, not once per tag.
fn el(tag: &'static str, attrs: &[(&'static str, &str)], children: Vec<AnyView>) -> AnyView {
    // (An attribute that is never set starts the list, so every element has one.)
    let mut e = custom(tag).attr("class", None::<String>);
    for (k, v) in attrs {
        e = e.attr(*k, Some(v.to_string()));
    }
    e.child(children).into_any()
}

fn blocks(bs: Vec<Block>) -> Vec<AnyView> {
    bs.into_iter().map(block).collect()
}

fn block(b: Block) -> AnyView {
    match b {
        Block::Paragraph(i) => el("p", &[], spans(i)),
        // Under the page's own h1 and h2: a reply's `#` is an h3, down to h5.
        Block::Heading(level, i) => el(
            ["h3", "h4", "h5"][level.clamp(1, 3) as usize - 1],
            &[],
            spans(i),
        ),
        Block::List {
            ordered,
            start,
            items,
        } => {
            let items = items
                .into_iter()
                .map(|i| el("li", &[], blocks(i)))
                .collect();
            let start = start.to_string();
            match (ordered, start.as_str()) {
                (false, _) => el("ul", &[], items),
                (true, "1") => el("ol", &[], items),
                (true, n) => el("ol", &[("start", n)], items),
            }
        }
        Block::Code { lang, text } => {
            let head = vec![
                el("span", &[], vec![lang.into_any()]),
                view! { <CopyButton text=text.clone()/> }.into_any(),
            ];
            let code = el("code", &[], vec![text.into_any()]);
            el(
                "div",
                &[("class", "code")],
                vec![
                    el("div", &[("class", "code-head")], head),
                    el("pre", &[], vec![code]),
                ],
            )
        }
        Block::Table { align, head, rows } => {
            let row = |cells: Vec<Vec<Inline>>, tag: &'static str| {
                let cells = cells.into_iter().zip(align.iter()).map(|(c, a)| {
                    let style: &[(&str, &str)] = match a {
                        Align::None => &[],
                        Align::Left => &[("style", "text-align:left")],
                        Align::Center => &[("style", "text-align:center")],
                        Align::Right => &[("style", "text-align:right")],
                    };
                    el(tag, style, spans(c))
                });
                el("tr", &[], cells.collect())
            };
            let head = el("thead", &[], vec![row(head, "th")]);
            let body = el(
                "tbody",
                &[],
                rows.into_iter().map(|r| row(r, "td")).collect(),
            );
            let table = el("table", &[], vec![head, body]);
            el("div", &[("class", "table")], vec![table])
        }
        Block::Quote(inner) => el("blockquote", &[], blocks(inner)),
        // A void element: drawn by its own view, with no children (not even an empty list).
        Block::Rule => view! { <hr/> }.into_any(),
    }
}

fn spans(is: Vec<Inline>) -> Vec<AnyView> {
    is.into_iter().map(span).collect()
}

fn span(i: Inline) -> AnyView {
    match i {
        Inline::Text(t) => t.into_any(),
        Inline::Code(t) => el("code", &[], vec![t.into_any()]),
        Inline::Strong(i) => el("strong", &[], spans(i)),
        Inline::Em(i) => el("em", &[], spans(i)),
        // `href` is http, https or mailto (the parser keeps any other link as text).
        Inline::Link { href, text } => el(
            "a",
            &[
                ("href", &href),
                ("target", "_blank"),
                ("rel", "noopener noreferrer"),
            ],
            spans(text),
        ),
    }
}

/// Copies a code block's text; says "Copied" (or that it could not) for a moment.
#[component]
fn CopyButton(text: String) -> impl IntoView {
    let label = RwSignal::new("Copy");
    let copy = move |_| {
        #[cfg(feature = "hydrate")]
        {
            let text = text.clone();
            leptos::task::spawn_local(async move {
                let copied = match web_sys::window() {
                    Some(w) => {
                        let promise = w.navigator().clipboard().write_text(&text);
                        wasm_bindgen_futures::JsFuture::from(promise).await.is_ok()
                    }
                    None => false,
                };
                label.set(if copied { "Copied" } else { "Copy failed" });
                set_timeout(move || label.set("Copy"), std::time::Duration::from_secs(2));
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &text;
    };
    view! { <button type="button" class="secondary copy" on:click=copy>{move || label.get()}</button> }
}
