//! The Markdown parser's tests: blocks, inlines, links and hostile input.
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

mod adversarial;
