//! Agent replies' Markdown, parsed to a small tree: paragraphs, headings, lists, code blocks,
//! tables, quotes and rules; inline code, strong, emphasis and links. Pure: no HTML is ever
//! produced or interpreted (HTML in the text stays text), and only http, https and mailto
//! links are links. Any input parses, partial (streaming) input included, in time linear in
//! its length times the nesting depth (which is bounded).
use std::ops::Range;

/// How deep quotes and lists nest (and strong, emphasis and links inside each other); deeper
/// markers stay text.
const MAX_DEPTH: usize = 8;
/// The longest link destination looked for, in bytes.
const MAX_URL: usize = 2048;
/// A wider table stays text (cells are kept per row and column).
const MAX_COLUMNS: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Paragraph(Vec<Inline>),
    /// Level 1 to 6, and the heading's text.
    Heading(u8, Vec<Inline>),
    /// A list: numbered from `start` when ordered; each item its own blocks.
    List {
        ordered: bool,
        start: u32,
        items: Vec<Vec<Block>>,
    },
    /// A fenced code block, with the word after its fence; unclosed, it runs to the end.
    Code {
        lang: String,
        text: String,
    },
    Table {
        align: Vec<Align>,
        head: Vec<Vec<Inline>>,
        rows: Vec<Vec<Vec<Inline>>>,
    },
    Quote(Vec<Block>),
    Rule,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Align {
    None,
    Left,
    Center,
    Right,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Inline {
    /// Text as written (line breaks kept as `\n`).
    Text(String),
    Code(String),
    Strong(Vec<Inline>),
    Em(Vec<Inline>),
    /// A link whose `href` is http, https or mailto (anything else stays text).
    Link {
        href: String,
        text: Vec<Inline>,
    },
}

/// Parses Markdown text (complete or still streaming) into blocks.
pub fn parse(text: &str) -> Vec<Block> {
    parse_sourced(text).into_iter().map(|(_, b)| b).collect()
}

/// Parses Markdown text into blocks, each with the text it was parsed from (so a view can
/// tell the blocks a change left as they were from the ones it changed).
pub fn parse_sourced(text: &str) -> Vec<(&str, Block)> {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    // Each line is a slice of `text`: its place in it is where it starts.
    let at = |line: &str| line.as_ptr() as usize - text.as_ptr() as usize;
    sourced(&lines, 0)
        .into_iter()
        .map(|(r, b)| {
            let last = lines[r.end - 1];
            (&text[at(lines[r.start])..at(last) + last.len()], b)
        })
        .collect()
}

/// The columns of a line's leading whitespace (a tab counts 4) and the rest of the line.
fn indent(line: &str) -> (usize, &str) {
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
fn dedent(line: &str, cols: usize) -> &str {
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

fn blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// An opening code fence: its character, its length and the info word after it.
fn fence(rest: &str) -> Option<(u8, usize, &str)> {
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

fn closes_fence(line: &str, c: u8, n: usize) -> bool {
    let rest = indent(line).1.trim_end();
    rest.len() >= n && rest.bytes().all(|b| b == c)
}

fn heading(rest: &str) -> Option<(u8, &str)> {
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

fn rule(rest: &str) -> bool {
    let mut marks = rest.bytes().filter(|b| !matches!(b, b' ' | b'\t'));
    let Some(c) = marks.next() else { return false };
    matches!(c, b'-' | b'*' | b'_') && marks.clone().all(|b| b == c) && marks.count() >= 2
}

/// A list marker: ordered, its number, and the columns it takes with the spaces after it.
fn list_marker(rest: &str) -> Option<(bool, u32, usize)> {
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
fn delimiter_row(line: &str) -> Option<Vec<Align>> {
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
fn cells(line: &str) -> Vec<&str> {
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
fn table_start(lines: &[&str], i: usize) -> Option<Vec<Align>> {
    let head = lines[i];
    if !head.contains('|') {
        return None;
    }
    let align = delimiter_row(lines.get(i + 1)?)?;
    (cells(head).len() == align.len()).then_some(align)
}

/// Whether a line (not blank) starts a block other than a paragraph, so it ends one. (A
/// numbered item does only from 1: "…in\n2024. That year…" stays one paragraph.)
fn interrupts(rest: &str, depth: usize) -> bool {
    let item = || list_marker(rest).is_some_and(|(ordered, n, _)| !ordered || n == 1);
    fence(rest).is_some()
        || heading(rest).is_some()
        || rule(rest)
        || (depth < MAX_DEPTH && (rest.starts_with('>') || item()))
}

fn blocks(lines: &[&str], depth: usize) -> Vec<Block> {
    sourced(lines, depth).into_iter().map(|(_, b)| b).collect()
}

/// The blocks of `lines`, each with the lines it was parsed from.
fn sourced(lines: &[&str], depth: usize) -> Vec<(Range<usize>, Block)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if blank(line) {
            i += 1;
            continue;
        }
        let start = i;
        let (ind, rest) = indent(line);
        let block = if let Some((c, n, lang)) = fence(rest) {
            let mut text = String::new();
            i += 1;
            while i < lines.len() && !closes_fence(lines[i], c, n) {
                text.push_str(dedent(lines[i], ind));
                text.push('\n');
                i += 1;
            }
            text.pop();
            // Past the closing fence (if there is one yet).
            i = (i + 1).min(lines.len());
            Block::Code {
                lang: lang.to_string(),
                text,
            }
        } else if let Some((level, text)) = heading(rest) {
            i += 1;
            Block::Heading(level, inlines(text))
        } else if rule(rest) {
            i += 1;
            Block::Rule
        } else if depth < MAX_DEPTH && rest.starts_with('>') {
            let mut inner = Vec::new();
            while i < lines.len() && !blank(lines[i]) {
                let rest = indent(lines[i]).1;
                match rest.strip_prefix('>') {
                    Some(q) => inner.push(q.strip_prefix(' ').unwrap_or(q)),
                    // A paragraph's lazy continuation.
                    None if !interrupts(rest, depth) => inner.push(rest),
                    None => break,
                }
                i += 1;
            }
            Block::Quote(blocks(&inner, depth + 1))
        } else if let Some(marker) = list_marker(rest).filter(|_| depth < MAX_DEPTH) {
            let (list, next) = list(lines, i, ind, marker, depth);
            i = next;
            list
        } else if let Some(align) = table_start(lines, i) {
            let head = cells(line).into_iter().map(|c| inlines(c.trim()));
            let head: Vec<_> = head.collect();
            i += 2;
            let mut rows = Vec::new();
            while i < lines.len() && !blank(lines[i]) && lines[i].contains('|') {
                let mut row: Vec<_> = cells(lines[i])
                    .into_iter()
                    .take(align.len())
                    .map(|c| inlines(c.trim()))
                    .collect();
                row.resize(align.len(), Vec::new());
                rows.push(row);
                i += 1;
            }
            Block::Table { align, head, rows }
        } else {
            let mut text = String::from(rest.trim_end());
            i += 1;
            while i < lines.len() && !blank(lines[i]) {
                let rest = indent(lines[i]).1;
                if interrupts(rest, depth) || table_start(lines, i).is_some() {
                    break;
                }
                text.push('\n');
                text.push_str(rest.trim_end());
                i += 1;
            }
            Block::Paragraph(inlines(&text))
        };
        // (A list may have read blank lines past its end.)
        let end = (start + 1..=i)
            .rev()
            .find(|&e| !blank(lines[e - 1]))
            .unwrap_or(i);
        out.push((start..end, block));
    }
    out
}

/// The list starting at `lines[first]` (its marker at column `ind`): the list and the index
/// of the line after it.
fn list(
    lines: &[&str],
    first: usize,
    ind: usize,
    (ordered, start, _): (bool, u32, usize),
    depth: usize,
) -> (Block, usize) {
    let mut items = Vec::new();
    let mut i = first;
    // Each item: its marker's line, then the lines indented past the marker (or a
    // paragraph's lazy continuation), blank lines among them.
    while i < lines.len() {
        let (at, rest) = indent(lines[i]);
        let Some((o, _, width)) = list_marker(rest) else {
            break;
        };
        if o != ordered || at > ind + 3 || rule(rest) {
            break;
        }
        let content = at + width;
        let mut item = vec![rest.get(width..).unwrap_or("")];
        i += 1;
        while i < lines.len() {
            let line = lines[i];
            if blank(line) {
                // The item goes on past blank lines only if what follows is indented.
                let next = (i..lines.len()).find(|&j| !blank(lines[j]));
                match next {
                    Some(j) if indent(lines[j]).0 > at => {
                        item.extend(std::iter::repeat_n("", j - i));
                        i = j;
                        continue;
                    }
                    Some(j) => {
                        i = j;
                        break;
                    }
                    None => {
                        i = lines.len();
                        break;
                    }
                }
            }
            let (cols, rest) = indent(line);
            if cols > at {
                item.push(dedent(line, content.min(cols)));
            } else if list_marker(rest).is_none()
                && !interrupts(rest, depth)
                && !item.last().is_some_and(|l| blank(l))
            {
                item.push(rest);
            } else {
                break;
            }
            i += 1;
        }
        items.push(blocks(&item, depth + 1));
        // A line that is not this list's next item ends it.
        if i < lines.len() && list_marker(indent(lines[i]).1).is_none() {
            break;
        }
    }
    (
        Block::List {
            ordered,
            start,
            items,
        },
        i,
    )
}

/// Parses a paragraph's (or a cell's, or a heading's) text into inline spans.
pub fn inlines(s: &str) -> Vec<Inline> {
    Spans::new(s, 0, true).parse()
}

/// One inline parse: the text, how deep it is in other spans, whether links may start in it
/// (not inside a link's text), and what was looked for from some point and found nowhere
/// after it, so that no later opener scans again: each scan is linear.
struct Spans<'a> {
    s: &'a str,
    depth: usize,
    links: bool,
    /// Closers found missing: `**` (per marker `*`, `_`), `*`, `***`; backtick run lengths.
    no_strong: [bool; 2],
    no_em: [bool; 2],
    no_triple: [bool; 2],
    no_code: Vec<usize>,
    no_bracket: bool,
}

type Found = Option<(Inline, usize)>;

/// The longest backtick run that opens inline code.
const MAX_TICKS: usize = 16;

impl<'a> Spans<'a> {
    fn new(s: &'a str, depth: usize, links: bool) -> Self {
        Spans {
            s,
            depth,
            links,
            no_strong: [false; 2],
            no_em: [false; 2],
            no_triple: [false; 2],
            no_code: Vec::new(),
            no_bracket: false,
        }
    }

    /// The spans of `range` of this text, one level deeper.
    fn inner(&self, from: usize, to: usize, links: bool) -> Vec<Inline> {
        Spans::new(&self.s[from..to], self.depth + 1, self.links && links).parse()
    }

    fn parse(mut self) -> Vec<Inline> {
        let (s, b) = (self.s, self.s.as_bytes());
        let mut out = Vec::new();
        // Where the text since the last span starts.
        let mut text = 0;
        let mut i = 0;
        let nest = self.depth < MAX_DEPTH;
        while i < b.len() {
            let found = match b[i] {
                b'\\' if b.get(i + 1).is_some_and(u8::is_ascii_punctuation) => {
                    push_text(&mut out, &s[text..i]);
                    text = i + 1;
                    i += 2;
                    continue;
                }
                b'`' => self.code(i),
                b'*' | b'_' if nest => self.emphasis(i),
                b'[' if nest && self.links => self.link(i),
                b'<' if self.links => self.autolink(i),
                b'h' | b'H' if self.links => bare_url(s, i),
                _ => None,
            };
            match found {
                Some((span, end)) => {
                    push_text(&mut out, &s[text..i]);
                    match span {
                        Inline::Text(t) => push_text(&mut out, &t),
                        span => out.push(span),
                    }
                    i = end;
                    text = end;
                }
                None => {
                    // A run of one marker is passed as a whole (`***` is not three tries).
                    let c = b[i];
                    i += 1;
                    if matches!(c, b'`' | b'*' | b'_') {
                        i += run_len(b, i, c);
                    }
                }
            }
        }
        push_text(&mut out, &s[text..]);
        out
    }

    /// `` `code` ``: closed by a run of as many backticks.
    fn code(&mut self, i: usize) -> Found {
        let b = self.s.as_bytes();
        let n = run_len(b, i, b'`');
        if n > MAX_TICKS || self.no_code.contains(&n) {
            return None;
        }
        let mut j = i + n;
        while j < b.len() {
            if b[j] == b'`' {
                let m = run_len(b, j, b'`');
                if m == n {
                    let inner = &self.s[i + n..j];
                    let inner = match inner.strip_prefix(' ').and_then(|t| t.strip_suffix(' ')) {
                        Some(t) if !t.trim().is_empty() => t,
                        _ => inner,
                    };
                    return Some((Inline::Code(inner.replace('\n', " ")), j + n));
                }
                j += m;
            } else {
                j += 1;
            }
        }
        self.no_code.push(n);
        None
    }

    /// Where a run of `c` at least `want` long closes a span opened before `from`: after
    /// something that is not a space, and (for `_`) not inside a word.
    fn closer(&self, from: usize, c: u8, want: usize) -> Option<usize> {
        let (s, b) = (self.s, self.s.as_bytes());
        let mut j = from;
        while j < b.len() {
            if b[j] != c {
                j += 1;
                continue;
            }
            let m = run_len(b, j, c);
            let after_text = s[..j]
                .chars()
                .next_back()
                .is_some_and(|p| !p.is_whitespace());
            let in_word = c == b'_' && s[j + m..].chars().next().is_some_and(word_char);
            if m >= want && after_text && !in_word {
                return Some(j);
            }
            j += m;
        }
        None
    }

    /// `**strong**`, `*em*`, `***both***` (or with `_`, not inside a word).
    fn emphasis(&mut self, i: usize) -> Found {
        let (s, b) = (self.s, self.s.as_bytes());
        let c = b[i];
        let k = usize::from(c == b'_');
        let n = run_len(b, i, c);
        if s[i + n..].chars().next().is_none_or(char::is_whitespace)
            || c == b'_' && s[..i].chars().next_back().is_some_and(word_char)
        {
            return None;
        }
        match n {
            3 if !self.no_triple[k] => match self.closer(i + 3, c, 3) {
                Some(j) => {
                    let inner = self.inner(i + 3, j, true);
                    Some((Inline::Strong(vec![Inline::Em(inner)]), j + 3))
                }
                None => {
                    self.no_triple[k] = true;
                    None
                }
            },
            2 if !self.no_strong[k] => match self.closer(i + 2, c, 2) {
                Some(j) => Some((Inline::Strong(self.inner(i + 2, j, true)), j + 2)),
                None => {
                    self.no_strong[k] = true;
                    None
                }
            },
            1 if !self.no_em[k] => {
                // The first run of one closes; a longer run closes a strong span inside.
                let mut from = i + 1;
                while let Some(j) = self.closer(from, c, 1) {
                    let m = run_len(b, j, c);
                    if m == 1 {
                        return Some((Inline::Em(self.inner(i + 1, j, true)), j + 1));
                    }
                    from = j + m;
                }
                self.no_em[k] = true;
                None
            }
            _ => None,
        }
    }

    /// `[text](url)`: a link when the url is http, https or mailto; another url stays
    /// text as written, the text with it. (Each scan stops at the next `[` or `<`: no
    /// text is scanned for two openers.)
    fn link(&mut self, i: usize) -> Found {
        let (s, b) = (self.s, self.s.as_bytes());
        if self.no_bracket {
            return None;
        }
        // The text ends at the first `]` (a `[` first: this one is not a link).
        let Some(close) = b[i + 1..]
            .iter()
            .position(|&c| c == b']' || c == b'[')
            .map(|p| p + i + 1)
        else {
            self.no_bracket = true;
            return None;
        };
        if b[close] != b']' || b.get(close + 1) != Some(&b'(') {
            return None;
        }
        let open = close + 2;
        // Parentheses inside the url (`…/Rust_(language)`) are kept balanced.
        let mut level = 0usize;
        let mut end = None;
        for (j, &c) in b.iter().enumerate().skip(open).take(MAX_URL) {
            match c {
                b'(' => level += 1,
                b')' if level == 0 => {
                    end = Some(j);
                    break;
                }
                b')' => level -= 1,
                b'\n' | b'[' | b']' => break,
                _ => {}
            }
        }
        let end = end?;
        // A title after the url (`[a](http://x "title")`) is left out.
        let dest = s[open..end].split_whitespace().next().unwrap_or("");
        let url = dest
            .strip_prefix('<')
            .and_then(|u| u.strip_suffix('>'))
            .unwrap_or(dest);
        if !safe_href(url) {
            return Some((Inline::Text(s[i..=end].to_string()), end + 1));
        }
        let text = self.inner(i + 1, close, false);
        let href = url.to_string();
        Some((Inline::Link { href, text }, end + 1))
    }

    /// `<https://…>`: the url inside, as a link.
    fn autolink(&self, i: usize) -> Found {
        let rest = &self.s[i + 1..];
        let end = rest
            .bytes()
            .take(MAX_URL)
            .position(|c| matches!(c, b'>' | b'<') || c.is_ascii_whitespace())?;
        let url = &rest[..end];
        (rest.as_bytes()[end] == b'>' && safe_href(url)).then(|| (link_to(url), i + end + 2))
    }
}

fn link_to(url: &str) -> Inline {
    Inline::Link {
        href: url.to_string(),
        text: vec![Inline::Text(url.to_string())],
    }
}

fn push_text(out: &mut Vec<Inline>, t: &str) {
    if t.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Inline::Text(last)) => last.push_str(t),
        _ => out.push(Inline::Text(t.to_string())),
    }
}

fn run_len(b: &[u8], i: usize, c: u8) -> usize {
    b[i..].iter().take_while(|&&x| x == c).count()
}

/// A bare `http://` or `https://` address starting a word, as a link (without the
/// punctuation after it).
fn bare_url(s: &str, i: usize) -> Found {
    let rest = &s[i..];
    let scheme = ["https://", "http://"]
        .iter()
        .find(|p| starts_with_ignore_case(rest, p))?
        .len();
    if s[..i].chars().next_back().is_some_and(word_char) {
        return None;
    }
    let len = rest
        .find(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '`'))
        .unwrap_or(rest.len());
    let mut url = &rest[..len];
    loop {
        let trimmed = url.trim_end_matches(['.', ',', ':', ';', '!', '?', '\'', '*', '_']);
        // A closing parenthesis stays when the address opened one.
        let trimmed = match trimmed.strip_suffix(')') {
            Some(t) if trimmed.matches('(').count() < trimmed.matches(')').count() => t,
            _ => trimmed,
        };
        if trimmed.len() == url.len() {
            break;
        }
        url = trimmed;
    }
    (url.len() > scheme).then(|| (link_to(url), i + url.len()))
}

/// A letter or digit (any non-ASCII character counts as one: no Unicode tables in the
/// browser bundle for the rare case where it matters).
fn word_char(c: char) -> bool {
    !c.is_ascii() || c.is_ascii_alphanumeric()
}

fn starts_with_ignore_case(s: &str, prefix: &str) -> bool {
    s.get(..prefix.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// Whether a link may point there: http, https and mailto only.
pub fn safe_href(url: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| starts_with_ignore_case(url, p) && url.len() > p.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use Inline::*;

    fn t(s: &str) -> Inline {
        Text(s.into())
    }

    fn p(s: &str) -> Block {
        Block::Paragraph(vec![t(s)])
    }

    #[test]
    fn paragraphs_split_at_blank_lines_and_keep_their_line_breaks() {
        assert_eq!(
            parse("one\ntwo\n\n\nthree"),
            vec![p("one\ntwo"), p("three")]
        );
        assert_eq!(parse(""), vec![]);
        assert_eq!(parse("\n \n"), vec![]);
        assert_eq!(parse("a\r\nb"), vec![p("a\nb")]);
    }

    #[test]
    fn html_stays_text() {
        let md = "<img src=x onerror=alert(1)> <script>alert(1)</script>";
        assert_eq!(parse(md), vec![p(md)]);
        assert_eq!(parse("<b>bold</b>"), vec![p("<b>bold</b>")]);
    }

    #[test]
    fn inline_spans() {
        assert_eq!(
            inlines("a **b** *c* `d` _e_ ***f***"),
            vec![
                t("a "),
                Strong(vec![t("b")]),
                t(" "),
                Em(vec![t("c")]),
                t(" "),
                Code("d".into()),
                t(" "),
                Em(vec![t("e")]),
                t(" "),
                Strong(vec![Em(vec![t("f")])]),
            ]
        );
        assert_eq!(
            inlines("*a **b** c*"),
            vec![Em(vec![t("a "), Strong(vec![t("b")]), t(" c")])]
        );
        assert_eq!(inlines("__init__"), vec![Strong(vec![t("init")])]);
    }

    #[test]
    fn markers_that_open_nothing_stay_text() {
        for s in [
            "snake_case_name",
            "2 * 3 * 4",
            "**unclosed",
            "a * b",
            "`unclosed",
            "*",
            "**",
            "_",
            "\\*not em\\*",
        ] {
            let plain: String = s.replace('\\', "");
            assert_eq!(inlines(s), vec![t(&plain)], "{s}");
        }
    }

    #[test]
    fn code_spans_take_their_text_as_is() {
        assert_eq!(inlines("`a *b* <c>`"), vec![Code("a *b* <c>".into())]);
        assert_eq!(inlines("`` a`b ``"), vec![Code("a`b".into())]);
        assert_eq!(inlines("x `` y"), vec![t("x `` y")]);
    }

    #[test]
    fn links_are_only_http_https_and_mailto() {
        let link = |href: &str, text: &str| Link {
            href: href.into(),
            text: vec![t(text)],
        };
        assert_eq!(
            inlines("see [docs](https://x.org/a_(b)) now"),
            vec![t("see "), link("https://x.org/a_(b)", "docs"), t(" now")]
        );
        assert_eq!(
            inlines("[m](mailto:a@b.c \"title\")"),
            vec![link("mailto:a@b.c", "m")]
        );
        for bad in [
            "[x](javascript:window.__pwned=1)",
            "[x](JavaScript:alert(1))",
            "[x](data:text/html,hi)",
            "[x](/relative)",
            "[x](vbscript:x)",
            "[x]( javascript:alert(1))",
            "[x](https:)",
        ] {
            assert_eq!(inlines(bad), vec![t(bad)], "{bad}");
        }
        assert_eq!(
            inlines("<https://a.b/c> and <javascript:x>"),
            vec![
                link("https://a.b/c", "https://a.b/c"),
                t(" and <javascript:x>")
            ]
        );
        assert_eq!(
            inlines("go to https://a.b/c. Or (http://d.e/f)"),
            vec![
                t("go to "),
                link("https://a.b/c", "https://a.b/c"),
                t(". Or ("),
                link("http://d.e/f", "http://d.e/f"),
                t(")"),
            ]
        );
        assert_eq!(inlines("xhttps://a.b"), vec![t("xhttps://a.b")]);
        assert!(!safe_href("https://"));
    }

    #[test]
    fn a_link_holds_no_link() {
        assert_eq!(
            inlines("[https://a.b](https://c.d)"),
            vec![Link {
                href: "https://c.d".into(),
                text: vec![t("https://a.b")]
            }]
        );
    }

    #[test]
    fn headings_rules_and_quotes() {
        assert_eq!(
            parse("# Title #\n###### six\n####### seven\n#tag"),
            vec![
                Block::Heading(1, vec![t("Title")]),
                Block::Heading(6, vec![t("six")]),
                p("####### seven\n#tag"),
            ]
        );
        assert_eq!(
            parse("a\n\n---\n* * *"),
            vec![p("a"), Block::Rule, Block::Rule]
        );
        assert_eq!(
            parse("> quoted\nlazy\n>\n> - item\n\nafter"),
            vec![
                Block::Quote(vec![
                    p("quoted\nlazy"),
                    Block::List {
                        ordered: false,
                        start: 1,
                        items: vec![vec![p("item")]]
                    }
                ]),
                p("after"),
            ]
        );
    }

    #[test]
    fn lists_nest_and_number() {
        let md = "Steps:\n1. one\n2. two\n   - a\n   - b\n3) three\n\n- x\n\n- y\n  more\nend";
        assert_eq!(
            parse(md),
            vec![
                p("Steps:"),
                Block::List {
                    ordered: true,
                    start: 1,
                    items: vec![
                        vec![p("one")],
                        vec![
                            p("two"),
                            Block::List {
                                ordered: false,
                                start: 1,
                                items: vec![vec![p("a")], vec![p("b")]]
                            }
                        ],
                        vec![p("three")],
                    ]
                },
                Block::List {
                    ordered: false,
                    start: 1,
                    items: vec![vec![p("x")], vec![p("y\nmore\nend")]]
                },
            ]
        );
        // A list that a code block interrupted goes on from its number.
        assert_eq!(
            parse("4. four")[0],
            Block::List {
                ordered: true,
                start: 4,
                items: vec![vec![p("four")]]
            }
        );
        // Only a list's first number breaks a paragraph.
        assert_eq!(parse("in\n2024. That year"), vec![p("in\n2024. That year")]);
        // Two spaces under a numbered item still nest.
        assert!(matches!(
            &parse("1. a\n  - b")[0],
            Block::List { items, .. } if items[0].len() == 2
        ));
    }

    #[test]
    fn code_blocks_keep_their_text_and_run_on_when_unclosed() {
        let code = |lang: &str, text: &str| Block::Code {
            lang: lang.into(),
            text: text.into(),
        };
        assert_eq!(
            parse("```rust title\nfn main() {\n\n    <b>*x*</b>\n}\n```\nafter"),
            vec![code("rust", "fn main() {\n\n    <b>*x*</b>\n}"), p("after")]
        );
        assert_eq!(parse("~~~~\na\n~~~\n~~~~"), vec![code("", "a\n~~~")]);
        // Streaming: the fence is open, so far.
        assert_eq!(parse("```py\nprint(1)\n"), vec![code("py", "print(1)\n")]);
        assert_eq!(parse("```py"), vec![code("py", "")]);
        assert_eq!(parse("- x\n  ```\n  y\n  ```"), {
            vec![Block::List {
                ordered: false,
                start: 1,
                items: vec![vec![p("x"), code("", "y")]],
            }]
        });
    }

    #[test]
    fn tables_need_their_delimiter_row() {
        let md = "| a | b | c |\n|:--|:-:|--:|\n| 1 | `|` x \\| y |\n|2|3|4|5|\nnext";
        let cell = |s: &str| vec![t(s)];
        assert_eq!(
            parse(md),
            vec![
                Block::Table {
                    align: vec![Align::Left, Align::Center, Align::Right],
                    head: vec![cell("a"), cell("b"), cell("c")],
                    rows: vec![
                        // A short row is filled, a long one cut.
                        vec![cell("1"), vec![t("`")], vec![t("` x | y")]],
                        vec![cell("2"), cell("3"), cell("4")],
                    ],
                },
                // A line without a pipe ends the table.
                p("next"),
            ]
        );
        // Streaming: a header alone is a paragraph until its delimiter row comes.
        assert_eq!(parse("| a | b |"), vec![p("| a | b |")]);
        assert_eq!(parse("| a | b |\n|--"), vec![p("| a | b |\n|--")]);
        assert!(matches!(
            parse("text\n| a | b |\n|---|---|")[1],
            Block::Table { .. }
        ));
    }

    #[test]
    fn each_block_comes_with_its_source() {
        let md = "# T\n\npara\ngraph\r\n\n- a\n\n- b\n\n\n```\ncode";
        let sources: Vec<&str> = parse_sourced(md).into_iter().map(|(s, _)| s).collect();
        assert_eq!(sources, ["# T", "para\ngraph", "- a\n\n- b", "```\ncode"]);
    }

    #[test]
    fn every_prefix_of_a_reply_parses() {
        let md = "# T\n\nSome **bold** and [a link](https://x.y).\n\n1. one\n   ```sh\n   ls\n   ```\n2. two\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> q *e*\n\n---\n`x`";
        for (end, _) in md.char_indices() {
            let _ = parse(&md[..end]);
        }
        assert_eq!(parse(md).len(), 7);
    }

    #[test]
    fn hostile_input_is_bounded() {
        // Deep nesting: no stack overflow, and the deepest markers stay text.
        let deep = ">".repeat(10_000) + " x";
        assert!(matches!(parse(&deep)[0], Block::Quote(_)));
        let _ = parse(&"- ".repeat(10_000));
        let _ = inlines(&"*a ".repeat(10_000));
        let _ = inlines(&"[".repeat(10_000));
        // Quadratic shapes finish fast (each would take minutes if it were quadratic).
        let started = std::time::Instant::now();
        for s in [
            "**a ".repeat(50_000),
            "*a ".repeat(50_000),
            "_a ".repeat(50_000),
            "***a ".repeat(50_000),
            "[a](".repeat(50_000),
            "[a](b ".repeat(50_000),
            "<a ".repeat(50_000),
            "`".repeat(16) + &"`a ".repeat(50_000),
            "| a ".repeat(10_000) + "\n" + &"|-".repeat(10_000),
        ] {
            let _ = parse(&s);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
