//! How much memory the metadata image takes per 10,000 partitions: applies the records of
//! `TOPICS` topics of `PARTITIONS` partitions each (3 brokers, one replica, as the controller
//! writes them) to an empty image under a counting allocator, and reports the heap bytes the
//! image holds, per partition and per 10,000, plus the size of its snapshot and of the
//! flatbuffers records.
//!
//! `cargo run --release -p keel-raft --example image_memory [TOPICS] [PARTITIONS]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use keel_raft::codec::encode_batch;
use keel_raft::image::ClusterImage;
use keel_raft::state_machine::{encode_snapshot, SnapshotFile};
use keel_raft::Record;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers"))
        .collect();
    let topics = args.first().copied().unwrap_or(100);
    let partitions = args.get(1).copied().unwrap_or(100) as i32;
    let total = topics * partitions as u64;
    let mut batches: Vec<Vec<Record>> = Vec::new();
    batches.push(
        (1..=3)
            .map(|b| Record::BrokerRegistered {
                broker_id: b,
                incarnation_id: [b as u8; 16],
                host: format!("broker-{b}.example"),
                port: 9092,
                rack: None,
                shard_count: 4,
                inter_broker_host: None,
                inter_broker_port: None,
                inter_broker_shard_ports: Vec::new(),
                previous_broker_epoch: -1,
                listeners: Vec::new(),
            })
            .collect(),
    );
    for t in 0..topics {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&t.to_le_bytes());
        let mut records = vec![Record::TopicCreated {
            name: format!("topic-{t:05}"),
            topic_id: id,
        }];
        for p in 0..partitions {
            let leader = 1 + (p % 3);
            records.push(Record::PartitionCreated {
                topic_id: id,
                partition: p,
                replicas: vec![leader],
                isr: vec![leader],
                leader,
                leader_epoch: 0,
            });
        }
        batches.push(records);
    }
    let record_bytes: usize = batches.iter().map(|b| encode_batch(b).len()).sum();
    let before = LIVE.load(Ordering::Relaxed);
    let mut image = Arc::new(ClusterImage::default());
    for (i, b) in batches.iter().enumerate() {
        image = image.apply(i as u64 + 1, b).0;
    }
    let held = LIVE.load(Ordering::Relaxed) - before;
    let snapshot = encode_snapshot(&SnapshotFile {
        last_applied: None,
        membership: Default::default(),
        snapshot_id: "bench".into(),
        image: (*image).clone(),
    });
    println!(
        "{topics} topics x {partitions} partitions = {total} partitions, 3 brokers, 1 replica each"
    );
    println!(
        "image heap: {held} bytes = {:.0} bytes/partition = {:.2} MiB per 10,000 partitions",
        held as f64 / total as f64,
        held as f64 / total as f64 * 10_000.0 / (1 << 20) as f64
    );
    println!(
        "records on the Raft log (flatbuffers): {record_bytes} bytes = {:.0} bytes/partition",
        record_bytes as f64 / total as f64
    );
    println!(
        "snapshot (JSON): {} bytes = {:.0} bytes/partition",
        snapshot.len(),
        snapshot.len() as f64 / total as f64
    );
    assert_eq!(image.topics.len() as u64, topics);
}
