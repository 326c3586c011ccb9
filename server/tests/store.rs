//! The store's own guarantees, on SQLite or (with `MULLIGAN_TEST_DATABASE=postgres`) PostgreSQL.
mod common;

use app::wire::{AutoRetry, MessageStatus, RunKind, RunStatus};
use server::store::{NewRun, Outcome, Store};

async fn open(tag: &str) -> Store {
    let dir = common::temp_dir(tag);
    let url = common::database_url(&dir)
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("mulligan.db").display()));
    Store::open(&url).await.unwrap()
}

/// Batched saves of streaming text arrive in any order and may land after the run ended:
/// none of them may overwrite the final text or a save that was further on.
#[tokio::test]
async fn a_late_or_stale_save_never_overwrites_the_reply() {
    let store = open("store-saves").await;
    let session = store
        .create_session("t", "demo", None, "hash", AutoRetry::Off)
        .await
        .unwrap();
    let (_, run, _) = store
        .dispatch(NewRun {
            session_id: &session.id,
            new_message: Some("go"),
            message_provenance: None,
            anchor_id: None,
            kind: RunKind::Prompt,
            attempt: 1,
            provenance: None,
            supersede_after_anchor: false,
        })
        .await
        .unwrap();
    let (run, reply) = store.start_run(&run, "i-test").await.unwrap();
    let save = |text: &str, seq: u64| vec![(reply.id.clone(), text.to_string(), seq)];

    store.save_reply_texts(&save("a b", 2)).await.unwrap();
    store.save_reply_texts(&save("a", 1)).await.unwrap();
    let m = store.message(&reply.id).await.unwrap();
    assert_eq!(
        (m.content.as_str(), m.delta_seq),
        ("a b", Some(2)),
        "an older save lost"
    );

    let outcome = Outcome {
        status: RunStatus::Completed,
        content: "a b c".into(),
        error_message: None,
        retry: None,
        tokens_used: 3,
    };
    let (ended, final_reply) = store.finish_run(&run.id, &outcome).await.unwrap().unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(final_reply.unwrap().content, "a b c");

    store.save_reply_texts(&save("a b c d", 9)).await.unwrap();
    let m = store.message(&reply.id).await.unwrap();
    assert_eq!(m.content, "a b c", "a save after the end changed the reply");
    assert_eq!(m.status, Some(MessageStatus::Complete));
}
