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
    let server = Server::start(
        &fake.url,
        &[("LEPTOS_SITE_ROOT", site.display().to_string())],
    )
    .await?;
    let sizes = opts.b10_deltas.clone();
    let models: Vec<String> = sizes.iter().map(|&n| markdown_model(n, 1)).collect();
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
        let us = v["per_delta_us"].as_f64().unwrap_or(f64::NAN);
        let after = v["on_screen_after_end_ms"].as_f64().unwrap_or(f64::NAN);
        let stream = v["stream_ms"].as_f64().unwrap_or(f64::NAN);
        per_delta.push(us);
        t.row(
            "B10 page",
            &format!("{n} deltas: main thread per delta · all on screen after the end"),
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
