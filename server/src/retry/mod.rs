//! Retry: the failure classifier, Tier 1's policy and background retry's schedule (all pure),
//! the Tier 1 adapter that runs its policy around a provider's opening, and provider-wide
//! cooldowns (a pure table and the gate that applies it to every provider request), and
//! parking behind a model that is out (pure), and what an ACP agent's failure means (pure).
pub mod agent_failure;
pub mod background;
pub mod classify;
pub mod cooldown;
pub mod gate;
pub mod parking;
pub mod policy;
pub mod tier1;
