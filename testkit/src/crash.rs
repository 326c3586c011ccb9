//! A server that can crash in-process: it runs on a runtime of its own, which is dropped
//! mid-work (every task ends where it stands, nothing is flushed or recorded), as `kill -9`
//! leaves a process, without the binary.
use crate::TestServer;
use server::config::Config;

/// The runtime a crashable server runs on.
pub struct Crashable {
    runtime: Option<tokio::runtime::Runtime>,
    /// Kept, never stopped: a crash gives no clean shutdown.
    _running: Option<server::Running>,
}

impl Crashable {
    /// Ends every task of the server at once: no clean shutdown, no final write.
    pub fn crash(mut self) {
        self._running = None;
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Crashable {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl TestServer {
    /// Starts a server on a runtime of its own, and a client of it; [`Crashable::crash`] kills it.
    pub async fn start_crashable(config: Config) -> (TestServer, Crashable) {
        let data_dir = config.data_dir.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        let running = runtime
            .spawn(server::start(config, false))
            .await
            .expect("the start ran")
            .expect("server starts");
        let server = TestServer {
            base: format!("http://{}", running.addr),
            token: running.token.clone(),
            running: None,
            data_dir,
            http: reqwest::Client::new(),
        };
        let crashable = Crashable {
            runtime: Some(runtime),
            _running: Some(running),
        };
        (server, crashable)
    }
}
