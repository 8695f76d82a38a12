//! Fetch semantics through the wire protocol: long poll wakes on new data, per-partition and
//! response byte limits (at least one batch), many partitions per request, fetch sessions.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::client::*;
use common::Broker;
use kafka_protocol::messages::{ApiKey, FetchResponse, ProduceResponse};

#[test]
fn long_poll_returns_when_data_arrives() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "lp", 4);
    let addr = b.bootstrap();
    // A fetch that would wait 20 s for one byte on partition 3 (and 2, also empty).
    let waiter = std::thread::spawn(move || {
        let mut c = Client::connect(&addr);
        let started = Instant::now();
        let resp: FetchResponse = c.send(
            ApiKey::Fetch,
            12,
            &fetch_request(
                "lp",
                &[(2, 0, 1 << 20), (3, 0, 1 << 20)],
                20_000,
                1,
                1 << 20,
            ),
        );
        (resp, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let offset = produce(&mut c, "lp", 3, batch(&[b"wake", b"up"]));
    assert_eq!(offset, 0);
    let (resp, waited) = waiter.join().unwrap();
    assert_eq!(resp.error_code, 0);
    let parts = &resp.responses[0].partitions;
    assert_eq!(parts[0].partition_index, 2);
    assert!(values(&parts[0].records).is_empty());
    assert_eq!(parts[1].partition_index, 3);
    assert_eq!(parts[1].high_watermark, 2);
    assert_eq!(
        values(&parts[1].records),
        vec![(0, b"wake".to_vec()), (1, b"up".to_vec())]
    );
    assert!(
        waited < Duration::from_secs(15),
        "the fetch was not woken by the produce ({waited:?})"
    );

    // With nothing new, the long poll ends at max_wait_ms with no records.
    let started = Instant::now();
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("lp", &[(3, 2, 1 << 20)], 300, 1, 1 << 20),
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "returned before max_wait_ms"
    );
    assert!(values(&resp.responses[0].partitions[0].records).is_empty());
    assert_eq!(resp.responses[0].partitions[0].high_watermark, 2);
}

#[test]
fn byte_limits_keep_whole_batches_and_at_least_one() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "bytes", 3);
    let big = vec![b'x'; 3000];
    for p in 0..3 {
        for _ in 0..4 {
            produce(&mut c, "bytes", p, batch(&[&big]));
        }
    }
    // Per-partition max smaller than one batch: still exactly one whole batch each.
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request(
            "bytes",
            &[(0, 0, 100), (1, 1, 100), (2, 3, 100)],
            0,
            0,
            1 << 20,
        ),
    );
    let got: Vec<Vec<i64>> = resp.responses[0]
        .partitions
        .iter()
        .map(|p| values(&p.records).iter().map(|r| r.0).collect())
        .collect();
    assert_eq!(got, vec![vec![0], vec![1], vec![3]]);
    // Per-partition max of two batches' worth.
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("bytes", &[(0, 0, 6300)], 0, 0, 1 << 20),
    );
    assert_eq!(values(&resp.responses[0].partitions[0].records).len(), 2);
    // Response max_bytes below one batch: the first partition with data gets one batch, the rest none.
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request(
            "bytes",
            &[(0, 4, 1 << 20), (1, 0, 1 << 20), (2, 0, 1 << 20)],
            0,
            0,
            10,
        ),
    );
    let counts: Vec<usize> = resp.responses[0]
        .partitions
        .iter()
        .map(|p| values(&p.records).len())
        .collect();
    assert_eq!(
        counts,
        vec![0, 1, 0],
        "partition 0 is at its end; partition 1 is first with data: one batch"
    );
    // Out of range offsets get OFFSET_OUT_OF_RANGE with the log's bounds.
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("bytes", &[(2, 99, 1 << 20)], 0, 0, 1 << 20),
    );
    let p = &resp.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark, p.log_start_offset),
        (1, 4, 0)
    );
}

#[test]
fn fetch_sessions_are_declined_correctly() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "sess", 1);
    produce(&mut c, "sess", 0, batch(&[b"a"]));
    // A new-session request (epoch 0) is served in full, with session id 0 = "no session".
    let req = fetch_request("sess", &[(0, 0, 1 << 20)], 0, 0, 1 << 20).with_session_epoch(0);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    assert_eq!((resp.error_code, resp.session_id), (0, 0));
    assert_eq!(
        values(&resp.responses[0].partitions[0].records),
        vec![(0, b"a".to_vec())]
    );
    // A session id the broker never gave: FETCH_SESSION_ID_NOT_FOUND (70).
    let req = fetch_request("sess", &[(0, 0, 1 << 20)], 0, 0, 1 << 20)
        .with_session_id(1234)
        .with_session_epoch(1);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    assert_eq!(resp.error_code, 70);
    // An incremental epoch without a session: INVALID_FETCH_SESSION_EPOCH (71).
    let req = fetch_request("sess", &[(0, 0, 1 << 20)], 0, 0, 1 << 20).with_session_epoch(3);
    let resp: FetchResponse = c.send(ApiKey::Fetch, 12, &req);
    assert_eq!(resp.error_code, 71);
}

/// The value of record `i` of the pipelining test: every third one long enough that a Fetch
/// answer sends its batch from where it is stored (a part of its own), the others copied.
fn pipelined_value(i: i32) -> Vec<u8> {
    let fill = if i % 3 == 0 { 5000 } else { 40 };
    let mut v = format!("v{i}-").into_bytes();
    v.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, fill));
    v
}

fn produce_frame(i: i32, partitions: i32) -> Vec<u8> {
    let req = produce_request(
        "pipe",
        vec![(i % partitions, batch(&[&pipelined_value(i)]))],
    );
    keel_client::core::encode_request(ApiKey::Produce, 9, i, "pipe-test", &req)
        .unwrap()
        .to_vec()
}

/// Reads one response frame and decodes it as the answer to `correlation_id`.
fn read_answer<R: kafka_protocol::protocol::Decodable>(
    s: &mut TcpStream,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
) -> R {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).unwrap();
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut frame).unwrap();
    keel_client::core::decode_response(api, version, correlation_id, Bytes::from(frame)).unwrap()
}

/// Requests written back to back in one send, and requests split into 7-byte pieces (size
/// prefixes cut in two), are each read and answered once, in order, on one connection; Fetch
/// answers mixing records sent from storage and copied records carry every record.
#[test]
fn pipelined_and_split_requests_are_answered_in_order() {
    const PARTITIONS: i32 = 4;
    const EACH: i32 = 24;
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "pipe", PARTITIONS);
    let mut s = TcpStream::connect(b.bootstrap()).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();

    // Requests 0..EACH in one write.
    let wire: Vec<u8> = (0..EACH)
        .flat_map(|i| produce_frame(i, PARTITIONS))
        .collect();
    s.write_all(&wire).unwrap();
    // Requests EACH..2*EACH in 7-byte pieces.
    let wire: Vec<u8> = (EACH..2 * EACH)
        .flat_map(|i| produce_frame(i, PARTITIONS))
        .collect();
    for piece in wire.chunks(7) {
        s.write_all(piece).unwrap();
    }
    let mut next_offset = [0i64; PARTITIONS as usize];
    for i in 0..2 * EACH {
        let resp: ProduceResponse = read_answer(&mut s, ApiKey::Produce, 9, i);
        let p = &resp.responses[0].partition_responses[0];
        assert_eq!((p.index, p.error_code), (i % PARTITIONS, 0), "request {i}");
        assert_eq!(
            p.base_offset,
            next_offset[(i % PARTITIONS) as usize],
            "request {i}"
        );
        next_offset[(i % PARTITIONS) as usize] += 1;
    }

    // Fetches of every partition, pipelined: each answer has every record, in order.
    let all: Vec<(i32, i64, i32)> = (0..PARTITIONS).map(|p| (p, 0, 1 << 20)).collect();
    let fetch = fetch_request("pipe", &all, 0, 0, 1 << 24);
    let wire: Vec<u8> = (100..104)
        .flat_map(|cid| {
            keel_client::core::encode_request(ApiKey::Fetch, 12, cid, "pipe-test", &fetch)
                .unwrap()
                .to_vec()
        })
        .collect();
    s.write_all(&wire).unwrap();
    for cid in 100..104 {
        let resp: FetchResponse = read_answer(&mut s, ApiKey::Fetch, 12, cid);
        for part in &resp.responses[0].partitions {
            let got = values(&part.records);
            let want: Vec<(i64, Vec<u8>)> = (0..2 * EACH)
                .filter(|i| i % PARTITIONS == part.partition_index)
                .enumerate()
                .map(|(offset, i)| (offset as i64, pipelined_value(i)))
                .collect();
            assert_eq!(got, want, "fetch {cid}, partition {}", part.partition_index);
        }
        assert_eq!(resp.responses[0].partitions.len(), PARTITIONS as usize);
    }
}
