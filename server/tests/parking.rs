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

/// Heals the fake, waits (with a deadline) until each session's last turn completed, and
/// answers when each request since the healing reached the fake.
async fn heal_and_wait(
    fake: &common::fake::FakeProvider,
    server: &TestServer,
    sessions: &[String],
    within: Duration,
) -> Vec<Instant> {
    fake.set_default(Script::reply(&["back"]));
    let healed = Instant::now();
    let deadline = healed + within;
    loop {
        let mut done = 0;
        for sid in sessions {
            let d = server.detail(sid).await;
            let last = d.runs.iter().max_by_key(|r| r.created_at).unwrap();
            done += usize::from(last.status == RunStatus::Completed);
        }
        if done == sessions.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {} turns completed",
            sessions.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    fake.seen()
        .iter()
        .map(|s| s.at)
        .filter(|at| *at >= healed)
        .collect()
}

/// How long the released turns took, from the probe (the first request) to the last one.
fn released_over(answered: &[Instant]) -> Duration {
    answered[1..]
        .iter()
        .max()
        .unwrap()
        .duration_since(answered[0])
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
    // The first turn failed on the model and opened its outage; the others were passed
    // over without a request (a probe may have gone while they were failing).
    let failed_turns = fake.seen().len();
    assert!((1..=3).contains(&failed_turns), "{failed_turns}");

    // Three seconds of outage: probes only, one at a time, never the twenty.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let probes = fake.seen().len() - failed_turns;
    assert!(
        (1..=4).contains(&probes),
        "one probe a second at most, not a retry per turn: {probes} requests"
    );

    // The model answers again: the next probe succeeds, then the rest go at 5 per second.
    let answered = heal_and_wait(&fake, &server, &sessions, Duration::from_secs(20)).await;
    assert_eq!(answered.len(), TURNS, "each parked turn sent once");
    // After the probe, the released turns keep the rate: 19 turns at 5/s take ≥ 3.4 s.
    let released = released_over(&answered);
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

fn unavailable() -> Script {
    Script::Status {
        code: 503,
        headers: vec![],
        body: json!({"error": {"message": "Service Unavailable"}}),
    }
}

/// Waits (with a deadline) until the session's last run has ended; answers the session's
/// detail then.
async fn last_turn_ended(
    server: &TestServer,
    sid: &str,
    status: RunStatus,
) -> app::wire::SessionDetail {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = server.detail(sid).await;
        let last = d.runs.iter().max_by_key(|r| r.created_at).map(|r| r.status);
        if last == Some(status) && d.session.waiting_retry.is_none() {
            return d;
        }
        assert!(
            Instant::now() < deadline,
            "the last turn never became {status:?}: {:?}",
            d.runs
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 35, item 1: an outage that ended (its probe succeeded, nothing else parked) is
/// over. The model's next failure opens a new outage whose first retry is at the policy's
/// first step, not at the old outage's backoff.
#[tokio::test]
async fn a_second_outage_starts_again_at_the_first_step() {
    let fake = common::fake::FakeProvider::start().await;
    let mut c = config(&temp_dir("parking-twice"), &fake.url);
    c.tier1_max_attempts = 1;
    c.tier2_base_ms = 1_000;
    c.tier2_cap_ms = 60_000;
    let server = TestServer::start(c).await;

    // The first outage: the turn and two probes fail, the third probe answers.
    for _ in 0..3 {
        fake.push(unavailable());
    }
    let first = &parked_sessions(&server, 1).await[0];
    last_turn_ended(&server, first, RunStatus::Completed).await;
    until_report(&server, Duration::from_secs(5), |r| r.models.is_empty()).await;

    // Right after, another session's turn fails once on the same model.
    fake.push(unavailable());
    let (status, s) = server
        .post(
            "/sessions",
            json!({"title": "second", "auto_retry": "background"}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let second = s["id"].as_str().unwrap();
    let receipt = server.send(second, "hello").await;
    let failed = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(failed.status, RunStatus::Failed);
    let ended = failed.finished_at.expect("an ended run has its end");
    // The waiting retry is written just after the run's end: wait for it, with a deadline.
    let deadline = Instant::now() + Duration::from_secs(5);
    let fires_at = loop {
        if let Some(w) = server.detail(second).await.session.waiting_retry {
            break w.fires_at;
        }
        assert!(
            Instant::now() < deadline,
            "the failed turn never waited for a background retry"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let wait = fires_at - ended;
    assert!(
        (500..=1_500).contains(&wait),
        "the new outage's first retry is at the policy's first step (1 s), not {wait} ms later"
    );
    last_turn_ended(&server, second, RunStatus::Completed).await;
}

/// Issue 35, item 2: while a model is out (a parked turn waits for its probe), a turn whose
/// chain holds it passes it over at once, without a request to it; a turn with no other
/// model fails at once with the outage's class, retryable at its next probe.
#[tokio::test]
async fn a_model_that_is_out_is_passed_over_without_a_request() {
    let (a, b) = (
        common::fake::FakeProvider::start().await,
        common::fake::FakeProvider::start().await,
    );
    let dir = temp_dir("parking-pass-over");
    let catalogue = json!({
        "providers": {
            "a": {"kind": "openai", "base_url": a.url, "models": [{"id": "big"}]},
            "b": {"kind": "openai", "base_url": b.url, "models": [{"id": "small"}]}
        },
        "default_model": "a/big",
        "fallbacks": {"a/big": ["b/small"]}
    });
    let mut c = common::config_with_catalogue(&dir, &a.url, &catalogue);
    c.tier1_base_ms = 10;
    c.tier1_cap_ms = 20;
    // No probe comes during the test.
    c.tier2_base_ms = 120_000;
    c.tier2_cap_ms = 120_000;
    let server = TestServer::start(c).await;
    a.set_default(overloaded());
    b.set_default(Script::reply(&["from ", "b"]));

    // A background session with no fallback opens a/big's outage.
    let (status, s) = server
        .post(
            "/sessions",
            json!({"title": "parked", "auto_retry": "background", "fallbacks": []}),
        )
        .await;
    assert_eq!(status, 201, "{s}");
    let receipt = server.send(s["id"].as_str().unwrap(), "hello").await;
    assert_eq!(
        server.wait_run_end(&receipt.run_id).await.status,
        RunStatus::Failed
    );
    let report = until_report(&server, Duration::from_secs(5), |r| {
        r.models
            .iter()
            .any(|m| m.model == "a/big" && m.status == ModelStatus::Down)
    })
    .await;
    let next_probe = report.models[0].next_probe_at.expect("a next probe");
    let asked = a.seen().len();
    assert_eq!(asked, 3, "the opening turn spent Tier 1's three attempts");

    // Three turns on the chain a → b: each goes to b at once.
    for i in 0..3 {
        let (status, s) = server
            .post("/sessions", json!({"title": format!("t{i}")}))
            .await;
        assert_eq!(status, 201, "{s}");
        let receipt = server.send(s["id"].as_str().unwrap(), "hello").await;
        let run = server.wait_run_end(&receipt.run_id).await;
        assert_eq!(run.status, RunStatus::Completed, "{run:?}");
        let (status, d) = server.get(&format!("/runs/{}", receipt.run_id)).await;
        assert_eq!(status, 200, "{d}");
        assert_eq!(d["run"]["served"][0]["model"], "b/small", "{d}");
        assert_eq!(d["run"]["served"][0]["after"][0]["model"], "a/big", "{d}");
    }
    assert_eq!(
        a.seen().len(),
        asked,
        "no request reached the model that is out"
    );
    assert_eq!(b.seen().len(), 3);

    // A session with nothing else to try fails at once, retryable at the next probe.
    let (status, s) = server
        .post("/sessions", json!({"title": "alone", "fallbacks": []}))
        .await;
    assert_eq!(status, 201, "{s}");
    let receipt = server.send(s["id"].as_str().unwrap(), "hello").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Failed);
    let retry = run.retry.expect("classified");
    assert_eq!(
        (retry.retry_class, retry.retryable, retry.retry_after_until),
        (app::wire::RetryClass::Overloaded, true, Some(next_probe))
    );
    assert_eq!(
        a.seen().len(),
        asked,
        "still no request to the model that is out"
    );
}

/// Issue 35, item 10: parking across two instances on one PostgreSQL database. Twelve
/// parked turns, half left on each instance: one probe at a time for the fleet, and once it
/// succeeds the release rate holds for the fleet, not per instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL (run with --include-ignored in the PostgreSQL pass)"]
async fn two_instances_send_one_probe_and_release_at_the_fleets_rate() {
    const TURNS: usize = 12;
    assert!(
        common::on_postgres(),
        "needs PostgreSQL: set MULLIGAN_TEST_DATABASE=postgres and MULLIGAN_TEST_POSTGRES_URL"
    );
    let db = common::fresh_postgres_database(&common::postgres_url().expect("the URL"));
    let fake = common::fake::FakeProvider::start().await;
    let instance = |tag: &str| {
        let mut c = config(&temp_dir(tag), &fake.url);
        c.database_url = Some(db.clone());
        c.tier1_max_attempts = 1;
        c.tier2_base_ms = 1_000;
        c.tier2_cap_ms = 1_000;
        c.release_per_s = 4;
        c
    };
    let (a, b) = tokio::join!(
        TestServer::start(instance("parking-fleet-a")),
        TestServer::start(instance("parking-fleet-b"))
    );
    fake.set_default(overloaded());
    let mut sessions = parked_sessions(&a, TURNS / 2).await;
    sessions.extend(parked_sessions(&b, TURNS / 2).await);
    until_report(&b, Duration::from_secs(5), |r| {
        r.models.iter().any(|m| m.waiting_turns as usize == TURNS)
    })
    .await;

    // Three seconds of outage: one probe a second at most for both instances together.
    let before = fake.seen().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let probes = fake.seen().len() - before;
    assert!(
        (1..=4).contains(&probes),
        "one probe at a time for the fleet: {probes} requests in 3 s"
    );

    let answered = heal_and_wait(&fake, &a, &sessions, Duration::from_secs(30)).await;
    assert_eq!(
        answered.len(),
        TURNS,
        "each parked turn sent once, by one instance"
    );
    // After the probe, 11 released turns at 4/s for the fleet take ≥ 2.5 s (twice as fast if
    // each instance kept a rate of its own).
    let released = released_over(&answered);
    assert!(
        released >= Duration::from_millis(2_500),
        "released faster than the fleet's rate: {released:?}"
    );
}
