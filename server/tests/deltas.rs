//! A reply's deltas at the default window (`MULLIGAN_DELTA_WINDOW_MS`, 33 ms): a provider
//! streaming a token a millisecond reaches subscribers as one delta a window, whole and in
//! order, its first token at once; a provider slower than the window, a delta per token;
//! text faster than anyone reads it, a delta every three windows.
use testkit as common;

use app::wire::{Event, RunStatus};
use common::fake::{FakeProvider, Script};
use common::{config, run_ended, temp_dir, TestServer};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(20);

/// A server at the binary's default window (the other tests send each delta alone).
async fn server(tag: &str, fake: &FakeProvider) -> TestServer {
    let dir = temp_dir(tag);
    let mut c = config(&dir, &fake.url);
    c.delta_window_ms = server::config::DEFAULT_DELTA_WINDOW_MS;
    TestServer::start(c).await
}

/// One delta as a subscriber heard it.
struct Heard {
    seq: u64,
    text: String,
    at: Instant,
}

/// The run's deltas, read from its session's stream until the run ends, and the reply as
/// stored.
async fn deltas_of(server: &TestServer, sid: &str) -> (Vec<Heard>, String) {
    let mut sse = server.events(sid, None).await;
    let receipt = server.send(sid, "go").await;
    let mut heard = Vec::new();
    let mut ended = run_ended(&receipt.run_id);
    sse.until(WAIT, |e| {
        if let Event::Delta(d) = e {
            heard.push(Heard {
                seq: d.seq,
                text: d.text.clone(),
                at: Instant::now(),
            });
        }
        ended(e)
    })
    .await;
    let run = server.wait_run_end(&receipt.run_id).await;
    assert_eq!(run.status, RunStatus::Completed);
    let reply = server
        .detail(sid)
        .await
        .messages
        .last()
        .unwrap()
        .content
        .clone();
    (heard, reply)
}

fn words(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("w{i} ")).collect()
}

#[tokio::test]
async fn a_token_a_millisecond_goes_out_as_a_delta_a_window() {
    let fake = FakeProvider::start().await;
    let sent = words(300);
    fake.push(Script::Stream {
        deltas: sent.clone(),
        every: Duration::from_millis(1),
        finish: true,
    });
    let server = server("deltas-fast", &fake).await;
    let sid = server.create_session().await;
    let (deltas, reply) = deltas_of(&server, &sid).await;

    let whole: String = sent.concat();
    assert_eq!(
        deltas.iter().map(|d| d.text.as_str()).collect::<String>(),
        whole
    );
    assert_eq!(reply, whole, "the stored reply is the whole text");
    let seqs: Vec<u64> = deltas.iter().map(|d| d.seq).collect();
    assert_eq!(seqs, (1..=deltas.len() as u64).collect::<Vec<_>>());
    assert_eq!(
        deltas[0].text, "w0 ",
        "the first token goes out at once, alone"
    );
    // 300 tokens over at least 300 ms: about 10 windows or fewer (a slow machine stretches
    // the stream, and so the count, but never to one delta a token).
    assert!(
        deltas.len() <= 100,
        "{} deltas for 300 tokens a millisecond apart",
        deltas.len()
    );
    // No text is held past its window: the longest gap between two deltas is about a
    // window (33 ms; 99 ms once text is seen to come fast), far from the stream's length.
    let gap = largest_gap(&deltas);
    assert!(
        gap <= Duration::from_millis(200),
        "a gap of {gap:?} between deltas"
    );
}

/// The longest time between two deltas heard one after the other.
fn largest_gap(heard: &[Heard]) -> Duration {
    heard
        .windows(2)
        .map(|w| w[1].at.duration_since(w[0].at))
        .max()
        .unwrap_or_default()
}

#[tokio::test]
async fn text_faster_than_it_is_read_goes_out_every_three_windows() {
    let fake = FakeProvider::start().await;
    // 16 bytes a millisecond: a window holds hundreds, more than two lines (even on a
    // machine whose timers stretch a millisecond to two).
    let sent: Vec<String> = (0..1000).map(|i| format!("w{i:05} and more ")).collect();
    fake.push(Script::Stream {
        deltas: sent.clone(),
        every: Duration::from_millis(1),
        finish: true,
    });
    let server = server("deltas-faster", &fake).await;
    let sid = server.create_session().await;
    let (heard, reply) = deltas_of(&server, &sid).await;
    let text: String = heard.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(text, sent.concat(), "the whole text, in order");
    assert_eq!(reply, text, "the stored reply is the whole text");
    // The first delta at once, one a window while the text is seen to be fast, the rest
    // 99 ms apart, the last at the stream's end: however slow the machine makes the stream,
    // about one delta per 99 ms of it (one per 33 ms at the plain window).
    let (first, last) = (heard[0].at, heard[heard.len() - 1].at);
    let lasted = last.duration_since(first).as_millis();
    let allowed = lasted / 90 + 4;
    assert!(
        heard.len() as u128 <= allowed,
        "{} deltas in {lasted} ms of fast text (at most {allowed})",
        heard.len()
    );
    // Held at most three windows (99 ms) while fast, never the whole stream (≥ 1 s).
    let gap = largest_gap(&heard);
    assert!(
        gap <= Duration::from_millis(300),
        "a gap of {gap:?} between deltas"
    );
}

#[tokio::test]
async fn a_provider_slower_than_the_window_gets_a_delta_a_token() {
    let fake = FakeProvider::start().await;
    let sent = words(5);
    fake.push(Script::Stream {
        deltas: sent.clone(),
        every: Duration::from_millis(80),
        finish: true,
    });
    let server = server("deltas-slow", &fake).await;
    let sid = server.create_session().await;
    let (deltas, reply) = deltas_of(&server, &sid).await;
    let texts: Vec<&str> = deltas.iter().map(|d| d.text.as_str()).collect();
    assert_eq!(texts, sent.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(reply, sent.concat());
}
