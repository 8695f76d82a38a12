//! Disk full on a real (small, loop-mounted ext4) filesystem: produce gets
//! KAFKA_STORAGE_ERROR, the broker stays up and serves reads, nothing acknowledged is lost,
//! and writes resume when space returns.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

/// A loop-mounted ext4 image, unmounted on drop.
struct Mount {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Mount {
    fn new(size_mb: u64) -> Mount {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        let f = std::fs::File::create(&image).unwrap();
        f.set_len(size_mb << 20).unwrap();
        drop(f);
        let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        assert!(
            ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image)),
            "mkfs.ext4 failed (e2fsprogs needed)"
        );
        assert!(
            ok(Command::new("mount")
                .arg("-o")
                .arg("loop")
                .arg(&image)
                .arg(&path)),
            "loop mount failed: this test needs root with CAP_SYS_ADMIN and a loop device"
        );
        Mount { _dir: dir, path }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn produce_code(c: &mut Client, partition: i32, value: &[u8]) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic("full"))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch(&[value]))),
            ])]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn fetch_all(c: &mut Client) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..10_000 {
        let resp: FetchResponse = c.send(
            ApiKey::Fetch,
            12,
            &fetch_request("full", &[(0, offset, 4 << 20)], 0, 0, 4 << 20),
        );
        let p = &resp.responses[0].partitions[0];
        assert_eq!(p.error_code, 0, "{p:?}");
        let got = values(&p.records);
        if got.is_empty() {
            return out;
        }
        offset = got.last().unwrap().0 + 1;
        out.extend(got);
    }
    panic!("fetch did not reach the end");
}

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("record-{i:05}-").into_bytes();
    v.resize(60 * 1024, (i % 251) as u8);
    v
}

fn fill_ballast(dir: &Path, mb: usize) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..mb {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
    path
}

#[test]
fn disk_full_refuses_produce_keeps_reads_and_resumes() {
    let mount = Mount::new(48);
    let ballast = fill_ballast(&mount.path, 12);
    let data = mount.path.join("data");
    let mut b = Broker::start(&["--data-dir", data.to_str().unwrap()]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "full", 1);
    // Fill the disk: 60 KiB records until produce is refused.
    let mut acked: Vec<(i64, Vec<u8>)> = Vec::new();
    let mut refused = None;
    for i in 0..2000 {
        let v = value(i);
        match produce_code(&mut c, 0, &v) {
            (0, offset) => acked.push((offset, v)),
            (code, _) => {
                refused = Some(code);
                break;
            }
        }
    }
    assert_eq!(
        refused,
        Some(56),
        "KAFKA_STORAGE_ERROR once the disk is full"
    );
    assert!(acked.len() > 100, "{} records fit", acked.len());
    assert!(b.log_text().contains("disk full"));
    // Still refused, still up, every acknowledged record readable at its offset.
    assert_eq!(produce_code(&mut c, 0, b"again").0, 56);
    let got = fetch_all(&mut c);
    assert_eq!(got.len(), acked.len());
    assert_eq!(got, acked);
    // Space returns: writes resume (the log retries its staged write once a second).
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let resumed_at = loop {
        match produce_code(&mut c, 0, b"after") {
            (0, offset) => break offset,
            (56, _) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            other => panic!("produce did not resume: {other:?}"),
        }
    };
    let last_acked = acked.last().unwrap().0;
    assert!(resumed_at > last_acked, "{resumed_at} after {last_acked}");
    let got = fetch_all(&mut c);
    let offsets: Vec<i64> = got.iter().map(|(o, _)| *o).collect();
    assert_eq!(
        offsets,
        (0..=resumed_at).collect::<Vec<_>>(),
        "dense offsets"
    );
    for (o, v) in &acked {
        assert_eq!(&got[*o as usize].1, v, "offset {o}");
    }
    assert_eq!(got.last().unwrap().1, b"after".to_vec());
    assert!(!b.log_text().contains("panicked"));
    drop(c);
    b.stop();
    drop(b);
    drop(mount);
}
