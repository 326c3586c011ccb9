//! An agent's Markdown ([`crate::markdown`]) drawn as Leptos views: text is always text nodes
//! (nothing is read as HTML), links open in a new tab without access to this one, and each
//! code block has a copy button.
use crate::markdown::{parse, Align, Block, Inline};
use leptos::prelude::*;

/// A text's blocks, redrawn as it changes (a reply streaming): each change parses the text
/// again, and only the blocks that differ are drawn again (keyed by place and content), so
/// the blocks above the one growing stay the same nodes.
pub fn markdown(text: Memo<String>) -> impl IntoView {
    let blocks = Memo::new(move |_| text.with(|t| parse(t)));
    view! {
        <For each=move || blocks.get().into_iter().enumerate() key=|b| b.clone() let:b>
            {block(b.1)}
        </For>
    }
}

fn blocks(bs: Vec<Block>) -> Vec<AnyView> {
    bs.into_iter().map(block).collect()
}

fn block(b: Block) -> AnyView {
    match b {
        Block::Paragraph(i) => view! { <p>{spans(i)}</p> }.into_any(),
        // Under the page's own h1 and h2: a reply's `#` is an h3, down to h5.
        Block::Heading(1, i) => view! { <h3>{spans(i)}</h3> }.into_any(),
        Block::Heading(2, i) => view! { <h4>{spans(i)}</h4> }.into_any(),
        Block::Heading(_, i) => view! { <h5>{spans(i)}</h5> }.into_any(),
        Block::List {
            ordered,
            start,
            items,
        } => {
            let items: Vec<_> = items
                .into_iter()
                .map(|i| view! { <li>{blocks(i)}</li> })
                .collect();
            if ordered {
                let start = (start != 1).then(|| start.to_string());
                view! { <ol start=start>{items}</ol> }.into_any()
            } else {
                view! { <ul>{items}</ul> }.into_any()
            }
        }
        Block::Code { lang, text } => view! {
            <div class="code">
                <div class="code-head"><span>{lang}</span><CopyButton text=text.clone()/></div>
                <pre><code>{text}</code></pre>
            </div>
        }
        .into_any(),
        Block::Table { align, head, rows } => {
            let row = |cells: Vec<Vec<Inline>>, th: bool| {
                let cells: Vec<_> = cells
                    .into_iter()
                    .zip(align.iter().copied())
                    .map(|(c, a)| {
                        let style = match a {
                            Align::None => None,
                            Align::Left => Some("text-align:left"),
                            Align::Center => Some("text-align:center"),
                            Align::Right => Some("text-align:right"),
                        };
                        if th {
                            view! { <th style=style>{spans(c)}</th> }.into_any()
                        } else {
                            view! { <td style=style>{spans(c)}</td> }.into_any()
                        }
                    })
                    .collect();
                view! { <tr>{cells}</tr> }
            };
            let head = row(head, true);
            let rows: Vec<_> = rows.into_iter().map(|r| row(r, false)).collect();
            view! {
                <div class="table"><table><thead>{head}</thead><tbody>{rows}</tbody></table></div>
            }
            .into_any()
        }
        Block::Quote(inner) => view! { <blockquote>{blocks(inner)}</blockquote> }.into_any(),
        Block::Rule => view! { <hr/> }.into_any(),
    }
}

fn spans(is: Vec<Inline>) -> Vec<AnyView> {
    is.into_iter().map(span).collect()
}

fn span(i: Inline) -> AnyView {
    match i {
        Inline::Text(t) => t.into_any(),
        Inline::Code(t) => view! { <code>{t}</code> }.into_any(),
        Inline::Strong(i) => view! { <strong>{spans(i)}</strong> }.into_any(),
        Inline::Em(i) => view! { <em>{spans(i)}</em> }.into_any(),
        // `href` is http, https or mailto (the parser keeps any other link as text).
        Inline::Link { href, text } => view! {
            <a href=href target="_blank" rel="noopener noreferrer">{spans(text)}</a>
        }
        .into_any(),
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
