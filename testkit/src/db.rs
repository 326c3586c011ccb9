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
