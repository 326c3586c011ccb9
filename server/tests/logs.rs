//! What `mulligan serve` logs at `RUST_LOG=info`, as an operator reads it: each line of a
//! run names its session and its run, so one run's lines can be picked out of a busy log.
use testkit as common;

use app::wire::RunStatus;
use common::fake::{FakeProvider, Script};
use common::{database_url, serve, temp_dir};

#[tokio::test]
async fn a_runs_log_lines_name_its_session_and_run() {
    let fake = FakeProvider::start().await;
    // A 503 first: Tier 1 logs its retry from inside the run.
    fake.push(Script::unavailable());
    fake.push(Script::reply(&["fine"]));
    let dir = temp_dir("logs");
    let log = dir.join("server.log");
    let env = [("RUST_LOG", "info"), ("MULLIGAN_TIER1_BASE_MS", "10")];
    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hello").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);

    let text = std::fs::read_to_string(&log).unwrap();
    let retry = text
        .lines()
        .find(|l| l.contains("Tier 1 retries"))
        .unwrap_or_else(|| panic!("no Tier 1 line in the log:\n{text}"));
    assert!(
        retry.contains(&format!("session_id={sid}"))
            && retry.contains(&format!("run_id={}", receipt.run_id)),
        "the run's line names neither its session nor its run: {retry}"
    );
    assert!(
        !retry.contains('\u{1b}'),
        "a log file gets no colours: {retry}"
    );
}
