//! The results table: one row per measurement, printed as Markdown at the end, and the
//! statistics the rows are made of (medians, percentiles).
use std::time::Duration;

/// One row of the table.
pub struct Row {
    bench: String,
    metric: String,
    direct: String,
    mulligan: String,
    vs: String,
    target: String,
    verdict: String,
}

pub struct Table {
    pub rows: Vec<Row>,
    pub failures: Vec<String>,
    pub smoke: bool,
}

impl Table {
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        bench: &str,
        metric: &str,
        direct: String,
        mulligan: String,
        vs: String,
        target: &str,
        met: Option<bool>,
    ) {
        let verdict = match met {
            None => "—".to_string(),
            Some(_) if self.smoke => "(smoke)".to_string(),
            Some(true) => "met".to_string(),
            Some(false) => "**missed**".to_string(),
        };
        self.rows.push(Row {
            bench: bench.into(),
            metric: metric.into(),
            direct,
            mulligan,
            vs,
            target: target.into(),
            verdict,
        });
        // Progress on stderr while the rest runs.
        let r = self.rows.last().unwrap();
        eprintln!(
            "[bench] {} {}: direct {} · mulligan {} · {} · {}",
            r.bench, r.metric, r.direct, r.mulligan, r.vs, r.verdict
        );
    }

    pub fn fail(&mut self, bench: &str, e: String) {
        eprintln!("[bench] {bench}: CORRECTNESS FAILURE: {e}");
        self.rows.push(Row {
            bench: bench.into(),
            metric: "correctness".into(),
            direct: "".into(),
            mulligan: e.clone(),
            vs: "".into(),
            target: "".into(),
            verdict: "**FAILED**".into(),
        });
        self.failures.push(format!("{bench}: {e}"));
    }

    pub fn print(&self) {
        println!("| bench | metric | direct | mulligan | vs direct | target | verdict |");
        println!("|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.bench, r.metric, r.direct, r.mulligan, r.vs, r.target, r.verdict
            );
        }
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Nearest-rank percentile.
pub fn percentile<T: Copy + Ord>(v: &mut [T], p: f64) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}
