//! Mulligan's app crate: the CONTRACT §2 wire types and the Leptos UI, compiled for the
//! server (SSR) and for the browser (hydrate).
#![recursion_limit = "256"]
pub mod api;
pub mod client;
pub mod clock;
pub mod components;
pub mod markdown;
pub mod nav;
pub mod page_data;
pub mod tier2;
pub mod wire;

use components::{chat::SessionView, session_list::SessionList};
use leptos::prelude::*;
use nav::Page;

/// The HTML document the server renders around [`App`], with the page's first data (the
/// request's [`page_data::PageData`], when its handler provided one).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    let first = use_context::<page_data::PageData>();
    #[cfg(feature = "ssr")]
    let title = {
        let text = nav::title(first.as_ref().and_then(|d| match &d.session {
            Some(Ok(detail)) => Some(detail.session.title.as_str()),
            _ => None,
        }));
        html_escape::encode_text(&text).into_owned()
    };
    #[cfg(feature = "ssr")]
    let data = first.map(|d| {
        // Data, not script, but with the response's nonce like every `<script>` of the page
        // (its Content-Security-Policy, `server::http::page`).
        let nonce = leptos::nonce::use_nonce();
        view! { <script type="application/json" id=page_data::ELEMENT_ID nonce=nonce inner_html=d.to_script_text()></script> }
    });
    #[cfg(not(feature = "ssr"))]
    let (data, title): (Option<()>, String) = (None, nav::title(None));
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="data:,"/>
                <link id="leptos" rel="stylesheet" href="/pkg/mulligan.css"/>
                // As markup: a text child would carry hydration's marker, which a title shows.
                <title inner_html=title></title>
                <HydrationScripts options/>
                {data}
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    page_data::provide_first_data();
    let nav = nav::provide_nav();
    components::provide_sessions();
    components::catalogue::provide_catalogue();
    let hydrated = components::provide_hydrated();
    // Effects run only in the browser: this marks the page as hydrated (tests wait for it),
    // and the times the server wrote in UTC are redrawn in the browser's time zone.
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(el) = document().document_element() {
            let _ = el.set_attribute("data-hydrated", "true");
        }
        hydrated.set(true);
    });
    // Which kind of page: moving from one session to another keeps the chat view, which
    // follows the open session itself.
    // (Read, not only tracked: a memo computes, and so follows its source, when read.)
    let kind = Memo::new(move |_| std::mem::discriminant(&nav.page()));
    let page = move || {
        let _ = kind.get();
        match nav.page_untracked() {
            Page::Home => Welcome().into_any(),
            Page::Session(_) => view! { <SessionView/> }.into_any(),
            Page::Unknown => view! { <p class="empty">"Nothing here."</p> }.into_any(),
        }
    };
    view! {
        <div class="layout">
            <SessionList/>
            <main class="main">
                <components::outages::OutageBanners/>
                {page}
            </main>
        </div>
    }
}

#[component]
fn Welcome() -> impl IntoView {
    view! {
        <section class="welcome">
            <h1>"Mulligan"</h1>
            <p>
                "Agent sessions that recover from provider failures. Create a session on the \
                 left, or pick one, and send a message."
            </p>
            <p class="hint">
                "On the demo provider, the models " <code>"demo-flaky"</code> ", "
                <code>"demo-overloaded"</code> ", " <code>"demo-quota"</code> ", "
                <code>"demo-drop"</code> ", " <code>"demo-auth"</code> " and "
                <code>"demo-overflow"</code> " show how a turn fails."
            </p>
        </section>
    }
}
