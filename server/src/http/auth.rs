//! Operator authentication: the bearer token or the HttpOnly cookie that `/?token=…` sets,
//! compared in constant time. The token is generated once and kept in the data dir.
use super::error::respond;
use super::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use std::path::Path;
use subtle::ConstantTimeEq;

pub const COOKIE: &str = "mulligan_token";

/// The operator token: the configured one, else the one kept in the data dir, else a new
/// one written there with mode 0600.
pub fn load_or_create_token(configured: Option<&str>, data_dir: &Path) -> std::io::Result<String> {
    if let Some(t) = configured.filter(|t| !t.is_empty()) {
        return Ok(t.to_string());
    }
    let path = data_dir.join("token");
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let t = existing.trim();
        if !t.is_empty() {
            return Ok(t.to_string());
        }
    }
    let token = random_token();
    write_private(&path, &token)?;
    Ok(token)
}

/// 32 random bytes as hex.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

pub fn token_matches(given: &str, expected: &str) -> bool {
    given.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// The token a request presents: `Authorization: Bearer …`, else the session cookie.
pub fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
}

/// Guards `/api/v1`: 401 in the contract's shape without the operator token.
pub async fn require_operator(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match presented_token(req.headers()) {
        Some(t) if token_matches(t, &state.token) => next.run(req).await,
        Some(_) => respond(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the token is wrong",
        ),
        None => respond(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <token>, or open the URL `mulligan serve` printed",
        ),
    }
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
