//! Retry: the failure classifier, Tier 1's policy and background retry's schedule (all pure),
//! and the Tier 1 adapter that runs its policy around a provider's opening.
pub mod background;
pub mod classify;
pub mod policy;
pub mod tier1;
