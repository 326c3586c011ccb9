//! A streaming reply's deltas, gathered and applied at most once in [`draw_gap`] (a
//! hidden tab: by a timer), each reply's run of them in one update.
use super::Chat;
use crate::wire::{Delta, FAST_TEXT_BYTES};
use leptos::prelude::*;

/// The least time between two draws of a streaming reply while its text comes at reading
/// pace (a few words a draw), in ms: each draw lays out, paints and commits the page again,
/// a few ms of the browser's time whatever it adds (bench B10), so 20 draws a second.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub const DRAW_EVERY_MS: i64 = 50;
/// The least time between two draws while text comes faster than anyone reads (the last
/// draw added more than [`FAST_TEXT_BYTES`]): half as many draws, each adding twice as
/// much, show the same and cost the browser about half (bench B10).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub const DRAW_FAST_EVERY_MS: i64 = 100;

/// The least time (ms) from a draw to the next, by how much text that draw added.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub fn draw_gap(last_draw_bytes: usize) -> i64 {
    if last_draw_bytes > FAST_TEXT_BYTES {
        DRAW_FAST_EVERY_MS
    } else {
        DRAW_EVERY_MS
    }
}

impl Chat {
    /// Keeps a delta for the next draw: a reply streaming a delta a millisecond is updated
    /// (and drawn, see `prose`) in the first frame at least [`draw_gap`] after the last
    /// draw, not once a delta; the first delta after a pause is drawn in the next frame. A
    /// hidden tab gets no frames: a timer applies them there.
    pub(super) fn gather(&self, d: Delta) {
        #[cfg(feature = "hydrate")]
        {
            let first = self.gathered.try_update_value(|g| {
                g.push(d);
                g.len() == 1
            });
            if first == Some(true) {
                let chat = *self;
                let flush = move || chat.flush_deltas();
                let drawn_at = self.drawn_at.get_value();
                let since = crate::clock::now_ms().saturating_sub(drawn_at);
                let gap = draw_gap(self.drawn_bytes.get_value());
                let wait = gap.saturating_sub(since).max(0);
                if wait == 0 {
                    let _ = request_animation_frame(flush);
                } else {
                    let wait = std::time::Duration::from_millis(wait.unsigned_abs());
                    let _ = set_timeout(move || drop(request_animation_frame(flush)), wait);
                }
                // Only if no frame came (a hidden tab): after a frame's draw the deltas
                // gathered since then wait for their own frame, or the page would draw
                // between frames as well, about three times as often (bench B10).
                let fallback = std::time::Duration::from_millis((wait + 50).unsigned_abs());
                let undrawn = move || chat.drawn_at.get_value() == drawn_at;
                let _ = set_timeout(
                    move || {
                        if undrawn() {
                            chat.flush_deltas()
                        }
                    },
                    fallback,
                );
            }
        }
        #[cfg(not(feature = "hydrate"))]
        self.apply_deltas(&[d]);
    }

    /// Applies the deltas gathered so far.
    pub fn flush_deltas(&self) {
        let gathered = self.gathered.try_update_value(std::mem::take);
        if let Some(ds) = gathered.filter(|ds| !ds.is_empty()) {
            self.drawn_at.set_value(crate::clock::now_ms());
            let bytes = ds
                .iter()
                .map(|d| d.text.len())
                .fold(0, usize::saturating_add);
            self.drawn_bytes.set_value(bytes);
            self.apply_deltas(&ds);
        }
    }

    /// Appends deltas to their replies: each run of one reply's deltas in one update (from
    /// the end: a delta is nearly always for the last message, so its cost does not grow
    /// with the session). A delta already applied (its `seq` not past the reply's) is not.
    pub(super) fn apply_deltas(&self, ds: &[Delta]) {
        for run in ds.chunk_by(|a, b| a.message_id == b.message_id) {
            let slot = self.messages.with_untracked(|ms| {
                ms.iter()
                    .rev()
                    .find(|(id, _)| *id == run[0].message_id)
                    .map(|(_, s)| *s)
            });
            if let Some(s) = slot {
                s.update(|m| {
                    for d in run {
                        if d.seq > m.delta_seq.unwrap_or(0) {
                            m.content.push_str(&d.text);
                            m.delta_seq = Some(d.seq);
                        }
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text at reading pace is drawn 20 times a second; text faster than that, 10 times.
    #[test]
    fn a_fast_reply_is_drawn_half_as_often() {
        assert_eq!(draw_gap(0), DRAW_EVERY_MS);
        assert_eq!(draw_gap(12), DRAW_EVERY_MS);
        assert_eq!(draw_gap(FAST_TEXT_BYTES), DRAW_EVERY_MS);
        assert_eq!(draw_gap(FAST_TEXT_BYTES + 1), DRAW_FAST_EVERY_MS);
        assert_eq!(draw_gap(usize::MAX), DRAW_FAST_EVERY_MS);
    }
}
