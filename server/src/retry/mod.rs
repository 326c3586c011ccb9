//! Retry: the failure classifier and Tier 1's policy (both pure), and the Tier 1 adapter
//! that runs the policy around a provider's opening.
pub mod classify;
pub mod policy;
pub mod tier1;
