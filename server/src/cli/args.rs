//! The client commands' arguments: where the server is, the token, `--json`, and each
//! command's own (CONTRACT §4).
use app::wire::{MessageId, RunId, SessionId, ToolCallId};
use clap::{Args, Subcommand};

/// Where the server is, how to authenticate, and how to print.
#[derive(Args, Clone, Debug)]
pub struct Conn {
    /// Base URL of the running server.
    #[arg(long, env = "MULLIGAN_URL", default_value = "http://127.0.0.1:3000")]
    pub url: String,
    /// Operator token (default: the one the server keeps in `./data/token`).
    #[arg(long, env = "MULLIGAN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's JSON answer as is, on one line.
    #[arg(long)]
    pub json: bool,
}

/// The client commands, flattened beside `serve` in `mulligan`'s subcommands.
#[derive(Subcommand, Clone, Debug)]
pub enum Command {
    /// Create a session; prints its id (`--json`: the API's answer, with its agent token).
    New {
        /// The session's title (default: from its first message).
        #[arg(long)]
        title: Option<String>,
        /// The model its turns use, `<provider>/<model>` (see `mulligan models`; default: the
        /// server's).
        #[arg(long)]
        model: Option<String>,
        /// Models to fall back to, in order, before a step's first delta: `a/x,b/y` or the
        /// flag repeated (default: the catalogue's chain for its model).
        #[arg(long, value_delimiter = ',', value_name = "MODELS")]
        fallbacks: Vec<String>,
        /// No fallback at all, whatever the catalogue's chain.
        #[arg(long, conflicts_with = "fallbacks")]
        no_fallbacks: bool,
        /// Who retries a failed turn: browser (default), background or off.
        #[arg(long, value_parser = ["browser", "background", "off"])]
        auto_retry: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// List sessions, newest first (the newest 100, or every one with --all).
    Sessions {
        /// Every session, page after page, not only the newest 100.
        #[arg(long)]
        all: bool,
        /// Only sessions whose title holds each of these words (in any case).
        #[arg(long, num_args = 1.., value_name = "WORDS")]
        search: Vec<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// Post an operator message to a session (starts or queues a run).
    Send {
        /// The session's id.
        session: SessionId,
        /// The message; several words are joined with spaces.
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        /// Stream the run to the terminal until it ends: exit 0 completed, 3 failed, 4
        /// cancelled; Ctrl-C asks whether to cancel it.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Run a session again from one of its operator messages.
    Regenerate {
        /// The session's id.
        session: SessionId,
        /// The operator message to regenerate from.
        message: MessageId,
        #[command(flatten)]
        conn: Conn,
    },
    /// Stop a queued or running run.
    Cancel {
        /// The session's id.
        session: SessionId,
        /// The run's id.
        run: RunId,
        #[command(flatten)]
        conn: Conn,
    },
    /// Retry a session's failed last turn now (`--cancel`: cancel its waiting background retry).
    Retry {
        /// The session's id.
        session: SessionId,
        /// Cancel the session's waiting background retry instead.
        #[arg(long)]
        cancel: bool,
        /// Stream the new run until it ends (exit codes as `send --follow`).
        #[arg(long, conflicts_with = "cancel")]
        follow: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the tool calls waiting for your approval, oldest first, with the commands
    /// that decide them.
    Approvals {
        #[command(flatten)]
        conn: Conn,
    },
    /// Allow a tool call waiting for approval; the turn goes on (`--always`: and allow this
    /// tool in this session from now on).
    Approve {
        /// The run's id.
        run: RunId,
        /// The tool call's id.
        call: ToolCallId,
        /// Remember: never ask again for this tool in this session.
        #[arg(long)]
        always: bool,
        #[command(flatten)]
        conn: Conn,
    },
    /// Deny a tool call waiting for approval; the model is told (`--reason`: why), and the
    /// turn goes on (`--always`: and deny this tool in this session from now on).
    Deny {
        /// The run's id.
        run: RunId,
        /// The tool call's id.
        call: ToolCallId,
        /// Remember: deny this tool in this session from now on without asking.
        #[arg(long)]
        always: bool,
        /// Told to the model with the refusal (at most 2,000 characters).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        conn: Conn,
    },
    /// List the tool sources of agent turns and their tools.
    Tools {
        #[command(flatten)]
        conn: Conn,
    },
    /// List the models sessions can use: status, tools, fallback chain; marks the default.
    Models {
        #[command(flatten)]
        conn: Conn,
    },
    /// Look at runs.
    Runs {
        #[command(subcommand)]
        command: RunsCommand,
    },
    /// MCP over stdio: bridges to the running server's `/mcp` with MULLIGAN_TOKEN (the
    /// operator's token, or a session's agent token to act on its sub-sessions).
    Mcp {
        #[command(flatten)]
        conn: Conn,
    },
}

/// `mulligan runs …`.
#[derive(Subcommand, Clone, Debug)]
pub enum RunsCommand {
    /// One run's timeline: each Tier 1 attempt with its model, error and wait, the model
    /// that answered each step (and what it fell back from), each tool call; times from the
    /// run's start.
    Show {
        /// The run's id.
        run: RunId,
        #[command(flatten)]
        conn: Conn,
    },
}

impl Command {
    /// The connection settings every command carries.
    pub fn conn(&self) -> &Conn {
        match self {
            Command::Sessions { conn, .. }
            | Command::New { conn, .. }
            | Command::Send { conn, .. }
            | Command::Regenerate { conn, .. }
            | Command::Cancel { conn, .. }
            | Command::Retry { conn, .. }
            | Command::Tools { conn }
            | Command::Approvals { conn }
            | Command::Approve { conn, .. }
            | Command::Deny { conn, .. }
            | Command::Models { conn }
            | Command::Runs {
                command: RunsCommand::Show { conn, .. },
            }
            | Command::Mcp { conn } => conn,
        }
    }
}
