//! Cancels asked of this instance by another one: the `LISTEN` on the cancel channel,
//! opened again whenever it drops, each notification handed over as a run id.
use super::{Store, CANCEL_CHANNEL};
use app::wire::RunId;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

impl Store {
    /// Follows the cancel channel until `stopping`, handing each run another instance asked
    /// to stop to `on_cancel`; after a failure it listens again `again_after` later. Nothing
    /// on SQLite, which one instance uses alone.
    pub fn follow_cancels(
        &self,
        stopping: CancellationToken,
        again_after: Duration,
        on_cancel: impl Fn(RunId) + Send + 'static,
    ) {
        let Some(pool) = self.listen_pool().cloned() else {
            return;
        };
        tokio::spawn(async move {
            loop {
                let listener = async {
                    let mut l = sqlx::postgres::PgListener::connect_with(&pool).await?;
                    l.listen(CANCEL_CHANNEL).await?;
                    Ok::<_, sqlx::Error>(l)
                };
                let mut listener = tokio::select! {
                    _ = stopping.cancelled() => return,
                    l = listener => match l {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot listen for cancels");
                            tokio::time::sleep(again_after).await;
                            continue;
                        }
                    },
                };
                loop {
                    let n = tokio::select! {
                        _ = stopping.cancelled() => return,
                        n = listener.recv() => n,
                    };
                    match n {
                        Ok(n) => on_cancel(RunId::new(n.payload())),
                        Err(e) => {
                            tracing::warn!(error = %e, "cancel listener dropped; reconnecting");
                            break;
                        }
                    }
                }
            }
        });
    }
}
