//! Inline spans of one block's text: code, strong, emphasis and links (only safe ones).
use super::*;

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

    /// Linear in the text, times the nesting depth: each byte is stepped over once (a run of
    /// one marker at once), every rule's scan is linear over all openers (see each), and a
    /// span found is skipped whole, its inside parsed once one level deeper (the insides of
    /// one level's spans do not overlap), at most `MAX_DEPTH` levels deep.
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
                        span => push(&mut out, span),
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
    ///
    /// Linear: a scan ends at its closer (and the text up to it is skipped) or at the end,
    /// and then no later run of that length scans again (at most `MAX_TICKS` such scans).
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
    ///
    /// Linear: as for code, a scan for a closer ends at it (the span is skipped) or at the
    /// end, and then no later opener of that kind scans again: a closer missing after one
    /// opener is missing after every later one (whether a run closes does not depend on
    /// where the span opened).
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
    /// text as written, the text with it.
    ///
    /// Linear: the scans for the `]` and for the url both stop at the next `[` (the url's at
    /// most `MAX_URL` bytes on), so no text is scanned for two openers; with no `]` or `[`
    /// left, no later `[` scans at all.
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
    ///
    /// Linear: the scan stops at the next `<` (or `MAX_URL` bytes on), where the next
    /// autolink's would start.
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
        _ => push(out, Inline::Text(t.to_string())),
    }
}

fn run_len(b: &[u8], i: usize, c: u8) -> usize {
    b[i..].iter().take_while(|&&x| x == c).count()
}

/// A bare `http://` or `https://` address starting a word, as a link (without the
/// punctuation after it).
///
/// Linear: the word is scanned once to its end and trimmed once from its end ([`url_end`]);
/// what is trimmed off it holds no `h`, so no later call scans it again.
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
    let url = &rest[..url_end(&rest[..len])];
    (url.len() > scheme).then(|| (link_to(url), i + url.len()))
}

/// Where the address in `word` ends: before the punctuation that ends a sentence or a span
/// (`.`, `,`, `:`, `;`, `!`, `?`, `'`, `*`, `_`), and before each closing parenthesis the
/// address did not open (`(see http://a/b)` ends at `b`, `http://a/b_(c)` keeps its own).
///
/// Linear: the parentheses are counted once, then one pass backwards from the end trims the
/// punctuation and the unmatched `)`, a trimmed `)` taken off the count. (Counting them
/// again for each `)` trimmed made `http://a` and 100,000 `)` take seconds.)
fn url_end(word: &str) -> usize {
    let b = word.as_bytes();
    let opened = b.iter().filter(|&&c| c == b'(').count();
    let mut closed = b.iter().filter(|&&c| c == b')').count();
    let mut end = b.len();
    loop {
        while end > 0
            && matches!(
                b[end - 1],
                b'.' | b',' | b':' | b';' | b'!' | b'?' | b'\'' | b'*' | b'_'
            )
        {
            end -= 1;
        }
        // A closing parenthesis stays when the address opened one.
        if end > 0 && b[end - 1] == b')' && opened < closed {
            closed -= 1;
            end -= 1;
        } else {
            return end;
        }
    }
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
