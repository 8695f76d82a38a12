//! The admin CLI against another Kafka-compatible broker: tansu 0.6 (Rust, sqlite storage),
//! the peer that runs on this machine (`cargo install tansu@0.6.0 --locked --features
//! dynostore,libsql`; see ../shared/peers). Topics, records with keys and headers, and the
//! cluster view must come out as they do against Keel. Where tansu is not installed the test
//! says so on stderr and checks nothing.
//!
//! What tansu 0.6 cannot do for the CLI, and so is not asserted here: CreatePartitions (not
//! advertised: `add-partitions` says so), IncrementalAlterConfigs (answers with no
//! resources), and OffsetFetch (its answer does not decode at any version), so
//! `group describe|lag|reset-offsets` end with a clear decode error.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn tansu_bin() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("tansu"))
            .collect::<Vec<_>>()
    });
    let cargo_home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/tansu"));
    on_path.chain(cargo_home).find(|p| p.is_file())
}

struct Tansu {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_tansu(bin: &PathBuf) -> Tansu {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("tcp://127.0.0.1:{port}");
    let log = std::fs::File::create(dir.path().join("tansu.log")).unwrap();
    let child = Command::new(bin)
        .current_dir(dir.path())
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "sqlite://tansu.db"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start tansu");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "tansu did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Tansu {
        child,
        port,
        _dir: dir,
    }
}

fn keel(port: u16, args: &[&str], stdin: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(args)
        .args(["-b", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    )
}

fn ok(port: u16, args: &[&str]) -> String {
    let (code, out, err) = keel(port, args, "");
    assert_eq!(code, 0, "keel {args:?}: {out}{err}");
    out
}

#[test]
fn the_cli_works_against_tansu() {
    let Some(bin) = tansu_bin() else {
        eprintln!("tansu is not installed: nothing checked (see ../shared/peers/tansu-start.sh)");
        return;
    };
    let t = start_tansu(&bin);
    let port = t.port;

    let info: Value = serde_json::from_str(&ok(port, &["cluster", "info", "--json"])).unwrap();
    let brokers = info["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 1, "{info}");
    let node = brokers[0]["id"].as_i64().unwrap();
    assert_eq!(brokers[0]["host"], "127.0.0.1", "{info}");
    assert_eq!(brokers[0]["port"], port, "{info}");

    let created = ok(port, &["topic", "create", "peer", "--partitions", "3"]);
    assert!(
        created.contains("peer") && created.contains("created"),
        "{created}"
    );
    let list: Value = serde_json::from_str(&ok(port, &["topic", "list", "--json"])).unwrap();
    let peer = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "peer")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(peer["partitions"], 3);
    let described: Value =
        serde_json::from_str(&ok(port, &["topic", "describe", "peer", "--json"])).unwrap();
    let parts = described[0]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{described}");
    assert!(parts.iter().all(|p| p["leader"] == node), "{described}");

    // Keyed records with a header, one partition each, read back exactly.
    let (code, out, err) = keel(
        port,
        &[
            "produce",
            "peer",
            "--key-separator",
            ":",
            "--header",
            "origin=cli",
            "--partition",
            "1",
        ],
        "k1:v1\nk2:v2\nk3:v3\n",
    );
    assert_eq!(code, 0, "{out}{err}");
    let consumed = ok(
        port,
        &[
            "consume",
            "peer",
            "--partition",
            "1",
            "--from-beginning",
            "--max-messages",
            "3",
            "--timeout-ms",
            "10000",
            "--format",
            "%p %o %k=%v %h",
        ],
    );
    assert_eq!(
        consumed,
        "1 0 k1=v1 origin=cli\n1 1 k2=v2 origin=cli\n1 2 k3=v3 origin=cli\n"
    );
    let one: Value = serde_json::from_str(
        ok(
            port,
            &[
                "consume",
                "peer",
                "--partition",
                "1",
                "--offset",
                "2",
                "--max-messages",
                "1",
                "--timeout-ms",
                "10000",
                "--json",
            ],
        )
        .trim(),
    )
    .unwrap();
    assert_eq!(one["key"], "k3");
    assert_eq!(one["value"], "v3");
    assert_eq!(one["offset"], 2);
    assert_eq!(one["headers"]["origin"], "cli");

    // Not offered by tansu: a clear error, exit 1.
    let (code, _, err) = keel(
        port,
        &["topic", "add-partitions", "peer", "--partitions", "4"],
        "",
    );
    assert_eq!(code, 1);
    assert!(err.contains("does not support CreatePartitions"), "{err}");

    let health = ok(port, &["cluster", "health"]);
    assert!(health.contains("Healthy: yes"), "{health}");
    assert!(health.contains("Partitions: 3"), "{health}");

    let deleted = ok(port, &["topic", "delete", "peer"]);
    assert!(deleted.contains("deleted"), "{deleted}");
    let list = ok(port, &["topic", "list"]);
    assert!(!list.contains("peer"), "{list}");
}
