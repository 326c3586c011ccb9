//! One entry of a session's window of recent events: the shared frame while the event may
//! still be in the live ring, then, for a delta, only its fields (its frame is rendered again,
//! byte for byte the same, when a resume asks for it).
use super::bytes_frame::{self, Frame};
use super::published::{write_data, Published};
use app::wire::{Delta, Event, MessageId, RunId};
use std::sync::Arc;

pub enum Recent {
    Shared(Arc<Published>),
    Delta(Kept),
}

/// A delta kept by its fields: about a third of its frame and `Published` together.
#[derive(Clone)]
pub struct Kept {
    id: i64,
    /// Its run's and reply's ids, shared by the run's kept deltas.
    run: Arc<RunOf>,
    seq: u64,
    step: u32,
    text: Box<str>,
    /// Already in the store's log.
    stored: bool,
}

#[derive(PartialEq, Eq)]
pub struct RunOf {
    run_id: Box<str>,
    message_id: Box<str>,
}

impl Recent {
    pub fn id(&self) -> i64 {
        match self {
            Recent::Shared(p) => p.id,
            Recent::Delta(k) => k.id,
        }
    }

    pub fn is_delta(&self) -> bool {
        match self {
            Recent::Shared(p) => p.name == "delta",
            Recent::Delta(_) => true,
        }
    }

    /// Its SSE frame (rendered again for a kept delta).
    pub fn frame(&self) -> Frame {
        match self {
            Recent::Shared(p) => p.frame.clone(),
            Recent::Delta(k) => k.render().0,
        }
    }

    /// As a published event of `session_id` (for the log).
    pub fn published(&self, session_id: &Arc<str>) -> Arc<Published> {
        match self {
            Recent::Shared(p) => p.clone(),
            Recent::Delta(k) => {
                let (frame, data) = k.render();
                Arc::new(Published {
                    id: k.id,
                    name: "delta",
                    session_id: session_id.clone(),
                    frame,
                    data,
                    stored: k.stored.into(),
                })
            }
        }
    }

    /// A shallow copy for a subscriber's backlog (a kept delta's text is copied).
    pub fn copy(&self) -> Recent {
        match self {
            Recent::Shared(p) => Recent::Shared(p.clone()),
            Recent::Delta(k) => Recent::Delta(k.clone()),
        }
    }

    /// Keeps a shared delta by its fields, reusing `last_run` when it is the same run's.
    /// Anything else (or a frame that does not read back as a delta) stays as it is.
    pub fn compact(&mut self, last_run: &mut Option<Arc<RunOf>>) {
        let Recent::Shared(p) = self else { return };
        if p.name != "delta" {
            return;
        }
        let Ok(d) = serde_json::from_slice::<DeltaFields>(&p.frame[p.data.clone()]) else {
            return;
        };
        let run = match last_run {
            Some(r) if *r.run_id == *d.run_id && *r.message_id == *d.message_id => r.clone(),
            _ => {
                let r = Arc::new(RunOf {
                    run_id: d.run_id.into(),
                    message_id: d.message_id.into(),
                });
                *last_run = Some(r.clone());
                r
            }
        };
        *self = Recent::Delta(Kept {
            id: p.id,
            run,
            seq: d.seq,
            step: d.step,
            text: d.text.into(),
            stored: p.stored.load(std::sync::atomic::Ordering::Relaxed),
        });
    }
}

/// A delta's data read back from its frame, borrowing what needs no unescaping.
#[derive(serde::Deserialize)]
struct DeltaFields<'a> {
    #[serde(borrow)]
    run_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    message_id: std::borrow::Cow<'a, str>,
    seq: u64,
    #[serde(borrow)]
    text: std::borrow::Cow<'a, str>,
    #[serde(default)]
    step: u32,
}

impl Kept {
    fn render(&self) -> (Frame, std::ops::Range<usize>) {
        let delta = Event::Delta(Delta {
            run_id: RunId::new(self.run.run_id.to_string()),
            message_id: MessageId::new(self.run.message_id.to_string()),
            seq: self.seq,
            text: self.text.to_string(),
            step: self.step,
        });
        bytes_frame::render_with(self.id, "delta", self.text.len() + 128, |buf| {
            write_data(buf, &delta)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(id: i64, event: &Event) -> Recent {
        let (frame, data) =
            bytes_frame::render_with(id, event.name(), 64, |buf| write_data(buf, event));
        Recent::Shared(Arc::new(Published {
            id,
            name: event.name(),
            session_id: Arc::from("s"),
            frame,
            data,
            stored: Default::default(),
        }))
    }

    fn delta(run: &str, seq: u64, text: &str) -> Event {
        Event::Delta(Delta {
            run_id: RunId::new(run),
            message_id: MessageId::new(format!("m_{run}")),
            seq,
            text: text.into(),
            step: 2,
        })
    }

    #[test]
    fn a_kept_delta_renders_the_same_frame_and_log_row() {
        let mut last_run = None;
        for (id, text) in [
            (7, "plain"),
            (8, "quote \" newline \n tab \t é 🦀"),
            (9, ""),
        ] {
            let mut e = shared(id, &delta("r_a", id as u64, text));
            let (frame, row) = match &e {
                Recent::Shared(p) => (p.frame.clone(), p.logged()),
                Recent::Delta(_) => unreachable!(),
            };
            e.compact(&mut last_run);
            assert!(matches!(e, Recent::Delta(_)), "the delta was not compacted");
            assert_eq!((e.id(), e.is_delta()), (id, true));
            assert_eq!(e.frame(), frame);
            let again = e.published(&Arc::from("s")).logged();
            assert_eq!(
                (again.id, again.name, again.data, again.session_id),
                (row.id, row.name, row.data, row.session_id)
            );
        }
    }

    #[test]
    fn a_runs_kept_deltas_share_its_ids_and_other_events_stay_whole() {
        let mut last_run = None;
        let mut a1 = shared(1, &delta("r_a", 1, "x"));
        let mut a2 = shared(2, &delta("r_a", 2, "y"));
        let mut b1 = shared(3, &delta("r_b", 1, "z"));
        for e in [&mut a1, &mut a2, &mut b1] {
            e.compact(&mut last_run);
        }
        let run = |e: &Recent| match e {
            Recent::Delta(k) => k.run.clone(),
            Recent::Shared(_) => panic!("not compacted"),
        };
        assert!(Arc::ptr_eq(&run(&a1), &run(&a2)));
        assert!(!Arc::ptr_eq(&run(&a2), &run(&b1)));

        let run = Event::Run(
            serde_json::from_value(serde_json::json!({
                "id": "r_a", "session_id": "s", "anchor_message_id": "m", "status": "running",
                "kind": "prompt", "attempt": 1, "tier1_attempts": 1, "created_at": 0
            }))
            .expect("a run event"),
        );
        let mut other = shared(4, &run);
        other.compact(&mut last_run);
        assert!(matches!(other, Recent::Shared(_)));
        assert!(!other.is_delta());
    }
}
