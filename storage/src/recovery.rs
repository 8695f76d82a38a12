//! Recovery scan of a segment file: walks batches from a known batch boundary, validating each
//! (length, magic, CRC32C, offsets increasing: compaction leaves gaps) and stops at the first that is torn, corrupt,
//! zero padding (batchLength 0) or out of sequence. If no valid batch follows that point, it is
//! a torn tail (a crash mid-write, or padding) and the caller truncates it. If a valid batch
//! does follow, the bad batch is mid-segment corruption: truncating would drop data that was
//! written (and perhaps acknowledged) after it, so the scan fails with
//! [`StorageError::CorruptSegment`] and the log does not open. Runs once per segment at
//! `Log::open` on the owning shard.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::io::SegmentFile;

use crate::batch::{validate_one, BatchHeader, HEADER_BYTES, MAGIC_V2};
use crate::error::StorageError;

/// Whether this process's previous run stopped cleanly: every log closed by `Log::close`,
/// which wrote the active segment's indexes too. Set once at start, before any log opens.
static PREVIOUS_STOP_CLEAN: AtomicBool = AtomicBool::new(false);

/// Says that the previous run stopped cleanly (the broker's clean-shutdown record, KIP-841):
/// opening a log then trusts its active segment's indexes as it trusts a closed segment's, and
/// scans only what follows the last index entry, as Kafka skips log recovery after a clean
/// shutdown. Call before opening any log.
pub fn set_previous_stop_clean(clean: bool) {
    PREVIOUS_STOP_CLEAN.store(clean, Ordering::Relaxed);
}

/// See [`set_previous_stop_clean`].
pub fn previous_stop_clean() -> bool {
    PREVIOUS_STOP_CLEAN.load(Ordering::Relaxed)
}

/// Bytes read per I/O while scanning.
const SCAN_WINDOW_BYTES: u64 = 1024 * 1024;

/// Where a validating walk stopped.
struct ScanStop {
    /// End of the last valid batch: where the walk stopped.
    end: u64,
    /// Base offset the next batch must have.
    expected: i64,
    /// Why the bytes at `end` are not a valid batch; `None` when the walk reached the end of
    /// the file.
    reason: Option<String>,
}

/// Scans `file` (the segment at `segment`, for error messages) from `start` (a batch boundary
/// whose batch must have base offset `expected_base`, or a later one when `gaps_allowed`: a
/// compacted log) up to `file_size`, calling
/// `on_batch(position, header)` for every valid batch in order. Returns the end of the last
/// valid batch; everything after it is a torn tail. Fails with `CorruptSegment` if a valid
/// batch of this segment lies after the first bad one (see [`find_valid_batch`]), unless the
/// bad batch lies at or past offset `torn_from` (the recovery point: nothing there was known
/// synced): a power cut may tear an unsynced write anywhere, keeping sectors after a lost one,
/// so there the tail is cut at the first bad batch, as Kafka recovers its unflushed segments.
// The scan's inputs are independent plain values, each named at the two call sites.
#[allow(clippy::too_many_arguments)]
pub async fn scan_segment(
    file: &SegmentFile,
    segment: &Path,
    start: u64,
    file_size: u64,
    expected_base: i64,
    base_offset: i64,
    gaps_allowed: bool,
    torn_from: i64,
    on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<u64, StorageError> {
    let stop = walk_valid(
        file,
        start,
        file_size,
        expected_base,
        base_offset,
        gaps_allowed,
        on_batch,
    )
    .await?;
    debug_assert!(stop.end <= file_size);
    let Some(reason) = stop.reason else {
        return Ok(stop.end);
    };
    if stop.expected >= torn_from {
        tracing::warn!(segment = %segment.display(), position = stop.end, offset = stop.expected, %reason, "torn tail past the recovery point: cutting it");
        return Ok(stop.end);
    }
    match find_valid_batch(file, stop.end + 1, file_size, stop.expected, base_offset).await? {
        None => Ok(stop.end),
        Some(next) => Err(StorageError::CorruptSegment {
            segment: segment.display().to_string(),
            position: stop.end,
            reason: format!("{reason}; a valid batch follows at byte position {next}"),
        }),
    }
}

/// The validating walk of [`scan_segment`]: stops at the first bad batch and says why.
async fn walk_valid(
    file: &SegmentFile,
    start: u64,
    file_size: u64,
    expected_base: i64,
    base_offset: i64,
    gaps_allowed: bool,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<ScanStop, StorageError> {
    let mut pos = start;
    let mut expected = expected_base;
    let stop = |end: u64, expected: i64, reason: String| ScanStop {
        end,
        expected,
        reason: Some(reason),
    };
    while pos < file_size {
        let want = SCAN_WINDOW_BYTES.min(file_size - pos) as usize;
        let window = file.read_at(pos, want).await?;
        let window: &[u8] = &window;
        let mut off = 0usize;
        loop {
            let at = pos + off as u64;
            let rest = &window[off..];
            if rest.len() < HEADER_BYTES {
                if at + (rest.len() as u64) < file_size && off > 0 {
                    break; // the header continues in the next window
                }
                // A torn header at the end of the file.
                return Ok(stop(
                    at,
                    expected,
                    format!("{} bytes left, less than a batch header", file_size - at),
                ));
            }
            let Some(header) = BatchHeader::parse(rest) else {
                // Zero padding or a garbage length.
                return Ok(stop(
                    at,
                    expected,
                    "batchLength below the minimum (zero padding or garbage)".to_string(),
                ));
            };
            if at + header.size as u64 > file_size {
                return Ok(stop(
                    at,
                    expected,
                    format!(
                        "batch of {} bytes runs past the end of the file ({file_size} bytes)",
                        header.size
                    ),
                ));
            }
            let owned;
            let bytes: &[u8] = if header.size <= rest.len() {
                &rest[..header.size]
            } else if off > 0 {
                break; // re-read with the batch at the start of the window
            } else {
                owned = file.read_at(at, header.size).await?;
                &owned
            };
            if bytes.len() < header.size {
                return Ok(stop(at, expected, "short read of the batch".to_string()));
            }
            let valid = match validate_one(bytes, u32::MAX) {
                Ok(valid) => valid,
                Err(e) => return Ok(stop(at, expected, e.to_string())),
            };
            // Offsets follow on densely, or (in a compacted log) only grow.
            if valid.base_offset < expected || (!gaps_allowed && valid.base_offset != expected) {
                return Ok(stop(
                    at,
                    expected,
                    format!(
                        "base offset {} where {expected} was expected",
                        valid.base_offset
                    ),
                ));
            }
            if valid.last_offset() - base_offset > u32::MAX as i64 {
                return Ok(stop(
                    at,
                    expected,
                    format!(
                        "last offset {} too far from the segment base offset {base_offset}",
                        valid.last_offset()
                    ),
                ));
            }
            on_batch(at, &valid);
            expected = valid.last_offset() + 1;
            off += header.size;
            if off >= window.len() {
                break;
            }
        }
        pos += off as u64;
    }
    Ok(ScanStop {
        end: pos,
        expected,
        reason: None,
    })
}

/// The first position in `[from, file_size)` where a batch that could belong after the bad
/// one starts: its header parses, magic is 2, it fits in the file, it passes `validate_one`
/// (CRC included), its base offset is at least `min_base_offset` (the offset the bad batch
/// should have had: batches that were written after it have larger offsets, so stale or
/// embedded bytes with smaller ones do not count) and its offsets fit the segment. Tries every
/// byte position, so it costs a read of the rest of the file: start-up only, bounded by the
/// segment size.
async fn find_valid_batch(
    file: &SegmentFile,
    from: u64,
    file_size: u64,
    min_base_offset: i64,
    base_offset: i64,
) -> Result<Option<u64>, StorageError> {
    let mut pos = from;
    while pos + HEADER_BYTES as u64 <= file_size {
        let want = SCAN_WINDOW_BYTES.min(file_size - pos) as usize;
        let window = file.read_at(pos, want).await?;
        let window: &[u8] = &window;
        if window.len() < HEADER_BYTES {
            return Ok(None); // a short read at the end: no room for a batch
        }
        // Positions whose whole header lies in this window; the next window starts after
        // them, overlapping this one by less than a header.
        let candidates = window.len() - HEADER_BYTES + 1;
        for off in 0..candidates {
            let at = pos + off as u64;
            let Some(header) = BatchHeader::parse(&window[off..]) else {
                continue;
            };
            if header.magic != MAGIC_V2
                || header.last_offset_delta < 0
                || at + header.size as u64 > file_size
                || header.base_offset < min_base_offset
                || header.last_offset() - base_offset > u32::MAX as i64
            {
                continue;
            }
            let owned;
            let bytes: &[u8] = if off + header.size <= window.len() {
                &window[off..off + header.size]
            } else {
                owned = file.read_at(at, header.size).await?;
                &owned
            };
            if bytes.len() == header.size && validate_one(bytes, u32::MAX).is_ok() {
                return Ok(Some(at));
            }
        }
        pos += candidates as u64;
    }
    Ok(None)
}
