//! A segment with a corrupt batch in the middle (valid batches after it) is reported at start
//! and its partition goes offline (KAFKA_STORAGE_ERROR) instead of being truncated; the other
//! partitions of the topic work as usual.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

const KAFKA_STORAGE_ERROR: i16 = 56;
/// Fixed header of a magic-2 batch; the records follow (covered by the CRC).
const BATCH_HEADER_BYTES: usize = 61;

fn produce_code(c: &mut Client, name: &str, partition: i32, records: bytes::Bytes) -> i16 {
    try_produce(c, name, partition, records).error_code
}

/// (error code, (offset, value) of each record) of a fetch of `partition` from `offset`.
fn fetch_from(
    c: &mut Client,
    name: &str,
    partition: i32,
    offset: i64,
) -> (i16, Vec<(i64, Vec<u8>)>) {
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request(name, &[(partition, offset, 1 << 20)], 0, 1, 1 << 20),
    );
    assert_eq!(resp.error_code, 0);
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.partition_index, partition);
    (p.error_code, values(&p.records))
}

fn list_offsets_code(c: &mut Client, name: &str, partition: i32) -> i16 {
    let req = list_offsets_request(name, partition, -1);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    resp.topics[0].partitions[0].error_code
}

/// Start position of every batch of a whole segment file.
fn batch_positions(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 12 <= bytes.len() {
        out.push(pos);
        let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap());
        pos += 12 + len as usize;
    }
    assert_eq!(pos, bytes.len(), "the segment ends on a batch boundary");
    out
}

fn wait_for_log(b: &Broker, from: usize, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = b.log_text();
        let new = text.get(from..).unwrap_or("").to_string();
        if new.contains(needle) {
            return new;
        }
        assert!(
            Instant::now() < deadline,
            "the log never said {needle:?}; log since restart:\n{new}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn corrupt_middle_batch_takes_the_partition_offline_without_truncating() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "cs", 2);
    // One record per produce: the test client's encoder makes one batch per record.
    for i in 0..10 {
        let value = format!("value-{i}");
        assert_eq!(produce(&mut c, "cs", 0, batch(&[value.as_bytes()])), i);
    }
    produce(&mut c, "cs", 1, batch(&[b"p1-before"]));
    drop(c);
    b.stop();

    let segment = b.data_dir().join("cs-0").join("00000000000000000000.log");
    let good = file_bytes(&segment);
    let positions = batch_positions(&good);
    assert_eq!(positions.len(), 10);
    // Batch 5 (0-based): flip a byte of its records, covered by the CRC.
    let mut corrupt = good.clone();
    corrupt[positions[5] + BATCH_HEADER_BYTES + 2] ^= 0x5a;
    std::fs::write(&segment, &corrupt).unwrap();

    let log_from = b.log_text().len();
    b.restart_after_stop();
    let text = wait_for_log(&b, log_from, "corrupt segment");
    let line = text
        .lines()
        .find(|l| l.contains("corrupt segment"))
        .unwrap();
    assert!(
        line.contains(&segment.display().to_string()),
        "the message names the file: {line}"
    );
    assert!(
        line.contains(&format!("byte position {}", positions[5])),
        "the message names the position: {line}"
    );
    assert!(line.contains("offline"), "{line}");
    assert!(line.contains("ERROR"), "logged at error level: {line}");

    let mut c = Client::connect(&b.bootstrap());
    assert_eq!(
        produce_code(&mut c, "cs", 0, batch(&[b"after"])),
        KAFKA_STORAGE_ERROR
    );
    assert_eq!(fetch_from(&mut c, "cs", 0, 0).0, KAFKA_STORAGE_ERROR);
    assert_eq!(list_offsets_code(&mut c, "cs", 0), KAFKA_STORAGE_ERROR);

    // The other partition works as usual.
    assert_eq!(produce(&mut c, "cs", 1, batch(&[b"p1-after"])), 1);
    let mut got = Vec::new();
    while got.len() < 2 {
        let (code, records) = fetch_from(&mut c, "cs", 1, got.len() as i64);
        assert_eq!(code, 0);
        assert!(
            !records.is_empty(),
            "partition 1 has 2 records; got {got:?}"
        );
        got.extend(records);
    }
    assert_eq!(
        got,
        vec![(0, b"p1-before".to_vec()), (1, b"p1-after".to_vec())]
    );

    // A later metadata image neither reopens nor reports it again.
    create_topic(&mut c, "other", 1);
    assert_eq!(produce(&mut c, "other", 0, batch(&[b"x"])), 0);
    assert_eq!(
        produce_code(&mut c, "cs", 0, batch(&[b"after"])),
        KAFKA_STORAGE_ERROR
    );
    let since = b.log_text().get(log_from..).unwrap_or("").to_string();
    assert_eq!(
        since.matches("corrupt segment").count(),
        1,
        "reported once:\n{since}"
    );

    // Nothing was truncated or repaired: the file is exactly as corrupted.
    assert_eq!(file_bytes(&segment), corrupt);
    drop(c);
    b.stop();
    assert_eq!(file_bytes(&segment), corrupt);
}
