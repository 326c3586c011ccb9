//! B10, the browser's part (issue 37 item 1): the page's main-thread time per streamed delta
//! of a Markdown reply, at 1,000, 8,000 and 24,000 deltas 1 ms apart, and how long after the
//! stream's end the reply is all on screen. A real Mulligan (this binary as a child, serving
//! the release build's site) and Debian's chromium driven by `bench/browser/b10.mjs` through
//! the DevTools protocol; the streamed reply's DOM must equal the same reply loaded at once.
use crate::client::Server;
use crate::fake::{markdown_model, Fake};
use crate::report::Table;
use crate::{Opts, R};
use std::path::PathBuf;

/// Issue 37's targets: main-thread time per delta, its growth from the smallest to the
/// largest reply, and the last word on screen after the stream's end.
const PER_DELTA_US: f64 = 150.0;
const GROWTH: f64 = 1.2;
const ON_SCREEN_MS: f64 = 1000.0;
/// Issue 37 item 3: the server's page of a session holding replies of the largest size.
const RENDER_MS: f64 = 300.0;
/// Deltas of 8 bytes that make a reply just under `MULLIGAN_MAX_REPLY_BYTES`' 1 MiB.
const LARGEST_REPLY_DELTAS: usize = 130_000;

pub async fn run(opts: &Opts, fake: &Fake, t: &mut Table) -> R<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let site = root.join("target/site");
    if !site.join("pkg").is_dir() {
        t.row(
            "B10 page",
            "target/site (`cargo leptos build --release`)",
            String::new(),
            "not built".into(),
            String::new(),
            "",
            None,
        );
        return Ok(());
    }
    if !root.join("end2end/node_modules/@playwright/test").is_dir() {
        return Err("end2end's npm packages are not installed (scripts/toolchain.sh)".into());
    }
    let site = site_for_this_build(&site)?;
    let server = Server::start(
        &fake.url,
        &[("LEPTOS_SITE_ROOT", site.display().to_string())],
    )
    .await?;
    let render = page_render(&server).await;
    let sizes = opts.b10_deltas.clone();
    let mut models: Vec<String> = sizes.iter().map(|&n| markdown_model(n, 1)).collect();
    // The smallest reply again as the open page's second turn: the first turn of a page
    // also pays for compiling the code a turn runs (the browser compiles WebAssembly
    // functions when they first run).
    if let Some(&n) = sizes.first() {
        models.push(format!("{}:second", markdown_model(n, 1)));
    }
    // The smallest reply again, at the end of a long session (its turns first, short ones).
    let long = opts.b10_long_messages / 2;
    if let Some(&n) = sizes.first().filter(|_| long > 0) {
        models.push(format!("{}:fill={long}", markdown_model(n, 1)));
    }
    // And with a long session list (last: its sessions stay).
    if let Some(&n) = sizes.first().filter(|_| opts.b10_sessions > 0) {
        models.push(format!(
            "{}:sessions={}",
            markdown_model(n, 1),
            opts.b10_sessions
        ));
    }
    let out = tokio::process::Command::new("node")
        .arg(root.join("bench/browser/b10.mjs"))
        .arg(&server.base)
        .arg(&server.token)
        .args(&models)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(|e| format!("node (the browser driver): {e}"));
    server.stop().await;
    let (took, beside) = render?;
    t.row(
        "B10 page",
        "GET /s/{id} of a session with two 1 MiB replies · an API read meanwhile (medians of 5)",
        String::new(),
        format!("{took:.0} ms · {beside:.0} ms"),
        String::new(),
        "≤ 300 ms",
        Some(took <= RENDER_MS),
    );
    let out = out?;
    let mut per_delta = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            eprintln!("[b10] {line}");
            continue;
        };
        let model = v["model"].as_str().unwrap_or("?");
        if let Some(e) = v["error"].as_str() {
            return Err(format!("{model}: {e}"));
        }
        if v["same_as_loaded"] != true {
            return Err(format!(
                "{model}: the streamed reply's DOM differs from the same reply loaded at once"
            ));
        }
        let n = v["deltas"].as_u64().unwrap_or(0);
        let before = v["messages_before"].as_u64().unwrap_or(0);
        let opened = v["opened_ms"].as_f64().unwrap_or(f64::NAN);
        let us = v["per_delta_us"].as_f64().unwrap_or(f64::NAN);
        let after = v["on_screen_after_end_ms"].as_f64().unwrap_or(f64::NAN);
        let stream = v["stream_ms"].as_f64().unwrap_or(f64::NAN);
        let listed = v["sessions_listed"].as_u64().unwrap_or(0);
        if listed > 0 {
            let html = v["html_bytes"].as_f64().unwrap_or(f64::NAN) / 1024.0;
            t.row(
                "B10 page",
                &format!(
                    "{n} deltas with {listed} sessions listed: per delta · on screen after the end · page opened in · first HTML"
                ),
                format!("stream {:.1} s", stream / 1000.0),
                format!(
                    "{us:.0} µs · {after:.0} ms · {:.2} s · {html:.0} KB",
                    opened / 1000.0
                ),
                String::new(),
                "≤ 150 µs · ≤ 1 s · ≤ 1.5 s · ≤ 300 KB",
                Some(
                    us <= PER_DELTA_US
                        && after <= ON_SCREEN_MS
                        && opened <= 1500.0
                        && html <= 300.0,
                ),
            );
            continue;
        }
        if before > 0 {
            t.row(
                "B10 page",
                &format!(
                    "{n} deltas after {before} messages: per delta · on screen after the end · page opened in"
                ),
                format!("stream {:.1} s", stream / 1000.0),
                format!("{us:.0} µs · {after:.0} ms · {:.2} s", opened / 1000.0),
                String::new(),
                "≤ 150 µs · ≤ 1 s · ≤ 1.5 s",
                Some(us <= PER_DELTA_US && after <= ON_SCREEN_MS && opened <= 1500.0),
            );
            continue;
        }
        let what = match v["second_turn"] == true {
            true => {
                format!("{n} deltas as the page's second turn: per delta · on screen after the end")
            }
            false => {
                per_delta.push(us);
                format!("{n} deltas: main thread per delta · all on screen after the end")
            }
        };
        t.row(
            "B10 page",
            &what,
            format!("stream {:.1} s", stream / 1000.0),
            format!("{us:.0} µs · {after:.0} ms"),
            String::new(),
            "≤ 150 µs · ≤ 1 s",
            Some(us <= PER_DELTA_US && after <= ON_SCREEN_MS),
        );
    }
    if per_delta.len() != sizes.len() {
        return Err(format!(
            "the browser driver reported {} of {} sizes (exit {})",
            per_delta.len(),
            sizes.len(),
            out.status
        ));
    }
    if let (Some(first), Some(last)) = (per_delta.first(), per_delta.last()) {
        if sizes.len() > 1 {
            let growth = last / first;
            t.row(
                "B10 page",
                &format!(
                    "growth per delta, {} → {} deltas",
                    sizes[0],
                    sizes[sizes.len() - 1]
                ),
                String::new(),
                format!("{growth:.2}×"),
                String::new(),
                "≤ 1.2×",
                Some(growth <= GROWTH),
            );
        }
    }
    Ok(())
}

/// The server's page of a session with two replies of the largest size (each a run of
/// [`LARGEST_REPLY_DELTAS`] Markdown deltas, as fast as they come): the median time of 5
/// `GET /s/{id}`, and of an API read sent while each page renders (is the server still
/// answering others?).
async fn page_render(server: &Server) -> R<(f64, f64)> {
    use crate::report::{median, ms};
    use std::time::{Duration, Instant};
    let sid = server
        .create_session(&markdown_model(LARGEST_REPLY_DELTAS, 0))
        .await?;
    for _ in 0..2 {
        let receipt = server.post_message(&sid, "go").await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let run = server.run(&receipt.run_id).await?;
            if !run.status.is_active() {
                if run.status != app::wire::RunStatus::Completed {
                    return Err(format!("the 1 MiB reply's run ended {:?}", run.status));
                }
                break;
            }
            if Instant::now() > deadline {
                return Err("the 1 MiB reply did not end within 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let page = format!("{}/s/{sid}", server.base);
    let mut renders = Vec::new();
    let mut beside = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let render = server.http.get(&page).bearer_auth(&server.token).send();
        let other = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let at = Instant::now();
            server.get("/api/v1/config").await.map(|_| at.elapsed())
        };
        let (resp, other) = tokio::join!(render, other);
        let resp = resp.map_err(|e| format!("GET /s/{{id}}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET /s/{{id}}: {}", resp.status()));
        }
        let html = resp
            .text()
            .await
            .map_err(|e| format!("GET /s/{{id}}: {e}"))?;
        renders.push(ms(started.elapsed()));
        beside.push(ms(other?));
        if html.len() < 2 * 900_000 {
            return Err(format!(
                "the page holds {} bytes, not both replies",
                html.len()
            ));
        }
    }
    Ok((median(renders), median(beside)))
}

/// The release site as this binary's pages ask for it: `cargo leptos` builds the server
/// telling Leptos the bundle's name (`mulligan.wasm`); built by plain cargo, as this bench
/// is, Leptos asks for `mulligan_bg.wasm`. A directory beside the site links both names.
fn site_for_this_build(site: &std::path::Path) -> R<PathBuf> {
    let dir = site.with_file_name("b10-site");
    let pkg = dir.join("pkg");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&pkg).map_err(|e| format!("{}: {e}", pkg.display()))?;
    let files = std::fs::read_dir(site.join("pkg")).map_err(|e| e.to_string())?;
    for f in files.flatten() {
        let name = f.file_name();
        let link = |to: &std::path::Path| {
            std::os::unix::fs::symlink(f.path(), to).map_err(|e| format!("{}: {e}", to.display()))
        };
        link(&pkg.join(&name))?;
        if name == "mulligan.wasm" {
            link(&pkg.join("mulligan_bg.wasm"))?;
        }
    }
    Ok(dir)
}
