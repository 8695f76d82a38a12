//! Unit tests of the partition log against real files on a glommio executor: validation,
//! offset assignment, reads (tail cache and segment files), rolls, time lookups, epochs,
//! recovery and group commit.

use std::path::Path;

use bytes::BytesMut;

use crate::batch::{validate_one, BatchHeader, CRC_AT, MAGIC_AT};
use crate::test_util::*;
use crate::*;

fn small_config() -> LogConfig {
    LogConfig {
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn log_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn validation_rejects_bad_batches_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        log.append(batch(2, 1000, 10), LeaderEpoch(0), 0).unwrap();
        let good = batch(3, 1000, 10);

        let mut bad_magic = good.clone();
        bad_magic[MAGIC_AT] = 1;
        let mut bad_crc = good.clone();
        bad_crc[CRC_AT] ^= 0xff;
        let truncated = BytesMut::from(&good[..good.len() - 1]);
        let mut short_len = good.clone();
        short_len[8..12].copy_from_slice(&48i32.to_be_bytes());
        let mut flipped_payload = good.clone();
        let last = flipped_payload.len() - 1;
        flipped_payload[last] ^= 1;

        for (name, bytes, corrupt) in [
            ("bad magic", bad_magic, true),
            ("bad crc", bad_crc, true),
            ("truncated", truncated, true),
            ("batchLength < 49", short_len, true),
            ("payload flipped", flipped_payload, true),
        ] {
            // A good batch first: the whole request must still be refused.
            let mut request = good.clone();
            request.extend_from_slice(&bytes);
            let err = log.append(request, LeaderEpoch(0), 0).unwrap_err();
            assert!(
                matches!(err, StorageError::CorruptMessage(_)) == corrupt,
                "{name}: {err:?}"
            );
            assert_eq!(log.offsets().log_end_offset, Offset(2), "{name}");
        }

        let big = batch(1, 1000, 2000);
        let mut cfg = log.config();
        cfg.max_message_bytes = 1000;
        log.set_config(cfg);
        match log.append(big.clone(), LeaderEpoch(0), 0) {
            Err(StorageError::MessageTooLarge { size, max }) => {
                assert_eq!(size, big.len());
                assert_eq!(max, 1000);
            }
            other => panic!("expected MessageTooLarge, got {other:?}"),
        }
        let mut neg = good.clone();
        neg[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = crate::batch::compute_crc(&neg);
        neg[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            log.append(neg, LeaderEpoch(0), 0),
            Err(StorageError::InvalidRecord(_))
        ));
        assert!(matches!(
            log.append(BytesMut::new(), LeaderEpoch(0), 0),
            Err(StorageError::InvalidRecord(_))
        ));
        assert_eq!(log.offsets().log_end_offset, Offset(2));
        let read = log.read(Offset(0), 1 << 20, Offset(100)).await.unwrap();
        assert_eq!(batches_in(&read.records), vec![(0, 1, read.records.len())]);
    });
}

#[test]
fn validate_batches_summarises() {
    let mut two = batch(3, 10, 5);
    two.extend_from_slice(&batch(2, 50, 5));
    let s = validate_batches(&two, 1 << 20).unwrap();
    assert_eq!(s.batch_count, 2);
    assert_eq!(s.record_count, 5);
    assert_eq!(s.max_timestamp_ms, 51);
    assert!(validate_batches(&two[..10], 1 << 20).is_err());
}

#[test]
fn append_assigns_dense_offsets_and_rewrites_base_offset() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        let a = log.append(batch(3, 100, 8), LeaderEpoch(5), 1).unwrap();
        assert_eq!(
            (a.base_offset, a.last_offset, a.record_count),
            (Offset(0), Offset(2), 3)
        );
        assert_eq!(a.log_append_time_ms, -1);
        let mut two = batch(2, 200, 8);
        two.extend_from_slice(&batch(4, 300, 8));
        let b = log.append(two, LeaderEpoch(5), 2).unwrap();
        assert_eq!(
            (b.base_offset, b.last_offset, b.record_count),
            (Offset(3), Offset(8), 6)
        );
        let o = log.offsets();
        assert_eq!(o.log_end_offset, Offset(9));
        assert_eq!(
            o.high_watermark,
            Offset(0),
            "append does not move the high watermark"
        );
        log.commit(Offset(9)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(9));
        let read = log.read(Offset(0), 1 << 20, Offset(9)).await.unwrap();
        let got = batches_in(&read.records);
        assert_eq!(
            got.iter().map(|b| (b.0, b.1)).collect::<Vec<_>>(),
            vec![(0, 2), (3, 4), (5, 8)]
        );
        let mut pos = 0;
        for (_, _, size) in got {
            let h = validate_one(&read.records[pos..pos + size], u32::MAX).unwrap();
            assert_eq!(h.leader_epoch, 5);
            pos += size;
        }
    });
}

#[test]
fn log_append_time_rewrites_timestamps_with_valid_crc() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg).await.unwrap();
        let info = log
            .append(batch(3, 100, 8), LeaderEpoch(0), 777_000)
            .unwrap();
        assert_eq!(info.log_append_time_ms, 777_000);
        let read = log.read(Offset(0), 1 << 20, Offset(10)).await.unwrap();
        let h = validate_one(&read.records, u32::MAX).expect("crc still valid");
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 777_000);
        assert_eq!(h.base_timestamp, 777_000);
        assert_eq!(
            log.offset_for_timestamp(777_000).await.unwrap(),
            Some((Offset(0), 777_000))
        );
        assert_eq!(log.offset_for_timestamp(777_001).await.unwrap(), None);
    });
}

async fn fill(log: &Log, batches: usize, records: usize, value_bytes: usize, ts0: i64) {
    for i in 0..batches {
        let ts = ts0 + (i * records) as i64;
        log.append(batch(records, ts, value_bytes), LeaderEpoch(0), ts)
            .unwrap();
    }
}

async fn check_reads(log: &Log, batch_bytes: usize) {
    // Whole batches, starting with the one holding the fetch offset (batches of 4 records).
    let r = log.read(Offset(6), 1 << 20, Offset(1000)).await.unwrap();
    let got = batches_in(&r.records);
    assert_eq!(got[0].0, 4);
    assert_eq!(got.len(), 10 - 1);
    // max_bytes: two and a half batches -> two batches.
    let r = log
        .read(Offset(0), batch_bytes * 5 / 2, Offset(1000))
        .await
        .unwrap();
    assert_eq!(
        batches_in(&r.records)
            .iter()
            .map(|b| b.0)
            .collect::<Vec<_>>(),
        vec![0, 4]
    );
    // max_bytes below one batch still returns one whole batch (KIP-74).
    let r = log.read(Offset(9), 10, Offset(1000)).await.unwrap();
    assert_eq!(batches_in(&r.records), vec![(8, 11, batch_bytes)]);
    // max_offset is exclusive: batches ending at or past it are not returned.
    let r = log.read(Offset(0), 1 << 20, Offset(12)).await.unwrap();
    assert_eq!(batches_in(&r.records).last().unwrap().1, 11);
    let r = log.read(Offset(0), 1 << 20, Offset(11)).await.unwrap();
    assert_eq!(batches_in(&r.records).last().unwrap().1, 7);
    // At the end: empty; past it or before the start: out of range.
    let r = log.read(Offset(40), 1 << 20, Offset(1000)).await.unwrap();
    assert!(r.records.is_empty());
    assert!(matches!(
        log.read(Offset(41), 1 << 20, Offset(1000)).await,
        Err(StorageError::OffsetOutOfRange {
            requested: Offset(41),
            ..
        })
    ));
}

#[test]
fn reads_from_cache_files_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let batch_bytes = batch(4, 0, 100).len();
        // Tail cache large enough: served from memory.
        let log = Log::open(&dir.path().join("cached"), small_config())
            .await
            .unwrap();
        fill(&log, 10, 4, 100, 1000).await;
        check_reads(&log, batch_bytes).await;

        // Tail cache off: served from staged memory before commit, then from the file.
        let cfg = LogConfig {
            tail_cache_bytes: 0,
            ..small_config()
        };
        let log = Log::open(&dir.path().join("files"), cfg.clone())
            .await
            .unwrap();
        fill(&log, 10, 4, 100, 1000).await;
        check_reads(&log, batch_bytes).await;
        log.commit(Offset(40)).await.unwrap();
        check_reads(&log, batch_bytes).await;
        log.close().await.unwrap();
        let size = std::fs::metadata(dir.path().join("files/00000000000000000000.log"))
            .unwrap()
            .len();
        assert_eq!(size, 10 * batch_bytes as u64, "close truncates the padding");

        let log = Log::open(&dir.path().join("files"), cfg).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(40));
        assert_eq!(log.offsets().high_watermark, Offset(40));
        check_reads(&log, batch_bytes).await;
        // And new appends after reopen continue the same block-aligned file.
        fill(&log, 1, 4, 100, 5000).await;
        log.commit(Offset(44)).await.unwrap();
        let r = log.read(Offset(41), 1 << 20, Offset(43)).await.unwrap();
        assert!(
            r.records.is_empty(),
            "max_offset 43 excludes the batch 40..43"
        );
        let r = log.read(Offset(41), 1 << 20, Offset(44)).await.unwrap();
        assert_eq!(batches_in(&r.records), vec![(40, 43, batch_bytes)]);
    });
}

#[test]
fn segments_roll_by_size_and_time() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let batch_bytes = batch(2, 0, 50).len() as u64;
        let cfg = LogConfig {
            segment_bytes: batch_bytes * 3,
            segment_ms: 10_000,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg).await.unwrap();
        for i in 0..7 {
            log.append(batch(2, i, 50), LeaderEpoch(0), i).unwrap();
        }
        assert_eq!(log.segment_count(), 3);
        // Time, in record time as Kafka measures it: the active segment (base 12, first batch
        // max timestamp 7) rolls once a batch is more than 10 s newer.
        log.append(batch(2, 10_006, 50), LeaderEpoch(0), 0).unwrap();
        assert_eq!(log.segment_count(), 3);
        log.append(batch(2, 10_007, 50), LeaderEpoch(0), 0).unwrap();
        assert_eq!(log.segment_count(), 4);
        log.commit(Offset(18)).await.unwrap();
        let files = log_files(dir.path());
        for base in [0, 6, 12, 16] {
            assert!(files.contains(&format!("{base:020}.log")), "{files:?}");
        }
        for base in [0, 6, 12] {
            assert!(files.contains(&format!("{base:020}.index")), "{files:?}");
            assert!(
                files.contains(&format!("{base:020}.timeindex")),
                "{files:?}"
            );
            let len = std::fs::metadata(dir.path().join(format!("{base:020}.log")))
                .unwrap()
                .len();
            let expect = if base == 12 { 2 } else { 3 } * batch_bytes;
            assert_eq!(
                len, expect,
                "rolled segment {base} truncated to its logical size"
            );
        }
        for off in 0..18 {
            let r = log.read(Offset(off), 1, Offset(100)).await.unwrap();
            let b = batches_in(&r.records);
            assert!(b[0].0 <= off && off <= b[0].1);
        }
        log.close().await.unwrap();
        let log = Log::open(dir.path(), log.config()).await.unwrap();
        assert_eq!(log.segment_count(), 4);
        assert_eq!(log.offsets().log_end_offset, Offset(18));
        let r = log.read(Offset(7), 1 << 20, Offset(100)).await.unwrap();
        assert_eq!(
            batches_in(&r.records)
                .iter()
                .map(|b| b.0)
                .collect::<Vec<_>>(),
            vec![6, 8, 10]
        );
    });
}

#[test]
fn offset_for_timestamp_finds_exact_record() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            tail_cache_bytes: 0,
            index_interval_bytes: 64,
            segment_bytes: 700,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        // Batches of 5 records at timestamps 1000 + 10*offset, every codec.
        let codecs = [0, GZIP, SNAPPY, SNAPPY_XERIAL, LZ4, ZSTD, 0, GZIP];
        for (i, &codec) in codecs.iter().enumerate() {
            let records: Vec<(i64, Vec<u8>)> = (0..5)
                .map(|r| (1000 + 10 * (i as i64 * 5 + r), vec![b'x'; 40]))
                .collect();
            let b = batch_with(&records, codec);
            log.append(b, LeaderEpoch(0), 0).unwrap();
        }
        assert!(log.segment_count() > 1);
        let check = |log: Log| async move {
            for off in 0..40i64 {
                let ts = 1000 + 10 * off;
                assert_eq!(
                    log.offset_for_timestamp(ts).await.unwrap(),
                    Some((Offset(off), ts))
                );
                assert_eq!(
                    log.offset_for_timestamp(ts - 5).await.unwrap(),
                    Some((Offset(off), ts)),
                    "between records"
                );
            }
            assert_eq!(
                log.offset_for_timestamp(0).await.unwrap(),
                Some((Offset(0), 1000))
            );
            assert_eq!(log.offset_for_timestamp(1391).await.unwrap(), None);
            assert_eq!(log.max_timestamp().await.unwrap(), Some((Offset(39), 1390)));
        };
        check(log.clone()).await;
        log.close().await.unwrap();
        let log = Log::open(dir.path(), cfg).await.unwrap();
        check(log).await;
    });
}

#[test]
fn max_timestamp_in_middle_of_compressed_batch() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.max_timestamp().await.unwrap(), None);
        log.append(batch(3, 10, 5), LeaderEpoch(0), 0).unwrap();
        let records = vec![(50, vec![1]), (90, vec![2]), (60, vec![3])];
        log.append(batch_with(&records, ZSTD), LeaderEpoch(0), 0)
            .unwrap();
        log.append(batch(3, 20, 5), LeaderEpoch(0), 0).unwrap();
        assert_eq!(log.max_timestamp().await.unwrap(), Some((Offset(4), 90)));
        assert_eq!(
            log.offset_for_timestamp(55).await.unwrap(),
            Some((Offset(4), 90))
        );
    });
}

#[test]
fn leader_epoch_checkpoint_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.latest_epoch(), None);
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(0)), None);
        log.append(batch(3, 0, 5), LeaderEpoch(1), 0).unwrap();
        log.append(batch(3, 0, 5), LeaderEpoch(1), 0).unwrap();
        log.append(batch(2, 0, 5), LeaderEpoch(4), 0).unwrap();
        log.append(batch(2, 0, 5), LeaderEpoch(6), 0).unwrap();
        log.commit(Offset(10)).await.unwrap();
        let text = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(text, "0\n3\n1 0\n4 6\n6 8\n");
        let check = |log: &Log| {
            assert_eq!(log.latest_epoch(), Some(LeaderEpoch(6)));
            // Kafka's endOffsetFor: below the first epoch, the requested epoch and the first
            // epoch's start; above the latest, (-1, -1).
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(0)),
                Some((LeaderEpoch(0), Offset(0)))
            );
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(1)),
                Some((LeaderEpoch(1), Offset(6)))
            );
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(3)),
                Some((LeaderEpoch(1), Offset(6)))
            );
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(4)),
                Some((LeaderEpoch(4), Offset(8)))
            );
            assert_eq!(log.end_offset_for_epoch(LeaderEpoch(9)), None);
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(6)),
                Some((LeaderEpoch(6), Offset(10)))
            );
        };
        check(&log);
        log.close().await.unwrap();
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        check(&log);
        // A lost checkpoint is rebuilt from the batches' partitionLeaderEpoch.
        log.close().await.unwrap();
        std::fs::remove_file(dir.path().join("leader-epoch-checkpoint")).unwrap();
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        check(&log);
        // A checkpoint that names an epoch the active segment's batches do not hold (written
        // ahead of data a power cut lost, or over records a lost truncation left): after a
        // stop that was not clean, the batches decide, as in Kafka's segment recovery.
        log.close().await.unwrap();
        std::fs::write(
            dir.path().join("leader-epoch-checkpoint"),
            "0\n3\n1 0\n4 6\n9 8\n",
        )
        .unwrap();
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        check(&log);
    });
}

#[test]
fn deleted_index_is_rebuilt_identically() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 8 * 1024,
            index_interval_bytes: 300,
            tail_cache_bytes: 0,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        fill(&log, 60, 3, 90, 10_000).await;
        log.close().await.unwrap();
        let segs = log.segment_count();
        assert!(segs >= 3);
        let names: Vec<String> = log_files(dir.path())
            .into_iter()
            .filter(|n| n.ends_with("index"))
            .collect();
        let before: Vec<Vec<u8>> = names
            .iter()
            .map(|n| std::fs::read(dir.path().join(n)).unwrap())
            .collect();
        assert!(before.iter().any(|b| b.len() >= 16), "indexes have entries");
        for n in &names {
            std::fs::remove_file(dir.path().join(n)).unwrap();
        }
        // A stale, wrongly sized index is distrusted too.
        std::fs::write(dir.path().join(format!("{:020}.index", 0)), [1, 2, 3]).unwrap();
        let log = Log::open(dir.path(), cfg).await.unwrap();
        log.close().await.unwrap();
        let after: Vec<Vec<u8>> = names
            .iter()
            .map(|n| std::fs::read(dir.path().join(n)).unwrap())
            .collect();
        assert_eq!(before, after);
        for off in (0..180).step_by(7) {
            let r = log.read(Offset(off), 1, Offset(180)).await.unwrap();
            let b = batches_in(&r.records);
            assert!(b[0].0 <= off && off <= b[0].1, "offset {off}: {b:?}");
        }
    });
}

#[test]
fn recovery_truncates_torn_and_padded_tail() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        fill(&log, 5, 2, 30, 0).await;
        log.close().await.unwrap();
        let path = dir.path().join(format!("{:020}.log", 0));
        let good = std::fs::read(&path).unwrap();
        let one = good.len() / 5;
        // Zero padding after the last batch (a crash before the truncate at close).
        let mut padded = good.clone();
        padded.resize(8192, 0);
        std::fs::write(&path, &padded).unwrap();
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(10));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), good.len() as u64);
        // A torn last batch plus a corrupt byte in the one before.
        let mut torn = good.clone();
        torn.truncate(good.len() - 3);
        torn[one * 3 + 70] ^= 0x55;
        std::fs::write(&path, &torn).unwrap();
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(6));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), (one * 3) as u64);
        // The log continues at the recovered end.
        let a = log.append(batch(2, 0, 30), LeaderEpoch(0), 0).unwrap();
        assert_eq!(a.base_offset, Offset(6));
        log.commit(Offset(8)).await.unwrap();
        let r = log.read(Offset(0), 1 << 20, Offset(8)).await.unwrap();
        assert_eq!(batches_in(&r.records).len(), 4);
    });
}

#[test]
fn group_commit_concurrent_callers_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 16 * 1024,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..64i64 {
            let log = log.clone();
            tasks.push(glommio::spawn_local(async move {
                let info = log.append(batch(3, i, 200), LeaderEpoch(0), i).unwrap();
                log.commit(Offset(info.last_offset.0 + 1)).await.unwrap();
                let hw = log.offsets().high_watermark;
                assert!(hw > info.last_offset, "hw {hw:?} after commit of {info:?}");
                info
            }));
        }
        let mut infos = Vec::new();
        for t in tasks {
            infos.push(t.await);
        }
        assert!(
            log.flush_count() < 64,
            "64 concurrent commits shared flushes: {} flushes",
            log.flush_count()
        );
        infos.sort_by_key(|i| i.base_offset);
        for (i, info) in infos.iter().enumerate() {
            assert_eq!(info.base_offset, Offset(3 * i as i64));
        }
        assert!(log.segment_count() > 1);
        // Simulate a crash: no close, reopen straight from the files.
        drop(log);
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(192));
        let mut off = 0;
        while off < 192 {
            let r = log.read(Offset(off), 1 << 20, Offset(192)).await.unwrap();
            let b = batches_in(&r.records);
            assert_eq!(b[0].0, off);
            off = b.last().unwrap().1 + 1;
        }
    });
}

#[test]
fn interval_policy_commit_writes_and_sync_advances_hw() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            flush_policy: FlushPolicy::Interval,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        log.append(batch(2, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.commit(Offset(2)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(2));
        log.append(batch(2, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.sync().await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(4));
        drop(log);
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(4));
    });
}

#[test]
fn config_strings_parse() {
    assert_eq!("group".parse::<FlushPolicy>(), Ok(FlushPolicy::Group));
    assert_eq!("interval".parse::<FlushPolicy>(), Ok(FlushPolicy::Interval));
    assert!("sometimes".parse::<FlushPolicy>().is_err());
    assert_eq!(
        "LogAppendTime".parse::<TimestampType>(),
        Ok(TimestampType::LogAppendTime)
    );
    assert_eq!(
        "CreateTime".parse::<TimestampType>(),
        Ok(TimestampType::CreateTime)
    );
    let d = LogConfig::default();
    assert_eq!(
        (d.segment_bytes, d.max_message_bytes),
        (1_073_741_824, 1_048_588)
    );
    let _ = BatchHeader::parse(&[0u8; 10]);
}

#[test]
fn failed_write_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        log.append(batch(2, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.commit(Offset(2)).await.unwrap();
        log.append(batch(2, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.inject_write_failure();
        assert!(matches!(
            log.commit(Offset(4)).await,
            Err(StorageError::Io(_))
        ));
        assert_eq!(log.offsets().high_watermark, Offset(2));
        assert!(matches!(
            log.append(batch(1, 0, 10), LeaderEpoch(0), 0),
            Err(StorageError::Poisoned(_))
        ));
        assert!(matches!(
            log.commit(Offset(4)).await,
            Err(StorageError::Poisoned(_))
        ));
        assert!(matches!(log.sync().await, Err(StorageError::Poisoned(_))));
        // Reads of committed data still work.
        let r = log.read(Offset(0), 1 << 20, Offset(2)).await.unwrap();
        assert_eq!(batches_in(&r.records).len(), 1);
        drop(log);
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(
            log.offsets().log_end_offset,
            Offset(2),
            "only the synced batch survives"
        );
        log.append(batch(1, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.commit(Offset(3)).await.unwrap();
    });
}

/// Ten segments of one 1-record batch each (timestamps 1000, 2000, ...), committed.
async fn ten_segments(log: &Log) -> usize {
    let one = batch(1, 0, 500).len();
    for i in 0..10i64 {
        log.append(batch(1, (i + 1) * 1000, 500), LeaderEpoch(0), 0)
            .unwrap();
        log.commit(Offset(i + 1)).await.unwrap();
    }
    one
}

#[test]
fn retention_by_time_and_size_deletes_closed_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 600,
            retention_ms: -1,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg).await.unwrap();
        let one = ten_segments(&log).await;
        assert_eq!(log.segment_count(), 10);
        // retention.ms = -1 keeps everything.
        let out = log.enforce_retention(1_000_000).await.unwrap();
        assert_eq!(out.segments_deleted, 0);
        // By time: segments whose newest record is older than now - retention.ms.
        let mut c = log.config();
        c.retention_ms = 5000;
        log.set_config(c);
        let out = log.enforce_retention(8_500).await.unwrap();
        assert_eq!(
            out.segments_deleted, 3,
            "timestamps 1000..3000 are older than 3500"
        );
        assert_eq!(out.log_start_offset, Offset(3));
        assert_eq!(out.bytes_deleted, 3 * one as u64);
        assert_eq!(log.offsets().log_start_offset, Offset(3));
        // By size: keep at least retention.bytes; the active segment always stays.
        let mut c = log.config();
        c.retention_ms = -1;
        c.retention_bytes = 3 * one as i64;
        log.set_config(c);
        let out = log.enforce_retention(8_500).await.unwrap();
        assert_eq!(out.segments_deleted, 4);
        assert_eq!(log.segment_count(), 3);
        assert_eq!(log.size_bytes(), 3 * one as u64);
        let mut c = log.config();
        c.retention_bytes = 0;
        log.set_config(c);
        log.enforce_retention(8_500).await.unwrap();
        assert_eq!(
            log.segment_count(),
            1,
            "the active segment is never deleted"
        );
        assert_eq!(log.offsets().log_start_offset, Offset(9));
        // Reads below the log start offset are out of range; at it they work.
        let err = log.read(Offset(8), 1 << 20, Offset(10)).await.unwrap_err();
        assert!(
            matches!(err, StorageError::OffsetOutOfRange { .. }),
            "{err:?}"
        );
        let r = log.read(Offset(9), 1 << 20, Offset(10)).await.unwrap();
        assert_eq!(batches_in(&r.records), vec![(9, 9, one)]);
        // The files are gone; a reopen starts where retention left.
        assert_eq!(
            log_files(dir.path())
                .iter()
                .filter(|f| f.ends_with(".log"))
                .count(),
            1
        );
        log.close().await.unwrap();
        let log = Log::open(dir.path(), log.config()).await.unwrap();
        assert_eq!(log.offsets().log_start_offset, Offset(9));
        assert_eq!(log.offsets().log_end_offset, Offset(10));
    });
}

#[test]
fn delete_records_moves_the_start_offset_durably() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 600,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        ten_segments(&log).await;
        // Above the high watermark: out of range, nothing moves.
        let err = log.delete_records(Offset(11)).await.unwrap_err();
        assert!(
            matches!(err, StorageError::OffsetOutOfRange { .. }),
            "{err:?}"
        );
        // Into the middle of the log: segments wholly below go, the start offset is exact.
        assert_eq!(log.delete_records(Offset(4)).await.unwrap(), Offset(4));
        assert_eq!(log.segment_count(), 6);
        assert!(matches!(
            log.read(Offset(3), 1 << 20, Offset(10)).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // Lower than the current start: no change.
        assert_eq!(log.delete_records(Offset(2)).await.unwrap(), Offset(4));
        drop(log);
        // A crash (no close): the start offset survives.
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert_eq!(log.offsets().log_start_offset, Offset(4));
        // -1 = the high watermark.
        assert_eq!(log.delete_records(Offset(-1)).await.unwrap(), Offset(10));
        assert_eq!(log.offsets().log_start_offset, Offset(10));
        assert_eq!(log.segment_count(), 1);
    });
}

#[test]
fn disk_full_refuses_appends_keeps_reads_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        for i in 0..3 {
            log.append(batch(1, 1000 + i, 100), LeaderEpoch(0), 0)
                .unwrap();
            log.commit(Offset(i + 1)).await.unwrap();
        }
        log.inject_disk_full(true);
        log.append(batch(1, 2000, 100), LeaderEpoch(0), 0).unwrap();
        let err = log.commit(Offset(4)).await.unwrap_err();
        assert!(matches!(err, StorageError::DiskFull(_)), "{err:?}");
        assert!(log.is_disk_full());
        // Further appends are refused at once; nothing acknowledged is affected.
        let err = log
            .append(batch(1, 2001, 100), LeaderEpoch(0), 0)
            .unwrap_err();
        assert!(matches!(err, StorageError::DiskFull(_)), "{err:?}");
        assert_eq!(log.offsets().high_watermark, Offset(3));
        let r = log.read(Offset(0), 1 << 20, Offset(3)).await.unwrap();
        assert_eq!(batches_in(&r.records).len(), 3);
        assert!(!log.retry_stalled().await, "still full");
        // Space returns: the staged batch is written, appends resume.
        log.inject_disk_full(false);
        assert!(log.retry_stalled().await);
        assert!(!log.is_disk_full());
        assert_eq!(log.offsets().high_watermark, Offset(4));
        log.append(batch(1, 3000, 100), LeaderEpoch(0), 0).unwrap();
        log.commit(Offset(5)).await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(5));
        let r = log.read(Offset(0), 1 << 20, Offset(5)).await.unwrap();
        let got: Vec<i64> = batches_in(&r.records).iter().map(|b| b.0).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    });
}

/// A log stalled by ENOSPC whose fdatasync then fails when its staged writes are retried is
/// poisoned and cut back to what it synced, as any failed flush is; later retries write nothing
/// over the cut; a restart without a power cut serves nothing whose sync failed (found by the
/// fault simulation, replicated seeds 62 and 372 with disk faults and full disks).
#[test]
fn a_failed_sync_when_a_stalled_log_retries_cuts_back_and_writes_nothing_more() {
    use keel_simdisk::{Fault, SimDisk};
    run(|| async {
        let sim = SimHandle::new(SimDisk::new(7, 0));
        let dir = Path::new("/d/t-0");
        let seg = "d/t-0/00000000000000000000.log";
        let log = Log::open_on(Disk::Sim(sim.clone()), dir, small_config())
            .await
            .unwrap();
        for i in 0..3 {
            log.append(batch(1, 1000 + i, 100), LeaderEpoch(0), 0)
                .unwrap();
            log.commit(Offset(i + 1)).await.unwrap();
        }
        let file_len = |sim: &SimHandle| {
            let d = sim.disk();
            d.len(d.resolve(seg).unwrap()).unwrap()
        };
        let before = file_len(&sim);
        let used = sim.disk().used_bytes();
        sim.disk().inject(Fault::NoSpace { capacity: used });
        // Larger than what is left of the segment's last block: the write must grow the file.
        log.append(batch(1, 2000, 8192), LeaderEpoch(0), 0).unwrap();
        let err = log.commit(Offset(4)).await.unwrap_err();
        assert!(matches!(err, StorageError::DiskFull(_)), "{err:?}");
        // Space comes back, and the retry's fdatasync fails.
        sim.disk().remove_no_space();
        sim.disk().inject(Fault::SyncEio {
            prefix: "d/t-0/".into(),
            once: true,
        });
        assert!(!log.retry_stalled().await);
        assert!(log.poisoned().is_some(), "a failed sync poisons the log");
        let cut = file_len(&sim);
        assert!(
            cut <= before,
            "cut back to what was synced: {cut} bytes, {before} before the stall"
        );
        assert!(!log.retry_stalled().await);
        assert_eq!(file_len(&sim), cut, "a poisoned log writes nothing more");
        drop(log);
        crate::file_cache::forget_under(dir);
        let log = Log::open_on(Disk::Sim(sim.clone()), dir, small_config())
            .await
            .unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(3));
        let r = log.read(Offset(0), 1 << 20, Offset(3)).await.unwrap();
        assert_eq!(batches_in(&r.records).len(), 3);
    });
}

/// Every (offset, key, value) of the log, read from `from`.
async fn keyed_contents(log: &Log, from: i64) -> Vec<(i64, String, Option<String>)> {
    let end = log.offsets().high_watermark;
    let mut out = Vec::new();
    let mut at = Offset(from);
    while at < end {
        let r = log.read(at, 1 << 20, end).await.unwrap();
        if r.records.is_empty() {
            break;
        }
        let mut pos = 0;
        while pos < r.records.len() {
            let h = BatchHeader::parse(&r.records[pos..]).unwrap();
            let batch = &r.records[pos..pos + h.size];
            let section = &batch[crate::batch::HEADER_BYTES..];
            let raw = crate::records::decompress(h.compression(), section).unwrap();
            let mut p = 0usize;
            for _ in 0..h.records_count {
                let (len, n) = read_varlong_at(&raw[p..]);
                p += n;
                let rec = &raw[p..p + len as usize];
                p += len as usize;
                let mut q = 1usize; // attributes
                let (_, n) = read_varlong_at(&rec[q..]);
                q += n;
                let (delta, n) = read_varlong_at(&rec[q..]);
                q += n;
                let mut field = || {
                    let (l, n) = read_varlong_at(&rec[q..]);
                    q += n;
                    if l < 0 {
                        None
                    } else {
                        let v = String::from_utf8(rec[q..q + l as usize].to_vec()).unwrap();
                        q += l as usize;
                        Some(v)
                    }
                };
                let key = field().unwrap_or_default();
                let value = field();
                let offset = h.base_offset + delta;
                if offset >= from {
                    out.push((offset, key, value));
                }
            }
            at = Offset(h.last_offset() + 1);
            pos += h.size;
        }
    }
    out
}

fn read_varlong_at(b: &[u8]) -> (i64, usize) {
    let mut v: u64 = 0;
    let mut shift = 0;
    for (i, byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return (((v >> 1) as i64) ^ -((v & 1) as i64), i + 1);
        }
        shift += 7;
    }
    panic!("truncated varint");
}

#[test]
fn compaction_keeps_the_latest_per_key_with_offsets_and_merges_segments() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 300,
            cleanup_compact: true,
            cleanup_delete: false,
            min_cleanable_dirty_ratio: 0.0,
            delete_retention_ms: 1000,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        // Unkeyed records are refused in a compacted topic.
        // Each is named by its index in the batch (KIP-467), so clients fail exactly those.
        let err = log.append(batch(5, 0, 10), LeaderEpoch(0), 0).unwrap_err();
        let StorageError::InvalidRecords { record_errors, .. } = &err else {
            panic!("{err:?}");
        };
        let indexes: Vec<i32> = record_errors.iter().map(|e| e.batch_index).collect();
        assert_eq!(indexes, (0..5).collect::<Vec<i32>>(), "{err:?}");
        // 12 writes over keys a..d, each its own batch (and segment: segment.bytes is tiny),
        // codecs rotating; "c" is deleted by a tombstone at offset 10.
        let writes: Vec<(&str, Option<&str>)> = vec![
            ("a", Some("a0")),
            ("b", Some("b0")),
            ("c", Some("c0")),
            ("a", Some("a1")),
            ("d", Some("d0")),
            ("b", Some("b1")),
            ("a", Some("a2")),
            ("c", Some("c1")),
            ("d", Some("d1")),
            ("b", Some("b2")),
            ("c", None),
            ("e", Some("e0")),
        ];
        for (i, (k, v)) in writes.iter().enumerate() {
            let codec = [0, GZIP, SNAPPY, LZ4, ZSTD][i % 5];
            log.append(
                keyed_batch(&[(Some(k), *v)], 10_000, codec),
                LeaderEpoch(0),
                0,
            )
            .unwrap();
            log.commit(Offset(i as i64 + 1)).await.unwrap();
        }
        // A big record rolls the segment holding the last writes, so all of them are in
        // closed segments (the active segment is never compacted).
        let big = "z".repeat(400);
        log.append(
            keyed_batch(&[(Some("z"), Some(&big))], 10_000, 0),
            LeaderEpoch(0),
            0,
        )
        .unwrap();
        log.commit(Offset(13)).await.unwrap();
        let segments_before = log.segment_count();
        assert!(segments_before >= 3, "{segments_before}");
        // Now = 10_500: the tombstone (ts 10_000) is within delete.retention.ms: it stays.
        let out = log.compact(10_500, 1 << 20).await.unwrap().unwrap();
        assert_eq!(
            out.segments_in,
            segments_before - 1,
            "all but the active segment"
        );
        assert!(
            out.segments_out < out.segments_in,
            "small cleaned segments merge"
        );
        let got = keyed_contents(&log, 0).await;
        let expect = vec![
            (6, "a".to_string(), Some("a2".to_string())),
            (8, "d".into(), Some("d1".into())),
            (9, "b".into(), Some("b2".into())),
            (10, "c".into(), None),
            (11, "e".into(), Some("e0".into())),
            (12, "z".into(), Some(big.clone())),
        ];
        assert_eq!(got, expect, "{:?}", log.segment_layout());
        assert_eq!(log.cleaned_up_to(), Offset(12));
        assert!(
            log.compact(10_500, 1 << 20).await.unwrap().is_none(),
            "nothing dirty"
        );
        // A fetch inside a gap returns the next record.
        let r = log.read(Offset(2), 1 << 20, Offset(12)).await.unwrap();
        assert_eq!(batches_in(&r.records)[0].0, 6);
        // New writes; later, past delete.retention.ms, the tombstone goes too.
        log.append(
            keyed_batch(&[(Some("a"), Some("a3"))], 20_000, 0),
            LeaderEpoch(0),
            0,
        )
        .unwrap();
        log.commit(Offset(14)).await.unwrap();
        log.append(
            keyed_batch(&[(Some("f"), Some(&big))], 20_000, 0),
            LeaderEpoch(0),
            0,
        )
        .unwrap();
        log.commit(Offset(15)).await.unwrap();
        log.append(
            keyed_batch(&[(Some("g"), Some("g0"))], 20_000, 0),
            LeaderEpoch(0),
            0,
        )
        .unwrap();
        log.commit(Offset(16)).await.unwrap();
        log.compact(30_000, 1 << 20).await.unwrap().unwrap();
        let got = keyed_contents(&log, 0).await;
        let keys: Vec<(i64, &str)> = got.iter().map(|(o, k, _)| (*o, k.as_str())).collect();
        // The old "a" goes (a3 is mapped now), the tombstone is past delete.retention.ms.
        assert_eq!(
            keys,
            vec![
                (8, "d"),
                (9, "b"),
                (11, "e"),
                (12, "z"),
                (13, "a"),
                (14, "f"),
                (15, "g")
            ],
            "{:?}",
            log.segment_layout()
        );
        // Restart: the same contents, the checkpoint kept.
        let before = got;
        log.close().await.unwrap();
        let log = Log::open(dir.path(), cfg).await.unwrap();
        assert_eq!(keyed_contents(&log, 0).await, before);
        assert_eq!(log.offsets().log_end_offset, Offset(16));
        assert!(log.cleaned_up_to() >= Offset(14));
    });
}

#[test]
fn closed_segments_are_read_through_a_bounded_file_cache() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        crate::file_cache::set_capacity(2);
        let cfg = LogConfig {
            segment_bytes: 600,
            tail_cache_bytes: 1, // reads go to the files
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
        ten_segments(&log).await;
        let open_fds = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .filter(|p| p.starts_with(dir.path()) && p.extension().is_some_and(|e| e == "log"))
                .count()
        };
        // Only the active segment is open; each read of an old segment goes through the cache.
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(open_fds(), 1);
        for round in 0..2 {
            for i in 0..10 {
                let r = log.read(Offset(i), 1 << 20, Offset(10)).await.unwrap();
                assert_eq!(batches_in(&r.records)[0].0, i, "round {round}");
            }
        }
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        let (cached, opened) = crate::file_cache::stats();
        assert!(cached <= 2, "{cached}");
        assert!(opened >= 9, "{opened}");
        assert!(open_fds() <= 3, "active + 2 cached: {}", open_fds());
        crate::file_cache::set_capacity(crate::file_cache::DEFAULT_CAPACITY);
    });
}

#[test]
fn tail_caches_share_a_shard_budget_and_evict_the_oldest() {
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    run(|| async {
        let one = batch(1, 0, 1000).len();
        crate::tail_budget::set_budget(10 * one);
        let mut logs = Vec::new();
        for d in &dirs {
            logs.push(Log::open(d.path(), small_config()).await.unwrap());
        }
        // 4 logs x 5 batches = 20 batches; the shard keeps at most 10 batches' worth.
        for round in 0..5i64 {
            for log in &logs {
                log.append(batch(1, round, 1000), LeaderEpoch(0), 0)
                    .unwrap();
                log.commit(Offset(round + 1)).await.unwrap();
            }
        }
        let (used, limit, evicted) = crate::tail_budget::stats();
        assert!(used <= limit, "{used} > {limit}");
        assert!(evicted >= 10, "{evicted}");
        // Every record is still readable (evicted ones from the files).
        for log in &logs {
            for i in 0..5 {
                let r = log.read(Offset(i), 1 << 20, Offset(5)).await.unwrap();
                assert_eq!(batches_in(&r.records)[0].0, i);
            }
        }
        // Closing a log releases its share.
        let before = crate::tail_budget::stats().0;
        let last = logs.pop().unwrap();
        last.close().await.unwrap();
        drop(last);
        assert!(crate::tail_budget::stats().0 < before);
        crate::tail_budget::set_budget(crate::tail_budget::DEFAULT_BUDGET_BYTES);
    });
}

#[test]
fn compaction_lags_and_dirty_ratio_decide_when_a_pass_runs() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let cfg = LogConfig {
            segment_bytes: 200,
            cleanup_compact: true,
            cleanup_delete: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 5_000,
            max_compaction_lag_ms: 60_000,
            ..small_config()
        };
        let log = Log::open(dir.path(), cfg).await.unwrap();
        let mut next = 0i64;
        let mut write = |log: &Log, key: &str, ts: i64| {
            log.append(
                keyed_batch(&[(Some(key), Some("v"))], ts, 0),
                LeaderEpoch(0),
                0,
            )
            .unwrap();
            next += 1;
            next
        };
        for i in 0..60 {
            let n = write(&log, &format!("k{}", i % 30), 1_000);
            log.commit(Offset(n)).await.unwrap();
        }
        // Younger than min.compaction.lag.ms: nothing is cleanable yet.
        assert!(log.compact(3_000, 1 << 20).await.unwrap().is_none());
        // Old enough, all dirty (ratio 1 >= 0.5): a pass runs.
        let out = log.compact(7_000, 1 << 20).await.unwrap().unwrap();
        assert!(out.records_dropped > 0);
        // A little new data: dirty ratio far below 0.5, and not yet max.compaction.lag.ms old.
        for _ in 0..3 {
            let n = write(&log, "k9", 8_000);
            log.commit(Offset(n)).await.unwrap();
        }
        let n = write(&log, &"z".repeat(150), 8_000); // rolls the segment holding k9
        log.commit(Offset(n)).await.unwrap();
        assert!(
            log.compact(20_000, 1 << 20).await.unwrap().is_none(),
            "ratio too low"
        );
        // Past max.compaction.lag.ms the dirty records are compacted whatever the ratio.
        let out = log.compact(8_000 + 60_001, 1 << 20).await.unwrap().unwrap();
        assert!(out.records_dropped >= 2, "{out:?}");
    });
}

#[test]
fn appends_are_refused_once_close_begins_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), small_config()).await.unwrap();
        for i in 0..6 {
            log.append(batch(4, 1000 + i, 100), LeaderEpoch(0), 0)
                .unwrap();
        }
        // The close runs as its own task; an append that lands while it waits on its flush
        // (a follower's fetch during a shutdown) must not slip past the indexes it writes.
        let closing = glommio::spawn_local({
            let log = log.clone();
            async move { log.close().await }
        });
        futures_lite::future::yield_now().await;
        let during = log.append(batch(4, 2000, 100), LeaderEpoch(0), 0);
        assert!(matches!(during, Err(StorageError::Closed)), "{during:?}");
        closing.await.unwrap();
        let after = log.append(batch(4, 3000, 100), LeaderEpoch(0), 0);
        assert!(matches!(after, Err(StorageError::Closed)), "{after:?}");
        assert_eq!(log.offsets().log_end_offset, Offset(24));
        let read = log.read(Offset(0), 1 << 20, Offset(24)).await.unwrap();
        assert_eq!(read.records.len(), log_bytes_of(&log, dir.path()));
        drop(log);

        let log = Log::open(dir.path(), small_config()).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(24));
        log.append(batch(4, 4000, 100), LeaderEpoch(0), 0).unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(28));
    });
}

fn log_bytes_of(_log: &Log, dir: &Path) -> usize {
    std::fs::metadata(dir.join("00000000000000000000.log"))
        .unwrap()
        .len() as usize
}

/// An offline (poisoned) replicated log keeps its high watermark where it was: a leader that
/// learns of a committed ISR change after its log went offline moves nothing (seen while
/// building the fault simulation's metadata over the network).
#[test]
fn a_poisoned_log_keeps_its_high_watermark() {
    use keel_simdisk::{Fault, SimDisk};
    run(|| async {
        let sim = SimHandle::new(SimDisk::new(7, 0));
        let dir = Path::new("/d/t-0");
        let log = Log::open_on(Disk::Sim(sim.clone()), dir, small_config())
            .await
            .unwrap();
        log.set_replicated(true);
        for i in 0..3 {
            log.append(batch(1, 1000 + i, 100), LeaderEpoch(0), 0)
                .unwrap();
            log.commit(Offset(i + 1)).await.unwrap();
        }
        assert_eq!(log.advance_high_watermark(Offset(1)), Offset(1));
        sim.disk().inject(Fault::SyncEio {
            prefix: "d/t-0/".into(),
            once: true,
        });
        log.append(batch(1, 2000, 100), LeaderEpoch(0), 0).unwrap();
        assert!(log.commit(Offset(4)).await.is_err());
        assert!(log.poisoned().is_some(), "a failed sync poisons the log");
        assert_eq!(log.advance_high_watermark(Offset(3)), Offset(1));
        assert_eq!(log.offsets().high_watermark, Offset(1));
    });
    crate::file_cache::forget_under(Path::new("/d/t-0"));
}
