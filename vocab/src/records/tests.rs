//! The codec's round trips and its refusals of hostile bytes.

use super::*;

#[test]
fn every_codec_round_trips() {
    for codec in Codec::ALL {
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
    assert_eq!(attributes, Codec::Lz4 as i16 | TRANSACTIONAL_BIT);
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
    let mut m = end_txn_marker_batch(producer_id, 0, false, 0, 1, -1).to_vec();
    m[0..8].copy_from_slice(&offset.to_be_bytes());
    assert_eq!(
        i16::from_be_bytes(m[21..23].try_into().unwrap()),
        TRANSACTIONAL_BIT | CONTROL_BIT
    );
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

/// A record with headers and a null value, and the batch header's plain-producer fields, as
/// kafka-protocol's decoder (Kafka's layout, independently written) reads them.
#[test]
fn headers_and_null_values_read_back_as_kafka_protocol_reads_them() {
    let mut b = BatchBuilder::new();
    b.push_record(
        5,
        Some(b"k0"),
        Some(b"v0"),
        &[(b"h", Some(b"0")), (b"n", None)],
    );
    b.push_record(7, None, None, &[]);
    let batch = b.finish(Codec::None).unwrap();
    let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut batch.clone()).unwrap();
    assert_eq!(set.records.len(), 2);
    let r = &set.records[0];
    assert_eq!((r.offset, r.timestamp, r.sequence), (0, 5, -1));
    assert_eq!(r.headers.len(), 2);
    assert_eq!(set.records[1].value, None);
    assert_eq!(set.records[1].timestamp, 7);

    let mut seen = Vec::new();
    for_each_record(&batch, |r| seen.push(owned(&r))).unwrap();
    assert_eq!(
        seen,
        vec![
            (
                0,
                (
                    5,
                    Some(b"k0".to_vec()),
                    Some(b"v0".to_vec()),
                    vec![(b"h".to_vec(), Some(b"0".to_vec())), (b"n".to_vec(), None)]
                )
            ),
            (1, (7, None, None, vec![])),
        ]
    );
}

#[test]
fn hostile_batches_are_errors_not_panics() {
    let mut b = BatchBuilder::new();
    b.push(1, None, b"v");
    let good = b.finish(Codec::None).unwrap().to_vec();
    let walk = |bytes: &[u8]| for_each_record(bytes, |_| {});
    // Negative length, a length shorter than a header, a CRC that does not match, magic 1.
    let mut neg = good.clone();
    neg[8..12].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(walk(&neg).is_err());
    let mut short = vec![0u8; 12];
    short[8..12].copy_from_slice(&10i32.to_be_bytes());
    short.extend_from_slice(&[0u8; 10]);
    assert!(walk(&short).is_err());
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    assert!(walk(&flipped).is_err());
    let mut magic = good.clone();
    magic[MAGIC_AT] = 1;
    assert!(walk(&magic).is_err());
    // Every cut is a partial tail (no records) or an error, never a panic; garbage too.
    for cut in 0..good.len() {
        let _ = walk(&good[..cut]);
    }
    for fill in [0x00u8, 0x7f, 0x80, 0xff] {
        for len in 0..128 {
            let _ = walk(&vec![fill; len]);
        }
    }
    // A record whose declared length runs past its section, with a recomputed CRC.
    let mut overrun = good.clone();
    overrun[HEADER_BYTES] = 0x7e; // length varint 63
    let crc = compute_crc(&overrun);
    overrun[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    assert!(walk(&overrun).is_err());
}

#[test]
fn the_header_reads_what_the_builder_wrote() {
    let mut b = BatchBuilder::new().with_leader_epoch(3);
    for i in 0..4 {
        b.push(100 + i, None, b"x");
    }
    let stamp = ProducerStamp {
        producer_id: 9,
        epoch: 2,
        base_sequence: i32::MAX - 1,
        transactional: false,
    };
    let batch = b.finish_stamped(Codec::Gzip, Some(stamp)).unwrap();
    let h = BatchHeader::parse(&batch).unwrap();
    assert_eq!(h.size, batch.len());
    assert_eq!(
        (h.leader_epoch, h.magic, h.compression()),
        (3, 2, CODEC_GZIP)
    );
    assert_eq!(
        (h.base_timestamp, h.max_timestamp, h.records_count),
        (100, 103, 4)
    );
    assert!(h.has_producer_id() && !h.is_transactional() && !h.is_control());
    assert_eq!(h.last_sequence(), 1, "wraps past i32::MAX to 0");
    assert_eq!(h.crc, compute_crc(&batch));
    assert_eq!(BatchHeader::parse(&batch[..HEADER_BYTES - 1]), None);
}

/// A record as built: timestamp, key, value, headers.
type Rec = (
    i64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(Vec<u8>, Option<Vec<u8>>)>,
);

/// A fetched record's offset, and the record as it was built.
fn owned(r: &FetchedRecord<'_>) -> (i64, Rec) {
    let headers = r
        .headers()
        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
        .collect();
    (
        r.offset,
        (
            r.timestamp_ms,
            r.key.map(<[u8]>::to_vec),
            r.value.map(<[u8]>::to_vec),
            headers,
        ),
    )
}

fn arb_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    proptest::collection::vec(proptest::num::u8::ANY, 0..40)
}

proptest::proptest! {
    /// What the builder writes, with any codec, the consumer's walk reads back as written.
    #[test]
    fn built_batches_read_back(
        records in proptest::collection::vec(
            (
                0i64..1_000_000,
                proptest::option::of(arb_bytes()),
                proptest::option::of(arb_bytes()),
                proptest::collection::vec((arb_bytes(), proptest::option::of(arb_bytes())), 0..3),
            ),
            1..20,
        ),
        codec in proptest::sample::select(Codec::ALL.to_vec()),
        base_offset in 0i64..1 << 40,
    ) {
        let mut b = BatchBuilder::new();
        for (ts, key, value, headers) in &records {
            let headers: Vec<(&[u8], Option<&[u8]>)> =
                headers.iter().map(|(k, v)| (k.as_slice(), v.as_deref())).collect();
            b.push_record(*ts, key.as_deref(), value.as_deref(), &headers);
        }
        let mut batch = b.finish(codec).unwrap().to_vec();
        batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
        let mut seen: Vec<(i64, Rec)> = Vec::new();
        let next = for_each_record(&batch, |r| seen.push(owned(&r)))
        .unwrap();
        proptest::prop_assert_eq!(next, Some(base_offset + records.len() as i64));
        let want: Vec<(i64, Rec)> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| (base_offset + i as i64, r))
            .collect();
        proptest::prop_assert_eq!(seen, want);
    }

    /// Any bytes are records, a partial tail or an error; never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
        let _ = for_each_record(&bytes, |_| {});
        let mut pos = 0;
        if let Some(header) = BatchHeader::parse(&bytes) {
            let _ = parse_record(&bytes[HEADER_BYTES..], &mut pos, header.base_offset);
        }
    }
}
