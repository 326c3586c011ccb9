//! The providers this instance talks to: the chain its settings name, each provider behind
//! its own cooldown gate, the models they offer, and the router that sends each request to
//! its model's provider. Above `retry` (the gates) and `llm` (the adapters).
pub mod models;
pub mod router;
pub mod setup;

pub use router::Providers;
