//! Property test of truncation against a simple model: a log given random appends (plain and
//! idempotent producer batches, leader epochs rising, segment rolls) and then truncated at a
//! random offset, and reopened, equals a log that only ever had the appends below the point:
//! offsets, every byte from the log start to the end, leader epochs, the producer state and
//! how a retried producer batch is answered.

use proptest::prelude::*;

use crate::test_util::*;
use crate::*;

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 100,
        tail_cache_bytes: 1024,
        ..LogConfig::default()
    }
}

/// One append of the model: (records, value bytes, from the idempotent producer).
type Op = (usize, usize, bool);

/// Appends `ops` in order; returns the offset after each append and, per producer append,
/// (its base sequence, records, base offset).
fn append_all(log: &Log, ops: &[Op]) -> (Vec<i64>, Vec<(i32, usize, i64)>) {
    let mut ends = Vec::new();
    let mut producer = Vec::new();
    let mut seq = 0i32;
    for (i, &(count, value_bytes, idempotent)) in ops.iter().enumerate() {
        let epoch = LeaderEpoch(i as i32 / 4);
        let info = if idempotent {
            let b = producer_batch(5, 0, seq, count, i as i64);
            let info = log.append(b, epoch, i as i64).unwrap();
            producer.push((seq, count, info.base_offset.0));
            seq += count as i32;
            info
        } else {
            log.append(batch(count, i as i64, value_bytes), epoch, i as i64)
                .unwrap()
        };
        ends.push(info.last_offset.0 + 1);
    }
    (ends, producer)
}

async fn read_all(log: &Log) -> Vec<u8> {
    let o = log.offsets();
    let mut out = Vec::new();
    let mut at = o.log_start_offset;
    while at < o.log_end_offset {
        let r = log.read(at, 1 << 20, o.log_end_offset).await.unwrap();
        let b = batches_in(&r.records);
        assert!(!b.is_empty());
        out.extend_from_slice(&r.records);
        at = Offset(b.last().unwrap().1 + 1);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn truncate_then_reopen_equals_a_log_without_the_appends_past_the_point(
        ops in prop::collection::vec((1usize..5, 0usize..120, any::<bool>()), 1..24),
        segment_bytes in 300u64..1500,
        point in any::<prop::sample::Index>(),
        close_first in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let model_dir = tempfile::tempdir().unwrap();
        run(|| async {
            let log = Log::open(dir.path(), config(segment_bytes)).await.unwrap();
            let (ends, _) = append_all(&log, &ops);
            let log_end = *ends.last().unwrap();
            let offset = point.index(log_end as usize + 1) as i64;
            if close_first {
                log.close().await.unwrap();
            }
            let outcome = log.truncate_to(Offset(offset)).await.unwrap();
            // The appends wholly below the point, whole batches kept.
            let kept = ends.iter().take_while(|&&e| e <= offset).count();
            let kept_end = if kept == 0 { 0 } else { ends[kept - 1] };
            assert_eq!(outcome.log_end_offset, Offset(kept_end));
            let before_reopen = read_all(&log).await;
            log.close().await.unwrap();
            drop(log);
            let log = Log::open(dir.path(), config(segment_bytes)).await.unwrap();

            let model = Log::open(model_dir.path(), config(segment_bytes)).await.unwrap();
            let (_, producer) = append_all(&model, &ops[..kept]);
            model.sync().await.unwrap();

            assert_eq!(log.offsets(), model.offsets());
            let bytes = read_all(&log).await;
            assert_eq!(bytes, read_all(&model).await);
            assert_eq!(bytes, before_reopen);
            assert_eq!(log.epoch_entries(), model.epoch_entries());
            assert_eq!(log.producers(), model.producers());
            // A retry of the producer's last kept batch is answered the same way.
            if let Some(&(seq, count, base)) = producer.last() {
                let i = ops[..kept].iter().rposition(|o| o.2).unwrap();
                let retry = producer_batch(5, 0, seq, count, i as i64);
                let a = log.append(retry.clone(), LeaderEpoch(99), 0).unwrap();
                let b = model.append(retry, LeaderEpoch(99), 0).unwrap();
                assert!(a.duplicate);
                assert_eq!(a, b);
                assert_eq!(a.base_offset, Offset(base));
            }
            // Both go on the same way.
            let next = producer_batch(5, 0, producer.last().map_or(0, |p| p.0 + p.1 as i32), 2, 50);
            let a = log.append(next.clone(), LeaderEpoch(99), 50).unwrap();
            let b = model.append(next, LeaderEpoch(99), 50).unwrap();
            assert_eq!(a, b);
            assert_eq!(read_all(&log).await, read_all(&model).await);
        });
    }
}
