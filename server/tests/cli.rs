//! CONTRACT §4 client commands: the built `mulligan` binary run as a child process against a
//! real server in this process (with the fake provider): output, `--json`, exit codes.
use testkit as common;

use app::wire::{ApiError, ErrorCode, Receipt, Role, RunStatus, SessionList};
use common::fake::{FakeProvider, Script};
use common::{config, setup, temp_dir, TestServer};
use std::path::Path;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `mulligan <args>` with a clean `MULLIGAN_*` environment plus `env`, in `cwd`.
async fn mulligan_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Out {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mulligan"));
    for (k, _) in std::env::vars() {
        if k.starts_with("MULLIGAN_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .await
        .expect("the binary runs");
    Out {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// Runs `mulligan <args>` against the server with its token.
async fn mulligan(server: &TestServer, args: &[&str]) -> Out {
    mulligan_in(
        &temp_dir("cli-cwd"),
        &[
            ("MULLIGAN_URL", &server.base),
            ("MULLIGAN_TOKEN", &server.token),
        ],
        args,
    )
    .await
}

#[tokio::test]
async fn sessions_prints_a_table_and_json_is_the_apis_answer() {
    let (_fake, server) = setup("cli-sessions").await;
    let empty = mulligan(&server, &["sessions"]).await;
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert_eq!(empty.stdout.trim(), "no sessions");

    let sid = server.create_session().await;
    let receipt = server.send(&sid, "hello").await;
    server.wait_run_end(&receipt.run_id).await;

    let out = mulligan(&server, &["sessions"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.is_empty(), "no logs: {}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("ID"), "{}", out.stdout);
    for col in ["TITLE", "MODEL", "STATUS", "LAST RUN"] {
        assert!(lines[0].contains(col), "{}", out.stdout);
    }
    let row = lines
        .iter()
        .find(|l| l.starts_with(&sid))
        .expect("a row for the session");
    for cell in ["test", "fake-model", "idle", "completed"] {
        assert!(row.contains(cell), "{row}");
    }

    let out = mulligan(&server, &["sessions", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1, "one line: {}", out.stdout);
    let list: SessionList = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(list.sessions.len(), 1);
    assert_eq!(list.sessions[0].id, sid);
    let (_, api) = server.get("/sessions").await;
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(printed, api, "--json prints the API's answer as is");
}

#[tokio::test]
async fn sessions_shows_the_newest_100_and_all_or_a_search_on_request() {
    let (_fake, server) = setup("cli-sessions-pages").await;
    for i in 0..101 {
        let title = if i == 0 { "the oldest one" } else { "test" };
        let (status, body) = server
            .post("/sessions", serde_json::json!({"title": title}))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let rows = |out: &str| out.lines().filter(|l| l.starts_with("s_")).count();
    let out = mulligan(&server, &["sessions"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(rows(&out.stdout), 100, "{}", out.stdout);
    assert!(
        out.stdout.contains("--all"),
        "says how to see the rest: {}",
        out.stdout
    );
    let all = mulligan(&server, &["sessions", "--all"]).await;
    assert_eq!(rows(&all.stdout), 101, "{}", all.stdout);
    assert!(!all.stdout.contains("--all"));
    let json = mulligan(&server, &["sessions", "--all", "--json"]).await;
    let list: SessionList = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(list.sessions.len(), 101);
    let found = mulligan(&server, &["sessions", "--search", "OLDEST", "the"]).await;
    assert_eq!(found.code, 0, "{}", found.stderr);
    assert_eq!(rows(&found.stdout), 1, "{}", found.stdout);
    assert!(found.stdout.contains("the oldest one"));
}

#[tokio::test]
async fn send_posts_an_operator_message() {
    let (_fake, server) = setup("cli-send").await;
    let sid = server.create_session().await;
    let out = mulligan(&server, &["send", &sid, "hello", "from the CLI"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.trim();
    assert!(
        line.starts_with(&format!("sent to {sid}: message ")),
        "{line}"
    );
    assert!(line.ends_with("(started)"), "{line}");
    let detail = server.detail(&sid).await;
    let first = &detail.messages[0];
    assert_eq!(first.role, Role::Operator);
    assert_eq!(first.content, "hello from the CLI");
    assert!(line.contains(&format!("message {}", first.id)), "{line}");

    let out = mulligan(&server, &["send", &sid, "again", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let receipt: Receipt = serde_json::from_str(out.stdout.trim()).unwrap();
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.anchor_message_id, receipt.message_id);
}

#[tokio::test]
async fn cancel_of_an_ended_run_is_a_refusal() {
    let (_fake, server) = setup("cli-cancel").await;
    let sid = server.create_session().await;
    let receipt = server.send(&sid, "quick").await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);

    let out = mulligan(&server, &["cancel", &sid, receipt.run_id.as_str()]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(out.stderr.starts_with("conflict: "), "{}", out.stderr);
    assert!(out.stdout.is_empty());

    let out = mulligan(
        &server,
        &["cancel", &sid, receipt.run_id.as_str(), "--json"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let err: ApiError = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(err.error.code, ErrorCode::Conflict);
}

#[tokio::test]
async fn a_wrong_token_is_exit_1_and_says_so() {
    let (_fake, server) = setup("cli-token").await;
    let out = mulligan_in(
        &temp_dir("cli-cwd"),
        &[("MULLIGAN_URL", &server.base), ("MULLIGAN_TOKEN", "nope")],
        &["sessions"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("the token was rejected (401)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("MULLIGAN_TOKEN"), "{}", out.stderr);
}

#[tokio::test]
async fn the_token_comes_from_data_token_or_the_error_says_how_to_set_it() {
    let (_fake, server) = setup("cli-token-file").await;
    let cwd = temp_dir("cli-cwd");
    let url = [("MULLIGAN_URL", server.base.as_str())];
    let out = mulligan_in(&cwd, &url, &["sessions"]).await;
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("set MULLIGAN_TOKEN"), "{}", out.stderr);

    std::fs::create_dir_all(cwd.join("data")).unwrap();
    std::fs::write(cwd.join("data/token"), format!("{}\n", server.token)).unwrap();
    let out = mulligan_in(&cwd, &url, &["sessions"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[tokio::test]
async fn an_unreachable_server_is_exit_1_and_says_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let out = mulligan_in(
        &temp_dir("cli-cwd"),
        &[("MULLIGAN_URL", &url), ("MULLIGAN_TOKEN", "t")],
        &["sessions", "--json"],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("unreachable"), "{}", out.stderr);
    assert!(out.stderr.contains(&url), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn regenerate_and_retry_start_runs() {
    let (fake, server) = setup("cli-regen-retry").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "prompt").await;
    server.wait_run_end(&first.run_id).await;
    let out = mulligan(&server, &["regenerate", &sid, first.message_id.as_str()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.trim();
    assert!(
        line.starts_with(&format!(
            "regenerated {sid} from message {}: run ",
            first.message_id
        )),
        "{line}"
    );
    let detail = server.detail(&sid).await;
    let again = detail.runs.last().unwrap();
    assert!(line.contains(again.id.as_str()), "{line}");
    server.wait_run_end(&again.id).await;

    // A turn that fails with no output: retry resends the same prompt.
    fake.push(Script::Status {
        code: 401,
        headers: vec![],
        body: serde_json::json!({"error": {"message": "bad key"}}),
    });
    let failing = server.send(&sid, "will fail").await;
    assert_eq!(
        server.wait_run_end(&failing.run_id).await.status,
        RunStatus::Failed
    );
    let out = mulligan(&server, &["retry", &sid]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.trim();
    assert!(
        line.starts_with(&format!("retried {sid}: resend, run ")),
        "{line}"
    );
    let rid = line.rsplit(' ').next().unwrap();
    assert_eq!(server.wait_run_end(rid).await.status, RunStatus::Completed);
}

#[tokio::test]
async fn retry_refusals_print_the_code_and_exit_2() {
    let (_fake, server) = setup("cli-retry").await;
    let sid = server.create_session().await;
    // Nothing failed in a new session.
    let out = mulligan(&server, &["retry", &sid]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    let code = out.stderr.split(": ").next().unwrap();
    assert_eq!(
        code,
        ErrorCode::RetryNothingFailed.as_str(),
        "{}",
        out.stderr
    );

    let out = mulligan(&server, &["retry", "--cancel", &sid, "--json"]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    let err: ApiError = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        err.error.code,
        ErrorCode::Conflict,
        "no waiting retry: {}",
        out.stdout
    );
}

#[tokio::test]
async fn sessions_shows_auto_retry_and_retry_cancel_ends_a_waiting_retry() {
    let fake = FakeProvider::start().await;
    let mut cfg = config(&temp_dir("cli-bg"), &fake.url);
    cfg.tier1_max_attempts = 1;
    cfg.tier2_base_ms = 60_000;
    let server = TestServer::start(cfg).await;
    fake.push(Script::Status {
        code: 503,
        headers: vec![],
        body: serde_json::json!({"error": {"message": "overloaded"}}),
    });
    let (_, body) = server
        .post("/sessions", serde_json::json!({"auto_retry": "background"}))
        .await;
    let sid = body["id"].as_str().unwrap().to_string();
    let r = server.send(&sid, "later").await;
    server.wait_run_end(&r.run_id).await;
    let mut table = String::new();
    for _ in 0..40 {
        table = mulligan(&server, &["sessions"]).await.stdout;
        if table.contains("background: retry 1 in ") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(table.contains("AUTO RETRY"), "{table}");
    assert!(table.contains("background: retry 1 in 6"), "{table}");
    assert!(table.contains("(overloaded)"), "{table}");

    let out = mulligan(&server, &["retry", "--cancel", &sid]).await;
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout.trim(),
        format!("cancelled the waiting retry of {sid}")
    );
    assert_eq!(server.detail(&sid).await.session.waiting_retry, None);
    let table = mulligan(&server, &["sessions"]).await.stdout;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&sid) && l.trim_end().ends_with("background")),
        "{table}"
    );
}

#[tokio::test]
async fn send_and_regenerate_refusals_exit_2_and_json_success_is_the_answer() {
    let (_fake, server) = setup("cli-refusals").await;
    let sid = server.create_session().await;
    // Empty content: refused by the server.
    let out = mulligan(&server, &["send", &sid, " "]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with("invalid_request: "),
        "{}",
        out.stderr
    );
    // An unknown message: refused.
    let out = mulligan(&server, &["regenerate", &sid, "m_nope"]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(out.stderr.starts_with("not_found: "), "{}", out.stderr);

    let out = mulligan(&server, &["send", &sid, "hello", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let receipt: Receipt = serde_json::from_str(out.stdout.trim()).expect("the API's receipt");
    server.wait_run_end(&receipt.run_id).await;
    let out = mulligan(
        &server,
        &["regenerate", &sid, receipt.message_id.as_str(), "--json"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let again: Receipt = serde_json::from_str(out.stdout.trim()).expect("the API's receipt");
    assert_ne!(again.run_id, receipt.run_id);
}

#[tokio::test]
async fn regenerate_of_a_superseded_prompt_is_stale_and_exits_2() {
    let (_fake, server) = setup("cli-stale").await;
    let sid = server.create_session().await;
    let first = server.send(&sid, "one").await;
    server.wait_run_end(&first.run_id).await;
    let second = server.send(&sid, "two").await;
    server.wait_run_end(&second.run_id).await;
    let out = mulligan(&server, &["regenerate", &sid, first.message_id.as_str()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let before = server.detail(&sid).await.runs.len();
    // The second prompt is superseded now: regenerating it is refused.
    let out = mulligan(&server, &["regenerate", &sid, second.message_id.as_str()]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with("regenerate.stale: "),
        "{}",
        out.stderr
    );
    assert_eq!(
        server.detail(&sid).await.runs.len(),
        before,
        "no run queued"
    );
}

#[tokio::test]
async fn tools_lists_each_source_and_its_tools() {
    let (_fake, server) = setup("cli-tools").await;
    let out = mulligan(&server, &["tools"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("SOURCE"), "{}", out.stdout);
    let row = lines
        .iter()
        .find(|l| l.contains("mulligan__send_message"))
        .expect("a row for the built-in send_message tool");
    for cell in ["mulligan", "builtin", "ready"] {
        assert!(row.contains(cell), "{row}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("mulligan__stop_session") && l.contains("destructive")),
        "{}",
        out.stdout
    );
    let out = mulligan(&server, &["tools", "--json"]).await;
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let (_, api) = server.get("/tools").await;
    assert_eq!(printed, api, "--json prints the API's answer as is");
}

#[tokio::test]
async fn send_follow_streams_the_turn_and_exits_by_how_it_ended() {
    let (fake, server) = setup("cli-follow").await;
    let sid = server.create_session().await;
    fake.push(Script::call(
        "Looking. ",
        "c1",
        "mulligan__list_sessions",
        serde_json::json!({}),
    ));
    fake.push(Script::reply(&["All ", "done."]));
    let out = mulligan(&server, &["send", "--follow", &sid, "go"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let text = &out.stdout;
    let order = [
        "sent to",
        "Looking.",
        "[tool mulligan/list_sessions: running]",
        "[tool mulligan/list_sessions: ok",
        "All done.",
        "[completed: run ",
    ];
    let mut from = 0;
    for part in order {
        let at = text[from..]
            .find(part)
            .unwrap_or_else(|| panic!("{part:?} in order: {text}"));
        from += at + part.len();
    }

    // A failed turn exits 3 and says what a retry would do.
    for _ in 0..3 {
        fake.push(Script::unavailable());
    }
    let out = mulligan(&server, &["send", "--follow", &sid, "again"]).await;
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("[failed ("), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("mulligan retry {sid}")),
        "{}",
        out.stdout
    );
    assert!(out.stderr.contains("Tier 1 tries again"), "{}", out.stderr);
}

#[tokio::test]
async fn new_creates_a_session_and_prints_its_id() {
    let (_fake, server) = setup("cli-new").await;
    let out = mulligan(
        &server,
        &[
            "new",
            "--title",
            "From the terminal",
            "--auto-retry",
            "background",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let sid = out.stdout.trim().to_string();
    let detail = server.detail(&sid).await;
    assert_eq!(detail.session.title, "From the terminal");
    assert_eq!(detail.session.auto_retry, app::wire::AutoRetry::Background);

    let out = mulligan(&server, &["new", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let created: app::wire::CreatedSession = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(
        !created.agent_token.is_empty(),
        "--json is the API's answer"
    );
    assert_eq!(
        server.detail(&created.session.id).await.session.id,
        created.session.id
    );

    // A bad value is refused before anything is created.
    let before = server.get("/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    let out = mulligan(&server, &["new", "--auto-retry", "sometimes"]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("sometimes"), "{}", out.stderr);
    let over = "m".repeat(201);
    let out = mulligan(&server, &["new", "--model", &over]).await;
    assert_eq!(out.code, 2, "a refusal: {}", out.stderr);
    let after = server.get("/sessions").await.1["sessions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(after, before, "nothing created");
}

/// A server on the built-in demo provider (the catalogue's `demo/<scenario>` models),
/// streaming without its human pace.
async fn quick_demo(tag: &str) -> TestServer {
    let mut cfg = config(&temp_dir(tag), "http://unused.invalid");
    cfg.provider = server::config::ProviderKind::Demo;
    cfg.base_url = None;
    cfg.model = None;
    cfg.demo_delta_ms = 1;
    TestServer::start(cfg).await
}

#[tokio::test]
async fn new_with_fallbacks_falls_back_and_runs_show_says_who_answered() {
    let server = quick_demo("cli-fallbacks").await;
    let out = mulligan(
        &server,
        &[
            "new",
            "--model",
            "demo/demo-overloaded",
            "--fallbacks",
            "demo/demo",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let sid = out.stdout.trim().to_string();
    let session = server.detail(&sid).await.session;
    assert_eq!(session.model, "demo/demo-overloaded");
    assert_eq!(session.fallbacks, Some(vec!["demo/demo".to_string()]));

    let out = mulligan(&server, &["send", &sid, "hello", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let receipt: Receipt = serde_json::from_str(out.stdout.trim()).unwrap();
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");

    let out = mulligan(&server, &["runs", "show", receipt.run_id.as_str()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = &out.stdout;
    assert!(
        text.starts_with(&format!(
            "run {} of session {sid}: completed, prompt",
            receipt.run_id
        )),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.contains("attempt 1 on demo/demo-overloaded: "))
        .unwrap_or_else(|| panic!("the first attempt and its model: {text}"));
    assert!(lines[first].trim_start().starts_with("+0.0 s"), "{text}");
    assert!(lines[first].contains("529"), "its error: {text}");
    assert!(lines[first].contains("Tier 1 waits "), "its wait: {text}");
    let step = lines
        .iter()
        .position(|l| {
            l.contains("step 1: demo/demo answered")
                && l.ends_with("fell back from demo/demo-overloaded (overloaded)")
        })
        .unwrap_or_else(|| panic!("who answered, and the fallback: {text}"));
    assert!(step > first, "in time order: {text}");
    let end = lines.last().unwrap().trim_start();
    assert!(
        end.starts_with('+') && end.ends_with(" s  completed"),
        "{text}"
    );

    let out = mulligan(
        &server,
        &["runs", "show", receipt.run_id.as_str(), "--json"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let (_, api) = server.get(&format!("/runs/{}", receipt.run_id)).await;
    assert_eq!(printed, api, "--json prints the API's answer as is");

    let out = mulligan(&server, &["runs", "show", "r_nope"]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(out.stderr.starts_with("not_found: "), "{}", out.stderr);
}

#[tokio::test]
async fn new_sets_or_clears_the_fallback_chain_and_an_unknown_model_is_refused() {
    let (_fake, server) = setup("cli-fallbacks-set").await;
    for (args, chain) in [
        (
            &[
                "--fallbacks",
                "demo/demo-busy,demo/demo",
                "--fallbacks",
                "demo/demo-long",
            ][..],
            vec!["demo/demo-busy", "demo/demo", "demo/demo-long"],
        ),
        (&["--no-fallbacks"][..], vec![]),
        (&["--fallbacks", ""][..], vec![]),
    ] {
        let mut cmd = vec!["new", "--model", "demo/demo-overloaded"];
        cmd.extend(args);
        let out = mulligan(&server, &cmd).await;
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        let session = server.detail(out.stdout.trim()).await.session;
        assert_eq!(
            session.fallbacks,
            Some(chain.iter().map(|m| m.to_string()).collect()),
            "{args:?}"
        );
    }
    let out = mulligan(&server, &["new"]).await;
    let session = server.detail(out.stdout.trim()).await.session;
    assert_eq!(session.fallbacks, None, "the catalogue's chain by default");

    // Nine models: a chain has at most eight.
    let out = mulligan(&server, &["new", "--fallbacks", "a,b,c,d,e,f,g,h,i"]).await;
    assert_eq!(out.code, 2, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stderr.starts_with("invalid_request: "),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("at most 8"), "{}", out.stderr);
    let out = mulligan(
        &server,
        &["new", "--fallbacks", "demo/demo", "--no-fallbacks"],
    )
    .await;
    assert_ne!(out.code, 0, "contradictory flags are refused");
}

#[tokio::test]
async fn models_lists_the_catalogue_with_status_tools_and_fallbacks() {
    let server = quick_demo("cli-models").await;
    // An advised wait past Tier 1's window (429, Retry-After: 3000) cools its model.
    let (status, created) = server
        .post("/sessions", serde_json::json!({"model": "demo/demo-quota"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let r = server.send(created["id"].as_str().unwrap(), "hello").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Failed
    );

    let out = mulligan(&server, &["models"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    for col in ["MODEL", "STATUS", "TOOLS", "FALLBACKS"] {
        assert!(lines[0].contains(col), "{}", out.stdout);
    }
    let row = |id: &str| {
        let id = format!("{id} ");
        lines
            .iter()
            .find(|l| l.starts_with(&id))
            .unwrap_or_else(|| panic!("a row for {id}: {}", out.stdout))
            .to_string()
    };
    let demo = row("demo/demo");
    assert!(demo.contains("(default)"), "the default: {demo}");
    assert!(demo.contains(" ok ") && demo.contains(" on "), "{demo}");
    assert!(
        row("demo/demo-overloaded")
            .trim_end()
            .ends_with("demo/demo"),
        "its fallback: {}",
        out.stdout
    );
    let cooling = row("demo/demo-quota");
    assert!(
        cooling.contains("cooling until ") && cooling.contains(" UTC (in "),
        "{cooling}"
    );

    let out = mulligan(&server, &["models", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let list: app::wire::ModelList = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(list.default_model, "demo/demo");
    assert!(list.models.iter().any(|m| m.id == "demo/demo"));
    let (_, api) = server.get("/models").await;
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(printed, api, "--json prints the API's answer as is");
}

#[tokio::test]
async fn an_agent_lists_the_models_and_runs_show_shows_the_tool_call() {
    let (fake, server) = setup("cli-list-models").await;
    fake.push(Script::call(
        "",
        "c1",
        "mulligan__list_models",
        serde_json::json!({}),
    ));
    fake.push(Script::reply(&["Listed."]));
    let sid = server.create_session().await;
    let r = server.send(&sid, "which models?").await;
    assert_eq!(
        server.wait_run_end(&r.run_id).await.status,
        RunStatus::Completed
    );
    let reply = server.detail(&sid).await.messages.pop().unwrap();
    let call = reply
        .parts
        .iter()
        .flatten()
        .find_map(|p| match p {
            app::wire::Part::ToolCall { call } => Some(call.clone()),
            _ => None,
        })
        .expect("the tool call");
    let listed: app::wire::ModelList = serde_json::from_str(call.result.as_deref().unwrap())
        .expect("the tool answers a ModelList");
    assert!(
        listed.models.iter().any(|m| m.id == "openai/fake-model"),
        "{listed:?}"
    );

    let out = mulligan(&server, &["runs", "show", r.run_id.as_str()]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let at = |part: &str| {
        lines
            .iter()
            .position(|l| l.contains(part))
            .unwrap_or_else(|| panic!("{part:?}: {}", out.stdout))
    };
    let (one, tool, two) = (
        at("step 1: "),
        at("[tool mulligan/list_models: ok"),
        at("step 2: "),
    );
    assert!(one < tool && tool < two, "in order: {}", out.stdout);
}

/// Sends `calls` (tool name, arguments) to `mulligan mcp` on stdin, one JSON-RPC request a
/// line with ids 0, 1, …, closes stdin, and answers the bridge's answers by id.
async fn mcp_calls(
    server: &TestServer,
    calls: &[(&str, serde_json::Value)],
) -> Vec<serde_json::Value> {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mulligan"))
        .arg("mcp")
        .env("MULLIGAN_URL", &server.base)
        .env("MULLIGAN_TOKEN", &server.token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        for (id, (name, arguments)) in calls.iter().enumerate() {
            let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}});
            stdin
                .write_all(format!("{call}\n").as_bytes())
                .await
                .unwrap();
        }
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the bridge ends when stdin closes")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), calls.len(), "{stdout}");
    // Requests are forwarded at once, so answers come in any order.
    answers.sort_by_key(|a| a["id"].as_u64());
    answers
}

#[tokio::test]
async fn mcp_over_stdio_lists_the_models() {
    let (_fake, server) = setup("cli-mcp-models").await;
    let answers = mcp_calls(&server, &[("list_models", serde_json::json!({}))]).await;
    let answer = &answers[0];
    let result = &answer["result"];
    assert_ne!(result["isError"], true, "{answer}");
    let listed: app::wire::ModelList =
        serde_json::from_value(result["structuredContent"].clone()).expect("a ModelList");
    let (_, api) = server.get("/models").await;
    assert_eq!(
        serde_json::to_value(&listed).unwrap()["models"]
            .as_array()
            .map(Vec::len),
        api["models"].as_array().map(Vec::len)
    );
    assert!(listed.models.iter().any(|m| m.id == "openai/fake-model"));
}

/// A refusal over MCP (CONTRACT §5) is `isError: true` with the API's error JSON as its text
/// and no `structuredContent`: clients check structured content against the tool's
/// `outputSchema`, which an error body does not match.
#[tokio::test]
async fn mcp_refusals_are_error_text_without_structured_content() {
    let (_fake, server) = setup("cli-mcp-refusal").await;
    let sid = server.create_session().await;
    let calls = [
        ("retry_session", serde_json::json!({"session": sid})),
        ("send_message", serde_json::json!({"session": sid})),
    ];
    let answers = mcp_calls(&server, &calls).await;
    let codes: Vec<String> = answers
        .iter()
        .map(|answer| {
            let result = &answer["result"];
            assert_eq!(result["isError"], true, "{answer}");
            assert!(
                result.get("structuredContent").is_none(),
                "no structured content on a refusal: {answer}"
            );
            let text = result["content"][0]["text"].as_str().expect("a text block");
            let body: serde_json::Value = serde_json::from_str(text).expect("JSON text");
            let error = body["error"].as_object().expect("an error body");
            let mut keys: Vec<_> = error.keys().map(String::as_str).collect();
            keys.sort_unstable();
            assert_eq!(keys, ["code", "message"], "{body}");
            assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
            error["code"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        codes,
        [
            ErrorCode::RetryNothingFailed.as_str(),
            ErrorCode::InvalidRequest.as_str()
        ]
    );
}

/// No model can drive the operator's terminal (CONTRACT §4): a reply that sets the clipboard
/// (OSC 52), moves up and erases a line, hides a link (OSC 8) and sends an 8-bit CSI reaches
/// `send --follow`'s stdout escaped, as does a title in `sessions` and an error quoting
/// control characters in `--follow`'s end line and `runs show`; `--json` stays the API's JSON.
#[tokio::test]
async fn untrusted_text_reaches_the_terminal_escaped() {
    let (fake, server) = setup("cli-escape").await;
    let (status, body) = server
        .post(
            "/sessions",
            serde_json::json!({"title": "red \u{1b}[31mtitle"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let sid = body["id"].as_str().unwrap().to_string();
    fake.push(Script::reply(&[
        "copy \u{1b}]52;c;ZWNobyBwd25lZA==\u{7}",
        "up\u{1b}[1A\u{1b}[2K",
        " \u{1b}]8;;https://evil.test\u{1b}\\link\u{1b}]8;;\u{1b}\\",
        " csi\u{9b}2J\r\nline\ttab",
    ]));
    let out = mulligan(&server, &["send", "--follow", &sid, "go"]).await;
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let controls = |s: &str| s.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
    assert!(
        !controls(&out.stdout),
        "a raw control character: {:?}",
        out.stdout
    );
    for shown in [
        r"copy \x1b]52;c;ZWNobyBwd25lZA==\x07",
        r"up\x1b[1A\x1b[2K",
        r" \x1b]8;;https://evil.test\x1b\link\x1b]8;;\x1b\",
        " csi\\u{9b}2J\\x0d\nline\ttab",
    ] {
        assert!(out.stdout.contains(shown), "{shown:?} in {:?}", out.stdout);
    }

    let out = mulligan(&server, &["sessions"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(r"red \x1b[31mtitle"),
        "{:?}",
        out.stdout
    );
    assert!(!controls(&out.stdout), "{:?}", out.stdout);
    let out = mulligan(&server, &["sessions", "--json"]).await;
    let (_, api) = server.get("/sessions").await;
    let printed: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(printed, api, "--json prints the API's answer as is");

    // A provider's error quoting control characters, at the end of `--follow` and in
    // `runs show`.
    fake.push(Script::Status {
        code: 400,
        headers: vec![],
        body: serde_json::json!({"error": {"type": "invalid_request_error",
            "message": "bad \u{1b}[2J\u{1b}]0;owned\u{7} request"}}),
    });
    let out = mulligan(&server, &["send", "--follow", &sid, "again"]).await;
    assert_eq!(out.code, 3, "{}{}", out.stdout, out.stderr);
    assert!(!controls(&out.stdout), "{:?}", out.stdout);
    assert!(
        out.stdout.contains(r"bad \x1b[2J\x1b]0;owned\x07 request"),
        "{:?}",
        out.stdout
    );
    let run = out
        .stdout
        .lines()
        .find_map(|l| l.split(", run ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .expect("the run's id")
        .to_string();
    let out = mulligan(&server, &["runs", "show", &run]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!controls(&out.stdout), "{:?}", out.stdout);
    assert!(
        out.stdout.contains(r"bad \x1b[2J\x1b]0;owned\x07 request"),
        "{:?}",
        out.stdout
    );
}

#[tokio::test]
async fn approvals_lists_waiting_calls_and_approve_and_deny_decide_them() {
    let (fake, server) = setup("cli-approve").await;
    let sid = server.create_session().await;
    let empty = mulligan(&server, &["approvals"]).await;
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert_eq!(empty.stdout.trim(), "no tool call waits for your approval");

    // `send --follow` prints the waiting call with the commands that decide it, and follows on.
    fake.push(Script::call(
        "Renaming. ",
        "c1",
        "mulligan__rename_session",
        serde_json::json!({"title": "By the CLI"}),
    ));
    fake.push(Script::reply(&["Renamed."]));
    let follow = tokio::spawn({
        let (base, token, sid) = (server.base.clone(), server.token.clone(), sid.clone());
        async move {
            mulligan_in(
                &temp_dir("cli-cwd"),
                &[("MULLIGAN_URL", &base), ("MULLIGAN_TOKEN", &token)],
                &["send", "--follow", &sid, "rename yourself"],
            )
            .await
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (run, call) = loop {
        let (_, list) = server.get("/approvals").await;
        if let Some(w) = list["approvals"].as_array().and_then(|a| a.first()) {
            break (
                w["run_id"].as_str().unwrap().to_string(),
                w["call"]["id"].as_str().unwrap().to_string(),
            );
        }
        assert!(std::time::Instant::now() < deadline, "no call waited");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let listed = mulligan(&server, &["approvals"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed
            .stdout
            .contains("mulligan/rename_session waits for your approval"),
        "{}",
        listed.stdout
    );
    assert!(
        listed
            .stdout
            .contains(&format!("mulligan approve {run} {call}")),
        "{}",
        listed.stdout
    );

    let approved = mulligan(&server, &["approve", &run, &call]).await;
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert!(approved.stdout.contains("allowed"), "{}", approved.stdout);
    let followed = follow.await.unwrap();
    assert_eq!(followed.code, 0, "{}{}", followed.stdout, followed.stderr);
    assert!(
        followed
            .stdout
            .contains(&format!("mulligan approve {run} {call}")),
        "{}",
        followed.stdout
    );
    assert!(
        followed.stdout.contains("[completed: run "),
        "{}",
        followed.stdout
    );
    let calls = server.detail(&sid).await;
    assert_eq!(calls.session.title, "By the CLI");

    // Deciding again is a refusal: exit 2 with the code.
    let again = mulligan(&server, &["deny", &run, &call, "--reason", "too late"]).await;
    assert_eq!(again.code, 2, "{}{}", again.stdout, again.stderr);
    assert!(
        again.stderr.contains("approval.decided") || again.stdout.contains("approval.decided"),
        "{}{}",
        again.stdout,
        again.stderr
    );

    // Deny with a reason and --always: remembered for the session.
    fake.push(Script::call(
        "",
        "c2",
        "mulligan__rename_session",
        serde_json::json!({"title": "Never"}),
    ));
    fake.push(Script::reply(&["Fine."]));
    let sent = server.send(&sid, "again").await;
    server
        .wait_run_status(&sent.run_id, RunStatus::AwaitingApproval)
        .await;
    let (_, list) = server.get("/approvals").await;
    let call = list["approvals"][0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let denied = mulligan(
        &server,
        &[
            "deny",
            "--always",
            "--reason",
            "keep it",
            sent.run_id.as_str(),
            &call,
        ],
    )
    .await;
    assert_eq!(denied.code, 0, "{}", denied.stderr);
    assert!(denied.stdout.contains("denied"), "{}", denied.stdout);
    assert!(denied.stdout.contains("remembered"), "{}", denied.stdout);
    server.wait_run_end(&sent.run_id).await;
    let session = server.detail(&sid).await.session;
    assert_eq!(session.title, "By the CLI");
    assert_eq!(session.tool_grants.len(), 1);
}
