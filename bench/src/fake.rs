//! The bench's fake provider: the workspace's `fake-provider`, whose model-name routes
//! (`stream-N-MS`, `status-CODE-SECS`, `tool-K`) serve every benchmark, started fallibly.
use fake_provider::FakeProvider;
pub use fake_provider::{
    clock_us, markdown_model, parse_delta, status_model, stream_model, tool_model, TOOL_ASK_TEXT,
    TOOL_REPLY_TEXT,
};

/// A running fake provider (stops when dropped); everything else is [`FakeProvider`]'s.
pub struct Fake(FakeProvider);

impl Fake {
    pub async fn start() -> std::io::Result<Fake> {
        FakeProvider::try_start().await.map(Fake)
    }
}

impl std::ops::Deref for Fake {
    type Target = FakeProvider;
    fn deref(&self) -> &FakeProvider {
        &self.0
    }
}
