//! An agent's Markdown ([`crate::markdown`]) drawn as Leptos views: text is always text nodes
//! (nothing is read as HTML), links open in a new tab without access to this one, and each
//! code block has a copy button.
use crate::markdown::{Align, Block, Inline, Stream};
use leptos::html::custom;
use leptos::prelude::*;
use std::sync::Arc;

/// A text's blocks, drawn as the text grows (a reply streaming). `read` lends the text as
/// it is now (reading it through a signal, so a change is seen).
///
/// The first draw parses the whole text (the server's and the hydrating page's alike).
/// After that each change is drawn when it comes (a streaming reply's text changes once a
/// frame: see `Chat::flush_deltas`), and a draw parses only the open tail ([`Stream`]): a frozen
/// block is parsed and drawn once and keeps its nodes, so the cost of a delta does not grow
/// with the reply, and text selected in it stays selected.
pub fn markdown(read: impl Fn(&mut dyn FnMut(&str)) + Send + Sync + 'static) -> impl IntoView {
    let read = std::sync::Arc::new(read);
    let stream = StoredValue::new(Stream::default());
    // Frozen blocks in parts of [`PART`], keyed by the text's generation (another text
    // starts a new one) and place; the open ones too, each in a signal of its own, so a draw
    // updates an open block's nodes in place (its finished words, and a selection in them,
    // stay) instead of making it anew.
    let parts = RwSignal::new(Vec::<(Key, Part)>::new());
    let open = RwSignal::new(Vec::<(Key, Open)>::new());
    let generations = StoredValue::new(0u32);
    // `live`: false for the first draw (below), true for the later ones (the text changed).
    let draw = {
        let read = read.clone();
        move |live: bool| {
            let mut update = None;
            untrack(|| read(&mut |t| update = stream.try_update_value(|s| s.update(t))));
            let Some(u) = update else { return };
            let mut generation = generations.get_value();
            if u.reset {
                generation = generation.wrapping_add(1);
                generations.set_value(generation);
            }
            let all_frozen = stream.with_value(|s| s.frozen());
            let first = all_frozen - u.frozen.len();
            if u.reset {
                parts.set(Vec::new());
            }
            for (i, b) in u.frozen.into_iter().enumerate() {
                let place = first + i;
                let block = ((generation, place, 0), Arc::new(b));
                if place % PART == 0 {
                    let part = ArcRwSignal::new(vec![block]);
                    parts.update(|ps| ps.push(((generation, place / PART, 0), part)));
                } else if let Some(part) = parts.with_untracked(|ps| ps.last().map(|p| p.1.clone()))
                {
                    part.update(|p| p.push(block));
                }
            }
            // The first draw's open blocks are drawn once: a reply that is not streaming never
            // changes again, and a page of them hydrates no effect per reply. A later draw
            // makes them live (once), then updates them in place.
            if !live {
                let fixed = u.open.into_iter().enumerate();
                let fixed = fixed.map(|(i, b)| ((generation, all_frozen + i, 2), Open::Fixed(b)));
                open.set(fixed.collect());
                return;
            }
            let mut old = open.with_untracked(Vec::clone);
            let cells: Vec<(Key, Open)> = u
                .open
                .into_iter()
                .enumerate()
                .map(|(i, b)| {
                    let key = (generation, all_frozen + i, 1);
                    match old.iter().position(|(k, _)| *k == key) {
                        Some(at) => {
                            let (_, cell) = old.swap_remove(at);
                            if let Open::Live(cell) = &cell {
                                super::set_if_changed(cell, b);
                            }
                            (key, cell)
                        }
                        None => (key, Open::Live(ArcRwSignal::new(b))),
                    }
                })
                .collect();
            let moved =
                open.with_untracked(|o| !o.iter().map(|c| c.0).eq(cells.iter().map(|c| c.0)));
            if moved {
                open.set(cells);
            }
        }
    };
    draw(false);
    #[cfg(feature = "hydrate")]
    Effect::new(move |ran: Option<()>| {
        // Subscribes to the text, which changes at most once a frame (`Chat` applies a
        // frame's deltas together). The first run draws only if the text grew since the
        // first draw (a delta between the two): a long session's replies cost nothing.
        let mut grown = false;
        read(&mut |t| grown = t.len() != stream.with_value(Stream::seen));
        if ran.is_some() || grown {
            draw(true);
        }
    });
    #[cfg(not(feature = "hydrate"))]
    let _ = (read, draw);
    view! {
        <For each=move || parts.get() key=|(key, _)| *key let:((_, part))>
            <div class="part">
                <For each=move || part.get() key=|(key, _)| *key let:((_, b))>
                    {block(Block::clone(&b))}
                </For>
            </div>
        </For>
        <For each=move || open.get() key=|(key, _)| *key let:((_, b))>
            {match b {
                Open::Fixed(b) => block(b),
                // Redrawn from the block's new value: the same elements, their text updated.
                Open::Live(b) => (move || block(b.get())).into_any(),
            }}
        </For>
    }
}

/// A drawn block's key: the text's generation, the block's place, and what it is (0 frozen,
/// 1 open and live, 2 open as first drawn).
type Key = (u32, usize, u8);

/// An open block: as the first draw found it, or live (redrawn in place on each change).
#[derive(Clone)]
enum Open {
    Fixed(Block),
    Live(ArcRwSignal<Block>),
}

/// Frozen blocks, [`PART`] of them (fewer in the last part), in an element of their own:
/// when the open block grows, the browser lays out and paints the reply's parts, not each
/// of its blocks, so a frame's cost does not grow with a long reply (bench B10).
type Part = ArcRwSignal<Vec<(Key, Arc<Block>)>>;

/// How many frozen blocks a [`Part`] holds.
const PART: usize = 32;

/// One element of a reply, with its attributes and children. Every element is drawn through
/// this one type (a tag by name), so the browser bundle holds the code to draw and hydrate
/// it once, not once per tag.
fn el(tag: Tag, attrs: &[(&'static str, &str)], children: Vec<AnyView>) -> AnyView {
    // (An attribute that is never set starts the list, so every element has one.)
    let mut e = custom(tag.name()).attr("class", None::<String>);
    for (k, v) in attrs {
        e = e.attr(*k, Some(v.to_string()));
    }
    e.child(children).into_any()
}

/// The elements a reply is drawn with, each with its name as the server writes it and as the
/// browser makes it.
macro_rules! tags {
    ($($tag:ident $lower:literal $upper:literal,)*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Tag { $($tag,)* }

        impl Tag {
            #[cfg(test)]
            const ALL: &[(Tag, &str, &str)] = &[$((Tag::$tag, $lower, $upper),)*];

            /// The element's name. The server writes it in lower case. The browser makes it
            /// with the upper-case name the DOM reports as an HTML element's `tagName`
            /// (`createElement` lowers it again): Leptos keeps a named element on a redraw
            /// only when its new name equals that `tagName` (Leptos issue 4412), so the
            /// open block's elements, and a selection in them, stay while a reply streams.
            fn name(self) -> &'static str {
                match self {
                    $(Tag::$tag => if cfg!(feature = "hydrate") { $upper } else { $lower },)*
                }
            }
        }
    };
}

tags! {
    P "p" "P",
    H3 "h3" "H3",
    H4 "h4" "H4",
    H5 "h5" "H5",
    Ul "ul" "UL",
    Ol "ol" "OL",
    Li "li" "LI",
    Span "span" "SPAN",
    Code "code" "CODE",
    Div "div" "DIV",
    Pre "pre" "PRE",
    Table "table" "TABLE",
    Thead "thead" "THEAD",
    Tbody "tbody" "TBODY",
    Tr "tr" "TR",
    Th "th" "TH",
    Td "td" "TD",
    Blockquote "blockquote" "BLOCKQUOTE",
    Strong "strong" "STRONG",
    Em "em" "EM",
    A "a" "A",
}

fn blocks(bs: Vec<Block>) -> Vec<AnyView> {
    bs.into_iter().map(block).collect()
}

fn block(b: Block) -> AnyView {
    match b {
        Block::Paragraph(i) => el(Tag::P, &[], spans(i)),
        // Under the page's own h1 and h2: a reply's `#` is an h3, down to h5.
        Block::Heading(level, i) => el(
            [Tag::H3, Tag::H4, Tag::H5][level.clamp(1, 3) as usize - 1],
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
                .map(|i| el(Tag::Li, &[], blocks(i)))
                .collect();
            let start = start.to_string();
            match (ordered, start.as_str()) {
                (false, _) => el(Tag::Ul, &[], items),
                (true, "1") => el(Tag::Ol, &[], items),
                (true, n) => el(Tag::Ol, &[("start", n)], items),
            }
        }
        Block::Code { lang, text } => {
            let head = vec![
                el(Tag::Span, &[], vec![lang.into_any()]),
                view! { <CopyButton text=text.clone()/> }.into_any(),
            ];
            let code = el(Tag::Code, &[], vec![text.into_any()]);
            el(
                Tag::Div,
                &[("class", "code")],
                vec![
                    el(Tag::Div, &[("class", "code-head")], head),
                    el(Tag::Pre, &[], vec![code]),
                ],
            )
        }
        Block::Table { align, head, rows } => {
            let row = |cells: Vec<Vec<Inline>>, tag: Tag| {
                let cells = cells.into_iter().zip(align.iter()).map(|(c, a)| {
                    let style: &[(&str, &str)] = match a {
                        Align::None => &[],
                        Align::Left => &[("style", "text-align:left")],
                        Align::Center => &[("style", "text-align:center")],
                        Align::Right => &[("style", "text-align:right")],
                    };
                    el(tag, style, spans(c))
                });
                el(Tag::Tr, &[], cells.collect())
            };
            let head = el(Tag::Thead, &[], vec![row(head, Tag::Th)]);
            let body = el(
                Tag::Tbody,
                &[],
                rows.into_iter().map(|r| row(r, Tag::Td)).collect(),
            );
            let table = el(Tag::Table, &[], vec![head, body]);
            el(Tag::Div, &[("class", "table")], vec![table])
        }
        Block::Quote(inner) => el(Tag::Blockquote, &[], blocks(inner)),
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
        Inline::Code(t) => el(Tag::Code, &[], vec![t.into_any()]),
        Inline::Strong(i) => el(Tag::Strong, &[], spans(i)),
        Inline::Em(i) => el(Tag::Em, &[], spans(i)),
        // `href` is http, https or mailto (the parser keeps any other link as text).
        Inline::Link { href, text } => el(
            Tag::A,
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
                let _ = set_timeout(move || label.set("Copy"), std::time::Duration::from_secs(2));
            });
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = &text;
    };
    view! { <button type="button" class="secondary copy" on:click=copy>{move || label.get()}</button> }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    /// Each element's two names are one name in two cases.
    #[test]
    fn a_tag_is_one_name_in_two_cases() {
        for (tag, lower, upper) in Tag::ALL {
            assert_eq!(upper.to_ascii_lowercase(), *lower, "{tag:?}");
            assert_eq!(*upper, lower.to_ascii_uppercase(), "{tag:?}");
        }
        assert_eq!(Tag::Blockquote.name(), "blockquote");
    }

    /// A reply's finished blocks are drawn in parts of [`PART`], the open block after them.
    #[test]
    fn finished_blocks_come_in_parts() {
        let text: String = (0..PART + 3)
            .map(|i| format!("paragraph {i}\n\n"))
            .collect();
        let owner = Owner::new();
        let html = owner.with(|| markdown(move |f: &mut dyn FnMut(&str)| f(&text)).to_html());
        assert_eq!(html.matches(r#"<div class="part">"#).count(), 2, "{html}");
        let first_part = html.find(r#"<div class="part">"#).unwrap();
        assert!(html[..first_part].find("<p").is_none(), "{html}");
    }
}
