//! One run as a task that owns its run, reply, live text, tally and cancel ([`RunTask`]).
mod agent;
mod attempts;
mod calls;
mod compact;
mod conversation;
mod live;
mod outages;
mod prepare;
mod relay;
mod saver;
mod task;
mod turn;

use crate::error::Result;
use crate::events::EventHub;
use crate::llm::{Provider, ProviderError};
use crate::store::{SessionCall, Store};
use crate::tools::builtin::Caller;
use crate::tools::Toolbox;
use app::wire::{Event, Message, RetryClass, Run};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use agent::shown;
pub use live::{overlay_mirrored, Active, Live, Waited};
pub use saver::{Save, Saver};

/// What every run works with (and nothing more of the engine): built once by the engine
/// and shared by its runs.
#[derive(Clone)]
pub struct RunContext {
    pub store: Store,
    pub hub: EventHub,
    pub provider: Arc<dyn Provider>,
    /// The catalogue's models: fallback chains, cooldowns, which take tools.
    pub models: Arc<crate::providers::models::Models>,
    /// The catalogue's ACP agents: a session on one runs its turns there (CONTRACT §9).
    pub agents: crate::acp_client::Agents,
    pub tools: Toolbox,
    pub cfg: RunConfig,
    /// Saves streaming replies' text in batches.
    pub saver: Saver,
    /// Cancelled when the server stops: a run then ends `interrupted`.
    pub stopping: CancellationToken,
    /// Woken by each decision recorded here: an ACP agent's question waiting in a run reads
    /// its call again (CONTRACT §9).
    pub decided: Arc<tokio::sync::Notify>,
}

/// A run's settings, taken from the server's configuration.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub stream_idle: Duration,
    /// How often streamed text is saved (the stored reply is never further behind).
    pub save_every: Duration,
    /// A reply's deltas go out at most once in this long (zero: each as it comes).
    pub delta_window: Duration,
    pub tier1: crate::retry::policy::Policy,
    /// Per-session token budget.
    pub spend_limit_tokens: Option<u64>,
    /// Context window used for compaction (`None`: drop the older half).
    pub context_tokens: Option<u64>,
    /// The longest reply a run may stream (bytes); past it the run fails `reply_too_large`.
    pub max_reply_bytes: usize,
    /// The longest a run may take from its start; past it the run fails `timeout`.
    pub max_run: Duration,
    /// Model steps per turn; past them the run fails `max_steps`.
    pub max_steps: u32,
    /// One tool call's limit.
    pub tool_timeout: Duration,
    /// How a model that is out is probed (CONTRACT §7).
    pub parking: crate::retry::parking::Parking,
}

/// The built-in `mulligan` tools as a run's model calls them: through the session commands
/// (the engine's), with the run's session as the caller.
pub trait Builtins: Send + Sync {
    fn call<'a>(
        &'a self,
        caller: &'a Caller,
        tool: &'a str,
        args: Value,
    ) -> BoxFuture<'a, Result<Value>>;
}

/// One run executing here: its run and streaming reply as the store started them, what its
/// provider requests need of its session, its live text and cancel ([`Active`], which the
/// engine keeps too), and what its steps add up.
pub struct RunTask {
    ctx: Arc<RunContext>,
    builtins: Arc<dyn Builtins>,
    run: Run,
    reply: Message,
    session: SessionCall,
    active: Active,
    tally: Tally,
    /// Resumed after its calls were decided: the milliseconds it executed before.
    resumed: Option<i64>,
}

/// What a run's steps add up.
#[derive(Default)]
struct Tally {
    /// The tokens the provider reported.
    tokens: u64,
    /// The Tier 1 attempts made (counted on across steps, not read back per step).
    attempts: u32,
    /// The tool calls the model asked for (their order in the run).
    calls: u32,
    /// Which model answered each step, and what it fell back from.
    served: Vec<app::wire::Served>,
    /// The models whose outage the step being opened probes.
    probing: Vec<String>,
    /// An ACP agent's tool calls in this run, by the agent's id for them (CONTRACT §9).
    agent_calls: std::collections::HashMap<String, app::wire::ToolCall>,
    /// Why the agent ended a completed turn, when not simply done (CONTRACT §9).
    agent_stop: Option<String>,
}

/// How a run's stream ended, before it is recorded.
enum End {
    Completed,
    Failed(ProviderError),
    Cancelled,
    /// The server is stopping: the run is recorded as interrupted.
    Stopping,
    /// A step's calls wait for the operator (CONTRACT §8): the run parks with them.
    AwaitingApproval(Vec<crate::store::AskedCall>),
    /// Failed before or without the provider (spend limit, the server itself), or ended by
    /// one of Mulligan's own limits (a reply too large).
    Refused {
        class: RetryClass,
        message: String,
    },
}

impl RunTask {
    /// Announces an event of the run's session to its subscribers.
    fn publish(&self, event: Event) {
        self.ctx.hub.publish(&self.run.session_id, &event);
    }
}
