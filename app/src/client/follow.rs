//! One event connection per browser, shared by its tabs. The tab that holds the Web Lock
//! `mulligan-events` (the leader) streams every session any tab follows through one
//! `GET /events` and posts each event on the BroadcastChannel `mulligan-events`; every tab
//! applies the events of the sessions it follows, each once and in order. When the leader
//! goes, the lock passes to a waiting tab, which asks every tab what it follows, and from
//! which event on, and opens the stream again. A browser without Web Locks or
//! BroadcastChannel streams from each tab.
mod stream;

use super::browser::parse_event;
use crate::wire::Event;
use js_sys::{Array, Object, Reflect};
use leptos::prelude::set_interval;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use stream::{ask, schedule_reopen, Leader};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// The lock's and the channel's name.
const NAME: &str = "mulligan-events";
/// How often a tab tells the leader what it follows (a new leader hears at once).
const HEARTBEAT: Duration = Duration::from_secs(20);
/// A tab not heard from for this long is gone (a crash says no goodbye); background tabs'
/// timers may run only once a minute.
const FORGET_AFTER_MS: f64 = 300_000.0;
/// How long a new leader waits for the tabs' answers before it opens the stream.
const GATHER: Duration = Duration::from_millis(100);

type OnEvent = Rc<RefCell<dyn FnMut(i64, Event)>>;

/// A session this tab follows, and the last event id it applied of it.
struct Follow {
    key: u64,
    sid: String,
    last: i64,
    on_event: OnEvent,
}

struct Tab {
    id: String,
    /// `None` when this tab streams for itself.
    channel: Option<web_sys::BroadcastChannel>,
    follows: Vec<Follow>,
    next_key: u64,
    leader: Option<Leader>,
    started: bool,
}

thread_local! {
    static TAB: RefCell<Tab> = const {
        RefCell::new(Tab {
            id: String::new(),
            channel: None,
            follows: Vec::new(),
            next_key: 0,
            leader: None,
            started: false,
        })
    };
}

fn with_tab<R>(f: impl FnOnce(&mut Tab) -> R) -> R {
    TAB.with(|t| f(&mut t.borrow_mut()))
}

/// A session this tab follows, until dropped: `on_event(id, event)` gets each of its events
/// after `after`, once and in order, whichever tab holds the connection.
pub struct SessionFeed {
    key: u64,
}

impl SessionFeed {
    pub fn open(
        sid: &crate::wire::SessionId,
        after: i64,
        on_event: impl FnMut(i64, Event) + 'static,
    ) -> SessionFeed {
        start();
        let key = with_tab(|tab| {
            let key = tab.next_key;
            tab.next_key += 1;
            tab.follows.push(Follow {
                key,
                sid: sid.to_string(),
                last: after,
                on_event: Rc::new(RefCell::new(on_event)),
            });
            if let Some(leader) = &mut tab.leader {
                ask(leader, sid.as_str(), after);
            }
            key
        });
        changed();
        SessionFeed { key }
    }
}

impl Drop for SessionFeed {
    fn drop(&mut self) {
        let key = self.key;
        with_tab(|tab| tab.follows.retain(|f| f.key != key));
        changed();
    }
}

/// This tab's follows changed: the leader looks at its stream, a follower tells the leader.
fn changed() {
    if with_tab(|tab| tab.leader.is_some()) {
        schedule_reopen(Duration::ZERO);
    } else {
        post_want();
    }
}

/// Joins the browser's tabs (once per tab): listens on the channel and waits for the lock.
fn start() {
    let first = with_tab(|tab| {
        let first = !tab.started;
        tab.started = true;
        first
    });
    if !first {
        return;
    }
    // 52 random bits: a page's own id, new on every load (a duplicated tab copies the
    // session storage, and with it the tab id the API sees).
    let bits = (js_sys::Math::random() * 4_503_599_627_370_496.0) as u64;
    let locks = web_sys::window()
        .map(|w| field(&w.navigator(), "locks"))
        .filter(|l| l.is_object());
    let request = locks
        .as_ref()
        .map(|l| field(l, "request"))
        .and_then(|r| r.dyn_into::<js_sys::Function>().ok());
    let channel = web_sys::BroadcastChannel::new(NAME).ok();
    let (Some(locks), Some(request), Some(channel)) = (locks, request, channel) else {
        // Alone: this tab streams its own sessions.
        with_tab(|tab| tab.id = format!("page-{bits:x}"));
        become_leader("alone");
        return;
    };
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(|ev: web_sys::MessageEvent| {
            on_message(&ev.data())
        });
    channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    with_tab(|tab| {
        tab.id = format!("page-{bits:x}");
        tab.channel = Some(channel);
    });
    mark("follower");
    // Granted when no other tab holds it: held until this page goes.
    let granted = Closure::once_into_js(|_lock: JsValue| -> JsValue {
        become_leader("leader");
        js_sys::Promise::new(&mut |_, _| {}).into()
    });
    let _ = request.call2(&locks, &JsValue::from_str(NAME), &granted);
    let _ = leptos::prelude::window_event_listener_untyped("pagehide", |_| {
        let bye = with_tab(|tab| tab.leader.is_none().then(|| tab.id.clone()));
        if let Some(tab) = bye {
            post(&message(&[("k", "bye".into()), ("tab", tab.into())]));
        }
    });
    let _ = set_interval(heartbeat, HEARTBEAT);
}

/// A follower says again what it follows; the leader forgets tabs long silent.
fn heartbeat() {
    let now = js_sys::Date::now();
    let leading = with_tab(|tab| match &mut tab.leader {
        Some(leader) => {
            let before = leader.tabs.len();
            leader
                .tabs
                .retain(|_, (_, seen)| now - *seen < FORGET_AFTER_MS);
            Some(leader.tabs.len() != before)
        }
        None => None,
    });
    match leading {
        Some(true) => schedule_reopen(Duration::ZERO),
        Some(false) => {}
        None => post_want(),
    }
}

/// Shows how this tab hears events (`<html data-events="leader|follower|alone">`).
fn mark(role: &str) {
    if let Some(html) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.document_element())
    {
        let _ = html.set_attribute("data-events", role);
    }
}

fn become_leader(role: &str) {
    with_tab(|tab| {
        let mut leader = Leader::default();
        for f in &tab.follows {
            ask(&mut leader, &f.sid, f.last);
        }
        tab.leader = Some(leader);
    });
    mark(role);
    // Every tab answers with what it follows; the stream opens once they had a moment.
    post(&message(&[("k", "hello".into())]));
    schedule_reopen(GATHER);
}

fn on_message(data: &JsValue) {
    let kind = field(data, "k").as_string().unwrap_or_default();
    match kind.as_str() {
        "ev" => {
            let (Some(sid), Some(id), Some(name), Some(text)) = (
                field(data, "s").as_string(),
                field(data, "id").as_f64(),
                field(data, "n").as_string(),
                field(data, "d").as_string(),
            ) else {
                return;
            };
            deliver(&sid, id as i64, &name, &text);
        }
        "hello" if with_tab(|tab| tab.leader.is_none()) => post_want(),
        "want" => {
            let Some(tab_id) = field(data, "tab").as_string() else {
                return;
            };
            let list: Vec<(String, i64)> = field(data, "follow")
                .dyn_into::<Array>()
                .map(|a| {
                    a.iter()
                        .filter_map(|pair| {
                            let pair = pair.dyn_into::<Array>().ok()?;
                            Some((pair.get(0).as_string()?, pair.get(1).as_f64()? as i64))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let reopen = with_tab(|tab| {
                let leader = tab.leader.as_mut()?;
                let before = leader.tabs.get(&tab_id).map(|(l, _)| l.clone());
                let mut new = false;
                for (sid, last) in &list {
                    let known = before
                        .as_ref()
                        .is_some_and(|b| b.iter().any(|(s, _)| s == sid));
                    if !known {
                        ask(leader, sid, *last);
                        new = true;
                    }
                }
                let dropped = before
                    .is_some_and(|b| b.iter().any(|(s, _)| !list.iter().any(|(t, _)| t == s)));
                leader.tabs.insert(tab_id, (list, js_sys::Date::now()));
                Some(new || dropped)
            });
            if reopen == Some(true) {
                schedule_reopen(Duration::ZERO);
            }
        }
        "bye" => {
            let Some(tab_id) = field(data, "tab").as_string() else {
                return;
            };
            let gone = with_tab(|tab| {
                tab.leader
                    .as_mut()
                    .is_some_and(|l| l.tabs.remove(&tab_id).is_some())
            });
            if gone {
                schedule_reopen(Duration::ZERO);
            }
        }
        _ => {}
    }
}

/// Tells the leader what this tab follows, each with the last id it applied.
fn post_want() {
    let msg = with_tab(|tab| {
        let list = Array::new();
        for f in &tab.follows {
            let pair = Array::new();
            pair.push(&JsValue::from_str(&f.sid));
            pair.push(&JsValue::from_f64(f.last as f64));
            list.push(&pair);
        }
        message(&[
            ("k", "want".into()),
            ("tab", tab.id.as_str().into()),
            ("follow", list.into()),
        ])
    });
    post(&msg);
}

fn post(msg: &JsValue) {
    let channel = with_tab(|tab| tab.channel.clone());
    if let Some(c) = channel {
        let _ = c.post_message(msg);
    }
}

/// Applies an event to this tab's follows of its session: each event once, in order (a
/// stream opened again may repeat some). A `message` under the last id applied is the
/// snapshot of a streaming reply that comes after it, so it is applied.
fn deliver(sid: &str, id: i64, name: &str, data: &str) {
    let targets: Vec<OnEvent> = with_tab(|tab| {
        tab.follows
            .iter_mut()
            .filter(|f| f.sid == sid)
            .filter(|f| id > f.last || (id == f.last && name == "message"))
            .map(|f| {
                f.last = id;
                f.on_event.clone()
            })
            .collect()
    });
    if targets.is_empty() {
        return;
    }
    let Some(event) = parse_event(name, data) else {
        return;
    };
    // A copy for every follow but the last (there is seldom more than one).
    if let Some((last, others)) = targets.split_last() {
        for on_event in others {
            (on_event.borrow_mut())(id, event.clone());
        }
        (last.borrow_mut())(id, event);
    }
}

fn field(v: &JsValue, name: &str) -> JsValue {
    Reflect::get(v, &JsValue::from_str(name)).unwrap_or(JsValue::UNDEFINED)
}

fn message(fields: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in fields {
        let _ = Reflect::set(&o, &JsValue::from_str(k), v);
    }
    o.into()
}
