//! Starts the real `keel` binary on free ports with a temp data dir, for integration tests.

#![allow(dead_code)]

pub mod client;
pub mod netns;
pub mod replicated;

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Broker {
    pub port: u16,
    pub admin_port: u16,
    pub dir: tempfile::TempDir,
    pub extra: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The address it listens on and clients reach it at (127.0.0.1 unless it runs in a
    /// network namespace).
    pub host: String,
    /// The network namespace it runs in (`ip netns exec`), if any.
    pub netns: Option<String>,
    child: Option<Child>,
    log: PathBuf,
}

/// A free port that this test process has not handed out before. The kernel may hand out the
/// same free port twice in a row, and every port here is bound later by a broker: a Kafka port
/// equal to an admin port sends clients to the HTTP server (both use SO_REUSEPORT), one equal
/// to another node's controller port stops that broker from starting.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A Kafka port and a different admin port (see [`free_port`]).
fn kafka_and_admin_ports() -> (u16, u16) {
    (free_port(), free_port())
}

impl Broker {
    pub fn start(extra: &[&str]) -> Broker {
        Self::start_with_env(extra, &[])
    }

    /// Starts keel with extra flags and environment variables.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("keel.log");
        let (port, admin_port) = kafka_and_admin_ports();
        let mut b = Broker {
            port,
            admin_port,
            dir,
            extra: with_controller_protocol(extra),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            host: "127.0.0.1".into(),
            netns: None,
            child: None,
            log,
        };
        b.spawn();
        b
    }

    pub fn bootstrap(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A broker on free ports with a temp data dir, not started yet.
    /// A broker with these flags; a cluster member's controller listener is mapped to
    /// PLAINTEXT explicitly (see [`with_controller_protocol`]).
    pub fn prepare(extra: &[&str]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("keel.log");
        let (port, admin_port) = kafka_and_admin_ports();
        Broker {
            port,
            admin_port,
            dir,
            extra: with_controller_protocol(extra),
            env: Vec::new(),
            host: "127.0.0.1".into(),
            netns: None,
            child: None,
            log,
        }
    }

    fn spawn(&mut self) {
        let log_start = self.spawn_nowait();
        self.wait_serving(log_start);
    }

    /// Starts the process; returns the log position to wait from.
    pub fn spawn_nowait(&mut self) -> usize {
        let log_start = std::fs::metadata(&self.log)
            .map(|m| m.len() as usize)
            .unwrap_or(0);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = match &self.netns {
            // `ip netns exec` execs keel in place: the child's pid is keel's.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_keel")]);
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_keel")),
        };
        // A broker given Kafka's `listeners` takes its addresses from there (`port` is then
        // the one a test's clients use); else `--listen`.
        let listen: Vec<String> = if self.extra.iter().any(|a| a.starts_with("listeners=")) {
            Vec::new()
        } else {
            vec!["--listen".into(), self.bootstrap()]
        };
        let child = command
            .arg("serve")
            .args(&listen)
            .args(["--admin", &format!("{}:{}", self.host, self.admin_port)])
            .args(["--data-dir", self.data_dir().to_str().unwrap()])
            .args(["--smp", "2"])
            .args(&self.extra)
            // Groups form without Kafka's 3 s initial rebalance delay unless a test asks for
            // it (a flag or the test's own environment overrides this).
            .env("KEEL_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(
                "RUST_LOG",
                std::env::var("TEST_KEEL_LOG").unwrap_or_else(|_| "info,openraft=warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start keel");
        self.child = Some(child);
        log_start
    }

    /// Waits until the process started at `log_start` serves.
    pub fn wait_serving(&mut self, log_start: usize) {
        // Ready when every shard says it serves (the start line names the shard count). (A
        // successful connect alone is not proof: right after a kill -9 the dead process's
        // listening socket can linger.)
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let text = self.log_text();
            let since = text.get(log_start..).unwrap_or("");
            let shards = since
                .split("shards\u{1b}[0m\u{1b}[2m=\u{1b}[0m")
                .nth(1)
                .or_else(|| since.split("shards=").nth(1))
                .and_then(|rest| {
                    rest.split(|c: char| !c.is_ascii_digit())
                        .next()?
                        .parse::<usize>()
                        .ok()
                })
                .unwrap_or(2);
            if since.matches("shard serving").count() >= shards
                && TcpStream::connect((self.host.as_str(), self.port)).is_ok()
            {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("keel exited with {status}; log:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("keel did not start serving; log:\n{}", self.log_text());
    }

    /// SIGKILL, no restart.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Sends a signal by name (STOP, CONT, ...).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// GET `path` from the admin endpoint; the body.
    pub fn admin_get(&self, path: &str) -> String {
        use std::io::Write;
        let mut s = TcpStream::connect((self.host.as_str(), self.admin_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, then start again on the same ports and data dir.
    pub fn kill9_and_restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        self.spawn();
    }

    /// SIGTERM and wait for a clean exit; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        self.stop_within(Duration::from_secs(20))
    }

    /// SIGTERM and wait up to `limit` for a clean exit (a broker with thousands of logs to
    /// sync and close takes longer); returns the exit status code.
    pub fn stop_within(&mut self, limit: Duration) -> Option<i32> {
        let mut c = self.child.take()?;
        unsafe_sigterm(c.id());
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = c.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        c.kill().unwrap();
        c.wait().unwrap();
        panic!(
            "keel did not stop on SIGTERM within {limit:?}; log:\n{}",
            self.log_text()
        );
    }

    pub fn restart_after_stop(&mut self) {
        self.spawn();
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// GET /metrics from the admin endpoint.
    pub fn metrics(&self) -> String {
        use std::io::Write;
        let mut s = TcpStream::connect((self.host.as_str(), self.admin_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Sum per shard of a metric family: value for each `shard="N"` label.
    pub fn metric_by_shard(&self, name: &str) -> Vec<u64> {
        let text = self.metrics();
        let mut out = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&format!("{name}{{"))) {
            let shard: usize = line
                .split("shard=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let v: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
            if out.len() <= shard {
                out.resize(shard + 1, 0);
            }
            out[shard] += v;
        }
        out
    }
}

fn unsafe_sigterm(pid: u32) {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- keel log ----\n{}", self.log_text());
        }
    }
}

/// `extra`, and for a node with controller traffic (`--controller-listen`) its controller
/// listener mapped to PLAINTEXT in `listener.security.protocol.map`, which a broker needs
/// explicitly (or SSL): added to the map `extra` sets, or set with the default PLAINTEXT
/// listener. A map that already names CONTROLLER is left as it is.
pub fn with_controller_protocol(extra: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    if !out.iter().any(|a| a == "--controller-listen") {
        return out;
    }
    const MAP: &str = "listener.security.protocol.map=";
    match out.iter_mut().find(|a| a.starts_with(MAP)) {
        Some(map) if map.contains("CONTROLLER:") => {}
        Some(map) => map.push_str(",CONTROLLER:PLAINTEXT"),
        None => {
            out.push("--set".into());
            out.push(format!("{MAP}PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"));
        }
    }
    out
}
