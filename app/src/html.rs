//! Text made safe to put in HTML built as a string (the page shell, the timeline's and the
//! model field's server-rendered parts).

/// Appends `text` with HTML's five special characters escaped: it reads as text, in an
/// element or a quoted attribute.
pub(crate) fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}
