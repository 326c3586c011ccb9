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
    let (lines, ranges, blocks) = parse_lines(text);
    // Each line is a slice of `text`: its place in it is where it starts.
    let at = |line: &str| line.as_ptr() as usize - text.as_ptr() as usize;
    ranges
        .into_iter()
        .zip(blocks)
        .map(|(r, b)| {
            let last = lines[r.end - 1];
            (&text[at(lines[r.start])..at(last) + last.len()], b)
        })
        .collect()
}

/// `text`'s lines (never none: an empty text is one empty line), its blocks, and the lines
/// each block was parsed from.
fn parse_lines(text: &str) -> (Vec<&str>, Vec<Range<usize>>, Vec<Block>) {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut ranges = Vec::new();
    let mut scratch: [Vec<&str>; MAX_DEPTH] = Default::default();
    let blocks = blocks(&lines, 0, &mut scratch, Some(&mut ranges));
    (lines, ranges, blocks)
}

/// The blocks of `lines` (at `depth`), and into `ranges` (when asked) the lines each was
/// parsed from. `scratch` holds a list of lines per deeper level, reused for each quote's and
/// list item's lines at that level: nested blocks take no allocation per item but their own.
///
/// Linear in the lines' length at each level: each line is looked at a bounded number of
/// times by the block it is in (whether it starts, goes on or ends a block), and is handed
/// once, as a slice, to the quote or list item it belongs to one level deeper; at most
/// `MAX_DEPTH` levels deep.
fn blocks<'a>(
    lines: &[&'a str],
    depth: usize,
    scratch: &mut [Vec<&'a str>],
    mut ranges: Option<&mut Vec<Range<usize>>>,
) -> Vec<Block> {
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
        } else if let Some((inner, deeper)) = scratch
            .split_first_mut()
            .filter(|_| depth < MAX_DEPTH && rest.starts_with('>'))
        {
            inner.clear();
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
            Block::Quote(blocks(inner, depth + 1, deeper, None))
        } else if let Some((marker, (item, deeper))) = list_marker(rest)
            .filter(|_| depth < MAX_DEPTH)
            .zip(scratch.split_first_mut())
        {
            let (list, next) = list(lines, i, ind, marker, depth, item, deeper);
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
            // (A paragraph of one line is parsed where it is, not copied.)
            let mut text = std::borrow::Cow::Borrowed(rest.trim_end());
            i += 1;
            while i < lines.len() && !blank(lines[i]) {
                let rest = indent(lines[i]).1;
                if interrupts(rest, depth) || table_start(lines, i).is_some() {
                    break;
                }
                let text = text.to_mut();
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
        if let Some(ranges) = ranges.as_mut() {
            ranges.push(start..end);
        }
        push(&mut out, block);
    }
    out
}

/// `v.push(x)`, the first element allocated alone: most quotes, list items and spans hold
/// one block or span, and a vector grown by `push` would take room for four.
fn push<T>(v: &mut Vec<T>, x: T) {
    if v.capacity() == 0 {
        v.reserve_exact(1);
    }
    v.push(x);
}

/// The list starting at `lines[first]` (its marker at column `ind`): the list and the index
/// of the line after it. Each item's lines are gathered in `item` (`deeper`: the lists of
/// the levels below).
///
/// Linear: each line is looked at a bounded number of times (a run of blank lines once,
/// whether the item goes on past it or not), and goes to one item.
fn list<'a>(
    lines: &[&'a str],
    first: usize,
    ind: usize,
    (ordered, start, _): (bool, u32, usize),
    depth: usize,
    item: &mut Vec<&'a str>,
    deeper: &mut [Vec<&'a str>],
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
        item.clear();
        item.push(rest.get(width..).unwrap_or(""));
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
        push(&mut items, blocks(item, depth + 1, deeper, None));
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

mod inline;
mod lines;
mod stream;
#[cfg(test)]
mod tests;

pub use inline::{inlines, safe_href};
use lines::*;
pub use stream::{Stream, Update};
