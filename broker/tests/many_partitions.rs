//! 10,000 partitions on one node: they are created, served and survive a restart; open file
//! descriptors stay bounded (one active segment per partition plus the shards' caches of
//! closed-segment files), and the figures (start-up time, fds) are printed.

mod common;

use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

const PARTITIONS: i32 = 10_000;
const FILES_PER_SHARD: usize = 16;

fn open_fds(b: &Broker) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", b.pid()))
        .unwrap()
        .count()
}

fn metadata_partitions(b: &Broker) -> usize {
    let mut c = Client::connect(&b.bootstrap());
    let resp: MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(topic("many"))),
        ])),
    );
    resp.topics[0].partitions.len()
}

fn fetch_one(c: &mut Client, p: i32) -> Vec<(i64, Vec<u8>)> {
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("many", &[(p, 0, 1 << 20)], 0, 0, 1 << 20),
    );
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.error_code, 0, "partition {p}: {part:?}");
    values(&part.records)
}

#[test]
fn ten_thousand_partitions_with_bounded_files() {
    let mut b = Broker::start(&[
        "--set",
        &format!("log.closed.segment.files.shard.max={FILES_PER_SHARD}"),
    ]);
    let idle_fds = open_fds(&b);
    let started = Instant::now();
    let mut c = Client::connect(&b.bootstrap());
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(600_000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic("many"))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    eprintln!("created {PARTITIONS} partitions in {:?}", started.elapsed());
    assert_eq!(metadata_partitions(&b), PARTITIONS as usize);
    // Every 50th partition gets records, and reads them back.
    let sample: Vec<i32> = (0..PARTITIONS).step_by(50).collect();
    for &p in &sample {
        let v = format!("p{p}");
        assert_eq!(produce(&mut c, "many", p, batch(&[v.as_bytes()])), 0);
    }
    for &p in &sample {
        assert_eq!(
            fetch_one(&mut c, p),
            vec![(0, format!("p{p}").into_bytes())]
        );
    }
    let fds = open_fds(&b);
    eprintln!("open fds: {idle_fds} idle, {fds} with {PARTITIONS} partitions");
    // One active segment per partition, the shards' closed-file caches, and the broker's
    // own (sockets, metadata log, io_uring): no more.
    assert!(
        fds <= idle_fds + PARTITIONS as usize + 2 * FILES_PER_SHARD + 64,
        "{fds} open fds"
    );
    drop(c);
    // Closing 10,000 logs syncs each one's segment and writes its index files: about 8 s
    // when this test was written, 20-30 s on the same 2-core machine on a slower day (kernel
    // time in io_uring's workers). The test is about open files, not shutdown speed.
    let stopping = Instant::now();
    b.stop_within(Duration::from_secs(120));
    eprintln!(
        "stopped with {PARTITIONS} partitions in {:?}",
        stopping.elapsed()
    );
    let started = Instant::now();
    b.restart_after_stop();
    eprintln!(
        "restart with {PARTITIONS} partitions: serving after {:?}",
        started.elapsed()
    );
    assert_eq!(metadata_partitions(&b), PARTITIONS as usize);
    let mut c = Client::connect(&b.bootstrap());
    for &p in sample.iter().step_by(10) {
        assert_eq!(
            fetch_one(&mut c, p),
            vec![(0, format!("p{p}").into_bytes())]
        );
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(open_fds(&b) <= idle_fds + PARTITIONS as usize + 2 * FILES_PER_SHARD + 64);
}
