//! Several statements of one transaction sent together: on SQLite as one multi-statement
//! query (one hop to the connection's thread instead of one per statement), on PostgreSQL
//! one after another. Each statement is written as usual, with its own `$1..$n`; each
//! answers its own rows.
use futures::TryStreamExt;
use sqlx::{Either, PgConnection, SqliteConnection};

/// A value bound to a statement of a script.
#[derive(Clone, Debug)]
pub enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
    Bool(Option<bool>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}
impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(Some(v))
    }
}
impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Arg {
        Arg::Text(v)
    }
}
impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Arg {
        Arg::Text(v.map(str::to_string))
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(Some(v))
    }
}
impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Arg {
        Arg::Int(v)
    }
}
impl From<Option<bool>> for Arg {
    fn from(v: Option<bool>) -> Arg {
        Arg::Bool(v)
    }
}

/// Statements to run in order inside a transaction the caller holds.
#[derive(Default)]
pub struct Script {
    statements: Vec<(&'static str, Vec<Arg>)>,
}

impl Script {
    /// Adds a statement; answers its index in what [`Run::run`] returns.
    pub fn push(&mut self, sql: &'static str, args: Vec<Arg>) -> usize {
        self.statements.push((sql, args));
        self.statements.len() - 1
    }
}

/// Runs a script on a connection: each statement's rows, in order.
pub(super) trait Run<R> {
    async fn run(self, script: Script) -> Result<Vec<Vec<R>>, sqlx::Error>;
}

impl Run<sqlx::sqlite::SqliteRow> for &mut SqliteConnection {
    async fn run(self, script: Script) -> Result<Vec<Vec<sqlx::sqlite::SqliteRow>>, sqlx::Error> {
        use sqlx::Arguments;
        let mut sql = String::new();
        let mut args = sqlx::sqlite::SqliteArguments::default();
        let mut base = 0;
        let statements = script.statements.len();
        for (statement, values) in script.statements {
            // sqlx's SQLite driver numbers `$n` across the whole query: shift each statement's
            // (each uses `$1` to `$len` of its own values).
            sql.push_str(&renumber(statement, base));
            sql.push_str(";\n");
            base += values.len();
            for v in values {
                let added = match v {
                    Arg::Text(t) => args.add(t),
                    Arg::Int(i) => args.add(i),
                    Arg::Bool(b) => args.add(b),
                };
                added.map_err(sqlx::Error::Encode)?;
            }
        }
        let mut out: Vec<Vec<_>> = (0..statements).map(|_| Vec::new()).collect();
        let mut at = 0;
        // Deprecated in sqlx 0.8 (other drivers cannot do it), and the whole point here: the
        // script is one trip to the connection's thread. Should sqlx drop it, run the
        // statements one by one as on PostgreSQL.
        #[allow(deprecated)]
        let mut results = sqlx::query_with(&sql, args).fetch_many(self);
        while let Some(item) = results.try_next().await? {
            match item {
                Either::Right(row) => match out.get_mut(at) {
                    Some(rows) => rows.push(row),
                    None => {
                        return Err(sqlx::Error::Protocol("a script answered extra rows".into()))
                    }
                },
                Either::Left(_) => at += 1,
            }
        }
        Ok(out)
    }
}

impl Run<sqlx::postgres::PgRow> for &mut PgConnection {
    async fn run(self, script: Script) -> Result<Vec<Vec<sqlx::postgres::PgRow>>, sqlx::Error> {
        let mut out = Vec::with_capacity(script.statements.len());
        for (statement, values) in script.statements {
            let mut q = sqlx::query(statement);
            for v in values {
                q = match v {
                    // PostgreSQL's TEXT holds no U+0000 (CONTRACT §3: stored as U+FFFD).
                    Arg::Text(Some(t)) if t.contains('\0') => {
                        q.bind(super::pg_text(&t).into_owned())
                    }
                    Arg::Text(t) => q.bind(t),
                    Arg::Int(i) => q.bind(i),
                    Arg::Bool(b) => q.bind(b),
                };
            }
            out.push(q.fetch_all(&mut *self).await?);
        }
        Ok(out)
    }
}

/// `statement` with each `$n` made `$(n + base)`. The store's SQL has no `$` but its
/// parameters (no string literal or identifier holds one).
fn renumber(statement: &str, base: usize) -> String {
    if base == 0 {
        return statement.to_string();
    }
    let mut out = String::with_capacity(statement.len() + 8);
    let mut rest = statement;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 1);
        match rest[at + 1..at + 1 + digits].parse::<usize>() {
            Ok(n) => out.push_str(&format!("${}", n + base)),
            Err(_) => out.push('$'),
        }
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_shifted_and_nothing_else_changes() {
        assert_eq!(
            renumber("SELECT $1, $12 FROM t WHERE a = $2", 10),
            "SELECT $11, $22 FROM t WHERE a = $12"
        );
        assert_eq!(renumber("SELECT $1", 0), "SELECT $1");
        assert_eq!(renumber("no parameters", 3), "no parameters");
        assert_eq!(renumber("a lone $ stays", 3), "a lone $ stays");
    }
}
