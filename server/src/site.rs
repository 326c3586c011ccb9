//! Where `mulligan serve` finds its site: the page's script, WebAssembly and stylesheet that
//! cargo-leptos builds (`cargo leptos build --release` writes them to `target/site`).
//!
//! The page is served from the first of these that holds the files it references:
//! 1. `LEPTOS_SITE_ROOT` (`--site-root`), when set: then only it;
//! 2. `site` beside the executable (a binary copied anywhere carries its site next to it);
//! 3. `site` beside the executable's directory (`target/site` for `target/release/mulligan`,
//!    where cargo-leptos puts both);
//! 4. `target/site` in the working directory.
//!
//! When none does, `serve` refuses to start with a message naming the places it looked at and
//! what to do, instead of serving a page without styles that never hydrates.
//! `MULLIGAN_SITE_OPTIONAL` (`--site-optional`) starts anyway, with a warning: for serving
//! only the API and MCP, and for tests of those. The other commands (the CLI, `mulligan mcp`)
//! serve no page and never look. [`crate::start`] takes the site root it is given (a library
//! caller's default: `target/site` in the working directory) and does not check it.
use std::fmt;
use std::path::{Path, PathBuf};

/// The name cargo-leptos gives the bundle's files (`output-name` in the workspace manifest).
pub const OUTPUT_NAME: &str = "mulligan";
/// The site's directory of the bundle's files (`site-pkg-dir`).
pub const PKG_DIR: &str = "pkg";
/// What a library caller that sets no site root serves from.
pub const DEFAULT_ROOT: &str = "target/site";

/// The files of a site the page references, relative to the site root: its script, its
/// WebAssembly and its stylesheet (`app::shell`, Leptos' `HydrationScripts`).
pub fn files() -> [String; 3] {
    // Leptos names the WebAssembly file as this binary was built: cargo-leptos sets
    // LEPTOS_OUTPUT_NAME (`mulligan.wasm`); without it (a plain `cargo build`) wasm-bindgen's
    // own name (`mulligan_bg.wasm`). Same rule as `leptos::HydrationScripts` without hashes.
    let wasm = if option_env!("LEPTOS_OUTPUT_NAME").is_some() {
        OUTPUT_NAME.to_string()
    } else {
        format!("{OUTPUT_NAME}_bg")
    };
    [
        format!("{PKG_DIR}/{OUTPUT_NAME}.js"),
        format!("{PKG_DIR}/{wasm}.wasm"),
        format!("{PKG_DIR}/{OUTPUT_NAME}.css"),
    ]
}

/// Whether `dir` holds every file of [`files`].
pub fn holds_site(dir: &Path) -> bool {
    files().iter().all(|f| dir.join(f).is_file())
}

/// No place looked at holds the site.
#[derive(Debug)]
pub struct Missing {
    /// Whether the places are the one `LEPTOS_SITE_ROOT` named.
    explicit: bool,
    looked: Vec<PathBuf>,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files = files().join(", ");
        if self.explicit {
            writeln!(
                f,
                "the page's files ({files}) are not in LEPTOS_SITE_ROOT (--site-root):"
            )?;
        } else {
            writeln!(f, "the page's files ({files}) are in none of:")?;
        }
        for dir in &self.looked {
            writeln!(f, "  {}", dir.display())?;
        }
        write!(
            f,
            "Build them with `scripts/run` or `cargo leptos build --release` (into target/site), \
             keep them as `site` beside the binary, or set LEPTOS_SITE_ROOT (--site-root) to \
             where they are. MULLIGAN_SITE_OPTIONAL=true serves the API without the page."
        )
    }
}

impl std::error::Error for Missing {}

/// The places looked at, in order (see the module's comment).
pub fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    let cwd = std::env::current_dir().ok();
    let absolute = |p: &Path| match &cwd {
        Some(cwd) if p.is_relative() => cwd.join(p),
        _ => p.to_path_buf(),
    };
    if let Some(dir) = explicit {
        return vec![absolute(dir)];
    }
    let mut out = Vec::new();
    // Symbolic links resolved (Linux): a link to `target/release/mulligan` finds `target/site`.
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        out.push(exe_dir.join("site"));
        if let Some(up) = exe_dir.parent() {
            out.push(up.join("site"));
        }
    }
    out.push(absolute(Path::new(DEFAULT_ROOT)));
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The first of [`candidates`] that [`holds_site`].
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, Missing> {
    let looked = candidates(explicit);
    match looked.iter().find(|dir| holds_site(dir)) {
        Some(dir) => Ok(dir.clone()),
        None => Err(Missing {
            explicit: explicit.is_some(),
            looked,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_is_its_three_files() {
        let dir = std::env::temp_dir().join(format!("mulligan-site-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(dir.join(PKG_DIR)).unwrap();
        let [js, wasm, css] = files();
        assert!(js.ends_with(".js") && wasm.ends_with(".wasm") && css.ends_with(".css"));
        for f in [&js, &wasm] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        assert!(!holds_site(&dir), "no stylesheet: no site");
        let missing = locate(Some(&dir)).unwrap_err().to_string();
        assert!(missing.contains(&dir.display().to_string()), "{missing}");
        assert!(
            missing.contains("cargo leptos build --release"),
            "{missing}"
        );
        std::fs::write(dir.join(&css), b"x").unwrap();
        assert_eq!(locate(Some(&dir)).unwrap(), dir);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
