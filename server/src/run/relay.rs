//! Relaying an opened stream (a model step's, or an agent turn's) to the session's
//! subscribers: deltas windowed, the text saved on a timer (never per delta), a stall
//! noticed, and the step's end as a [`Step`].
use super::saver::Save;
use super::{End, RunTask};
use crate::llm::limits;
use crate::llm::tool_calls::AssembledCall;
use crate::llm::{ProviderError, StreamItem};
use crate::wake::WhenWoken;
use app::wire::{Delta, Event, RetryClass, FAST_TEXT_BYTES};
use futures::StreamExt;
use std::time::Duration;
use tokio::time::Instant;

/// The window while text comes faster than it is read, in windows: a third as many events
/// (each a task on a page's main thread, bench B10), drawn as often as the page draws such
/// text anyway (`DRAW_FAST_EVERY_MS`).
const FAST_WINDOWS: u32 = 3;
/// The longest a delta is ever held.
const MAX_DELTA_GAP: Duration = Duration::from_secs(1);

/// The least time from a delta that held `sent` bytes to the next: the window, or
/// [`FAST_WINDOWS`] of it after a delta of more than [`FAST_TEXT_BYTES`].
fn delta_gap(window: Duration, sent: usize) -> Duration {
    if sent > FAST_TEXT_BYTES {
        window
            .saturating_mul(FAST_WINDOWS)
            .min(MAX_DELTA_GAP.max(window))
    } else {
        window
    }
}

/// How one model step ended.
pub(super) enum Step {
    /// The step is complete; these are the tool calls it asked for (none: the turn is done).
    Asked(Vec<AssembledCall>),
    /// The run ends here.
    Ended(End),
}

impl RunTask {
    /// Relays an opened stream to the session's subscribers: at most one delta per
    /// `delta_window` (the first at once; text heard sooner waits in `Live::held`, at most
    /// that long; [`delta_gap`] when text comes faster than it is read), so a provider
    /// streaming a token a millisecond costs every subscriber, the log and each page one
    /// event a window, not one a token. `idle`: the longest it may send nothing.
    pub(super) async fn relay(
        &mut self,
        mut stream: crate::llm::DeltaStream,
        head: Vec<StreamItem>,
        step: u32,
        idle: Duration,
    ) -> Step {
        let cfg = &self.ctx.cfg;
        let (save_every, max_reply) = (cfg.save_every, cfg.max_reply_bytes);
        let window = cfg.delta_window;
        let mut head = head.into_iter();
        let mut last_save = Instant::now();
        let mut unsaved = false;
        let mut asked = Vec::new();
        // When the last delta went out, and the timer that sends the held text (armed only
        // while some is held).
        let mut sent_at: Option<Instant> = None;
        let mut gap = window;
        let send_held = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(send_held);
        let mut holding = false;
        // One timer for the stall check, moved on only when it fires (not one per delta), and
        // polled only when it fires (not on each delta's wake-up).
        let mut heard = Instant::now();
        let mut stall = WhenWoken::new(tokio::time::sleep(idle));
        loop {
            let item = match head.next() {
                Some(item) => Some(Ok(item)),
                None => loop {
                    tokio::select! {
                        biased;
                        item = stream.next() => {
                            heard = Instant::now();
                            break item;
                        }
                        () = &mut send_held, if holding => {
                            holding = false;
                            gap = delta_gap(window, self.send_held(step));
                            sent_at = Some(Instant::now());
                        }
                        () = &mut stall => {
                            let due = heard + idle;
                            if Instant::now() >= due {
                                break Some(Err(ProviderError::Stalled { idle }));
                            }
                            stall.get_mut().reset(due);
                        }
                    }
                },
            };
            match item {
                Some(Ok(StreamItem::Delta(text))) => {
                    {
                        let mut live = self.active.live();
                        let size = live.text.len().saturating_add(live.held.len());
                        if size.saturating_add(text.len()) > max_reply {
                            return Step::Ended(End::Refused {
                                class: RetryClass::ReplyTooLarge,
                                message: format!(
                                    "the reply passed its limit of {max_reply} bytes (MULLIGAN_MAX_REPLY_BYTES); the text so far is kept"
                                ),
                            });
                        }
                        live.held.push_str(&text);
                    }
                    let due = sent_at.map(|at| at + gap);
                    match due.filter(|due| *due > Instant::now()) {
                        // Within the window of the last delta: it goes out when that ends.
                        Some(due) => {
                            if !holding {
                                holding = true;
                                send_held.as_mut().reset(due);
                            }
                        }
                        None => {
                            holding = false;
                            gap = delta_gap(window, self.send_held(step));
                            sent_at = Some(Instant::now());
                        }
                    }
                    unsaved = true;
                }
                Some(Ok(StreamItem::Usage { total_tokens })) => {
                    self.tally.tokens = self
                        .tally
                        .tokens
                        .saturating_add(limits::tokens(total_tokens));
                }
                Some(Ok(StreamItem::ToolCalls(calls))) => asked = calls,
                Some(Ok(StreamItem::AgentCall(call))) => {
                    if let Err(end) = self.agent_call(call, step).await {
                        return Step::Ended(end);
                    }
                }
                Some(Ok(StreamItem::AgentAsk(ask))) => {
                    self.send_held(step);
                    if let Err(end) = self.agent_ask(ask, step).await {
                        return Step::Ended(end);
                    }
                    // Waiting for the operator is not the agent going quiet.
                    heard = Instant::now();
                }
                Some(Ok(StreamItem::Heard)) => {}
                Some(Ok(StreamItem::Done)) | None => {
                    self.send_held(step);
                    if unsaved && !asked.is_empty() {
                        self.save(); // the text before the calls, before they run
                    }
                    return Step::Asked(asked);
                }
                Some(Err(e)) => {
                    // What came before the failure is the reply's, and its subscribers'.
                    self.send_held(step);
                    return Step::Ended(End::Failed(e));
                }
            }
            // The save goes to the context's saver (batched with every other run's): a busy
            // database delays the stored copy, never the deltas.
            if unsaved && last_save.elapsed() >= save_every {
                self.save();
                last_save = Instant::now();
                unsaved = false;
            }
        }
    }

    /// Sends the held text as the reply's next delta (nothing if none is held); how many
    /// bytes it held.
    pub(super) fn send_held(&self, step: u32) -> usize {
        let (text, seq) = {
            let mut live = self.active.live();
            if live.held.is_empty() {
                return 0;
            }
            let text = std::mem::take(&mut live.held);
            live.text.push_str(&text);
            live.seq += 1;
            (text, live.seq)
        };
        let sent = text.len();
        self.publish(Event::Delta(Delta {
            run_id: self.run.id.clone(),
            message_id: self.reply.id.clone(),
            seq,
            text,
            step,
        }));
        sent
    }

    /// Hands the reply's text so far to the saver.
    fn save(&self) {
        let (text, seq) = {
            let live = self.active.live();
            (live.text.clone(), live.seq)
        };
        self.ctx.saver.save(Save {
            message_id: self.reply.id.to_string(),
            text,
            seq,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_faster_than_it_is_read_goes_out_a_third_as_often() {
        let window = Duration::from_millis(33);
        assert_eq!(delta_gap(window, 0), window);
        assert_eq!(delta_gap(window, FAST_TEXT_BYTES), window);
        assert_eq!(
            delta_gap(window, FAST_TEXT_BYTES + 1),
            Duration::from_millis(99)
        );
        // No window, none held; a long window is not made longer than a second.
        assert_eq!(delta_gap(Duration::ZERO, 10_000), Duration::ZERO);
        assert_eq!(
            delta_gap(Duration::from_millis(500), 10_000),
            Duration::from_secs(1)
        );
        assert_eq!(
            delta_gap(Duration::from_secs(1), 10_000),
            Duration::from_secs(1)
        );
    }
}
