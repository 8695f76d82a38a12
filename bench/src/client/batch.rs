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
        let body = compress(codec, &self.records)?;
        let mut b = BytesMut::with_capacity(61 + body.len());
        b.put_i64(0); // base offset, assigned by the broker
        b.put_i32((49 + body.len()) as i32);
        b.put_i32(-1); // partition leader epoch
        b.put_i8(2); // magic
        b.put_u32(0); // crc, below
        b.put_i16(codec as i16);
        b.put_i32(self.count - 1);
        b.put_i64(self.base_timestamp);
        b.put_i64(self.max_timestamp);
        b.put_i64(-1); // producer id
        b.put_i16(-1); // producer epoch
        b.put_i32(-1); // base sequence
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
pub fn for_each_record(data: &[u8], mut f: impl FnMut(RecordView<'_>)) -> Result<Option<i64>> {
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
        next = Some(base_offset + i64::from(last_offset_delta) + 1);
        if attributes & 0x20 != 0 {
            continue; // control batch (transaction marker)
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
