//! `GET /events`: one stream that follows several sessions (a browser's tabs share one), each
//! session resumed after its own event id, its events named by the marker before them.
use testkit as common;

use app::wire::Event;
use common::{run_ended, setup, TestServer};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);

/// The session an event belongs to, read from the event itself (a delta says only its run:
/// `runs` maps run ids to sessions).
fn session_of(e: &Event, runs: &[(String, String)]) -> String {
    match e {
        Event::Message(m) => m.session_id.to_string(),
        Event::Run(r) => r.session_id.to_string(),
        Event::Session(s) => s.id.to_string(),
        Event::Delta(d) => run_session(runs, d.run_id.as_str()),
        Event::Attempt(a) => run_session(runs, a.run_id.as_str()),
        Event::ToolCall(t) => run_session(runs, t.run_id.as_str()),
    }
}

fn run_session(runs: &[(String, String)], rid: &(impl std::fmt::Display + ?Sized)) -> String {
    runs.iter()
        .find(|(r, _)| *r == rid.to_string())
        .map(|(_, s)| s.clone())
        .unwrap_or_else(|| panic!("an event of run {rid}, which no test run started"))
}

/// A session's events after `after`, up to its run `rid`'s end, from its own stream.
async fn own_stream(
    server: &TestServer,
    sid: &str,
    after: i64,
    rid: &(impl std::fmt::Display + ?Sized),
) -> Vec<i64> {
    let mut sse = server.events(sid, Some(after)).await;
    let seen = sse.until(WAIT, run_ended(rid)).await;
    seen.into_iter().map(|(id, _)| id).collect()
}

#[tokio::test]
async fn one_stream_follows_several_sessions_each_from_its_own_id() {
    let (_fake, server) = setup("follow").await;
    let (a, b, c) = (
        server.create_session().await,
        server.create_session().await,
        server.create_session().await,
    );
    let mut runs = Vec::new();
    // A's first turn is behind the place the stream resumes A from; C is not followed.
    let first = server.send(&a, "one").await;
    server.wait_run_end(&first.run_id).await;
    let a_from = own_stream(&server, &a, 0, &first.run_id).await;
    let a_from = *a_from.last().unwrap();
    let second = server.send(&a, "two").await;
    let of_b = server.send(&b, "three").await;
    let of_c = server.send(&c, "four").await;
    for (r, s) in [(&first, &a), (&second, &a), (&of_b, &b), (&of_c, &c)] {
        runs.push((r.run_id.to_string(), s.clone()));
        server.wait_run_end(&r.run_id).await;
    }
    let want_a = own_stream(&server, &a, a_from, &second.run_id).await;
    let want_b = own_stream(&server, &b, 0, &of_b.run_id).await;

    let mut sse = server.follow(&format!("{a}:{a_from},{b}:0")).await;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    while got_a.len() < want_a.len() || got_b.len() < want_b.len() {
        let (marked, id, e) = sse.next_marked(WAIT).await;
        let marked = marked.expect("every event comes after a marker");
        assert_eq!(
            marked,
            session_of(&e, &runs),
            "event {id} under the wrong marker"
        );
        if marked == a {
            got_a.push(id);
        } else if marked == b {
            got_b.push(id);
        } else {
            panic!("event {id} of session {marked}, which the stream does not follow");
        }
    }
    assert_eq!(
        got_a, want_a,
        "A: its events after {a_from}, once and in order"
    );
    assert_eq!(got_b, want_b, "B: all its events, once and in order");

    // Live: a new turn in B comes on the same stream, under B's marker, and one in C never.
    let of_c2 = server.send(&c, "five").await;
    runs.push((of_c2.run_id.to_string(), c.clone()));
    server.wait_run_end(&of_c2.run_id).await;
    let live = server.send(&b, "six").await;
    runs.push((live.run_id.to_string(), b.clone()));
    loop {
        let (marked, id, e) = sse.next_marked(WAIT).await;
        let marked = marked.unwrap();
        assert_eq!(
            marked,
            session_of(&e, &runs),
            "event {id} under the wrong marker"
        );
        assert_eq!(
            marked, b,
            "only B has had a turn since: event {id} is of {marked}"
        );
        assert!(id > *got_b.last().unwrap(), "event {id} again");
        if run_ended(&live.run_id)(&e) {
            break;
        }
    }
}
