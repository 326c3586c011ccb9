//! The session list, paged (CONTRACT §2): newest first, `limit`, `before`, the title's words,
//! a family's sessions only; one query per page, each session with its last run.
use super::sessions::{session_from_row, session_select};
use super::*;
use app::wire::SessionId;
use app::wire::SessionList;

/// The largest page `GET /sessions?limit=` and MCP `list_sessions` give.
pub const MAX_SESSION_PAGE: u32 = 1000;

/// Which sessions to list, newest first: those older than `before` (a session id) whose
/// title holds every word of `words`, at most `limit` of them (`None`: all).
#[derive(Clone, Debug, Default)]
pub struct SessionPage {
    pub limit: Option<u32>,
    pub before: Option<SessionId>,
    /// Lowercase words, each to be found in the title (case-insensitively).
    pub words: Vec<String>,
}

/// A page's length when a client names none (CONTRACT §2).
pub const DEFAULT_SESSION_PAGE: u32 = 100;
/// The most words a search takes, and its longest text.
pub const MAX_SEARCH_WORDS: usize = 8;
pub const MAX_SEARCH_CHARS: usize = 200;

impl SessionPage {
    /// A page as a client asked for it: `limit` from 1 to [`MAX_SESSION_PAGE`] (default
    /// `DEFAULT_SESSION_PAGE`), `before` a session id (an empty one counts as none), `q`
    /// words of the title; `invalid` otherwise.
    pub fn new(limit: Option<u64>, before: Option<String>, q: Option<&str>) -> Result<SessionPage> {
        let limit = match limit {
            None => DEFAULT_SESSION_PAGE,
            Some(n) if (1..=u64::from(MAX_SESSION_PAGE)).contains(&n) => {
                u32::try_from(n).unwrap_or(MAX_SESSION_PAGE)
            }
            Some(n) => {
                return Err(StoreError::invalid(format!(
                    "`limit` is {n}; use 1 to {MAX_SESSION_PAGE}"
                )))
            }
        };
        let q = q.unwrap_or_default();
        if q.chars().count() > MAX_SEARCH_CHARS {
            return Err(StoreError::invalid(format!(
                "`q` is longer than {MAX_SEARCH_CHARS} characters; search for fewer words"
            )));
        }
        let words: Vec<String> = q.split_whitespace().map(str::to_lowercase).collect();
        if words.len() > MAX_SEARCH_WORDS {
            return Err(StoreError::invalid(format!(
                "`q` has {} words; a search takes at most {MAX_SEARCH_WORDS}",
                words.len()
            )));
        }
        let before =
            match before.filter(|b| !b.is_empty()) {
                Some(b) => Some(b.parse::<SessionId>().map_err(|e| {
                    StoreError::invalid(format!("`before` is not a session id: {e}"))
                })?),
                None => None,
            };
        Ok(SessionPage {
            limit: Some(limit),
            before,
            words,
        })
    }
}

/// `word` as a `LIKE` pattern that finds it anywhere (`\` escapes `%`, `_` and itself).
fn contains_pattern(word: &str) -> String {
    let mut p = String::with_capacity(word.len() + 2);
    p.push('%');
    for c in word.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

impl Store {
    /// Sessions, newest first, one page of them, in one query. `invalid` when `before`
    /// names no session.
    pub async fn sessions(&self, page: &SessionPage) -> Result<SessionList> {
        self.sessions_within(page, None).await
    }

    /// [`Store::sessions`] of `root`'s descendants only (children, their children, …), found
    /// by the database: the cost follows the family, not every session on the server.
    pub async fn descendant_sessions(
        &self,
        page: &SessionPage,
        root: &SessionId,
    ) -> Result<SessionList> {
        self.sessions_within(page, Some(root)).await
    }

    async fn sessions_within(
        &self,
        page: &SessionPage,
        root: Option<&SessionId>,
    ) -> Result<SessionList> {
        with_pool!(self, |pool| {
            let cursor: Option<i64> = match &page.before {
                Some(id) => Some(
                    sqlx::query_scalar("SELECT created_at FROM sessions WHERE id = $1")
                        .bind(id.as_str())
                        .fetch_optional(pool)
                        .await?
                        .ok_or_else(|| {
                            StoreError::invalid(format!("`before`: there is no session \"{id}\""))
                        })?,
                ),
                None => None,
            };
            // Placeholders are numbered in the order they appear, each used.
            let mut n = 0;
            let mut next = || {
                n += 1;
                format!("${n}")
            };
            let mut sql = String::new();
            let mut filters = Vec::new();
            if root.is_some() {
                sql.push_str(&format!(
                    "WITH RECURSIVE family(id) AS (
                         SELECT id FROM sessions WHERE parent_id = {}
                         UNION SELECT c.id FROM sessions c JOIN family f ON c.parent_id = f.id) ",
                    next()
                ));
                filters.push("s.id IN (SELECT id FROM family)".to_string());
            }
            sql.push_str(&session_select());
            if cursor.is_some() {
                let (at, id) = (next(), next());
                filters.push(format!(
                    "(s.created_at < {at} OR (s.created_at = {at} AND s.id < {id}))"
                ));
            }
            for _ in &page.words {
                filters.push(format!("LOWER(s.title) LIKE {} ESCAPE '\\'", next()));
            }
            if !filters.is_empty() {
                sql.push_str(" WHERE ");
                sql.push_str(&filters.join(" AND "));
            }
            sql.push_str(" ORDER BY s.created_at DESC, s.id DESC");
            // One more than the page: whether another page follows.
            if let Some(limit) = page.limit {
                sql.push_str(&format!(" LIMIT {}", limit.min(MAX_SESSION_PAGE) + 1));
            }
            let mut q = sqlx::query(&sql);
            if let Some(root) = root {
                q = q.bind(root.as_str());
            }
            if let (Some(at), Some(id)) = (cursor, &page.before) {
                q = q.bind(at).bind(id.as_str());
            }
            for w in &page.words {
                q = q.bind(contains_pattern(w));
            }
            let rows = q.fetch_all(pool).await?;
            let mut sessions: Vec<Session> =
                rows.iter().map(|r| session_from_row(r).session).collect();
            let mut next_before = None;
            if let Some(limit) = page.limit.and_then(|l| usize::try_from(l).ok()) {
                if sessions.len() > limit {
                    sessions.truncate(limit);
                    next_before = sessions.last().map(|s| s.id.clone());
                }
            }
            Ok(SessionList {
                sessions,
                next_before,
            })
        })
    }
}
