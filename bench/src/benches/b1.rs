//! B1 relay overhead: one stream read directly, then through Mulligan.
use super::{direct, relay, Trace};
use crate::client::Server;
use crate::fake::{stream_model, Fake};
use crate::R;

pub struct B1 {
    pub direct: Trace,
    pub relay: Trace,
}

/// One B1 round: the direct stream, then the same stream through Mulligan (fresh session).
pub async fn b1(server: &Server, fake: &Fake, n: usize) -> R<B1> {
    let model = stream_model(n, 0);
    let direct = direct(&server.http, &fake.url, &model, n).await?;
    let sid = server.create_session(&model).await?;
    let mut events = server.events(&sid).await?;
    let relay = relay(server, &mut events, &sid, n).await?;
    Ok(B1 { direct, relay })
}
