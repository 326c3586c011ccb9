//! What a server sends, bounded: its tool list as wire `ToolInfo`s and a tool result as text.
use crate::redact::Redactor;
use app::wire::ToolInfo;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};

/// A result's text is cut here (the engine truncates further for the model and the store).
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// Tools past this many are left out of a server's list.
pub const MAX_TOOLS: usize = 512;
/// A tool whose name is longer cannot be called by it, so it is left out.
pub const MAX_TOOL_NAME_BYTES: usize = 128;
/// Descriptions are cut here.
pub const MAX_DESCRIPTION_BYTES: usize = 4 * 1024;
/// A tool whose input schema is larger (as JSON) is left out.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Cuts `s` to `max` bytes, saying how much was cut.
pub fn cap(mut s: String, max: usize) -> String {
    if s.len() > max {
        let cut = s.len() - prefix(&s, max).len();
        s.truncate(s.len() - cut);
        s.push_str(&format!("\n[… {cut} more bytes cut]"));
    }
    s
}

/// A server's tools as the wire shows them; over-long names and schemas are left out, with a
/// note of how many were. Descriptions go to every model: secrets in them are redacted.
pub fn tools(list: Vec<Tool>, redactor: &Redactor) -> (Vec<ToolInfo>, usize) {
    let mut out = Vec::with_capacity(list.len().min(MAX_TOOLS));
    let mut skipped = 0usize;
    for tool in list {
        if out.len() >= MAX_TOOLS
            || tool.name.is_empty()
            || tool.name.len() > MAX_TOOL_NAME_BYTES
            || out.iter().any(|t: &ToolInfo| t.name == tool.name)
        {
            skipped += 1;
            continue;
        }
        let schema = serde_json::Value::Object((*tool.input_schema).clone());
        if serde_json::to_vec(&schema).map_or(true, |v| v.len() > MAX_SCHEMA_BYTES) {
            skipped += 1;
            continue;
        }
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            // Redacted before the final cut, so no secret is cut short and kept in part.
            .map(|d| {
                let clean = redactor.redact(prefix(d, MAX_DESCRIPTION_BYTES.saturating_mul(2)));
                prefix(&clean, MAX_DESCRIPTION_BYTES).to_string()
            });
        let annotations = tool.annotations.as_ref();
        out.push(ToolInfo {
            name: tool.name.into_owned(),
            description,
            input_schema: schema,
            read_only: annotations.and_then(|a| a.read_only_hint),
            destructive: annotations.and_then(|a| a.destructive_hint),
            idempotent: annotations.and_then(|a| a.idempotent_hint),
            open_world: annotations.and_then(|a| a.open_world_hint),
        });
    }
    (out, skipped)
}

/// A tool result as text: text content joined, other content described briefly, structured
/// content as JSON when there is no text; at most [`MAX_RESULT_BYTES`].
pub fn result_text(result: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut size = 0usize;
    let mut left_out = 0usize;
    for block in &result.content {
        if size > MAX_RESULT_BYTES {
            left_out += 1;
            continue;
        }
        let part = match block {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Image(i) => binary("image", &i.mime_type, i.data.len()),
            ContentBlock::Audio(a) => binary("audio", &a.mime_type, a.data.len()),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    format!("[resource {}]\n{}", prefix(uri, 512), text)
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => format!(
                    "[resource {}: {}, {} bytes]",
                    prefix(uri, 512),
                    prefix(mime_type.as_deref().unwrap_or("binary"), 100),
                    base64_len(blob.len())
                ),
                #[allow(unreachable_patterns)]
                _ => "[resource]".to_string(),
            },
            ContentBlock::ResourceLink(l) => {
                format!(
                    "[resource link: {} ({})]",
                    prefix(&l.uri, 512),
                    prefix(&l.name, 200)
                )
            }
            #[allow(unreachable_patterns)]
            _ => "[content of an unknown kind]".to_string(),
        };
        size = size.saturating_add(part.len()).saturating_add(1);
        parts.push(part);
    }
    let mut text = parts.join("\n");
    let has_text = result
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Text(_)));
    if !has_text {
        if let Some(structured) = &result.structured_content {
            let json = serde_json::to_string(structured).unwrap_or_default();
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&json);
        }
    }
    let mut text = cap(text, MAX_RESULT_BYTES);
    if left_out > 0 {
        text.push_str(&format!("\n[{left_out} more content blocks left out]"));
    }
    text
}

fn binary(kind: &str, mime: &str, b64_len: usize) -> String {
    format!(
        "[{kind}: {}, {} bytes]",
        prefix(mime, 100),
        base64_len(b64_len)
    )
}

/// Decoded size of base64 text of this length (approximate for padding).
fn base64_len(len: usize) -> usize {
    len / 4 * 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result(v: serde_json::Value) -> CallToolResult {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_is_joined_and_other_content_described() {
        let r = result(json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "two"}
        ]}));
        assert_eq!(result_text(&r), "one\n[image: image/png, 3 bytes]\ntwo");
    }

    #[test]
    fn structured_content_stands_in_for_missing_text() {
        let r = result(json!({"content": [], "structuredContent": {"sum": 3}}));
        assert_eq!(result_text(&r), r#"{"sum":3}"#);
        let r = result(
            json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"sum": 3}}),
        );
        assert_eq!(result_text(&r), "3");
    }

    #[test]
    fn long_results_are_cut_on_a_character_with_a_note() {
        let r =
            result(json!({"content": [{"type": "text", "text": "é".repeat(MAX_RESULT_BYTES)}]}));
        let text = result_text(&r);
        assert!(text.len() < MAX_RESULT_BYTES + 100);
        assert!(
            text.ends_with("more bytes cut]"),
            "{}",
            &text[text.len() - 50..]
        );
    }

    #[test]
    fn tools_keep_annotations_and_drop_what_cannot_be_called() {
        let list: Vec<Tool> = serde_json::from_value(json!([
            {"name": "read", "description": "Reads", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true, "destructiveHint": false}},
            {"name": "x".repeat(MAX_TOOL_NAME_BYTES + 1), "inputSchema": {"type": "object"}},
            {"name": "read", "inputSchema": {"type": "object"}},
            {"name": "plain", "inputSchema": {"type": "object"}}
        ]))
        .unwrap();
        let (tools, skipped) = tools(list, &Redactor::default());
        assert_eq!(skipped, 2);
        assert_eq!(tools[0].read_only, Some(true));
        assert_eq!(tools[0].destructive, Some(false));
        assert_eq!(tools[0].description.as_deref(), Some("Reads"));
        assert_eq!(tools[1].name, "plain");
        assert_eq!(tools[1].read_only, None);
    }

    #[test]
    fn a_secret_in_a_description_never_reaches_a_model() {
        let key = "tool-server-secret-0042";
        let long = format!("{}{key}", "d".repeat(MAX_DESCRIPTION_BYTES - 5));
        let list: Vec<Tool> = serde_json::from_value(json!([
            {"name": "a", "description": format!("uses {key} to log in"),
             "inputSchema": {"type": "object"}},
            {"name": "b", "description": long, "inputSchema": {"type": "object"}}
        ]))
        .unwrap();
        let (tools, _) = tools(list, &Redactor::new([key]));
        assert_eq!(
            tools[0].description.as_deref(),
            Some("uses [redacted] to log in")
        );
        let cut = tools[1].description.as_deref().unwrap();
        assert!(
            !cut.contains("tool"),
            "no part of the key: {}",
            &cut[cut.len() - 20..]
        );
    }
}
