//! Tool calls assembled from a model step's streamed fragments (CONTRACT §6): the
//! OpenAI-compatible `delta.tool_calls[]` (with the variants servers send in the wild) and
//! Anthropic's `tool_use` blocks. Pure and bounded: a provider cannot make it hold more than
//! [`MAX_CALLS`] calls or [`MAX_ARGUMENT_BYTES`] of arguments.
//!
//! Not yet wired into the providers: the agent-turn step loop (issue 16) reads it.
use super::ProviderError;
use std::collections::HashMap;

/// The most tool calls one model step may ask for.
pub const MAX_CALLS: usize = 128;
/// The most argument text (all calls of one step together).
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// A tool call as the model asked for it: its id (generated when the server sent none), the
/// tool's name as the model spelled it, and the arguments' JSON text as streamed (`{}` when
/// none). The arguments are parsed when the call is executed, where malformed JSON becomes an
/// error result the model sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssembledCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One OpenAI-compatible `delta.tool_calls[]` entry (or a legacy `delta.function_call`,
/// which has no index and no id).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fragment<'a> {
    pub index: Option<u32>,
    pub id: Option<&'a str>,
    pub name: Option<&'a str>,
    pub arguments: Option<&'a str>,
}

/// Assembles OpenAI-compatible fragments. Tolerates: the whole call in one chunk; `id` and
/// `name` repeated in every chunk; index 0 reused for parallel calls told apart by `id`; no
/// index at all; a legacy `function_call` beside (ignored) or instead of `tool_calls`.
#[derive(Debug, Default)]
pub struct OpenAiCalls {
    calls: Vec<Partial>,
    /// The call each index continues.
    current: HashMap<u32, usize>,
    bytes: usize,
    /// `tool_calls` were seen: a legacy `function_call` in the same stream is a duplicate.
    saw_tool_calls: bool,
}

#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

impl OpenAiCalls {
    /// Takes one `tool_calls[]` entry.
    pub fn absorb(&mut self, f: Fragment<'_>) -> Result<(), ProviderError> {
        self.saw_tool_calls = true;
        self.take(f)
    }

    /// Takes a legacy `function_call` (no index, no id): ignored once `tool_calls` were seen.
    pub fn absorb_legacy(&mut self, f: Fragment<'_>) -> Result<(), ProviderError> {
        if self.saw_tool_calls {
            return Ok(());
        }
        self.take(Fragment {
            index: Some(u32::MAX), // its own slot, never a real index
            id: None,
            ..f
        })
    }

    fn take(&mut self, f: Fragment<'_>) -> Result<(), ProviderError> {
        let index = f.index.unwrap_or(0);
        let id = f.id.filter(|s| !s.is_empty());
        let at = match (self.current.get(&index).copied(), id) {
            // A different id on an index in use: a new call (index reuse).
            (Some(at), Some(id)) if !self.calls[at].id.is_empty() && self.calls[at].id != id => {
                self.start(index)?
            }
            (Some(at), _) => at,
            (None, _) => self.start(index)?,
        };
        let call = &mut self.calls[at];
        if let Some(id) = id {
            if call.id.is_empty() {
                call.id = id.to_string();
            }
        }
        if let Some(name) = f.name.filter(|s| !s.is_empty()) {
            // Repeated in every chunk by some servers: the same name again adds nothing.
            if call.name != name {
                self.bytes = self.bytes.saturating_add(name.len());
                call.name.push_str(name);
            }
        }
        if let Some(args) = f.arguments {
            self.bytes = self.bytes.saturating_add(args.len());
            call.arguments.push_str(args);
        }
        if self.bytes > MAX_ARGUMENT_BYTES {
            return Err(too_large());
        }
        Ok(())
    }

    fn start(&mut self, index: u32) -> Result<usize, ProviderError> {
        if self.calls.len() >= MAX_CALLS {
            return Err(ProviderError::Protocol {
                message: format!("more than {MAX_CALLS} tool calls in one step"),
            });
        }
        self.calls.push(Partial::default());
        let at = self.calls.len() - 1;
        self.current.insert(index, at);
        Ok(at)
    }

    /// Whether any call was asked for.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The calls in the order they were started; `step` names generated ids.
    pub fn finish(self, step: u32) -> Vec<AssembledCall> {
        finish(self.calls, step)
    }
}

/// Assembles Anthropic `tool_use` blocks: started by `content_block_start`, filled by
/// `input_json_delta` fragments, complete at `content_block_stop`.
#[derive(Debug, Default)]
pub struct AnthropicCalls {
    /// Open blocks by content-block index, and whether their input came whole with the start
    /// (then streamed input, if any follows, replaces it).
    open: HashMap<u64, (Partial, bool)>,
    done: Vec<Partial>,
    bytes: usize,
}

impl AnthropicCalls {
    /// `content_block_start` of a `tool_use` block; `input` is the start's `input` as JSON
    /// text (`{}` when the input follows in deltas).
    pub fn start(
        &mut self,
        index: u64,
        id: &str,
        name: &str,
        input: &str,
    ) -> Result<(), ProviderError> {
        if self.open.len().saturating_add(self.done.len()) >= MAX_CALLS {
            return Err(ProviderError::Protocol {
                message: format!("more than {MAX_CALLS} tool calls in one step"),
            });
        }
        self.bytes = self
            .bytes
            .saturating_add(input.len())
            .saturating_add(name.len());
        let input = input.trim();
        let arguments = if input.is_empty() || input == "{}" {
            String::new()
        } else {
            input.to_string()
        };
        let whole = !arguments.is_empty();
        self.open.insert(
            index,
            (
                Partial {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments,
                },
                whole,
            ),
        );
        self.check()
    }

    /// An `input_json_delta`'s `partial_json` (the first may be empty). A delta for a block
    /// that is not an open `tool_use` (a text block) is not ours and is ignored.
    pub fn delta(&mut self, index: u64, partial_json: &str) -> Result<(), ProviderError> {
        if let Some((call, whole)) = self.open.get_mut(&index) {
            if !partial_json.is_empty() && *whole {
                call.arguments.clear();
                *whole = false;
            }
            call.arguments.push_str(partial_json);
            self.bytes = self.bytes.saturating_add(partial_json.len());
        }
        self.check()
    }

    /// `content_block_stop`: the block at `index` is complete (a text block's stop is ignored).
    pub fn stop(&mut self, index: u64) {
        if let Some((call, _)) = self.open.remove(&index) {
            self.done.push(call);
        }
    }

    fn check(&self) -> Result<(), ProviderError> {
        if self.bytes > MAX_ARGUMENT_BYTES {
            return Err(too_large());
        }
        Ok(())
    }

    /// The completed calls in order; blocks never stopped (a cut stream) are dropped.
    pub fn finish(self, step: u32) -> Vec<AssembledCall> {
        finish(self.done, step)
    }
}

fn finish(calls: Vec<Partial>, step: u32) -> Vec<AssembledCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(n, p)| AssembledCall {
            id: if p.id.is_empty() {
                format!("call_{step}_{n}")
            } else {
                p.id
            },
            name: p.name,
            arguments: if p.arguments.trim().is_empty() {
                "{}".into()
            } else {
                p.arguments
            },
        })
        .collect()
}

fn too_large() -> ProviderError {
    ProviderError::Protocol {
        message: format!("tool call arguments past {MAX_ARGUMENT_BYTES} bytes in one step"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag<'a>(
        index: Option<u32>,
        id: Option<&'a str>,
        name: Option<&'a str>,
        arguments: Option<&'a str>,
    ) -> Fragment<'a> {
        Fragment {
            index,
            id,
            name,
            arguments,
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> AssembledCall {
        AssembledCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn openai_fragments_by_index_with_id_and_name_once() {
        let mut calls = OpenAiCalls::default();
        calls
            .absorb(frag(Some(0), Some("a"), Some("fs__write"), Some("")))
            .unwrap();
        calls
            .absorb(frag(Some(1), Some("b"), Some("fs__read"), None))
            .unwrap();
        calls
            .absorb(frag(Some(0), None, None, Some("{\"path\":")))
            .unwrap();
        calls.absorb(frag(Some(1), None, None, Some("{}"))).unwrap();
        calls
            .absorb(frag(Some(0), None, None, Some("\"x\"}")))
            .unwrap();
        assert_eq!(
            calls.finish(1),
            vec![
                call("a", "fs__write", "{\"path\":\"x\"}"),
                call("b", "fs__read", "{}")
            ]
        );
    }

    #[test]
    fn the_whole_call_in_one_chunk() {
        let mut calls = OpenAiCalls::default();
        calls
            .absorb(frag(Some(0), Some("a"), Some("t"), Some("{\"n\":1}")))
            .unwrap();
        assert_eq!(calls.finish(1), vec![call("a", "t", "{\"n\":1}")]);
    }

    #[test]
    fn id_and_name_repeated_in_every_chunk_and_a_legacy_duplicate() {
        let mut calls = OpenAiCalls::default();
        for part in ["{\"q\":", "\"rust\"", "}"] {
            calls
                .absorb(frag(Some(0), Some("a"), Some("search"), Some(part)))
                .unwrap();
            // llama-cpp-python also sends the legacy field with the same content.
            calls
                .absorb_legacy(frag(None, None, Some("search"), Some(part)))
                .unwrap();
        }
        assert_eq!(
            calls.finish(1),
            vec![call("a", "search", "{\"q\":\"rust\"}")]
        );
    }

    #[test]
    fn index_0_reused_for_parallel_calls_told_apart_by_id() {
        let mut calls = OpenAiCalls::default();
        calls
            .absorb(frag(Some(0), Some("a"), Some("x"), Some("{}")))
            .unwrap();
        calls
            .absorb(frag(Some(0), Some("b"), Some("y"), Some("{\"k\"")))
            .unwrap();
        calls
            .absorb(frag(Some(0), None, None, Some(":2}")))
            .unwrap();
        assert_eq!(
            calls.finish(1),
            vec![call("a", "x", "{}"), call("b", "y", "{\"k\":2}")]
        );
    }

    #[test]
    fn missing_ids_indices_and_arguments_get_defaults() {
        let mut calls = OpenAiCalls::default();
        calls.absorb(frag(None, None, Some("ping"), None)).unwrap();
        calls
            .absorb(frag(Some(3), Some(""), Some("pong"), Some("  ")))
            .unwrap();
        assert_eq!(
            calls.finish(7),
            vec![
                call("call_7_0", "ping", "{}"),
                call("call_7_1", "pong", "{}")
            ]
        );
    }

    #[test]
    fn a_legacy_function_call_alone_is_one_call() {
        let mut calls = OpenAiCalls::default();
        calls
            .absorb_legacy(frag(None, None, Some("f"), Some("{\"a\"")))
            .unwrap();
        calls
            .absorb_legacy(frag(None, None, None, Some(":1}")))
            .unwrap();
        assert_eq!(calls.finish(2), vec![call("call_2_0", "f", "{\"a\":1}")]);
    }

    #[test]
    fn a_provider_cannot_grow_calls_without_bound() {
        let mut calls = OpenAiCalls::default();
        let chunk = "x".repeat(64 * 1024);
        let mut failed = None;
        for _ in 0..100 {
            if let Err(e) = calls.absorb(frag(Some(0), Some("a"), Some("t"), Some(&chunk))) {
                failed = Some(e);
                break;
            }
        }
        assert!(matches!(failed, Some(ProviderError::Protocol { .. })));

        let mut calls = OpenAiCalls::default();
        let ids: Vec<String> = (0..=MAX_CALLS).map(|n| n.to_string()).collect();
        let results: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| calls.absorb(frag(Some(i as u32), Some(id), Some("t"), None)))
            .collect();
        assert!(results[..MAX_CALLS].iter().all(|r| r.is_ok()));
        assert!(matches!(
            results[MAX_CALLS],
            Err(ProviderError::Protocol { .. })
        ));
    }

    #[test]
    fn anthropic_tool_use_blocks_parse_at_their_stop() {
        let mut calls = AnthropicCalls::default();
        // A text block at index 0 is not a tool call: its deltas and stop are ignored.
        calls.delta(0, "not ours").unwrap();
        calls.stop(0);
        calls.start(1, "toolu_1", "fs__write", "{}").unwrap();
        calls.delta(1, "").unwrap();
        calls.delta(1, "{\"path\": \"a.txt\",").unwrap();
        calls.delta(1, " \"content\": \"hi\"}").unwrap();
        calls.stop(1);
        calls.start(2, "toolu_2", "fs__list", "{}").unwrap();
        calls.stop(2);
        // Started, never stopped: the stream was cut; not a call to run.
        calls.start(3, "toolu_3", "fs__delete", "{}").unwrap();
        calls.delta(3, "{\"path\":").unwrap();
        assert_eq!(
            calls.finish(1),
            vec![
                call(
                    "toolu_1",
                    "fs__write",
                    "{\"path\": \"a.txt\", \"content\": \"hi\"}"
                ),
                call("toolu_2", "fs__list", "{}"),
            ]
        );
    }

    #[test]
    fn an_anthropic_start_may_carry_the_whole_input() {
        let mut calls = AnthropicCalls::default();
        calls.start(0, "toolu_1", "t", "{\"a\":1}").unwrap();
        calls.stop(0);
        assert_eq!(calls.finish(1), vec![call("toolu_1", "t", "{\"a\":1}")]);
    }
}
