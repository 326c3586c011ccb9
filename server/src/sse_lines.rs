//! The SSE wire format, read: a body's bytes in, events (type, data, last id) out, as the HTML
//! standard's event-stream rules read them, in buffers reused from one event to the next (no
//! allocation or copy per event) and bounded: an event past the cap fails the read as soon as
//! its bytes arrive, whether or not a newline ever comes. Providers' streams are read with it,
//! and the CLI reads the server's own ([`owned_events`]).
use futures::{Stream, StreamExt};
use std::collections::VecDeque;

/// One event, borrowed from the reader's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// Its type (`message` when the event named none).
    pub name: &'a str,
    /// Its `data:` lines, joined by `\n`.
    pub data: &'a str,
    /// The stream's last event id so far (`id:`; empty when none was sent).
    pub id: &'a str,
}

/// Why a body could not be read as events.
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    /// One event (the bytes since the last blank line) passed this many bytes.
    TooLarge(usize),
    /// A line is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::TooLarge(max) => write!(f, "an event or line longer than {max} bytes"),
            Malformed::NotUtf8 => write!(f, "a line that is not UTF-8"),
        }
    }
}

/// Reads events out of a body's chunks, one chunk at a time.
pub struct SseLines {
    /// Bytes of the line not yet ended.
    partial: Vec<u8>,
    /// The event type buffer (empty: `message`).
    event: String,
    /// The data buffer: each `data:` line's value followed by `\n`.
    data: String,
    /// The last event id buffer (kept from one event to the next).
    id: String,
    /// Bytes of the current event so far (line ends not counted).
    size: usize,
    max: usize,
    /// The last line ended with `\r`: a `\n` first in the next chunk belongs to it.
    after_cr: bool,
    /// The body's first line is still to come (a byte-order mark opening it is skipped).
    at_start: bool,
}

impl SseLines {
    /// A reader whose events may be at most `max` bytes.
    pub fn new(max: usize) -> SseLines {
        SseLines {
            partial: Vec::new(),
            event: String::new(),
            data: String::new(),
            id: String::new(),
            size: 0,
            max,
            after_cr: false,
            at_start: true,
        }
    }

    /// Reads `chunk`, calling `on` for each event it completes, in order, until `on` answers
    /// `false` (the caller has read enough: the rest is left unread).
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        mut on: impl FnMut(SseEvent<'_>) -> bool,
    ) -> Result<(), Malformed> {
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
        on: &mut impl FnMut(SseEvent<'_>) -> bool,
    ) -> Result<bool, Malformed> {
        // A byte-order mark may open the body: it is part of the first line.
        let line = match std::mem::take(&mut self.at_start) {
            true => line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line),
            false => line,
        };
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
            // An id with a NUL in it is ignored, as the standard says.
            "id" if !value.contains('\0') => {
                self.id.clear();
                self.id.push_str(value);
            }
            _ => {} // `retry` and unknown fields: nothing a reader here needs
        }
        Ok(true)
    }

    /// A blank line: hands over the event, if it has data, and starts the next one.
    fn dispatch(&mut self, on: &mut impl FnMut(SseEvent<'_>) -> bool) -> bool {
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
            on(SseEvent {
                name: event,
                data,
                id: &self.id,
            })
        };
        self.event.clear();
        self.data.clear();
        keep_going
    }
}

/// An event read whole: its type, data and the stream's last id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedEvent {
    pub name: String,
    pub data: String,
    pub id: String,
}

/// The events of an SSE body as owned values, for a reader that keeps them (the CLI). The
/// stream ends with the body; a transport failure or a malformed body is its last item.
pub fn owned_events<B, E>(
    body: impl Stream<Item = Result<B, E>> + Send + 'static,
    max: usize,
) -> impl Stream<Item = Result<OwnedEvent, String>> + Send + 'static
where
    B: AsRef<[u8]> + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let state = (body.boxed(), SseLines::new(max), VecDeque::new(), false);
    futures::stream::unfold(
        state,
        |(mut body, mut lines, mut ready, mut ended)| async move {
            loop {
                if let Some(event) = ready.pop_front() {
                    return Some((event, (body, lines, ready, ended)));
                }
                if ended {
                    return None;
                }
                match body.next().await {
                    None => return None,
                    Some(Err(e)) => {
                        ended = true;
                        ready.push_back(Err(e.to_string()));
                    }
                    Some(Ok(chunk)) => {
                        let read = lines.feed(chunk.as_ref(), |e| {
                            ready.push_back(Ok(OwnedEvent {
                                name: e.name.to_string(),
                                data: e.data.to_string(),
                                id: e.id.to_string(),
                            }));
                            true
                        });
                        if let Err(m) = read {
                            ended = true;
                            ready.push_back(Err(m.to_string()));
                        }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `body` fed in chunks of `size` bytes.
    fn events(body: &[u8], size: usize, max: usize) -> Result<Vec<(String, String)>, Malformed> {
        let mut lines = SseLines::new(max);
        let mut out = Vec::new();
        for chunk in body.chunks(size.max(1)) {
            lines.feed(chunk, |e| {
                out.push((e.name.to_string(), e.data.to_string()));
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
            .feed(b"data: 1\n\ndata: 2\n\ndata: 3\n\n", |e| {
                seen.push(e.data.to_string());
                e.data != "2"
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
        assert!(lines.feed(&[b'a'; 10], |_| true).is_ok());
        assert_eq!(
            lines.feed(&[b'a'; 10], |_| true),
            Err(Malformed::TooLarge(16))
        );
    }

    #[test]
    fn the_last_id_goes_with_each_event_until_a_new_one() {
        let mut lines = SseLines::new(1024);
        let mut seen = Vec::new();
        lines
            .feed(
                b"id: 7\ndata: a\n\ndata: b\n\nid: 8\0x\ndata: c\n\nid: 9\ndata: d\n\n",
                |e| {
                    seen.push((e.id.to_string(), e.data.to_string()));
                    true
                },
            )
            .unwrap();
        let want = [("7", "a"), ("7", "b"), ("7", "c"), ("9", "d")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(i, d)| (i.to_string(), d.to_string()))
            .collect();
        assert_eq!(seen, want, "an id with a NUL is ignored; ids carry over");
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
