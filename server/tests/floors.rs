//! The floors of `docs/architecture.md` hold: each module of `server/src` and `app/src`
//! imports only modules on floors below its own, and the files of one module import each
//! other without a cycle. Test code (`tests.rs`, `#[cfg(test)] mod tests`) may reach anywhere.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The floors the docs give for `tree`, top first: the lines of its ```` ```floors <tree> ````
/// block, each a floor of space-separated module names.
fn floors(tree: &str) -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(workspace().join("docs/architecture.md")).unwrap();
    let opening = format!("```floors {tree}");
    let block = doc
        .split_once(&opening)
        .unwrap_or_else(|| panic!("docs/architecture.md has no {opening} block"))
        .1;
    let block = &block[..block.find("```").expect("the floors block ends")];
    block
        .lines()
        .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .filter(|f| !f.is_empty())
        .collect()
}

/// Every non-test source file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                out.extend(files(&path));
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
    out
}

/// A file's code without its test module and its comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names right after each `prefix` in `code` (`prefix` not itself the tail of a longer
/// path): `prefix::name`, or each first name in `prefix::{a, b::c, d}`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(prefix) {
        let at = from + found;
        from = at + prefix.len();
        if code[..at].ends_with(|c: char| ident(c) || c == ':') {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut expect_name = true;
            let mut name = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => expect_name = true,
                    c if depth == 1 && expect_name && ident(c) => name.push(c),
                    _ => {}
                }
                if depth == 1 && expect_name && !name.is_empty() && !ident(c) {
                    out.insert(std::mem::take(&mut name));
                    expect_name = c == ',';
                }
                if depth == 0 {
                    break;
                }
            }
            if !name.is_empty() {
                out.insert(name);
            }
        } else {
            let name: String = rest.chars().take_while(|&c| ident(c)).collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// The top-level module a file of `root` belongs to (`None`: the crate root).
fn top_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(root).unwrap();
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// The broken rules of `tree`: imports that point to a floor not below, modules the docs do
/// not place, and cycles between the files of one module.
fn broken(tree: &str) -> Vec<String> {
    let root = workspace().join(tree);
    let floors = floors(tree);
    let floor_of: BTreeMap<&str, usize> = floors
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let mut broken = Vec::new();
    let mut tops = BTreeSet::new();
    for file in files(&root) {
        let Some(top) = top_of(&root, &file) else {
            continue;
        };
        tops.insert(top.clone());
        let Some(&own) = floor_of.get(top.as_str()) else {
            broken.push(format!("{tree}: module `{top}` is on no floor of the docs"));
            continue;
        };
        for used in names_after(&code(&file), "crate::") {
            match floor_of.get(used.as_str()) {
                Some(&floor) if floor <= own && used != top => broken.push(format!(
                    "{}: uses `{used}`, on a floor not below `{top}`'s",
                    file.strip_prefix(workspace()).unwrap().display()
                )),
                _ => {}
            }
        }
    }
    for top in floor_of.keys() {
        if !tops.contains(*top) {
            broken.push(format!(
                "{tree}: the docs place `{top}`, which is not a module"
            ));
        }
    }
    for top in &tops {
        broken.extend(cycle_within(&root, top));
    }
    broken
}

/// A cycle between the children of module `top` (its files and folders, `mod.rs` aside), as
/// found from `crate::top::x` and `super::x` paths.
fn cycle_within(root: &Path, top: &str) -> Option<String> {
    let dir = root.join(top);
    if !dir.is_dir() {
        return None;
    }
    let child_of = |file: &Path| -> Option<String> {
        let rel = file.strip_prefix(&dir).ok()?;
        let first = rel.components().next()?.as_os_str().to_string_lossy();
        let name = first.trim_end_matches(".rs").to_string();
        (name != "mod").then_some(name)
    };
    let all = files(&dir);
    let children: BTreeSet<String> = all.iter().filter_map(|f| child_of(f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &all {
        let Some(child) = child_of(file) else {
            continue;
        };
        let depth = file.strip_prefix(&dir).unwrap().components().count();
        let code = code(file);
        let mut used = names_after(&code, &format!("crate::{top}::"));
        used.extend(names_after(&code, &"super::".repeat(depth)));
        used.retain(|u| children.contains(u) && *u != child);
        edges.entry(child).or_default().extend(used);
    }
    // Depth-first: a node met again while still on the path closes a cycle.
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for child in &children {
        if let Some(cycle) = visit(child, &edges, &mut Vec::new(), &mut done) {
            return Some(format!(
                "{top}: a cycle between its files: {}",
                cycle.join(" → ")
            ));
        }
    }
    None
}

#[test]
fn the_server_imports_only_down_its_floors() {
    let broken = broken("server/src");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_app_imports_only_down_its_floors() {
    let broken = broken("app/src");
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_reader_finds_every_form_of_path() {
    let code = "use crate::a::b;\nuse crate::{c, d::{e, f}, g};\nlet x = crate::h::i();\n\
                use app::crate_like; let y = super::j; let z = other::crate::k;";
    let names: Vec<_> = names_after(code, "crate::").into_iter().collect();
    assert_eq!(names, ["a", "c", "d", "g", "h"]);
    let supers: Vec<_> = names_after(code, "super::").into_iter().collect();
    assert_eq!(supers, ["j"]);
}
