//! B4 "no quota for 50 minutes": the provider requests under a 50-minute `Retry-After`.
use super::EVENT_WAIT;
use crate::client::Server;
use crate::fake::{status_model, Fake};
use crate::report::Table;
use crate::{Opts, R};
use app::wire::{Event, RunStatus};
use std::time::{Duration, Instant};

/// Runs B4 on `server` and puts its row in the table; a second provider request is a
/// correctness failure.
pub async fn run(opts: &Opts, server: &Server, fake: &Fake, t: &mut Table) -> R<()> {
    let wait = Duration::from_secs(opts.b4_wait_secs);
    let r = measure(server, fake, wait).await?;
    t.row(
        "B4 quota",
        &format!(
            "429 Retry-After: 3000 → provider requests in {} s",
            opts.b4_wait_secs
        ),
        "".into(),
        format!(
            "requests={} (failed {}, retry after {:.0} min)",
            r.requests,
            r.retry_class,
            r.until_in_s as f64 / 60.0
        ),
        "".into(),
        "= 1",
        Some(r.requests == 1),
    );
    if r.requests != 1 {
        // A second request inside the advised window breaks the contract, not just a target.
        t.failures
            .push(format!("B4: {} provider requests, expected 1", r.requests));
    }
    Ok(())
}

pub struct B4 {
    /// Provider requests from the post to the end of the wait.
    pub requests: u64,
    pub retry_class: app::wire::RetryClass,
    /// `retry_after_until` − now, in seconds, when the run failed.
    pub until_in_s: i64,
}

/// The provider answers 429 with `Retry-After: 3000` (50 minutes); counts its requests
/// during `wait` after the post. The session's auto retry is set to `background`, so a
/// server-side retry, if there is one, is in play too.
pub async fn measure(server: &Server, fake: &Fake, wait: Duration) -> R<B4> {
    let model = status_model(429, 3000);
    let sid = server.create_session(&model).await?;
    let _ = server
        .patch_session(&sid, serde_json::json!({"auto_retry": "background"}))
        .await?;
    let mut events = server.events(&sid).await?;
    let posted = Instant::now();
    let rid = server.post_message(&sid, "go").await?.run_id;
    let run = loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        if let Event::Run(r) = e {
            if r.id == rid && !r.status.is_active() {
                break r;
            }
        }
    };
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    if run.status != RunStatus::Failed {
        return Err(format!("the run ended {:?}, not failed", run.status));
    }
    let retry = run.retry.ok_or("the failed run has no classification")?;
    let until = retry
        .retry_after_until
        .ok_or("the failed run has no retry_after_until")?;
    if let Some(rest) = wait.checked_sub(posted.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    // The run as stored agrees with the event.
    let stored = server.run(&rid).await?;
    if stored.status != RunStatus::Failed {
        return Err(format!("the stored run is {:?}", stored.status));
    }
    Ok(B4 {
        requests: fake.requests(&model),
        retry_class: retry.retry_class,
        until_in_s: (until - now_ms) / 1000,
    })
}
