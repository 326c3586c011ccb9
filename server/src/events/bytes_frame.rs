//! An SSE frame (`id:`, `event:`, `data:` lines), rendered once and shared by subscribers.
pub type Frame = axum::body::Bytes;

pub fn render(id: i64, name: &str, data: &str) -> Frame {
    render_with(id, name, data.len(), |buf| {
        buf.extend_from_slice(data.as_bytes())
    })
    .0
}

/// Renders a frame in one buffer, `write` putting the (one-line JSON) data in; answers
/// where the data is in the frame.
pub fn render_with(
    id: i64,
    name: &str,
    size_hint: usize,
    write: impl FnOnce(&mut Vec<u8>),
) -> (Frame, std::ops::Range<usize>) {
    use std::io::Write;
    let mut buf = Vec::with_capacity(size_hint + name.len() + 40);
    let _ = write!(buf, "id: {id}\nevent: {name}\ndata: ");
    let start = buf.len();
    write(&mut buf);
    let end = buf.len();
    buf.extend_from_slice(b"\n\n");
    (Frame::from(buf), start..end)
}
