//! The open session's page state (`Chat`): its session, messages, runs and Tier 2, applied
//! from the snapshot and the event stream; shared through context by the chat's parts.
use super::retrier::Retrier;
use super::{use_sessions, Reading};
use crate::api;
use crate::client::fetch_json;
use crate::wire::{
    AttemptEvent, AutoRetry, ClientConfig, Delta, Event, Message, Run, RunStatus, RunSummary,
    Session, SessionDetail, SessionStatus,
};
use crate::wire::{MessageId, RunId};
use leptos::prelude::*;

mod deltas;
mod run_cells;
use run_cells::{set_if_changed, RunCells};
use std::collections::HashMap;

/// The open session's state, shared by its parts.
#[derive(Clone, Copy)]
pub struct Chat {
    /// The open session, read through [`Chat::session`] and set through
    /// [`Chat::set_session`], which keeps `model` with it.
    session: RwSignal<Option<Session>>,
    /// Each message in its own signal, so a delta re-renders only its reply.
    pub messages: RwSignal<Vec<(crate::wire::MessageId, RwSignal<Message>)>>,
    pub runs: RwSignal<Vec<Run>>,
    pub error: RwSignal<Option<String>>,
    /// The latest Tier 1 wait announced for a run ("attempt 2 in 4 s").
    pub attempt: RwSignal<Option<AttemptEvent>>,
    pub retrier: Retrier,
    pub config: RwSignal<Option<ClientConfig>>,
    /// Each run in a signal of its own (`None` until it arrives), and each prompt's latest
    /// run id: a reply reads its own run, so a run's change wakes the replies of that run
    /// alone. (Read from `runs`, every reply woke on every run event and left and joined a
    /// list of readers as long as the session: quadratic in its messages.)
    cells: StoredValue<RunCells>,
    /// The session's model: what every reply's note reads. A signal of its own, set only
    /// when it changes ([`Chat::set_session`]): a memo over `session` was checked by every
    /// reply's note on each of the session's changes (one per run event), so a long session
    /// paid per message for each (bench B10).
    model: RwSignal<Option<String>>,
    /// Bumped when a message is replaced whole (not on a delta): what reads every message's
    /// state tracks this instead of every message, so a delta costs it nothing.
    pub replaced: RwSignal<u32>,
    /// Whether superseded messages (earlier attempts) are shown.
    pub show_superseded: RwSignal<bool>,
    /// A word about what happened to the operator's last action ("Already retried in
    /// another tab — following the new run."), shown in the dock above the composer.
    pub notice: RwSignal<Option<String>>,
    /// The page's list of calls waiting for the operator, kept by this session's events.
    approvals: Option<super::approvals::Approvals>,
    /// Deltas heard since the last frame, applied together ([`Chat::flush_deltas`]).
    gathered: StoredValue<Vec<Delta>>,
    /// When gathered deltas were last applied (ms since the epoch), and how many bytes of
    /// text they held.
    drawn_at: StoredValue<i64>,
    drawn_bytes: StoredValue<usize>,
}

impl Chat {
    pub(super) fn new() -> Self {
        let runs = RwSignal::new(Vec::new());
        let session = RwSignal::new(None::<Session>);
        Chat {
            session,
            messages: RwSignal::new(Vec::new()),
            runs,
            error: RwSignal::new(None),
            attempt: RwSignal::new(None),
            retrier: Retrier::new(),
            config: RwSignal::new(None),
            cells: StoredValue::new(RunCells::default()),
            model: RwSignal::new(None),
            replaced: RwSignal::new(0),
            show_superseded: RwSignal::new(false),
            notice: RwSignal::new(None),
            approvals: super::approvals::use_approvals(),
            gathered: StoredValue::new(Vec::new()),
            drawn_at: StoredValue::new(0),
            drawn_bytes: StoredValue::new(0),
        }
    }

    /// Whether this page's Tier 2 retries failures (`auto_retry: browser`); a background
    /// session's retries wait on the server, and `off` waits for the operator.
    pub(super) fn browser_retries(&self) -> bool {
        self.session.with_untracked(|s| {
            s.as_ref()
                .is_none_or(|s| s.auto_retry == AutoRetry::Browser)
        })
    }

    /// The open session (`None` while it loads).
    pub fn session(&self) -> Reading<Option<Session>> {
        Reading(self.session)
    }

    /// The open session's model: changes only when the model does.
    pub fn model(&self) -> Reading<Option<String>> {
        Reading(self.model)
    }

    /// Sets the session, and its model when that changed.
    pub fn set_session(&self, s: Option<Session>) {
        super::set_if_changed(&self.model, s.as_ref().map(|s| s.model.clone()));
        self.session.set(s);
    }

    /// Shows a snapshot: its session, messages and runs, as the server renders them too.
    /// (Tier 2 hears of its last turn from [`Chat::restore_tier2`], in the browser alone.)
    pub(super) fn show(&self, d: SessionDetail) {
        self.set_session(Some(d.session));
        // Emptied first: the list rebuilds every row on its new signals, even one whose id
        // it showed already.
        self.messages.set(Vec::new());
        self.messages.set(
            d.messages
                .into_iter()
                .map(|m| (m.id.clone(), RwSignal::new(m)))
                .collect(),
        );
        self.set_runs(d.runs);
        self.error.set(None);
    }

    /// Takes a snapshot's runs and tells Tier 2 about the last turn (restored, not live).
    pub(super) fn load_runs(&self, runs: Vec<Run>) {
        self.set_runs(runs);
        self.restore_tier2();
    }

    /// Replaces the runs, and every run's and prompt's signal with what they now hold.
    pub(super) fn set_runs(&self, runs: Vec<Run>) {
        let mut latest: HashMap<&MessageId, &RunId> = HashMap::new();
        for r in &runs {
            latest.insert(&r.anchor_message_id, &r.id);
        }
        let ids: std::collections::HashSet<&RunId> = runs.iter().map(|r| &r.id).collect();
        self.cells.update_value(|c| {
            for (id, cell) in &c.runs {
                if !ids.contains(id) {
                    set_if_changed(cell, None);
                }
            }
            for (anchor, cell) in &c.prompts {
                if !latest.contains_key(anchor) {
                    set_if_changed(cell, None);
                }
            }
            for r in &runs {
                set_if_changed(&c.run(&r.id), Some(r.clone()));
            }
            for (anchor, id) in &latest {
                set_if_changed(&c.prompt(anchor), Some(RunId::clone(id)));
            }
        });
        self.runs.set(runs);
    }

    /// A run, new or changed (a new one is its prompt's latest).
    fn put_run(&self, r: Run) {
        let new = self
            .runs
            .try_update(|rs| match rs.iter_mut().find(|x| x.id == r.id) {
                Some(slot) => {
                    *slot = r.clone();
                    false
                }
                None => {
                    rs.push(r.clone());
                    true
                }
            });
        self.cells.update_value(|c| {
            if new == Some(true) {
                set_if_changed(&c.prompt(&r.anchor_message_id), Some(r.id.clone()));
            }
            set_if_changed(&c.run(&r.id), Some(r));
        });
    }

    /// Tells Tier 2 about the last turn of the shown runs (restored from a snapshot, not
    /// live) when this page retries the session's failures.
    pub(super) fn restore_tier2(&self) {
        if !self.browser_retries() {
            return;
        }
        self.runs.with_untracked(|runs| {
            if let Some(run) = runs.iter().rev().find(|r| r.held_by.is_none()) {
                self.retrier
                    .observe(run, false, crate::tier2::failed_streak(runs));
            }
        });
    }

    /// Reads the session again and brings this page up to it (after finding that another
    /// tab acted first): messages in place, runs replaced, so the page follows the new run.
    pub fn resync(&self) {
        let Some(id) = self.session_id() else { return };
        let this = *self;
        leptos::task::spawn_local(async move {
            let url = format!(
                "{}?include_superseded=true",
                api::SESSION.url(&[id.as_str()])
            );
            match fetch_json::<SessionDetail>(api::SESSION.method(), &url, None).await {
                Ok(d) if this.session_id().as_ref() == Some(&id) => {
                    // The session too: what the other tab's action changed (a tool's rename).
                    this.apply(Event::Session(d.session));
                    for m in d.messages {
                        this.apply(Event::Message(m));
                    }
                    this.load_runs(d.runs);
                    this.refresh_session_state();
                }
                Ok(_) => {}
                Err(e) => this.error.set(Some(e.explain())),
            }
        });
    }

    /// Applies one live event.
    pub fn apply(&self, event: Event) {
        let event = match event {
            Event::Delta(d) => return self.gather(d),
            // Whatever comes after deltas finds them applied: events take effect in order.
            other => {
                self.flush_deltas();
                other
            }
        };
        if let Some(a) = self.approvals {
            match &event {
                Event::ToolCall(t) if t.call.approval.is_some() => {
                    if let Some(sid) = self
                        .session
                        .with_untracked(|s| s.as_ref().map(|s| s.id.clone()))
                    {
                        a.heard_call(&sid, t);
                    }
                }
                Event::Run(r) => a.heard_run(r),
                _ => {}
            }
        }
        match event {
            Event::Message(m) => {
                let slot = self
                    .messages
                    .with_untracked(|ms| ms.iter().find(|(id, _)| *id == m.id).map(|(_, s)| *s));
                match slot {
                    // A superseded message stays, folded away (see `show_superseded`).
                    Some(s) => {
                        s.set(m);
                        self.replaced.update(|n| *n = n.wrapping_add(1));
                    }
                    None => self
                        .messages
                        .update(|ms| ms.push((m.id.clone(), RwSignal::new(m)))),
                }
            }
            Event::Delta(d) => self.apply_deltas(&[d]),
            Event::Run(r) => {
                self.put_run(r.clone());
                if self.browser_retries() || r.status != RunStatus::Failed {
                    let streak = self
                        .runs
                        .with_untracked(|rs| crate::tier2::failed_streak(rs));
                    self.retrier.observe(&r, true, streak);
                }
                // The followed run went on (or ended): the notice about the last click is done.
                if r.held_by.is_none()
                    && r.status != RunStatus::Queued
                    && self.notice.with_untracked(|n| n.is_some())
                {
                    self.notice.set(None);
                }
                self.refresh_session_state();
            }
            Event::Session(s) => {
                // Never two retries for one failure: leaving `browser` stops this page's.
                if s.auto_retry != AutoRetry::Browser
                    && matches!(
                        self.retrier.state.get_untracked(),
                        crate::tier2::State::Armed { .. }
                    )
                {
                    // (Not a dismissal: the failure is the server's to retry now.)
                    self.retrier.feed(crate::tier2::Input::RunActive);
                }
                self.set_session(Some(s));
                self.refresh_session_state();
            }
            Event::Attempt(a) => self.attempt.set(Some(a)),
            Event::ToolCall(t) => {
                let slot = self.messages.with_untracked(|ms| {
                    ms.iter()
                        .find(|(id, _)| *id == t.message_id)
                        .map(|(_, s)| *s)
                });
                if let Some(s) = slot {
                    s.update(|m| m.apply_tool_call(t.call));
                }
            }
        }
    }

    /// The session's status and last run, derived from its runs, into the chat and the list.
    pub fn refresh_session_state(&self) {
        // Read in place: a long session has a run per turn, and this runs on every run event.
        let (busy, asking, last) = self.runs.with_untracked(|runs| {
            let busy = runs
                .iter()
                .any(|r| r.status.is_active() && r.held_by.is_none());
            let asking = runs
                .iter()
                .any(|r| r.status == RunStatus::AwaitingApproval && r.held_by.is_none());
            let last: Option<RunSummary> = runs.last().map(Run::summary);
            (busy, asking, last)
        });
        self.session.update(|s| {
            if let Some(s) = s {
                s.status = match (asking, busy) {
                    (true, _) => SessionStatus::AwaitingApproval,
                    (false, true) => SessionStatus::Running,
                    (false, false) => SessionStatus::Idle,
                };
                s.last_run = last;
            }
        });
        if let Some(s) = self.session.get_untracked() {
            use_sessions().upsert(s);
        }
    }

    /// How many agent replies were superseded (earlier attempts).
    pub fn superseded_replies(&self) -> usize {
        // (A message becomes superseded by a whole message event, never by a delta.)
        self.replaced.track();
        self.messages.with(|ms| {
            ms.iter()
                .filter(|(_, m)| {
                    m.with_untracked(|m| m.superseded && m.role == crate::wire::Role::Agent)
                })
                .count()
        })
    }

    /// The open session's id, once loaded.
    pub fn session_id(&self) -> Option<crate::wire::SessionId> {
        self.session
            .with_untracked(|s| s.as_ref().map(|s| s.id.clone()))
    }

    /// Cancels a run (Stop); a refusal goes to `error`.
    pub fn stop_run(&self, run_id: crate::wire::RunId, error: RwSignal<Option<String>>) {
        let Some(sid) = self.session_id() else { return };
        let this = *self;
        leptos::task::spawn_local(async move {
            let url = api::CANCEL_RUN.url(&[sid.as_str(), run_id.as_str()]);
            match fetch_json::<Run>(api::CANCEL_RUN.method(), &url, Some("{}".into())).await {
                Ok(run) => this.apply(Event::Run(run)),
                Err(e) => error.set(Some(e.explain())),
            }
        });
    }

    /// `f` of run `id`, tracking that run alone (and its arrival).
    pub fn with_run<T>(&self, id: &RunId, f: impl FnOnce(&Run) -> T) -> Option<T> {
        let cell = self.cells.try_update_value(|c| c.run(id))?;
        cell.with(|r| r.as_ref().map(f))
    }

    /// `f` of the latest run asked for by prompt `anchor`, tracking that run and which it is.
    pub fn with_prompt_run<T>(&self, anchor: &MessageId, f: impl FnOnce(&Run) -> T) -> Option<T> {
        let cell = self.cells.try_update_value(|c| c.prompt(anchor))?;
        let id = cell.get()?;
        self.with_run(&id, f)
    }

    /// The session's active run: running, or waiting for a tool call's approval (Stop ends
    /// either).
    pub fn running_run(&self) -> Option<Run> {
        self.runs.with(|rs| {
            rs.iter()
                .find(|r| matches!(r.status, RunStatus::Running | RunStatus::AwaitingApproval))
                .cloned()
        })
    }
}
