//! A PostgreSQL cluster of a test's own (Debian's PostgreSQL binaries, run as the `postgres`
//! user), to stop and start under a running server: a database that goes away for real.
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian keeps the PostgreSQL 15 server binaries.
const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A cluster listening on a Unix socket in its own directory only: no TCP port to pick, so
/// none another process can take between two starts.
pub struct Cluster {
    dir: PathBuf,
}

/// Why a cluster of the test's own cannot run here (`None`: it can).
pub fn cluster_unavailable() -> Option<String> {
    if !Path::new(BIN).join("initdb").exists() {
        return Some(format!("no PostgreSQL server binaries in {BIN}"));
    }
    let root = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&root.stdout).trim() != "0" {
        return Some("starting a cluster as the postgres user needs root".into());
    }
    None
}

fn as_postgres(args: &[&str]) -> std::process::Output {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .args(args)
        .output()
        .expect("runuser runs");
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Cluster {
    /// Makes and starts a cluster on its own socket (trust auth for the `postgres` user).
    pub fn start(tag: &str) -> Cluster {
        if let Some(why) = cluster_unavailable() {
            panic!("a PostgreSQL cluster of the test's own cannot run here: {why}");
        }
        let dir = crate::temp_dir(&format!("pg-{tag}"));
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .expect("chown runs");
        assert!(chown.success());
        let data = dir.join("data");
        as_postgres(&[
            &format!("{BIN}/initdb"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-D",
            data.to_str().unwrap(),
        ]);
        let cluster = Cluster { dir };
        cluster.up();
        cluster
    }

    /// The cluster's database URL: its socket, in its directory.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@localhost/postgres?host={}",
            self.dir.display()
        )
    }

    /// Starts the (stopped) cluster and waits until it takes connections.
    pub fn up(&self) {
        let data = self.dir.join("data");
        let opts = format!(
            "-k {} -c listen_addresses='' -c fsync=off",
            self.dir.display()
        );
        as_postgres(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            self.dir.join("log").to_str().unwrap(),
            "-w",
            "start",
        ]);
    }

    /// Stops the cluster as a crash would: every backend killed, nothing flushed.
    pub fn crash(&self) {
        let data = self.dir.join("data");
        as_postgres(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            data.to_str().unwrap(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--", &format!("{BIN}/pg_ctl"), "-D"])
            .arg(&data)
            .args(["-m", "immediate", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
