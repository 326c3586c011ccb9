//! Streaming replies' text saved in batches: each run hands its text over on its timer, and
//! one task writes whatever has gathered in one transaction, so a thousand streams cost one
//! commit per round rather than a thousand. A save never overwrites a reply that has ended
//! or a later save (the store checks `status` and `delta_seq`), so order does not matter.
//! A batch the database refuses is written again reply by reply, so one bad reply never
//! stops the others' saves.
use crate::store::Store;
use std::collections::HashMap;
use tokio::sync::mpsc;

/// A streaming reply's text so far and how many deltas it holds.
pub struct Save {
    pub message_id: String,
    pub text: String,
    pub seq: u64,
}

#[derive(Clone)]
pub struct Saver {
    tx: mpsc::UnboundedSender<Save>,
}

impl Saver {
    /// Starts the writing task; it ends when every `Saver` is dropped.
    pub fn start(store: Store) -> Saver {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(write(store, rx));
        Saver { tx }
    }

    /// Queues a save (the newest per reply wins).
    pub fn save(&self, save: Save) {
        let _ = self.tx.send(save);
    }
}

async fn write(store: Store, mut rx: mpsc::UnboundedReceiver<Save>) {
    let mut batch: HashMap<String, (String, u64)> = HashMap::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(s) = next {
            match batch.get(&s.message_id) {
                Some((_, seq)) if *seq >= s.seq => {}
                _ => {
                    batch.insert(s.message_id, (s.text, s.seq));
                }
            }
            next = rx.try_recv().ok();
        }
        let saves: Vec<(String, String, u64)> = batch
            .drain()
            .map(|(id, (text, seq))| (id, text, seq))
            .collect();
        if store.save_reply_texts(&saves).await.is_err() && saves.len() > 1 {
            // One reply the database refuses must not hold back every other's save: each
            // alone, so only that one is left behind (its run's end writes its text anyway).
            for save in &saves {
                if let Err(e) = store.save_reply_texts(std::slice::from_ref(save)).await {
                    tracing::warn!(error = %e, message = %save.0, "could not save streamed text");
                }
            }
        }
    }
}
