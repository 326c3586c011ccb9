//! The pool of agent processes (CONTRACT §9): one per (agent, session), bounded, the idlest
//! stopped to make room and each idle one stopped after a while.
use super::process::AgentProcess;
use super::{refused, AgentSpec};
use crate::llm::ProviderError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The pool's bounds (CONTRACT §9: `MULLIGAN_ACP_MAX_PROCESSES`, `MULLIGAN_ACP_IDLE_MS`).
#[derive(Clone, Copy, Debug)]
pub struct PoolLimits {
    pub max_processes: usize,
    pub idle: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            max_processes: 8,
            idle: Duration::from_secs(600),
        }
    }
}

/// The pool of agent processes: at most `max_processes`, the longest idle stopped to make room,
/// and each one idle past `idle` stopped.
#[derive(Clone)]
pub struct Agents {
    inner: Arc<Pool>,
}

struct Pool {
    specs: BTreeMap<String, AgentSpec>,
    limits: PoolLimits,
    slots: Arc<Semaphore>,
    procs: Mutex<HashMap<(String, String), Arc<AgentProcess>>>,
    reaper: std::sync::Once,
}

impl Agents {
    pub fn new(specs: BTreeMap<String, AgentSpec>, limits: PoolLimits) -> Agents {
        let max = limits.max_processes.max(1);
        Agents {
            inner: Arc::new(Pool {
                specs,
                limits,
                slots: Arc::new(Semaphore::new(max)),
                procs: Mutex::new(HashMap::new()),
                reaper: std::sync::Once::new(),
            }),
        }
    }

    /// How `provider`'s agent is started, if it names one.
    pub(super) fn spec(&self, provider: &str) -> Option<AgentSpec> {
        self.inner.specs.get(provider).cloned()
    }

    /// Whether `provider` names an agent.
    pub fn has(&self, provider: &str) -> bool {
        self.inner.specs.contains_key(provider)
    }

    /// How many agent processes are running.
    pub fn running(&self) -> usize {
        self.inner.procs.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Stops every agent process (the server is stopping).
    pub fn stop_all(&self) {
        let procs: Vec<_> = match self.inner.procs.lock() {
            Ok(mut p) => p.drain().map(|(_, p)| p).collect(),
            Err(_) => return,
        };
        for p in procs {
            p.stop();
        }
    }

    /// The process of `key`, started when there is none (making room in the pool first).
    pub(super) async fn process(
        &self,
        key: &(String, String),
        spec: &AgentSpec,
    ) -> Result<Arc<AgentProcess>, ProviderError> {
        if let Some(p) = self
            .inner
            .procs
            .lock()
            .ok()
            .and_then(|p| p.get(key).cloned())
        {
            if !p.gone.is_cancelled() {
                return Ok(p);
            }
            self.forget(key, &p);
        }
        let slot = match self.inner.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                self.evict_idlest();
                self.inner
                    .slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| refused("the agent pool is closed".into()))?
            }
        };
        let proc = AgentProcess::start(spec, slot).await?;
        if let Ok(mut procs) = self.inner.procs.lock() {
            procs.insert(key.clone(), proc.clone());
        }
        Ok(proc)
    }

    /// Drops `proc` from the pool if it is still `key`'s.
    pub(super) fn forget(&self, key: &(String, String), proc: &Arc<AgentProcess>) {
        if let Ok(mut procs) = self.inner.procs.lock() {
            if procs.get(key).is_some_and(|p| Arc::ptr_eq(p, proc)) {
                procs.remove(key);
            }
        }
    }

    /// Stops the process idle the longest (none running a turn): a new one needs its slot.
    fn evict_idlest(&self) {
        let Ok(mut procs) = self.inner.procs.lock() else {
            return;
        };
        let idlest = procs
            .iter()
            .filter(|(_, p)| p.busy.try_lock().is_ok())
            .max_by_key(|(_, p)| p.idle_for())
            .map(|(k, _)| k.clone());
        if let Some(p) = idlest.and_then(|k| procs.remove(&k)) {
            p.stop();
        }
    }

    /// Stops, every so often, the processes idle past the limit.
    pub(super) fn start_reaper(&self) {
        self.inner.reaper.call_once(|| {
            let pool = Arc::downgrade(&self.inner);
            let every = (self.inner.limits.idle / 2)
                .clamp(Duration::from_millis(50), Duration::from_secs(30));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(pool) = pool.upgrade() else { return };
                    let idle = pool.limits.idle;
                    let Ok(mut procs) = pool.procs.lock() else {
                        return;
                    };
                    procs.retain(|_, p| {
                        let stale = p.gone.is_cancelled()
                            || (p.idle_for() >= idle && p.busy.try_lock().is_ok());
                        if stale {
                            p.stop();
                        }
                        !stale
                    });
                }
            });
        });
    }
}
