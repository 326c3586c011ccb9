//! The real `mulligan` binary as an operator runs it: killed with SIGKILL mid-stream and
//! started again, its run ends `interrupted` with the partial text kept and a waiting
//! background retry still fires; the API key never reaches its logs. Copied anywhere, it
//! serves its page from the site beside it, and refuses to start where it has none.
use testkit as common;

use app::wire::{RetryClass, RunKind, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{database_url, serve, temp_dir, TestServer, API_KEY};
use serde_json::json;
use std::time::{Duration, Instant};

/// Polls until `done` holds for the session's detail (≤ 15 s), and answers it.
async fn wait_for(
    server: &TestServer,
    sid: &str,
    done: impl Fn(&app::wire::SessionDetail) -> bool,
) -> app::wire::SessionDetail {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let detail = server.detail(sid).await;
        if done(&detail) {
            return detail;
        }
        assert!(Instant::now() < deadline, "never reached: {detail:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn kill_9_mid_stream_then_restart_marks_the_run_interrupted_and_logs_no_secret() {
    let fake = FakeProvider::start().await;
    fake.push(Script::slow(400, Duration::from_millis(10)));
    let dir = temp_dir("kill9");
    let log = dir.join("server.log");
    let (mut child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    let sid = server.create_session().await;
    let rid = server.send(&sid, "stream for a while").await.run_id;
    // Let it stream past a save (every 250 ms), then kill it without warning.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &[]).await;
    // SQLite: recorded at start. PostgreSQL: once the killed instance's lease lapses.
    let run = server.wait_run_end(&rid).await;
    assert_eq!(run.status, RunStatus::Failed);
    let class = run.retry.expect("classified");
    assert_eq!(
        (class.retryable, class.retry_class.clone()),
        (true, RetryClass::Interrupted)
    );
    let reply = server.detail(&sid).await.messages.last().unwrap().clone();
    assert!(
        reply.content.starts_with("w0 w1 w2 "),
        "partial text kept: {:?}",
        reply.content
    );
    assert_eq!(reply.status, Some(app::wire::MessageStatus::Failed));

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("interrupted"), "the log says what happened");
    assert!(
        logs.contains(&format!("session_id={sid} run_id={rid}")),
        "the run's log lines say whose they are"
    );
    assert!(!logs.contains(API_KEY), "the API key reached the log");
    assert!(
        !logs.contains(&server.token),
        "the operator token reached the log"
    );
}

#[tokio::test]
async fn a_waiting_background_retry_survives_kill_9_and_fires_after_the_restart() {
    let fake = FakeProvider::start().await;
    fake.push(Script::Status {
        code: 529,
        headers: vec![],
        body: json!({"error": {"message": "overloaded"}}),
    });
    let dir = temp_dir("bg-kill9");
    let log = dir.join("server.log");
    let env = [
        ("MULLIGAN_TIER1_MAX_ATTEMPTS", "1"),
        ("MULLIGAN_TIER2_BASE_MS", "2500"),
    ];
    let (mut child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let (status, session) = server
        .post("/sessions", json!({"auto_retry": "background"}))
        .await;
    assert_eq!(status, 201);
    let sid = session["id"].as_str().unwrap().to_string();
    server.send(&sid, "walk away").await;
    let waiting = wait_for(&server, &sid, |d| d.session.waiting_retry.is_some()).await;
    assert_eq!(waiting.session.waiting_retry.unwrap().attempt, 1);
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let (_child, server) = serve(&dir, &fake.url, &log, database_url(&dir), &env).await;
    let detail = wait_for(&server, &sid, |d| {
        d.runs.len() == 2 && d.runs[1].status == RunStatus::Completed
    })
    .await;
    assert_eq!(detail.runs[1].kind, RunKind::Resend);
    assert_eq!(detail.session.waiting_retry, None);
    assert_eq!(fake.seen().len(), 2);
}

/// `mulligan serve` from `exe` in the working directory `cwd` (its data in `cwd/data`), with
/// `env` and no site setting of the test's own environment; stdout and stderr piped.
fn spawn_serve(
    exe: &std::path::Path,
    cwd: &std::path::Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> tokio::process::Child {
    let data = cwd.join("data");
    tokio::process::Command::new(exe)
        .arg("serve")
        .current_dir(cwd)
        .env_remove("LEPTOS_SITE_ROOT")
        .env_remove("MULLIGAN_SITE_OPTIONAL")
        .env_remove("MULLIGAN_DATABASE_URL")
        .env("MULLIGAN_BIND", "127.0.0.1:0")
        .env("MULLIGAN_DATA_DIR", &data)
        .env("MULLIGAN_PROVIDER", "demo")
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The binary the tests run, copied (hard-linked when it can be) to `dir/mulligan`.
fn copy_binary(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("mulligan");
    if std::fs::hard_link(common::mulligan_bin(), &exe).is_err() {
        std::fs::copy(common::mulligan_bin(), &exe).unwrap();
    }
    exe
}

/// Waits (≤ 30 s) for the child to end by itself: its exit status and stderr.
async fn refusal(child: tokio::process::Child) -> (std::process::ExitStatus, String) {
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the server refused to start within 30 s")
        .unwrap();
    assert!(out.stdout.is_empty(), "no URL printed: {:?}", out.stdout);
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_copied_binary_serves_its_page_from_the_site_beside_it() {
    let [js, wasm, css] = server::site::files();
    // `site` beside the binary, and beside the binary's directory (cargo-leptos' layout:
    // `target/release/mulligan`, `target/site`).
    for (layout, site) in [("bin/site", "bin/site"), ("bin/../site", "site")] {
        let dir = temp_dir("site-beside");
        let exe = copy_binary(&dir.join("bin"));
        for f in [&js, &wasm, &css] {
            let path = dir.join(site).join(f);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("{layout}: {f}")).unwrap();
        }
        // Started from elsewhere: no `target/site` in its working directory.
        let elsewhere = dir.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let mut child = spawn_serve(&exe, &elsewhere, &[]);
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
            child.stdout.take().unwrap(),
        ));
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the URL within 30 s")
            .unwrap()
            .unwrap_or_else(|| panic!("{layout}: no URL printed"));
        let base = line
            .split("open ")
            .nth(1)
            .and_then(|url| url.split("/?token=").next())
            .expect("the printed URL")
            .to_string();

        let page = reqwest::get(format!("{base}/")).await.unwrap();
        assert_eq!(page.status(), 200, "{layout}: the page");
        let html = page.text().await.unwrap();
        for f in [&js, &wasm, &css] {
            assert!(
                html.contains(&format!("/{f}")),
                "{layout}: the page names {f}"
            );
            let served = reqwest::get(format!("{base}/{f}")).await.unwrap();
            assert_eq!(served.status(), 200, "{layout}: {f}");
            assert_eq!(served.text().await.unwrap(), format!("{layout}: {f}"));
        }
        child.start_kill().unwrap();
        child.wait().await.unwrap();
    }
}

#[tokio::test]
async fn without_its_site_the_server_refuses_to_start_and_says_what_to_do() {
    // Copied alone and started from elsewhere: nothing beside it, nothing in the working dir.
    let dir = temp_dir("site-nowhere");
    let exe = copy_binary(&dir.join("bin"));
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let (status, stderr) = refusal(spawn_serve(&exe, &elsewhere, &[])).await;
    assert!(!status.success(), "{stderr}");
    for looked in [
        dir.join("bin").join("site"),
        dir.join("site"),
        elsewhere.join("target").join("site"),
    ] {
        assert!(
            stderr.contains(&looked.display().to_string()),
            "names {}: {stderr}",
            looked.display()
        );
    }
    assert!(stderr.contains("cargo leptos build --release"), "{stderr}");
    assert!(stderr.contains("LEPTOS_SITE_ROOT"), "{stderr}");

    // A setting pointing to an empty directory: only it is looked at, and said.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let env = [("LEPTOS_SITE_ROOT", empty.as_os_str())];
    let (status, stderr) = refusal(spawn_serve(&common::mulligan_bin(), &elsewhere, &env)).await;
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains(&empty.display().to_string()), "{stderr}");
    assert!(
        !stderr.contains(&elsewhere.join("target").display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("cargo leptos build --release"), "{stderr}");

    // Asked to start without the page, it does, and still answers the API.
    let env = [("MULLIGAN_SITE_OPTIONAL", std::ffi::OsStr::new("true"))];
    let mut child = spawn_serve(&exe, &elsewhere, &env);
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the URL within 30 s")
        .unwrap()
        .expect("a URL printed");
    assert!(line.contains("open http://"), "{line}");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}
