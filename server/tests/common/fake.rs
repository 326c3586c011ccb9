//! The fake OpenAI-compatible provider the tests talk to: the workspace's `fake-provider`
//! (scripted answers, recorded requests), shared with the bench.
pub use fake_provider::{FakeProvider, Script};
