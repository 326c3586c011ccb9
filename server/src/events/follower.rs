//! Shared mode: the follower that takes the events every instance sends (`LISTEN`, the log
//! behind it), delivers them to this instance's subscribers and mirrors streaming replies'
//! text.
use super::bytes_frame;
use super::channels::{deliver, Behind};
use super::EventHub;
use crate::store::{decode_notification, LoggedEvent, Notified, EVENTS_CHANNEL};
use app::wire::RunId;
use app::wire::{Delta, Message, Run, RunStatus};
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
                    // Behind a gap: held (not sent) until the saved text covers the gap.
                    if let Some(behind) = inner.behind.get_mut(&d.run_id) {
                        behind.held.push((e.id, d));
                        continue;
                    }
                    let entry = inner.mirror.entry(d.run_id.clone()).or_default();
                    if d.seq == entry.1 + 1 {
                        entry.0.push_str(&d.text);
                        entry.1 = d.seq;
                    } else if d.seq > entry.1 + 1 {
                        // Deltas were missed: sending this one would show the text with a
                        // hole in it.
                        tracing::info!(run_id = %d.run_id, seq = d.seq, after = entry.1, "deltas were missed: catching up from the saved text");
                        let behind = Behind {
                            session_id: e.session_id.clone(),
                            held: Vec::new(),
                        };
                        let run_id = d.run_id.clone();
                        inner
                            .behind
                            .entry(run_id)
                            .or_insert(behind)
                            .held
                            .push((e.id, d));
                        continue;
                    }
                }
                Mirror::Ended { run_id, .. } => {
                    inner.mirror.remove(&run_id);
                    inner.behind.remove(&run_id);
                }
                Mirror::None => {}
            }
            let frame = bytes_frame::render_with(e.id, e.name, e.data.len(), |buf| {
                buf.extend_from_slice(e.data.as_bytes())
            });
            deliver(
                &mut inner,
                (e.id, &e.session_id, e.name),
                frame,
                ends_run,
                None,
            );
        }
    }
}

/// How often replies behind a gap look at their saved text.
const CATCH_UP_EVERY: Duration = Duration::from_millis(250);

/// How a reply behind a gap comes back: its saved text (`saved`, `delta_seq` deltas), then the
/// held deltas after it, when they reach back to it. `None`: the saved text does not reach
/// the held deltas yet.
fn rejoined(saved: &Message, held: &[(i64, Delta)]) -> Option<(String, u64, i64)> {
    let seq = saved.delta_seq.unwrap_or(0);
    let &(last_id, _) = held.last()?;
    let mut text = saved.content.clone();
    let mut at = seq;
    for (_, d) in held {
        if d.seq <= at {
            continue;
        }
        if d.seq != at + 1 {
            return None;
        }
        text.push_str(&d.text);
        at = d.seq;
    }
    Some((text, at, last_id))
}

impl EventHub {
    /// Replies behind a gap whose saved text now covers it come back: each as a `message`
    /// event with its whole text so far (under the id of its latest held delta, so ids stay
    /// in order), after which its deltas go out again.
    async fn catch_up(&self) {
        let waiting: Vec<(RunId, app::wire::SessionId)> = {
            let inner = self.inner.lock().expect("event hub lock");
            inner
                .behind
                .iter()
                .map(|(r, b)| (r.clone(), b.session_id.clone()))
                .collect()
        };
        for (run_id, session_id) in waiting {
            let saved = match self.store.streaming_reply(&session_id).await {
                Ok(m) => m.filter(|m| m.run_id.as_ref() == Some(&run_id)),
                Err(e) => {
                    tracing::warn!(run_id = %run_id, error = %e, "cannot read a reply to catch up");
                    continue;
                }
            };
            let mut inner = self.inner.lock().expect("event hub lock");
            let Some(saved) = saved else {
                // Not streaming any more: its end (with the whole text) is on its way.
                continue;
            };
            let Some(behind) = inner.behind.get(&run_id) else {
                continue;
            };
            let Some((text, seq, id)) = rejoined(&saved, &behind.held) else {
                continue;
            };
            inner.behind.remove(&run_id);
            inner.mirror.insert(run_id, (text.clone(), seq));
            let message = Message {
                content: text,
                delta_seq: Some(seq),
                ..saved
            };
            let data = serde_json::to_string(&message).unwrap_or_default();
            let frame = bytes_frame::render_with(id, "message", data.len(), |buf| {
                buf.extend_from_slice(data.as_bytes())
            });
            deliver(&mut inner, (id, &session_id, "message"), frame, false, None);
        }
    }
}

/// Looks, until dropped, at the replies behind a gap.
async fn keep_catching_up(hub: EventHub) {
    loop {
        tokio::time::sleep(CATCH_UP_EVERY).await;
        let any = !hub.inner.lock().expect("event hub lock").behind.is_empty();
        if any {
            hub.catch_up().await;
        }
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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
/// meanwhile are gone: a reply whose deltas were missed so catches up from its saved text
/// ([`EventHub::catch_up`]), and its end holds the whole text anyway.
pub(super) async fn follow(hub: EventHub, mut last: i64) {
    let Some(pool) = hub.store.listen_pool().cloned() else {
        return;
    };
    let pause = Duration::from_millis(250);
    let _catching_up = AbortOnDrop(tokio::spawn(keep_catching_up(hub.clone())));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(seq: u64, text: &str) -> (i64, Delta) {
        let d = serde_json::json!({"run_id": "r", "message_id": "m", "seq": seq, "text": text});
        (100 + seq as i64, serde_json::from_value(d).unwrap())
    }

    fn saved(content: &str, seq: u64) -> Message {
        let m = serde_json::json!({"id": "m", "session_id": "s", "role": "agent",
            "content": content, "created_at": 0, "superseded": false, "delta_seq": seq});
        serde_json::from_value(m).unwrap()
    }

    #[test]
    fn a_reply_rejoins_once_its_saved_text_reaches_the_held_deltas() {
        let held = vec![delta(5, "e"), delta(6, "f")];
        // Saved up to 3: delta 4 is missing still.
        assert_eq!(rejoined(&saved("abc", 3), &held), None);
        // Saved up to 4: the held deltas follow on.
        assert_eq!(
            rejoined(&saved("abcd", 4), &held),
            Some(("abcdef".into(), 6, 106))
        );
        // Saved past some of them: those are skipped, not doubled.
        assert_eq!(
            rejoined(&saved("abcde", 5), &held),
            Some(("abcdef".into(), 6, 106))
        );
        assert_eq!(rejoined(&saved("abcd", 4), &[]), None);
    }
}
