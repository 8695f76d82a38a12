//! The `keel` binary's command line: settings precedence (flags > file > env > defaults),
//! errors for unknown settings and flags, and locked-memory handling at start.

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

fn keel() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_keel"));
    c.env_remove("RUST_LOG");
    c
}

/// Runs keel with RLIMIT_MEMLOCK lowered to `bytes` (lowering needs no privilege).
fn with_memlock(cmd: &mut Command, bytes: u64) -> &mut Command {
    // SAFETY: setrlimit is async-signal-safe; runs in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

#[test]
fn unknown_settings_and_flags_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = keel()
        .args([
            "--set",
            "num.partitons=3",
            "--data-dir",
            dir.path().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown setting \"num.partitons\""), "{err}");

    let out = keel().arg("--bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown argument \"--bogus\""));

    let out = keel()
        .env("KEEL_NUM_PARTITIONS", "zero")
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid value \"zero\" for num.partitions")
    );

    let out = keel().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for key in [
        "--listen",
        "--advertise",
        "--data-dir",
        "--smp",
        "--admin",
        "--config",
        "log.segment.bytes",
        "auto.create.topics.enable",
    ] {
        assert!(help.contains(key), "--help lacks {key}");
    }
}

fn auto_created_partitions(b: &Broker, name: &str) -> usize {
    let mut c = Client::connect(&b.bootstrap());
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![metadata_request::MetadataRequestTopic::default(
        )
        .with_name(Some(topic(name)))]));
    let resp: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    assert_eq!(resp.topics[0].error_code, 0);
    resp.topics[0].partitions.len()
}

#[test]
fn flags_beat_the_file_which_beats_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keel.toml");
    std::fs::write(
        &file,
        "num.partitions = 4\n\"default.replication.factor\" = 1\n",
    )
    .unwrap();
    let file = file.to_str().unwrap().to_string();
    // env says 2, the file says 4: the file wins.
    let env = [("KEEL_NUM_PARTITIONS", "2")];
    let b = Broker::start_with_env(&["--config", &file], &env);
    assert_eq!(auto_created_partitions(&b, "from-file"), 4);
    drop(b);
    // A flag beats both.
    let b = Broker::start_with_env(&["--config", &file, "--set", "num.partitions=3"], &env);
    assert_eq!(auto_created_partitions(&b, "from-flag"), 3);
    drop(b);
    // The environment alone.
    let b = Broker::start_with_env(&[], &env);
    assert_eq!(auto_created_partitions(&b, "from-env"), 2);
}

#[test]
fn locked_memory_is_fitted_or_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d");
    // 64 KiB cannot hold even glommio's minimum for 2 shards: exit, naming the limit.
    let out = with_memlock(
        keel().args([
            "--smp",
            "2",
            "--data-dir",
            data.to_str().unwrap(),
            "--admin",
            "off",
        ]),
        65536,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("RLIMIT_MEMLOCK is 65536 bytes") && err.contains("ulimit -l"),
        "{err}"
    );

    // 1 MiB: io_memory is sized down to fit (3 registrations x 2 shards), and the log says so.
    let port = common::free_port();
    let child = with_memlock(
        keel()
            .env("RUST_LOG", "info")
            .args([
                "--smp",
                "2",
                "--data-dir",
                data.to_str().unwrap(),
                "--admin",
                "off",
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")]),
        1 << 20,
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut c = None;
    for _ in 0..200 {
        if let Ok(s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            c = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        c.is_some(),
        "keel did not start under a 1 MiB memlock limit"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("io_memory sized down to 131072 bytes per shard"),
        "{log}"
    );
    assert_eq!(out.status.code(), Some(0), "{log}");
}

/// A relative `--data-dir` (the default is `./keel-data`) works through a whole life: records
/// produced, SIGTERM closes every log cleanly (glommio opens directories without a directory
/// fd, so a relative path once made every log close fail with EBADF), and a restart from the
/// same relative path reads the records back.
#[test]
fn a_relative_data_dir_closes_and_reopens_its_logs() {
    let cwd = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let admin = common::free_port();
    let start = || {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cwd.path().join("keel.log"))
            .unwrap();
        keel()
            .current_dir(cwd.path())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args(["--data-dir", "rel-data", "--smp", "2"])
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let connect = || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Client::connect(&format!("127.0.0.1:{port}"));
            }
            assert!(std::time::Instant::now() < deadline, "keel did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let stop = |mut child: std::process::Child| {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0));
    };
    let child = start();
    let mut c = connect();
    create_topic(&mut c, "rel", 4);
    for p in 0..4 {
        let v = format!("value-{p}");
        assert_eq!(produce(&mut c, "rel", p, batch(&[v.as_bytes()])), 0);
    }
    drop(c);
    stop(child);
    let log = std::fs::read_to_string(cwd.path().join("keel.log")).unwrap();
    assert!(!log.contains("closing log failed"), "{log}");
    assert!(log.contains("keel stopped"), "{log}");
    assert!(cwd.path().join("rel-data/rel-0").is_dir());

    let child = start();
    let mut c = connect();
    for p in 0..4 {
        let req = fetch_request("rel", &[(p, 0, 1 << 20)], 0, 0, 1 << 20);
        let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
        let part = &resp.responses[0].partitions[0];
        assert_eq!(part.error_code, 0, "{part:?}");
        assert_eq!(
            values(&part.records),
            vec![(0, format!("value-{p}").into_bytes())]
        );
    }
    drop(c);
    stop(child);
    let log = std::fs::read_to_string(cwd.path().join("keel.log")).unwrap();
    assert!(!log.contains("closing log failed"), "{log}");
}

/// `keel --help | head -1`: stdout closed before keel writes its help is no panic, exit 0.
#[test]
fn help_into_a_closed_pipe_is_not_a_panic() {
    use std::os::fd::FromRawFd;
    for args in [
        &["--help"][..],
        &["profile", "--help"][..],
        &["--version"][..],
    ] {
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills two fds; the read end is closed at once, so every write to
        // the other end fails with EPIPE (Rust ignores SIGPIPE).
        let write_end = unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            libc::close(fds[0]);
            std::process::Stdio::from_raw_fd(fds[1])
        };
        let out = keel()
            .args(args)
            .stdout(write_end)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}
