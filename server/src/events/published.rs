//! One published event: its SSE frame, rendered once, and the row the log stores for it.
use crate::store::LoggedEvent;
use app::wire::Event;
use std::sync::Arc;

use super::bytes_frame;

/// One published event: its SSE frame, rendered once (the JSON data is a slice of it, not
/// a second copy), and the fields the log needs.
#[derive(Debug)]
pub struct Published {
    pub id: i64,
    pub name: &'static str,
    /// Shared with the session's channel (no copy per event).
    pub(super) session_id: Arc<str>,
    pub frame: bytes_frame::Frame,
    /// Where the `data:` JSON is in `frame`.
    pub(super) data: std::ops::Range<usize>,
    /// A delta already written to the log (set and read by the writer task only).
    pub(super) stored: std::sync::atomic::AtomicBool,
}

impl Published {
    /// The row the log stores for this event.
    pub(super) fn logged(&self) -> LoggedEvent {
        LoggedEvent {
            id: self.id,
            session_id: app::wire::SessionId::new(self.session_id.as_ref()),
            name: self.name,
            data: String::from_utf8_lossy(&self.frame[self.data.clone()]).into_owned(),
        }
    }
}

/// An event's data JSON, written into `buf` (the same JSON as [`Event::data_json`]).
pub(super) fn write_data(buf: &mut Vec<u8>, event: &Event) {
    let r = match event {
        Event::Message(m) => serde_json::to_writer(&mut *buf, m),
        Event::Delta(d) => serde_json::to_writer(&mut *buf, d),
        Event::Run(r) => serde_json::to_writer(&mut *buf, r),
        Event::Attempt(a) => serde_json::to_writer(&mut *buf, a),
        Event::Session(s) => serde_json::to_writer(&mut *buf, s),
        Event::ToolCall(t) => serde_json::to_writer(&mut *buf, t),
    };
    r.expect("wire types always serialize");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::channels::{deliver, Inner};
    use app::wire::Delta;

    #[test]
    fn a_frame_carries_the_data_once_and_the_log_reads_it_back() {
        let mut inner = Inner::new(1, i64::MAX);
        let delta = Event::Delta(Delta {
            run_id: app::wire::RunId::new("r"),
            message_id: app::wire::MessageId::new("m"),
            seq: 3,
            text: "a\"b\n".into(),
            step: 1,
        });
        let frame = bytes_frame::render_with(7, "delta", 8, |b| write_data(b, &delta));
        let p = deliver(
            &mut inner,
            (7, &app::wire::SessionId::new("s"), "delta"),
            frame,
            false,
            None,
        );
        let want = delta.data_json();
        assert_eq!(
            &p.frame[..],
            format!("id: 7\nevent: delta\ndata: {want}\n\n").as_bytes()
        );
        let row = p.logged();
        assert_eq!(
            (row.id, row.session_id.as_str(), row.name),
            (7, "s", "delta")
        );
        assert_eq!(row.data, want);
    }
}
