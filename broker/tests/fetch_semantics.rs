//! Fetch semantics through the wire protocol: long poll wakes on new data, per-partition and
//! response byte limits (at least one batch), many partitions per request, fetch sessions.

mod common;

use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::{ApiKey, FetchResponse};

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
