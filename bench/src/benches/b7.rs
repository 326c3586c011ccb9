//! B7 scale-out (issue 23): two instances on one fresh PostgreSQL database, each session
//! posted on one instance and followed over SSE from the other, against the same load on
//! one instance: completions, doubled requests, missing ends, wall time, p99 transit, peak
//! connections per instance, log rows written per relayed delta and CPU per delta.
use super::{all, relay, Trace};
use crate::client::{Events, Server};
use crate::fake::{stream_model, Fake};
use crate::report::{ms, percentile, Table};
use crate::{Opts, R};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs B7 at `sessions` sessions on the PostgreSQL server at `base` (a fresh database each).
pub async fn run(opts: &Opts, fake: &Fake, base: &str, sessions: usize, t: &mut Table) -> R<()> {
    let bench = format!("B7 ×{sessions}");
    let n = opts.b2_deltas;
    let every = opts.b2_interval_ms;
    let direct = super::b2::b2_direct(&fake_http()?, fake, sessions, n, every).await?;
    let one = load(fake, base, sessions, n, every, 1).await?;
    let two = load(fake, base, sessions, n, every, 2).await?;
    let p99 = |v: &[u64]| {
        let mut v = v.to_vec();
        percentile(&mut v, 99.0).unwrap_or(0) as f64 / 1000.0
    };
    let direct_p99 = p99(&direct.transits_us);
    let added = p99(&two.transits_us) - direct_p99;
    let all_done = two.completed == sessions && two.doubled == 0 && two.missing_end == 0;
    t.row(
        &bench,
        "completed · doubled provider requests · SSE missing its end (2 instances)",
        "".into(),
        format!("{} · {} · {}", two.completed, two.doubled, two.missing_end),
        format!(
            "one instance: {} · {} · {}",
            one.completed, one.doubled, one.missing_end
        ),
        "all · 0 · 0",
        Some(all_done),
    );
    t.row(
        &bench,
        &format!("wall time ({n} deltas at {every} ms), followed from the other instance"),
        format!("one instance {:.2} s", one.wall.as_secs_f64()),
        format!("{:.2} s", two.wall.as_secs_f64()),
        format!(
            "{:.3}× one instance",
            two.wall.as_secs_f64() / one.wall.as_secs_f64().max(1e-9)
        ),
        "(printed)",
        None,
    );
    t.row(
        &bench,
        "p99 transit per delta (provider write → client on the other instance)",
        format!("direct {direct_p99:.2} ms"),
        format!("{:.2} ms", p99(&two.transits_us)),
        format!("{added:+.2} ms"),
        "added ≤ 50 ms",
        Some(added <= 50.0),
    );
    let peak = two.peak_connections.values().copied().max().unwrap_or(0);
    t.row(
        &bench,
        "p99 transit: one instance (SSE on the posting instance) · two instances after every stream's first delta",
        "".into(),
        format!(
            "one {:.2} ms · two, steady {:.2} ms",
            p99(&one.transits_us),
            p99(&two.steady_transits_us)
        ),
        format!(
            "{:+.2} ms · {:+.2} ms",
            p99(&one.transits_us) - direct_p99,
            p99(&two.steady_transits_us) - direct_p99
        ),
        "(printed)",
        None,
    );
    t.row(
        &bench,
        "peak connections per instance (pg_stat_activity)",
        "".into(),
        format!("{:?}", two.peak_connections.values().collect::<Vec<_>>()),
        format!("budget {}", server::store::DEFAULT_MAX_CONNECTIONS),
        "≤ 24",
        Some(peak <= 24),
    );
    let delta_rows_per_delta = two.delta_rows as f64 / two.deltas.max(1) as f64;
    t.row(
        &bench,
        "delta rows written per relayed delta · all log rows per delta",
        "".into(),
        format!(
            "{delta_rows_per_delta:.4} ({} delta rows, {} deltas)",
            two.delta_rows, two.deltas
        ),
        format!(
            "{:.4} ({} run-level rows, {:.1} per run)",
            two.rows as f64 / two.deltas.max(1) as f64,
            two.rows,
            two.rows as f64 / sessions.max(1) as f64
        ),
        "≤ 0.01",
        Some(delta_rows_per_delta <= 0.01),
    );
    let per_delta: Vec<String> = two
        .cpu
        .iter()
        .map(|c| format!("{:.1} µs", c.as_secs_f64() * 1e6 / two.deltas.max(1) as f64))
        .collect();
    t.row(
        &bench,
        "server CPU per relayed delta, each instance (run starts included)",
        "".into(),
        per_delta.join(" · "),
        format!("last first delta {:.0} ms", ms(two.last_first)),
        "(printed)",
        None,
    );
    if all_done {
        Ok(())
    } else {
        Err(format!(
            "{} of {sessions} completed, {} doubled, {} streams missed their end: {}",
            two.completed,
            two.doubled,
            two.missing_end,
            two.first_error.unwrap_or_default()
        ))
    }
}

fn fake_http() -> R<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .map_err(|e| e.to_string())
}

/// What one load saw.
struct Load {
    completed: usize,
    doubled: usize,
    missing_end: usize,
    first_error: Option<String>,
    wall: Duration,
    last_first: Duration,
    transits_us: Vec<u64>,
    /// Transits of the deltas that arrived after every stream's first delta: the steady
    /// state, without the burst of run starts.
    steady_transits_us: Vec<u64>,
    deltas: usize,
    rows: i64,
    /// Delta rows written (read before their run's end prunes them: the prune waits 5 s).
    delta_rows: i64,
    peak_connections: HashMap<String, i64>,
    cpu: Vec<Duration>,
}

/// `sessions` sessions over `instances` instances (1 or 2) on a fresh database: each created
/// and posted on instance `i % instances` and followed from the next one.
async fn load(
    fake: &Fake,
    base: &str,
    sessions: usize,
    n: usize,
    every: u64,
    instances: usize,
) -> R<Load> {
    let db = fresh_database(base).await?;
    let extra = [("MULLIGAN_DATABASE_URL", db.clone())];
    let mut servers = Vec::new();
    for _ in 0..instances {
        servers.push(Arc::new(Server::start(&fake.url, &extra).await?));
    }
    let admin = sqlx::PgPool::connect(base)
        .await
        .map_err(|e| format!("PostgreSQL at {base}: {e}"))?;
    let model = stream_model(n, every);
    // Untimed set-up: the sessions, each followed from the other instance.
    let set_up: Vec<R<(usize, String, Events)>> = futures::stream::iter(0..sessions)
        .map(|i| {
            let (here, there) = (
                servers[i % instances].clone(),
                servers[(i + 1) % instances].clone(),
            );
            let model = model.clone();
            async move {
                let sid = here.create_session(&model).await?;
                let events = there.events(&sid).await?;
                Ok((i, sid, events))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let set_up: Vec<(usize, String, Events)> = set_up.into_iter().collect::<R<_>>()?;
    let db_name = db.rsplit('/').next().unwrap_or_default().to_string();
    let rows_before: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
        .fetch_one(&connect(&db).await?)
        .await
        .map_err(|e| e.to_string())?;
    let requests_before = fake.seen().len();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn(sample_connections(admin.clone(), db_name, stop.clone()));
    let cpu_before: Vec<Duration> = servers.iter().map(|s| s.usage().cpu).collect();

    let start = Instant::now();
    let tasks = set_up
        .into_iter()
        .map(|(i, sid, mut events)| {
            let here = servers[i % instances].clone();
            tokio::spawn(async move {
                // A stream's failure is counted, not the end of the load.
                Ok::<R<Trace>, String>(relay(&here, &mut events, &sid, n).await)
            })
        })
        .collect();
    let traces: Vec<R<Trace>> = all(tasks).await?;
    let wall = start.elapsed();
    let cpu: Vec<Duration> = servers
        .iter()
        .zip(&cpu_before)
        .map(|(s, b)| s.usage().cpu.saturating_sub(*b))
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let peak_connections = sampler.await.map_err(|e| e.to_string())?;
    let pool = connect(&db).await?;
    let (rows, delta_rows): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE name = 'delta') FROM events WHERE id > $1",
    )
    .bind(rows_before)
    .fetch_one(&pool)
    .await
    .map_err(|e| e.to_string())?;
    pool.close().await;
    let requests = fake.seen().len().saturating_sub(requests_before);
    let mut out = Load {
        completed: 0,
        doubled: requests.saturating_sub(sessions),
        missing_end: 0,
        first_error: None,
        wall,
        last_first: Duration::ZERO,
        transits_us: Vec::new(),
        steady_transits_us: Vec::new(),
        deltas: 0,
        rows,
        delta_rows,
        peak_connections,
        cpu,
    };
    let mut arrived: Vec<(Duration, u64)> = Vec::new();
    for trace in traces {
        match trace {
            Ok(tr) => {
                out.completed += 1;
                out.deltas += tr.arrivals.len();
                out.last_first = out.last_first.max(tr.t0 - start + tr.first());
                arrived.extend(
                    tr.arrivals
                        .iter()
                        .map(|a| a.saturating_duration_since(start))
                        .zip(tr.transits_us.iter().copied()),
                );
                out.transits_us.extend(tr.transits_us);
            }
            Err(e) => {
                out.missing_end += 1;
                out.first_error.get_or_insert(e);
            }
        }
    }
    out.steady_transits_us = arrived
        .into_iter()
        .filter(|(at, _)| *at > out.last_first)
        .map(|(_, t)| t)
        .collect();
    for s in servers {
        if let Ok(s) = Arc::try_unwrap(s) {
            s.stop().await;
        }
    }
    let _ = sqlx::query(&format!(
        "DROP DATABASE IF EXISTS {}",
        db.rsplit('/').next().unwrap_or_default()
    ))
    .execute(&admin)
    .await;
    admin.close().await;
    Ok(out)
}

async fn connect(url: &str) -> R<sqlx::PgPool> {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .map_err(|e| format!("PostgreSQL: {e}"))
}

/// The most connections each instance (by `application_name`) had open at once, sampled
/// every 50 ms until `stop`.
async fn sample_connections(
    admin: sqlx::PgPool,
    db: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> HashMap<String, i64> {
    let mut peak: HashMap<String, i64> = HashMap::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT application_name, COUNT(*) FROM pg_stat_activity
             WHERE datname = $1 AND application_name LIKE 'mulligan %' GROUP BY 1",
        )
        .bind(&db)
        .fetch_all(&admin)
        .await
        .unwrap_or_default();
        for (app, n) in rows {
            let p = peak.entry(app).or_default();
            *p = (*p).max(n);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    peak
}

/// A new empty database beside `base`'s; answers its URL.
pub async fn fresh_database(base: &str) -> R<String> {
    let admin = connect(base).await?;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "mulligan_b7_{}_{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
        .execute(&admin)
        .await
        .map_err(|e| e.to_string())?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .map_err(|e| e.to_string())?;
    admin.close().await;
    let head = base.split('?').next().unwrap_or(base);
    let root = head.rsplit_once('/').map_or(head, |(r, _)| r);
    Ok(format!("{root}/{name}"))
}
