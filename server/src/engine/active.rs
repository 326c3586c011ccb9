//! The runs executing on this instance: how to stop each, what it streamed so far, and the
//! live text laid over stored snapshots of a streaming reply.
use super::Engine;
use app::wire::Message;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A run being executed here: how to stop it, what it streamed so far, when it ended.
#[derive(Clone)]
pub(super) struct Active {
    pub(super) cancel: CancellationToken,
    pub(super) live: Arc<Mutex<Live>>,
    pub(super) ended: Arc<tokio::sync::Notify>,
}

impl Active {
    /// The live text; a panic elsewhere while it was held does not make it unreadable.
    pub(super) fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The reply text streamed so far and how many deltas it holds.
#[derive(Default)]
pub struct Live {
    pub text: String,
    pub seq: u64,
    /// Model steps whose provider call opened.
    pub steps: u32,
    /// Tool calls whose start was (or was being) recorded.
    pub tool_calls: u32,
}

impl Engine {
    /// The run `run_id` if this instance executes it.
    pub(super) fn active(&self, run_id: &str) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .cloned()
    }

    /// The ids of the runs executing here.
    pub(super) fn active_ids(&self) -> Vec<String> {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        active.keys().cloned().collect()
    }

    /// The streamed text of a run executing here, for snapshots of a streaming reply.
    pub fn live_text(&self, run_id: &str) -> Option<(String, u64)> {
        let active = self.active(run_id)?;
        let live = active.live();
        Some((live.text.clone(), live.seq))
    }

    /// Takes a run out of this instance's active set (its task has ended).
    pub(super) fn forget_active(&self, run_id: &str) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(run_id)
    }
}

/// A streaming reply's text as the shared log delivered it here, laid over the stored text
/// when it is further on.
pub fn overlay_mirrored(hub: &crate::events::EventHub, mut m: Message) -> Message {
    if m.status == Some(app::wire::MessageStatus::Streaming) {
        let stored = m.delta_seq.unwrap_or(0);
        let mirrored = m
            .run_id
            .as_deref()
            .and_then(|r| hub.mirrored_text(r))
            .filter(|(_, seq)| *seq > stored);
        if let Some((text, seq)) = mirrored {
            m.content = text;
            m.delta_seq = Some(seq);
        }
    }
    m
}

/// A message snapshot with a streaming reply's live text laid over the stored one: this
/// instance's own runs first, else what the shared log delivered here when that is further
/// on than the stored text (whose `delta_seq` says how far it is).
pub fn overlay_live(engine: &Engine, mut m: Message) -> Message {
    if m.status == Some(app::wire::MessageStatus::Streaming) {
        let stored = m.delta_seq.unwrap_or(0);
        let live = m.run_id.as_deref().and_then(|r| {
            engine.live_text(r).or_else(|| {
                engine
                    .hub()
                    .mirrored_text(r)
                    .filter(|(_, seq)| *seq > stored)
            })
        });
        if let Some((text, seq)) = live {
            m.content = text;
            m.delta_seq = Some(seq);
        }
    }
    m
}
