//! Compaction after a context overflow: drops the oldest turns so the conversation fits the
//! context window, never the current turn (the last operator message and the steps after
//! it), and never a tool call without its result or a result without its call. Pure.
use crate::llm::ChatMessage;

/// A rough token estimate: four characters a token, plus a few for the message frame.
pub fn estimate_tokens(messages: &[ChatMessage]) -> u64 {
    messages
        .iter()
        .map(|m| m.content.chars().count() as u64 / 4 + 4)
        .sum()
}

/// The messages to send after an overflow. With a known window, the newest messages that fit
/// (the anchor always kept); without one, the older half is dropped. `None` when nothing can
/// be dropped.
pub fn compact(messages: &[ChatMessage], window_tokens: Option<u64>) -> Option<Vec<ChatMessage>> {
    // The current turn: from the last operator message on (its steps' calls and results).
    let turn_from = messages.iter().rposition(|m| m.role == "user")?;
    let (earlier, turn) = messages.split_at(turn_from);
    if earlier.is_empty() {
        return None;
    }
    let keep_from = match window_tokens {
        Some(window) => {
            let mut used = estimate_tokens(turn);
            let mut from = earlier.len();
            while from > 0 {
                let cost = estimate_tokens(&earlier[from - 1..from]);
                if used + cost > window {
                    break;
                }
                used += cost;
                from -= 1;
            }
            from.max(1)
        }
        None => earlier.len().div_ceil(2),
    };
    let mut kept: Vec<ChatMessage> = earlier[keep_from..].to_vec();
    // A conversation starts with the operator: drop a leading agent reply, and the results
    // of calls whose asking message was dropped.
    while kept
        .first()
        .is_some_and(|m| m.role == "assistant" || m.role == "tool")
    {
        kept.remove(0);
    }
    kept.extend_from_slice(turn);
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, words: usize) -> ChatMessage {
        ChatMessage::text(role, "word ".repeat(words))
    }

    fn convo(turns: usize) -> Vec<ChatMessage> {
        let mut v = Vec::new();
        for _ in 0..turns {
            v.push(msg("user", 100));
            v.push(msg("assistant", 100));
        }
        v.push(msg("user", 10));
        v
    }

    #[test]
    fn keeps_the_anchor_and_the_newest_turns_that_fit() {
        let all = convo(10);
        let out = compact(&all, Some(700)).unwrap();
        assert_eq!(out.last(), all.last(), "anchor kept");
        assert!(estimate_tokens(&out) <= 700);
        assert!(out.len() < all.len());
        assert_eq!(out[0].role, "user");
    }

    #[test]
    fn without_a_window_the_older_half_goes() {
        let all = convo(4);
        let out = compact(&all, None).unwrap();
        assert!(out.len() <= all.len() / 2 + 1);
        assert_eq!(out.last(), all.last());
    }

    #[test]
    fn tool_calls_stay_paired_with_their_results() {
        let mut all = convo(6);
        let mut asked = msg("assistant", 5);
        asked.tool_calls = vec![crate::llm::ChatToolCall::new("c1", "fs__read", "{}")];
        let mut result = msg("tool", 5);
        result.tool_call_id = Some("c1".into());
        // The current turn: its prompt, a step that asked for a tool, and the result.
        all.extend([asked.clone(), result.clone()]);
        let out = compact(&all, Some(300)).unwrap();
        assert_eq!(
            &out[out.len() - 3..],
            &all[all.len() - 3..],
            "the turn is kept whole"
        );
        // An earlier turn's result never leads the kept conversation without its call.
        let mut earlier = vec![msg("user", 100), msg("assistant", 100)];
        earlier.extend([msg("user", 100), asked, result, msg("assistant", 50)]);
        earlier.extend(convo(1));
        // Whatever the budget: every kept result has the step that asked for it kept before
        // it, and some budget keeps a result while cutting what came before, so the check
        // is not vacuous.
        let mut kept_a_result_after_a_cut = false;
        for budget in 1..=1000 {
            let Some(out) = compact(&earlier, Some(budget)) else {
                continue;
            };
            assert_eq!(out[0].role, "user", "budget {budget}");
            for (i, m) in out.iter().enumerate().filter(|(_, m)| m.role == "tool") {
                let id = m.tool_call_id.as_deref();
                assert!(
                    out[..i]
                        .iter()
                        .any(|a| a.tool_calls.iter().any(|c| Some(c.id.as_str()) == id)),
                    "budget {budget}: a tool result was kept without its call: {out:?}"
                );
                kept_a_result_after_a_cut |= out.len() < earlier.len();
            }
        }
        assert!(kept_a_result_after_a_cut);
    }

    #[test]
    fn a_lone_prompt_cannot_be_compacted() {
        assert!(compact(&[msg("user", 5)], Some(1)).is_none());
        assert!(compact(&[], None).is_none());
    }
}
