//! The shared event log's notifications: a batch of events as `NOTIFY` payloads (each under
//! PostgreSQL's 8,000 bytes) and back. A line is `<id> <session> <name> <data>` (data: one
//! line of JSON), or `<id>` alone for an event too large to send, read from the log instead.
use super::LoggedEvent;
use std::fmt::Write;

/// A payload stays under PostgreSQL's limit (8,000 bytes).
const NOTIFY_BYTES: usize = 7900;

/// An event of a batch: session, name, JSON data.
type Pending = (String, &'static str, String);

/// The rows to write (every event but deltas, and events too large to send) and the
/// payloads to send, lines in id order; each line written once, straight into its payload.
#[allow(clippy::type_complexity)]
pub(super) fn encode<'a>(
    batch: &'a [Pending],
    ids: &[i64],
) -> (Vec<(i64, &'a Pending)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut payloads = Vec::new();
    let mut current = String::new();
    for (event, id) in batch.iter().zip(ids) {
        let (session, name, data) = event;
        // Digits of the id, three spaces, the rest.
        let line = 20 + 3 + session.len() + name.len() + data.len();
        let fits = line <= NOTIFY_BYTES;
        if *name != "delta" || !fits {
            rows.push((*id, event));
        }
        let part = if fits { line } else { 20 };
        if !current.is_empty() && current.len() + 1 + part > NOTIFY_BYTES {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        // Writing to a String cannot fail.
        let _ = if fits {
            write!(current, "{id} {session} {name} {data}")
        } else {
            write!(current, "{id}")
        };
    }
    if !current.is_empty() {
        payloads.push(current);
    }
    (rows, payloads)
}

/// One line of a notification: the event it carries, or the id of one to read from the log.
pub enum Notified {
    Event(LoggedEvent),
    InLog(i64),
}

/// Parses a notification's payload; a line it cannot read is skipped.
pub fn decode(payload: &str) -> Vec<Notified> {
    payload.lines().filter_map(decode_line).collect()
}

fn decode_line(line: &str) -> Option<Notified> {
    let mut parts = line.splitn(4, ' ');
    let id: i64 = parts.next()?.parse().ok()?;
    let Some(session_id) = parts.next() else {
        return Some(Notified::InLog(id));
    };
    let name = parts.next()?;
    let data = parts.next()?;
    let name = app::wire::EVENT_NAMES
        .iter()
        .copied()
        .find(|n| *n == name)?;
    Some(Notified::Event(LoggedEvent {
        id,
        session_id: session_id.to_string(),
        name,
        data: data.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &'static str, data: String) -> Pending {
        ("s_1".into(), name, data)
    }

    #[test]
    fn a_batch_goes_out_in_order_in_payloads_under_the_limit_and_only_run_events_are_rows() {
        let big = format!("{{\"text\":\"{}\"}}", "x".repeat(9000));
        let mut batch: Vec<Pending> = (0..300)
            .map(|i| event("delta", format!("{{\"seq\":{i},\"text\":\"w \"}}")))
            .collect();
        batch.push(event("run", "{\"id\":\"r_1\"}".into()));
        batch.push(event("delta", big.clone()));
        let ids: Vec<i64> = (100..100 + batch.len() as i64).collect();
        let (rows, payloads) = encode(&batch, &ids);

        assert!(payloads.len() > 1, "300 deltas need several payloads");
        assert!(payloads.iter().all(|p| p.len() <= NOTIFY_BYTES));
        let row_ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        assert_eq!(row_ids, [400, 401], "the run event and the oversized delta");

        let lines: Vec<Notified> = payloads.iter().flat_map(|p| decode(p)).collect();
        assert_eq!(lines.len(), batch.len());
        for (line, (id, (_, name, data))) in lines.iter().zip(ids.iter().zip(&batch)) {
            match line {
                Notified::Event(e) => {
                    assert_eq!((e.id, e.name, e.session_id.as_str()), (*id, *name, "s_1"));
                    assert_eq!(&e.data, data);
                }
                Notified::InLog(got) => {
                    assert_eq!(
                        (*got, data),
                        (401, &big),
                        "only the oversized one goes by id"
                    )
                }
            }
        }
    }

    #[test]
    fn lines_it_cannot_read_are_skipped() {
        let lines = decode("x s delta {}\n7 s nosuchevent {}\n8 s delta\n9");
        assert!(matches!(lines.as_slice(), [Notified::InLog(9)]));
    }
}
