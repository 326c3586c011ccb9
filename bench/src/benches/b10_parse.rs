//! B10, its native part (issue 37 item 2): the Markdown parser (`app::markdown`) on
//! adversarial replies. Each input is parsed `--b10-parse-runs` times in this process (no
//! server, no browser) and the median time is printed with the input's size; each parse's
//! output is checked (a URL ends before its parentheses, marker runs stay text as written,
//! nested and long replies keep all their spans), so a wrong parse is a correctness failure.
use crate::report::{median, ms, Table};
use crate::{Opts, R};
use app::markdown::{parse, Block, Inline};
use std::time::Instant;

/// Issue 37's target for each adversarial parse, natively on this machine.
const TARGET_MS: f64 = 50.0;
/// The longest reply (`MULLIGAN_MAX_REPLY_BYTES`' default), the size of the long inputs.
const MIB: usize = 1 << 20;

/// One adversarial reply and how its parse must look.
struct Case {
    name: String,
    text: String,
    check: Check,
}

/// What a parse must be, or how it is not.
type Check = Box<dyn Fn(&[Block]) -> R<()>>;

pub fn run(opts: &Opts, t: &mut Table) -> R<()> {
    // `--smoke`: the same shapes at a twentieth of their size.
    let scale = if opts.smoke { 20 } else { 1 };
    for case in cases(scale) {
        let mut times = Vec::new();
        let mut blocks = Vec::new();
        for _ in 0..opts.b10_parse_runs.max(1) {
            let started = Instant::now();
            let parsed = parse(&case.text);
            times.push(ms(started.elapsed()));
            // (The previous parse is dropped after the clock stopped.)
            blocks = parsed;
        }
        (case.check)(&blocks).map_err(|e| format!("{}: {e}", case.name))?;
        let took = median(times);
        t.row(
            "B10 parse",
            &format!("{} ({})", case.name, size(case.text.len())),
            String::new(),
            format!("{took:.2} ms"),
            String::new(),
            "≤ 50 ms",
            Some(took <= TARGET_MS),
        );
    }
    Ok(())
}

fn size(bytes: usize) -> String {
    if bytes >= MIB {
        format!("{:.2} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{:.1} KB", bytes as f64 / 1000.0)
    }
}

/// The adversarial replies, each `1/scale` of its full size.
fn cases(scale: usize) -> Vec<Case> {
    let n = |full: usize| full / scale;
    let mut cases = Vec::new();
    let mut add = |name: String, text: String, check: Check| cases.push(Case { name, text, check });

    // A bare URL and what follows it: the link ends where the address does.
    for (tail, count) in [(")", n(100_000)), (").", n(50_000))] {
        let rest = tail.repeat(count);
        let want = vec![Block::Paragraph(vec![link("http://a"), text(&rest)])];
        add(
            format!("`http://a` then `{tail}` × {count}"),
            format!("http://a{rest}"),
            expect(want),
        );
    }

    // Runs and repeats of one marker, after a word (else a run of `*`, `_` or `` ` `` alone
    // is a rule or a code fence and no inline rule sees it): all of it stays text.
    let m = n(50_000);
    for (what, s, count) in [
        ("`*`", "*".repeat(m), m),
        ("`_`", "_".repeat(m), m),
        ("`[`", "[".repeat(m), m),
        ("`` ` ``", "`".repeat(m), m),
        ("`**a *a `", "**a *a ".repeat(m / 2), m / 2),
        ("`[` then `](`", format!("[{}", "](".repeat(m)), m),
        ("`[](`", "[](".repeat(m), m),
        ("`[a](b `", "[a](b ".repeat(m), m),
    ] {
        let whole = format!("x {s}");
        let want = vec![Block::Paragraph(vec![text(whole.trim_end())])];
        add(format!("{what} × {count}"), whole, expect(want));
    }

    // Quotes and lists 8 deep on each line of 1 MiB: every line's spans reach the innermost
    // level.
    let line = format!("{}*a* [b](https://c.d) e\n", "> - ".repeat(4));
    let lines = n(MIB.div_ceil(line.len()));
    add(
        format!("8 levels of quotes and lists × {lines} lines"),
        line.repeat(lines),
        counts(lines, lines, 0, 0),
    );
    let group: String = (0..8)
        .map(|d| format!("{}- item **{d}** [l](https://x.y)\n", "  ".repeat(d)))
        .collect();
    let groups = n(MIB.div_ceil(group.len()));
    add(
        format!("lists 8 deep by indent × {groups}"),
        group.repeat(groups),
        counts(groups * 8, 0, groups * 8, 0),
    );

    // A 1 MiB reply of one line, of realistic spans.
    let unit = "Some **bold**, *em*, `code`, [a link](https://x.y/z) and https://e.org/a_(b). ";
    let units = n(MIB.div_ceil(unit.len()));
    add(
        "one long line".into(),
        unit.repeat(units),
        counts(units * 2, units, units, units),
    );

    // A 1 MiB reply of 50,000 short lines of every kind of block: it parses as its cycle of
    // lines, parsed alone, repeated.
    let cycle = [
        "# Heading **bold** x",
        "Some *em* and `code`",
        "line two of it, yes.",
        "- item [l](https://x)",
        "  - sub https://a.b/c",
        "",
        "> quote **b** and it",
        "> - a quoted item xx",
        "",
        "| a | b | c | d | e |",
        "|---|---|:-:|---|--:|",
        "| 1 | **2** | 3 | 4 |",
        "",
        "```rust",
        "fn main() { x(); }",
        "```",
    ]
    .map(|l| format!("{l:<20}\n"))
    .concat();
    let cycles = n(50_000) / 16;
    let one = parse(&cycle);
    add(
        format!("{} short lines", cycles * 16),
        cycle.repeat(cycles),
        Box::new(move |blocks| {
            let want = one.len() * cycles;
            if blocks.len() != want || blocks.chunks(one.len()).any(|c| c != one.as_slice()) {
                return Err(format!(
                    "{} blocks, not the cycle's {} repeated {cycles} times",
                    blocks.len(),
                    one.len()
                ));
            }
            Ok(())
        }),
    );
    cases
}

fn text(s: &str) -> Inline {
    Inline::Text(s.to_string())
}

fn link(url: &str) -> Inline {
    Inline::Link {
        href: url.into(),
        text: vec![text(url)],
    }
}

fn expect(want: Vec<Block>) -> Check {
    Box::new(move |got| {
        if got == want.as_slice() {
            return Ok(());
        }
        let show = |b: &[Block]| format!("{b:?}").chars().take(200).collect::<String>();
        Err(format!("parsed as {}…, not {}…", show(got), show(&want)))
    })
}

/// A check of how many links, emphasis, strong and code spans the tree holds.
fn counts(links: usize, em: usize, strong: usize, code: usize) -> Check {
    Box::new(move |blocks| {
        let mut c = [0; 4];
        for b in blocks {
            count_block(b, &mut c);
        }
        if c != [links, em, strong, code] {
            return Err(format!(
                "links · em · strong · code {c:?}, not {:?}",
                [links, em, strong, code]
            ));
        }
        Ok(())
    })
}

fn count_block(b: &Block, c: &mut [usize; 4]) {
    match b {
        Block::Paragraph(s) | Block::Heading(_, s) => s.iter().for_each(|i| count_inline(i, c)),
        Block::List { items, .. } => items.iter().flatten().for_each(|b| count_block(b, c)),
        Block::Quote(bs) => bs.iter().for_each(|b| count_block(b, c)),
        Block::Table { head, rows, .. } => head
            .iter()
            .chain(rows.iter().flatten())
            .flatten()
            .for_each(|i| count_inline(i, c)),
        Block::Code { .. } | Block::Rule => {}
    }
}

fn count_inline(i: &Inline, c: &mut [usize; 4]) {
    let inner = match i {
        Inline::Text(_) => return,
        Inline::Code(_) => {
            c[3] += 1;
            return;
        }
        Inline::Link { text, .. } => {
            c[0] += 1;
            text
        }
        Inline::Em(s) => {
            c[1] += 1;
            s
        }
        Inline::Strong(s) => {
            c[2] += 1;
            s
        }
    };
    inner.iter().for_each(|i| count_inline(i, c));
}
