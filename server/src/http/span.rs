//! A tracing span per request: every log line written while a request is served says its
//! method and path, and the session or run the path names (`session_id`, `run_id`, the
//! names the run's own span uses). The query is left out: the page's `?token=` is a secret.
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// Serves the request inside its span.
pub async fn request_span(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let (session_id, run_id) = ids_in(path);
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %path,
        session_id = tracing::field::Empty,
        run_id = tracing::field::Empty,
    );
    if let Some(id) = session_id {
        span.record("session_id", id);
    }
    if let Some(id) = run_id {
        span.record("run_id", id);
    }
    next.run(request).instrument(span).await
}

/// The session and the run a path names: the segment after `sessions` (or the page's `s`)
/// and the one after `runs`.
fn ids_in(path: &str) -> (Option<&str>, Option<&str>) {
    let (mut session, mut run) = (None, None);
    let mut segments = path.split('/').filter(|s| !s.is_empty()).peekable();
    while let Some(segment) = segments.next() {
        let slot = match segment {
            "sessions" | "s" => &mut session,
            "runs" => &mut run,
            _ => continue,
        };
        if let Some(id) = segments.next_if(|id| !id.is_empty()) {
            *slot = Some(id);
        }
    }
    (session, run)
}

#[cfg(test)]
mod tests {
    use super::ids_in;

    #[test]
    fn a_path_names_its_session_and_run() {
        assert_eq!(ids_in("/api/v1/sessions/s1/messages"), (Some("s1"), None));
        assert_eq!(ids_in("/api/v1/runs/r9/cancel"), (None, Some("r9")));
        assert_eq!(ids_in("/s/s2"), (Some("s2"), None));
        assert_eq!(ids_in("/api/v1/sessions"), (None, None));
        assert_eq!(ids_in("/healthz"), (None, None));
    }
}
