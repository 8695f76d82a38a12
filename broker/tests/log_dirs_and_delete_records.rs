//! DescribeLogDirs and DeleteRecords through the wire protocol, against the real binary: sizes
//! match the segment files on disk, DeleteRecords moves the log start offset (fetch, ListOffsets
//! and a restart agree) and frees the segments wholly below it. DeleteTopics renames a log
//! away at once and deletes it off the shard; a restart deletes what a crash left renamed.

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use keel_vocab::records::{BatchBuilder, Codec};

/// O_DIRECT block: the open active segment's file is padded up to a multiple of it.
const BLOCK_BYTES: u64 = 4096;
/// The topics' `segment.bytes`.
const SEGMENT_BYTES: u64 = 1024;
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn create_topic_with(c: &mut Client, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        create_topics_request::CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            )]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
}

/// One uncompressed batch of two 150-byte records. (`common::client::batch` gives each
/// record its own batch.)
fn two_record_batch() -> Bytes {
    let mut b = BatchBuilder::new().with_leader_epoch(0);
    for i in 0..2 {
        b.push_record(1_700_000_000_000 + i, None, Some(&[b'v'; 150]), &[]);
    }
    b.finish(Codec::None).unwrap()
}

/// Produces `count` two-record batches to one partition; the bytes produced.
fn produce_batches(c: &mut Client, name: &str, partition: i32, count: usize) -> u64 {
    let mut bytes = 0;
    for _ in 0..count {
        let b = two_record_batch();
        bytes += b.len() as u64;
        produce(c, name, partition, b);
    }
    bytes
}

fn describe_log_dirs(
    c: &mut Client,
    version: i16,
    topics: Option<&[(&str, &[i32])]>,
) -> DescribeLogDirsResponse {
    let req = DescribeLogDirsRequest::default().with_topics(topics.map(|ts| {
        ts.iter()
            .map(|(name, parts)| {
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(topic(name))
                    .with_partitions(parts.to_vec())
            })
            .collect()
    }));
    c.send(ApiKey::DescribeLogDirs, version, &req)
}

/// (topic, partition) -> partition_size of the one log dir, which must be the data dir.
fn dir_sizes(b: &Broker, resp: &DescribeLogDirsResponse) -> BTreeMap<(String, i32), i64> {
    assert_eq!(resp.error_code, 0, "{resp:?}");
    assert_eq!(resp.results.len(), 1, "one log dir: {resp:?}");
    let dir = &resp.results[0];
    assert_eq!(dir.error_code, 0);
    assert_eq!(dir.log_dir.to_string(), b.data_dir().to_str().unwrap());
    let mut out = BTreeMap::new();
    for t in &dir.topics {
        for p in &t.partitions {
            assert_eq!(p.offset_lag, 0);
            assert!(!p.is_future_key);
            let dup = out.insert((t.name.0.to_string(), p.partition_index), p.partition_size);
            assert!(
                dup.is_none(),
                "reported twice: {}-{}",
                t.name.0,
                p.partition_index
            );
        }
    }
    out
}

fn size_of(b: &Broker, c: &mut Client, name: &str, partition: i32) -> i64 {
    let resp = describe_log_dirs(c, 4, Some(&[(name, &[partition])]));
    dir_sizes(b, &resp)[&(name.to_string(), partition)]
}

/// `.log` file name -> length on disk, oldest segment first.
fn log_files(b: &Broker, name: &str, partition: i32) -> BTreeMap<String, u64> {
    let dir = b.data_dir().join(format!("{name}-{partition}"));
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect()
}

/// (bytes of the closed segments, on-disk length of the active one, the last). Closed segment
/// files are cut to their logical size; the open active one is padded to whole blocks.
fn base_offset(file_name: &str) -> i64 {
    file_name.trim_end_matches(".log").parse().unwrap()
}

fn closed_and_active(files: &BTreeMap<String, u64>) -> (u64, u64) {
    let active = *files.values().last().unwrap();
    (files.values().sum::<u64>() - active, active)
}

fn delete_records(
    c: &mut Client,
    version: i16,
    name: &str,
    parts: &[(i32, i64)],
) -> Vec<(i16, i64)> {
    let req = DeleteRecordsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
            .with_name(topic(name))
            .with_partitions(
                parts
                    .iter()
                    .map(|&(p, offset)| {
                        delete_records_request::DeleteRecordsPartition::default()
                            .with_partition_index(p)
                            .with_offset(offset)
                    })
                    .collect(),
            )]);
    let resp: DeleteRecordsResponse = c.send(ApiKey::DeleteRecords, version, &req);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].name.0.to_string(), name);
    resp.topics[0]
        .partitions
        .iter()
        .zip(parts)
        .map(|(p, &(index, _))| {
            assert_eq!(p.partition_index, index);
            (p.error_code, p.low_watermark)
        })
        .collect()
}

/// ListOffsets earliest (-2): (error, offset).
fn earliest(c: &mut Client, name: &str, partition: i32) -> (i16, i64) {
    let req = list_offsets_request(name, partition, -2);
    let resp: ListOffsetsResponse = c.send(ApiKey::ListOffsets, 7, &req);
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.offset)
}

/// Fetch one partition from `offset`: (error, log_start_offset, offsets of the records).
fn fetch_from(c: &mut Client, name: &str, partition: i32, offset: i64) -> (i16, i64, Vec<i64>) {
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request(name, &[(partition, offset, 1 << 20)], 0, 0, 1 << 20),
    );
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.log_start_offset,
        values(&p.records).iter().map(|r| r.0).collect(),
    )
}

#[test]
fn describe_log_dirs_reports_hosted_partitions_with_their_sizes() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_with(
        &mut c,
        "ld",
        2,
        &[("segment.bytes", &SEGMENT_BYTES.to_string())],
    );
    create_topic(&mut c, "other", 1);
    let produced = [
        (20usize, produce_batches(&mut c, "ld", 0, 20)),
        (3, produce_batches(&mut c, "ld", 1, 3)),
    ];
    produce_batches(&mut c, "other", 0, 1);

    for version in 0..=4 {
        // Null topics: every partition this broker hosts.
        let resp = describe_log_dirs(&mut c, version, None);
        let sizes = dir_sizes(&b, &resp);
        let keys: Vec<(&str, i32)> = sizes.keys().map(|(t, p)| (t.as_str(), *p)).collect();
        assert_eq!(keys, vec![("ld", 0), ("ld", 1), ("other", 0)], "v{version}");
        for (p, &(batches, produced_bytes)) in produced.iter().enumerate() {
            // Batches are stored as produced: the size is exactly the bytes produced.
            assert_eq!(sizes[&("ld".to_string(), p as i32)], produced_bytes as i64);
            // Segments hold as many whole batches as fit in segment.bytes.
            let batch_bytes = produced_bytes / batches as u64;
            let per_segment = (SEGMENT_BYTES / batch_bytes) as usize;
            let files = log_files(&b, "ld", p as i32);
            assert_eq!(files.len(), batches.div_ceil(per_segment), "{files:?}");
            // On disk: closed segments are cut to their logical size; the open active one is
            // padded to whole O_DIRECT blocks, so its logical size is the rest.
            let (closed, active_on_disk) = closed_and_active(&files);
            let active = produced_bytes - closed;
            assert_eq!(
                active_on_disk,
                active.div_ceil(BLOCK_BYTES) * BLOCK_BYTES,
                "active segment of ld-{p}: {active} logical bytes ({files:?})"
            );
            assert_eq!(
                active,
                ((batches - 1) % per_segment + 1) as u64 * batch_bytes
            );
        }
        let dir = &resp.results[0];
        if version >= 4 {
            assert!(dir.total_bytes > 0, "{dir:?}");
            assert!((0..=dir.total_bytes).contains(&dir.usable_bytes), "{dir:?}");
        }

        // Named: only what was asked and is hosted (unknown partitions and topics left out).
        let resp = describe_log_dirs(
            &mut c,
            version,
            Some(&[("ld", &[1, 0, 7, -1]), ("missing", &[0])]),
        );
        let named = dir_sizes(&b, &resp);
        let keys: Vec<(&str, i32)> = named.keys().map(|(t, p)| (t.as_str(), *p)).collect();
        assert_eq!(keys, vec![("ld", 0), ("ld", 1)], "v{version}");
        assert_eq!(named[&("ld".to_string(), 0)], sizes[&("ld".to_string(), 0)]);
        assert_eq!(named[&("ld".to_string(), 1)], sizes[&("ld".to_string(), 1)]);

        let resp = describe_log_dirs(&mut c, version, Some(&[("missing", &[0])]));
        assert!(resp.results[0].topics.is_empty(), "{resp:?}");
    }

    // Both APIs are advertised with the versions they serve.
    let resp: ApiVersionsResponse = c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let range = |key: ApiKey| {
        resp.api_keys
            .iter()
            .find(|k| k.api_key == key as i16)
            .map(|k| (k.min_version, k.max_version))
    };
    assert_eq!(range(ApiKey::DeleteRecords), Some((0, 2)));
    assert_eq!(range(ApiKey::DescribeLogDirs), Some((0, 4)));
}

#[test]
fn delete_records_moves_the_log_start_offset_durably() {
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_with(
        &mut c,
        "dr",
        2,
        &[("segment.bytes", &SEGMENT_BYTES.to_string())],
    );
    // 20 batches of 2 records: offsets 0..40 on partition 0.
    let produced = produce_batches(&mut c, "dr", 0, 20);
    produce_batches(&mut c, "dr", 1, 3);
    let high_watermark = 40;
    assert_eq!(size_of(&b, &mut c, "dr", 0), produced as i64);
    let files_before = log_files(&b, "dr", 0);

    // To offset 7 (inside a batch and a segment): the new log start offset is exactly 7.
    assert_eq!(delete_records(&mut c, 2, "dr", &[(0, 7)]), vec![(0, 7)]);
    let (error, log_start_offset, _) = fetch_from(&mut c, "dr", 0, 3);
    assert_eq!(
        (error, log_start_offset),
        (OFFSET_OUT_OF_RANGE, 7),
        "fetch below the start"
    );
    assert_eq!(
        fetch_from(&mut c, "dr", 0, 6).0,
        OFFSET_OUT_OF_RANGE,
        "offset 6 is still in a segment but below the log start offset"
    );
    assert_eq!(earliest(&mut c, "dr", 0), (0, 7));
    let (error, log_start_offset, offsets) = fetch_from(&mut c, "dr", 0, 7);
    assert_eq!((error, log_start_offset), (0, 7));
    // Whole batches: the one holding 7 starts at 6; the rest of the log follows.
    assert_eq!(offsets, (6..high_watermark).collect::<Vec<_>>());
    // Exactly the segments wholly below 7 (the next one's base offset is at most 7) are gone,
    // and the size went down by exactly their bytes.
    let bases: Vec<i64> = files_before.keys().map(|f| base_offset(f)).collect();
    let expected_deleted: Vec<&String> = files_before
        .keys()
        .zip(bases.iter().skip(1))
        .filter(|(_, &next_base)| next_base <= 7)
        .map(|(f, _)| f)
        .collect();
    assert!(!expected_deleted.is_empty(), "{files_before:?}");
    let files_after = log_files(&b, "dr", 0);
    let kept: Vec<&String> = files_after.keys().collect();
    let expected_kept: Vec<&String> = files_before
        .keys()
        .filter(|f| !expected_deleted.contains(f))
        .collect();
    assert_eq!(kept, expected_kept);
    let deleted_bytes: u64 = expected_deleted.iter().map(|f| files_before[*f]).sum();
    assert_eq!(
        size_of(&b, &mut c, "dr", 0),
        (produced - deleted_bytes) as i64
    );
    // Partition 1 is untouched.
    assert_eq!(earliest(&mut c, "dr", 1), (0, 0));

    // Lower than the start: nothing moves (v0 and v1 too).
    assert_eq!(delete_records(&mut c, 0, "dr", &[(0, 2)]), vec![(0, 7)]);
    assert_eq!(delete_records(&mut c, 1, "dr", &[(0, 7)]), vec![(0, 7)]);
    // Above the high watermark: out of range, nothing moves.
    assert_eq!(
        delete_records(&mut c, 2, "dr", &[(0, high_watermark + 1)]),
        vec![(OFFSET_OUT_OF_RANGE, -1)]
    );
    assert_eq!(earliest(&mut c, "dr", 0), (0, 7));
    // Unknown partitions and topics, beside a good one in the same request.
    assert_eq!(
        delete_records(&mut c, 2, "dr", &[(5, 0), (1, 1), (-1, 0)]),
        vec![
            (UNKNOWN_TOPIC_OR_PARTITION, -1),
            (0, 1),
            (UNKNOWN_TOPIC_OR_PARTITION, -1)
        ]
    );
    assert_eq!(
        delete_records(&mut c, 2, "missing", &[(0, 0)]),
        vec![(UNKNOWN_TOPIC_OR_PARTITION, -1)]
    );

    // -1: up to the high watermark; only the active segment stays.
    assert_eq!(
        delete_records(&mut c, 2, "dr", &[(0, -1)]),
        vec![(0, high_watermark)]
    );
    assert_eq!(earliest(&mut c, "dr", 0), (0, high_watermark));
    assert_eq!(log_files(&b, "dr", 0).len(), 1);
    let (error, _, offsets) = fetch_from(&mut c, "dr", 0, high_watermark);
    assert_eq!((error, offsets), (0, vec![]));
    let size_moved = size_of(&b, &mut c, "dr", 0);
    let (closed, _) = closed_and_active(&log_files(&b, "dr", 0));
    assert_eq!(closed, 0);

    // After a restart the start offsets stand, and the (now closed and cut) files add up to
    // the sizes reported.
    drop(c);
    b.restart();
    let mut c = Client::connect(&b.bootstrap());
    assert_eq!(earliest(&mut c, "dr", 0), (0, high_watermark));
    assert_eq!(earliest(&mut c, "dr", 1), (0, 1));
    let (error, log_start_offset, _) = fetch_from(&mut c, "dr", 0, 7);
    assert_eq!(
        (error, log_start_offset),
        (OFFSET_OUT_OF_RANGE, high_watermark)
    );
    let sizes = dir_sizes(&b, &describe_log_dirs(&mut c, 4, None));
    for p in 0..2 {
        let on_disk: u64 = log_files(&b, "dr", p).values().sum();
        assert_eq!(sizes[&("dr".to_string(), p)], on_disk as i64, "dr-{p}");
    }
    assert_eq!(sizes[&("dr".to_string(), 0)], size_moved);
    assert!(
        size_moved < (produced - deleted_bytes) as i64,
        "the size went down again after -1"
    );
}

fn delete_topic(c: &mut Client, name: &str) {
    let req = DeleteTopicsRequest::default()
        .with_topic_names(vec![topic(name)])
        .with_timeout_ms(10_000);
    let resp: DeleteTopicsResponse = c.send(ApiKey::DeleteTopics, 4, &req);
    assert_eq!(resp.responses[0].error_code, 0, "{resp:?}");
}

/// The entries of the data dir whose names start with `prefix`.
fn entries(b: &Broker, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(b.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// DeleteTopics: each partition's log leaves its path at once (renamed `<dir>.<id>-delete`,
/// as Kafka does) and is unlinked by the deleter thread, not on the shard; a topic created
/// again under the same name starts empty. A directory left renamed by a crash is deleted at
/// the next start, and nothing else is touched.
#[test]
fn deleted_topics_leave_no_logs_and_a_restart_deletes_leftovers() {
    let mut b = Broker::start(&["--smp", "2"]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic_with(&mut c, "doomed", 2, &[]);
    create_topic_with(&mut c, "kept", 1, &[]);
    for p in 0..2 {
        produce_batches(&mut c, "doomed", p, 20);
    }
    produce_batches(&mut c, "kept", 0, 3);
    assert_eq!(entries(&b, "doomed"), vec!["doomed-0", "doomed-1"]);

    delete_topic(&mut c, "doomed");
    wait_for("the deleted topic's logs are gone", || {
        entries(&b, "doomed").is_empty()
    });
    // Created again: empty, offsets from 0.
    create_topic_with(&mut c, "doomed", 2, &[]);
    assert_eq!(produce(&mut c, "doomed", 1, two_record_batch()), 0);

    // A crash between the rename and the unlink leaves this behind.
    b.kill9();
    let left = b.data_dir().join("gone-0.18c2a9f3e0b-delete");
    std::fs::create_dir(&left).unwrap();
    std::fs::write(left.join("00000000000000000000.log"), vec![1u8; 1 << 20]).unwrap();
    b.restart_after_stop();
    wait_for("the leftover is deleted at start", || !left.exists());
    assert_eq!(entries(&b, "kept"), vec!["kept-0"]);
    let mut c = Client::connect(&b.bootstrap());
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("kept", &[(0, 0, 1 << 20)], 0, 0, 1 << 20),
    );
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "{resp:?}");
    assert_eq!(values(&p.records).len(), 6, "kept's 3 batches of 2 records");
    assert_eq!(p.high_watermark, 6);
}
