//! Power loss through the real `keel` binary: its data dir lives on `keel-lazyfs`, a FUSE file
//! system that keeps unsynced writes in memory and, at a simulated power cut, keeps what was
//! synced plus a seeded subset of the unsynced 512-byte sectors (torn writes) and reverts
//! directories to their last synced entries. The broker is killed with production in flight,
//! the power is cut, and the broker restarts on what survived.
//!
//! What must hold (one node, `log.flush.policy=group`: produce is acknowledged with acks=1 and
//! acks=all only after fdatasync): every acknowledged record reads back at its offset with its
//! value; offsets are dense from the log start; no record is read twice or was never sent; the
//! topic survives; the broker stays appendable at the recovered end; and all of that again after
//! a second cut in the same run.
//!
//! Before the broker starts, a canary file with a synced head and an unsynced tail is cut too:
//! the head must survive and some of the tail must be lost, so the test fails if the file
//! system silently synced everything. (Keel itself syncs before it acknowledges, so a cut rarely
//! finds its files with unsynced sectors; the per-seed line counts them.)
//!
//! Seeded: [`CI_SEEDS`] by default, or `POWER_LOSS_SEEDS=7,8,9`. Each seed drives the file
//! system's choices (`--seed`, `--keep-per-256`) and the test's own (when to cut, which
//! partition each record goes to); the cut's timing is wall-clock, so a seed replays the
//! choices, not the exact interleaving. Where FUSE cannot be mounted the test says so and
//! passes: the simulated disk's tests stand in.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::client::{batch, create_topic, fetch_request, try_produce, values, Client};
use common::replicated::*;
use common::Broker;
use kafka_protocol::messages::{
    offset_for_leader_epoch_request, ApiKey, BrokerId, FetchResponse, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};
use rdkafka::producer::{BaseRecord, Producer, PurgeConfig};
use serde_json::Value;

/// The seeds CI runs (each: two power cuts).
const CI_SEEDS: [u64; 6] = [1, 2, 3, 4, 5, 6];
const TOPIC: &str = "power";
const PARTITIONS: i32 = 3;
/// Power cuts per seed, each followed by a restart and a full check.
const CUTS: u32 = 2;
/// Records per partition produced after each recovery, to check the log is appendable.
const APPEND_PER_PARTITION: usize = 20;
/// Records a load producer may have queued or in flight at once.
const LOAD_IN_FLIGHT_MAX: i32 = 500;
/// The longest the producers may take to be first acknowledged.
const LOAD_WAIT_MAX: Duration = Duration::from_secs(60);
const MOUNT_WAIT_MAX: Duration = Duration::from_secs(20);
/// The longest a cut waits after both producers were first acknowledged.
const CUT_DELAY_MS_MAX: u64 = 1500;
/// The canary file's synced head and unsynced tail (see [`canary_cut`]).
const CANARY_SYNCED_BYTES: usize = 64 << 10;
const CANARY_UNSYNCED_BYTES: usize = 128 << 10;

/// splitmix64: the test's only source of randomness, so a seed replays a run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The `keel-lazyfs` daemon with its mount; unmounted on drop.
struct LazyFs {
    child: Option<Child>,
    dir: tempfile::TempDir,
    mountpoint: PathBuf,
    control: PathBuf,
}

/// The daemon's counters (cumulative since it started).
#[derive(Clone, Copy, Debug)]
struct Counts {
    crashes: u64,
    sectors_kept: u64,
    sectors_lost: u64,
    entries_reverted: u64,
    sync_eio: u64,
}

impl Counts {
    fn from_reply(v: &Value) -> Counts {
        let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
        Counts {
            crashes: n("crashes"),
            sectors_kept: n("sectors_kept"),
            sectors_lost: n("sectors_lost"),
            entries_reverted: n("entries_reverted"),
            sync_eio: n("sync_eio"),
        }
    }
}

/// `target/debug/keel-lazyfs`, beside the `keel` under test.
fn lazyfs_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_keel")).with_file_name("keel-lazyfs");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p keel-lazyfs` first",
        path.display()
    );
    path
}

impl LazyFs {
    /// Mounts an empty file system with `seed`; Err(reason) where FUSE cannot be mounted.
    fn mount(seed: u64, keep_per_256: u64) -> Result<LazyFs, String> {
        let binary = lazyfs_binary();
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse".into());
        }
        let dir = tempfile::tempdir().unwrap();
        let mountpoint = dir.path().join("mnt");
        let control = dir.path().join("control.sock");
        std::fs::create_dir(&mountpoint).unwrap();
        let stderr = std::fs::File::create(dir.path().join("lazyfs.log")).unwrap();
        let mut child = Command::new(binary)
            .arg(&mountpoint)
            .args(["--seed", &seed.to_string()])
            .args(["--keep-per-256", &keep_per_256.to_string()])
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start keel-lazyfs: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut fs = LazyFs {
            child: Some(child),
            dir,
            mountpoint,
            control,
        };
        match rx.recv_timeout(MOUNT_WAIT_MAX) {
            Ok(line) if line.trim() == "ready" => Ok(fs),
            got => {
                let status = fs.stop();
                Err(format!(
                    "keel-lazyfs did not mount ({got:?}, {status}): {}",
                    fs.log().trim()
                ))
            }
        }
    }

    /// [`LazyFs::mount`], or None after saying why where FUSE cannot be mounted (the `what`
    /// test then passes: the simulated disk's results stand in).
    fn mount_or_skip(seed: u64, keep_per_256: u64, what: &str) -> Option<LazyFs> {
        match LazyFs::mount(seed, keep_per_256) {
            Ok(fs) => Some(fs),
            Err(reason) => {
                eprintln!(
                    "{what} test: FUSE cannot be mounted here: {reason}; the simulated disk's \
                     results stand in"
                );
                None
            }
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("lazyfs.log")).unwrap_or_default()
    }

    /// One command on the control socket; its JSON reply.
    fn command(&self, command: &str) -> Value {
        let mut s = UnixStream::connect(&self.control).expect("keel-lazyfs control socket");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(format!("{command}\n").as_bytes()).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        serde_json::from_str(reply.trim())
            .unwrap_or_else(|e| panic!("keel-lazyfs answered {command:?} with {reply:?}: {e}"))
    }

    /// The power cut (the broker must have exited): the counters after it.
    fn crash(&self) -> Counts {
        // The kernel may hold the mount busy for a moment after the broker was reaped.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self.command("crash");
            if reply["ok"] == Value::Bool(true) {
                return Counts::from_reply(&reply);
            }
            assert!(
                Instant::now() < deadline,
                "crash refused: {reply}; keel-lazyfs log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn counts(&self) -> Counts {
        Counts::from_reply(&self.command("counts"))
    }

    /// SIGTERM and wait for the daemon; a lazy unmount in case it could not.
    fn stop(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return "stopped".into();
        };
        // SAFETY: kill(2) on the pid of our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            match child.try_wait().unwrap() {
                Some(status) => break status.to_string(),
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break "killed after SIGTERM timed out".into();
                }
            }
        };
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .stderr(Stdio::null())
            .status();
        status
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("---- keel-lazyfs log ----\n{}", self.log());
        }
    }
}

/// Proof that a cut on this mount drops unsynced data, before the broker starts: a file with a
/// synced head and an unsynced tail, cut. The head survives whole; some of the tail's sectors
/// are lost (the draw is the seed's, and all 256 kept has odds of (K/256)^256). The sectors it
/// lost.
fn canary_cut(fs: &LazyFs) -> u64 {
    let path = fs.mountpoint.join("canary");
    let head = vec![0xA5u8; CANARY_SYNCED_BYTES];
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&head).unwrap();
    f.sync_all().unwrap();
    std::fs::File::open(&fs.mountpoint)
        .unwrap()
        .sync_all()
        .unwrap();
    f.write_all(&vec![0x5Au8; CANARY_UNSYNCED_BYTES]).unwrap();
    drop(f);
    let before = fs.counts();
    let after = fs.crash();
    let got = std::fs::read(&path).expect("the synced canary file survives");
    assert!(
        got.len() <= CANARY_SYNCED_BYTES + CANARY_UNSYNCED_BYTES
            && got.get(..head.len()) == Some(&head[..]),
        "canary: the synced head did not survive the cut ({} bytes)",
        got.len()
    );
    let lost = after.sectors_lost - before.sectors_lost;
    assert!(
        lost > 0,
        "canary: the cut dropped none of {} unsynced sectors ({after:?}): the file system did \
         not simulate loss",
        CANARY_UNSYNCED_BYTES / 512
    );
    lost
}

/// On a panic: what the mount holds, the seed and the command that replays it.
struct OnFailure {
    seed: u64,
    mountpoint: PathBuf,
}

impl Drop for OnFailure {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let out = Command::new("find")
            .arg(&self.mountpoint)
            .args(["-not", "-path", "*/__consumer_offsets-*"])
            .args(["-printf", "%10s %p\n"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        eprintln!("---- the mount after the failure (less __consumer_offsets) ----\n{out}");
        eprintln!(
            "power-loss seed {} failed; reproduce: POWER_LOSS_SEEDS={} cargo test -p keel-broker \
             --test power_loss -- --nocapture",
            self.seed, self.seed
        );
    }
}

/// A producer thread that sends records keyed `{prefix}{n}` (value `value-of-{key}`) to seeded
/// partitions as fast as the broker takes them, at most [`LOAD_IN_FLIGHT_MAX`] outstanding,
/// until stopped.
struct Load {
    reports: Reports,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<String>>,
}

impl Load {
    /// `idempotent`: acks=all with idempotence ([`producer`]); else acks=1 without retries
    /// ([`producer_acks1`]).
    fn start(bootstrap: &str, idempotent: bool, prefix: String, seed: u64) -> Load {
        let reports = Reports::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (bootstrap, r, flag) = (bootstrap.to_string(), reports.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let p = if idempotent {
                producer(&bootstrap, &r)
            } else {
                producer_acks1(&bootstrap, &r)
            };
            let mut rng = Rng(seed);
            let mut sent = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if p.in_flight_count() >= LOAD_IN_FLIGHT_MAX {
                    p.poll(Duration::from_millis(5));
                    continue;
                }
                let key = format!("{prefix}{}", sent.len());
                let value = format!("value-of-{key}");
                let partition = rng.below(PARTITIONS as u64) as i32;
                let record = BaseRecord::to(TOPIC)
                    .partition(partition)
                    .key(&key)
                    .payload(&value);
                match p.send(record) {
                    Ok(()) => sent.push(key),
                    Err(_) => {
                        p.poll(Duration::from_millis(10));
                    }
                }
                p.poll(Duration::ZERO);
            }
            // The broker is dead: drop what is queued or in flight and collect its reports.
            p.purge(PurgeConfig::default().queue().inflight());
            let _ = p.flush(Duration::from_secs(10));
            sent
        });
        Load {
            reports,
            stop,
            thread,
        }
    }

    fn acked(&self) -> usize {
        let reports = self.reports.0.lock().unwrap();
        reports.iter().filter(|r| r.is_ok()).count()
    }

    /// Stops; the keys it sent.
    fn stop(self) -> (Reports, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let sent = self.thread.join().expect("the load thread");
        (self.reports, sent)
    }
}

/// What one seed did, for the summary line.
#[derive(Default)]
struct Tally {
    acked_all: usize,
    acked_one: usize,
    sent: usize,
    /// Records in the log at the end.
    in_log: i64,
    /// Unsynced sectors of Keel's files kept and lost at the cuts.
    keel_sectors_kept: u64,
    keel_sectors_lost: u64,
    entries_reverted: u64,
}

#[test]
fn acknowledged_records_survive_power_loss() {
    let _one_mount_at_a_time = serial();
    let seeds: Vec<u64> = match std::env::var("POWER_LOSS_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("POWER_LOSS_SEEDS: comma-separated u64s")
            })
            .collect(),
        Err(_) => CI_SEEDS.to_vec(),
    };
    let started = Instant::now();
    let mut sectors_lost = 0;
    for &seed in &seeds {
        let mut rng = Rng(seed);
        let keep_per_256 = [32, 128, 224][rng.below(3) as usize];
        let Some(fs) = LazyFs::mount_or_skip(seed, keep_per_256, "power-loss") else {
            return;
        };
        let _on_failure = OnFailure {
            seed,
            mountpoint: fs.mountpoint.clone(),
        };
        let canary_lost = canary_cut(&fs);
        let tally = run_seed(seed, &mut rng, &fs);
        sectors_lost += canary_lost + tally.keel_sectors_lost;
        eprintln!(
            "power-loss seed {seed} (keep {keep_per_256}/256): {CUTS} cuts, acked acks=all {} \
             acks=1 {} of {} sent, {} in the log; Keel's unsynced sectors kept {} lost {}, \
             directory entries reverted {}; canary sectors lost {canary_lost}",
            tally.acked_all,
            tally.acked_one,
            tally.sent,
            tally.in_log,
            tally.keel_sectors_kept,
            tally.keel_sectors_lost,
            tally.entries_reverted
        );
    }
    eprintln!(
        "power-loss: {} seeds in {:.1} s, {sectors_lost} unsynced sectors dropped in all",
        seeds.len(),
        started.elapsed().as_secs_f64()
    );
}

/// One seed: a broker on the mount, [`CUTS`] power cuts with production in flight, each
/// followed by a restart and a full check of everything acknowledged so far.
fn run_seed(seed: u64, rng: &mut Rng, fs: &LazyFs) -> Tally {
    // Keel creates its data dir itself, and must make it durable (a never-synced mkdir loses
    // the whole dir at the cut).
    let data = fs.mountpoint.join("data");
    let mut b = Broker::start(&["--data-dir", data.to_str().unwrap()]);
    create(&b, TOPIC, PARTITIONS, 1, 1);
    let checker = Checker::default();
    let mut sent_keys = BTreeSet::new();
    let mut tally = Tally::default();
    for cut in 0..CUTS {
        // Production in flight from both producers; the cut at once (a quarter of the cuts,
        // right after CreateTopics for the first) or a seeded time after both were first acked.
        let delay_ms = (rng.below(4) > 0).then(|| rng.below(CUT_DELAY_MS_MAX));
        let all = Load::start(&b.bootstrap(), true, format!("all{cut}-"), rng.next());
        let one = Load::start(&b.bootstrap(), false, format!("one{cut}-"), rng.next());
        if let Some(delay_ms) = delay_ms {
            let deadline = Instant::now() + LOAD_WAIT_MAX;
            while all.acked() == 0 || one.acked() == 0 {
                assert!(
                    Instant::now() < deadline,
                    "cut {cut}: no acknowledgement in {LOAD_WAIT_MAX:?} (acks=all {}, acks=1 {})",
                    all.acked(),
                    one.acked()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(delay_ms));
        }
        b.kill9();
        let before = fs.counts();
        let after = fs.crash();
        assert_eq!(after.crashes, before.crashes + 1, "{after:?}");
        let (kept, lost) = (
            after.sectors_kept - before.sectors_kept,
            after.sectors_lost - before.sectors_lost,
        );
        tally.keel_sectors_kept += kept;
        tally.keel_sectors_lost += lost;
        tally.entries_reverted += after.entries_reverted - before.entries_reverted;
        // With one node, acks=1 is acknowledged after fdatasync too: it must survive as acks=all.
        let mut acked_now = [0; 2];
        for (load, acked) in [all, one].into_iter().zip(&mut acked_now) {
            let (reports, sent) = load.stop();
            let failed = checker.acked_reports(&reports, TOPIC, Acks::All);
            *acked = reports.0.lock().unwrap().len() - failed;
            tally.sent += sent.len();
            sent_keys.extend(sent);
        }
        tally.acked_all += acked_now[0];
        tally.acked_one += acked_now[1];
        let when = delay_ms.map_or("at once".into(), |ms| {
            format!("{ms} ms after the first acks")
        });
        eprintln!(
            "seed {seed} cut {cut}: {when}, acked acks=all {} acks=1 {}; unsynced \
             sectors kept {kept} lost {lost}",
            acked_now[0], acked_now[1]
        );
        b.restart_after_stop();
        let ends = check_recovered(&b, &checker, &sent_keys);
        append_after_recovery(&b, &checker, &ends, cut, &mut sent_keys);
    }
    // The last appended batch, read back.
    let ends = check_recovered(&b, &checker, &sent_keys);
    tally.in_log = ends.iter().sum();
    checker.assert_clean(&format!("power loss seed {seed}"));
    b.stop();
    tally
}

/// After a restart: the topic is there, every partition reads dense from offset 0 to its high
/// watermark, and the checker finds every acknowledged record in place and nothing foreign;
/// the recovered end of each partition.
fn check_recovered(b: &Broker, checker: &Checker, sent: &BTreeSet<String>) -> Vec<i64> {
    let m = metadata(b);
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC))
        .unwrap_or_else(|| panic!("topic {TOPIC} lost: {m:?}"));
    assert_eq!(t.error_code, 0, "{t:?}");
    assert_eq!(t.partitions.len(), PARTITIONS as usize, "{t:?}");
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        let (reads, end) = final_pass(checker, &b.bootstrap(), TOPIC, p);
        assert_eq!(
            reads as i64, end,
            "partition {p}: {reads} records read from offset 0 to {end}: offsets not dense"
        );
        ends.push(end);
    }
    let foreign: Vec<String> = checker
        .unacknowledged_reads()
        .into_iter()
        .filter(|k| !sent.contains(k))
        .collect();
    assert!(foreign.is_empty(), "records never sent: {foreign:?}");
    checker.assert_clean("after recovery");
    ends
}

/// The broker appends at the recovered end: a batch per partition, acknowledged at the offsets
/// right after `ends`.
fn append_after_recovery(
    b: &Broker,
    checker: &Checker,
    ends: &[i64],
    cut: u32,
    sent: &mut BTreeSet<String>,
) {
    let reports = Reports::default();
    let p = producer(&b.bootstrap(), &reports);
    for (partition, end) in ends.iter().enumerate() {
        let keys = keys(&format!("append{cut}-p{partition}"), APPEND_PER_PARTITION);
        send_all(&p, TOPIC, partition as i32, &keys);
        sent.extend(keys);
        let got: BTreeSet<i64> = acked(&reports)
            .iter()
            .filter(|(_, part, _)| *part == partition as i32)
            .map(|(_, _, o)| *o)
            .collect();
        let want: BTreeSet<i64> = (*end..end + APPEND_PER_PARTITION as i64).collect();
        assert_eq!(got, want, "partition {partition}: appended after recovery");
    }
    checker.acked_reports(&reports, TOPIC, Acks::All);
}

/// Kafka's KAFKA_STORAGE_ERROR.
const KAFKA_STORAGE_ERROR: i16 = 56;

/// Every record of `partition` of `name`: (offset, value).
fn read_partition(c: &mut Client, name: &str, partition: i32) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..1000 {
        let resp: FetchResponse = c.send(
            ApiKey::Fetch,
            12,
            &fetch_request(name, &[(partition, offset, 1 << 20)], 0, 0, 1 << 20),
        );
        let p = &resp.responses[0].partitions[0];
        assert_eq!(
            p.error_code, 0,
            "fetch of {name}-{partition} at {offset}: {p:?}"
        );
        let got = values(&p.records);
        let Some(last) = got.last().map(|(o, _)| *o) else {
            return out;
        };
        offset = last + 1;
        out.extend(got);
    }
    panic!("the fetch of {name}-{partition} did not reach the end");
}

/// A failed fdatasync on the real broker (keel-lazyfs injects EIO on the next sync under the
/// partition's directory): the produce waiting on it gets KAFKA_STORAGE_ERROR, and so does
/// every later one (the log is poisoned, never retried into a false success); the other
/// partition goes on. The records whose sync failed are not served after a restart without a
/// power cut (the log cut them back to its last synced byte: Linux would otherwise serve them
/// from the page cache and lose them at the next power cut), the partition takes writes again
/// after the restart, and a power cut then keeps everything acknowledged.
#[test]
fn a_failed_sync_is_an_error_and_never_a_later_success() {
    let _one_mount_at_a_time = serial();
    let Some(fs) = LazyFs::mount_or_skip(11, 128, "power-loss") else {
        return;
    };
    let data = fs.mountpoint.join("data");
    let mut b = Broker::start(&["--data-dir", data.to_str().unwrap()]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "eio", 2);
    let mut acked: Vec<Vec<(i64, Vec<u8>)>> = vec![Vec::new(), Vec::new()];
    let produce = |c: &mut Client, p: i32, value: String| {
        let r = try_produce(c, "eio", p, batch(&[value.as_bytes()]));
        (r.error_code, r.base_offset, value.into_bytes())
    };
    for i in 0..20 {
        for p in 0..2 {
            let (code, offset, v) = produce(&mut c, p, format!("p{p}-before-{i}"));
            assert_eq!((code, offset), (0, i), "partition {p}");
            acked[p as usize].push((offset, v));
        }
    }
    assert_eq!(fs.command("fault sync-eio data/eio-0/ once")["ok"], true);
    let (code, _, _) = produce(&mut c, 0, "p0-sync-failed".into());
    assert_eq!(code, KAFKA_STORAGE_ERROR, "the produce whose sync failed");
    let (code, _, _) = produce(&mut c, 0, "p0-after-the-failure".into());
    assert_eq!(
        code, KAFKA_STORAGE_ERROR,
        "the next sync would 'succeed' without writing: the log stays offline"
    );
    assert_eq!(fs.counts().sync_eio, 1);
    let (code, offset, v) = produce(&mut c, 1, "p1-meanwhile".into());
    assert_eq!((code, offset), (0, 20), "the other partition goes on");
    acked[1].push((offset, v));

    // A process restart, no power cut: the page cache still holds what the failed sync did
    // not write; none of it may be served.
    b.kill9();
    b.restart_after_stop();
    let mut c = Client::connect(&b.bootstrap());
    for p in 0..2 {
        assert_eq!(
            read_partition(&mut c, "eio", p),
            acked[p as usize],
            "partition {p}"
        );
    }
    let (code, offset, v) = produce(&mut c, 0, "p0-after-restart".into());
    assert_eq!(
        (code, offset),
        (0, 20),
        "writable again, right after the acknowledged end"
    );
    acked[0].push((offset, v));

    let log = b.log_text();
    assert!(
        log.contains("cut the segment back to its last synced byte"),
        "the log cut its unsynced bytes: {}",
        log.lines()
            .filter(|l| l.contains("eio"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // And a power cut keeps everything acknowledged.
    b.kill9();
    fs.crash();
    b.restart_after_stop();
    let mut c = Client::connect(&b.bootstrap());
    for p in 0..2 {
        assert_eq!(
            read_partition(&mut c, "eio", p),
            acked[p as usize],
            "partition {p}"
        );
    }
    eprintln!(
        "a failed sync: 2 produces refused with KAFKA_STORAGE_ERROR; {} + {} acknowledged \
         records read back after a restart and after a power cut",
        acked[0].len(),
        acked[1].len()
    );
}

/// A failed fdatasync in a three-broker cluster (broker 1's data dir on keel-lazyfs, which
/// fails every sync under two partition dirs from a point on): broker 1 reports those replicas
/// offline and the controller moves their leadership to other ISR members and takes broker 1
/// out of their ISRs at once, long before `replica.lag.time.max.ms` (60 s here) would. The
/// partition broker 1 led: the produce whose sync failed gets KAFKA_STORAGE_ERROR, a new
/// leader takes writes at the acknowledged end. The partition broker 1 followed: its acks=all
/// produce is acknowledged by the two others once broker 1 is out. Broker 1 answers
/// KAFKA_STORAGE_ERROR for both and Metadata lists it in `offline_replicas`. Nothing
/// acknowledged is lost, and after broker 1 restarts on a healthy disk it rejoins both ISRs.
#[test]
fn a_failed_sync_moves_leadership_to_another_replica() {
    let _one_mount_at_a_time = serial();
    let Some(fs) = LazyFs::mount_or_skip(12, 128, "offline-log") else {
        return;
    };
    let data = fs.mountpoint.join("data");
    let data = data.to_str().unwrap().to_string();
    let mut nodes = cluster_with(
        &["", "", ""],
        &["--set", "replica.lag.time.max.ms=60000"],
        |i, b| {
            if i == 0 {
                b.extra.extend(["--data-dir".to_string(), data.clone()]);
            }
        },
    );
    // Partition 0: broker 1 leads. Partition 1: broker 2 leads, broker 1 follows.
    create_assigned(&nodes[0], "moved", &[vec![1, 2, 3], vec![2, 3, 1]], 2);
    for p in 0..2 {
        wait_for_full_isr(&nodes[0], "moved", p);
    }
    let leader_of = |b: &Broker, p: i32| partition(b, "moved", p).map(|(l, _, _, _)| l);
    assert_eq!(leader_of(&nodes[0], 0), Some(1));
    assert_eq!(leader_of(&nodes[0], 1), Some(2));
    let mut acked: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
    for p in 0..2i32 {
        let leader = &nodes[index_of(leader_of(&nodes[0], p).unwrap())];
        for i in 0..10 {
            let v = format!("p{p}-before-{i}");
            let at = raw_produce(leader, "moved", p, -1, &[v.as_bytes()]);
            assert_eq!(at, Ok(i), "partition {p}");
            acked[p as usize].push(v);
        }
    }

    assert_eq!(
        fs.command("fault sync-eio data/moved-0/ always")["ok"],
        true
    );
    assert_eq!(
        fs.command("fault sync-eio data/moved-1/ always")["ok"],
        true
    );
    let failed = raw_produce(&nodes[0], "moved", 0, -1, &[b"p0-sync-failed"]);
    assert_eq!(
        failed,
        Err(KAFKA_STORAGE_ERROR),
        "the produce whose sync failed"
    );
    let took = wait_until(
        "leadership of partition 0 moves off broker 1",
        Duration::from_secs(20),
        || {
            partition(&nodes[1], "moved", 0)
                .is_some_and(|(l, _, _, isr)| l > 1 && isr.len() == 2 && !isr.contains(&1))
        },
    );
    // The follower's sync fails on the next record it fetches: this produce waits for it,
    // and is acknowledged once the controller took broker 1 out of the ISR.
    let started = Instant::now();
    let at = raw_produce_within(&nodes[1], "moved", 1, -1, &[b"p1-after"], 30_000);
    assert_eq!(at, Ok(10), "partition 1 goes on without broker 1");
    acked[1].push("p1-after".into());
    let follower_took = started.elapsed();
    let (_, _, _, isr1) = partition(&nodes[1], "moved", 1).unwrap();
    assert_eq!(isr1, vec![2, 3], "broker 1 left partition 1's ISR");
    assert!(
        took < Duration::from_secs(15) && follower_took < Duration::from_secs(15),
        "the controller moved them, not the ISR lag check ({took:?}, {follower_took:?})"
    );
    // The new leader of partition 0 takes writes at the acknowledged end. The record whose
    // sync failed on broker 1 may have reached the followers before the failure: then it is
    // at offset 10 (a produce that got an error is not known to be lost, as in Kafka).
    let new_leader = &nodes[index_of(leader_of(&nodes[1], 0).unwrap())];
    let first = raw_produce(new_leader, "moved", 0, -1, &[b"p0-after-0"]);
    match first {
        Ok(10) => {}
        Ok(11) => acked[0].push("p0-sync-failed".into()),
        other => panic!("partition 0's first write at its new leader: {other:?}"),
    }
    acked[0].push("p0-after-0".into());
    for i in 1..5 {
        let v = format!("p0-after-{i}");
        assert_eq!(
            raw_produce(new_leader, "moved", 0, -1, &[v.as_bytes()]),
            Ok(first.unwrap() + i),
            "partition 0 at its new leader"
        );
        acked[0].push(v);
    }
    // Broker 1's offline replicas: Kafka's answer, and listed as offline.
    let mut c1 = Client::connect(&nodes[0].bootstrap());
    for p in 0..2 {
        let resp: FetchResponse = c1.send(
            ApiKey::Fetch,
            12,
            &fetch_request("moved", &[(p, 0, 1 << 20)], 0, 0, 1 << 20),
        );
        assert_eq!(
            resp.responses[0].partitions[0].error_code, KAFKA_STORAGE_ERROR,
            "a fetch of partition {p} from broker 1"
        );
        let m = metadata(&nodes[1]);
        let t = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "moved"))
            .unwrap();
        let offline: Vec<i32> = t.partitions[p as usize]
            .offline_replicas
            .iter()
            .map(|b| b.0)
            .collect();
        assert_eq!(offline, vec![1], "partition {p}'s offline replicas");
    }
    let check = |nodes: &[Broker], acked: &[Vec<String>], when: &str| {
        for p in 0..2i32 {
            let leader = &nodes[index_of(leader_of(&nodes[1], p).unwrap())];
            let mut c = Client::connect(&leader.bootstrap());
            let got: Vec<(i64, String)> = read_partition(&mut c, "moved", p)
                .into_iter()
                .map(|(o, v)| (o, String::from_utf8(v).unwrap()))
                .collect();
            let want: Vec<(i64, String)> = acked[p as usize]
                .iter()
                .enumerate()
                .map(|(o, v)| (o as i64, v.clone()))
                .collect();
            assert_eq!(got, want, "partition {p} {when}");
        }
    };
    check(&nodes, &acked, "after the failed syncs");

    // Broker 1 restarts on a healthy disk: its logs recover, it is no longer offline, and it
    // catches up into both ISRs.
    assert_eq!(fs.command("clear")["ok"], true);
    nodes[0].kill9();
    nodes[0].restart_after_stop();
    for p in 0..2 {
        wait_for_full_isr(&nodes[1], "moved", p);
        let m = metadata(&nodes[1]);
        let t = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "moved"))
            .unwrap();
        assert!(
            t.partitions[p as usize].offline_replicas.is_empty(),
            "partition {p}"
        );
    }
    check(&nodes, &acked, "after broker 1 rejoined");
    eprintln!(
        "offline log: leadership moved in {took:?}, the follower left the ISR in \
         {follower_took:?} (replica.lag.time.max.ms = 60 s)"
    );
    drop(nodes);
}

/// How long keel-lazyfs holds the new leader's leader-epoch sync in the take-up test.
const TAKE_UP_DELAY: Duration = Duration::from_millis(2500);

/// A new leader serves as leader only once it has taken up its epoch (a slow disk holds the
/// take-up: keel-lazyfs delays the fdatasync of broker 1's `leader-epoch-checkpoint` by 2.5 s,
/// the only delayed request; the rest of its file system answers meanwhile). Broker 2 leads,
/// broker 1 is next in replica order; broker 2's controlled shutdown makes broker 1 the leader.
/// While the delayed sync holds the take-up, broker 1's own Metadata already names it leader
/// at the new epoch; a produce and a ListOffsets sent to it then wait for the take-up, as
/// Kafka's wait on the partition lock `makeLeader` holds (the CI once saw a new leader answer
/// ListOffsets from its old state in that window, and an append there carried the new epoch's
/// first record before the epoch's recorded start). Once taken up: the produce lands at 5,
/// OffsetForLeaderEpoch ends the old epoch at 5 (the new epoch starts with that record), and
/// every record reads back at its offset.
#[test]
fn a_new_leader_serves_nothing_until_it_has_taken_up_its_epoch() {
    let _one_mount_at_a_time = serial();
    let Some(fs) = LazyFs::mount_or_skip(13, 128, "leader take-up") else {
        return;
    };
    let data = fs.mountpoint.join("data");
    let data = data.to_str().unwrap().to_string();
    let mut nodes = cluster_with(&["", "", ""], &[], |i, b| {
        if i == 0 {
            b.extra.extend(["--data-dir".to_string(), data.clone()]);
        }
    });
    create_assigned(&nodes[0], "takeup", &[vec![2, 1, 3]], 2);
    wait_for_full_isr(&nodes[0], "takeup", 0);
    let (leader, old_epoch, _, _) = partition(&nodes[0], "takeup", 0).unwrap();
    assert_eq!(leader, 2);
    let mut want: Vec<(i64, String)> = Vec::new();
    for i in 0..5 {
        let v = format!("before-{i}");
        assert_eq!(
            raw_produce(&nodes[1], "takeup", 0, -1, &[v.as_bytes()]),
            Ok(i)
        );
        want.push((i, v));
    }
    // Broker 1 has them all before broker 2 goes.
    wait_until(
        "broker 1 holds the five records",
        Duration::from_secs(10),
        || {
            nodes[1].metrics().lines().any(|m| {
                m == "keel_follower_lag_records{topic=\"takeup\",partition=\"0\",follower=\"1\"} 0"
            })
        },
    );
    let fault = format!(
        "fault sync-delay data/takeup-0/leader-epoch-checkpoint {} once",
        TAKE_UP_DELAY.as_millis()
    );
    assert_eq!(fs.command(&fault)["ok"], true);
    let delays = |fs: &LazyFs| fs.command("counts")["delays"].as_u64().unwrap();
    assert_eq!(delays(&fs), 0);

    let (one, others) = nodes.split_at_mut(1);
    let one = &one[0];
    let (stopping, produced, listed) = std::thread::scope(|s| {
        let two = &mut others[0];
        let stop = s.spawn(move || two.stop_within(Duration::from_secs(30)));
        // The take-up's sync has started when the delay is taken.
        wait_until(
            "broker 1 starts taking up the leadership",
            Duration::from_secs(20),
            || delays(&fs) == 1,
        );
        let window = Instant::now();
        let named = partition(one, "takeup", 0);
        assert!(
            named
                .as_ref()
                .is_some_and(|(l, e, _, _)| *l == 1 && *e > old_epoch),
            "broker 1's image names it leader at a new epoch during the take-up: {named:?}"
        );
        let produce = s.spawn(move || {
            let r = raw_produce(one, "takeup", 0, 1, &[b"in-the-window"]);
            (r, window.elapsed())
        });
        let mut c = Client::connect(&one.bootstrap());
        let resp: ListOffsetsResponse = c.send(
            ApiKey::ListOffsets,
            7,
            &common::client::list_offsets_request("takeup", 0, -1),
        );
        let p = &resp.topics[0].partitions[0];
        let listed = (p.error_code, p.offset, window.elapsed());
        (stop.join().unwrap(), produce.join().unwrap(), listed)
    });
    assert_eq!(stopping, Some(0), "broker 2's controlled shutdown");
    // Both waited for the take-up (the delayed sync ends 2.5 s after the window opened), then
    // were answered as leader: the produce at the epoch's first offset.
    let waited = TAKE_UP_DELAY - Duration::from_millis(500);
    assert!(
        produced.1 >= waited && listed.2 >= waited,
        "answered before the take-up: produce after {:?}, ListOffsets after {:?}",
        produced.1,
        listed.2
    );
    assert_eq!(produced.0, Ok(5), "the produce sent into the take-up");
    want.push((5, "in-the-window".into()));
    // Answered as the leader of the new epoch: latest is its high watermark once that reached
    // the epoch start (5), else OFFSET_NOT_AVAILABLE (KIP-207; the follower's high watermark
    // it took over may lag its log end by the last fetch).
    assert!(
        (listed.0 == 0 && (5..=6).contains(&listed.1)) || (listed.0, listed.1) == (78, -1),
        "ListOffsets after the take-up: {listed:?}"
    );
    let (_, new_epoch, _, _) = partition(one, "takeup", 0).unwrap();
    assert_eq!(
        raw_produce(one, "takeup", 0, -1, &[b"after"]),
        Ok(6),
        "the next write"
    );
    want.push((6, "after".into()));
    let mut c = Client::connect(&one.bootstrap());
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(common::client::topic("takeup"))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(new_epoch)
                        .with_leader_epoch(old_epoch),
                ]),
        ]);
    let resp: OffsetForLeaderEpochResponse = c.send(ApiKey::OffsetForLeaderEpoch, 4, &req);
    let p = &resp.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.leader_epoch, p.end_offset),
        (0, old_epoch, 5),
        "the old epoch ends where the new one starts: the record sent into the take-up is the \
         new epoch's first"
    );
    let got: Vec<(i64, String)> = read_partition(&mut c, "takeup", 0)
        .into_iter()
        .map(|(o, v)| (o, String::from_utf8(v).unwrap()))
        .collect();
    assert_eq!(got, want);
    let counts = fs.command("counts");
    assert_eq!(
        (counts["delays"].as_u64(), counts["delayed_ms"].as_u64()),
        (Some(1), Some(TAKE_UP_DELAY.as_millis() as u64))
    );
    drop(nodes);
}
