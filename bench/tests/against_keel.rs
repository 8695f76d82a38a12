//! keel-bench against the real `keel` binary: a short workload with --verify loses,
//! duplicates and reorders nothing; `compare` of two Keel instances yields both rows; the
//! same over SASL_SSL (SCRAM-SHA-512) and mTLS listeners, and `setups` per shard, with
//! certificates the openssl CLI makes at test time.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The keel binary next to keel-bench (the workspace build puts both in target/<profile>).
fn keel_bin() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_BIN_EXE_keel-bench")).with_file_name("keel");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace)",
        p.display()
    );
    p
}

struct Keel {
    child: Child,
    port: u16,
    admin: u16,
    _dir: tempfile::TempDir,
}

impl Keel {
    fn start() -> Keel {
        Keel::start_with(|port| vec!["--listen".into(), format!("127.0.0.1:{port}")])
    }

    /// A broker with the arguments `args(port)` gives for its PLAINTEXT port `port`.
    fn start_with(args: impl FnOnce(u16) -> Vec<String>) -> Keel {
        let dir = tempfile::tempdir().unwrap();
        // Two different ports: the kernel may hand out the same free port twice in a row.
        let port = free_port();
        let admin = loop {
            let admin = free_port();
            if admin != port {
                break admin;
            }
        };
        let log = std::fs::File::create(dir.path().join("keel.log")).unwrap();
        let child = Command::new(keel_bin())
            .args(args(port))
            .args(["--admin", &format!("127.0.0.1:{admin}")])
            .args([
                "--data-dir",
                dir.path().join("data").to_str().unwrap(),
                "--smp",
                "2",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = std::fs::read_to_string(dir.path().join("keel.log")).unwrap_or_default();
            if log.matches("shard serving").count() >= 2
                && TcpStream::connect(("127.0.0.1", port)).is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "keel did not start: {log}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Keel {
            child,
            port,
            admin,
            _dir: dir,
        }
    }
}

impl Drop for Keel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_keel-bench"))
}

#[test]
fn verify_finds_nothing_lost_duplicated_or_reordered() {
    let keel = Keel::start();
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--verify",
            "--quiet",
        ])
        .args(["--metrics", &format!("127.0.0.1:{}", keel.admin)])
        .args(["--target-pid", &keel.child.id().to_string()])
        .args([
            "--set",
            "partitions_per_topic=6",
            "--set",
            "producers_per_topic=8",
            "--set",
            "consumers_per_topic=2",
        ])
        .args([
            "--set",
            "compression=lz4",
            "--set",
            "key_distribution=random",
            "--set",
            "message_size=200",
        ])
        .args(["--rate", "3000", "--warmup", "1", "--duration", "3"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        result.status.success(),
        "keel-bench failed: {stdout}\n{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("result.json")).unwrap())
            .unwrap();
    let v = &json["verify"];
    assert!(v["acked"].as_u64().unwrap() > 5000, "{v}");
    assert_eq!(v["acked"], v["consumed"], "{v}");
    assert_eq!(
        (
            v["lost"].as_u64(),
            v["duplicated"].as_u64(),
            v["reordered"].as_u64()
        ),
        (Some(0), Some(0), Some(0))
    );
    // The offset checker saw every acknowledgement with its offset (acks=all) and one full
    // pass per partition, and found nothing wrong.
    let l = &v["ledger"];
    assert_eq!(l["acked_all"], v["acked"], "{l}");
    assert_eq!(l["acked_offset_unknown"].as_u64(), Some(0), "{l}");
    assert_eq!(l["read"], v["acked"], "{l}");
    assert_eq!(l["passes"].as_u64(), Some(6), "{l}");
    for kind in [
        "lost_acks_all",
        "offset_conflicts",
        "duplicated",
        "changed",
        "gone",
        "misplaced",
        "untracked",
    ] {
        assert_eq!(l[kind].as_u64(), Some(0), "{kind}: {l}");
    }
    assert!(stdout.contains("verify offsets"), "{stdout}");
    assert_eq!(
        json["errors"].as_u64(),
        Some(0),
        "{}",
        json["error_samples"]
    );
    // At 3000 rec/s for 3 s the measured count is about 9000.
    let produced = json["produced_records"].as_u64().unwrap();
    assert!((7000..=11000).contains(&produced), "produced {produced}");
    assert!(json["publish_latency"]["p99_ms"].as_f64().unwrap() > 0.0);
    assert!(json["e2e_latency"]["count"].as_u64().unwrap() > 0);
    let shards = json["shards"]
        .as_array()
        .expect("per-shard profile from /metrics");
    assert_eq!(shards.len(), 2);
    assert!(shards.iter().all(|s| s["requests"].as_u64().unwrap() > 0));
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(
        html.matches("<svg").count() >= 2,
        "the report has the two plots"
    );
    assert!(stdout.contains("lost"), "{stdout}");
    // Every report carries the machine probe (a quick one by default) and ratios to it.
    assert!(
        json["probe"]["disk_write_mb_per_s"].as_f64().unwrap() > 0.0,
        "{}",
        json["probe"]
    );
    assert!(stdout.contains("against the machine probe"), "{stdout}");
    // The broker's CPU from /proc/PID/stat, per GB moved, against the floor of the same shape:
    // 200-byte records paced at 3000 × 200 B/s; 8 producers at 375 records/s each gather less
    // than one record per 1 ms linger, so each request (and each floor frame) is one record,
    // not the 16 KiB batch.
    let cpu = &json["target_cpu"];
    assert_eq!(
        cpu["source"].as_str(),
        Some(format!("/proc/{}/stat", keel.child.id()).as_str()),
        "{cpu}"
    );
    assert!(cpu["total_s"].as_f64().unwrap() > 0.0, "{cpu}");
    let floor = &json["probe"]["floor"];
    assert_eq!(floor["frame_bytes"].as_u64(), Some(200), "{floor}");
    assert_eq!(floor["rate_bytes_per_s"].as_u64(), Some(600_000), "{floor}");
    assert_eq!(floor["bytes_received"], floor["bytes_asked"], "{floor}");
    assert_eq!(
        floor["bytes_sent_to_reader"], floor["bytes_asked"],
        "{floor}"
    );
    assert!(
        floor["user_s"].as_f64().unwrap() + floor["system_s"].as_f64().unwrap() > 0.0,
        "{floor}"
    );
    assert!(json["tool_cpu_user_s"].as_f64().unwrap() > 0.0);
    assert!(stdout.contains("CPU per GB moved"), "{stdout}");
    let ratio_line = stdout
        .lines()
        .find(|l| l.contains("target CPU per GB / floor CPU per GB: x"))
        .unwrap_or_else(|| panic!("no ratio to the floor in {stdout}"));
    assert!(!ratio_line.contains(" -"), "{ratio_line}");
}

#[test]
fn max_messages_counts_only_the_measured_phase() {
    let keel = Keel::start();
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--quiet",
            "--no-probe",
        ])
        .args([
            "--set",
            "producers_per_topic=2",
            "--set",
            "max_messages=500",
        ])
        .args(["--rate", "2000", "--warmup", "0.5", "--duration", "20"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("result.json")).unwrap())
            .unwrap();
    // Two producers, 500 measured records each; warm-up records are not counted.
    assert_eq!(json["produced_records"].as_u64(), Some(1000), "{json}");
}

#[test]
fn compare_two_keels_gives_both_rows() {
    let (a, b) = (Keel::start(), Keel::start());
    let out = tempfile::tempdir().unwrap();
    let result = bench()
        .args([
            "compare",
            &format!("alpha=127.0.0.1:{}", a.port),
            &format!("beta=127.0.0.1:{}", b.port),
        ])
        .args([
            "--rounds",
            "2",
            "--rate",
            "2000",
            "--warmup",
            "1",
            "--duration",
            "2",
            "--quiet",
        ])
        .args(["--set", "message_size=100"])
        .args(["--out", out.path().to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    let table: Vec<&str> = stdout.lines().collect();
    assert!(
        table.iter().any(|l| l.contains("alpha")) && table.iter().any(|l| l.contains("beta")),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("compare.json")).unwrap())
            .unwrap();
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "2 rounds x 2 targets");
    let names: Vec<&str> = runs.iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        vec!["alpha", "beta", "beta", "alpha"],
        "rounds alternate the order"
    );
    for r in runs {
        assert!(r["produced_records"].as_u64().unwrap() > 1000, "{r}");
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(html.contains("alpha") && html.contains("beta"));
}

#[test]
fn clear_errors_for_an_unreachable_target() {
    let port = free_port();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{port}"),
            "--quiet",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(err.contains("cannot connect to 127.0.0.1"), "{err}");
}

#[test]
fn clear_error_for_a_missing_topic() {
    let keel = Keel::start();
    let result = bench()
        .args([
            "run",
            "--bootstrap",
            &format!("127.0.0.1:{}", keel.port),
            "--quiet",
            "--duration",
            "1",
        ])
        .args([
            "--set",
            "create_topics=false",
            "--set",
            "topic_prefix=absent",
        ])
        .output()
        .unwrap();
    assert_eq!(result.status.code(), Some(2));
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(
        err.contains("topic \"absent-custom-0\" does not exist"),
        "{err}"
    );
}

/// PEM files made with the openssl CLI, as tests/python/conftest.py's `certs` fixture does (no
/// key is committed): ca.pem, keystore.pem (the broker's key and certificate for 127.0.0.1),
/// client.pem and client.key. False when there is no openssl.
fn make_certs(d: &Path) -> bool {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    if Command::new("openssl").arg("version").output().is_err() {
        return false;
    }
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=Keel Test CA",
    ]);
    std::fs::write(
        d.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    std::fs::write(
        d.join("client.cnf"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    for (name, subj, ext) in [
        ("broker", "/CN=localhost", "san.cnf"),
        ("client", "/O=Keel/OU=Tests/CN=client-one", "client.cnf"),
    ] {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        openssl(&[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subj,
        ]);
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            ext,
        ]);
    }
    let keystore = [
        std::fs::read_to_string(d.join("broker.key")).unwrap(),
        std::fs::read_to_string(d.join("broker.pem")).unwrap(),
    ]
    .concat();
    std::fs::write(d.join("keystore.pem"), keystore).unwrap();
    true
}

/// A broker with PLAINTEXT, SASL_SSL (SCRAM-SHA-512 user admin) and MTLS (SSL, client
/// certificate required) listeners; their ports.
fn secure_keel(certs: &Path) -> (Keel, u16, u16) {
    let (sasl_ssl, mtls) = (free_port(), free_port());
    let path = |f: &str| certs.join(f).to_str().unwrap().to_string();
    let keel = Keel::start_with(|port| {
        [
            "--set".to_string(),
            format!(
                "listeners=PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl},MTLS://127.0.0.1:{mtls}"
            ),
            "--set".into(),
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL".into(),
            "--set".into(),
            format!("ssl.keystore.location={}", path("keystore.pem")),
            "--set".into(),
            format!("ssl.truststore.location={}", path("ca.pem")),
            "--set".into(),
            "listener.name.mtls.ssl.client.auth=required".into(),
            "--set".into(),
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512".into(),
            "--add-scram".into(),
            "SCRAM-SHA-512=[name=admin,password=admin-pw]".into(),
        ]
        .into()
    });
    (keel, sasl_ssl, mtls)
}

/// A short verified run over `address` with `extra` flags and the password variable set to
/// `password`.
fn secure_run(address: &str, extra: &[&str], password: &str) -> std::process::Output {
    bench()
        .args(["run", "--bootstrap", address, "--verify", "--quiet"])
        .args(extra)
        .args([
            "--set",
            "partitions_per_topic=2",
            "--set",
            "message_size=200",
        ])
        .args([
            "--rate",
            "2000",
            "--warmup",
            "1",
            "--duration",
            "2",
            "--no-probe",
        ])
        .args([
            "--out",
            tempfile::tempdir().unwrap().path().to_str().unwrap(),
        ])
        .env("KB_TEST_PASSWORD", password)
        .output()
        .unwrap()
}

#[test]
fn sasl_ssl_and_mtls_runs_and_scram_setups_per_shard() {
    let certs = tempfile::tempdir().unwrap();
    if !make_certs(certs.path()) {
        eprintln!("no openssl: skipped");
        return;
    }
    let ca = certs.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let (keel, sasl_ssl, mtls) = secure_keel(certs.path());
    let scram = [
        "--ssl-ca",
        ca,
        "--sasl-mechanism",
        "SCRAM-SHA-512",
        "--sasl-username",
        "admin",
        "--sasl-password-env",
        "KB_TEST_PASSWORD",
    ];

    let sasl_addr = format!("SASL_SSL://127.0.0.1:{sasl_ssl}");
    let r = secure_run(&sasl_addr, &scram, "admin-pw");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(
        stdout.contains("security: SASL_SSL (SCRAM-SHA-512 as admin)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("admin-pw"),
        "the password stays out of reports"
    );

    // A wrong password: the broker's error code and message, before any load.
    let r = secure_run(&sasl_addr, &scram, "wrong");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("SASL login of admin failed (error 58): SASL_AUTHENTICATION_FAILED"),
        "{stderr}"
    );

    // mTLS: the client certificate opens the listener; without it the broker refuses.
    let cert = certs.path().join("client.pem");
    let key = certs.path().join("client.key");
    let mtls_addr = format!("SSL://127.0.0.1:{mtls}");
    let with_cert = [
        "--ssl-ca",
        ca,
        "--ssl-cert",
        cert.to_str().unwrap(),
        "--ssl-key",
        key.to_str().unwrap(),
    ];
    let r = secure_run(&mtls_addr, &with_cert, "");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(
        stdout.contains("security: SSL (client certificate)"),
        "{stdout}"
    );
    let r = secure_run(&mtls_addr, &["--ssl-ca", ca], "");
    assert_eq!(r.status.code(), Some(2), "{r:?}");

    // keel-client's pool (the broker's WriteTxnMarkers client) over the same listener.
    pool_logs_in_over_sasl_ssl(sasl_ssl, ca);

    // SCRAM setups, per shard of the broker's /metrics (2 shards).
    let out = tempfile::tempdir().unwrap();
    let r = bench()
        .args(["setups", "--bootstrap", &sasl_addr])
        .args(scram)
        .args(["--metrics", &format!("127.0.0.1:{}", keel.admin)])
        .args(["--connections", "40", "--concurrency", "4"])
        .args(["--out", out.path().to_str().unwrap()])
        .env("KB_TEST_PASSWORD", "admin-pw")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(stdout.contains("40 setups (0 failed)"), "{stdout}");
    assert!(
        stdout.contains("per shard (2 shards, from /metrics)"),
        "{stdout}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("setups.json")).unwrap()).unwrap();
    assert_eq!(json["setups"], 40);
    assert!(
        json["shard_cpu_ms_per_setup"].as_f64().unwrap() > 0.0,
        "{json}"
    );
}

/// keel-client's `Pool` over SASL_SSL: a request after the TLS handshake and the SCRAM login,
/// the connection pooled and reused; a wrong password is the broker's error 58.
fn pool_logs_in_over_sasl_ssl(port: u16, ca: &str) {
    use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
    use keel_client::aio::{Pool, PoolConfig};
    use keel_client::security::{tls_client_config, SaslLogin, Security};
    use keel_client::ClientError;

    let security = |password: &str| Security {
        tls: Some(tls_client_config(Path::new(ca), None).unwrap()),
        sasl: Some(SaslLogin {
            mechanism: "SCRAM-SHA-512".into(),
            username: "admin".into(),
            password: password.into(),
        }),
    };
    async fn ask(
        pool: &Pool,
        addr: std::net::SocketAddr,
    ) -> Result<ApiVersionsResponse, ClientError> {
        let req = ApiVersionsRequest::default();
        pool.request(1, addr, "keel-bench-test", ApiKey::ApiVersions, 3, &req)
            .await
    }
    let (good, bad) = (security("admin-pw"), security("wrong"));
    let config = PoolConfig {
        connect_timeout_ms: 10_000,
        request_timeout_ms: 10_000,
        response_bytes_max: 1 << 20,
        idle_per_target_max: 1,
    };
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .make()
        .unwrap()
        .run(async move {
            let pool = Pool::new(config, good);
            for _ in 0..2 {
                let r = ask(&pool, addr).await.unwrap();
                assert_eq!(r.error_code, 0);
                assert!(!r.api_keys.is_empty());
            }
            let refused = ask(&Pool::new(config, bad), addr).await.unwrap_err();
            assert!(
                matches!(&refused, ClientError::Authentication { error_code, .. } if error_code.code() == 58),
                "{refused:?}"
            );
        });
}
