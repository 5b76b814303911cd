//! The real `vigil` executable as a child process, for tests of what only a process shows:
//! its log, its signals (SIGTERM drains, SIGKILL loses nothing acknowledged), its flags.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{DevCredentials, vigil_binary};

/// A `vigil serve` process on a free port, its log lines streamed back.
pub struct Served {
    pub child: Child,
    pub base: String,
    pub log: mpsc::Receiver<String>,
    pub seen: Vec<String>,
    pub creds: Option<DevCredentials>,
    pub dir: Option<tempfile::TempDir>,
}

impl Served {
    /// `vigil serve` on a fresh data dir.
    pub fn start(extra: &[&str]) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let mut served = Self::spawn(dir.path(), extra);
        served.dir = Some(dir);
        served
    }

    /// `vigil serve` again on an existing data dir.
    pub fn start_in(dir: &Path) -> Served {
        Self::spawn(dir, &[])
    }

    /// `vigil serve` on an existing (or new) data dir with more flags.
    pub fn start_in_with(dir: &Path, extra: &[&str]) -> Served {
        Self::spawn(dir, extra)
    }

    fn spawn(dir: &Path, extra: &[&str]) -> Served {
        let mut child = Command::new(vigil_binary())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                dir.to_str().unwrap(),
            ])
            .args(extra)
            .env(
                "VIGIL_LOG",
                std::env::var("VIGIL_SERVED_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("vigil starts");
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut served = Served {
            child,
            base: String::new(),
            log,
            seen: Vec::new(),
            creds: None,
            dir: None,
        };
        let line = served.wait_for("vigil is serving");
        let addr = line
            .split("addr=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .expect("address in the log");
        served.base = format!("http://{addr}");
        // Only a process on the embedded store writes the development organization.
        served.creds = std::fs::read(dir.join("credentials.json"))
            .ok()
            .map(|creds| serde_json::from_slice(&creds).expect("credentials parse"));
        served
    }

    pub fn creds(&self) -> &DevCredentials {
        self.creds.as_ref().expect("started")
    }

    /// Waits (up to 10 s) for a log line containing `needle` and returns it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(needle)) {
            return l.clone();
        }
        loop {
            let line = self
                .log
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| {
                    panic!(
                        "no log line with {needle:?}; saw:\n{}",
                        self.seen.join("\n")
                    )
                });
            self.seen.push(line.clone());
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Kills the process with SIGKILL (no destructor runs, nothing is flushed) and reaps it.
    pub fn kill(&mut self) {
        // `Child::kill` is SIGKILL on Unix.
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }

    /// Sends SIGTERM without waiting for the process to stop.
    pub fn signal_term(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits (up to 10 s) for the process to stop on its own.
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("vigil did not stop within 10 s");
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal_term();
        self.wait_exit()
    }

    pub fn all_logs(&mut self) -> String {
        while let Ok(l) = self.log.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(l);
        }
        self.seen.join("\n")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
