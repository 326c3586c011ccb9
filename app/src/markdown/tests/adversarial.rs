//! Issue 37's adversarial replies: each parses as it must, within a deadline that only a
//! rule made quadratic again would miss.
use super::*;

/// Parses `md`, failing if it took more than 2 s. Every rule is linear: each input below
/// parses in milliseconds natively in release (`mulligan-bench --only b10-parse`) and in
/// under 200 ms in a debug build; a rule quadratic again would take far longer (before the
/// bare-URL rule was made linear, `http://a` and 100,000 `)` took 17 s natively in release).
/// So the bound holds on a slow or busy machine and still catches such a regression.
fn parse_in_time(md: &str) -> Vec<Block> {
    let started = std::time::Instant::now();
    let blocks = parse(md);
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "{} bytes ({:?}…) took {took:?}",
        md.len(),
        md.chars().take(24).collect::<String>()
    );
    blocks
}

/// `got == want`, or a failure that shows where they part (not the megabytes of both).
#[track_caller]
fn assert_same(got: &[Block], want: &[Block]) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(g, w)| g == w).count();
    let show = |b: Option<&Block>| format!("{b:?}").chars().take(400).collect::<String>();
    panic!(
        "{} blocks, {} wanted; block {at} is\n{}\nnot\n{}",
        got.len(),
        want.len(),
        show(got.get(at)),
        show(want.get(at))
    );
}

fn url(href: &str) -> Inline {
    Link {
        href: href.into(),
        text: vec![t(href)],
    }
}

#[test]
fn a_bare_url_ends_before_the_punctuation_and_parens_after_it() {
    for (md, href, after) in [
        ("http://a/(b)))", "http://a/(b)", "))"),
        ("http://a((b)))", "http://a((b))", ")"),
        ("http://a).)", "http://a", ").)"),
        ("HTTPS://a.b/c?d=(e)!'", "HTTPS://a.b/c?d=(e)", "!'"),
        ("https://x.y/)*_)", "https://x.y/", ")*_)"),
    ] {
        assert_eq!(inlines(md), vec![url(href), t(after)], "{md}");
    }
    assert_eq!(inlines("http://a)("), vec![url("http://a)(")]);
    assert_eq!(
        inlines("see (http://a/b_(c))._"),
        vec![t("see ("), url("http://a/b_(c)"), t(")._")]
    );
    // Trimmed from the end in one pass, however long the tail.
    for tail in [
        ")".repeat(100_000),
        ").".repeat(50_000),
        "'),".repeat(30_000),
    ] {
        let md = format!("http://a{tail}");
        let want = vec![Block::Paragraph(vec![url("http://a"), t(&tail)])];
        assert_same(&parse_in_time(&md), &want);
    }
    // The parentheses it opened it keeps, the one more after them not.
    let nested = format!("http://a/{}", "(".repeat(50_000));
    let md = format!("({nested}{}", ")".repeat(50_001));
    let want = vec![Block::Paragraph(vec![
        t("("),
        url(&format!("{nested}{}", ")".repeat(50_000))),
        t(")"),
    ])];
    assert_same(&parse_in_time(&md), &want);
}

#[test]
fn long_runs_of_one_marker_stay_text() {
    let n = 50_000;
    for run in [
        "*".repeat(n),
        "_".repeat(n),
        "[".repeat(n),
        "`".repeat(n),
        "**a *a ".repeat(n / 2),
        "_a __a ".repeat(n / 2),
        format!("[{}", "](".repeat(n)),
        "[](".repeat(n),
        "[a](".repeat(n),
        "<a ".repeat(n),
        format!("{} a ", "`".repeat(17)).repeat(n / 20),
    ] {
        // After a word: a run of `*`, `_` or `` ` `` alone is a rule or a code fence.
        let md = format!("x {run}");
        let want = vec![p(md.trim_end())];
        assert_same(&parse_in_time(&md), &want);
    }
    assert_eq!(parse_in_time(&"*".repeat(n)), vec![Block::Rule]);
    assert_eq!(parse_in_time(&"_".repeat(n)), vec![Block::Rule]);
    assert_eq!(
        parse_in_time(&"`".repeat(n)),
        vec![Block::Code {
            lang: String::new(),
            text: String::new()
        }]
    );
}

#[test]
fn quotes_and_lists_nested_8_deep_keep_every_line() {
    let para = Block::Paragraph(vec![
        Em(vec![t("a")]),
        t(" "),
        Link {
            href: "https://c.d".into(),
            text: vec![t("b")],
        },
        t(" e"),
    ]);
    let list = |items: Vec<Vec<Block>>| Block::List {
        ordered: false,
        start: 1,
        items,
    };
    // One line: a quote holding a list holding a quote…, 8 levels; the 9th stays text.
    let mut one = para.clone();
    for _ in 0..3 {
        one = Block::Quote(vec![list(vec![vec![one]])]);
    }
    let lines = 20_000;
    let md = format!("{}*a* [b](https://c.d) e\n", "> - ".repeat(4)).repeat(lines);
    let want = vec![Block::Quote(vec![list(vec![vec![one]; lines])])];
    assert_same(&parse_in_time(&md), &want);
    let mut deepest = parse(&format!("{}x", "> - ".repeat(5)));
    for _ in 0..4 {
        let [Block::Quote(q)] = &deepest[..] else {
            panic!("{deepest:?}")
        };
        let [Block::List { items, .. }] = &q[..] else {
            panic!("{q:?}")
        };
        deepest = items[0].clone();
    }
    assert_eq!(deepest, vec![p("> - x")]);

    // Lists nested by indent, 8 deep, 5,000 times over.
    let group: String = (0..8)
        .map(|d| format!("{}- item {d}\n", "  ".repeat(d)))
        .collect();
    let mut item = vec![p("item 7")];
    for d in (0..7).rev() {
        item = vec![p(&format!("item {d}")), list(vec![item])];
    }
    let groups = 5_000;
    assert_same(
        &parse_in_time(&group.repeat(groups)),
        &[list(vec![item; groups])],
    );
}

#[test]
fn a_reply_of_1_mib_parses_whole() {
    // One line of every kind of span.
    let unit = "Some **bold**, *em*, `code`, [a link](https://x.y/z) and https://e.org/a_(b). ";
    let units = (1_usize << 20).div_ceil(unit.len());
    let spans = [
        t("Some "),
        Strong(vec![t("bold")]),
        t(", "),
        Em(vec![t("em")]),
        t(", "),
        Code("code".into()),
        t(", "),
        Link {
            href: "https://x.y/z".into(),
            text: vec![t("a link")],
        },
        t(" and "),
        url("https://e.org/a_(b)"),
        t(". "),
    ];
    let Block::Paragraph(got) = &parse_in_time(&unit.repeat(units))[0] else {
        panic!("not a paragraph")
    };
    // Each unit's last text runs on into the next one's first.
    assert_eq!(got.len(), units * (spans.len() - 1) + 1);
    assert_eq!(got[..spans.len() - 1], spans[..spans.len() - 1]);
    assert_eq!(got[got.len() - 2], spans[spans.len() - 2]);
    assert_eq!(got[spans.len() - 1], t(". Some "));
    assert_eq!(got[got.len() - 1], t("."));

    // 50,000 short lines of every kind of block: the blocks of 16 lines, 3,125 times.
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
    let one = parse(&cycle);
    assert_eq!(one.len(), 6);
    let md = cycle.repeat(50_000 / 16);
    assert!(md.len() >= 1 << 20);
    let want: Vec<Block> = (0..50_000 / 16).flat_map(|_| one.clone()).collect();
    assert_same(&parse_in_time(&md), &want);
}
