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

impl From<&app::wire::SessionId> for Arg {
    fn from(v: &app::wire::SessionId) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

impl From<&app::wire::RunId> for Arg {
    fn from(v: &app::wire::RunId) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

impl From<&app::wire::MessageId> for Arg {
    fn from(v: &app::wire::MessageId) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
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
        // The workspace's one use of a deprecated sqlx API, on purpose. sqlx 0.8 deprecates
        // several statements in one query with bound arguments (only its SQLite driver can;
        // `raw_sql`, the supported way to send several, binds nothing) and `fetch_many`,
        // which tells where each statement's rows end. That is the whole point here: the
        // script is one trip to the connection's thread, where one statement at a time
        // would be one trip each. `one_query_answers_each_statements_rows` below pins what
        // this relies on and fails when sqlx changes it; then run the statements one by one
        // as on PostgreSQL.
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
    use sqlx::{Connection, Row};

    /// What the SQLite [`Run`] relies on sqlx for (see the `allow(deprecated)` there): one
    /// query of several statements with bound arguments, `$n` counted across the whole query,
    /// each statement's rows followed by its result (even when it has no rows), statements
    /// run in order, and a failing statement's error answered.
    #[tokio::test]
    async fn one_query_answers_each_statements_rows() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        sqlx::raw_sql("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER, b BOOLEAN)")
            .execute(&mut conn)
            .await
            .unwrap();
        let mut script = Script::default();
        let inserted = script.push(
            "INSERT INTO t (k, n, b) VALUES ($1, $2, $3), ($4, $2, $5) RETURNING k",
            vec![
                "a".into(),
                1i64.into(),
                Some(true).into(),
                "b".into(),
                Arg::Bool(None),
            ],
        );
        let untouched = script.push(
            "UPDATE t SET n = n + $1 WHERE k = $2 RETURNING k",
            vec![10i64.into(), "nobody".into()],
        );
        let plain = script.push("UPDATE t SET n = n + 1 WHERE k = 'b'", vec![]);
        let read = script.push(
            "SELECT k, n, b, $2 || $1 || $2 AS s FROM t WHERE n >= $3 ORDER BY k",
            vec!["x".into(), "y".into(), 1i64.into()],
        );
        let rows = (&mut conn).run(script).await.unwrap();
        assert_eq!(rows.len(), 4);
        let keys = |i: usize| -> Vec<String> { rows[i].iter().map(|r| r.get("k")).collect() };
        assert_eq!(keys(inserted), ["a", "b"]);
        assert!(rows[untouched].is_empty() && rows[plain].is_empty());
        assert_eq!(keys(read), ["a", "b"]);
        let (a, b) = (&rows[read][0], &rows[read][1]);
        assert_eq!((a.get::<i64, _>("n"), b.get::<i64, _>("n")), (1, 2));
        assert_eq!(a.get::<Option<bool>, _>("b"), Some(true));
        assert_eq!(b.get::<Option<bool>, _>("b"), None);
        assert_eq!(a.get::<String, _>("s"), "yxy");

        let mut script = Script::default();
        script.push(
            "UPDATE t SET n = $1 WHERE k = $2",
            vec![7i64.into(), "a".into()],
        );
        script.push("INSERT INTO t (k) VALUES ($1)", vec!["b".into()]);
        script.push("UPDATE t SET n = $1", vec![8i64.into()]);
        let Err(err) = (&mut conn).run(script).await else {
            panic!("a duplicate key passed");
        };
        let db = err.as_database_error().expect("the database's refusal");
        assert!(db.is_unique_violation(), "{db}");
        let n: Vec<i64> = sqlx::query_scalar("SELECT n FROM t ORDER BY k")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert_eq!(n, [7, 2], "run in order, up to the one that failed");
    }

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
