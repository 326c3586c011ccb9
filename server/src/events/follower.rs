//! Shared mode: the follower that takes the events every instance sends (`LISTEN`, the log
//! behind it), delivers them to this instance's subscribers and mirrors streaming replies'
//! text.
use super::bytes_frame;
use super::channels::deliver;
use super::EventHub;
use crate::store::{decode_notification, LoggedEvent, Notified, EVENTS_CHANNEL};
use app::wire::RunId;
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
            let ends_run = matches!(m, Mirror::Ended { started: true, .. });
            match m {
                Mirror::Delta(d) => {
                    let entry = inner.mirror.entry(d.run_id).or_default();
                    // Only a mirror that saw the reply from its first delta is whole.
                    if d.seq == entry.1 + 1 {
                        entry.0.push_str(&d.text);
                        entry.1 = d.seq;
                    }
                }
                Mirror::Ended { run_id, .. } => {
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
                ends_run,
                None,
            );
        }
    }
}

/// What the follower's mirror of streaming replies takes from an event.
enum Mirror {
    Delta(Delta),
    /// A run ended (`started`: after it started, so it is the end of a streaming run).
    Ended {
        run_id: RunId,
        started: bool,
    },
    None,
}

impl Mirror {
    fn of(e: &LoggedEvent) -> Mirror {
        match e.name {
            "delta" => serde_json::from_str(&e.data).map_or(Mirror::None, Mirror::Delta),
            "run" => match serde_json::from_str::<Run>(&e.data) {
                Ok(r) if !matches!(r.status, RunStatus::Queued | RunStatus::Running) => {
                    Mirror::Ended {
                        started: r.started_at.is_some(),
                        run_id: r.id,
                    }
                }
                _ => Mirror::None,
            },
            _ => Mirror::None,
        }
    }
}

/// Shared mode: follows the database's log from `last`. Events arrive in `NOTIFY` payloads
/// (deltas only there: they are not rows); the log itself is read when the follower starts
/// listening, and again whenever its listening connection was lost, since notifications sent
/// meanwhile are gone (a delta missed so is in the reply's end, which holds the whole text).
pub(super) async fn follow(hub: EventHub, mut last: i64) {
    let Some(pool) = hub.store.listen_pool().cloned() else {
        return;
    };
    let pause = Duration::from_millis(250);
    loop {
        // Listening first, then reading the log: nothing committed in between is missed.
        let mut listener = match listen(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for events");
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        if let Err(e) = read_log(&hub, &mut last).await {
            tracing::warn!(error = %e, "cannot read the shared event log");
            tokio::time::sleep(pause).await;
            continue;
        }
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => apply_payload(&hub, n.payload(), &mut last).await,
                Ok(None) => {
                    tracing::warn!("the event listener lost its connection; reading the log again");
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the event listener failed; reading the log again");
                    break;
                }
            }
        }
    }
}

async fn listen(pool: &sqlx::PgPool) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
    l.listen(EVENTS_CHANNEL).await?;
    Ok(l)
}

/// Delivers what the log holds after `last`, page by page.
async fn read_log(hub: &EventHub, last: &mut i64) -> crate::error::Result<()> {
    loop {
        let events = hub.store.events_after(*last, 1000).await?;
        let full = events.len() == 1000;
        if let Some(e) = events.last() {
            *last = e.id;
        }
        hub.apply(events);
        if !full {
            return Ok(());
        }
    }
}

/// Delivers one notification's events after `last`, those sent by id read from the log.
async fn apply_payload(hub: &EventHub, payload: &str, last: &mut i64) {
    let lines = decode_notification(payload);
    let in_log: Vec<i64> = lines
        .iter()
        .filter_map(|l| match l {
            Notified::InLog(id) if *id > *last => Some(*id),
            _ => None,
        })
        .collect();
    let mut read = if in_log.is_empty() {
        Vec::new()
    } else {
        hub.store.events_by_id(&in_log).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, count = in_log.len(), "cannot read notified events from the log");
            Vec::new()
        })
    }
    .into_iter()
    .peekable();
    let mut events = Vec::with_capacity(lines.len());
    for line in lines {
        match line {
            Notified::Event(e) if e.id > *last => events.push(e),
            Notified::InLog(id) if id > *last => {
                while let Some(e) = read.next_if(|e| e.id <= id) {
                    if e.id == id {
                        events.push(e);
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(e) = events.last() {
        *last = e.id;
    }
    hub.apply(events);
}
