//! The test's database: SQLite in its data dir, or a fresh PostgreSQL database when the suite
//! runs on PostgreSQL.

/// The PostgreSQL server the multi-instance tests use (`MULLIGAN_TEST_POSTGRES_URL`).
pub fn postgres_url() -> Option<String> {
    std::env::var("MULLIGAN_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// Whether the suite runs against PostgreSQL (`MULLIGAN_TEST_DATABASE=postgres`), else SQLite.
pub fn on_postgres() -> bool {
    std::env::var("MULLIGAN_TEST_DATABASE").as_deref() == Ok("postgres")
}

/// The database of a test's data dir: SQLite in it (the default), or, when the suite runs on
/// PostgreSQL, a fresh database made for that dir once (a restart in the same dir finds it).
pub fn database_url(data_dir: &std::path::Path) -> Option<String> {
    if !on_postgres() {
        return None;
    }
    let base =
        postgres_url().expect("MULLIGAN_TEST_DATABASE=postgres needs MULLIGAN_TEST_POSTGRES_URL");
    let kept = data_dir.join("postgres-url");
    if let Ok(url) = std::fs::read_to_string(&kept) {
        return Some(url);
    }
    let url = fresh_postgres_database(&base);
    std::fs::create_dir_all(data_dir).unwrap();
    std::fs::write(&kept, &url).unwrap();
    Some(url)
}

/// Creates an empty database beside `base`'s (on its own thread: tests run inside a runtime).
pub fn fresh_postgres_database(base: &str) -> String {
    let base = base.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            use sqlx::Connection;
            let mut admin = sqlx::PgConnection::connect(&base)
                .await
                .expect("MULLIGAN_TEST_POSTGRES_URL is reachable");
            let name = format!("mulligan_t_{}", uuid::Uuid::now_v7().simple());
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut admin)
                .await
                .unwrap();
            let (head, tail) = match base.split_once('?') {
                Some((h, t)) => (h, format!("?{t}")),
                None => (base.as_str(), String::new()),
            };
            let root = head.rsplit_once('/').map_or(head, |(r, _)| r);
            format!("{root}/{name}{tail}")
        })
    })
    .join()
    .unwrap()
}

/// Another client holding back a test server's writes until [`WriteLock::release`]: on
/// SQLite every write (`BEGIN IMMEDIATE` on `mulligan.db`), on PostgreSQL every write to
/// (or reference to) the `sessions` table. Reads go on.
pub enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl WriteLock {
    /// Takes the lock of the database in `data_dir` (the one [`database_url`] gives, else
    /// SQLite's `mulligan.db` there).
    pub async fn hold(data_dir: &std::path::Path) -> WriteLock {
        use sqlx::Connection;
        match database_url(data_dir) {
            Some(url) => {
                let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                sqlx::raw_sql("BEGIN; LOCK TABLE sessions IN EXCLUSIVE MODE")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                WriteLock::Postgres(conn)
            }
            None => WriteLock::hold_sqlite(data_dir).await,
        }
    }

    /// SQLite's lock on `mulligan.db` in `data_dir`, whichever database the suite runs on.
    pub async fn hold_sqlite(data_dir: &std::path::Path) -> WriteLock {
        use sqlx::Connection;
        let url = format!("sqlite://{}", data_dir.join("mulligan.db").display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::raw_sql("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .unwrap();
        WriteLock::Sqlite(conn)
    }

    /// Lets the waiting writers go on.
    pub async fn release(self) {
        match self {
            WriteLock::Sqlite(mut c) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut c).await.unwrap();
            }
            WriteLock::Postgres(mut c) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut c).await.unwrap();
            }
        }
    }
}

/// Runs `sql` (one or more statements) on the database of a test server in `data_dir`, from
/// a connection of the test's own: `sqlite` on SQLite, `postgres` on PostgreSQL.
pub async fn execute_sql(data_dir: &std::path::Path, sqlite: &str, postgres: &str) {
    use sqlx::Connection;
    match database_url(data_dir) {
        Some(url) => {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(postgres).execute(&mut conn).await.unwrap();
        }
        None => {
            let url = format!("sqlite://{}", data_dir.join("mulligan.db").display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sqlite).execute(&mut conn).await.unwrap();
        }
    }
}
