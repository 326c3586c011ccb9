//! A provider that misbehaves (never answers, advises absurd waits, sends 40 MB error bodies,
//! a 16 MB line, an endless stream, absurd token counts) never leaves a run unended: each run
//! ends within its bound with the right class, the server's memory stays bounded, the next
//! prompt in the session runs, and the server keeps answering. The real `mulligan` binary
//! runs as a child process, so its peak memory is its own.
use testkit as common;

use app::wire::{RetryClass, Run, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{database_url, now_ms, serve, temp_dir, TestServer};
use std::time::{Duration, Instant};
use tokio::process::Child;

const MIB: usize = 1024 * 1024;
const DAY_MS: i64 = 86_400_000;

/// The real binary on the fake provider, with quick Tier 1 backoffs and `env` on top.
async fn start(tag: &str, fake: &FakeProvider, env: &[(&str, &str)]) -> (Child, TestServer) {
    let dir = temp_dir(tag);
    let log = dir.join("server.log");
    let mut all = vec![
        ("MULLIGAN_TIER1_BASE_MS", "10"),
        ("MULLIGAN_TIER1_CAP_MS", "2000"),
        ("RUST_LOG", "info"),
    ];
    all.extend_from_slice(env);
    serve(&dir, &fake.url, &log, database_url(&dir), &all).await
}

/// A figure of the child's `/proc/<pid>/status` in bytes (`VmHWM`: peak resident memory).
fn memory(child: &Child, field: &str) -> usize {
    let pid = child.id().expect("the server runs");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

/// Polls until the run has ended, for at most `within`.
async fn ended_within(
    server: &TestServer,
    rid: &(impl std::fmt::Display + ?Sized),
    within: Duration,
) -> Run {
    let deadline = Instant::now() + within;
    loop {
        let run = server.run(rid).await;
        if !run.status.is_active() {
            return run;
        }
        assert!(
            Instant::now() < deadline,
            "run {rid} still {:?} after {within:?}",
            run.status
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn class(run: &Run) -> (RetryClass, bool) {
    let c = run.retry.as_ref().expect("a failed run is classified");
    (c.retry_class.clone(), c.retryable)
}

/// The session goes on after the bad turn: the next prompt completes, `/healthz` and the
/// session list answer.
async fn still_serves(server: &TestServer, sid: &str) {
    let next = server.send(sid, "and now?").await;
    let run = ended_within(server, &next.run_id, Duration::from_secs(10)).await;
    assert_eq!(run.status, RunStatus::Completed, "the next prompt runs");
    let health = reqwest::get(format!("{}/healthz", server.base))
        .await
        .expect("healthz answers");
    assert!(health.status().is_success());
    let (status, _) = server.get("/sessions").await;
    assert_eq!(status, 200, "the session list still loads");
    let (status, _) = server.get(&format!("/sessions/{sid}")).await;
    assert_eq!(status, 200, "the session still loads");
}

#[tokio::test]
async fn a_provider_that_never_answers_times_out_and_tier1_goes_on() {
    let fake = FakeProvider::start().await;
    for _ in 0..3 {
        fake.push(Script::Hang);
    }
    let (_child, server) = start("hang", &fake, &[("MULLIGAN_HEADER_TIMEOUT_MS", "400")]).await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "hello?").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(class(&run), (RetryClass::Timeout, true));
    assert_eq!(run.tier1_attempts, 3, "each unanswered attempt was retried");
    assert_eq!(fake.seen().len(), 3);
    assert!(run
        .error_message
        .as_deref()
        .unwrap_or("")
        .contains("did not answer"));
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn cancel_aborts_a_call_the_provider_never_answers() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Hang);
    // The default header timeout (a minute) is far off: only the cancel can end this run.
    let (_child, server) = start("hang-cancel", &fake, &[]).await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "hello?").await.run_id;
    // The request has reached the provider, which holds it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.seen().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the request never reached the provider"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = server
        .post(
            &format!("/sessions/{sid}/runs/{rid}/cancel"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn absurd_advised_waits_are_clamped_to_a_day() {
    for (tag, header, value) in [
        ("ra-huge", "retry-after", "300000000000"),
        ("ra-ms-huge", "retry-after-ms", "18446744073709551615"),
        ("ra-date", "retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
    ] {
        let fake = FakeProvider::start().await;
        fake.push(Script::Status {
            code: 429,
            headers: vec![(header, value.to_string())],
            body: serde_json::json!({"error": {"type": "rate_limit_error", "message": "slow down"}}),
        });
        let (_child, server) = start(tag, &fake, &[]).await;
        let sid = server.create_session().await;
        let before = now_ms();
        let rid = server.send(&sid, "hello").await.run_id;
        let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
        assert_eq!(class(&run), (RetryClass::RateLimited, true), "{tag}");
        let until = run.retry.as_ref().and_then(|c| c.retry_after_until);
        let until = until.expect("the advised wait is kept");
        assert!(
            until >= before + DAY_MS - 60_000 && until <= now_ms() + DAY_MS,
            "{tag}: retry_after_until {until} is not a day ahead"
        );
        let (_, providers) = server.get("/providers").await;
        let cooldowns = providers["cooldowns"].as_array().expect("a list").clone();
        assert_eq!(cooldowns.len(), 1, "{tag}: {providers}");
        let held = cooldowns[0]["until"].as_i64().expect("until");
        assert!(
            held <= now_ms() + DAY_MS,
            "{tag}: the cooldown is held {held}"
        );
        assert_eq!(fake.seen().len(), 1, "{tag}: no request during the wait");
    }
}

#[tokio::test]
async fn a_40_mb_error_body_is_read_in_part_and_kept_short() {
    let fake = FakeProvider::start().await;
    for _ in 0..3 {
        fake.push(Script::HugeError {
            code: 500,
            bytes: 40 * MIB,
        });
    }
    let (child, server) = start("huge-error", &fake, &[]).await;
    let sid = server.create_session().await;
    let peak_before = memory(&child, "VmHWM:");
    let rid = server.send(&sid, "hello").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(15)).await;
    assert_eq!(class(&run), (RetryClass::ServerError, true));
    assert_eq!(run.tier1_attempts, 3);
    let error = run.error_message.clone().unwrap_or_default();
    assert!(
        error.len() < 1_200,
        "the stored error is {} bytes",
        error.len()
    );
    let attempts = server.get(&format!("/runs/{rid}")).await.1;
    assert!(
        attempts.to_string().len() < 8_000,
        "attempts kept short: {} bytes",
        attempts.to_string().len()
    );
    let grew = memory(&child, "VmHWM:").saturating_sub(peak_before);
    assert!(grew < 16 * MIB, "peak memory grew {} MiB", grew / MIB);
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn a_16_mb_line_fails_the_attempt_as_a_protocol_error() {
    let fake = FakeProvider::start().await;
    for _ in 0..3 {
        fake.push(Script::LongLine { bytes: 16 * MIB });
    }
    let (child, server) = start("long-line", &fake, &[]).await;
    let sid = server.create_session().await;
    let peak_before = memory(&child, "VmHWM:");
    let rid = server.send(&sid, "hello").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(15)).await;
    assert_eq!(class(&run), (RetryClass::ServerError, true));
    assert_eq!(run.tier1_attempts, 3, "a broken opening is retried");
    assert!(run
        .error_message
        .as_deref()
        .unwrap_or("")
        .contains("longer than"));
    let grew = memory(&child, "VmHWM:").saturating_sub(peak_before);
    assert!(grew < 16 * MIB, "peak memory grew {} MiB", grew / MIB);
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn an_endless_fast_stream_ends_at_the_reply_cap() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Endless {
        text: "all work and no play ".repeat(10),
        every: Duration::ZERO,
    });
    // Half a MiB: the capped reply goes back to the provider with the next prompt, and the
    // fake provider takes request bodies of up to 2 MiB.
    let (child, server) = start("endless", &fake, &[("MULLIGAN_MAX_REPLY_BYTES", "524288")]).await;
    let sid = server.create_session().await;
    let peak_before = memory(&child, "VmHWM:");
    let rid = server.send(&sid, "talk").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(30)).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(class(&run), (RetryClass::ReplyTooLarge, false));
    let reply = server.detail(&sid).await.messages.last().unwrap().clone();
    assert!(
        reply.content.len() <= MIB / 2 && reply.content.len() > MIB / 4,
        "the text up to the cap is kept: {} bytes",
        reply.content.len()
    );
    let grew = memory(&child, "VmHWM:").saturating_sub(peak_before);
    assert!(grew < 64 * MIB, "peak memory grew {} MiB", grew / MIB);
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn a_run_past_its_longest_duration_fails_as_a_timeout() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Endless {
        text: "tick ".into(),
        every: Duration::from_millis(20),
    });
    let (_child, server) = start("max-run", &fake, &[("MULLIGAN_MAX_RUN_MS", "1500")]).await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "talk").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(class(&run), (RetryClass::Timeout, true));
    let took = run.finished_at.unwrap_or(0) - run.started_at.unwrap_or(0);
    assert!((1_500..6_000).contains(&took), "took {took} ms");
    let reply = server.detail(&sid).await.messages.last().unwrap().clone();
    assert!(reply.content.starts_with("tick tick"), "partial text kept");
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn absurd_token_counts_never_break_the_session_list() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Usage {
        total_tokens: i64::MAX as u64,
    });
    fake.push(Script::Usage {
        total_tokens: u64::MAX,
    });
    let (_child, server) = start("usage", &fake, &[]).await;
    let sid = server.create_session().await;
    for _ in 0..2 {
        let rid = server.send(&sid, "count").await.run_id;
        let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
        assert_eq!(run.status, RunStatus::Completed);
    }
    still_serves(&server, &sid).await;
}

#[tokio::test]
async fn an_absurd_token_count_cannot_defeat_the_spend_limit() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Usage {
        total_tokens: u64::MAX,
    });
    let (_child, server) = start(
        "usage-limit",
        &fake,
        &[("MULLIGAN_SPEND_LIMIT_TOKENS", "1000000")],
    )
    .await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "count").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
    assert_eq!(run.status, RunStatus::Completed);
    let rid = server.send(&sid, "again").await.run_id;
    let run = ended_within(&server, &rid, Duration::from_secs(10)).await;
    assert_eq!(class(&run), (RetryClass::SpendLimitExceeded, false));
    assert_eq!(fake.seen().len(), 1, "the refused run sent no request");
}
