//! The run engine: dispatch (post a prompt → queued run), the per-session queue (one active
//! run per session), cancel, release, and restart recovery. Every decision about a session's
//! runs is taken under that session's lock ([`Engine::lock`]) — in-process, and on a shared
//! database also an advisory lock across instances — which is what makes "one active run
//! per session", the claims and the ordering of queued prompts atomic.
mod background;
mod compact;
mod dismiss;
mod dispatch;
mod lease;
mod locks;
mod reconcile;
mod runner;
mod saver;
mod step;

use crate::error::{Error, Kind, Result};
use crate::events::EventHub;
use crate::llm::Provider;
use crate::retry::classify;
use crate::store::{Outcome, SessionLock, Store};
use app::wire::{Event, Message, RetryClass, Run, RunStatus, MAX_CONTENT_CHARS};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Engine settings taken from the server's configuration.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub stream_idle: Duration,
    /// How often streamed text is saved (the stored reply is never further behind).
    pub save_every: Duration,
    pub tier1: crate::retry::policy::Policy,
    /// Per-session token budget.
    pub spend_limit_tokens: Option<u64>,
    /// Context window used for compaction (`None`: drop the older half).
    pub context_tokens: Option<u64>,
    /// The longest reply a run may stream (bytes); past it the run fails `reply_too_large`.
    pub max_reply_bytes: usize,
    /// The longest a run may take from its start; past it the run fails `timeout`.
    pub max_run: Duration,
    /// Background retries' countdown (Tier 2's policy, served to the browser too).
    pub background: app::tier2::Policy,
    /// How often this instance ends the runs it recorded `running` but no longer executes.
    pub reconcile_every: Duration,
    /// Model steps per turn; past them the run fails `max_steps`.
    pub max_steps: u32,
    /// One tool call's limit.
    pub tool_timeout: Duration,
}

#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    hub: EventHub,
    provider: Arc<dyn Provider>,
    tools: crate::tools::Toolbox,
    cfg: EngineConfig,
    saver: saver::Saver,
    /// This instance's id: the owner recorded on the runs it executes.
    instance: String,
    locks: locks::Locks,
    active: Mutex<HashMap<String, Active>>,
    tasks: TaskTracker,
    /// Cancelled when the server stops: runners record their run as interrupted.
    stopping: CancellationToken,
}

/// A run being executed here: how to stop it, what it streamed so far, when it ended.
#[derive(Clone)]
struct Active {
    cancel: CancellationToken,
    live: Arc<Mutex<Live>>,
    ended: Arc<tokio::sync::Notify>,
}

impl Active {
    /// The live text; a panic elsewhere while it was held does not make it unreadable.
    fn live(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The reply text streamed so far and how many deltas it holds.
#[derive(Default)]
pub struct Live {
    pub text: String,
    pub seq: u64,
    /// Model steps whose provider call opened.
    pub steps: u32,
}

impl Engine {
    pub fn new(
        store: Store,
        hub: EventHub,
        provider: Arc<dyn Provider>,
        tools: crate::tools::Toolbox,
        cfg: EngineConfig,
    ) -> Engine {
        Engine {
            inner: Arc::new(Inner {
                saver: saver::Saver::start(store.clone()),
                store,
                hub,
                provider,
                tools,
                cfg,
                instance: crate::clock::new_id("i"),
                locks: locks::Locks::default(),
                active: Mutex::default(),
                tasks: TaskTracker::new(),
                stopping: CancellationToken::new(),
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.inner.hub
    }

    /// The tool sources of agent turns.
    pub fn tools(&self) -> &crate::tools::Toolbox {
        &self.inner.tools
    }

    /// Runs `tick` every `period` until the server stops; a failed tick is logged
    /// (`failed` says what did not happen) and the next one tries again.
    fn every(
        &self,
        period: Duration,
        failed: &'static str,
        tick: impl Fn(Engine) -> futures::future::BoxFuture<'static, Result<()>> + Send + 'static,
    ) {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(period);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = engine.inner.stopping.cancelled() => return,
                    _ = timer.tick() => {}
                }
                if let Err(e) = tick(engine.clone()).await {
                    tracing::warn!(error = %e, "{failed}; trying again");
                }
            }
        });
    }

    /// This instance's id.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The session's lock: held for every decision about its runs. On a shared database it
    /// is also held across instances, and released only once the events published under it
    /// are in the shared log (so no instance acts on a state its events have not reached).
    async fn lock(&self, session_id: &str) -> Result<SessionGuard> {
        let local = self.inner.locks.lock(session_id).await;
        let shared = self.inner.store.lock_session(session_id).await?;
        Ok(SessionGuard {
            _local: local,
            shared: shared.map(|s| (s, self.inner.hub.clone())),
        })
    }

    fn publish(&self, session_id: &str, event: Event) {
        self.inner.hub.publish(session_id, &event);
    }

    /// Lets the prompts held behind a failed turn go on.
    pub async fn release(&self, session_id: &str) -> Result<Vec<String>> {
        self.inner.store.session_exists(session_id).await?;
        let _guard = self.lock(session_id).await?;
        let released = self.inner.store.release_held(session_id).await?;
        let ids = released.iter().map(|r| r.id.clone()).collect();
        for run in released {
            self.publish(session_id, Event::Run(run));
        }
        self.pump(session_id).await?;
        Ok(ids)
    }

    /// Stops a queued or running run; it ends `cancelled`, whatever the provider says after.
    /// A run stopped before it started is counted here (the runner counts the ones it ran).
    pub async fn cancel(&self, session_id: &str, run_id: &str) -> Result<Run> {
        let run = self.cancel_run(session_id, run_id).await?;
        crate::metrics::metrics().cancelled_before_start(&run);
        Ok(run)
    }

    async fn cancel_run(&self, session_id: &str, run_id: &str) -> Result<Run> {
        let run = self.inner.store.run(run_id).await?;
        if run.session_id != session_id {
            return Err(Error::not_found("run", run_id));
        }
        let guard = self.lock(session_id).await?;
        let run = self.inner.store.run(run_id).await?;
        match run.status {
            RunStatus::Queued => {
                let outcome = Outcome {
                    status: RunStatus::Cancelled,
                    content: String::new(),
                    error_message: None,
                    retry: None,
                    tokens_used: 0,
                };
                let (run, _) = self
                    .inner
                    .store
                    .finish_run(run_id, &outcome)
                    .await?
                    .ok_or_else(ended)?;
                self.publish(session_id, Event::Run(run.clone()));
                Ok(run)
            }
            RunStatus::Running => {
                let active = self.active(run_id);
                let Some(active) = active else {
                    // Executed by another instance: ask it, and wait for it to record the end.
                    drop(guard);
                    return self.cancel_elsewhere(run_id).await;
                };
                let stopped = active.ended.notified();
                active.cancel.cancel();
                drop(guard);
                // The runner records `cancelled` and notifies; it never takes long.
                let _ = tokio::time::timeout(Duration::from_secs(5), stopped).await;
                let run = self.inner.store.run(run_id).await?;
                match run.status {
                    // It ended some other way before the cancel reached it.
                    RunStatus::Completed | RunStatus::Failed => Err(ended()),
                    _ => Ok(run),
                }
            }
            _ => Err(ended()),
        }
    }

    /// Stops what a session is doing: its running run, else its next queued one (prompts
    /// held behind a failure are not "doing" anything), and its waiting background retry
    /// (then, with nothing running, it answers the failed run that retry was for).
    /// `conflict` when there is none of these.
    pub async fn stop(&self, session_id: &str) -> Result<Run> {
        self.inner.store.session_exists(session_id).await?;
        let waited = match self.cancel_waiting_retry(session_id).await {
            Ok(_) => true,
            Err(e) if matches!(e.kind, Kind::Conflict) => false,
            Err(e) => return Err(e),
        };
        let runs = self.inner.store.runs(session_id).await?;
        let target = runs
            .iter()
            .find(|r| r.status == RunStatus::Running)
            .or_else(|| {
                runs.iter()
                    .find(|r| r.status == RunStatus::Queued && r.held_by.is_none())
            });
        match target {
            Some(run) => self.cancel(session_id, &run.id).await,
            None if waited => self
                .inner
                .store
                .last_turn(session_id)
                .await?
                .ok_or_else(|| Error::internal("a waiting retry without a turn")),
            None => Err(Error::conflict(
                "nothing is running, queued or waiting to retry in this session",
            )),
        }
    }

    /// The run `run_id` if this instance executes it.
    fn active(&self, run_id: &str) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .cloned()
    }

    /// The ids of the runs executing here.
    fn active_ids(&self) -> Vec<String> {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        active.keys().cloned().collect()
    }

    /// The streamed text of a run executing here, for snapshots of a streaming reply.
    pub fn live_text(&self, run_id: &str) -> Option<(String, u64)> {
        let active = self.active(run_id)?;
        let live = active.live();
        Some((live.text.clone(), live.seq))
    }

    /// Takes a run out of this instance's active set (its task has ended).
    fn forget_active(&self, run_id: &str) -> Option<Active> {
        self.inner
            .active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(run_id)
    }

    /// Starts the session's next queued run unless one is running. Call under the lock.
    /// Answers the started run's id.
    /// (Boxed with an explicit `Send`: runner → finish → pump is a cycle of futures.)
    fn pump<'a>(
        &'a self,
        session_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let store = &self.inner.store;
            if self.inner.stopping.is_cancelled() {
                return Ok(None);
            }
            let Some(next) = store.next_to_start(session_id).await? else {
                return Ok(None);
            };
            let (run, reply) = store.start_run(&next, &self.inner.instance).await?;
            self.publish(session_id, Event::Run(run.clone()));
            self.publish(session_id, Event::Message(reply.clone()));
            let active = Active {
                cancel: CancellationToken::new(),
                live: Arc::default(),
                ended: Arc::default(),
            };
            self.inner
                .active
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(run.id.clone(), active.clone());
            let engine = self.clone();
            let id = run.id.clone();
            self.inner
                .tasks
                .spawn(async move { runner::execute(engine, run, reply, active).await });
            Ok(Some(id))
        })
    }

    /// Records a run's end (unless it already ended), holds the prompts behind a failure,
    /// and starts the next run. A failed write is tried again (a busy database must not
    /// leave a run `running`); should every try fail, the reconcile ends the run later.
    async fn finish(&self, run: &Run, outcome: Outcome) {
        let session_id = &run.session_id;
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=FINISH_TRIES {
            match self.record_end(run, &outcome).await {
                Ok(()) => break,
                Err(e) if attempt < FINISH_TRIES => {
                    tracing::warn!(run = %run.id, attempt, error = %e, "could not record the end of a run; trying again");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::error!(run = %run.id, error = %e, "could not record the end of a run; the reconcile will end it");
                }
            }
        }
        if let Some(active) = self.forget_active(&run.id) {
            active.ended.notify_waiters();
        }
        if let Err(e) = self.start_next(session_id).await {
            tracing::error!(session = %session_id, error = %e, "could not start the next run");
        }
    }

    /// Records the end under the session's lock and announces what it changed.
    async fn record_end(&self, run: &Run, outcome: &Outcome) -> Result<()> {
        let session_id = &run.session_id;
        let _guard = match self.lock(session_id).await {
            Ok(g) => Some(g),
            Err(e) => {
                // Recording the end matters more: it is conditional on the run not having ended.
                tracing::error!(run = %run.id, error = %e, "could not take the session lock");
                None
            }
        };
        if let Some((run, reply)) = self.inner.store.finish_run(&run.id, outcome).await? {
            if let Some(mut reply) = reply {
                if run.tools_executed > 0 || run.steps > 1 {
                    if let Err(e) = self.inner.store.with_parts_of(&mut reply).await {
                        tracing::warn!(run = %run.id, error = %e, "could not read a reply's tool calls");
                    }
                }
                self.publish(session_id, Event::Message(reply));
            }
            self.publish(session_id, Event::Run(run.clone()));
            match run.status {
                RunStatus::Failed => {
                    for held in self.inner.store.held_runs(session_id).await? {
                        self.publish(session_id, Event::Run(held));
                    }
                    self.schedule_background(&run).await?;
                }
                // A turn that completes lets the prompts held behind a failure go on.
                RunStatus::Completed => {
                    for released in self.inner.store.release_held(session_id).await? {
                        self.publish(session_id, Event::Run(released));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Starts the session's next run under its lock.
    async fn start_next(&self, session_id: &str) -> Result<()> {
        let _guard = self.lock(session_id).await?;
        self.pump(session_id).await.map(|_| ())
    }

    /// On start: runs left `running` by a stop become `failed`/`interrupted` with their
    /// partial text kept; prompts queued behind them are held; free queues start. On a
    /// shared database only runs whose instance's lease lapsed are left over (the lease
    /// keeper finds the rest as their leases lapse).
    pub async fn recover(&self) -> Result<()> {
        let store = &self.inner.store;
        let left = if store.is_shared() {
            store.orphaned_runs(lease::LEASE.as_millis() as i64).await?
        } else {
            store.runs_left_running().await?
        };
        for run in left {
            self.interrupt(&run).await?;
        }
        for session_id in store.sessions_with_queued_runs().await? {
            let _guard = self.lock(&session_id).await?;
            self.pump(&session_id).await?;
        }
        Ok(())
    }

    /// Records a run whose instance stopped or died as `failed`/`interrupted`, partial text
    /// kept, and holds the prompts queued behind it (unless it already ended).
    async fn interrupt(&self, run: &Run) -> Result<()> {
        let _guard = self.lock(&run.session_id).await?;
        self.interrupt_locked(run, "the server stopped while this reply was being written")
            .await
    }

    /// [`Engine::interrupt`] under the session lock the caller holds, with `why` as the
    /// recorded error message.
    async fn interrupt_locked(&self, run: &Run, why: &str) -> Result<()> {
        let store = &self.inner.store;
        let partial = match &run.reply_message_id {
            Some(id) => store.message(id).await?.content,
            None => String::new(),
        };
        let outcome = Outcome {
            status: RunStatus::Failed,
            content: partial,
            error_message: Some(why.into()),
            retry: Some(classify::of(RetryClass::Interrupted, None)),
            tokens_used: 0,
        };
        tracing::warn!(run = %run.id, "marking a run interrupted by a server stop");
        if let Some((run, reply)) = store.finish_run(&run.id, &outcome).await? {
            if let Some(reply) = reply {
                self.publish(&run.session_id, Event::Message(reply));
            }
            let held = store.held_runs(&run.session_id).await?;
            let session_id = run.session_id.clone();
            self.publish(&session_id, Event::Run(run.clone()));
            for h in held {
                self.publish(&session_id, Event::Run(h));
            }
            self.schedule_background(&run).await?;
        }
        Ok(())
    }

    /// Stops every run here (recorded `failed`/`interrupted`, partial text kept) and waits
    /// until the runners and the event log are done.
    pub async fn shutdown(&self) {
        self.inner.stopping.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        self.inner.hub.flush().await;
        if let Err(e) = self.inner.store.retire(&self.inner.instance).await {
            tracing::warn!(error = %e, "could not retire this instance");
        }
    }
}

/// A held session lock (see [`Engine::lock`]).
struct SessionGuard {
    _local: locks::Held,
    shared: Option<(SessionLock, EventHub)>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some((lock, hub)) = self.shared.take() {
            tokio::spawn(async move {
                hub.flush().await;
                drop(lock);
            });
        }
    }
}

/// How many times a run's end is written before the reconcile is left to end it.
const FINISH_TRIES: u32 = 5;

fn ended() -> Error {
    Error::conflict("that run has already ended")
}

/// The contract's content rule: 1..=100,000 chars after trim.
pub(crate) fn validate_content(content: &str) -> Result<&str> {
    let trimmed = content.trim();
    if trimmed.is_empty() {
        return Err(Error::invalid("content is empty: write a message"));
    }
    let n = trimmed.chars().count();
    if n > MAX_CONTENT_CHARS {
        return Err(Error::new(
            Kind::Invalid,
            format!("content is {n} characters; the limit is {MAX_CONTENT_CHARS}"),
        ));
    }
    Ok(trimmed)
}

/// A message snapshot with a streaming reply's live text laid over the stored one: this
/// instance's own runs first, else what the shared log delivered here when that is further
/// on than the stored text (whose `delta_seq` says how far it is).
pub fn overlay_live(engine: &Engine, mut m: Message) -> Message {
    if m.status == Some(app::wire::MessageStatus::Streaming) {
        let stored = m.delta_seq.unwrap_or(0);
        let live = m.run_id.as_deref().and_then(|r| {
            engine.live_text(r).or_else(|| {
                engine
                    .hub()
                    .mirrored_text(r)
                    .filter(|(_, seq)| *seq > stored)
            })
        });
        if let Some((text, seq)) = live {
            m.content = text;
            m.delta_seq = Some(seq);
        }
    }
    m
}

#[cfg(test)]
mod tests;
