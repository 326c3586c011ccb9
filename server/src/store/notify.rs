//! The shared event log's notifications: a batch of events as `NOTIFY` payloads (each under
//! PostgreSQL's 8,000 bytes) and back. A payload's first line is `b<base>`, the id of the
//! batch's first event, which the database gives as it sends (the batch is numbered and sent
//! in one statement); each further line is `<k> <session> <name> <data>` (data: one line of
//! JSON) for the event with id `base + k`, or `<k>` alone for an event too large to send,
//! read from the log instead.
use super::LoggedEvent;
use std::fmt::Write;

/// A payload stays under PostgreSQL's limit (8,000 bytes), its `b<base>` line included.
const NOTIFY_BYTES: usize = 7900;
/// What the database puts before a payload: `b`, an id's digits, a newline.
const BASE_LINE: usize = 1 + 20 + 1;

/// An event of a batch: session, name, JSON data.
type Pending = (String, &'static str, String);

/// The rows to write (every event but deltas, and events too large to send), each with its
/// place `k` in the batch, and the payloads to send without their `b<base>` line, lines in
/// batch order; each line written once, straight into its payload.
#[allow(clippy::type_complexity)]
pub(super) fn encode(batch: &[Pending]) -> (Vec<(i64, &Pending)>, Vec<String>) {
    let mut rows = Vec::new();
    let mut payloads = Vec::new();
    let mut current = String::new();
    let limit = NOTIFY_BYTES - BASE_LINE;
    for (k, event) in batch.iter().enumerate() {
        let k = i64::try_from(k).unwrap_or(i64::MAX);
        let (session, name, data) = event;
        // Digits of the place, three spaces, the rest.
        let line = 20 + 3 + session.len() + name.len() + data.len();
        let fits = line <= limit;
        if *name != "delta" || !fits {
            rows.push((k, event));
        }
        let part = if fits { line } else { 20 };
        if !current.is_empty() && current.len() + 1 + part > limit {
            payloads.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push('\n');
        }
        // Writing to a String cannot fail.
        let _ = if fits {
            write!(current, "{k} {session} {name} {data}")
        } else {
            write!(current, "{k}")
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

/// Parses a notification's payload; a line it cannot read is skipped, and a payload
/// without its `b<base>` line is skipped whole.
pub fn decode(payload: &str) -> Vec<Notified> {
    let mut lines = payload.lines();
    let Some(base) = lines
        .next()
        .and_then(|l| l.strip_prefix('b'))
        .and_then(|b| b.parse::<i64>().ok())
    else {
        return Vec::new();
    };
    lines.filter_map(|l| decode_line(base, l)).collect()
}

fn decode_line(base: i64, line: &str) -> Option<Notified> {
    let mut parts = line.splitn(4, ' ');
    let k: u32 = parts.next()?.parse().ok()?;
    let id = base.checked_add(i64::from(k))?;
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
        session_id: app::wire::SessionId::new(session_id),
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
        let (rows, payloads) = encode(&batch);

        assert!(payloads.len() > 1, "300 deltas need several payloads");
        // As the database sends them: each after the batch's first id.
        let sent: Vec<String> = payloads.iter().map(|p| format!("b100\n{p}")).collect();
        assert!(
            sent.iter().all(|p| p.len() <= NOTIFY_BYTES),
            "under the limit"
        );
        let row_places: Vec<i64> = rows.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            row_places,
            [300, 301],
            "the run event and the oversized delta"
        );

        let lines: Vec<Notified> = sent.iter().flat_map(|p| decode(p)).collect();
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
    fn the_largest_line_that_is_sent_fits_with_the_longest_base() {
        let data = "x".repeat(NOTIFY_BYTES - BASE_LINE - 23 - "s_1".len() - "delta".len());
        let batch = [event("delta", data)];
        let (rows, payloads) = encode(&batch);
        assert!(rows.is_empty(), "sent, not written");
        let sent = format!("b{}\n{}", i64::MAX, payloads[0]);
        assert!(sent.len() <= NOTIFY_BYTES, "{}", sent.len());
        assert!(matches!(decode(&sent).as_slice(), [Notified::Event(e)] if e.id == i64::MAX));
    }

    #[test]
    fn lines_it_cannot_read_are_skipped() {
        let lines = decode("b10\nx s delta {}\n7 s nosuchevent {}\n8 s delta\n9");
        assert!(matches!(lines.as_slice(), [Notified::InLog(19)]));
        assert!(
            decode("9 s delta {}").is_empty(),
            "no base: nothing to number by"
        );
    }
}
