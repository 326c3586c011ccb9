//! Which page the address shows: the session page's route (one definition, which the app's
//! routes, the sidebar and the server's page handler read), and the tab's title.
use crate::wire::SessionId;
use leptos::prelude::*;
use leptos_router::{path, ParamSegment, PartialPathMatch, PossibleRouteMatch, StaticSegment};

/// The session page's route, `/s/:id`.
pub const SESSION_ROUTE: (StaticSegment<&str>, ParamSegment) = path!("/s/:id");

/// The parameter of [`SESSION_ROUTE`] that holds the session's id.
pub const SESSION_PARAM: &str = "id";

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
    /// The page a path shows, matched as the router matches it (an id that cannot be a
    /// session's is no page).
    pub fn of_path(path: &str) -> Page {
        if path.is_empty() || path == "/" {
            return Page::Home;
        }
        SESSION_ROUTE
            .test(path)
            .filter(PartialPathMatch::is_complete)
            .and_then(|m| m.params().into_iter().find(|(k, _)| k == SESSION_PARAM))
            .and_then(|(_, id)| id.parse().ok())
            .map_or(Page::Unknown, Page::Session)
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

/// The page shown, read from the router's location: shared by the components that follow
/// it (the sidebar marks the open session; the chat view follows it).
#[derive(Clone, Copy)]
pub struct Nav {
    page: Memo<Page>,
}

impl Nav {
    /// Whether `id`'s page is shown (tracked).
    pub fn is_session(&self, id: &SessionId) -> bool {
        self.page
            .with(|p| matches!(p, Page::Session(open) if open == id))
    }
}

/// Provides [`Nav`] from the router's location (inside `leptos_router`'s `Router`: the
/// request's address on the server, the browser's in the browser, which the router follows
/// through links and the history without reloading).
pub fn provide_nav() -> Nav {
    let location = leptos_router::hooks::use_location();
    let nav = Nav {
        page: Memo::new(move |_| location.pathname.with(|p| Page::of_path(p))),
    };
    provide_context(nav);
    nav
}

/// The page's [`Nav`] (a standalone one showing the home page where none was provided).
pub fn use_nav() -> Nav {
    use_context::<Nav>().unwrap_or_else(|| Nav {
        page: Memo::new(|_| Page::Home),
    })
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
        assert_eq!(Page::of_path("/s/abc"), Page::Session(abc.clone()));
        assert_eq!(Page::of_path("/s/abc/"), Page::Session(abc));
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
