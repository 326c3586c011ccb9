//! B8 parking: sessions whose background retries wait on one overloaded model. The provider
//! must see each turn fail once, then one probe at a time (two fail, the third answers),
//! then the parked turns at no more than `MULLIGAN_RELEASE_PER_S`; each turn sent once.
use crate::client::Server;
use crate::fake::Fake;
use crate::report::Table;
use crate::{Opts, R};
use fake_provider::Script;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failed probes before the one that answers.
const FAILED_PROBES: usize = 2;

pub async fn run(opts: &Opts, fake: &Arc<Fake>, t: &mut Table) -> R<()> {
    let n = opts.b8_sessions.max(2);
    let rate = opts.b8_release_per_s.max(1);
    let model = "b8-parked";
    let overloaded = Script::Status {
        code: 529,
        headers: vec![],
        body: serde_json::json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}),
    };
    // Each turn's failure and the failed probes; everything after answers.
    fake.push_for(model, vec![overloaded; n + FAILED_PROBES]);
    let server = Server::start(
        &fake.url,
        &[
            ("MULLIGAN_TIER1_MAX_ATTEMPTS", "1".into()),
            ("MULLIGAN_TIER2_BASE_MS", "1000".into()),
            ("MULLIGAN_TIER2_CAP_MS", "1000".into()),
            ("MULLIGAN_RELEASE_PER_S", rate.to_string()),
        ],
    )
    .await?;
    let result = measure(&server, fake, model, n).await;
    server.stop().await;
    let times = result?;
    // The requests after each turn's first failure: probes, then the released turns.
    let after = &times[n..];
    let answered_at = FAILED_PROBES;
    let probes = after.len().min(answered_at + 1);
    let released = &after[answered_at + 1..];
    let peak = peak_per_second(released);
    let span = released
        .last()
        .zip(after.get(answered_at))
        .map_or(Duration::ZERO, |(last, probe)| last.duration_since(*probe));
    let probe_gaps: Vec<String> = after[..probes]
        .windows(2)
        .map(|w| format!("{:.1}", w[1].duration_since(w[0]).as_secs_f64()))
        .collect();
    t.row(
        &format!("B8 parked ×{n}"),
        "provider requests: failures · probes · released",
        String::new(),
        format!("{n} · {probes} · {}", released.len()),
        format!("probe gaps {} s", probe_gaps.join(", ")),
        &format!("{n} · {} · {}", FAILED_PROBES + 1, n - 1),
        Some(probes == FAILED_PROBES + 1 && released.len() == n - 1),
    );
    t.row(
        &format!("B8 parked ×{n}"),
        "released turns: peak per second · all released in",
        String::new(),
        format!("{peak} · {:.1} s", span.as_secs_f64()),
        format!("MULLIGAN_RELEASE_PER_S={rate}"),
        &format!("≤ {rate}"),
        Some(peak <= rate as usize),
    );
    Ok(())
}

/// Creates `n` background sessions on `model`, fails each turn once, and waits until every
/// parked turn was sent again; answers when the provider saw each request for `model`.
async fn measure(server: &Server, fake: &Fake, model: &str, n: usize) -> R<Vec<Instant>> {
    let mut receipts = Vec::with_capacity(n);
    for _ in 0..n {
        let sid = server.create_session(model).await?;
        let (status, body) = server
            .patch_session(&sid, serde_json::json!({"auto_retry": "background"}))
            .await?;
        if status != 200 {
            return Err(format!("PATCH auto_retry: {status} {body}"));
        }
        receipts.push(server.post_message(&sid, "parked").await?);
    }
    let expected = n + FAILED_PROBES + 1 + (n - 1);
    let deadline = Instant::now() + Duration::from_secs(60 + 2 * n as u64);
    loop {
        let seen = fake.requests(model) as usize;
        if seen >= expected {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{seen} of {expected} provider requests came"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing more: no turn is sent twice.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = fake.requests(model) as usize;
    if seen != expected {
        return Err(format!("{seen} provider requests, {expected} expected"));
    }
    for r in &receipts {
        let run = server.run(&r.run_id).await?;
        if run.status != app::wire::RunStatus::Failed {
            return Err(format!("the first turn {} is {:?}", r.run_id, run.status));
        }
    }
    let mut times: Vec<Instant> = fake
        .seen()
        .into_iter()
        .filter(|s| s.body["model"] == model)
        .map(|s| s.at)
        .collect();
    times.sort();
    Ok(times)
}

/// The most requests in any one-second window.
fn peak_per_second(times: &[Instant]) -> usize {
    let mut peak = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while t.duration_since(times[start]) >= Duration::from_secs(1) {
            start += 1;
        }
        peak = peak.max(end + 1 - start);
    }
    peak
}
