//! B1 relay overhead: one stream read directly, then through Mulligan.
use super::{direct, relay, Trace};
use crate::client::Server;
use crate::fake::{stream_model, Fake};
use crate::report::{median, ms, Table};
use crate::{Opts, R};

/// Runs B1 on a server of its own (a warm-up round, then `--runs` rounds) and puts its
/// medians in the table.
pub async fn run(opts: &Opts, fake: &Fake, t: &mut Table) -> R<()> {
    let server = Server::start(&fake.url, &[]).await?;
    let result = async {
        let n = opts.b1_deltas;
        round(&server, fake, n).await?; // warm-up: connections, caches
        let mut rounds = Vec::new();
        for _ in 0..opts.runs.max(1) {
            rounds.push(round(&server, fake, n).await?);
        }
        Ok::<_, String>(rounds)
    }
    .await;
    server.stop().await;
    let rounds = result?;
    let col = |f: &dyn Fn(&B1) -> f64| median(rounds.iter().map(f).collect());
    let d_first = col(&|r| ms(r.direct.first()));
    let m_first = col(&|r| ms(r.relay.first()));
    let added_first = col(&|r| ms(r.relay.first()) - ms(r.direct.first()));
    let d_sent = col(&|r| ms(r.direct.until_provider_sent()));
    let m_sent = col(&|r| ms(r.relay.until_provider_sent()));
    let d_total = col(&|r| ms(r.direct.total()));
    let m_total = col(&|r| ms(r.relay.total()));
    let ratio = col(&|r| r.relay.total().as_secs_f64() / r.direct.total().as_secs_f64());
    let resumes: u32 = rounds.iter().map(|r| r.relay.reconnects).sum();
    let runs = rounds.len();
    t.row(
        "B1 relay",
        &format!("first delta, median of {runs}"),
        format!("{d_first:.2} ms"),
        format!("{m_first:.2} ms"),
        format!("{added_first:+.2} ms"),
        "≤ direct + 3 ms",
        Some(added_first <= 3.0),
    );
    t.row(
        "B1 relay",
        "first delta: until the provider sends it · then to the client",
        format!("{d_sent:.2} ms · {:.2} ms", d_first - d_sent),
        format!("{m_sent:.2} ms · {:.2} ms", m_first - m_sent),
        format!(
            "{:+.2} ms · {:+.2} ms",
            m_sent - d_sent,
            (m_first - m_sent) - (d_first - d_sent)
        ),
        "(breakdown)",
        None,
    );
    t.row(
        "B1 relay",
        &format!("last of {} deltas, median of {runs}", opts.b1_deltas),
        format!("{d_total:.1} ms"),
        format!("{m_total:.1} ms"),
        format!("{ratio:.2}×"),
        "≤ 3× direct",
        Some(ratio <= 3.0),
    );
    t.row(
        "B1 relay",
        "deltas lost / reordered (checked)",
        "0".into(),
        format!("0 ({resumes} SSE resumes)"),
        "".into(),
        "0",
        Some(true),
    );
    Ok(())
}

pub struct B1 {
    pub direct: Trace,
    pub relay: Trace,
}

/// One B1 round: the direct stream, then the same stream through Mulligan (fresh session).
pub async fn round(server: &Server, fake: &Fake, n: usize) -> R<B1> {
    let model = stream_model(n, 0);
    let direct = direct(&server.http, &fake.url, &model, n).await?;
    let sid = server.create_session(&model).await?;
    let mut events = server.events(&sid).await?;
    let relay = relay(server, &mut events, &sid, n).await?;
    Ok(B1 { direct, relay })
}
