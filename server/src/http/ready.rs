//! `/readyz`: whether this instance's database takes a write, checked at most about once a
//! second, so a flood of unauthenticated probes cannot drain the pool (CONTRACT §2).
use crate::error::Error;
use crate::store::Store;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long one check's answer is given again.
const KEPT_FOR: Duration = Duration::from_secs(1);
/// How long a check waits for the database's answer.
const READY_WITHIN: Duration = Duration::from_secs(3);

/// The latest check and when it ended.
#[derive(Default)]
pub struct Readiness {
    last: Mutex<Option<(Instant, Result<(), Error>)>>,
}

impl Readiness {
    /// The database's answer: checked now when the last check is older than `KEPT_FOR`
    /// (probes meanwhile wait for that one check and share its answer), else the last one.
    pub async fn check(&self, store: &Store) -> Result<(), Error> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref() {
            if at.elapsed() < KEPT_FOR {
                return answer.clone();
            }
        }
        let answer = match tokio::time::timeout(READY_WITHIN, store.takes_writes()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::from(e)),
            Err(_) => Err(Error::new(
                crate::error::Kind::Unavailable,
                "the database did not take a write within 3 s",
            )),
        };
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}
