//! A stdio server's error output: read, logged and its last line kept. (Its process is a
//! [`crate::child_env::Child`], killed with its group when dropped.)
use super::Secrets;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncReadExt;

const MAX_STDERR_LINE: usize = 1024;

/// Logs a child's stderr at debug, line by line with lines cut to [`MAX_STDERR_LINE`], and
/// keeps the last line for error messages; never stops reading, so the child cannot block.
pub(super) async fn drain_stderr(
    server: String,
    mut stderr: tokio::process::ChildStderr,
    last: Arc<Mutex<Option<String>>>,
    secrets: Secrets,
) {
    let mut buf = [0u8; 4096];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let emit = |line: &mut Vec<u8>| {
        let text = String::from_utf8_lossy(line).trim_end().to_string();
        line.clear();
        if text.trim().is_empty() {
            return;
        }
        let text = secrets.scrub(&text);
        tracing::debug!(server = %server, "stderr: {text}");
        let kept: String = text.chars().take(300).collect();
        *last.lock().unwrap_or_else(|p| p.into_inner()) = Some(kept);
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&mut line);
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            }
        }
    }
    emit(&mut line);
}
