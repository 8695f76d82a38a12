//! Recovery scan of a segment file: walks batches from a known batch boundary, validating each
//! (length, magic, CRC32C, offset continuity) and stops at the first that is torn, corrupt,
//! zero padding (batchLength 0) or out of sequence; everything from there is the invalid tail
//! that the caller truncates. Runs once per segment at `Log::open` on the owning shard.

use glommio::io::DmaFile;

use crate::batch::{validate_one, BatchHeader, HEADER_BYTES};
use crate::error::StorageError;

/// Bytes read per I/O while scanning.
const SCAN_WINDOW_BYTES: u64 = 1024 * 1024;

/// Scans `file` from `start` (a batch boundary whose batch must have base offset
/// `expected_base`) up to `file_size`, calling `on_batch(position, header)` for every valid
/// batch in order. Returns the end of the last valid batch.
pub async fn scan_segment(
    file: &DmaFile,
    start: u64,
    file_size: u64,
    expected_base: i64,
    base_offset: i64,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> Result<u64, StorageError> {
    let mut pos = start;
    let mut expected = expected_base;
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
                return Ok(at); // torn header at the end of the file
            }
            let Some(header) = BatchHeader::parse(rest) else {
                return Ok(at); // zero padding or a garbage length
            };
            if at + header.size as u64 > file_size {
                return Ok(at); // torn batch
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
                return Ok(at);
            }
            let Ok(valid) = validate_one(bytes, u32::MAX) else {
                return Ok(at);
            };
            if valid.base_offset != expected || valid.last_offset() - base_offset > u32::MAX as i64
            {
                return Ok(at);
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
    Ok(pos)
}
