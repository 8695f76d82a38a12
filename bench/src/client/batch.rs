//! Record batches (magic 2): encode with any codec, decode back to records. The producer
//! appends records into a reusable buffer; `finish` compresses and frames the batch.

use std::io::{Read, Write};

use anyhow::{bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};

/// Kafka's compression codecs, by attribute bits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl std::str::FromStr for Codec {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Codec> {
        Ok(match s {
            "none" => Codec::None,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            other => bail!("unknown compression {other:?} (none, gzip, snappy, lz4, zstd)"),
        })
    }
}

fn put_varint(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn get_varint(b: &[u8], pos: &mut usize) -> Result<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos).context("truncated varint")?;
        *pos += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    bail!("varint too long")
}

/// Attributes bit 4: the batch belongs to a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;

/// What an idempotent or transactional producer writes into a batch's header: its producer
/// id and epoch, the partition's base sequence of the batch's first record, and whether the
/// batch is part of a transaction. A plain producer writes none (-1, -1, -1).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProducerStamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

/// Per-partition sequence numbers of an idempotent producer: each batch takes the next
/// sequence as its base and advances it by its record count, wrapping past `i32::MAX` to 0
/// as Kafka does. A retried batch keeps the base it was given (it is not taken again).
#[derive(Clone, Debug, Default)]
pub struct Sequences {
    next: Vec<i32>,
}

impl Sequences {
    pub fn new(partitions: usize) -> Self {
        Sequences {
            next: vec![0; partitions],
        }
    }

    /// The base sequence for a batch of `count` records to `partition`; advances it.
    pub fn take(&mut self, partition: usize, count: i32) -> i32 {
        if partition >= self.next.len() {
            self.next.resize(partition + 1, 0);
        }
        let base = self.next[partition];
        self.next[partition] = next_sequence(base, count);
        base
    }
}

/// `base + count`, wrapping past `i32::MAX` to 0 (Kafka's DefaultRecordBatch.incrementSequence).
pub fn next_sequence(base: i32, count: i32) -> i32 {
    if base > i32::MAX - count {
        count - (i32::MAX - base) - 1
    } else {
        base + count
    }
}

/// A batch being filled for one partition.
pub struct BatchBuilder {
    records: BytesMut,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    pub fn new() -> Self {
        BatchBuilder {
            records: BytesMut::with_capacity(16 * 1024),
            count: 0,
            base_timestamp: 0,
            max_timestamp: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Uncompressed bytes of the records so far.
    pub fn size(&self) -> usize {
        self.records.len()
    }

    pub fn push(&mut self, timestamp_ms: i64, key: Option<&[u8]>, value: &[u8]) {
        if self.count == 0 {
            self.base_timestamp = timestamp_ms;
            self.max_timestamp = timestamp_ms;
        }
        self.max_timestamp = self.max_timestamp.max(timestamp_ms);
        let ts_delta = timestamp_ms - self.base_timestamp;
        let offset_delta = i64::from(self.count);
        let key_len = key.map_or(-1, |k| k.len() as i64);
        let body_len = 1
            + varint_len(ts_delta)
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key.map_or(0, <[u8]>::len)
            + varint_len(value.len() as i64)
            + value.len()
            + varint_len(0);
        put_varint(&mut self.records, body_len as i64);
        self.records.put_u8(0);
        put_varint(&mut self.records, ts_delta);
        put_varint(&mut self.records, offset_delta);
        put_varint(&mut self.records, key_len);
        if let Some(k) = key {
            self.records.put_slice(k);
        }
        put_varint(&mut self.records, value.len() as i64);
        self.records.put_slice(value);
        put_varint(&mut self.records, 0);
        self.count += 1;
    }

    /// Compresses and frames the batch; the builder is empty afterwards.
    pub fn finish(&mut self, codec: Codec) -> Result<Bytes> {
        self.finish_stamped(codec, None)
    }

    /// As [`BatchBuilder::finish`], with an idempotent or transactional producer's stamp.
    pub fn finish_stamped(&mut self, codec: Codec, stamp: Option<ProducerStamp>) -> Result<Bytes> {
        let (producer_id, epoch, base_sequence, transactional) = match stamp {
            Some(s) => (s.producer_id, s.epoch, s.base_sequence, s.transactional),
            None => (-1, -1, -1, false),
        };
        let mut attributes = codec as i16;
        if transactional {
            attributes |= ATTR_TRANSACTIONAL;
        }
        let body = compress(codec, &self.records)?;
        let mut b = BytesMut::with_capacity(61 + body.len());
        b.put_i64(0); // base offset, assigned by the broker
        b.put_i32((49 + body.len()) as i32);
        b.put_i32(-1); // partition leader epoch
        b.put_i8(2); // magic
        b.put_u32(0); // crc, below
        b.put_i16(attributes);
        b.put_i32(self.count - 1);
        b.put_i64(self.base_timestamp);
        b.put_i64(self.max_timestamp);
        b.put_i64(producer_id);
        b.put_i16(epoch);
        b.put_i32(base_sequence);
        b.put_i32(self.count);
        b.put_slice(&body);
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        self.records.clear();
        self.count = 0;
        Ok(b.freeze())
    }
}

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

fn compress(codec: Codec, raw: &[u8]) -> Result<Vec<u8>> {
    Ok(match codec {
        Codec::None => raw.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(raw)?;
            e.finish()?
        }
        Codec::Snappy => {
            // Xerial framing, as the Java client writes it: magic, version, compat, blocks.
            let mut out = Vec::with_capacity(raw.len() / 2 + 32);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            for chunk in raw.chunks(32 * 1024) {
                let c = enc.compress_vec(chunk)?;
                out.extend_from_slice(&(c.len() as i32).to_be_bytes());
                out.extend_from_slice(&c);
            }
            out
        }
        Codec::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(raw)?;
            e.finish()?
        }
        Codec::Zstd => zstd::bulk::compress(raw, 1)?,
    })
}

fn decompress(codec: i16, data: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
    use std::borrow::Cow;
    Ok(Cow::Owned(match codec {
        0 => return Ok(Cow::Borrowed(data)),
        1 => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(data).read_to_end(&mut out)?;
            out
        }
        2 => {
            let mut dec = snap::raw::Decoder::new();
            if data.starts_with(XERIAL_MAGIC) {
                let mut out = Vec::new();
                let mut pos = 16;
                while pos + 4 <= data.len() {
                    let len = i32::from_be_bytes(data[pos..pos + 4].try_into()?) as usize;
                    pos += 4;
                    let block = data.get(pos..pos + len).context("truncated snappy block")?;
                    out.extend_from_slice(&dec.decompress_vec(block)?);
                    pos += len;
                }
                out
            } else {
                dec.decompress_vec(data)?
            }
        }
        3 => {
            let mut out = Vec::new();
            lz4_flex::frame::FrameDecoder::new(data).read_to_end(&mut out)?;
            out
        }
        4 => zstd::stream::decode_all(data)?,
        other => bail!("unknown codec {other}"),
    }))
}

/// One record as the consumer sees it.
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Calls `f` for every record of every whole batch in `data` (a Fetch response's records),
/// skipping control batches. Returns the offset after the last record seen.
pub fn for_each_record(data: &[u8], f: impl FnMut(RecordView<'_>)) -> Result<Option<i64>> {
    for_each_committed_record(data, &[], f)
}

/// As [`for_each_record`] for a read_committed fetch: also skips the records of aborted
/// transactions, given the partition's aborted list from the Fetch answer as (producer id,
/// first offset), as Kafka's consumer does: a transactional batch of a producer whose
/// aborted transaction began at or before the batch is skipped until that producer's next
/// control batch (its abort marker).
pub fn for_each_committed_record(
    data: &[u8],
    aborted: &[(i64, i64)],
    mut f: impl FnMut(RecordView<'_>),
) -> Result<Option<i64>> {
    let mut aborted: Vec<(i64, i64)> = aborted.to_vec();
    aborted.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
    let mut open_aborted: Vec<i64> = Vec::new();
    let mut pos = 0;
    let mut next = None;
    while pos + 61 <= data.len() {
        let base_offset = i64::from_be_bytes(data[pos..pos + 8].try_into()?);
        let len = i32::from_be_bytes(data[pos + 8..pos + 12].try_into()?);
        let size = 12 + len.max(0) as usize;
        if len < 49 || pos + size > data.len() {
            break; // a partial batch at the end of a fetch
        }
        let batch = &data[pos..pos + size];
        pos += size;
        if batch[16] != 2 {
            bail!("record batch magic {} is not supported", batch[16]);
        }
        let attributes = i16::from_be_bytes(batch[21..23].try_into()?);
        let last_offset_delta = i32::from_be_bytes(batch[23..27].try_into()?);
        let last_offset = base_offset + i64::from(last_offset_delta);
        next = Some(last_offset + 1);
        let producer_id = i64::from_be_bytes(batch[43..51].try_into()?);
        while aborted
            .last()
            .is_some_and(|&(_, first)| first <= last_offset)
        {
            let (pid, _) = aborted.pop().expect("checked");
            open_aborted.push(pid);
        }
        if attributes & 0x20 != 0 {
            // control batch (transaction marker): ends the producer's aborted transaction
            open_aborted.retain(|&pid| pid != producer_id);
            continue;
        }
        if attributes & ATTR_TRANSACTIONAL != 0 && open_aborted.contains(&producer_id) {
            continue; // a record of an aborted transaction
        }
        let base_ts = i64::from_be_bytes(batch[27..35].try_into()?);
        let count = i32::from_be_bytes(batch[57..61].try_into()?);
        let records = decompress(attributes & 0x7, &batch[61..])?;
        let mut p = 0;
        for _ in 0..count {
            let len = get_varint(&records, &mut p)? as usize;
            let end = p + len;
            if end > records.len() {
                bail!("record overruns its batch");
            }
            p += 1; // attributes
            let ts_delta = get_varint(&records, &mut p)?;
            let offset_delta = get_varint(&records, &mut p)?;
            let key_len = get_varint(&records, &mut p)?;
            let key = if key_len >= 0 {
                let k = records
                    .get(p..p + key_len as usize)
                    .context("key overruns record")?;
                p += key_len as usize;
                Some(k)
            } else {
                None
            };
            let value_len = get_varint(&records, &mut p)?;
            let value = if value_len >= 0 {
                Some(
                    records
                        .get(p..p + value_len as usize)
                        .context("value overruns record")?,
                )
            } else {
                None
            };
            f(RecordView {
                offset: base_offset + offset_delta,
                timestamp_ms: base_ts + ts_delta,
                key,
                value,
            });
            p = end;
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let mut b = BatchBuilder::new();
            for i in 0..100 {
                let key = format!("k{i}");
                b.push(
                    1_000 + i,
                    (i % 3 != 0).then_some(key.as_bytes()),
                    format!("value-{i}").repeat(10).as_bytes(),
                );
            }
            let batch = b.finish(codec).unwrap();
            assert!(b.is_empty());
            let crc = u32::from_be_bytes(batch[17..21].try_into().unwrap());
            assert_eq!(crc, crc32c::crc32c(&batch[21..]));
            // As a broker would: base offset 500.
            let mut stored = batch.to_vec();
            stored[0..8].copy_from_slice(&500i64.to_be_bytes());
            let mut seen = Vec::new();
            let next = for_each_record(&stored, |r| {
                seen.push((
                    r.offset,
                    r.timestamp_ms,
                    r.key.map(<[u8]>::to_vec),
                    r.value.unwrap().to_vec(),
                ))
            })
            .unwrap();
            assert_eq!(next, Some(600), "{codec:?}");
            assert_eq!(seen.len(), 100);
            for (i, (off, ts, key, value)) in seen.into_iter().enumerate() {
                let i = i as i64;
                assert_eq!((off, ts), (500 + i, 1_000 + i));
                assert_eq!(key, (i % 3 != 0).then(|| format!("k{i}").into_bytes()));
                assert_eq!(value, format!("value-{i}").repeat(10).into_bytes());
            }
        }
    }

    #[test]
    fn a_stamped_batch_carries_producer_id_epoch_sequence_and_flag() {
        let mut b = BatchBuilder::new();
        for i in 0..3 {
            b.push(10 + i, None, b"v");
        }
        let stamp = ProducerStamp {
            producer_id: 4242,
            epoch: 7,
            base_sequence: 300,
            transactional: true,
        };
        let batch = b.finish_stamped(Codec::Lz4, Some(stamp)).unwrap();
        let attributes = i16::from_be_bytes(batch[21..23].try_into().unwrap());
        assert_eq!(attributes, Codec::Lz4 as i16 | ATTR_TRANSACTIONAL);
        assert_eq!(i64::from_be_bytes(batch[43..51].try_into().unwrap()), 4242);
        assert_eq!(i16::from_be_bytes(batch[51..53].try_into().unwrap()), 7);
        assert_eq!(i32::from_be_bytes(batch[53..57].try_into().unwrap()), 300);
        assert_eq!(i32::from_be_bytes(batch[57..61].try_into().unwrap()), 3);
        // The CRC covers the stamp.
        let crc = u32::from_be_bytes(batch[17..21].try_into().unwrap());
        assert_eq!(crc, crc32c::crc32c(&batch[21..]));
        let mut n = 0;
        for_each_record(&batch, |_| n += 1).unwrap();
        assert_eq!(n, 3);

        // Idempotent, not transactional: no flag. Plain: -1 everywhere, as before.
        b.push(1, None, b"v");
        let idem = b
            .finish_stamped(
                Codec::None,
                Some(ProducerStamp {
                    transactional: false,
                    ..stamp
                }),
            )
            .unwrap();
        assert_eq!(i16::from_be_bytes(idem[21..23].try_into().unwrap()), 0);
        assert_eq!(i64::from_be_bytes(idem[43..51].try_into().unwrap()), 4242);
        b.push(1, None, b"v");
        let plain = b.finish(Codec::None).unwrap();
        assert_eq!(i64::from_be_bytes(plain[43..51].try_into().unwrap()), -1);
        assert_eq!(i16::from_be_bytes(plain[51..53].try_into().unwrap()), -1);
        assert_eq!(i32::from_be_bytes(plain[53..57].try_into().unwrap()), -1);
    }

    #[test]
    fn sequences_advance_per_partition_by_record_count_and_wrap() {
        let mut s = Sequences::new(2);
        assert_eq!(s.take(0, 5), 0);
        assert_eq!(s.take(0, 3), 5);
        assert_eq!(s.take(1, 4), 0);
        assert_eq!(s.take(0, 1), 8);
        assert_eq!(s.take(1, 1), 4);
        // A partition beyond the initial count grows the table.
        assert_eq!(s.take(3, 2), 0);
        assert_eq!(s.take(3, 2), 2);
        // Kafka wraps past i32::MAX to 0.
        assert_eq!(next_sequence(i32::MAX - 2, 2), i32::MAX);
        assert_eq!(next_sequence(i32::MAX - 2, 3), 0);
        assert_eq!(next_sequence(i32::MAX, 5), 4);
        let mut s = Sequences::new(1);
        s.next[0] = i32::MAX - 1;
        assert_eq!(s.take(0, 10), i32::MAX - 1);
        assert_eq!(s.take(0, 1), 8);
    }

    /// A batch as a broker stores it: at `base_offset`, from `producer_id`.
    fn stored(base_offset: i64, producer_id: i64, values: &[&str]) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for v in values {
            b.push(1, None, v.as_bytes());
        }
        let stamp = ProducerStamp {
            producer_id,
            epoch: 0,
            base_sequence: 0,
            transactional: true,
        };
        let mut batch = b.finish_stamped(Codec::None, Some(stamp)).unwrap().to_vec();
        batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
        batch
    }

    /// A transaction marker (control batch) of `producer_id` at `offset`.
    fn marker(offset: i64, producer_id: i64) -> Vec<u8> {
        let mut m = stored(offset, producer_id, &["m"]);
        let attributes = ATTR_TRANSACTIONAL | 0x20;
        m[21..23].copy_from_slice(&attributes.to_be_bytes());
        m
    }

    #[test]
    fn read_committed_skips_aborted_transactions_and_markers() {
        // Producer 1 commits a, b (marker at 2); producer 2 aborts x (marker at 4);
        // producer 2 then commits y (marker at 6).
        let mut log = Vec::new();
        log.extend(stored(0, 1, &["a", "b"]));
        log.extend(marker(2, 1));
        log.extend(stored(3, 2, &["x"]));
        log.extend(marker(4, 2));
        log.extend(stored(5, 2, &["y"]));
        log.extend(marker(6, 2));
        let values = |aborted: &[(i64, i64)]| {
            let mut seen = Vec::new();
            let next = for_each_committed_record(&log, aborted, |r| {
                seen.push((
                    r.offset,
                    String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                ))
            })
            .unwrap();
            (next, seen)
        };
        let (next, seen) = values(&[(2, 3)]);
        assert_eq!(next, Some(7));
        let want = |v: &[(i64, &str)]| -> Vec<(i64, String)> {
            v.iter().map(|(o, s)| (*o, s.to_string())).collect()
        };
        assert_eq!(seen, want(&[(0, "a"), (1, "b"), (5, "y")]));
        // Without an aborted list (read_uncommitted) every data record is seen.
        let (_, seen) = values(&[]);
        assert_eq!(seen, want(&[(0, "a"), (1, "b"), (3, "x"), (5, "y")]));
    }

    #[test]
    fn a_partial_trailing_batch_is_skipped() {
        let mut b = BatchBuilder::new();
        b.push(1, None, b"x");
        let one = b.finish(Codec::None).unwrap();
        let mut two = one.to_vec();
        two.extend_from_slice(&one[..20]);
        let mut n = 0;
        assert_eq!(for_each_record(&two, |_| n += 1).unwrap(), Some(1));
        assert_eq!(n, 1);
    }
}
