//! A run's live text: what it streamed so far, shared between its task and the engine's
//! registry of the runs executing here (for snapshots of a streaming reply), and a streaming
//! reply's text as the shared log delivered it.
use app::wire::Message;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A run being executed here: how to stop it, what it streamed so far, when it ended.
#[derive(Clone, Default)]
pub struct Active {
    pub cancel: CancellationToken,
    pub live: Arc<Mutex<Live>>,
    pub ended: Arc<tokio::sync::Notify>,
    /// How long it waited for the operator while it ran (an agent's question): not run time.
    pub waited: Arc<Waited>,
}

/// Time a running run spent waiting for the operator's decision (CONTRACT §8: waiting is not
/// counted against `MULLIGAN_MAX_RUN_MS`).
#[derive(Default)]
pub struct Waited {
    total_ms: std::sync::atomic::AtomicU64,
    waiting: std::sync::atomic::AtomicBool,
}

impl Waited {
    /// A wait begins.
    pub fn begin(&self) {
        self.waiting
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// A wait that took `took` ends.
    pub fn end(&self, took: std::time::Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.total_ms
            .fetch_add(ms, std::sync::atomic::Ordering::AcqRel);
        self.waiting
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// The waits that ended, and whether one is on.
    pub fn read(&self) -> (std::time::Duration, bool) {
        (
            std::time::Duration::from_millis(
                self.total_ms.load(std::sync::atomic::Ordering::Acquire),
            ),
            self.waiting.load(std::sync::atomic::Ordering::Acquire),
        )
    }
}

impl Active {
    /// The live text; a panic elsewhere while it was held does not make it unreadable.
    pub fn live(&self) -> std::sync::MutexGuard<'_, Live> {
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
    /// Text the provider streamed that waits for the next delta to go out (see
    /// `RunConfig::delta_window`): not in `text`, `seq` or any event yet, but the run's
    /// recorded reply when it ends before that.
    pub held: String,
    /// Model steps whose provider call opened.
    pub steps: u32,
    /// Tool calls whose start was (or was being) recorded.
    pub tool_calls: u32,
}

/// A streaming reply's text as the shared log delivered it here, laid over the stored text
/// when it is further on.
pub fn overlay_mirrored(hub: &crate::events::EventHub, mut m: Message) -> Message {
    if m.status == Some(app::wire::MessageStatus::Streaming) {
        let stored = m.delta_seq.unwrap_or(0);
        let mirrored = m
            .run_id
            .as_ref()
            .and_then(|r| hub.mirrored_text(r))
            .filter(|(_, seq)| *seq > stored);
        if let Some((text, seq)) = mirrored {
            m.content = text;
            m.delta_seq = Some(seq);
        }
    }
    m
}
