//! Shared mode: the follower that reads the database's log (woken by `LISTEN`), delivers it
//! to this instance's subscribers and mirrors streaming replies' text.
use super::bytes_frame;
use super::channels::deliver;
use super::EventHub;
use crate::store::{LoggedEvent, EVENTS_CHANNEL};
use app::wire::{Delta, Run, RunStatus};
use std::time::Duration;

impl EventHub {
    /// Delivers events read from the shared log, in order, to this instance's subscribers.
    fn apply(&self, events: Vec<LoggedEvent>) {
        // Parsed outside the lock: what the mirror of streaming replies needs.
        let parsed: Vec<Mirror> = events.iter().map(Mirror::of).collect();
        let mut inner = self.inner.lock().expect("event hub lock");
        for (e, m) in events.into_iter().zip(parsed) {
            inner.next_id = e.id + 1;
            match m {
                Mirror::Delta(d) => {
                    let entry = inner.mirror.entry(d.run_id).or_default();
                    // Only a mirror that saw the reply from its first delta is whole.
                    if d.seq == entry.1 + 1 {
                        entry.0.push_str(&d.text);
                        entry.1 = d.seq;
                    }
                }
                Mirror::Ended(run_id) => {
                    inner.mirror.remove(&run_id);
                }
                Mirror::None => {}
            }
            let frame = bytes_frame::render_with(e.id, e.name, e.data.len(), |buf| {
                buf.extend_from_slice(e.data.as_bytes())
            });
            deliver(
                &mut inner,
                (e.id, e.session_id.as_str(), e.name),
                frame,
                false,
                None,
            );
        }
    }
}

/// What the follower's mirror of streaming replies takes from an event.
enum Mirror {
    Delta(Delta),
    Ended(String),
    None,
}

impl Mirror {
    fn of(e: &LoggedEvent) -> Mirror {
        match e.name {
            "delta" => serde_json::from_str(&e.data).map_or(Mirror::None, Mirror::Delta),
            "run" => match serde_json::from_str::<Run>(&e.data) {
                Ok(r) if !matches!(r.status, RunStatus::Queued | RunStatus::Running) => {
                    Mirror::Ended(r.id)
                }
                _ => Mirror::None,
            },
            _ => Mirror::None,
        }
    }
}

/// Shared mode: follows the database's log from `last`, woken by `LISTEN` (and every 250 ms
/// in case a notification was lost), and delivers what it reads to this instance.
pub(super) async fn follow(hub: EventHub, mut last: i64) {
    let Some(pool) = hub.store.listen_pool().cloned() else {
        return;
    };
    let mut listener = None;
    loop {
        if listener.is_none() {
            match sqlx::postgres::PgListener::connect_with(&pool).await {
                Ok(mut l) => match l.listen(EVENTS_CHANNEL).await {
                    Ok(()) => listener = Some(l),
                    Err(e) => tracing::warn!(error = %e, "cannot listen for events"),
                },
                Err(e) => tracing::warn!(error = %e, "cannot listen for events"),
            }
        }
        match hub.store.events_after(last, 1000).await {
            Ok(events) => {
                let full = events.len() == 1000;
                if let Some(e) = events.last() {
                    last = e.id;
                }
                hub.apply(events);
                if full {
                    continue;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the shared event log"),
        }
        let wait = Duration::from_millis(250);
        match listener.as_mut() {
            Some(l) => {
                if let Ok(Err(e)) = tokio::time::timeout(wait, l.recv()).await {
                    tracing::warn!(error = %e, "event listener dropped; reconnecting");
                    listener = None;
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}
