//! A streaming reply's deltas, gathered and applied once a frame (a hidden tab: by a timer),
//! each reply's run of them in one update.
use super::Chat;
use crate::wire::Delta;
use leptos::prelude::*;

impl Chat {
    /// Keeps a delta for the next frame: a reply streaming a delta a millisecond is updated
    /// (and drawn, see `prose`) once a frame, not once a delta. A hidden tab gets no frames:
    /// a timer applies them there.
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
                request_animation_frame(flush);
                set_timeout(flush, std::time::Duration::from_millis(50));
            }
        }
        #[cfg(not(feature = "hydrate"))]
        self.apply_deltas(&[d]);
    }

    /// Applies the deltas gathered so far.
    pub fn flush_deltas(&self) {
        let gathered = self.gathered.try_update_value(std::mem::take);
        if let Some(ds) = gathered.filter(|ds| !ds.is_empty()) {
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
