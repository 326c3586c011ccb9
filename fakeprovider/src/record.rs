//! What the fake remembers: every request (with its headers' authorization), requests per
//! model, `tool-K` conversations, and TCP connections accepted.
use crate::routed::ToolStep;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One request as the fake got it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub body: Value,
    pub authorization: Option<String>,
}

#[derive(Default)]
pub(crate) struct Record {
    seen: Mutex<Vec<Seen>>,
    counts: Mutex<HashMap<String, u64>>,
    /// `tool-K` conversations by their last `user` message.
    pub(crate) tool_steps: Mutex<HashMap<String, ToolStep>>,
    connections: AtomicU64,
}

impl Record {
    pub(crate) fn count(&self, model: &str) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry(model.to_string())
            .or_default() += 1;
    }

    pub(crate) fn keep(&self, seen: Seen) {
        self.seen.lock().unwrap().push(seen);
    }

    pub(crate) fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn requests(&self, model: &str) -> u64 {
        let counts = self.counts.lock().unwrap();
        counts.get(model).copied().unwrap_or(0)
    }

    pub(crate) fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    pub(crate) fn tool_step(&self, key: &str) -> Option<ToolStep> {
        self.tool_steps.lock().unwrap().get(key).copied()
    }
}
