//! Retry: the failure classifier (pure) and, with Tier 1, its policy and adapter.
pub mod classify;
