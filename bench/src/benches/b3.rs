//! B3 cancel latency: a run cancelled while it streams or while it sleeps in Tier 1.
use super::EVENT_WAIT;
use crate::client::Server;
use crate::fake::{status_model, stream_model};
use crate::report::{ms, percentile, Table};
use crate::{Opts, R};
use app::wire::{Event, RunStatus};
use std::time::{Duration, Instant};

/// Runs `--cancels` cancels of one kind on `server` and puts their percentiles in the table.
pub async fn run(opts: &Opts, server: &Server, what: CancelWhile, t: &mut Table) -> R<()> {
    let mut response = Vec::new();
    let mut event = Vec::new();
    for i in 0..opts.cancels.max(1) {
        let c = cancel(server, what, i).await?;
        response.push(c.response);
        event.push(c.event);
    }
    let n = response.len();
    let p99r = percentile(&mut response, 99.0).unwrap_or_default();
    let p99e = percentile(&mut event, 99.0).unwrap_or_default();
    let p50r = percentile(&mut response, 50.0).unwrap_or_default();
    let worst = p99r.max(p99e);
    let what = match what {
        CancelWhile::Streaming => "running stream",
        CancelWhile::Tier1Sleep => "Tier 1 sleep (503, Retry-After: 10)",
    };
    t.row(
        "B3 cancel",
        &format!("{what}: p99 of {n} (response · run event)"),
        "".into(),
        format!("{:.1} ms · {:.1} ms", ms(p99r), ms(p99e)),
        format!("p50 {:.1} ms", ms(p50r)),
        "< 100 ms p99",
        Some(worst < Duration::from_millis(100)),
    );
    Ok(())
}

#[derive(Clone, Copy, Debug)]
pub enum CancelWhile {
    /// The run is streaming (a delta has arrived).
    Streaming,
    /// The run is in a Tier 1 sleep (its `attempt` event announced a 10 s wait).
    Tier1Sleep,
}

pub struct CancelTiming {
    /// Until the cancel call's `200 Run{cancelled}`.
    pub response: Duration,
    /// Until the `run` event with status `cancelled`.
    pub event: Duration,
}

/// Starts a run on a fresh session, waits until it is in the state, cancels it. `tag` makes
/// the model new each time, so each 503 is the provider's own answer, not a provider-wide
/// cooldown that an earlier one started.
pub async fn cancel(server: &Server, what: CancelWhile, tag: usize) -> R<CancelTiming> {
    let model = match what {
        CancelWhile::Streaming => stream_model(1_000_000, 5),
        CancelWhile::Tier1Sleep => format!("{}-{tag}", status_model(503, 10)),
    };
    let sid = server.create_session(&model).await?;
    let mut events = server.events(&sid).await?;
    let rid = server.post_message(&sid, "go").await?.run_id;
    loop {
        let (e, _) = events.next(EVENT_WAIT).await?;
        match (what, e) {
            (CancelWhile::Streaming, Event::Delta(d)) if d.run_id == rid => break,
            (CancelWhile::Tier1Sleep, Event::Attempt(a)) if a.run_id == rid => {
                if a.retry_in_ms < 9_000 {
                    return Err(format!(
                        "Tier 1 waits {} ms after Retry-After: 10",
                        a.retry_in_ms
                    ));
                }
                break;
            }
            (_, Event::Run(r)) if r.id == rid && !r.status.is_active() => {
                return Err(format!("the run ended {:?} before the cancel", r.status));
            }
            _ => {}
        }
    }
    let t0 = Instant::now();
    let call = async {
        let answer = server.cancel(&sid, &rid).await;
        (answer, Instant::now())
    };
    let event = async {
        loop {
            let (e, at) = events.next(EVENT_WAIT).await?;
            if let Event::Run(r) = e {
                if r.id == rid && !r.status.is_active() {
                    if r.status != RunStatus::Cancelled {
                        return Err(format!("run event says {:?}, not cancelled", r.status));
                    }
                    return Ok(at);
                }
            }
        }
    };
    let ((answer, answered_at), event_at) = tokio::join!(call, event);
    let event_at: Instant = event_at?;
    let (status, body) = answer?;
    if status != 200 || body["status"] != "cancelled" {
        return Err(format!("cancel answered {status} {body}"));
    }
    Ok(CancelTiming {
        response: answered_at - t0,
        event: event_at - t0,
    })
}
