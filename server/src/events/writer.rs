//! The batch writers: put published events in the store's log, one transaction per batch,
//! retried until written.
use super::published::Published;
use super::retention::{worth_writing, Prunes, SHARED_PRUNE_GRACE};
use super::write::Write;
use crate::store::{LoggedEvent, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the writer flushes the batch of new events to the store.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// A batch the store refused is written again after this, doubling up to `RETRY_CAP`.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(2);

/// Writes published events to the store, one transaction per batch, until the hub is dropped.
pub(super) async fn write_batches(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<(Arc<Published>, bool)> = Vec::new();
    let mut spilled: Vec<Arc<Published>> = Vec::new();
    let mut waiting = Vec::new();
    let mut prunes = Prunes::new(Duration::ZERO);
    fn take(
        w: Write,
        batch: &mut Vec<(Arc<Published>, bool)>,
        spilled: &mut Vec<Arc<Published>>,
        waiting: &mut Vec<tokio::sync::oneshot::Sender<()>>,
    ) {
        match w {
            Write::Event(e, ends) => batch.push((e, ends)),
            Write::Spill(e) => spilled.push(e),
            Write::Flush(done) => waiting.push(done),
            Write::Pending(..) => unreachable!("local hubs publish numbered events"),
        }
    }
    use std::sync::atomic::Ordering::Relaxed;
    while let Some(first) = prunes.recv(&store, &mut rx).await {
        take(first, &mut batch, &mut spilled, &mut waiting);
        if waiting.is_empty() {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        while let Ok(w) = rx.try_recv() {
            take(w, &mut batch, &mut spilled, &mut waiting);
        }
        if !batch.is_empty() || !spilled.is_empty() {
            let keys: Vec<(i64, bool)> = batch
                .iter()
                .map(|(p, _)| (p.id, p.name == "delta"))
                .collect();
            let mut chosen: Vec<&Published> = worth_writing(&keys)
                .into_iter()
                .map(|i| &*batch[i].0)
                .collect();
            // A spilled delta may be a batch's newest, written already; or in this batch.
            chosen.extend(spilled.iter().map(|p| &**p));
            chosen.sort_by_key(|p| p.id);
            chosen.dedup_by_key(|p| p.id);
            chosen.retain(|p| !p.stored.load(Relaxed));
            let rows: Vec<LoggedEvent> = chosen.iter().map(|p| p.logged()).collect();
            let logged: Vec<&LoggedEvent> = rows.iter().collect();
            // Never dropped: retried until written (resumes read this log).
            let mut wait = RETRY_FIRST;
            while let Err(e) = store.append_events(&logged).await {
                tracing::error!(error = %e, count = logged.len(), "could not write events to the log; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RETRY_CAP);
            }
            for p in &chosen {
                p.stored.store(true, Relaxed);
            }
            for (p, ends) in &batch {
                if *ends {
                    prunes.push(p.session_id.to_string(), p.id);
                }
            }
            drop(logged);
            drop(rows);
            drop(chosen);
            batch.clear();
            spilled.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Shared mode: numbers and sends queued events as they come (run-level events also go to
/// the log), one transaction per batch (whatever queued while the last one was written),
/// until the hub is dropped.
pub(super) async fn write_shared(store: Store, mut rx: mpsc::UnboundedReceiver<Write>) {
    let mut batch: Vec<(String, &'static str, String)> = Vec::new();
    let mut ends: Vec<bool> = Vec::new();
    let mut waiting = Vec::new();
    let mut prunes = Prunes::new(SHARED_PRUNE_GRACE);
    while let Some(first) = prunes.recv(&store, &mut rx).await {
        let mut next = Some(first);
        while let Some(w) = next {
            match w {
                Write::Pending(session, name, data, end) => {
                    batch.push((session, name, data));
                    ends.push(end);
                }
                Write::Flush(done) => waiting.push(done),
                Write::Event(..) | Write::Spill(_) => {
                    unreachable!("shared hubs let the log number events")
                }
            }
            next = rx.try_recv().ok();
        }
        if !batch.is_empty() {
            // Never dropped: retried until written. Meanwhile new events queue behind it and
            // session locks stay held until their events are in (`SessionLocks::lock`), which holds
            // back further decisions: back-pressure instead of loss.
            let mut wait = RETRY_FIRST;
            let ids = loop {
                match store.append_shared_events(&batch).await {
                    Ok(ids) => break ids,
                    Err(e) => {
                        tracing::error!(error = %e, count = batch.len(), "could not write events to the shared log; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(RETRY_CAP);
                    }
                }
            };
            for ((e, end), id) in batch.iter().zip(&ends).zip(ids) {
                if *end {
                    prunes.push(e.0.clone(), id);
                }
            }
            batch.clear();
            ends.clear();
        }
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}
