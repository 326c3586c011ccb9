//! The SSE wire format of a provider's body: bytes in, `(event type, data)` out, as the HTML
//! standard's event-stream rules read them, in buffers reused from one event to the next (no
//! allocation or copy per event) and bounded: an event past the cap fails the read as soon as
//! its bytes arrive, whether or not a newline ever comes.

/// Why a body could not be read as events.
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    /// One event (the bytes since the last blank line) passed this many bytes.
    TooLarge(usize),
    /// A line is not UTF-8.
    NotUtf8,
}

/// Reads events out of a body's chunks, one chunk at a time.
pub struct SseLines {
    /// Bytes of the line not yet ended.
    partial: Vec<u8>,
    /// The event type buffer (empty: `message`).
    event: String,
    /// The data buffer: each `data:` line's value followed by `\n`.
    data: String,
    /// Bytes of the current event so far (line ends not counted).
    size: usize,
    max: usize,
    /// The last line ended with `\r`: a `\n` first in the next chunk belongs to it.
    after_cr: bool,
    /// The body's first bytes are still to come (a byte-order mark there is skipped).
    at_start: bool,
}

impl SseLines {
    /// A reader whose events may be at most `max` bytes.
    pub fn new(max: usize) -> SseLines {
        SseLines {
            partial: Vec::new(),
            event: String::new(),
            data: String::new(),
            size: 0,
            max,
            after_cr: false,
            at_start: true,
        }
    }

    /// Reads `chunk`, calling `on(event_type, data)` for each event it completes, in order,
    /// until `on` answers `false` (the caller has read enough: the rest is left unread).
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        mut on: impl FnMut(&str, &str) -> bool,
    ) -> Result<(), Malformed> {
        if self.at_start && !chunk.is_empty() {
            const BOM: &[u8] = "\u{feff}".as_bytes();
            let have = self.partial.len() + chunk.len();
            if have < BOM.len() && BOM.starts_with(&[&self.partial[..], chunk].concat()) {
                self.partial.extend_from_slice(chunk);
                return Ok(()); // maybe the start of a mark: wait for more
            }
            self.at_start = false;
            let mut head = std::mem::take(&mut self.partial);
            head.extend_from_slice(chunk);
            let rest = head.strip_prefix(BOM).unwrap_or(&head).to_vec();
            return self.feed(&rest, on);
        }
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (line, rest) = chunk.split_at(end);
            chunk = match rest {
                [b'\r', b'\n', rest @ ..] => rest,
                [b'\r'] => {
                    self.after_cr = true;
                    &[]
                }
                [_, rest @ ..] => rest,
                [] => &[],
            };
            let keep_going = if self.partial.is_empty() {
                self.line(line, &mut on)?
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                let keep_going = self.line(&whole, &mut on);
                whole.clear();
                self.partial = whole; // its capacity serves the next partial line
                keep_going?
            };
            if !keep_going {
                return Ok(());
            }
        }
        self.partial.extend_from_slice(chunk);
        self.check(self.partial.len())
    }

    /// Fails once the current event, with `more` bytes not yet counted, passes the cap.
    fn check(&self, more: usize) -> Result<(), Malformed> {
        if self.size.saturating_add(more) > self.max {
            Err(Malformed::TooLarge(self.max))
        } else {
            Ok(())
        }
    }

    /// Interprets one line; answers whether to read on.
    fn line(
        &mut self,
        line: &[u8],
        on: &mut impl FnMut(&str, &str) -> bool,
    ) -> Result<bool, Malformed> {
        if line.is_empty() {
            return Ok(self.dispatch(on));
        }
        self.check(line.len())?;
        self.size += line.len();
        let line = std::str::from_utf8(line).map_err(|_| Malformed::NotUtf8)?;
        let (field, value) = match line.split_once(':') {
            Some(("", _)) => return Ok(true), // a comment
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {} // `id`, `retry` and unknown fields: nothing a provider's reply needs
        }
        Ok(true)
    }

    /// A blank line: hands over the event, if it has data, and starts the next one.
    fn dispatch(&mut self, on: &mut impl FnMut(&str, &str) -> bool) -> bool {
        self.size = 0;
        let keep_going = if self.data.is_empty() {
            true
        } else {
            let data = self.data.strip_suffix('\n').unwrap_or(&self.data);
            let event = if self.event.is_empty() {
                "message"
            } else {
                &self.event
            };
            on(event, data)
        };
        self.event.clear();
        self.data.clear();
        keep_going
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `body` fed in chunks of `size` bytes.
    fn events(body: &[u8], size: usize, max: usize) -> Result<Vec<(String, String)>, Malformed> {
        let mut lines = SseLines::new(max);
        let mut out = Vec::new();
        for chunk in body.chunks(size.max(1)) {
            lines.feed(chunk, |e, d| {
                out.push((e.to_string(), d.to_string()));
                true
            })?;
        }
        Ok(out)
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(e, d)| (e.to_string(), d.to_string()))
            .collect()
    }

    #[test]
    fn events_read_the_same_however_the_body_is_cut() {
        let body = "\u{feff}: a comment\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\n\
                    data: one\ndata:two\ndata\n\n\
                    id: 7\nretry: 10\nevent: x\n\n\
                    event: ping\rdata: é\r\rdata: [DONE]\n\ndata: never ended";
        let want = pairs(&[
            ("message_start", "{\"a\":1}"),
            ("message", "one\ntwo\n"),
            ("ping", "é"),
            ("message", "[DONE]"),
        ]);
        for size in [1, 2, 3, 5, 7, 64, body.len()] {
            assert_eq!(
                events(body.as_bytes(), size, 1024).unwrap(),
                want,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn reading_stops_when_the_caller_has_enough() {
        let mut lines = SseLines::new(1024);
        let mut seen = Vec::new();
        lines
            .feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", |_, d| {
                seen.push(d.to_string());
                d != "2"
            })
            .unwrap();
        assert_eq!(seen, ["1", "2"]);
    }

    #[test]
    fn an_event_past_the_cap_fails_with_or_without_a_newline() {
        // At the cap: fine; many small events never add up.
        assert!(events(b"data: 0123456789\n\n", 4, 16).is_ok());
        let many = "data: {\"a\":1}\r\n\r\n".repeat(10_000);
        assert_eq!(events(many.as_bytes(), 100, 16).unwrap().len(), 10_000);
        // Past it, over several lines of one event.
        assert_eq!(
            events(b"data: 0123456789\ndata: x\n\n", 3, 16),
            Err(Malformed::TooLarge(16))
        );
        // A line that never ends, fed in pieces: caught before a newline comes.
        let mut lines = SseLines::new(16);
        assert!(lines.feed(&[b'a'; 10], |_, _| true).is_ok());
        assert_eq!(
            lines.feed(&[b'a'; 10], |_, _| true),
            Err(Malformed::TooLarge(16))
        );
    }

    #[test]
    fn a_line_that_is_not_utf8_is_malformed() {
        assert_eq!(
            events(b"data: \xff\xfe\n\n", 64, 1024),
            Err(Malformed::NotUtf8)
        );
        // A character cut between chunks is whole once its line ends.
        assert_eq!(
            events("data: é\n\n".as_bytes(), 1, 1024).unwrap(),
            pairs(&[("message", "é")])
        );
    }
}
