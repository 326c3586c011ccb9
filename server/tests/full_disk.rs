//! A full disk under the default SQLite store (CONTRACT §2): the data dir on a 4 MiB tmpfs
//! that a file fills while replies stream. Writes meanwhile answer 507 `storage.full` (never
//! 500), nothing acknowledged is lost, and once the file is deleted every write lands and
//! every run ends with its text: no connection goes back to the pool with a transaction
//! half open.
use testkit as common;

use app::wire::RunStatus;
use common::fake::{FakeProvider, Script};
use common::{config, temp_dir, TestServer};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmpfs of `size` mounted at a new dir, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = temp_dir("full-disk");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(&dir)
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "this test mounts a tmpfs and cannot here (it needs root and a sandbox that allows mounts): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Writes into `path` until the disk has no byte left.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).expect("the filler");
    let block = vec![b'x'; 64 * 1024];
    loop {
        if f.write_all(&block).is_err() {
            break;
        }
    }
    // The last bytes, one at a time.
    while f.write_all(b"x").is_ok() {}
    let _ = f.sync_all();
}

/// A session titled `title`: its id when the server took it, or the refusal's status and code.
async fn create(server: &TestServer, title: &str) -> Result<String, (u16, String)> {
    let (status, body) = server.post("/sessions", json!({"title": title})).await;
    match status {
        201 => Ok(body["id"].as_str().expect("an id").to_string()),
        s => Err((s, body["error"]["code"].as_str().unwrap_or("").to_string())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "mounts a tmpfs, as root (run with --include-ignored in the PostgreSQL pass)"]
async fn a_full_disk_refuses_writes_clearly_and_everything_lands_once_space_returns() {
    let disk = Tmpfs::mount("4m");
    let fake = FakeProvider::start().await;
    let mut c = config(&disk.0, &fake.url);
    // SQLite whatever the suite runs on: the default store is the one under test.
    c.database_url = Some(format!("sqlite://{}/mulligan.db", disk.0.display()));
    let server = TestServer::start(c).await;

    // Three replies complete.
    let words: Vec<String> = (0..40).map(|i| format!("word{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let whole: String = words.concat();
    let mut acknowledged = Vec::new();
    for i in 0..3 {
        let sid = create(&server, &format!("before {i}"))
            .await
            .expect("created");
        fake.push(Script::reply(&words));
        let r = server.send(&sid, "go").await;
        assert_eq!(
            server.wait_run_end(&r.run_id).await.status,
            RunStatus::Completed
        );
        acknowledged.push(sid);
    }
    // Three more are streaming when a file takes the last free byte.
    fake.set_default(Script::slow(60, Duration::from_millis(50)));
    let mut streaming = Vec::new();
    for i in 0..3 {
        let sid = create(&server, &format!("streaming {i}"))
            .await
            .expect("created");
        let r = server.send(&sid, "go").await;
        acknowledged.push(sid.clone());
        streaming.push((sid, r.run_id));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let filler = disk.0.join("filler");
    fill(&filler);

    // While the disk is full: each write is refused as such, or lands.
    let full_until = Instant::now() + Duration::from_secs(4);
    let mut refused = 0;
    let mut i = 0;
    while Instant::now() < full_until {
        match create(&server, &format!("during {i}")).await {
            Ok(sid) => acknowledged.push(sid),
            Err((status, code)) => {
                assert_eq!((status, code.as_str()), (507, "storage.full"));
                refused += 1;
            }
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        refused > 0,
        "the full disk refused no write: the test filled nothing"
    );

    // Space returns.
    std::fs::remove_file(&filler).expect("the filler goes");
    for i in 0..6 {
        let sid = create(&server, &format!("after {i}"))
            .await
            .unwrap_or_else(|e| panic!("a write after the disk came back was refused: {e:?}"));
        let (status, body) = server.get(&format!("/sessions/{sid}")).await;
        assert_eq!(status, 200, "what was acknowledged reads back: {body}");
        acknowledged.push(sid);
    }
    // Every run that was streaming ends, its text kept.
    for (sid, run_id) in &streaming {
        let deadline = Instant::now() + Duration::from_secs(60);
        let run = loop {
            let (status, body) = server.get(&format!("/runs/{run_id}")).await;
            assert_eq!(status, 200, "{body}");
            let run: app::wire::Run = serde_json::from_value(body["run"].clone()).unwrap();
            if !run.status.is_active() {
                break run;
            }
            assert!(
                Instant::now() < deadline,
                "run {run_id} never ended: {run:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let reply = server
            .detail(sid)
            .await
            .messages
            .into_iter()
            .find(|m| m.run_id.as_ref() == Some(run_id))
            .expect("the reply");
        // The whole text, or an end that says the disk was why (never a reply cut short
        // with nothing said).
        let slow: String = (0..60).map(|i| format!("w{i} ")).collect();
        match run.status {
            RunStatus::Completed => assert_eq!(reply.content, slow, "{run:?}"),
            _ => {
                let why = run.error_message.clone().unwrap_or_default().to_lowercase();
                assert!(
                    why.contains("disk") || why.contains("storage") || why.contains("full"),
                    "{run:?}: {:?}",
                    reply.content
                );
            }
        }
    }
    // Nothing acknowledged is lost.
    let (status, body) = server.get("/sessions?limit=1000").await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<&str> = body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    for sid in &acknowledged {
        assert!(
            listed.contains(&sid.as_str()),
            "session {sid} was acknowledged and is gone"
        );
    }
    for sid in &acknowledged[..3] {
        let d = server.detail(sid).await;
        assert!(d.messages.iter().any(|m| m.content == whole), "{sid}");
    }
}
