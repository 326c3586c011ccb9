//! Operator authentication: the bearer token or the HttpOnly cookie that `/?token=…` sets,
//! compared in constant time. The token is generated once and kept in the data dir.
use super::error::respond;
use super::AppState;
use app::wire::ErrorCode;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::path::Path;
use subtle::ConstantTimeEq;

pub use crate::secrets::random_token;

pub const COOKIE: &str = "mulligan_token";

/// The shortest operator token `MULLIGAN_TOKEN` may set.
pub const MIN_TOKEN_CHARS: usize = 32;

/// Refuses an operator-chosen token that is short enough to guess or has characters that
/// break the `/?token=` URL or the cookie (allowed: letters, digits, `-`, `.`, `_`, `~`).
pub fn check_chosen_token(token: &str) -> Result<(), String> {
    let n = token.chars().count();
    if n < MIN_TOKEN_CHARS {
        return Err(format!(
            "MULLIGAN_TOKEN is {n} characters; use at least {MIN_TOKEN_CHARS} (or leave it unset and one is generated)"
        ));
    }
    if let Some(bad) = token
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')))
    {
        return Err(format!(
            "MULLIGAN_TOKEN has the character {bad:?}, which breaks a URL or a cookie; use only letters, digits, '-', '.', '_' and '~'"
        ));
    }
    Ok(())
}

/// Creates the data dir (and its parents) readable by this user only (0700 on Unix).
pub fn create_data_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// The operator token: the configured one, else the one kept in the data dir, else a new
/// one written there with mode 0600.
pub fn load_or_create_token(configured: Option<&str>, data_dir: &Path) -> std::io::Result<String> {
    if let Some(t) = configured.filter(|t| !t.is_empty()) {
        return Ok(t.to_string());
    }
    let path = data_dir.join("token");
    if let Ok(existing) = read_private(&path) {
        let t = existing.trim();
        if !t.is_empty() {
            return Ok(t.to_string());
        }
    }
    let token = random_token();
    write_private(&path, &token)?;
    Ok(token)
}

/// Opens with `O_NOFOLLOW` on Unix: a symlink planted at `path` is refused, not followed.
fn no_follow(opts: &mut std::fs::OpenOptions) {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(opts, libc::O_NOFOLLOW);
    #[cfg(not(unix))]
    let _ = opts;
}

fn read_private(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    no_follow(&mut opts);
    let mut s = String::new();
    opts.open(path)?.read_to_string(&mut s)?;
    Ok(s)
}

/// Writes a new file (0600, `O_NOFOLLOW`, created fresh beside `path`) and renames it over
/// `path`, so no reader ever sees it half written and no planted link is written through.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("token");
    let tmp = path.with_file_name(format!(".{name}.{}", &random_token()[..16]));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    no_follow(&mut opts);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let written = (|| {
        let mut f = opts.open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

pub fn token_matches(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// The token a request presents: `Authorization: Bearer …`, else the session cookie.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    presented(headers).map(|(t, _)| t)
}

/// [`presented_token`], and whether it came from the cookie.
fn presented(headers: &HeaderMap) -> Option<(&str, bool)> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some((bearer.trim(), false));
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .map(|t| (t, true))
}

/// Whether a cookie-authenticated request comes from this server's own pages: the browser
/// says `Sec-Fetch-Site: same-origin`, or (older browsers) sends an `Origin` equal to this
/// host. `SameSite=Strict` alone is not enough: other ports of the same host are same-site.
pub fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return site.eq_ignore_ascii_case("same-origin");
    }
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match (origin, host) {
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host)),
        _ => false,
    }
}

/// Guards `/api/v1`: 401 in the contract's shape without the operator token; 403 for a
/// state-changing request authenticated by the cookie that is not from this origin.
pub async fn require_operator(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let changes_state = !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    match presented(req.headers()) {
        Some((t, true)) if changes_state && !same_origin(req.headers()) => {
            if token_matches(t, &state.token) {
                respond(
                    StatusCode::FORBIDDEN,
                    ErrorCode::Forbidden,
                    "a request that changes state with the session cookie must come from this origin (Sec-Fetch-Site: same-origin or a matching Origin)",
                )
            } else {
                respond(
                    StatusCode::UNAUTHORIZED,
                    ErrorCode::Unauthorized,
                    "the token is wrong",
                )
            }
        }
        Some((t, _)) if token_matches(t, &state.token) => next.run(req).await,
        // An agent never decides a tool call, its own or anyone's (CONTRACT §8): said as
        // such, not as a wrong token.
        Some((t, _)) if is_approval_path(req.uri().path()) && is_agent_token(&state, t).await => {
            respond(
                StatusCode::FORBIDDEN,
                ErrorCode::Forbidden,
                "an agent token never decides tool calls, its own or its sub-sessions': only \
                 the operator does",
            )
        }
        Some(_) => respond(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "the token is wrong",
        ),
        None => respond(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "send Authorization: Bearer <token>, or open the URL `mulligan serve` printed",
        ),
    }
}

/// The approval routes (CONTRACT §8): `…/decision` and `/approvals`.
fn is_approval_path(path: &str) -> bool {
    path.ends_with("/decision") || path.ends_with("/approvals")
}

/// Whether `token` is some session's agent token.
async fn is_agent_token(state: &AppState, token: &str) -> bool {
    let hash = crate::secrets::hex_sha256(token);
    matches!(
        state.engine.store().session_by_token_hash(&hash).await,
        Ok(Some(_))
    )
}

/// `/?token=…`: sets the HttpOnly session cookie and redirects to the same page without it.
pub async fn cookie_from_query(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let Some(query) = req.uri().query() else {
        return next.run(req).await;
    };
    let Some(token) = query.split('&').find_map(|kv| kv.strip_prefix("token=")) else {
        return next.run(req).await;
    };
    if !token_matches(token, &state.token) {
        return (
            StatusCode::UNAUTHORIZED,
            "That link's token is wrong: use the URL `mulligan serve` printed.",
        )
            .into_response();
    }
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("token="))
        .collect();
    let target = if rest.is_empty() {
        req.uri().path().to_string()
    } else {
        format!("{}?{}", req.uri().path(), rest.join("&"))
    };
    let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age=31536000");
    ([(header::SET_COOKIE, cookie)], Redirect::to(&target)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_then_cookie() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=b; mulligan_token=abc".parse().unwrap());
        assert_eq!(presented_token(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, "Bearer xyz".parse().unwrap());
        assert_eq!(presented_token(&h), Some("xyz"));
        assert!(token_matches("xyz", "xyz"));
        assert!(!token_matches("xy", "xyz"));
    }

    #[test]
    fn chosen_tokens_are_long_and_url_and_cookie_safe() {
        assert!(check_chosen_token(&"a".repeat(32)).is_ok());
        assert!(check_chosen_token("Abc-123._~Abc-123._~Abc-123._~xy").is_ok());
        let short = check_chosen_token("secret").unwrap_err();
        assert!(short.contains("at least 32"), "{short}");
        for bad in [";", "&", " ", "=", "%", "é", "\""] {
            let t = format!("{}{bad}", "a".repeat(32));
            assert!(check_chosen_token(&t).is_err(), "{t:?} accepted");
        }
    }

    #[test]
    fn same_origin_needs_the_fetch_site_or_a_matching_origin() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:3000".parse().unwrap());
        assert!(!same_origin(&h), "neither header: refused");
        h.insert(header::ORIGIN, "http://127.0.0.1:3000".parse().unwrap());
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:4000".parse().unwrap());
        assert!(!same_origin(&h), "another port is another origin");
        h.insert("sec-fetch-site", "same-site".parse().unwrap());
        assert!(!same_origin(&h));
        h.insert("sec-fetch-site", "same-origin".parse().unwrap());
        assert!(same_origin(&h));
    }

    #[cfg(unix)]
    #[test]
    fn the_token_file_is_not_written_through_a_planted_link() {
        let dir = std::env::temp_dir().join(format!("mulligan-auth-{}", random_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("token")).unwrap();
        let t = load_or_create_token(None, &dir).unwrap();
        assert_eq!(t.len(), 64);
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "",
            "the link's target is untouched"
        );
        let meta = std::fs::symlink_metadata(dir.join("token")).unwrap();
        assert!(
            meta.file_type().is_file(),
            "the link was replaced by the token file"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn the_data_dir_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir()
            .join(format!("mulligan-dir-{}", random_token()))
            .join("data");
        create_data_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    #[test]
    fn the_token_is_kept_private_and_reused() {
        let dir = std::env::temp_dir().join(format!("mulligan-auth-{}", random_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = load_or_create_token(None, &dir).unwrap();
        let b = load_or_create_token(None, &dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("token"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
