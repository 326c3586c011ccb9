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
use leptos_router::components::{FlatRoutes, Route, Router};
use leptos_router::hooks::use_params_map;
use leptos_router::path;
use wire::SessionId;

/// The HTML document the server renders around [`App`], titled after the open session (from
/// the request's [`page_data::PageData`], when its handler provided one).
pub fn shell(options: LeptosOptions) -> impl IntoView {
    // The open session's title, as text (escaped like every text Leptos writes); the page
    // keeps it up to date in the browser (`Layout`).
    #[cfg(feature = "ssr")]
    let title = with_context(|d: &page_data::PageData| nav::title(d.session_title()))
        .unwrap_or_else(|| nav::title(None));
    #[cfg(not(feature = "ssr"))]
    let title = nav::title(None);
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <link rel="icon" href="data:,"/>
                <link id="leptos" rel="stylesheet" href="/pkg/mulligan.css"/>
                <title>{title}</title>
                <HydrationScripts options/>
            </head>
            <body>
                <App/>
            </body>
        </html>
    }
}

/// The app: the sidebar, the outage banners and the routed page, inside the router.
#[component]
pub fn App() -> impl IntoView {
    view! {
        <Router>
            <Layout/>
        </Router>
    }
}

/// The page around the routes: what every page shows, and the routes' own view.
#[component]
fn Layout() -> impl IntoView {
    nav::provide_nav();
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
    // The tab's title: the open session's, with the count of waiting calls before it, so an
    // operator with several tabs can tell them apart. The server writes the first in the
    // shell; the browser sets it as text from here on, only when it changed.
    let approvals = components::approvals::use_approvals();
    let tab_title = Memo::new(move |_| match approvals {
        Some(a) => {
            components::approvals::titled(a.waiting.with(Vec::len), a.title.get().as_deref())
        }
        None => nav::title(None),
    });
    Effect::new(move |_| {
        let text = tab_title.get();
        #[cfg(feature = "hydrate")]
        document().set_title(&text);
        #[cfg(not(feature = "hydrate"))]
        let _ = text;
    });
    // Moving from one session to another keeps the chat view (the same route, new
    // parameters), which follows the open session itself.
    view! {
        <div class="layout">
            <SessionList/>
            <main class="main">
                <components::outages::OutageBanners/>
                <FlatRoutes fallback=nothing_here>
                    <Route path=path!("/") view=Welcome/>
                    <Route path=nav::SESSION_ROUTE view=SessionPage/>
                </FlatRoutes>
            </main>
        </div>
    }
}

/// What an address that is no page of the app shows.
fn nothing_here() -> impl IntoView {
    view! { <p class="empty">"Nothing here."</p> }
}

/// [`nav::SESSION_ROUTE`]: the session's chat, or [`nothing_here`] for an id that cannot be
/// a session's.
#[component]
fn SessionPage() -> impl IntoView {
    let params = use_params_map();
    let id = Memo::new(move |_| {
        params.with(|p| {
            p.get_str(nav::SESSION_PARAM)
                .and_then(|id| id.parse::<SessionId>().ok())
        })
    });
    // The chat keeps the last id it showed: it is not drawn for another.
    let sid = Memo::new(move |last: Option<&SessionId>| {
        id.get().or_else(|| last.cloned()).unwrap_or_default()
    });
    let valid = Memo::new(move |_| id.with(Option::is_some));
    move || match valid.get() {
        true => view! { <SessionView sid/> }.into_any(),
        false => nothing_here().into_any(),
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
