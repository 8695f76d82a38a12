//! Recovery at `Log::open`: a bad batch with valid batches after it (mid-segment corruption)
//! fails with `CorruptSegment` and leaves the file untouched; a torn tail (an incomplete last
//! batch, zeros or garbage after the last valid batch) is still truncated. Active segments
//! (always rescanned) and closed ones (rescanned when their indexes are not trusted).

use std::path::{Path, PathBuf};

use crate::batch::{BatchHeader, BASE_OFFSET_AT, BATCH_LENGTH_AT, HEADER_BYTES, MAGIC_AT};
use crate::test_util::*;
use crate::*;

const BATCHES: usize = 10;
const RECORDS_PER_BATCH: usize = 2;

fn config() -> LogConfig {
    LogConfig {
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

fn segment_log(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.log"))
}

/// Start position of every batch in `bytes` (a whole, valid segment file).
fn batch_positions(bytes: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let h = BatchHeader::parse(&bytes[pos..]).expect("batch header");
        out.push(pos as u64);
        pos += h.size;
    }
    assert_eq!(pos, bytes.len(), "the segment ends on a batch boundary");
    out
}

/// Appends `BATCHES` batches of `RECORDS_PER_BATCH` records to a new log in `dir`, syncs and
/// closes it.
async fn write_batches(dir: &Path, cfg: LogConfig) {
    let log = Log::open(dir, cfg).await.unwrap();
    for i in 0..BATCHES {
        let ts = 1000 + (i * RECORDS_PER_BATCH) as i64;
        log.append(batch(RECORDS_PER_BATCH, ts, 30), LeaderEpoch(0), ts)
            .unwrap();
    }
    log.sync().await.unwrap();
    log.close().await.unwrap();
}

/// Opens the log and expects `CorruptSegment` at `position` of `path`, with the file left as
/// it was.
async fn expect_corrupt(dir: &Path, cfg: LogConfig, path: &Path, position: u64) {
    let before = std::fs::read(path).unwrap();
    let err = match Log::open(dir, cfg).await {
        Ok(log) => panic!("opened a log with a corrupt segment: {:?}", log.offsets()),
        Err(e) => e,
    };
    let text = err.to_string();
    match err {
        StorageError::CorruptSegment {
            segment,
            position: at,
            reason,
        } => {
            assert_eq!(segment, path.display().to_string());
            assert_eq!(at, position, "position of the bad batch ({reason})");
            assert!(reason.contains("a valid batch follows"), "{reason}");
        }
        other => panic!("expected CorruptSegment, got {other:?}"),
    }
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&format!("position {position}")), "{text}");
    assert!(text.contains("offline"), "{text}");
    assert_eq!(
        std::fs::read(path).unwrap(),
        before,
        "a corrupt segment is left as it is"
    );
}

#[test]
fn recovery_corrupt_crc_in_the_middle_fails_open_and_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), config()).await;
        let path = segment_log(dir.path(), 0);
        let good = std::fs::read(&path).unwrap();
        let positions = batch_positions(&good);
        assert_eq!(positions.len(), BATCHES);
        // Batch 5 (0-based): flip a byte of its records, covered by the CRC.
        let bad_at = positions[5];
        let mut bytes = good.clone();
        bytes[bad_at as usize + HEADER_BYTES + 3] ^= 0x5a;
        std::fs::write(&path, &bytes).unwrap();
        expect_corrupt(dir.path(), config(), &path, bad_at).await;
        // Still refused on a second try: nothing was repaired behind the operator's back.
        expect_corrupt(dir.path(), config(), &path, bad_at).await;
        // Once the operator restores the batch, the log opens with everything.
        std::fs::write(&path, &good).unwrap();
        let log = Log::open(dir.path(), config()).await.unwrap();
        assert_eq!(
            log.offsets().log_end_offset,
            Offset((BATCHES * RECORDS_PER_BATCH) as i64)
        );
    });
}

#[test]
fn recovery_corrupt_header_in_the_middle_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), config()).await;
        let path = segment_log(dir.path(), 0);
        let good = std::fs::read(&path).unwrap();
        let bad_at = batch_positions(&good)[5] as usize;
        let mut corruptions: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut bad_magic = good.clone();
        bad_magic[bad_at + MAGIC_AT] = 7;
        corruptions.push(("bad magic", bad_magic));
        let mut short_length = good.clone();
        short_length[bad_at + BATCH_LENGTH_AT..bad_at + BATCH_LENGTH_AT + 4]
            .copy_from_slice(&0i32.to_be_bytes());
        corruptions.push(("batchLength 0", short_length));
        let mut long_length = good.clone();
        long_length[bad_at + BATCH_LENGTH_AT..bad_at + BATCH_LENGTH_AT + 4]
            .copy_from_slice(&i32::MAX.to_be_bytes());
        corruptions.push(("batchLength past the end of the file", long_length));
        // baseOffset is not covered by the CRC: out of sequence.
        let mut bad_base = good.clone();
        bad_base[bad_at + BASE_OFFSET_AT..bad_at + BASE_OFFSET_AT + 8]
            .copy_from_slice(&12345i64.to_be_bytes());
        corruptions.push(("base offset out of sequence", bad_base));
        let mut zeroed = good.clone();
        zeroed[bad_at..bad_at + HEADER_BYTES].fill(0);
        corruptions.push(("zeroed header", zeroed));
        for (what, bytes) in corruptions {
            std::fs::write(&path, &bytes).unwrap();
            eprintln!("corruption: {what}");
            expect_corrupt(dir.path(), config(), &path, bad_at as u64).await;
        }
    });
}

#[test]
fn recovery_truncates_a_torn_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), config()).await;
        let path = segment_log(dir.path(), 0);
        let good = std::fs::read(&path).unwrap();
        let last_at = batch_positions(&good)[BATCHES - 1] as usize;
        // Cut in the middle of the last batch.
        let cut = last_at + (good.len() - last_at) / 2;
        std::fs::write(&path, &good[..cut]).unwrap();
        let log = Log::open(dir.path(), config()).await.unwrap();
        let end = Offset(((BATCHES - 1) * RECORDS_PER_BATCH) as i64);
        assert_eq!(log.offsets().log_end_offset, end);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), last_at as u64);
        let r = log.read(Offset(0), 1 << 20, end).await.unwrap();
        assert_eq!(batches_in(&r.records).len(), BATCHES - 1);
        // The log goes on at the recovered end.
        let a = log.append(batch(2, 5000, 30), LeaderEpoch(0), 0).unwrap();
        assert_eq!(a.base_offset, end);
        log.close().await.unwrap();
    });
}

#[test]
fn recovery_drops_only_zeros_and_garbage_after_the_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), config()).await;
        let path = segment_log(dir.path(), 0);
        let good = std::fs::read(&path).unwrap();
        let end = Offset((BATCHES * RECORDS_PER_BATCH) as i64);
        let mut zeros = good.clone();
        zeros.resize(good.len() + 5000, 0);
        let mut garbage = good.clone();
        garbage.extend((0..3000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
        // A header-like start whose batch runs past the end, then zeros.
        let mut header_then_zeros = good.clone();
        header_then_zeros.extend_from_slice(&batch(2, 9000, 30)[..HEADER_BYTES + 5]);
        header_then_zeros.resize(header_then_zeros.len() + 100, 0);
        for (what, bytes) in [
            ("zeros", zeros),
            ("garbage", garbage),
            ("torn header + zeros", header_then_zeros),
        ] {
            std::fs::write(&path, &bytes).unwrap();
            let log = Log::open(dir.path(), config()).await.unwrap();
            assert_eq!(log.offsets().log_end_offset, end, "{what}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                good,
                "{what}: only the tail is dropped"
            );
            let r = log.read(Offset(0), 1 << 20, end).await.unwrap();
            assert_eq!(batches_in(&r.records).len(), BATCHES, "{what}");
            log.close().await.unwrap();
        }
    });
}

/// A small segment size so the log rolls: segments `[0, ...]`, the first one closed.
fn rolling_config() -> LogConfig {
    LogConfig {
        segment_bytes: 700,
        ..config()
    }
}

fn log_bases(dir: &Path) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort();
    bases
}

#[test]
fn recovery_corrupt_closed_segment_with_rebuilt_indexes_fails_open() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), rolling_config()).await;
        let bases = log_bases(dir.path());
        assert!(bases.len() >= 2, "the log rolled: {bases:?}");
        let path = segment_log(dir.path(), bases[0]);
        let good = std::fs::read(&path).unwrap();
        let positions = batch_positions(&good);
        assert!(positions.len() >= 3, "{positions:?}");
        let bad_at = positions[1];
        let mut bytes = good.clone();
        bytes[bad_at as usize + HEADER_BYTES + 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        // Without its indexes the closed segment is scanned from the start.
        std::fs::remove_file(dir.path().join(format!("{:020}.index", bases[0]))).unwrap();
        expect_corrupt(dir.path(), rolling_config(), &path, bad_at).await;
        for &base in &bases {
            assert!(
                segment_log(dir.path(), base).exists(),
                "segment {base} kept"
            );
        }
    });
}

#[test]
fn recovery_index_pointing_inside_a_batch_rebuilds_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    run(|| async {
        write_batches(dir.path(), rolling_config()).await;
        let bases = log_bases(dir.path());
        assert!(bases.len() >= 2, "the log rolled: {bases:?}");
        // A stale index whose only entry points into the first batch (valid batches follow).
        let mut entry = Vec::new();
        entry.extend_from_slice(&1u32.to_be_bytes());
        entry.extend_from_slice(&1u32.to_be_bytes());
        std::fs::write(dir.path().join(format!("{:020}.index", bases[0])), entry).unwrap();
        let log = Log::open(dir.path(), rolling_config()).await.unwrap();
        let end = Offset((BATCHES * RECORDS_PER_BATCH) as i64);
        assert_eq!(log.offsets().log_end_offset, end);
        let mut at = Offset(0);
        let mut batches = 0;
        while at < end {
            let r = log.read(at, 1 << 20, end).await.unwrap();
            let got = batches_in(&r.records);
            assert_eq!(got[0].0, at.0);
            batches += got.len();
            at = Offset(got[got.len() - 1].1 + 1);
        }
        assert_eq!(batches, BATCHES);
    });
}
