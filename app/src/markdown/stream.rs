//! A streaming reply's blocks, parsed as the text grows: a block that no later text can
//! change is frozen (parsed once, never again), and each update parses only the open tail
//! after the last frozen block. Frozen blocks followed by the open ones are always exactly
//! [`super::parse`] of the whole text.
use super::{parse_lines, Block};

/// What has been frozen of one growing text.
#[derive(Debug, Default)]
pub struct Stream {
    /// The text the frozen blocks were parsed from (it ends at a line's start): an update
    /// whose text does not start with it is another text, parsed afresh.
    frozen_text: String,
    /// How many blocks are frozen.
    frozen: usize,
    /// The length of the last text taken.
    seen: usize,
}

/// One update's result.
#[derive(Debug, PartialEq)]
pub struct Update {
    /// The text was not the last one grown: every earlier block is gone, and `frozen` starts
    /// from the first block.
    pub reset: bool,
    /// Blocks frozen by this update, in order, after the ones frozen before.
    pub frozen: Vec<Block>,
    /// The blocks after the frozen ones: the text's end may still change them.
    pub open: Vec<Block>,
}

impl Stream {
    /// How many blocks are frozen so far.
    pub fn frozen(&self) -> usize {
        self.frozen
    }

    /// The length of the last text taken (a text of another length is surely another).
    pub fn seen(&self) -> usize {
        self.seen
    }

    /// Takes the text as it is now (usually the last one with more at its end) and parses
    /// what is not frozen yet: its cost is that of the open tail, not of the whole text.
    pub fn update(&mut self, text: &str) -> Update {
        self.seen = text.len();
        let reset = !text.starts_with(self.frozen_text.as_str());
        if reset {
            self.frozen_text.clear();
            self.frozen = 0;
        }
        let tail = &text[self.frozen_text.len()..];
        let (lines, ranges, mut blocks) = parse_lines(tail);
        // Every line but the last is complete (a `\n` follows it); the last may still grow.
        let last = lines.len() - 1;
        // A block decides where it ends by looking at most at the two lines where the next
        // block starts (a paragraph asks whether those lines start a table). Once both are
        // complete lines, nothing appended can move that end or change the block.
        let done = ranges
            .windows(2)
            .take_while(|w| w[1].start + 1 < last)
            .count();
        if let Some(next) = ranges.get(done).filter(|_| done > 0) {
            let at = lines[next.start].as_ptr() as usize - tail.as_ptr() as usize;
            self.frozen_text.push_str(&tail[..at]);
            self.frozen += done;
        }
        let open = blocks.split_off(done);
        Update {
            reset,
            frozen: blocks,
            open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    /// Feeds `text` to a stream in the pieces `cuts` makes (byte offsets, on char boundaries)
    /// and checks after every piece that frozen + open is the parse of the text so far, and
    /// that a frozen block is never taken back.
    fn streams_as_parsed(text: &str, cuts: impl IntoIterator<Item = usize>) {
        let mut stream = Stream::default();
        let mut shown: Vec<Block> = Vec::new();
        let mut ends: Vec<usize> = cuts.into_iter().filter(|&c| c < text.len()).collect();
        ends.push(text.len());
        for end in ends {
            let now = &text[..end];
            let u = stream.update(now);
            assert!(!u.reset, "a grown text reset the stream at {end}: {now:?}");
            shown.extend(u.frozen);
            assert_eq!(shown.len(), stream.frozen());
            let mut all = shown.clone();
            all.extend(u.open);
            assert_eq!(all, parse(now), "at byte {end} of {text:?}");
        }
    }

    fn every_size(text: &str) {
        for piece in [1, 2, 3, 5, 8, 13] {
            streams_as_parsed(text, (piece..text.len()).step_by(piece));
        }
    }

    const SAMPLES: &[&str] = &[
        "# Title\n\nA paragraph with **strong** and `code` and [a link](https://x.y/z).\n\nNext.\n",
        "one\ntwo\n\n\nthree\n\n- a\n- b\n  - c\n  - d\n\n  more of b\n- e\n\nafter",
        "a | b\n|---|:-:|\n| 1 | 2 |\n| 3 | 4 |\ntext\n\npara\nh | i\n|-|-|\n|x|y|\n",
        "```rust\nfn main() {\n    println!(\"*not em*\");\n}\n```\nafter the fence\n\n~~~\nx\n~~~",
        "> quoted\n> - in a list\n>   more\nlazy\n\n> again\n\n---\n\n1. one\n2. two\n\n3) other\n",
        "para\n# heading interrupts\n- list interrupts\n> quote interrupts\n```\ncode\n```\n",
        "- a\n\n\n  b\n\n\nc\n- d\n\n    indented code-ish\n\n* e\n+ f\n10. ten\n",
        "text\r\nwith\r\n\r\ncrlf\r\n- item\r\n",
        "**bold across\nlines** and *em\n\nbroken* and `code\nspan`",
        "http://a.b/c)) and <https://x> [](https://y)\n\n|a|\n|-|\n",
    ];

    #[test]
    fn frozen_and_open_blocks_are_the_parse_for_every_way_of_cutting() {
        for text in SAMPLES {
            every_size(text);
        }
    }

    #[test]
    fn a_models_reply_freezes_its_blocks_as_it_goes() {
        let text = fake_reply(6000);
        every_size(&text);
        let mut stream = Stream::default();
        let u = stream.update(&text);
        // Only the last block or two stay open.
        assert!(u.open.len() <= 2, "{} open", u.open.len());
        assert!(u.frozen.len() > 20);
    }

    #[test]
    fn another_text_starts_afresh() {
        let mut stream = Stream::default();
        stream.update("# one\n\npara\n\n- x\n- y\n\nend");
        assert!(stream.frozen() > 0);
        let u = stream.update("# two\n\nother");
        assert!(u.reset);
        let mut all = u.frozen;
        all.extend(u.open);
        assert_eq!(all, parse("# two\n\nother"));
    }

    #[test]
    fn random_markdown_streams_as_it_parses() {
        // A small generator over the tokens that start, end and continue blocks.
        const TOKENS: &[&str] = &[
            "a",
            "b ",
            "\n",
            "\n",
            "\n\n",
            "  ",
            "    ",
            "- ",
            "* ",
            "1. ",
            "2) ",
            "> ",
            "# ",
            "```",
            "~~~",
            "---",
            "|",
            "|-|",
            ":-",
            "**",
            "*",
            "`",
            "[",
            "](https://x)",
            "\r\n",
            "\t",
            "é",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..400 {
            let len = 5 + next() % 60;
            let text: String = (0..len)
                .map(|_| TOKENS[(next() % TOKENS.len() as u64) as usize])
                .collect();
            let bounds: Vec<usize> = (1..text.len())
                .filter(|&i| text.is_char_boundary(i))
                .collect();
            streams_as_parsed(&text, bounds.iter().copied());
            let step = 2 + (next() % 5) as usize;
            streams_as_parsed(&text, bounds.iter().copied().step_by(step));
        }
    }

    /// A reply shaped like the bench's (headings, paragraphs with spans, nested lists, code).
    fn fake_reply(bytes: usize) -> String {
        let mut text = String::new();
        let mut k = 0;
        while text.len() < bytes {
            k += 1;
            text.push_str(&format!(
                "## Step {k}\n\nThe handler for **request {k}** reads `config` and calls \
                 [docs](https://example.com/{k}).\n\n- parse it\n  - reject big bodies\n  \
                 - keep fields\n- send it\n\n```rust\nfn step_{k}() -> u32 {{\n    {k}\n}}\n```\n\n"
            ));
        }
        text
    }
}
