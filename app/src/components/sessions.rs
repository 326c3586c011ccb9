//! The sessions the list shows, each in a signal of its own: shared by the list, the open
//! chat and the banners, so a session's change (one per run event of the open session, or a
//! refresh that finds it changed) wakes its own row, not the whole list.
use super::set_if_changed;
use crate::wire::{Session, SessionId};
use leptos::prelude::*;
use std::collections::HashMap;

/// One listed session: its id (what the list is keyed by) and its state.
pub type Row = (SessionId, ArcRwSignal<Session>);

/// Every session the list shows, in the list's order.
#[derive(Clone, Copy)]
pub struct Sessions {
    rows: RwSignal<Vec<Row>>,
    /// Bumped by each refresh of the list: what shows a time relative to now ("in 5 min")
    /// reads it, and is redrawn that often.
    pub refreshed: RwSignal<u32>,
}

impl Sessions {
    pub(super) fn new() -> Self {
        Sessions {
            rows: RwSignal::new(Vec::new()),
            refreshed: RwSignal::new(0),
        }
    }

    /// The rows, in order (tracked: wakes when a session is added, dropped or moved, not
    /// when one changes).
    pub fn rows(&self) -> Vec<Row> {
        self.rows.get()
    }

    /// How many sessions are shown (untracked).
    pub fn len_untracked(&self) -> usize {
        self.rows.with_untracked(Vec::len)
    }

    /// Whether none is shown (tracked).
    pub fn is_empty(&self) -> bool {
        self.rows.with(Vec::is_empty)
    }

    /// `f` of every shown session, tracking each.
    pub fn with_each<T>(&self, mut f: impl FnMut(&Session) -> Option<T>) -> Vec<T> {
        self.rows
            .with(|rows| rows.iter().filter_map(|(_, s)| s.with(&mut f)).collect())
    }

    /// Whether any shown session is so (tracking each until one is).
    pub fn any(&self, f: impl Fn(&Session) -> bool) -> bool {
        self.rows.with(|rows| rows.iter().any(|(_, s)| s.with(&f)))
    }

    /// The title of session `id` when it is shown (tracked).
    pub fn title_of(&self, id: &SessionId) -> Option<String> {
        self.rows.with(|rows| {
            rows.iter()
                .find(|(x, _)| x == id)
                .map(|(_, s)| s.with(|s| s.title.clone()))
        })
    }

    /// Shows `list` instead: a session shown already keeps its row (set only when changed),
    /// and the list itself changes only when its sessions or their order do.
    pub fn replace(&self, list: Vec<Session>) {
        let mut old: HashMap<SessionId, ArcRwSignal<Session>> = self
            .rows
            .with_untracked(|rows| rows.iter().cloned().collect());
        let rows: Vec<Row> = list
            .into_iter()
            .map(|s| match old.remove(&s.id) {
                Some(row) => {
                    let id = s.id.clone();
                    set_if_changed(&row, s);
                    (id, row)
                }
                None => (s.id.clone(), ArcRwSignal::new(s)),
            })
            .collect();
        let moved = self
            .rows
            .with_untracked(|shown| !shown.iter().map(|r| &r.0).eq(rows.iter().map(|r| &r.0)));
        if moved {
            self.rows.set(rows);
        }
    }

    /// Adds `list` (an older page) after the shown sessions, but for those shown already.
    pub fn extend(&self, list: Vec<Session>) {
        self.rows.update(|rows| {
            for s in list {
                match rows.iter().find(|(id, _)| *id == s.id) {
                    Some((_, row)) => set_if_changed(row, s),
                    None => rows.push((s.id.clone(), ArcRwSignal::new(s))),
                }
            }
        });
    }

    /// Puts a session's new state in the list (adding it first when new): its row alone wakes,
    /// and only when it changed.
    pub fn upsert(&self, s: Session) {
        let row = self.rows.with_untracked(|rows| {
            rows.iter()
                .find(|(id, _)| *id == s.id)
                .map(|(_, row)| row.clone())
        });
        match row {
            Some(row) => set_if_changed(&row, s),
            None => self
                .rows
                .update(|rows| rows.insert(0, (s.id.clone(), ArcRwSignal::new(s)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, title: &str) -> Session {
        serde_json::from_value(serde_json::json!({
            "id": id, "title": title, "model": "demo", "status": "idle", "created_at": 1_000,
        }))
        .expect("a session")
    }

    /// A refresh that finds the same sessions sets no signal but the changed session's.
    #[test]
    fn a_refresh_wakes_only_what_changed() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let owner = Owner::new();
        owner.with(|| {
            let list = Sessions::new();
            list.replace(vec![session("s_1", "a"), session("s_2", "b")]);
            let rows = list.rows();
            let (first, second) = (rows[0].1.clone(), rows[1].1.clone());
            let runs = Arc::new(AtomicUsize::new(0));
            let title = Memo::new({
                let (runs, first) = (runs.clone(), first.clone());
                move |_| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    first.with(|s| s.title.clone())
                }
            });
            let order = Memo::new(move |_| list.rows().len());
            assert_eq!(
                (title.get_untracked(), order.get_untracked()),
                ("a".into(), 2)
            );

            list.replace(vec![session("s_1", "a"), session("s_2", "renamed")]);
            assert_eq!(title.get_untracked(), "a");
            assert_eq!(
                runs.load(Ordering::Relaxed),
                1,
                "an unchanged row is not set"
            );
            assert_eq!(second.get_untracked().title, "renamed", "a changed one is");

            list.upsert(session("s_3", "new"));
            assert_eq!(
                list.rows()[0].0,
                SessionId::new("s_3"),
                "a new one goes first"
            );
            assert_eq!(
                list.title_of(&SessionId::new("s_3")).as_deref(),
                Some("new")
            );
            list.upsert(session("s_1", "retitled"));
            assert_eq!(
                title.get_untracked(),
                "retitled",
                "the row is the same signal"
            );

            list.replace(vec![session("s_2", "renamed")]);
            second.update(|s| s.title = "kept".into());
            assert_eq!(
                list.title_of(&SessionId::new("s_2")).as_deref(),
                Some("kept")
            );
            assert_eq!(list.len_untracked(), 1);
        });
    }
}
