//! Process-wide counters (atomics), rendered as Prometheus text on `/metrics`.
use crate::error::Result;
use app::wire::{ErrorCode, RetryClass, RetryReceipt, Run, RunKind, RunStatus};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Tier 1 attempt outcomes: `ok`, every class of [`RetryClass::ALL`], and `other` for a class
/// this build does not know (counted, not dropped).
const ATTEMPT_OUTCOMES: usize = RetryClass::ALL.len() + 2;
/// Answers to retry-now (`POST /sessions/:sid/retry`, MCP `retry_session`).
const RETRY_NOW_OUTCOMES: [&str; 4] = ["started", "busy", "nothing_failed", "stopped"];
/// What became of background retries: scheduled, fired, cancelled, or superseded by retry-now.
const BACKGROUND_OUTCOMES: [&str; 4] = ["scheduled", "fired", "cancelled", "superseded"];
/// How runs ended, and `superseded` for ended runs whose reply a regenerate or resend replaced.
const RUN_STATUSES: [&str; 4] = ["completed", "failed", "cancelled", "superseded"];

pub struct Metrics {
    requests_avoided: AtomicU64,
    fenced_writes: AtomicU64,
    tier1_attempts: [AtomicU64; ATTEMPT_OUTCOMES],
    tier2_retries: AtomicU64,
    retry_now: [AtomicU64; RETRY_NOW_OUTCOMES.len()],
    runs: [AtomicU64; RUN_STATUSES.len()],
    background: [AtomicU64; BACKGROUND_OUTCOMES.len()],
}

static METRICS: Metrics = Metrics::new();

/// This process's counters.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

fn bump(counters: &[AtomicU64], labels: &[&str], label: &str, by: u64) {
    if let Some(i) = labels.iter().position(|l| *l == label) {
        counters[i].fetch_add(by, Relaxed);
    }
}

impl Metrics {
    pub const fn new() -> Metrics {
        Metrics {
            requests_avoided: AtomicU64::new(0),
            fenced_writes: AtomicU64::new(0),
            tier1_attempts: [const { AtomicU64::new(0) }; ATTEMPT_OUTCOMES],
            tier2_retries: AtomicU64::new(0),
            retry_now: [const { AtomicU64::new(0) }; RETRY_NOW_OUTCOMES.len()],
            runs: [const { AtomicU64::new(0) }; RUN_STATUSES.len()],
            background: [const { AtomicU64::new(0) }; BACKGROUND_OUTCOMES.len()],
        }
    }

    /// A provider request was not sent because a cooldown held its key.
    pub fn request_avoided(&self) {
        self.requests_avoided.fetch_add(1, Relaxed);
    }

    /// A write of a run's progress was refused because this instance's lease on the run
    /// was not live (lapsed, or taken over by another instance).
    pub fn fenced_write(&self) {
        self.fenced_writes.fetch_add(1, Relaxed);
    }

    /// A Tier 1 attempt (one provider request) ended: `None` for ok, else its failure's class.
    pub fn tier1_attempt(&self, failure: Option<&RetryClass>) {
        let i = match failure {
            None => 0,
            Some(class) => RetryClass::ALL
                .iter()
                .position(|c| c == class)
                .map_or(ATTEMPT_OUTCOMES - 1, |i| i + 1),
        };
        self.tier1_attempts[i].fetch_add(1, Relaxed);
    }

    /// A regenerate carrying `if_last_run` arrived: the browser's Tier 2 fired.
    pub fn tier2_retry(&self) {
        self.tier2_retries.fetch_add(1, Relaxed);
    }

    /// Retry-now answered: `started` (`None`), or its refusal (`retry.busy` counts as `busy`);
    /// an error that is not a retry-now refusal is not an outcome and is not counted.
    pub fn retry_now(&self, refusal: Option<&ErrorCode>) {
        let outcome = match refusal {
            None => "started",
            Some(ErrorCode::RetryBusy) => "busy",
            Some(ErrorCode::RetryNothingFailed) => "nothing_failed",
            Some(ErrorCode::RetryStopped) => "stopped",
            Some(_) => return,
        };
        bump(&self.retry_now, &RETRY_NOW_OUTCOMES, outcome, 1);
    }

    /// A run ended with `status` (queued and running are not ends and are not counted).
    pub fn run_ended(&self, status: RunStatus) {
        if !status.is_active() {
            bump(&self.runs, &RUN_STATUSES, status.as_str(), 1);
        }
    }

    /// A background retry was `scheduled`, `fired`, `cancelled` or `superseded` (retry-now).
    pub fn background_retry(&self, outcome: &str) {
        bump(&self.background, &BACKGROUND_OUTCOMES, outcome, 1);
    }

    /// `n` ended runs had their reply superseded.
    pub fn runs_superseded(&self, n: u64) {
        bump(&self.runs, &RUN_STATUSES, "superseded", n);
    }

    /// A run a cancel ended before it started (the run's task counts the ones it executed).
    pub fn cancelled_before_start(&self, run: &Run) {
        if run.status == RunStatus::Cancelled && run.started_at.is_none() {
            self.run_ended(RunStatus::Cancelled);
        }
    }

    /// Counts a retry-now answer: its outcome and, for a resend, the failed run it superseded.
    pub fn retry_now_answered(&self, answer: &Result<RetryReceipt>) {
        match answer {
            Ok(receipt) => {
                self.retry_now(None);
                if receipt.kind == RunKind::Resend {
                    self.runs_superseded(1);
                }
            }
            Err(e) => self.retry_now(Some(&e.code())),
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, value) in rows {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let labelled = |key: &str, labels: &[&str], counters: &[AtomicU64]| {
            labels
                .iter()
                .zip(counters)
                .map(|(l, c)| (format!("{{{key}=\"{l}\"}}"), c.load(Relaxed)))
                .collect::<Vec<_>>()
        };
        counter(
            "mulligan_provider_requests_avoided_total",
            "Provider requests not sent because a provider-wide cooldown held their key.",
            vec![(String::new(), self.requests_avoided.load(Relaxed))],
        );
        counter(
            "mulligan_fenced_writes_total",
            "Writes of a run's progress (a tool call, a run's end) refused because this instance's lease on the run was not live: lapsed, or taken over by another instance.",
            vec![(String::new(), self.fenced_writes.load(Relaxed))],
        );
        let attempt_labels: Vec<&str> = std::iter::once("ok")
            .chain(RetryClass::ALL.iter().map(RetryClass::as_str))
            .chain(std::iter::once("other"))
            .collect();
        counter(
            "mulligan_tier1_attempts_total",
            "Tier 1 attempts (provider requests) by outcome: ok or the failure's retry class.",
            labelled("class", &attempt_labels, &self.tier1_attempts),
        );
        counter(
            "mulligan_tier2_retries_total",
            "Tier 2 retries fired by browsers (regenerate calls carrying if_last_run).",
            vec![(String::new(), self.tier2_retries.load(Relaxed))],
        );
        counter(
            "mulligan_retry_now_total",
            "Retry-now calls by outcome.",
            labelled("outcome", &RETRY_NOW_OUTCOMES, &self.retry_now),
        );
        counter(
            "mulligan_background_retries_total",
            "Background retries (auto_retry: background) by what became of them.",
            labelled("outcome", &BACKGROUND_OUTCOMES, &self.background),
        );
        counter(
            "mulligan_runs_total",
            "Runs by how they ended; superseded counts ended runs whose reply was replaced.",
            labelled("status", &RUN_STATUSES, &self.runs),
        );
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_counter_with_its_labels() {
        let m = Metrics::new();
        m.request_avoided();
        m.request_avoided();
        m.tier1_attempt(None);
        m.tier1_attempt(Some(&RetryClass::RateLimited));
        m.tier1_attempt(Some(&RetryClass::RateLimited));
        m.tier1_attempt(Some(&RetryClass::Other("no_such_class".into())));
        m.tier2_retry();
        m.retry_now(None);
        m.retry_now(Some(&ErrorCode::RetryBusy));
        m.retry_now(Some(&ErrorCode::RetryNothingFailed));
        m.retry_now(Some(&ErrorCode::NotFound));
        m.run_ended(RunStatus::Cancelled);
        m.run_ended(RunStatus::Running);
        m.runs_superseded(3);
        m.background_retry("fired");
        m.background_retry("fired");
        m.background_retry("cancelled");
        m.fenced_write();
        let text = m.render();
        for line in [
            "# TYPE mulligan_provider_requests_avoided_total counter",
            "mulligan_provider_requests_avoided_total 2",
            "mulligan_tier1_attempts_total{class=\"ok\"} 1",
            "mulligan_tier1_attempts_total{class=\"rate_limited\"} 2",
            "mulligan_tier1_attempts_total{class=\"quota_exhausted\"} 0",
            "mulligan_tier1_attempts_total{class=\"other\"} 1",
            "mulligan_tier2_retries_total 1",
            "mulligan_fenced_writes_total 1",
            "mulligan_retry_now_total{outcome=\"started\"} 1",
            "mulligan_retry_now_total{outcome=\"busy\"} 1",
            "mulligan_retry_now_total{outcome=\"nothing_failed\"} 1",
            "mulligan_runs_total{status=\"cancelled\"} 1",
            "mulligan_runs_total{status=\"completed\"} 0",
            "mulligan_runs_total{status=\"superseded\"} 3",
            "mulligan_background_retries_total{outcome=\"fired\"} 2",
            "mulligan_background_retries_total{outcome=\"cancelled\"} 1",
            "mulligan_background_retries_total{outcome=\"superseded\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains("no_such_class"),
            "an unknown class counts as other"
        );
        for class in RetryClass::ALL {
            let line = format!("mulligan_tier1_attempts_total{{class=\"{class}\"}} ");
            assert!(text.contains(&line), "every class has its line: {class}");
        }
    }
}
