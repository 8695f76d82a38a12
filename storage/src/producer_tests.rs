//! Producer state through `Log`: duplicates answered with the original offsets and not
//! appended, sequence and epoch errors appending nothing, one batch per idempotent append;
//! the state across a clean close, a kill (drop without close), corrupt and stale snapshots,
//! retention and expiry; and a property test against a model of Kafka's rules with reopens.

use std::path::Path;

use proptest::prelude::*;

use crate::batch::BatchHeader;
use crate::test_util::*;
use crate::*;

const TS: i64 = 1_000_000;

fn config() -> LogConfig {
    LogConfig {
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// Segments of about three small batches: every few appends roll (and snapshot).
fn rolling_config() -> LogConfig {
    LogConfig {
        segment_bytes: 3 * producer_batch(1, 0, 0, 2, TS).len() as u64,
        ..config()
    }
}

fn send(
    log: &Log,
    pid: i64,
    epoch: i16,
    seq: i32,
    count: usize,
) -> Result<AppendInfo, StorageError> {
    log.append(
        producer_batch(pid, epoch, seq, count, TS),
        LeaderEpoch(0),
        TS,
    )
}

/// Appends and commits (under flush.policy=group: synced) one producer batch.
async fn send_committed(log: &Log, pid: i64, epoch: i16, seq: i32, count: usize) -> AppendInfo {
    let info = send(log, pid, epoch, seq, count).unwrap();
    log.commit(Offset(info.last_offset.0 + 1)).await.unwrap();
    info
}

fn expect_duplicate(r: Result<AppendInfo, StorageError>, base: i64, last: i64) {
    let info = r.unwrap();
    assert!(info.duplicate, "expected a duplicate, got {info:?}");
    assert_eq!(
        (info.base_offset, info.last_offset),
        (Offset(base), Offset(last))
    );
    assert_eq!(info.record_count, 0);
}

fn expect_out_of_order(r: Result<AppendInfo, StorageError>) {
    assert!(
        matches!(r, Err(StorageError::OutOfOrderSequence(_))),
        "expected OUT_OF_ORDER_SEQUENCE_NUMBER, got {r:?}"
    );
}

/// (producer id, base sequence, base offset) of every batch in the log.
async fn log_batches(log: &Log) -> Vec<(i64, i32, i64)> {
    let end = log.offsets().log_end_offset;
    let mut out = Vec::new();
    let mut next = log.offsets().log_start_offset;
    while next < end {
        let r = log.read(next, 1 << 20, end).await.unwrap();
        let mut pos = 0;
        while pos < r.records.len() {
            let h = BatchHeader::parse(&r.records[pos..]).unwrap();
            out.push((h.producer_id, h.base_sequence, h.base_offset));
            next = Offset(h.last_offset() + 1);
            pos += h.size;
        }
    }
    out
}

fn snapshot_files(dir: &Path) -> Vec<i64> {
    let mut out: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".snapshot")?.parse().ok()
        })
        .collect();
    out.sort();
    out
}

/// The last five batches of producer 1 (sequences 2.. of seven batches of two records) are
/// duplicates with their offsets; the one before is out of order; the next goes on.
fn check_last_five(log: &Log, first_offset: i64) {
    for i in 2..7 {
        let base = first_offset + i * 2;
        expect_duplicate(send(log, 1, 0, i as i32 * 2, 2), base, base + 1);
    }
    expect_out_of_order(send(log, 1, 0, 2, 2));
    expect_out_of_order(send(log, 1, 0, 16, 1));
}

#[test]
fn duplicates_get_the_original_offsets_and_are_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        for i in 0..7 {
            let info = send(&log, 1, 0, i * 2, 2).unwrap();
            assert!(!info.duplicate);
            assert_eq!(info.base_offset, Offset(i64::from(i) * 2));
        }
        check_last_five(&log, 0);
        assert_eq!(log.offsets().log_end_offset, Offset(14));
        // Errors append nothing either.
        expect_out_of_order(send(&log, 1, 1, 3, 1));
        assert_eq!(log.offsets().log_end_offset, Offset(14));
        let info = send(&log, 1, 0, 14, 1).unwrap();
        assert_eq!(info.base_offset, Offset(14));
        log.commit(Offset(15)).await.unwrap();
        let batches = log_batches(&log).await;
        let want: Vec<(i64, i32, i64)> = (0..7)
            .map(|i| (1, i * 2, i64::from(i) * 2))
            .chain([(1, 14, 14)])
            .collect();
        assert_eq!(batches, want, "each batch once");
        assert_eq!(
            log.producers(),
            vec![ProducerInfo {
                producer_id: 1,
                producer_epoch: 0,
                last_sequence: 14,
                last_timestamp_ms: TS,
                coordinator_epoch: -1,
                current_txn_start_offset: -1,
            }]
        );
        // A new epoch fences the old one.
        assert_eq!(send(&log, 1, 1, 0, 1).unwrap().base_offset, Offset(15));
        assert!(matches!(
            send(&log, 1, 0, 15, 1),
            Err(StorageError::InvalidProducerEpoch(_))
        ));
        assert_eq!(log.offsets().log_end_offset, Offset(16));
    });
}

#[test]
fn a_duplicate_under_log_append_time_gets_the_original_time() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..config()
        };
        let log = Log::open(dir.path(), cfg).await.unwrap();
        let first = log
            .append(producer_batch(4, 0, 0, 3, TS), LeaderEpoch(0), 5_000)
            .unwrap();
        assert_eq!(first.log_append_time_ms, 5_000);
        let retry = log
            .append(producer_batch(4, 0, 0, 3, TS), LeaderEpoch(0), 9_000)
            .unwrap();
        assert!(retry.duplicate);
        assert_eq!(
            (
                retry.base_offset,
                retry.last_offset,
                retry.log_append_time_ms
            ),
            (Offset(0), Offset(2), 5_000)
        );
        // Under CreateTime a duplicate has no append time, as the original had none.
        let mut cfg = log.config();
        cfg.message_timestamp_type = TimestampType::CreateTime;
        log.set_config(cfg);
        log.append(producer_batch(4, 0, 3, 1, TS), LeaderEpoch(0), 9_000)
            .unwrap();
        let retry = log
            .append(producer_batch(4, 0, 3, 1, TS), LeaderEpoch(0), 9_500)
            .unwrap();
        assert!(retry.duplicate);
        assert_eq!(retry.log_append_time_ms, -1);
    });
}

#[test]
fn an_idempotent_append_holds_exactly_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        let mut two = producer_batch(1, 0, 0, 2, TS);
        two.extend_from_slice(&producer_batch(1, 0, 2, 2, TS));
        let mut mixed = batch(2, TS, 10);
        mixed.extend_from_slice(&producer_batch(1, 0, 0, 2, TS));
        for request in [two, mixed] {
            let r = log.append(request, LeaderEpoch(0), TS);
            assert!(matches!(r, Err(StorageError::InvalidRecord(_))), "{r:?}");
        }
        assert_eq!(log.offsets().log_end_offset, Offset(0));
        assert!(log.producers().is_empty());
        // Batches without a producer id: several per append, no state, no checks.
        let mut plain = batch(2, TS, 10);
        plain.extend_from_slice(&batch(3, TS, 10));
        assert_eq!(
            log.append(plain.clone(), LeaderEpoch(0), TS)
                .unwrap()
                .record_count,
            5
        );
        let again = log.append(plain, LeaderEpoch(0), TS).unwrap();
        assert!(!again.duplicate);
        assert_eq!(again.base_offset, Offset(5));
        assert!(log.producers().is_empty());
        assert_eq!(send(&log, 1, 0, 0, 2).unwrap().base_offset, Offset(10));
    });
}

#[test]
fn control_and_transactional_batches_keep_the_transaction_fields() {
    use crate::batch::{CONTROL_BIT, TRANSACTIONAL_BIT};
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        let txn = with_producer(batch(2, TS, 5), 6, 1, 0, TRANSACTIONAL_BIT);
        log.append(txn, LeaderEpoch(0), TS).unwrap();
        assert_eq!(log.producers()[0].current_txn_start_offset, 0);
        log.commit(Offset(2)).await.unwrap();
        log.close().await.unwrap();
        let log = Log::open(dir.path(), config()).await.unwrap();
        assert_eq!(log.producers()[0].current_txn_start_offset, 0);
        log.append(marker_batch(6, 1, true, 3, TS), LeaderEpoch(0), TS)
            .unwrap();
        let p = &log.producers()[0];
        assert_eq!(
            (
                p.current_txn_start_offset,
                p.last_sequence,
                p.coordinator_epoch
            ),
            (-1, 1, 3)
        );
        assert!(matches!(
            log.append(marker_batch(6, 0, true, 3, TS), LeaderEpoch(0), TS),
            Err(StorageError::InvalidProducerEpoch(_))
        ));
        // A control batch whose record is no marker, or that is not transactional, or without
        // a producer id, is refused.
        for bad in [
            with_producer(batch(1, TS, 5), 6, 1, -1, CONTROL_BIT | TRANSACTIONAL_BIT),
            with_producer(batch(1, TS, 5), 6, 1, -1, CONTROL_BIT),
            with_producer(batch(1, TS, 5), -1, -1, -1, CONTROL_BIT | TRANSACTIONAL_BIT),
            with_producer(batch(1, TS, 5), -1, -1, -1, TRANSACTIONAL_BIT),
        ] {
            let r = log.append(bad, LeaderEpoch(0), TS);
            assert!(matches!(r, Err(StorageError::InvalidRecord(_))), "{r:?}");
        }
        assert_eq!(log.offsets().log_end_offset, Offset(3));
    });
}

#[test]
fn a_clean_restart_keeps_the_last_five_of_every_producer() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        for i in 0..7 {
            send(&log, 1, 0, i * 2, 2).unwrap();
            send(&log, 2, 3, 100 + i, 1).unwrap();
        }
        log.commit(Offset(21)).await.unwrap();
        log.close().await.unwrap();
        assert_eq!(
            snapshot_files(dir.path()),
            vec![21],
            "a snapshot at the log end"
        );
        drop(log);
        let log = Log::open(dir.path(), config()).await.unwrap();
        // Producer 1's batches are at offsets 0, 3, 6, ... (producer 2's in between).
        for i in 2..7i64 {
            expect_duplicate(send(&log, 1, 0, i as i32 * 2, 2), i * 3, i * 3 + 1);
            expect_duplicate(send(&log, 2, 3, 100 + i as i32, 1), i * 3 + 2, i * 3 + 2);
        }
        expect_out_of_order(send(&log, 1, 0, 2, 2));
        assert!(matches!(
            send(&log, 2, 2, 0, 1),
            Err(StorageError::InvalidProducerEpoch(_))
        ));
        assert_eq!(send(&log, 1, 0, 14, 1).unwrap().base_offset, Offset(21));
    });
}

#[test]
fn a_restart_without_close_rebuilds_the_state_from_the_log() {
    for cfg in [config(), rolling_config()] {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            for i in 0..7 {
                send_committed(&log, 1, 0, i * 2, 2).await;
            }
            let rolled = log.segment_count() > 1;
            // Killed: no close, no snapshot at the log end.
            drop(log);
            if rolled {
                assert!(!snapshot_files(dir.path()).is_empty(), "snapshots at rolls");
            } else {
                assert!(snapshot_files(dir.path()).is_empty());
            }
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            assert_eq!(log.offsets().log_end_offset, Offset(14));
            check_last_five(&log, 0);
            assert_eq!(send(&log, 1, 0, 14, 1).unwrap().base_offset, Offset(14));
        });
    }
}

#[test]
fn a_corrupt_snapshot_falls_back_to_an_older_one_or_the_log() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = rolling_config();
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        for i in 0..7 {
            send_committed(&log, 1, 0, i * 2, 2).await;
        }
        assert!(log.segment_count() >= 3);
        log.close().await.unwrap();
        drop(log);
        let snapshots = snapshot_files(dir.path());
        assert!(snapshots.len() >= 2, "{snapshots:?}");
        assert_eq!(*snapshots.last().unwrap(), 14);
        let path = |o: i64| dir.path().join(format!("{o:020}.snapshot"));

        // The newest damaged: deleted at open, the next older loaded, the rest replayed.
        let latest = path(14);
        let mut bytes = std::fs::read(&latest).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&latest, &bytes).unwrap();
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        assert!(!latest.exists(), "a corrupt snapshot is deleted");
        check_last_five(&log, 0);
        drop(log);

        // Every snapshot damaged or cut short: rebuilt from the whole log.
        for o in snapshot_files(dir.path()) {
            let bytes = std::fs::read(path(o)).unwrap();
            std::fs::write(path(o), &bytes[..bytes.len() / 2]).unwrap();
        }
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        assert!(snapshot_files(dir.path()).is_empty());
        check_last_five(&log, 0);
        drop(log);

        // A snapshot past the log end (the log lost its tail after it was taken) describes
        // batches that are gone: deleted, not loaded.
        let mut wrong = crate::producer_state::ProducerStateManager::new();
        let mut h = BatchHeader::parse(&producer_batch(1, 0, 20, 1, TS)).unwrap();
        h.base_offset = 50;
        wrong.record(&h);
        std::fs::write(path(60), wrong.encode_snapshot(Offset(60))).unwrap();
        // And one whose content names another offset than its file.
        std::fs::write(path(13), wrong.encode_snapshot(Offset(60))).unwrap();
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert!(!path(60).exists() && !path(13).exists());
        check_last_five(&log, 0);
    });
}

#[test]
fn snapshots_are_few_and_go_with_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            retention_bytes: 0,
            ..rolling_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        for i in 0..20 {
            send_committed(&log, 1, 0, i * 2, 2).await;
        }
        let segments = log.segment_layout();
        assert!(segments.len() >= 6, "{segments:?}");
        let on_disk = snapshot_files(dir.path());
        assert_eq!(on_disk.len(), 3, "the newest three are kept: {on_disk:?}");
        let offsets: Vec<i64> = log.snapshot_offsets().iter().map(|o| o.0).collect();
        assert_eq!(offsets, on_disk);
        // Each is at a segment's base offset (taken when that segment rolled in).
        let bases: Vec<i64> = segments.iter().map(|s| s.0).collect();
        assert!(
            on_disk.iter().all(|o| bases.contains(o)),
            "{on_disk:?} {bases:?}"
        );
        // Retention deletes all but the active segment, and the snapshots below it.
        let out = log.enforce_retention(TS).await.unwrap();
        assert!(out.segments_deleted > 0);
        let first = log.segment_layout()[0].0;
        let left = snapshot_files(dir.path());
        assert!(left.iter().all(|o| *o >= first), "{left:?} below {first}");
        assert_eq!(left, vec![first]);
        // The producer's state outlives its deleted batches.
        expect_duplicate(send(&log, 1, 0, 38, 2), 38, 39);
        drop(log);
        let log = Log::open(dir.path(), cfg).await.unwrap();
        expect_duplicate(send(&log, 1, 0, 38, 2), 38, 39);
        expect_duplicate(send(&log, 1, 0, 30, 2), 30, 31);
    });
}

#[test]
fn expired_producers_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            producer_id_expiration_ms: 60_000,
            ..rolling_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        log.append(producer_batch(1, 0, 0, 2, TS), LeaderEpoch(0), TS)
            .unwrap();
        log.append(producer_batch(2, 0, 0, 2, TS + 30_000), LeaderEpoch(0), TS)
            .unwrap();
        assert_eq!(log.expire_producers(TS + 59_999), 0);
        assert_eq!(log.expire_producers(TS + 60_000), 1);
        let left: Vec<i64> = log.producers().iter().map(|p| p.producer_id).collect();
        assert_eq!(left, vec![2]);
        // Forgotten: its next batch is taken at any sequence.
        assert!(!send(&log, 1, 0, 7, 1).unwrap().duplicate);
        // A roll expires too (with the append's clock), before its snapshot is taken.
        let segments = log.segment_count();
        while log.segment_count() == segments {
            log.append(batch(2, TS, 10), LeaderEpoch(0), TS + 200_000)
                .unwrap();
        }
        assert!(log.producers().is_empty());
    });
}

#[test]
fn a_replay_over_compacted_batches_forgets_producers_it_may_know_stale() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let keyed = |pid: i64, seq: i32, key: &str| {
            with_producer(
                keyed_batch(&[(Some(key), Some("v"))], TS, 0),
                pid,
                0,
                seq,
                0,
            )
        };
        let cfg = LogConfig {
            cleanup_compact: true,
            cleanup_delete: false,
            segment_bytes: keyed(1, 0, "x").len() as u64,
            ..config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        // Producer 1's second batch is superseded by producer 2's: compaction removes it,
        // leaving producer 1's first batch as the last one the log shows of it.
        for (pid, seq, key) in [(1, 0, "x"), (1, 1, "a"), (2, 0, "a"), (3, 0, "y")] {
            let info = log
                .append(keyed(pid, seq, key), LeaderEpoch(0), TS)
                .unwrap();
            log.commit(Offset(info.last_offset.0 + 1)).await.unwrap();
        }
        let out = log.compact(TS, 1 << 20).await.unwrap().expect("a pass ran");
        assert_eq!(out.records_dropped, 1);
        assert!(log.cleaned_up_to() >= Offset(3));
        drop(log);
        for f in snapshot_files(dir.path()) {
            std::fs::remove_file(dir.path().join(format!("{f:020}.snapshot"))).unwrap();
        }
        let log = Log::open(dir.path(), cfg).await.unwrap();
        let known: Vec<i64> = log.producers().iter().map(|p| p.producer_id).collect();
        assert_eq!(
            known,
            vec![3],
            "producers last seen below the cleaner checkpoint"
        );
        // Producer 1 goes on at its real next sequence.
        let info = log.append(keyed(1, 2, "z"), LeaderEpoch(0), TS).unwrap();
        assert!(!info.duplicate);
    });
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    /// A batch from producer `pid`: epoch relative to the producer's (-1, 0, +1), sequence
    /// chosen by `seq` (see `choose_seq`), `count` records.
    Send {
        pid: i64,
        epoch_step: i8,
        seq: u8,
        count: usize,
    },
    /// Close and reopen (clean) or drop and reopen (killed, after every append was committed).
    Reopen { clean: bool },
    /// Corrupt the newest snapshot file.
    CorruptSnapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0i64..3, -1i8..=1, 0u8..12, 1usize..4)
            .prop_map(|(pid, epoch_step, seq, count)| Op::Send { pid, epoch_step, seq, count }),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => Just(Op::CorruptSnapshot),
    ]
}

/// An accepted batch in the model.
#[derive(Clone, Debug, PartialEq)]
struct Sent {
    epoch: i16,
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
    last_offset: i64,
}

/// Kafka's rules over the plain history of each producer: the duplicate window is the last
/// five batches of the producer's current epoch.
#[derive(Default)]
struct Model {
    producers: std::collections::BTreeMap<i64, (i16, Vec<Sent>)>,
    log_end_offset: i64,
    batches: Vec<(i64, i32, i64)>,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Appended(i64),
    Duplicate(i64, i64),
    OutOfOrder,
    Fenced,
}

impl Model {
    fn send(&mut self, pid: i64, epoch: i16, first_seq: i32, count: usize) -> Outcome {
        let last_seq =
            ((i64::from(first_seq) + count as i64 - 1) % (i64::from(i32::MAX) + 1)) as i32;
        let known = self.producers.get(&pid).cloned();
        if let Some((cur, history)) = &known {
            if *cur == epoch {
                let window = &history[history.len().saturating_sub(5)..];
                if let Some(b) = window
                    .iter()
                    .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
                {
                    return Outcome::Duplicate(b.base_offset, b.last_offset);
                }
            }
            if epoch < *cur {
                return Outcome::Fenced;
            }
            if epoch != *cur && first_seq != 0 {
                return Outcome::OutOfOrder;
            }
            if epoch == *cur {
                let last = history.last().map_or(-1, |b| b.last_seq);
                let follows = i64::from(first_seq) == i64::from(last) + 1
                    || (first_seq == 0 && last == i32::MAX);
                if !follows {
                    return Outcome::OutOfOrder;
                }
            }
        }
        let base = self.log_end_offset;
        let entry = self.producers.entry(pid).or_insert((epoch, Vec::new()));
        if entry.0 != epoch {
            *entry = (epoch, Vec::new());
        }
        entry.1.push(Sent {
            epoch,
            first_seq,
            last_seq,
            base_offset: base,
            last_offset: base + count as i64 - 1,
        });
        self.log_end_offset += count as i64;
        self.batches.push((pid, first_seq, base));
        Outcome::Appended(base)
    }

    /// A sequence for `pid` at `epoch`: the next one, a retry of one of the last seven
    /// batches (with its count), a gap, 0, or one near the wrap.
    fn choose(&self, pid: i64, epoch: i16, seq: u8, count: usize) -> (i32, usize) {
        let history = self
            .producers
            .get(&pid)
            .filter(|(e, _)| *e == epoch)
            .map_or(&[][..], |(_, h)| &h[..]);
        let next = history.last().map_or(0, |b| {
            if b.last_seq == i32::MAX {
                0
            } else {
                b.last_seq + 1
            }
        });
        match seq {
            0..=3 => (next, count),
            4..=8 => {
                // The 1st, 2nd, 3rd and 5th most recent, and the 7th (out of the window).
                let k = [0, 1, 2, 4, 6][usize::from(seq - 4)];
                match history.len().checked_sub(k + 1).map(|i| &history[i]) {
                    Some(b) => (b.first_seq, (b.last_offset - b.base_offset + 1) as usize),
                    None => (next, count),
                }
            }
            9 => (next.wrapping_add(1).max(0), count),
            10 => (0, count),
            _ => (i32::MAX - 1, count),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_log_follows_the_model_across_rolls_and_restarts(
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let cfg = rolling_config();
            let mut log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Send { pid, epoch_step, seq, count } => {
                        let current = model.producers.get(&pid).map_or(0, |(e, _)| *e);
                        let epoch = (current + i16::from(epoch_step)).max(0);
                        let (first_seq, count) = model.choose(pid, epoch, seq, count);
                        let want = model.send(pid, epoch, first_seq, count);
                        let got = match send(&log, pid, epoch, first_seq, count) {
                            Ok(i) if i.duplicate => {
                                Outcome::Duplicate(i.base_offset.0, i.last_offset.0)
                            }
                            Ok(i) => {
                                log.commit(Offset(i.last_offset.0 + 1)).await.unwrap();
                                Outcome::Appended(i.base_offset.0)
                            }
                            Err(StorageError::OutOfOrderSequence(_)) => Outcome::OutOfOrder,
                            Err(StorageError::InvalidProducerEpoch(_)) => Outcome::Fenced,
                            Err(e) => panic!("unexpected error {e:?}"),
                        };
                        assert_eq!(
                            got, want,
                            "pid {pid} epoch {epoch} seq {first_seq} count {count}"
                        );
                    }
                    Op::Reopen { clean } => {
                        if clean {
                            log.close().await.unwrap();
                        }
                        drop(log);
                        log = Log::open(dir.path(), cfg.clone()).await.unwrap();
                    }
                    Op::CorruptSnapshot => {
                        if let Some(o) = snapshot_files(dir.path()).last() {
                            let p = dir.path().join(format!("{o:020}.snapshot"));
                            let mut bytes = std::fs::read(&p).unwrap();
                            bytes[2] ^= 1; // in the CRC
                            std::fs::write(&p, bytes).unwrap();
                        }
                    }
                }
                assert_eq!(log.offsets().log_end_offset, Offset(model.log_end_offset));
            }
            assert_eq!(log_batches(&log).await, model.batches);
        });
    }
}
