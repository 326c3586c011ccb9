//! The store's own guarantees, on SQLite or (with `MULLIGAN_TEST_DATABASE=postgres`) PostgreSQL.
use testkit as common;

use app::wire::{
    AutoRetry, MessageId, MessageStatus, PromptId, ProvenanceKind, RunId, RunStatus, SessionId,
};
use server::store::{EndBy, NewRun, NewSession, Outcome, Started, Store};

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
        .create_session(&NewSession::plain("demo", "hash"))
        .await
        .unwrap();
    let queued = store
        .dispatch(NewRun::prompt(&session.id, "go"), None)
        .await
        .unwrap()
        .run;
    // The run's lease (on PostgreSQL, saves of a run without one are refused).
    store.heartbeat("i-test").await.unwrap();
    let Started { run, reply, .. } = store
        .start_next(&session.id, "i-test")
        .await
        .unwrap()
        .expect("the queued run starts");
    assert_eq!(run.id, queued.id);
    assert_eq!(
        reply.run_id.as_ref().map(|id| id.as_str()),
        Some(run.id.as_str())
    );
    let save = |text: &str, seq: u64| vec![(reply.id.to_string(), text.to_string(), seq)];

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
        tool_calls_recorded: false,
        served: Vec::new(),
        asked: Vec::new(),
        stop_reason: None,
    };
    let (ended, final_reply) = store
        .finish_run(&run.id, &outcome, EndBy::Settled)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(final_reply.unwrap().content, "a b c");
    assert_eq!(store.session(&session.id).await.unwrap().tokens_used, 3);

    // A second end (a cancel racing the completion) changes nothing: not the run, not its
    // reply, not the session's spend.
    let late = Outcome {
        status: RunStatus::Cancelled,
        content: "late".into(),
        tokens_used: 100,
        ..outcome
    };
    assert!(store
        .finish_run(&run.id, &late, EndBy::Settled)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        store.run(&run.id).await.unwrap().status,
        RunStatus::Completed
    );
    assert_eq!(store.message(&reply.id).await.unwrap().content, "a b c");
    assert_eq!(store.session(&session.id).await.unwrap().tokens_used, 3);

    store.save_reply_texts(&save("a b c d", 9)).await.unwrap();
    let m = store.message(&reply.id).await.unwrap();
    assert_eq!(m.content, "a b c", "a save after the end changed the reply");
    assert_eq!(m.status, Some(MessageStatus::Complete));
}

/// A dispatch with an owner starts the session's next run in the same transaction, only
/// when none is running, and the oldest queued first; a session that does not exist is
/// `not_found` and leaves nothing behind.
#[tokio::test]
async fn a_dispatch_starts_the_next_run_only_on_a_free_session() {
    let store = open("store-dispatch-start").await;
    let session = store
        .create_session(&NewSession::plain("demo", "hash-start"))
        .await
        .unwrap();
    let sid = &session.id;
    let first = store
        .dispatch(NewRun::prompt(sid, "one"), Some("i-a"))
        .await
        .unwrap();
    let Started {
        run: started,
        reply,
        call,
        ..
    } = first
        .started
        .expect("a free session starts the run at once");
    assert_eq!(
        (call.model.as_str(), call.tokens_used),
        ("demo", 0),
        "the session's call comes with the start"
    );
    assert_eq!(started.id, first.run.id);
    assert_eq!(started.status, RunStatus::Running);
    assert_eq!(
        started.reply_message_id.as_ref().map(|id| id.as_str()),
        Some(reply.id.as_str())
    );
    assert_eq!(
        reply.run_id.as_ref().map(|id| id.as_str()),
        Some(first.run.id.as_str())
    );
    assert_eq!(reply.status, Some(MessageStatus::Streaming));
    // Busy: queued, not started.
    let second = store
        .dispatch(NewRun::prompt(sid, "two"), Some("i-a"))
        .await
        .unwrap();
    assert!(
        second.started.is_none(),
        "a second run started beside the first"
    );
    assert_eq!(second.run.status, RunStatus::Queued);
    // The first ends: the next start takes the queued one.
    let done = Outcome {
        status: RunStatus::Completed,
        content: "ok".into(),
        error_message: None,
        retry: None,
        tokens_used: 1,
        tool_calls_recorded: false,
        served: Vec::new(),
        asked: Vec::new(),
        stop_reason: None,
    };
    store
        .finish_run(&first.run.id, &done, EndBy::Settled)
        .await
        .unwrap();
    let next = store.start_next(sid, "i-a").await.unwrap().unwrap();
    assert_eq!(next.run.id, second.run.id);
    assert_eq!(next.call.tokens_used, 1, "the first run's tokens are spent");
    assert!(store.start_next(sid, "i-a").await.unwrap().is_none());

    let missing = store
        .dispatch(
            NewRun::prompt(&SessionId::new("s_missing"), "hello"),
            Some("i-a"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&missing, server::store::StoreError::NotFound { what, .. } if what == "session"),
        "{missing:?}"
    );
}

/// A prompt's tries count runs anchored on it and runs whose provenance names it; its
/// resumes count only automatic resumes (both read the indexed `prompt_id` column).
#[tokio::test]
async fn tries_and_resumes_of_a_prompt_follow_the_provenance() {
    let store = open("store-tries").await;
    let session = store
        .create_session(&NewSession::plain("demo", "hash-tries"))
        .await
        .unwrap();
    fn run<'a>(
        session_id: &'a SessionId,
        anchor: Option<&'a MessageId>,
        new: Option<&'a str>,
        kind: Option<ProvenanceKind>,
    ) -> NewRun<'a> {
        let provenance = kind.map(|kind| app::wire::Provenance {
            kind,
            prompt_id: anchor.map(PromptId::of_message),
            attempt: Some(1),
            manual: None,
            from: None,
        });
        NewRun {
            new_message: new,
            anchor_id: if new.is_some() { None } else { anchor },
            provenance,
            ..NewRun::prompt(session_id, "")
        }
    }
    let sid = &session.id;
    let prompt = store
        .dispatch(run(sid, None, Some("go"), None), None)
        .await
        .unwrap()
        .message
        .unwrap()
        .id;
    let prompt_id = PromptId::of_message(&prompt);
    assert_eq!(store.tries_of(&prompt_id).await.unwrap(), 1);
    assert_eq!(store.resumes_of(&prompt_id).await.unwrap(), 0);
    // A regenerate on the prompt, and an automatic resume anchored on a continuation.
    store
        .dispatch(
            run(sid, Some(&prompt), None, Some(ProvenanceKind::Regenerate)),
            None,
        )
        .await
        .unwrap();
    let resume = NewRun {
        new_message: Some("continue"),
        anchor_id: None,
        ..run(sid, Some(&prompt), None, Some(ProvenanceKind::AutoResume))
    };
    store.dispatch(resume, None).await.unwrap();
    assert_eq!(store.tries_of(&prompt_id).await.unwrap(), 3);
    assert_eq!(store.resumes_of(&prompt_id).await.unwrap(), 1);
    assert_eq!(store.tries_of(&PromptId::new("m_other")).await.unwrap(), 0);
}

/// An agent token acts on its session's descendants only: the store answers that by walking
/// up from the target, for a grandchild as for a child, and never for the session itself, its
/// parent or an unrelated session.
#[tokio::test]
async fn descent_is_found_by_walking_up_the_family() {
    let store = open("store-descent").await;
    let new = |parent: Option<SessionId>, hash: &'static str| {
        let store = &store;
        async move {
            let s = store
                .create_session(&NewSession {
                    parent_id: parent.as_ref(),
                    ..NewSession::plain("demo", hash)
                })
                .await
                .unwrap();
            s.id
        }
    };
    let root = new(None, "h-root").await;
    let child = new(Some(root.clone()), "h-child").await;
    let grandchild = new(Some(child.clone()), "h-grandchild").await;
    let other = new(None, "h-other").await;
    let is = |a: &SessionId, b: &SessionId| {
        let (a, b) = (a.clone(), b.clone());
        let store = &store;
        async move { store.is_descendant(&a, &b).await.unwrap() }
    };
    assert!(is(&root, &child).await);
    assert!(is(&root, &grandchild).await);
    assert!(is(&child, &grandchild).await);
    assert!(
        !is(&root, &root).await,
        "a session is not its own descendant"
    );
    assert!(!is(&child, &root).await, "nor is its parent");
    assert!(!is(&root, &other).await);
    assert!(!is(&root, &SessionId::new("s_missing")).await);
}

/// The background-retry loop sleeps until the earliest waiting retry: the store names it,
/// and nothing when none waits.
#[tokio::test]
async fn the_next_waiting_retry_is_the_earliest() {
    use app::wire::{RetryClass, WaitingRetry};
    let store = open("store-next-retry").await;
    assert_eq!(store.next_waiting_retry().await.unwrap(), None);
    for (hash, fires_at) in [("h-late", 9_000), ("h-soon", 4_000)] {
        let s = store
            .create_session(&NewSession {
                auto_retry: AutoRetry::Background,
                ..NewSession::plain("demo", hash)
            })
            .await
            .unwrap();
        let waiting = WaitingRetry {
            attempt: 1,
            fires_at,
            reason: RetryClass::Overloaded,
        };
        store
            .set_waiting_retry(&s.id, &RunId::new("r_failed"), &waiting, None)
            .await
            .unwrap();
    }
    assert_eq!(store.next_waiting_retry().await.unwrap(), Some(4_000));
}

/// Issue 35, item 10: one reply's save that the database refuses never holds back the other
/// replies saved in the same batch (the saver writes them again one by one).
#[tokio::test]
async fn one_refused_save_holds_back_no_other() {
    use server::run::{Save, Saver};
    // SQLite whatever the suite runs on: the refusal is a trigger written in its dialect.
    let dir = common::temp_dir("store-bad-save");
    let url = format!("sqlite://{}", dir.join("mulligan.db").display());
    let store = Store::open(&url).await.unwrap();
    store.heartbeat("i-test").await.unwrap();
    let mut replies = Vec::new();
    for _ in 0..2 {
        let session = store
            .create_session(&NewSession::plain("demo", "hash"))
            .await
            .unwrap();
        store
            .dispatch(NewRun::prompt(&session.id, "go"), None)
            .await
            .unwrap();
        let started = store.start_next(&session.id, "i-test").await.unwrap();
        replies.push(started.expect("the run starts").reply.id);
    }
    let admin = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_poison BEFORE UPDATE OF content ON messages
         WHEN NEW.content LIKE '%poison%'
         BEGIN SELECT RAISE(ABORT, 'poison refused'); END",
    )
    .execute(&admin)
    .await
    .unwrap();

    let saver = Saver::start(store.clone());
    // Queued together: one batch.
    for (reply, text) in replies.iter().zip(["poison", "fine"]) {
        saver.save(Save {
            message_id: reply.to_string(),
            text: text.into(),
            seq: 1,
        });
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let good = store.message(&replies[1]).await.unwrap();
        if good.content == "fine" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the good reply's save was held back by the bad one: {:?}",
            good.content
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(store.message(&replies[0]).await.unwrap().content, "");
}
