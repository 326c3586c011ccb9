//! Parking (CONTRACT §7) over real HTTP: background retries waiting on a model that is out
//! do not fire one by one; one probe goes at a time, a failed probe backs off, a successful
//! one releases the parked turns at `MULLIGAN_RELEASE_PER_S`, and `GET /providers` says so.
use testkit as common;

use app::wire::{Event, ModelStatus, ProvidersResponse, RunStatus};
use common::fake::Script;
use common::{config, temp_dir, TestServer};
use serde_json::json;
use std::time::{Duration, Instant};

fn overloaded() -> Script {
    Script::Status {
        code: 529,
        headers: vec![],
        body: json!({"error": {"type": "overloaded_error", "message": "Overloaded"}}),
    }
}

async fn providers(server: &TestServer) -> ProvidersResponse {
    let (status, body) = server.get("/providers").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Waits (with a deadline) until `ok` holds for the provider report.
async fn until_report(
    server: &TestServer,
    within: Duration,
    ok: impl Fn(&ProvidersResponse) -> bool,
) -> ProvidersResponse {
    let deadline = Instant::now() + within;
    loop {
        let report = providers(server).await;
        if ok(&report) {
            return report;
        }
        assert!(Instant::now() < deadline, "never came: {report:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` background sessions on the fake's model, each with one turn that failed (and parked);
/// answers their ids.
async fn parked_sessions(server: &TestServer, n: usize) -> Vec<String> {
    let mut sessions = Vec::new();
    for i in 0..n {
        let (status, s) = server
            .post(
                "/sessions",
                json!({"title": format!("p{i}"), "auto_retry": "background"}),
            )
            .await;
        assert_eq!(status, 201, "{s}");
        let sid = s["id"].as_str().unwrap().to_string();
        let receipt = server.send(&sid, "hello").await;
        assert_eq!(
            server.wait_run_end(&receipt.run_id).await.status,
            RunStatus::Failed
        );
        sessions.push(sid);
    }
    sessions
}

#[tokio::test]
async fn twenty_parked_turns_wait_behind_one_probe_then_go_at_the_rate() {
    const TURNS: usize = 20;
    let fake = common::fake::FakeProvider::start().await;
    let mut c = config(&temp_dir("parking"), &fake.url);
    c.tier1_max_attempts = 1;
    c.tier2_base_ms = 1_000;
    c.tier2_cap_ms = 1_000;
    c.release_per_s = 5;
    let server = TestServer::start(c).await;
    fake.set_default(overloaded());

    let sessions = parked_sessions(&server, TURNS).await;
    let report = until_report(&server, Duration::from_secs(5), |r| {
        r.models.iter().any(|m| m.waiting_turns as usize == TURNS)
    })
    .await;
    let out = &report.models[0];
    assert_eq!(
        (out.model.as_str(), out.status.clone()),
        ("openai/fake-model", ModelStatus::Down)
    );
    assert!(
        out.since.is_some() && out.next_probe_at.is_some(),
        "{out:?}"
    );
    // Each turn failed once; a probe may have gone while the last ones were failing.
    let failed_turns = fake.seen().len();
    assert!(
        (TURNS..=TURNS + 2).contains(&failed_turns),
        "{failed_turns}"
    );

    // Three seconds of outage: probes only, one at a time, never the twenty.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let probes = fake.seen().len() - failed_turns;
    assert!(
        (1..=4).contains(&probes),
        "one probe a second at most, not a retry per turn: {probes} requests"
    );

    // The model answers again: the next probe succeeds, then the rest go at 5 per second.
    fake.set_default(Script::reply(&["back"]));
    let healed = Instant::now();
    let deadline = healed + Duration::from_secs(20);
    loop {
        let mut done = 0;
        for sid in &sessions {
            let d = server.detail(sid).await;
            let last = d.runs.iter().max_by_key(|r| r.created_at).unwrap();
            done += usize::from(last.status == RunStatus::Completed);
        }
        if done == TURNS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {TURNS} turns completed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answered: Vec<Instant> = fake
        .seen()
        .iter()
        .map(|s| s.at)
        .filter(|at| *at >= healed)
        .collect();
    assert_eq!(answered.len(), TURNS, "each parked turn sent once");
    // After the probe, the released turns keep the rate: 19 turns at 5/s take ≥ 3.4 s.
    let released = answered[1..]
        .iter()
        .max()
        .unwrap()
        .duration_since(answered[0]);
    assert!(
        released >= Duration::from_millis(3_400),
        "released too fast: {released:?}"
    );
    let report = until_report(&server, Duration::from_secs(5), |r| r.models.is_empty()).await;
    assert!(report.cooldowns.is_empty());
}

/// A failed probe moves every parked turn's next try; each parked session's stream says so,
/// so a page that shows "retrying at HH:MM" never shows a time that has passed.
#[tokio::test]
async fn a_failed_probe_announces_each_parked_turns_new_time() {
    let fake = common::fake::FakeProvider::start().await;
    let mut c = config(&temp_dir("parking-news"), &fake.url);
    c.tier1_max_attempts = 1;
    c.tier2_base_ms = 1_000;
    c.tier2_cap_ms = 1_000;
    let server = TestServer::start(c).await;
    fake.set_default(overloaded());

    let parked = parked_sessions(&server, 2).await;
    until_report(&server, Duration::from_secs(5), |r| {
        r.models.iter().any(|m| m.waiting_turns == 2)
    })
    .await;

    for sid in &parked {
        let first = server.detail(sid).await.session.waiting_retry;
        let first = first.expect("a parked turn waits").fires_at;
        let from = server.detail(sid).await.last_event_id;
        let mut events = server.events(sid, Some(from)).await;
        // Probes fail a second apart: within a few, this session hears of a later time.
        events
            .until(Duration::from_secs(6), |e| {
                matches!(e, Event::Session(s)
                    if s.waiting_retry.as_ref().is_some_and(|w| w.fires_at > first))
            })
            .await;
    }
}
