//! Which page the address shows, and moving between pages without a reload: the app has two
//! pages, which need no more of a router than this (the router crate and its generic views
//! cost the bundle 58 KB gzip: bench/README, B5).
use crate::wire::SessionId;
use leptos::prelude::*;

/// A page of the app, read from an address's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Page {
    /// `/`: the welcome text.
    Home,
    /// `/s/{id}`: one session's chat.
    Session(SessionId),
    /// Any other path.
    Unknown,
}

impl Page {
    /// The page a path shows.
    pub fn of_path(path: &str) -> Page {
        if path.is_empty() || path == "/" {
            return Page::Home;
        }
        match path.strip_prefix("/s/") {
            Some(id) => id.parse().map_or(Page::Unknown, Page::Session),
            None => Page::Unknown,
        }
    }

    /// A session page's path.
    pub fn session_path(id: &SessionId) -> String {
        format!("/s/{id}")
    }
}

/// The tab's title: the open session's first, so an operator with several tabs can tell
/// them apart.
pub fn title(session_title: Option<&str>) -> String {
    match session_title.map(str::trim) {
        Some(t) if !t.is_empty() => format!("{t} — Mulligan"),
        _ => "Mulligan".into(),
    }
}

/// Shows `text` as the tab's title (in the browser; nothing on the server).
pub fn set_title(text: &str) {
    #[cfg(feature = "hydrate")]
    document().set_title(text);
    #[cfg(not(feature = "hydrate"))]
    let _ = text;
}

/// The path of the request the server renders a page for (its handler provides it).
#[derive(Clone, Debug)]
pub struct RequestPath(pub String);

/// The page shown, shared by the components that follow or change it.
#[derive(Clone, Copy)]
pub struct Nav {
    page: RwSignal<Page>,
}

impl Nav {
    /// The page shown (tracked).
    pub fn page(&self) -> Page {
        self.page.get()
    }

    /// The page shown, untracked.
    pub fn page_untracked(&self) -> Page {
        self.page.get_untracked()
    }

    /// The open session's id, `None` on other pages (tracked).
    pub fn session_id(&self) -> Option<SessionId> {
        self.page.with(|p| match p {
            Page::Session(id) => Some(id.clone()),
            _ => None,
        })
    }

    /// Whether `id`'s page is shown (tracked).
    pub fn is_session(&self, id: &SessionId) -> bool {
        self.page
            .with(|p| matches!(p, Page::Session(open) if open == id))
    }

    /// Shows `path`'s page and puts it in the history, as a followed link does.
    pub fn go(&self, path: &str) {
        #[cfg(feature = "hydrate")]
        if let Ok(history) = window().history() {
            let null = wasm_bindgen::JsValue::NULL;
            // A link to the page shown adds no step to the history.
            let _ = match window().location().pathname().is_ok_and(|p| p == path) {
                true => history.replace_state_with_url(&null, "", Some(path)),
                false => history.push_state_with_url(&null, "", Some(path)),
            };
        }
        self.page.set(Page::of_path(path));
    }
}

/// Provides [`Nav`] from the address: the request's on the server, the location's in the
/// browser, which then follows links to the app's pages and the history's back and forward
/// without reloading.
pub fn provide_nav() -> Nav {
    #[cfg(feature = "hydrate")]
    let page = Page::of_path(&window().location().pathname().unwrap_or_default());
    // Without a path, the server renders the page for an address no route took.
    #[cfg(not(feature = "hydrate"))]
    let page = use_context::<RequestPath>().map_or(Page::Unknown, |p| Page::of_path(&p.0));
    let nav = Nav {
        page: RwSignal::new(page),
    };
    provide_context(nav);
    #[cfg(feature = "hydrate")]
    browser::listen(nav);
    nav
}

/// The page's [`Nav`] (a standalone one showing the home page where none was provided).
pub fn use_nav() -> Nav {
    use_context::<Nav>().unwrap_or_else(|| Nav {
        page: RwSignal::new(Page::Home),
    })
}

#[cfg(feature = "hydrate")]
mod browser {
    use super::{Nav, Page};
    use leptos::prelude::*;
    use wasm_bindgen::JsCast;

    /// Follows the history's back and forward, and clicks on links to the app's own pages.
    pub fn listen(nav: Nav) {
        let on_history = window_event_listener(leptos::ev::popstate, move |_| {
            let path = window().location().pathname().unwrap_or_default();
            nav.page.set(Page::of_path(&path));
        });
        let on_click = window_event_listener(leptos::ev::click, move |ev| {
            if let Some(path) = own_page_link(&ev) {
                ev.prevent_default();
                nav.go(&path);
            }
        });
        on_cleanup(move || {
            on_history.remove();
            on_click.remove();
        });
    }

    /// The path of the link a plain left click followed, if it leads to one of the app's
    /// pages on this origin; `None` for a click that opens a new tab or window, a download, a
    /// link to another target or site, or one the page already handled.
    fn own_page_link(ev: &web_sys::MouseEvent) -> Option<String> {
        if ev.default_prevented()
            || ev.button() != 0
            || ev.meta_key()
            || ev.alt_key()
            || ev.ctrl_key()
            || ev.shift_key()
        {
            return None;
        }
        let target: web_sys::Element = ev.target()?.dyn_into().ok()?;
        let link: web_sys::HtmlAnchorElement = target.closest("a[href]").ok()??.dyn_into().ok()?;
        let target = link.target();
        if link.has_attribute("download") || !(target.is_empty() || target == "_self") {
            return None;
        }
        if link.origin() != window().location().origin().ok()? {
            return None;
        }
        let path = link.pathname();
        (Page::of_path(&path) != Page::Unknown).then_some(path)
    }
}

#[cfg(test)]
mod tests {
    use super::Page;
    use crate::wire::SessionId;

    #[test]
    fn a_path_names_its_page() {
        assert_eq!(Page::of_path("/"), Page::Home);
        assert_eq!(Page::of_path(""), Page::Home);
        let abc: SessionId = "abc".parse().unwrap();
        assert_eq!(Page::of_path("/s/abc"), Page::Session(abc));
        let x1: SessionId = "x-1".parse().unwrap();
        assert_eq!(Page::of_path(&Page::session_path(&x1)), Page::Session(x1));
        assert_eq!(
            super::title(Some("fix the build")),
            "fix the build — Mulligan"
        );
        assert_eq!(super::title(Some("  ")), "Mulligan");
        assert_eq!(super::title(None), "Mulligan");
        for other in [
            "/s/",
            "/s/a/b",
            "/s/a%20b",
            "/sessions",
            "/api/v1/sessions",
            "/s",
        ] {
            assert_eq!(Page::of_path(other), Page::Unknown, "{other}");
        }
    }
}
