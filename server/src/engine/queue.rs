//! The per-session queue: starting a session's next queued run (one active run per
//! session) and releasing the prompts held behind a failed turn.
use super::{runner, Active, Engine};
use crate::error::Result;
use crate::store::Started;
use app::wire::Event;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl Engine {
    /// Lets the prompts held behind a failed turn go on (in order; answers their ids). They
    /// are newer turns: the failed turn's waiting background retry ends.
    pub async fn release(&self, session_id: &str) -> Result<Vec<String>> {
        self.inner.store.session_exists(session_id).await?;
        let _guard = self.lock(session_id).await?;
        let released = self.inner.store.release_held(session_id).await?;
        let ids = released.iter().map(|r| r.id.clone()).collect();
        let any = !released.is_empty();
        for run in released {
            self.publish(session_id, Event::Run(run));
        }
        self.pump(session_id).await?;
        if any && self.inner.store.clear_waiting_retry(session_id).await? {
            tracing::info!(session = %session_id, "released prompts ended the waiting background retry");
            crate::metrics::metrics().background_retry("superseded");
            self.publish_session(session_id).await?;
        }
        Ok(ids)
    }

    /// Starts the session's next queued run unless one is running. Call under the lock.
    /// Answers the started run's id.
    /// (Boxed with an explicit `Send`: runner → finish → pump is a cycle of futures.)
    pub(super) fn pump<'a>(
        &'a self,
        session_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            let Some(owner) = self.owner() else {
                return Ok(None);
            };
            let started = self.inner.store.start_next(session_id, owner).await?;
            Ok(started.map(|s| self.launch(s)))
        })
    }

    /// This instance's id as the owner of the runs it starts; `None` once the server is
    /// stopping (nothing starts then).
    pub(super) fn owner(&self) -> Option<&str> {
        (!self.inner.stopping.is_cancelled()).then_some(self.inner.instance.as_str())
    }

    /// Announces a run the store just started and executes it as a task; answers its id.
    pub(super) fn launch(&self, started: Started) -> String {
        let Started { run, reply, call } = started;
        let session_id = run.session_id.clone();
        self.publish(&session_id, Event::Run(run.clone()));
        self.publish(&session_id, Event::Message(reply.clone()));
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
            .spawn(async move { runner::execute(engine, run, reply, call, active).await });
        id
    }

    /// Starts the session's next run under its lock.
    pub(super) async fn start_next(&self, session_id: &str) -> Result<()> {
        let _guard = self.lock(session_id).await?;
        self.pump(session_id).await.map(|_| ())
    }
}
