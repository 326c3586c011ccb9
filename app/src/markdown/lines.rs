//! What one line of a reply is, alone: its indent, and whether it is blank, opens or closes a
//! fence, is a heading, a rule, a list marker, a table's delimiter row or cells, or
//! interrupts a paragraph. Each looks at the line once (bounded lookahead for a table).
use super::*;

/// The columns of a line's leading whitespace (a tab counts 4) and the rest of the line.
pub(super) fn indent(line: &str) -> (usize, &str) {
    let mut cols = 0;
    for (i, c) in line.char_indices() {
        match c {
            ' ' => cols += 1,
            '\t' => cols += 4,
            _ => return (cols, &line[i..]),
        }
    }
    (cols, "")
}

/// `line` without up to `cols` columns of leading whitespace.
pub(super) fn dedent(line: &str, cols: usize) -> &str {
    let mut seen = 0;
    for (i, c) in line.char_indices() {
        if seen >= cols {
            return &line[i..];
        }
        match c {
            ' ' => seen += 1,
            '\t' => seen += 4,
            _ => return &line[i..],
        }
    }
    ""
}

pub(super) fn blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// An opening code fence: its character, its length and the info word after it.
pub(super) fn fence(rest: &str) -> Option<(u8, usize, &str)> {
    let c = *rest.as_bytes().first()?;
    if c != b'`' && c != b'~' {
        return None;
    }
    let n = rest.bytes().take_while(|&b| b == c).count();
    let info = rest[n..].trim();
    // A backtick fence's info string has no backtick (else it is inline code).
    (n >= 3 && !(c == b'`' && info.contains('`'))).then(|| {
        let lang = info.split_whitespace().next().unwrap_or("");
        (c, n, lang)
    })
}

pub(super) fn closes_fence(line: &str, c: u8, n: usize) -> bool {
    let rest = indent(line).1.trim_end();
    rest.len() >= n && rest.bytes().all(|b| b == c)
}

pub(super) fn heading(rest: &str) -> Option<(u8, &str)> {
    let n = rest.bytes().take_while(|&b| b == b'#').count();
    let after = &rest[n..];
    if !(1..=6).contains(&n) || !(after.is_empty() || after.starts_with([' ', '\t'])) {
        return None;
    }
    // An optional closing run of `#`s, after a space.
    let mut text = after.trim();
    let bare = text.trim_end_matches('#');
    if bare.is_empty() || bare.ends_with([' ', '\t']) {
        text = bare.trim_end();
    }
    Some((n as u8, text))
}

pub(super) fn rule(rest: &str) -> bool {
    let mut marks = rest.bytes().filter(|b| !matches!(b, b' ' | b'\t'));
    let Some(c) = marks.next() else { return false };
    matches!(c, b'-' | b'*' | b'_') && marks.clone().all(|b| b == c) && marks.count() >= 2
}

/// A list marker: ordered, its number, and the columns it takes with the spaces after it.
pub(super) fn list_marker(rest: &str) -> Option<(bool, u32, usize)> {
    let b = rest.as_bytes();
    let (ordered, number, len) = match b.first()? {
        b'-' | b'*' | b'+' => (false, 1, 1),
        b'0'..=b'9' => {
            let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
            if digits > 9 || !matches!(b.get(digits), Some(b'.' | b')')) {
                return None;
            }
            let n = b[..digits]
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
            (true, n, digits + 1)
        }
        _ => return None,
    };
    let after = &rest[len..];
    if after.is_empty() {
        return Some((ordered, number, len + 1));
    }
    let spaces = after.bytes().take_while(|&b| b == b' ').count();
    match spaces {
        0 if after.starts_with('\t') => Some((ordered, number, len + 1)),
        0 => None,
        // Past 4 spaces, the rest is indented content: one space belongs to the marker.
        5.. => Some((ordered, number, len + 1)),
        n if n == after.len() => Some((ordered, number, len + 1)),
        n => Some((ordered, number, len + n)),
    }
}

/// A table's delimiter row (`|---|:--:|`): each column's alignment.
pub(super) fn delimiter_row(line: &str) -> Option<Vec<Align>> {
    let trimmed = line.trim();
    if !trimmed.contains('-') || !(trimmed.contains('|') || trimmed.contains(':')) {
        return None;
    }
    let cols = cells(trimmed);
    if cols.len() > MAX_COLUMNS {
        return None;
    }
    cols.into_iter()
        .map(|c| {
            let c = c.trim();
            let (left, right) = (c.starts_with(':'), c.ends_with(':'));
            let dashes = c.trim_matches(':');
            (!dashes.is_empty() && dashes.bytes().all(|b| b == b'-')).then_some(
                match (left, right) {
                    (true, true) => Align::Center,
                    (true, false) => Align::Left,
                    (false, true) => Align::Right,
                    (false, false) => Align::None,
                },
            )
        })
        .collect()
}

/// A table row's cells: split at each `|` not escaped, without the outer pipes.
pub(super) fn cells(line: &str) -> Vec<&str> {
    let mut line = line.trim();
    line = line.strip_prefix('|').unwrap_or(line);
    if line.ends_with('|') && !line.ends_with("\\|") {
        line = &line[..line.len() - 1];
    }
    let mut out = Vec::new();
    let mut start = 0;
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'|' => {
                out.push(&line[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&line[start..]);
    out
}

/// Whether `lines[i]` starts a table: a row with a pipe, then a delimiter row of as many
/// columns.
pub(super) fn table_start(lines: &[&str], i: usize) -> Option<Vec<Align>> {
    let head = lines[i];
    if !head.contains('|') {
        return None;
    }
    let align = delimiter_row(lines.get(i + 1)?)?;
    (cells(head).len() == align.len()).then_some(align)
}

/// Whether a line (not blank) starts a block other than a paragraph, so it ends one. (A
/// numbered item does only from 1: "…in\n2024. That year…" stays one paragraph.)
pub(super) fn interrupts(rest: &str, depth: usize) -> bool {
    let item = || list_marker(rest).is_some_and(|(ordered, n, _)| !ordered || n == 1);
    fence(rest).is_some()
        || heading(rest).is_some()
        || rule(rest)
        || (depth < MAX_DEPTH && (rest.starts_with('>') || item()))
}
