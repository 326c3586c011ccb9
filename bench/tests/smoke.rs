//! The benchmarks as a smoke test (issue #7): each once at small size, correctness only
//! (no delta lost or reordered, cancels end `cancelled`, one provider request under a 50-minute
//! `Retry-After`, tool turns complete with 2 steps and 1 tool executed, adversarial Markdown
//! parses as it must); timings are not judged here.
#[test]
fn every_benchmark_once_at_small_size() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mulligan-bench"))
        .arg("--smoke")
        .output()
        .expect("mulligan-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "mulligan-bench --smoke failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    for b in [
        "B1",
        "B2",
        "B3",
        "B4",
        "B5",
        "B6",
        "B8 parked",
        "B9 approvals",
        "B10 parse",
    ] {
        assert!(stdout.contains(b), "{b} missing from the table:\n{stdout}");
    }
}
