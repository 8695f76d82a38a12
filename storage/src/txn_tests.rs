//! Transactions through `Log`: the last stable offset held by open transactions and by
//! markers not yet below the high watermark; the aborted transaction index and
//! `aborted_transactions` ranges; INVALID_TXN_STATE and coordinator fencing; open and aborted
//! transactions across clean and unclean restarts; `.txnindex` files deleted or damaged and
//! rebuilt, deleted with their segments; compaction dropping aborted records and keeping
//! committed ones and every marker; and a property test against a model of open and aborted
//! transactions with rolls, clean and killed restarts and lost `.txnindex` files.

use std::path::Path;

use bytes::BytesMut;
use proptest::prelude::*;

use crate::batch::{BatchHeader, HEADER_BYTES, TRANSACTIONAL_BIT};
use crate::records::read_varlong;
use crate::test_util::*;
use crate::txn_index::AbortedTxn;
use crate::*;

const TS: i64 = 1_000_000;

fn config() -> LogConfig {
    LogConfig {
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

/// Segments of about three small batches.
fn rolling_config() -> LogConfig {
    LogConfig {
        segment_bytes: 3 * txn_batch(1, 0, 0, 2, TS).len() as u64,
        ..config()
    }
}

/// Appends one request and commits it.
async fn put(log: &Log, batch: BytesMut) -> AppendInfo {
    let info = log.append(batch, LeaderEpoch(0), TS).unwrap();
    log.commit(Offset(info.last_offset.0 + 1)).await.unwrap();
    info
}

fn abort(pid: i64, coordinator_epoch: i32) -> BytesMut {
    marker_batch(pid, 0, false, coordinator_epoch, TS)
}

fn commit(pid: i64, coordinator_epoch: i32) -> BytesMut {
    marker_batch(pid, 0, true, coordinator_epoch, TS)
}

fn lso(log: &Log) -> i64 {
    let offsets = log.offsets();
    assert_eq!(offsets.last_stable_offset, log.last_stable_offset());
    offsets.last_stable_offset.0
}

fn aborted(log: &Log, from: i64, upto: i64) -> Vec<(i64, i64)> {
    log.aborted_transactions(Offset(from), Offset(upto))
        .into_iter()
        .map(|(pid, first)| (pid, first.0))
        .collect()
}

fn entry(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: Offset(first),
        last_offset: Offset(last),
        last_stable_offset: Offset(lso),
    }
}

/// The `.txnindex` files in `dir`: (base offset, bytes), ascending.
fn txn_index_files(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut out: Vec<(i64, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let base = name.strip_suffix(".txnindex")?.parse().ok()?;
            Some((base, std::fs::read(e.path()).unwrap()))
        })
        .collect();
    out.sort();
    out
}

fn txn_index_path(dir: &Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}.txnindex"))
}

#[test]
fn an_open_transaction_holds_the_last_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        put(&log, batch(2, TS, 5)).await;
        assert_eq!(lso(&log), 2, "no transaction: the high watermark");
        put(&log, txn_batch(1, 0, 0, 3, TS)).await; // 2..=4
        put(&log, batch(2, TS, 5)).await; // 5..=6
        put(&log, txn_batch(2, 0, 0, 1, TS)).await; // 7
        put(&log, txn_batch(1, 0, 3, 1, TS)).await; // 8
        assert_eq!(log.offsets().high_watermark, Offset(9));
        assert_eq!(lso(&log), 2, "producer 1's transaction is open since 2");
        // Producer 1 commits: the marker is appended, not yet below the high watermark.
        let info = log.append(commit(1, 0), LeaderEpoch(0), TS).unwrap();
        assert_eq!(info.base_offset, Offset(9));
        assert_eq!(
            lso(&log),
            2,
            "the marker is not below the high watermark yet"
        );
        log.commit(Offset(10)).await.unwrap();
        assert_eq!(lso(&log), 7, "producer 2's transaction is still open");
        let read = log.read(Offset(0), 1 << 20, Offset(7)).await.unwrap();
        assert_eq!(read.last_stable_offset, Offset(7));
        assert_eq!(batches_in(&read.records).last().unwrap().1, 6);
        put(&log, abort(2, 0)).await; // 10
        assert_eq!(lso(&log), 11);
        assert_eq!(log.offsets().high_watermark, Offset(11));
        assert!(log
            .producers()
            .iter()
            .all(|p| p.current_txn_start_offset == -1));
        // The log start offset moved past an open transaction's start: the LSO follows it.
        put(&log, txn_batch(3, 0, 0, 2, TS)).await; // 11..=12
        assert_eq!(lso(&log), 11);
        log.delete_records(Offset(12)).await.unwrap();
        assert_eq!(lso(&log), 12);
        let offsets = log.offsets();
        assert!(offsets.log_start_offset <= offsets.last_stable_offset);
        assert!(offsets.last_stable_offset <= offsets.high_watermark);
    });
}

#[test]
fn aborted_transactions_are_indexed_and_found_by_range() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        put(&log, txn_batch(1, 0, 0, 2, TS)).await; // 0..=1
        put(&log, txn_batch(2, 0, 0, 1, TS)).await; // 2
        put(&log, abort(1, 5)).await; // 3
        put(&log, commit(2, 5)).await; // 4
        put(&log, txn_batch(3, 0, 0, 2, TS)).await; // 5..=6
        put(&log, abort(3, 5)).await; // 7
                                      // Producer 1's entry: producer 2 was still open (since 2) when it aborted.
        assert_eq!(
            log.txn_index_entries(),
            vec![entry(1, 0, 3, 2), entry(3, 5, 7, 8)]
        );
        assert_eq!(aborted(&log, 0, 8), vec![(1, 0), (3, 5)]);
        assert_eq!(aborted(&log, 0, 1), vec![(1, 0)]);
        assert_eq!(aborted(&log, 3, 4), vec![(1, 0)], "the marker's own offset");
        assert_eq!(aborted(&log, 4, 5), vec![], "between the two");
        assert_eq!(aborted(&log, 6, 7), vec![(3, 5)]);
        assert_eq!(aborted(&log, 8, 20), vec![]);
        assert_eq!(aborted(&log, 5, 5), vec![], "an empty range");
        // A marker for a producer without an open transaction indexes nothing.
        put(&log, abort(4, 0)).await; // 8
        assert_eq!(log.txn_index_entries().len(), 2);
        assert_eq!(lso(&log), 9);
    });
}

#[test]
fn markers_are_fenced_by_coordinator_epoch_and_data_by_the_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config()).await.unwrap();
        put(&log, txn_batch(1, 0, 0, 2, TS)).await; // 0..=1
        put(&log, commit(1, 5)).await; // 2
        assert_eq!(log.producers()[0].coordinator_epoch, 5);
        put(&log, txn_batch(1, 0, 2, 1, TS)).await; // 3
                                                    // An older coordinator's marker is refused and appends nothing.
        let r = log.append(abort(1, 4), LeaderEpoch(0), TS);
        assert!(
            matches!(r, Err(StorageError::TransactionCoordinatorFenced(_))),
            "{r:?}"
        );
        // So is a non-transactional batch while the transaction is open (and a retry of a
        // batch already appended is still a duplicate).
        let r = log.append(producer_batch(1, 0, 3, 1, TS), LeaderEpoch(0), TS);
        assert!(matches!(r, Err(StorageError::InvalidTxnState(_))), "{r:?}");
        assert!(
            log.append(txn_batch(1, 0, 2, 1, TS), LeaderEpoch(0), TS)
                .unwrap()
                .duplicate
        );
        assert_eq!(log.offsets().log_end_offset, Offset(4));
        assert_eq!(lso(&log), 3);
        // A newer coordinator's marker is taken, and fences the one before it.
        put(&log, abort(1, 6)).await; // 4
        assert_eq!(log.producers()[0].coordinator_epoch, 6);
        let r = log.append(commit(1, 5), LeaderEpoch(0), TS);
        assert!(
            matches!(r, Err(StorageError::TransactionCoordinatorFenced(_))),
            "{r:?}"
        );
        // The transaction is over: a non-transactional batch goes in.
        assert_eq!(
            put(&log, producer_batch(1, 0, 3, 1, TS)).await.base_offset,
            Offset(5)
        );
        assert_eq!(log.txn_index_entries(), vec![entry(1, 3, 4, 5)]);
        assert_eq!(lso(&log), 6);
    });
}

#[test]
fn control_batches_and_batch_ends_are_found_from_headers() {
    let mut two = batch(2, TS, 5);
    two.extend_from_slice(&txn_batch(1, 0, 0, 3, TS));
    assert!(!contains_control_batch(&two));
    assert_eq!(end_offset_of(&two), Some(3), "the last batch's end");
    let mut with_marker = two.clone();
    with_marker.extend_from_slice(&commit(1, 0));
    assert!(contains_control_batch(&with_marker));
    // A cut buffer: the whole batches before the cut count, nothing after it is read.
    assert!(!contains_control_batch(
        &with_marker[..with_marker.len() - 1]
    ));
    assert_eq!(end_offset_of(&two[..two.len() - 1]), Some(2));
    assert_eq!(end_offset_of(&[]), None);
    assert!(!contains_control_batch(&[0xff; 10]));
}

/// Producer 1 aborts a transaction that spans segments, producer 2 leaves one open; returns
/// what a reopened log must show again.
async fn transactions_over_segments(log: &Log) -> (LogOffsets, Vec<AbortedTxn>) {
    put(log, batch(2, TS, 5)).await; // 0..=1
    put(log, txn_batch(1, 0, 0, 2, TS)).await; // 2..=3
    put(log, txn_batch(2, 0, 0, 2, TS)).await; // 4..=5
    put(log, batch(2, TS, 5)).await; // 6..=7
    put(log, txn_batch(1, 0, 2, 2, TS)).await; // 8..=9
    put(log, abort(1, 0)).await; // 10
    put(log, batch(2, TS, 5)).await; // 11..=12
    put(log, batch(2, TS, 5)).await; // 13..=14
    assert!(log.segment_count() >= 3, "{:?}", log.segment_layout());
    assert_eq!(log.txn_index_entries(), vec![entry(1, 2, 10, 4)]);
    assert_eq!(lso(log), 4);
    // From a segment before the marker's.
    assert_eq!(aborted(log, 2, 3), vec![(1, 2)]);
    (log.offsets(), log.txn_index_entries())
}

#[test]
fn open_and_aborted_transactions_survive_restarts() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let cfg = rolling_config();
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            let (offsets, entries) = transactions_over_segments(&log).await;
            let active = log.segment_layout().last().unwrap().0;
            if clean {
                log.close().await.unwrap();
            }
            drop(log);
            // Killed, the active segment has no index on disk: rebuilt by the replay.
            assert_eq!(txn_index_path(dir.path(), active).exists(), clean);
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            assert_eq!(log.offsets(), offsets, "clean: {clean}");
            assert_eq!(log.txn_index_entries(), entries, "clean: {clean}");
            assert_eq!(aborted(&log, 0, 15), vec![(1, 2)]);
            let open: Vec<(i64, i64)> = log
                .producers()
                .iter()
                .map(|p| (p.producer_id, p.current_txn_start_offset))
                .collect();
            assert_eq!(open, vec![(1, -1), (2, 4)]);
            // Producer 2's transaction goes on after the restart, and ends.
            put(&log, txn_batch(2, 0, 2, 1, TS)).await; // 15
            assert_eq!(lso(&log), 4);
            put(&log, abort(2, 0)).await; // 16
            assert_eq!(lso(&log), 17);
            assert_eq!(aborted(&log, 0, 17), vec![(1, 2), (2, 4)]);
            let entries = log.txn_index_entries();
            drop(log);
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            assert_eq!(log.txn_index_entries(), entries, "clean: {clean}");
            assert_eq!(lso(&log), 17);
            // Every closed segment has its index on disk.
            log.close().await.unwrap();
            let files: Vec<i64> = txn_index_files(dir.path()).iter().map(|f| f.0).collect();
            let bases: Vec<i64> = log.segment_layout().iter().map(|s| s.0).collect();
            assert_eq!(files, bases);
        });
    }
}

#[test]
fn deleted_or_damaged_txn_indexes_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = rolling_config();
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        for i in 0..8 {
            let pid = 10 + i;
            put(&log, txn_batch(pid, 0, 0, 2, TS)).await;
            put(&log, batch(1, TS, 5)).await;
            let marker = if i % 3 == 0 {
                commit(pid, 0)
            } else {
                abort(pid, 0)
            };
            put(&log, marker).await;
        }
        let entries = log.txn_index_entries();
        assert_eq!(entries.len(), 5);
        log.close().await.unwrap();
        drop(log);
        let files = txn_index_files(dir.path());
        assert!(files.len() >= 4, "{files:?}");
        assert!(files.iter().filter(|f| !f.1.is_empty()).count() >= 3);
        let with_entries: Vec<i64> = files
            .iter()
            .filter(|f| !f.1.is_empty())
            .map(|f| f.0)
            .collect();
        // One deleted, one cut short, one naming a marker outside its segment.
        std::fs::remove_file(txn_index_path(dir.path(), with_entries[0])).unwrap();
        let cut = txn_index_path(dir.path(), with_entries[1]);
        let bytes = std::fs::read(&cut).unwrap();
        std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
        let mut outside = bytes.clone();
        outside[18..26].copy_from_slice(&1_000_000i64.to_be_bytes());
        std::fs::write(txn_index_path(dir.path(), with_entries[2]), &outside).unwrap();
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        assert_eq!(log.txn_index_entries(), entries);
        log.close().await.unwrap();
        drop(log);
        assert_eq!(txn_index_files(dir.path()), files, "rewritten identically");

        // Every index and every snapshot gone: rebuilt from the whole log.
        for (base, _) in &files {
            std::fs::remove_file(txn_index_path(dir.path(), *base)).unwrap();
        }
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "snapshot") {
                std::fs::remove_file(p).unwrap();
            }
        }
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        assert_eq!(log.txn_index_entries(), entries);
        assert_eq!(aborted(&log, 0, 100).len(), 5);
        log.close().await.unwrap();
        assert_eq!(txn_index_files(dir.path()), files);
    });
}

#[test]
fn txn_indexes_go_with_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            retention_bytes: 0,
            ..rolling_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        for i in 0..6 {
            put(&log, txn_batch(i, 0, 0, 2, TS)).await;
            put(&log, abort(i, 0)).await;
        }
        let bases = |log: &Log| -> Vec<i64> { log.segment_layout().iter().map(|s| s.0).collect() };
        let closed = bases(&log).len() - 1;
        let on_disk: Vec<i64> = txn_index_files(dir.path()).iter().map(|f| f.0).collect();
        assert_eq!(
            on_disk,
            bases(&log)[..closed].to_vec(),
            "finalized segments"
        );
        // DeleteRecords into the third segment deletes the first two and their indexes.
        let third = bases(&log)[2];
        log.delete_records(Offset(third)).await.unwrap();
        let on_disk: Vec<i64> = txn_index_files(dir.path()).iter().map(|f| f.0).collect();
        assert_eq!(on_disk.first(), Some(&third));
        // Retention deletes all but the active segment.
        log.enforce_retention(TS).await.unwrap();
        assert_eq!(log.segment_count(), 1);
        assert!(txn_index_files(dir.path()).is_empty());
        assert_eq!(lso(&log), log.offsets().high_watermark.0);
    });
}

/// (offset, key, value) of every record of `log` below its high watermark; a marker shows as
/// key "marker" and value "commit" or "abort". Uncompressed batches only.
async fn contents(log: &Log) -> Vec<(i64, String, String)> {
    let end = log.offsets().high_watermark;
    let mut out = Vec::new();
    let mut at = log.offsets().log_start_offset;
    while at < end {
        let r = log.read(at, 1 << 20, end).await.unwrap();
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.records.len() {
            let h = BatchHeader::parse(&r.records[pos..]).unwrap();
            let batch = &r.records[pos..pos + h.size];
            if h.is_control() {
                let m = crate::records::end_txn_marker(batch).unwrap();
                let kind = if m.kind == MarkerType::Commit {
                    "commit"
                } else {
                    "abort"
                };
                out.push((h.base_offset, "marker".into(), kind.into()));
            } else {
                let records = &batch[HEADER_BYTES..];
                let mut p = 0usize;
                for _ in 0..h.records_count {
                    let len = read_varlong(records, &mut p).unwrap() as usize;
                    let end = p + len;
                    let mut q = p + 1;
                    read_varlong(records, &mut q).unwrap();
                    let delta = read_varlong(records, &mut q).unwrap();
                    let mut field = || {
                        let l = read_varlong(records, &mut q).unwrap();
                        let v = String::from_utf8(records[q..q + l.max(0) as usize].to_vec());
                        q += l.max(0) as usize;
                        v.unwrap()
                    };
                    let key = field();
                    let value = field();
                    out.push((h.base_offset + delta, key, value));
                    p = end;
                }
            }
            at = Offset(h.last_offset() + 1);
            pos += h.size;
        }
    }
    out
}

fn keyed_txn(pid: i64, seq: i32, key: &str, value: &str) -> BytesMut {
    with_producer(
        keyed_batch(&[(Some(key), Some(value))], TS, 0),
        pid,
        0,
        seq,
        TRANSACTIONAL_BIT,
    )
}

fn keyed(key: &str, value: &str) -> BytesMut {
    keyed_batch(&[(Some(key), Some(value))], TS, 0)
}

fn row(offset: i64, key: &str, value: &str) -> (i64, String, String) {
    (offset, key.to_string(), value.to_string())
}

#[test]
fn compaction_drops_aborted_records_and_keeps_committed_ones_and_markers() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            // Below two batches: every batch is its own segment.
            segment_bytes: 140,
            cleanup_compact: true,
            cleanup_delete: false,
            min_cleanable_dirty_ratio: 0.0,
            ..config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        put(&log, keyed("a", "a0")).await; // 0
        put(&log, keyed_txn(1, 0, "a", "a1")).await; // 1, aborted below
        put(&log, keyed_txn(2, 0, "b", "b1")).await; // 2, committed below
        put(&log, abort(1, 0)).await; // 3
        put(&log, commit(2, 0)).await; // 4
        put(&log, keyed("c", "c0")).await; // 5
        put(&log, keyed_txn(3, 0, "c", "c1")).await; // 6, open
        put(&log, keyed("e", "e0")).await; // 7
        put(&log, keyed("f", "f0")).await; // 8 (the active segment)
        assert_eq!(log.segment_count(), 9, "{:?}", log.segment_layout());
        assert_eq!(lso(&log), 6);
        let out = log.compact(TS, 1 << 20).await.unwrap().expect("a pass ran");
        // Only below the LSO: producer 3's open transaction (and "c1") stays uncleaned, so
        // "c0" is not superseded; the aborted "a1" is dropped and hides nothing.
        assert_eq!(out.cleaned_up_to, Offset(6));
        assert_eq!(out.records_dropped, 1);
        assert_eq!(
            contents(&log).await,
            vec![
                row(0, "a", "a0"),
                row(2, "b", "b1"),
                row(3, "marker", "abort"),
                row(4, "marker", "commit"),
                row(5, "c", "c0"),
                row(6, "c", "c1"),
                row(7, "e", "e0"),
                row(8, "f", "f0"),
            ]
        );
        // Producer 3 aborts: "c1" goes, and "c0" stays (an aborted record supersedes none).
        put(&log, abort(3, 0)).await; // 9
        put(&log, keyed("g", "g0")).await; // 10
        put(&log, keyed("h", "h0")).await; // 11 (the active segment)
        assert_eq!(lso(&log), 12);
        // Every cleaned segment merges into one, which keeps both aborted transactions.
        log.set_config(LogConfig {
            segment_bytes: 1 << 20,
            ..cfg.clone()
        });
        let out = log.compact(TS, 1 << 20).await.unwrap().expect("a pass ran");
        assert_eq!((out.records_dropped, out.segments_out), (1, 1));
        let expect = vec![
            row(0, "a", "a0"),
            row(2, "b", "b1"),
            row(3, "marker", "abort"),
            row(4, "marker", "commit"),
            row(5, "c", "c0"),
            row(7, "e", "e0"),
            row(8, "f", "f0"),
            row(9, "marker", "abort"),
            row(10, "g", "g0"),
            row(11, "h", "h0"),
        ];
        assert_eq!(contents(&log).await, expect);
        let entries = vec![entry(1, 1, 3, 2), entry(3, 6, 9, 10)];
        assert_eq!(log.txn_index_entries(), entries);
        assert_eq!(aborted(&log, 0, 12), vec![(1, 1), (3, 6)]);
        let files = txn_index_files(dir.path());
        assert_eq!(files[0].0, 0);
        assert_eq!(files[0].1.len(), 2 * crate::txn_index::TXN_ENTRY_BYTES);
        // Restart: the same contents, indexes and LSO.
        log.close().await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert_eq!(log.txn_index_entries(), entries);
        assert_eq!(contents(&log).await, expect);
        assert_eq!(lso(&log), 12);
    });
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    /// A batch of `count` records from producer `pid` (or none), transactional or not.
    Data {
        pid: Option<i64>,
        transactional: bool,
        count: usize,
    },
    /// Producer `pid`'s marker.
    Marker { pid: i64, commit: bool },
    /// Close and reopen (clean) or drop and reopen (killed); then delete the `.txnindex` of
    /// the segment at `damage` (an index into the segments), if any.
    Reopen {
        clean: bool,
        damage: Option<prop::sample::Index>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::option::weighted(0.8, 0i64..3), any::<bool>(), 1usize..3).prop_map(
            |(pid, transactional, count)| Op::Data { pid, transactional, count }
        ),
        3 => (0i64..3, any::<bool>()).prop_map(|(pid, commit)| Op::Marker { pid, commit }),
        1 => (any::<bool>(), prop::option::of(any::<prop::sample::Index>()))
            .prop_map(|(clean, damage)| Op::Reopen { clean, damage }),
    ]
}

/// The transactions of a partition as plain history.
#[derive(Default)]
struct Model {
    log_end_offset: i64,
    /// Per producer: next sequence, first offset of its open transaction.
    producers: std::collections::BTreeMap<i64, (i32, Option<i64>)>,
    /// (producer id, first offset, marker offset) of every aborted transaction, by marker.
    aborted: Vec<(i64, i64, i64)>,
}

impl Model {
    fn last_stable_offset(&self) -> i64 {
        self.producers
            .values()
            .filter_map(|p| p.1)
            .min()
            .unwrap_or(self.log_end_offset)
    }

    fn aborted_in(&self, from: i64, upto: i64) -> Vec<(i64, i64)> {
        self.aborted
            .iter()
            .filter(|t| from < upto && t.2 >= from && t.1 < upto)
            .map(|t| (t.0, t.1))
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn transactions_follow_the_model_across_rolls_restarts_and_lost_indexes(
        ops in prop::collection::vec(op(), 1..50),
        ranges in prop::collection::vec((0i64..60, 0i64..60), 4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let cfg = rolling_config();
            let mut log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            let mut model = Model::default();
            for op in ops {
                match op {
                    Op::Data { pid: None, count, .. } => {
                        put(&log, batch(count, TS, 5)).await;
                        model.log_end_offset += count as i64;
                    }
                    Op::Data { pid: Some(pid), transactional, count } => {
                        let (seq, open) = *model.producers.entry(pid).or_default();
                        let b = if transactional {
                            txn_batch(pid, 0, seq, count, TS)
                        } else {
                            producer_batch(pid, 0, seq, count, TS)
                        };
                        let r = log.append(b, LeaderEpoch(0), TS);
                        if open.is_some() && !transactional {
                            assert!(matches!(r, Err(StorageError::InvalidTxnState(_))), "{r:?}");
                            continue;
                        }
                        let info = r.unwrap();
                        log.commit(Offset(info.last_offset.0 + 1)).await.unwrap();
                        assert_eq!(info.base_offset.0, model.log_end_offset);
                        let first = if transactional {
                            open.or(Some(model.log_end_offset))
                        } else {
                            None
                        };
                        model.producers.insert(pid, (seq + count as i32, first));
                        model.log_end_offset += count as i64;
                    }
                    Op::Marker { pid, commit: c } => {
                        let marker = if c { commit(pid, 0) } else { abort(pid, 0) };
                        put(&log, marker).await;
                        let entry = model.producers.entry(pid).or_default();
                        if let Some(first) = entry.1.take() {
                            if !c {
                                model.aborted.push((pid, first, model.log_end_offset));
                            }
                        }
                        model.log_end_offset += 1;
                    }
                    Op::Reopen { clean, damage } => {
                        let bases: Vec<i64> = log.segment_layout().iter().map(|s| s.0).collect();
                        if clean {
                            log.close().await.unwrap();
                        }
                        drop(log);
                        if let Some(i) = damage {
                            let _ = std::fs::remove_file(txn_index_path(
                                dir.path(),
                                bases[i.index(bases.len())],
                            ));
                        }
                        log = Log::open(dir.path(), cfg.clone()).await.unwrap();
                    }
                }
                assert_eq!(log.offsets().log_end_offset.0, model.log_end_offset);
                assert_eq!(lso(&log), model.last_stable_offset());
                let entries: Vec<(i64, i64, i64)> = log
                    .txn_index_entries()
                    .iter()
                    .map(|t| (t.producer_id, t.first_offset.0, t.last_offset.0))
                    .collect();
                assert_eq!(entries, model.aborted);
                for &(from, upto) in &ranges {
                    assert_eq!(
                        aborted(&log, from, upto),
                        model.aborted_in(from, upto),
                        "[{from}, {upto})"
                    );
                }
            }
        });
    }
}
