//! The one reader and the writers of Kafka's internal encodings: big-endian integers,
//! varints, STRING / COMPACT_STRING, arrays and tagged fields, as the coordinators' records
//! (`__consumer_offsets`, `__transaction_state`) and storage's snapshot files use them.
//!
//! Reads are over untrusted bytes: each answers `None` past the end or on a malformed value,
//! never panics, and array counts are checked against what is left before anyone
//! preallocates for them.

use bytes::{BufMut, BytesMut};

/// Reads fields off a byte slice, front to back.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let slice = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(slice)
    }

    pub fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.bytes().map(u8::from_be_bytes)
    }

    pub fn i8(&mut self) -> Option<i8> {
        self.bytes().map(i8::from_be_bytes)
    }

    pub fn i16(&mut self) -> Option<i16> {
        self.bytes().map(i16::from_be_bytes)
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.bytes().map(u16::from_be_bytes)
    }

    pub fn i32(&mut self) -> Option<i32> {
        self.bytes().map(i32::from_be_bytes)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.bytes().map(u32::from_be_bytes)
    }

    pub fn i64(&mut self) -> Option<i64> {
        self.bytes().map(i64::from_be_bytes)
    }

    /// A UUID's 16 bytes.
    pub fn uuid(&mut self) -> Option<[u8; 16]> {
        self.bytes()
    }

    /// An UNSIGNED_VARINT of at most 32 bits.
    pub fn unsigned_varint(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = self.u8()?;
            if i == 4 && b > 0x0f {
                return None; // more than 32 bits
            }
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A zigzag VARLONG (Kafka `ByteUtils.readVarlong`), as records encode their fields.
    pub fn varlong(&mut self) -> Option<i64> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        None
    }

    /// A non-nullable STRING; a null is malformed.
    pub fn string(&mut self) -> Option<String> {
        self.nullable_string()?
    }

    /// A nullable STRING: `Some(None)` for null.
    pub fn nullable_string(&mut self) -> Option<Option<String>> {
        let Ok(len) = usize::try_from(self.i16()?) else {
            return Some(None);
        };
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).ok().map(|s| Some(s.to_owned()))
    }

    /// A non-nullable BYTES (an i32 length); a null is malformed.
    pub fn bytes_field(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.i32()?).ok()?;
        self.take(len)
    }

    /// A compact length (UNSIGNED_VARINT of length + 1): `Some(None)` for null.
    pub fn compact_len(&mut self) -> Option<Option<usize>> {
        let n = self.unsigned_varint()?;
        Some(n.checked_sub(1).and_then(|n| usize::try_from(n).ok()))
    }

    /// A non-nullable COMPACT_STRING; a null is malformed.
    pub fn compact_string(&mut self) -> Option<String> {
        self.compact_nullable_string()?
    }

    /// A COMPACT_NULLABLE_STRING: `Some(None)` for null.
    pub fn compact_nullable_string(&mut self) -> Option<Option<String>> {
        let Some(len) = self.compact_len()? else {
            return Some(None);
        };
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).ok().map(|s| Some(s.to_owned()))
    }

    /// An array's count, an i32 (`flexible` false) or a compact length: `Some(None)` for
    /// null. Refused when its elements, of at least `element_bytes_min` each, could not fit
    /// in what is left, so callers may preallocate.
    pub fn nullable_array_len(
        &mut self,
        flexible: bool,
        element_bytes_min: usize,
    ) -> Option<Option<usize>> {
        let count = if flexible {
            match self.compact_len()? {
                None => return Some(None),
                Some(n) => n,
            }
        } else {
            match self.i32()? {
                -1 => return Some(None),
                n => usize::try_from(n).ok()?,
            }
        };
        (count.saturating_mul(element_bytes_min) <= self.remaining()).then_some(Some(count))
    }

    /// A non-nullable compact array's count (see [`Reader::nullable_array_len`]).
    pub fn compact_array_len(&mut self, element_bytes_min: usize) -> Option<usize> {
        self.nullable_array_len(true, element_bytes_min)?
    }

    /// Reads a struct's tagged fields, handing each (tag, data) to `each`, which refuses a
    /// known tag of the wrong size with `None`.
    pub fn tagged_fields(&mut self, mut each: impl FnMut(u32, &[u8]) -> Option<()>) -> Option<()> {
        let count = self.unsigned_varint()?;
        // Each field takes at least two bytes, so this ends with the buffer.
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = usize::try_from(self.unsigned_varint()?).ok()?;
            each(tag, self.take(size)?)?;
        }
        Some(())
    }

    /// Reads past a struct's tagged fields, none of which the caller uses.
    pub fn skip_tagged_fields(&mut self) -> Option<()> {
        self.tagged_fields(|_, _| Some(()))
    }

    /// `Some` if every byte was read.
    pub fn finish(self) -> Option<()> {
        (self.remaining() == 0).then_some(())
    }
}

/// No tagged fields: a count of zero.
pub const NO_TAGGED_FIELDS: u8 = 0;

pub fn put_unsigned_varint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// A zigzag VARLONG.
pub fn put_varlong(buf: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    buf.put_u8(z as u8);
}

/// A compact string's or array's length (+1; 0 is null).
pub fn put_compact_len(buf: &mut BytesMut, len: usize) {
    // Every string and array written here came in one request frame, far below 4 GiB.
    let len = u32::try_from(len + 1).expect("compact length fits a u32");
    put_unsigned_varint(buf, len);
}

/// An array's count: an i32 or (`flexible`) a compact length.
pub fn put_array_len(buf: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_compact_len(buf, len);
    } else {
        // Arrays written here hold what one request carried, far fewer than 2^31.
        buf.put_i32(i32::try_from(len).expect("array length fits an i32"));
    }
}

/// A non-nullable STRING. Callers bound every string (ids by the request frame and Kafka's
/// limits, topic names at 249 bytes); a longer one is cut at `i16::MAX` bytes in release
/// builds rather than panicking a shard.
pub fn put_string(buf: &mut BytesMut, s: &str) {
    debug_assert!(s.len() <= i16::MAX as usize, "string of {} bytes", s.len());
    let len = s.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(&s.as_bytes()[..len]);
}

/// A nullable STRING (-1 for null).
pub fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

/// A non-nullable BYTES (an i32 length).
pub fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    // Subscriptions and assignments came in one request frame, far below 2 GiB.
    let len = i32::try_from(b.len()).expect("bytes field fits an i32 length");
    buf.put_i32(len);
    buf.put_slice(b);
}

pub fn put_compact_string(buf: &mut BytesMut, s: &str) {
    put_compact_len(buf, s.len());
    buf.put_slice(s.as_bytes());
}

pub fn put_compact_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_compact_string(buf, s),
        None => put_unsigned_varint(buf, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writer_reads_back() {
        let mut b = BytesMut::new();
        put_unsigned_varint(&mut b, 300);
        put_varlong(&mut b, -12345);
        put_string(&mut b, "group");
        put_nullable_string(&mut b, None);
        put_bytes(&mut b, b"\x01\x02");
        put_compact_string(&mut b, "topic");
        put_compact_nullable_string(&mut b, None);
        put_array_len(&mut b, 3, false);
        put_array_len(&mut b, 2, true);
        b.put_u8(NO_TAGGED_FIELDS);
        let mut r = Reader::new(&b);
        assert_eq!(r.unsigned_varint(), Some(300));
        assert_eq!(r.varlong(), Some(-12345));
        assert_eq!(r.string().as_deref(), Some("group"));
        assert_eq!(r.nullable_string(), Some(None));
        assert_eq!(r.bytes_field(), Some(&b"\x01\x02"[..]));
        assert_eq!(r.compact_string().as_deref(), Some("topic"));
        assert_eq!(r.compact_nullable_string(), Some(None));
        assert_eq!(r.nullable_array_len(false, 0), Some(Some(3)));
        assert_eq!(r.compact_array_len(0), Some(2));
        assert_eq!(r.skip_tagged_fields(), Some(()));
        assert_eq!(r.position(), b.len());
        assert_eq!(r.finish(), Some(()));
    }

    #[test]
    fn hostile_bytes_are_none_not_a_panic() {
        // A varint longer than 32 bits, a string longer than what is left, an array count
        // whose elements cannot fit, a tagged field running past the end.
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x1f]).unsigned_varint(),
            None
        );
        assert_eq!(Reader::new(&[0xff; 11]).varlong(), None);
        assert_eq!(Reader::new(&[0x00, 0x05, b'a']).string(), None);
        assert_eq!(
            Reader::new(&[0x7f, 0xff, 0xff, 0xff]).nullable_array_len(false, 1),
            None
        );
        assert_eq!(
            Reader::new(&[0x01, 0x00, 0x09, 0x00]).skip_tagged_fields(),
            None
        );
        assert_eq!(Reader::new(&[0x00, 0x01, 0xff]).string(), None, "not UTF-8");
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.take(usize::MAX), None);
        assert_eq!(r.i16(), Some(0x0102));
        assert_eq!(r.finish(), None);
    }
}
