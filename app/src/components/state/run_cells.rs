//! The signals of the open session's runs, one per run and one per prompt's latest run, so
//! that a run's change wakes only the replies that read it.
pub(super) use crate::components::set_if_changed;
use crate::wire::{MessageId, Run, RunId};
use leptos::prelude::*;
use std::collections::HashMap;

/// The signals of [`Chat`]'s runs and of its prompts' latest runs, made when first asked for.
#[derive(Default)]
pub(super) struct RunCells {
    pub(super) runs: HashMap<RunId, ArcRwSignal<Option<Run>>>,
    pub(super) prompts: HashMap<MessageId, ArcRwSignal<Option<RunId>>>,
}

impl RunCells {
    pub(super) fn run(&mut self, id: &RunId) -> ArcRwSignal<Option<Run>> {
        self.runs.entry(id.clone()).or_default().clone()
    }

    pub(super) fn prompt(&mut self, anchor: &MessageId) -> ArcRwSignal<Option<RunId>> {
        self.prompts.entry(anchor.clone()).or_default().clone()
    }
}
