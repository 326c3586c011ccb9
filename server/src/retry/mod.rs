//! Retry: the failure classifier and Tier 1's policy (both pure), the Tier 1 adapter that
//! runs the policy around a provider's opening, and provider-wide cooldowns (a pure table
//! and the gate that applies it to every provider request).
pub mod classify;
pub mod cooldown;
pub mod gate;
pub mod policy;
pub mod tier1;
