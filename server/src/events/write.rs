//! What the hub asks of its batch writer: the messages of the writer's queue.
use super::published::Published;
use std::sync::Arc;

/// One message to the writer.
pub(super) enum Write {
    /// A numbered event, and whether it is a run's end.
    Event(Arc<Published>, bool),
    /// A delta of a running run that left its session's in-memory window: write it.
    Spill(Arc<Published>),
    /// Shared mode: an event the log will number (session, name, data, ends a run).
    Pending(String, &'static str, String, bool),
    Flush(tokio::sync::oneshot::Sender<()>),
}
