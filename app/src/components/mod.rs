//! The operator UI: the session list, the chat view and its parts.
pub mod approval;
pub mod approval_mode;
pub mod approvals;
pub mod catalogue;
pub mod chat;
pub mod composer;
pub mod cooldown_note;
pub mod outages;
pub mod prose;
pub mod reply;
pub mod retrier;
pub mod retry_banner;
pub mod served;
pub mod session_list;
pub mod sessions;
pub mod state;
pub mod timeline;
pub mod tool_call;

use leptos::prelude::*;
pub use sessions::Sessions;

/// Provides the session list, and with it the tool calls waiting for the operator (which
/// every page counts: [`approvals`]).
pub fn provide_sessions() {
    provide_context(Sessions::new());
    approvals::provide_approvals();
}

pub fn use_sessions() -> Sessions {
    expect_context::<Sessions>()
}

/// Whether the page has hydrated: what the server rendered (times in UTC, its clock) is
/// redrawn by the browser once this turns true.
#[derive(Clone, Copy)]
pub struct Hydrated(pub RwSignal<bool>);

pub fn provide_hydrated() -> RwSignal<bool> {
    let flag = RwSignal::new(false);
    provide_context(Hydrated(flag));
    flag
}

/// The [`Hydrated`] flag: a view that reads the browser's clock or time zone tracks it, so it
/// is redrawn after hydration.
pub fn use_hydrated() -> RwSignal<bool> {
    use_context::<Hydrated>().map_or_else(|| RwSignal::new(true), |h| h.0)
}

/// A signal the rest of the page reads and only its owner writes. (Not `ReadSignal`: that
/// is another type for the reactive code to be compiled for, about 1.6 KB of the bundle.)
#[derive(Clone, Copy)]
pub struct Reading<T: Send + Sync + 'static>(RwSignal<T>);

impl<T: Clone + Send + Sync + 'static> Reading<T> {
    /// The value, tracked.
    pub fn get(&self) -> T {
        self.0.get()
    }

    /// Reads the value in place, tracked.
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.0.with(f)
    }

    /// Reads the value in place, untracked.
    pub fn with_untracked<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        self.0.with_untracked(f)
    }
}

/// Sets a signal only to a new value: its readers wake only on a change (nothing, once the
/// signal is disposed).
pub(crate) fn set_if_changed<S, T>(cell: &S, value: T)
where
    S: WithUntracked<Value = T> + Set<Value = T>,
    T: PartialEq,
{
    if cell.try_with_untracked(|v| *v != value) == Some(true) {
        cell.set(value);
    }
}
