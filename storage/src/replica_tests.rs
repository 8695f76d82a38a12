//! Unit tests of the log's replication half (`log/replica.rs`, `log/truncate.rs`): the
//! replicated mode and its high watermark checkpoint, follower appends and their refusals,
//! truncation (within and across segments, inside a batch, with transactions), leadership
//! epochs and the follower's log start offset.

use bytes::Bytes;

use crate::test_util::*;
use crate::*;

fn config(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

/// Every batch from the log start to the log end, as one buffer.
async fn read_all(log: &Log) -> Vec<u8> {
    let o = log.offsets();
    let mut out = Vec::new();
    let mut at = o.log_start_offset;
    while at < o.log_end_offset {
        let r = log.read(at, 1 << 20, o.log_end_offset).await.unwrap();
        let b = batches_in(&r.records);
        assert!(!b.is_empty(), "nothing read at {at:?}");
        out.extend_from_slice(&r.records);
        at = Offset(b.last().unwrap().1 + 1);
    }
    out
}

/// A leader's log with: plain batches in epoch 1, an idempotent producer's batches in epoch
/// 2, rolled over several segments.
async fn leader_log(dir: &std::path::Path) -> Log {
    let log = Log::open(dir, config(600)).await.unwrap();
    for i in 0..4 {
        log.append(batch(3, i, 40), LeaderEpoch(1), i).unwrap();
    }
    for seq in 0..3 {
        let b = producer_batch(7, 0, seq * 2, 2, 100 + seq as i64);
        log.append(b, LeaderEpoch(2), 100).unwrap();
    }
    log.commit(log.offsets().log_end_offset).await.unwrap();
    log
}

#[test]
fn replicated_mode_keeps_the_high_watermark_apart_from_durability() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        log.set_replicated(true);
        assert!(log.is_replicated());
        log.append(batch(5, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.commit(Offset(5)).await.unwrap();
        assert_eq!(log.durable_end(), Offset(5));
        assert_eq!(log.offsets().high_watermark, Offset(0));
        log.append(batch(5, 0, 10), LeaderEpoch(0), 0).unwrap();
        assert_eq!(log.make_durable(Offset(100)).await.unwrap(), Offset(10));
        log.sync().await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(0));
        assert_eq!(log.advance_high_watermark(Offset(3)), Offset(3));
        // Never back, never past the log end.
        assert_eq!(log.advance_high_watermark(Offset(1)), Offset(3));
        assert_eq!(log.advance_high_watermark(Offset(99)), Offset(10));
        // Retention deletes below the high watermark only, which advance moved.
        assert_eq!(log.offsets().last_stable_offset, Offset(10));
        // Single replica again: the high watermark follows what is durable at once.
        log.append(batch(2, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.make_durable(Offset(12)).await.unwrap();
        log.set_replicated(false);
        assert_eq!(log.offsets().high_watermark, Offset(12));
    });
}

#[test]
fn high_watermark_checkpoint_survives_reopen_and_clamps_to_the_log_end() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let path = dir.path().join("replication-offset-checkpoint");
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        log.append(batch(10, 0, 10), LeaderEpoch(0), 0).unwrap();
        log.make_durable(Offset(10)).await.unwrap();
        // A single-replica log writes no checkpoint.
        assert!(!log.checkpoint_high_watermark().await.unwrap());
        assert!(!path.exists());
        log.set_replicated(true);
        log.advance_high_watermark(Offset(4));
        assert!(log.checkpoint_high_watermark().await.unwrap());
        assert!(!log.checkpoint_high_watermark().await.unwrap(), "unchanged");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "4\n");
        log.advance_high_watermark(Offset(6));
        log.close().await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "6\n");
        drop(log);
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(6));
        assert_eq!(log.offsets().log_end_offset, Offset(10));
        drop(log);
        // A checkpoint above the log end (a torn tail) clamps.
        std::fs::write(&path, "1000\n").unwrap();
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(10));
        drop(log);
        // Without the file (an earlier version's data dir): the log end.
        std::fs::write(&path, "2\n").unwrap();
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(2));
        drop(log);
        std::fs::remove_file(&path).unwrap();
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(10));
    });
}

#[test]
fn follower_append_keeps_offsets_epochs_and_producer_state() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    run(|| async {
        let leader = leader_log(leader_dir.path()).await;
        let bytes = read_all(&leader).await;
        let follower = Log::open(follower_dir.path(), config(600)).await.unwrap();
        follower.set_replicated(true);
        // In two fetches, split at a batch boundary.
        let split: usize = batches_in(&bytes)[..5].iter().map(|b| b.2).sum();
        let first = follower
            .append_as_follower(Bytes::copy_from_slice(&bytes[..split]), LeaderEpoch(2), 0)
            .unwrap();
        assert_eq!(first.base_offset, Offset(0));
        follower
            .append_as_follower(Bytes::copy_from_slice(&bytes[split..]), LeaderEpoch(2), 0)
            .unwrap();
        assert_eq!(
            follower.offsets().log_end_offset,
            leader.offsets().log_end_offset
        );
        assert_eq!(follower.offsets().high_watermark, Offset(0));
        assert_eq!(read_all(&follower).await, bytes);
        assert_eq!(follower.epoch_entries(), leader.epoch_entries());
        assert_eq!(follower.producers(), leader.producers());
        // The follower becomes leader: a retry of the producer's last batch is a duplicate.
        follower.become_leader(LeaderEpoch(3)).await.unwrap();
        let retry = follower
            .append(producer_batch(7, 0, 4, 2, 102), LeaderEpoch(3), 200)
            .unwrap();
        assert!(retry.duplicate);
        assert_eq!(retry.base_offset, Offset(16));
        // Survives a reopen too.
        follower.close().await.unwrap();
        drop(follower);
        let reopened = Log::open(follower_dir.path(), config(600)).await.unwrap();
        assert_eq!(read_all(&reopened).await, bytes);
        assert_eq!(reopened.producers(), leader.producers());
    });
}

#[test]
fn refused_follower_appends_change_nothing() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    run(|| async {
        let leader = leader_log(leader_dir.path()).await;
        let bytes = read_all(&leader).await;
        let sizes: Vec<usize> = batches_in(&bytes).iter().map(|b| b.2).collect();
        let follower = Log::open(follower_dir.path(), config(600)).await.unwrap();
        let head = sizes[0] + sizes[1];
        follower
            .append_as_follower(Bytes::copy_from_slice(&bytes[..head]), LeaderEpoch(2), 0)
            .unwrap();
        let before = (follower.offsets(), read_all(&follower).await);
        let next = &bytes[head..head + sizes[2]];
        let after_next = &bytes[head + sizes[2]..head + sizes[2] + sizes[3]];
        let mut bad_crc = next.to_vec();
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        // A good batch first, then one that goes backwards in epoch.
        let mut backwards = bytes[head + sizes[2] + sizes[3]..][..sizes[4]].to_vec();
        backwards.extend_from_slice(&bytes[..sizes[0]]);
        let mut epoch_back = next.to_vec();
        epoch_back[12..16].copy_from_slice(&0i32.to_be_bytes());
        let mut good_then_back = bytes[head..head + sizes[2]].to_vec();
        good_then_back.extend_from_slice(&bytes[head + sizes[2]..][..sizes[3]]);
        let mut epoch_back_batch = bytes[head + sizes[2] + sizes[3]..][..sizes[4]].to_vec();
        epoch_back_batch[12..16].copy_from_slice(&0i32.to_be_bytes());
        let mut two_then_epoch_back = good_then_back.clone();
        two_then_epoch_back.extend_from_slice(&epoch_back_batch);
        let cases: Vec<(&str, Vec<u8>, LeaderEpoch)> = vec![
            ("gap", after_next.to_vec(), LeaderEpoch(2)),
            ("overlap", bytes[sizes[0]..head].to_vec(), LeaderEpoch(2)),
            ("bad crc", bad_crc, LeaderEpoch(2)),
            ("epoch above max", next.to_vec(), LeaderEpoch(0)),
            ("epoch below the log's latest", epoch_back, LeaderEpoch(2)),
            ("epoch going backwards", two_then_epoch_back, LeaderEpoch(2)),
        ];
        for (name, b, max_epoch) in cases {
            let err = follower
                .append_as_follower(Bytes::from(b), max_epoch, 0)
                .unwrap_err();
            match name {
                "bad crc" => assert!(matches!(err, StorageError::CorruptMessage(_)), "{err:?}"),
                _ => assert!(
                    matches!(err, StorageError::ReplicaAppend(_)),
                    "{name}: {err:?}"
                ),
            }
            assert_eq!(
                (follower.offsets(), read_all(&follower).await),
                before,
                "{name}"
            );
        }
        // The good continuation still goes in.
        follower
            .append_as_follower(Bytes::copy_from_slice(&bytes[head..]), LeaderEpoch(2), 0)
            .unwrap();
        assert_eq!(read_all(&follower).await, bytes);
    });
}

/// Appends `batches` batches of 3 records (epoch 1) to a log with small segments.
async fn log_of(dir: &std::path::Path, batches: i64) -> Log {
    let log = Log::open(dir, config(500)).await.unwrap();
    for i in 0..batches {
        log.append(batch(3, i, 40), LeaderEpoch(1 + i as i32 / 4), i)
            .unwrap();
    }
    log.commit(Offset(batches * 3)).await.unwrap();
    log
}

/// The batches of a log that only ever had the first `n` of `log_of`'s appends.
async fn expected_bytes(n: i64) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), n).await;
    read_all(&log).await
}

#[test]
fn truncate_to_across_segments_inside_a_batch_and_to_zero() {
    run(|| async {
        // (truncate to, the batch count kept)
        for (offset, kept) in [(25, 8), (24, 8), (0, 0), (13, 4), (36, 12)] {
            let dir = tempfile::tempdir().unwrap();
            let log = log_of(dir.path(), 14).await;
            assert!(log.segment_count() > 3);
            let layout = log.segment_layout();
            if offset == 24 {
                assert!(layout.iter().any(|s| s.0 == 24), "{layout:?}");
            }
            let outcome = log.truncate_to(Offset(offset)).await.unwrap();
            assert_eq!(outcome.log_end_offset, Offset(kept * 3), "{offset}");
            assert!(outcome.truncated);
            assert!(outcome.below_high_watermark);
            let o = log.offsets();
            assert_eq!(o.log_end_offset, Offset(kept * 3));
            assert_eq!(o.high_watermark, Offset(kept * 3));
            assert_eq!(read_all(&log).await, expected_bytes(kept).await, "{offset}");
            assert!(log
                .epoch_entries()
                .iter()
                .all(|&(_, start)| start < Offset(kept * 3).max(Offset(1))));
            // Appending again works and reads return the new data.
            let info = log.append(batch(2, 99, 7), LeaderEpoch(9), 99).unwrap();
            assert_eq!(info.base_offset, Offset(kept * 3));
            log.commit(Offset(kept * 3 + 2)).await.unwrap();
            let r = log
                .read(Offset(kept * 3), 1 << 20, Offset(kept * 3 + 2))
                .await
                .unwrap();
            assert_eq!(&r.records[..], &batch_at(kept * 3, 9)[..]);
            // And a reopen sees the same log.
            let all = read_all(&log).await;
            log.close().await.unwrap();
            drop(log);
            let log = Log::open(dir.path(), config(500)).await.unwrap();
            assert_eq!(log.offsets().log_end_offset, Offset(kept * 3 + 2));
            assert_eq!(read_all(&log).await, all);
        }
    });
}

/// `batch(2, 99, 7)` as a log stamps it at `base` in `epoch`.
fn batch_at(base: i64, epoch: i32) -> bytes::BytesMut {
    let mut b = batch(2, 99, 7);
    b[0..8].copy_from_slice(&base.to_be_bytes());
    b[12..16].copy_from_slice(&epoch.to_be_bytes());
    b
}

#[test]
fn truncate_to_then_reopen_without_close() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = log_of(dir.path(), 14).await;
        log.truncate_to(Offset(20)).await.unwrap();
        let kept = read_all(&log).await;
        drop(log);
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(18));
        assert_eq!(read_all(&log).await, kept);
        assert_eq!(kept, expected_bytes(6).await);
    });
}

#[test]
fn truncate_to_drops_transactions_and_aborts_past_the_point() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        log.set_replicated(true);
        log.append(batch(3, 0, 10), LeaderEpoch(0), 0).unwrap(); // 0..=2
        log.append(txn_batch(7, 0, 0, 2, 1), LeaderEpoch(0), 1)
            .unwrap(); // 3..=4
        log.append(marker_batch(7, 0, false, 0, 2), LeaderEpoch(0), 2)
            .unwrap(); // 5
        log.append(txn_batch(8, 0, 0, 2, 3), LeaderEpoch(0), 3)
            .unwrap(); // 6..=7
        log.commit(Offset(8)).await.unwrap();
        log.advance_high_watermark(Offset(8));
        assert_eq!(log.offsets().last_stable_offset, Offset(6));
        assert_eq!(
            log.aborted_transactions(Offset(0), Offset(8)),
            vec![(7, Offset(3))]
        );

        let outcome = log.truncate_to(Offset(5)).await.unwrap();
        assert!(outcome.below_high_watermark);
        let o = log.offsets();
        assert_eq!(o.high_watermark, Offset(5));
        // Producer 7's transaction is open again, producer 8's is gone.
        assert_eq!(o.last_stable_offset, Offset(3));
        assert!(log.aborted_transactions(Offset(0), Offset(8)).is_empty());
        assert!(log.txn_index_entries().is_empty());
        let open: Vec<(i64, i64)> = log
            .producers()
            .iter()
            .map(|p| (p.producer_id, p.current_txn_start_offset))
            .collect();
        assert_eq!(open, vec![(7, 3)]);
        // Committing it now works as on a log that never had the rest.
        log.append(marker_batch(7, 0, true, 0, 4), LeaderEpoch(1), 4)
            .unwrap();
        log.commit(Offset(6)).await.unwrap();
        log.advance_high_watermark(Offset(6));
        assert_eq!(log.offsets().last_stable_offset, Offset(6));
        assert!(log.aborted_transactions(Offset(0), Offset(6)).is_empty());
        log.close().await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(1 << 20)).await.unwrap();
        assert_eq!(log.offsets().high_watermark, Offset(6));
        assert_eq!(log.offsets().last_stable_offset, Offset(6));
        assert!(log.txn_index_entries().is_empty());
    });
}

#[test]
fn truncate_below_log_start_is_refused_and_truncate_fully_restarts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = log_of(dir.path(), 14).await;
        log.delete_records(Offset(20)).await.unwrap();
        assert!(matches!(
            log.truncate_to(Offset(10)).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        log.truncate_fully_and_start_at(Offset(100)).await.unwrap();
        let o = log.offsets();
        assert_eq!(
            (o.log_start_offset, o.high_watermark, o.log_end_offset),
            (Offset(100), Offset(100), Offset(100))
        );
        assert_eq!(log.segment_count(), 1);
        assert!(log.epoch_entries().is_empty());
        assert!(log.producers().is_empty());
        let info = log.append(batch(2, 0, 5), LeaderEpoch(4), 0).unwrap();
        assert_eq!(info.base_offset, Offset(100));
        log.close().await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        let o = log.offsets();
        assert_eq!(
            (o.log_start_offset, o.log_end_offset),
            (Offset(100), Offset(102))
        );
        assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(4), Offset(100))]);
        // With nothing appended after it, a reopen starts at the offset too.
        log.truncate_fully_and_start_at(Offset(7)).await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        let o = log.offsets();
        assert_eq!(
            (o.log_start_offset, o.log_end_offset),
            (Offset(7), Offset(7))
        );
    });
}

#[test]
fn a_truncation_at_the_log_end_drops_a_deposed_leaders_empty_epoch() {
    // Found by keel-sim --controller-network --metadata-network, seed 9671: a replica took up a
    // leadership (epoch 3 at its log end 12), was deposed before it appended, and as a
    // follower sent 3 as its last fetched epoch; its leader, which never heard of epoch 3,
    // answered epoch 1 ending at 20, the truncation to 12 was a no-op that kept the entry, and
    // the same divergence came back forever. As Kafka's truncateTo: the cache drops what
    // starts at the log end, durably.
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = log_of(dir.path(), 4).await; // epoch 1 from 0, log end 12
        log.become_leader(LeaderEpoch(3)).await.unwrap();
        assert_eq!(log.latest_epoch(), Some(LeaderEpoch(3)));
        let outcome = log.truncate_to(Offset(12)).await.unwrap();
        assert_eq!(
            (outcome.log_end_offset, outcome.truncated),
            (Offset(12), false)
        );
        assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(1), Offset(0))]);
        let text = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(text, "0\n1\n1 0\n");
        // A target past the end does the same, and an entry inside the log stays.
        log.become_leader(LeaderEpoch(4)).await.unwrap();
        log.truncate_to(Offset(30)).await.unwrap();
        assert_eq!(log.epoch_entries(), vec![(LeaderEpoch(1), Offset(0))]);
        assert_eq!(log.offsets().log_end_offset, Offset(12));
    });
}

#[test]
fn become_leader_records_the_epoch_start_before_any_append() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = log_of(dir.path(), 4).await; // epoch 1 from 0, log end 12
        log.become_leader(LeaderEpoch(3)).await.unwrap();
        // Persisted before returning.
        let text = std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(text, "0\n2\n1 0\n3 12\n");
        // Kafka endOffsetFor: the latest epoch ends at the log end.
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(3)),
            Some((LeaderEpoch(3), Offset(12)))
        );
        // An epoch between: (the floor epoch, the next one's start).
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(2)),
            Some((LeaderEpoch(1), Offset(12)))
        );
        // Below the first epoch: (the requested epoch, the first start offset).
        assert_eq!(
            log.end_offset_for_epoch(LeaderEpoch(0)),
            Some((LeaderEpoch(0), Offset(0)))
        );
        // Above the latest, and undefined: Kafka's (-1, -1).
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(4)), None);
        assert_eq!(log.end_offset_for_epoch(LeaderEpoch(-1)), None);
        // An older or equal epoch changes nothing.
        log.become_leader(LeaderEpoch(2)).await.unwrap();
        assert_eq!(log.latest_epoch(), Some(LeaderEpoch(3)));
        let info = log.append(batch(1, 0, 5), LeaderEpoch(3), 0).unwrap();
        assert_eq!(info.base_offset, Offset(12));
        assert_eq!(
            log.epoch_entries(),
            vec![(LeaderEpoch(1), Offset(0)), (LeaderEpoch(3), Offset(12))]
        );
    });
}

#[test]
fn follower_log_start_moves_up_to_the_high_watermark_only() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let log = log_of(dir.path(), 14).await;
        log.set_replicated(true);
        let segments = log.segment_count();
        // The single-replica commit above moved the high watermark to 42; cap there.
        assert_eq!(
            log.maybe_increment_log_start_offset(Offset(30))
                .await
                .unwrap(),
            Offset(30)
        );
        assert!(log.segment_count() < segments);
        assert_eq!(
            log.maybe_increment_log_start_offset(Offset(10))
                .await
                .unwrap(),
            Offset(30)
        );
        log.append(batch(3, 0, 5), LeaderEpoch(9), 0).unwrap();
        assert_eq!(
            log.maybe_increment_log_start_offset(Offset(1000))
                .await
                .unwrap(),
            Offset(42)
        );
        drop(log);
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        assert_eq!(log.offsets().log_start_offset, Offset(42));
    });
}

#[test]
fn a_follower_takes_a_compacted_leaders_offset_gaps_once_prepared_and_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        let checkpoint = dir.path().join("cleaner-offset-checkpoint");
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        // Offsets 0-1, then 5-6: compaction left a gap of three between the batches.
        let mut gapped = batch_at(0, 1);
        gapped.extend_from_slice(&batch_at(5, 1));
        let gapped = gapped.freeze();
        let refused = log.append_as_follower(gapped.clone(), LeaderEpoch(1), 0);
        assert!(
            matches!(refused, Err(StorageError::ReplicaAppend(_))),
            "{refused:?}"
        );
        assert_eq!(log.offsets().log_end_offset, Offset(0));
        // Batches without a gap need nothing.
        log.prepare_for_gaps(&batch_at(0, 1)).await.unwrap();
        assert!(!checkpoint.exists());
        log.prepare_for_gaps(&gapped).await.unwrap();
        assert!(checkpoint.exists());
        log.append_as_follower(gapped, LeaderEpoch(1), 0).unwrap();
        // A gap at the log end, in a later epoch.
        let tail = batch_at(20, 2);
        log.prepare_for_gaps(&tail).await.unwrap();
        log.append_as_follower(tail.freeze(), LeaderEpoch(2), 0)
            .unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(22));
        let kept = read_all(&log).await;
        assert_eq!(
            batches_in(&kept).iter().map(|b| b.0).collect::<Vec<_>>(),
            vec![0, 5, 20]
        );
        // Made durable, then reopened without a close: recovery takes the gaps.
        log.make_durable(Offset(22)).await.unwrap();
        drop(log);
        let log = Log::open(dir.path(), config(500)).await.unwrap();
        assert_eq!(log.offsets().log_end_offset, Offset(22));
        assert_eq!(read_all(&log).await, kept);
    });
}
