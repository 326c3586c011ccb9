//! The runs executing on this instance (their handles: how to stop each, what it streamed so
//! far), and the live text laid over stored snapshots of a streaming reply.
use super::Engine;
use crate::run::Active;
use app::wire::Message;
use app::wire::RunId;

impl Engine {
    /// The run `run_id` if this instance executes it.
    pub(super) fn active(&self, run_id: &RunId) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .cloned()
    }

    /// The ids of the runs executing here.
    pub(super) fn active_ids(&self) -> Vec<RunId> {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        active.keys().cloned().collect()
    }

    /// The streamed text of a run executing here, for snapshots of a streaming reply.
    pub fn live_text(&self, run_id: &RunId) -> Option<(String, u64)> {
        let active = self.active(run_id)?;
        let live = active.live();
        Some((live.text.clone(), live.seq))
    }

    /// Takes a run out of this instance's active set (its task has ended).
    pub(super) fn forget_active(&self, run_id: &RunId) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(run_id)
    }

    /// A message snapshot with a streaming reply's live text laid over the stored one: this
    /// instance's own runs first, else what the shared log delivered here when that is
    /// further on than the stored text (whose `delta_seq` says how far it is).
    pub fn overlay_live(&self, mut m: Message) -> Message {
        if m.status == Some(app::wire::MessageStatus::Streaming) {
            let stored = m.delta_seq.unwrap_or(0);
            let live = m.run_id.as_ref().and_then(|r| {
                self.live_text(r)
                    .or_else(|| self.hub().mirrored_text(r).filter(|(_, seq)| *seq > stored))
            });
            if let Some((text, seq)) = live {
                m.content = text;
                m.delta_seq = Some(seq);
            }
        }
        m
    }
}
