//! Property tests of the log against a simple model: offsets dense and monotonic across
//! segment rolls, every offset found by an index lookup + scan, and recovery of a log cut at
//! any byte keeping exactly the complete batches before the cut.

use proptest::prelude::*;

use crate::test_util::*;
use crate::*;

fn config(segment_bytes: u64, index_interval_bytes: u32) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes,
        tail_cache_bytes: 0,
        ..LogConfig::default()
    }
}

/// Reads every offset below `end` and checks the first batch returned holds it.
async fn check_every_offset(log: &Log, end: i64) {
    for off in 0..end {
        let r = log.read(Offset(off), 1, Offset(end)).await.unwrap();
        let b = batches_in(&r.records);
        assert_eq!(b.len(), 1, "offset {off}");
        assert!(
            b[0].0 <= off && off <= b[0].1,
            "offset {off} not in {:?}",
            b[0]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn offsets_dense_across_rolls_and_lookups_find_every_offset(
        batches in prop::collection::vec((1usize..6, 0usize..200, any::<bool>()), 1..40),
        segment_bytes in 300u64..3000,
        index_interval_bytes in 1u32..600,
    ) {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let cfg = config(segment_bytes, index_interval_bytes);
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            let mut next = 0i64;
            for (i, &(count, value_bytes, commit)) in batches.iter().enumerate() {
                let info = log.append(batch(count, i as i64, value_bytes), LeaderEpoch(0), i as i64).unwrap();
                assert_eq!(info.base_offset, Offset(next));
                assert_eq!(info.last_offset, Offset(next + count as i64 - 1));
                next += count as i64;
                assert_eq!(log.offsets().log_end_offset, Offset(next));
                if commit {
                    log.commit(Offset(next)).await.unwrap();
                    assert_eq!(log.offsets().high_watermark, Offset(next));
                }
            }
            check_every_offset(&log, next).await;
            log.close().await.unwrap();
            let reopened = Log::open(dir.path(), cfg).await.unwrap();
            assert_eq!(reopened.offsets().log_end_offset, Offset(next));
            assert_eq!(reopened.segment_count(), log.segment_count());
            check_every_offset(&reopened, next).await;
        });
    }

    #[test]
    fn recovery_keeps_exactly_the_complete_batches_before_a_cut(
        batches in prop::collection::vec((1usize..5, 0usize..150), 1..25),
        segment_bytes in 400u64..4000,
        cut_segment in any::<prop::sample::Index>(),
        cut_fraction in 0.0f64..=1.0,
        delete_indexes in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        run(|| async {
            let cfg = config(segment_bytes, 128);
            let log = Log::open(dir.path(), cfg.clone()).await.unwrap();
            for (i, &(count, value_bytes)) in batches.iter().enumerate() {
                log.append(batch(count, i as i64, value_bytes), LeaderEpoch(0), 0).unwrap();
            }
            log.close().await.unwrap();
            drop(log);

            let mut logs: Vec<_> = std::fs::read_dir(dir.path()).unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect();
            logs.sort();
            let k = cut_segment.index(logs.len());
            let contents: Vec<Vec<u8>> = logs.iter().map(|p| std::fs::read(p).unwrap()).collect();
            let cut = (contents[k].len() as f64 * cut_fraction) as usize;
            // Model: all batches of earlier segments, the whole ones before the cut in k, and
            // the later segments only if nothing in k was lost.
            let mut expected: Vec<(i64, i64)> = Vec::new();
            for seg in &contents[..k] {
                expected.extend(batches_in(seg).iter().map(|b| (b.0, b.1)));
            }
            let mut pos = 0;
            for b in batches_in(&contents[k]) {
                if pos + b.2 <= cut {
                    expected.push((b.0, b.1));
                }
                pos += b.2;
            }
            if cut == contents[k].len() {
                for seg in &contents[k + 1..] {
                    expected.extend(batches_in(seg).iter().map(|b| (b.0, b.1)));
                }
            }
            std::fs::OpenOptions::new().write(true).open(&logs[k]).unwrap()
                .set_len(cut as u64).unwrap();
            if delete_indexes {
                for p in &logs {
                    let _ = std::fs::remove_file(p.with_extension("index"));
                    let _ = std::fs::remove_file(p.with_extension("timeindex"));
                }
            }

            // A closed segment is synced before the next one takes data: if one is cut, data
            // is missing in the middle of the log, and the log must not open (it would
            // otherwise serve around the hole).
            if k + 1 < logs.len() && cut < contents[k].len() {
                let err = Log::open(dir.path(), cfg).await.err().expect("a cut closed segment must not open");
                assert!(matches!(err, StorageError::CorruptSegment { .. }), "{err:?}");
                return;
            }
            let log = Log::open(dir.path(), cfg).await.unwrap();
            let leo = expected.last().map_or(0, |b| b.1 + 1);
            assert_eq!(log.offsets().log_end_offset, Offset(leo));
            let mut got = Vec::new();
            let mut off = 0;
            while off < leo {
                let r = log.read(Offset(off), 1 << 20, Offset(leo)).await.unwrap();
                let b = batches_in(&r.records);
                assert!(!b.is_empty());
                got.extend(b.iter().map(|b| (b.0, b.1)));
                off = b.last().unwrap().1 + 1;
            }
            assert_eq!(got, expected);
            // The recovered log accepts appends at its end.
            let info = log.append(batch(1, 0, 1), LeaderEpoch(0), 0).unwrap();
            assert_eq!(info.base_offset, Offset(leo));
            log.commit(Offset(leo + 1)).await.unwrap();
        });
    }
}
