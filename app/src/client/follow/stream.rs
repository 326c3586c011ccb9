//! The leader's one `EventSource` on `GET /events`: opened for every session a tab follows,
//! each from where the tabs need it, opened again when that changes or the stream drops,
//! and each event it reads relayed to the tabs.
use super::{deliver, message, post, with_tab};
use crate::wire::{Following, SessionId, EVENT_NAMES, MAX_FOLLOWED, SESSION_MARKER};
use leptos::prelude::set_timeout;
use std::collections::HashMap;
use std::time::Duration;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// The longest wait before the leader opens a dropped stream again.
const MAX_BACKOFF_MS: u64 = 15_000;

/// The open `EventSource` and its listeners; closed when dropped.
pub(super) struct Source {
    es: web_sys::EventSource,
    _listeners: Vec<Closure<dyn FnMut(web_sys::MessageEvent)>>,
}

impl Drop for Source {
    fn drop(&mut self) {
        self.es.close();
    }
}

/// What the leader keeps: who follows what, and the stream.
#[derive(Default)]
pub(super) struct Leader {
    /// Other tabs' sessions, each with the id the tab last applied, and when it said so.
    pub(super) tabs: HashMap<String, (Vec<(String, i64)>, f64)>,
    /// Sessions a tab has just asked for, from where: the stream must open again.
    pub(super) pending: HashMap<String, i64>,
    pub(super) source: Option<Source>,
    /// The open stream's sessions, each with the last id relayed (or where it started).
    pub(super) streaming: Vec<(String, i64)>,
    /// The session of the events being read (the stream's last marker).
    pub(super) current: Option<String>,
    pub(super) reopen_due: bool,
    /// The stream dropped: open it again even if nothing else changed.
    pub(super) broken: bool,
    pub(super) failures: u32,
}

/// The stream must (re)start `sid` at `after` at the latest.
pub(super) fn ask(leader: &mut Leader, sid: &str, after: i64) {
    let at = leader.pending.entry(sid.to_string()).or_insert(after);
    *at = (*at).min(after);
}

/// Opens the stream again soon (at once for `Duration::ZERO`, in a microtask, which a
/// background tab does not throttle): several changes in a row open it once.
pub(super) fn schedule_reopen(after: Duration) {
    let due = with_tab(|tab| match &mut tab.leader {
        Some(l) if !l.reopen_due => {
            l.reopen_due = true;
            true
        }
        _ => false,
    });
    if !due {
        return;
    }
    if after.is_zero() {
        wasm_bindgen_futures::spawn_local(async { reopen() });
    } else {
        let _ = set_timeout(reopen, after);
    }
}

/// Opens the stream for every session a tab follows, each from where the tabs need it;
/// leaves it as it is when nothing changed.
fn reopen() {
    let url = with_tab(|tab| {
        let own: Vec<(String, i64)> = tab
            .follows
            .iter()
            .map(|f| (f.sid.clone(), f.last))
            .collect();
        let leader = tab.leader.as_mut()?;
        leader.reopen_due = false;
        let mut wanted: Vec<(String, i64)> = Vec::new();
        for (sid, last) in own
            .iter()
            .chain(leader.tabs.values().flat_map(|(l, _)| l.iter()))
        {
            match wanted.iter_mut().find(|(s, _)| s == sid) {
                Some((_, at)) => *at = (*at).min(*last),
                None => wanted.push((sid.clone(), *last)),
            }
        }
        wanted.truncate(MAX_FOLLOWED);
        let same = leader.source.is_some()
            && !leader.broken
            && leader.pending.is_empty()
            && wanted.len() == leader.streaming.len()
            && wanted
                .iter()
                .all(|(s, _)| leader.streaming.iter().any(|(t, _)| t == s));
        if same {
            return None;
        }
        // Where each session starts: where the stream got to, or earlier where a tab has
        // just asked for it; else where its tabs are.
        let starts: Vec<(String, i64)> = wanted
            .into_iter()
            .map(|(sid, lowest)| {
                let streamed = leader
                    .streaming
                    .iter()
                    .find(|(s, _)| *s == sid)
                    .map(|(_, at)| *at);
                let asked = leader.pending.get(&sid).copied();
                let at = match (streamed, asked) {
                    (Some(a), Some(b)) => a.min(b),
                    (Some(a), None) | (None, Some(a)) => a,
                    (None, None) => lowest,
                };
                (sid, at)
            })
            .collect();
        leader.pending.clear();
        leader.broken = false;
        leader.source = None;
        leader.current = None;
        leader.streaming = starts;
        if leader.streaming.is_empty() {
            return None;
        }
        let list = Following(
            leader
                .streaming
                .iter()
                // Ids other tabs sent: one that is not an id is left out.
                .filter_map(|(s, at)| Some((s.parse::<SessionId>().ok()?, Some(*at))))
                .collect(),
        );
        let query = String::from(js_sys::encode_uri_component(&list.to_query()));
        Some(format!("{}?sessions={query}", crate::api::FOLLOW.url(&[])))
    });
    if let Some(url) = url {
        let source = open_source(&url);
        with_tab(|tab| {
            if let Some(l) = &mut tab.leader {
                l.source = source;
            }
        });
    }
}

/// The leader's `EventSource`: each event relayed to every tab; a drop opens it again
/// from where each session got to, after a growing pause.
fn open_source(url: &str) -> Option<Source> {
    let es = web_sys::EventSource::new(url).ok()?;
    let mut listeners = Vec::new();
    let mut listen = |name: &'static str, f: Box<dyn FnMut(web_sys::MessageEvent)>| {
        let cb = Closure::<dyn FnMut(web_sys::MessageEvent)>::wrap(f);
        let _ = es.add_event_listener_with_callback(name, cb.as_ref().unchecked_ref());
        listeners.push(cb);
    };
    listen(
        SESSION_MARKER,
        Box::new(|ev| {
            let sid = ev
                .data()
                .as_string()
                .and_then(|d| js_sys::JSON::parse(&d).ok())
                .and_then(|v| v.as_string());
            with_tab(|tab| {
                if let Some(l) = &mut tab.leader {
                    l.current = sid;
                }
            });
        }),
    );
    for &name in EVENT_NAMES {
        listen(
            name,
            Box::new(move |ev| {
                let data = ev.data().as_string().unwrap_or_default();
                let Ok(id) = ev.last_event_id().parse::<i64>() else {
                    return;
                };
                relay(name, id, data);
            }),
        );
    }
    listen(
        "open",
        Box::new(|_| {
            with_tab(|tab| {
                if let Some(l) = &mut tab.leader {
                    l.failures = 0;
                }
            })
        }),
    );
    listen(
        "error",
        Box::new(|_| {
            // Closed here, not left to EventSource: its retry would ask from the first ids.
            // (Dropped later, by `reopen`: not inside its own listener.)
            let failures = with_tab(|tab| {
                let l = tab.leader.as_mut()?;
                if let Some(s) = &l.source {
                    s.es.close();
                }
                l.broken = true;
                l.failures = l.failures.saturating_add(1);
                Some(l.failures)
            });
            if let Some(n) = failures {
                let wait = 500u64.saturating_mul(1 << n.min(5)).min(MAX_BACKOFF_MS);
                schedule_reopen(Duration::from_millis(wait));
            }
        }),
    );
    Some(Source {
        es,
        _listeners: listeners,
    })
}

/// An event the leader read: to every tab, this one included.
fn relay(name: &'static str, id: i64, data: String) {
    let to = with_tab(|tab| {
        let l = tab.leader.as_mut()?;
        let sid = l.current.clone()?;
        if let Some((_, at)) = l.streaming.iter_mut().find(|(s, _)| *s == sid) {
            *at = (*at).max(id);
        }
        // Posted only when another tab follows the session: a post costs about as much as
        // applying the event.
        let others = l
            .tabs
            .values()
            .any(|(list, _)| list.iter().any(|(s, _)| *s == sid));
        Some((sid, others))
    });
    let Some((sid, others)) = to else { return };
    if others {
        post(&message(&[
            ("k", "ev".into()),
            ("s", sid.as_str().into()),
            ("id", JsValue::from_f64(id as f64)),
            ("n", name.into()),
            ("d", data.as_str().into()),
        ]));
    }
    deliver(&sid, id, name, &data);
}
