//! B5 WASM bundle size: raw and gzip sizes of the release build's `.wasm` files.
use crate::report::Table;
use crate::{Opts, R};
use std::path::PathBuf;

/// Issue 38's budget for the bundle (gzip, bytes): room for Leptos' own router and resources
/// (issue 26's, with Markdown and the run timeline, was 330 KB).
const BUDGET: u64 = 420_000;
const BUDGET_TEXT: &str = "≤ 420 KB gzip";

/// Puts the sizes of the built `.wasm` files in the table (or a row saying they are not built).
pub fn run(opts: &Opts, t: &mut Table) -> R<()> {
    let (dir, label) = match &opts.site_pkg {
        Some(d) => (d.clone(), d.display().to_string()),
        None => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/site/pkg"),
            "target/site/pkg".to_string(),
        ),
    };
    match measure(&dir)? {
        None => t.row(
            "B5 wasm",
            &format!("{label}/*.wasm (`cargo leptos build --release`)"),
            "".into(),
            "not built".into(),
            "".into(),
            BUDGET_TEXT,
            None,
        ),
        Some(files) => {
            for w in files {
                t.row(
                    "B5 wasm",
                    &format!("{} raw · gzip -6", w.name),
                    "".into(),
                    format!(
                        "{:.0} KB · {:.0} KB",
                        w.raw as f64 / 1000.0,
                        w.gzip as f64 / 1000.0
                    ),
                    "".into(),
                    BUDGET_TEXT,
                    Some(w.gzip <= BUDGET),
                );
            }
        }
    }
    Ok(())
}

pub struct Wasm {
    pub name: String,
    pub raw: u64,
    pub gzip: u64,
}

/// Raw and `gzip -c` (level 6) sizes of the `.wasm` files in `dir`; `None` when not built.
pub fn measure(dir: &std::path::Path) -> R<Option<Vec<Wasm>>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("wasm") {
            continue;
        }
        let raw = entry.metadata().map_err(|e| e.to_string())?.len();
        let gz = std::process::Command::new("gzip")
            .arg("-c")
            .arg(&path)
            .output()
            .map_err(|e| format!("gzip: {e}"))?;
        if !gz.status.success() {
            return Err(format!("gzip {}: {}", path.display(), gz.status));
        }
        out.push(Wasm {
            name: entry.file_name().to_string_lossy().into_owned(),
            raw,
            gzip: gz.stdout.len() as u64,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((!out.is_empty()).then_some(out))
}
