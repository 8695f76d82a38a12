//! Hostile bytes against the real binary: each bad request closes its own connection (or
//! gets Kafka's error code) and the broker keeps serving everyone else with data intact.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;

fn connect(b: &Broker) -> TcpStream {
    let s = TcpStream::connect(b.bootstrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Request header v1 (non-flexible) or v2 (flexible: adds an empty tagged-field section).
fn header(api: i16, version: i16, correlation_id: i32, flexible: bool) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&api.to_be_bytes());
    h.extend_from_slice(&version.to_be_bytes());
    h.extend_from_slice(&correlation_id.to_be_bytes());
    h.extend_from_slice(&4i16.to_be_bytes());
    h.extend_from_slice(b"test");
    if flexible {
        h.push(0);
    }
    h
}

fn send(s: &mut TcpStream, body: &[u8]) {
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    s.write_all(&frame).unwrap();
}

/// Reads one response frame, or None if the broker closed the connection.
fn recv(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

/// Metadata v1 for all topics works: the broker is alive. Returns the response body.
fn metadata_ok(b: &Broker) -> Vec<u8> {
    let mut s = connect(b);
    let mut req = header(3, 1, 42, false);
    req.extend_from_slice(&(-1i32).to_be_bytes()); // all topics
    send(&mut s, &req);
    let resp = recv(&mut s).expect("metadata answer");
    assert_eq!(i32::from_be_bytes(resp[0..4].try_into().unwrap()), 42);
    resp
}

#[test]
fn hostile_requests_close_only_their_connection() {
    let b = Broker::start(&["--set", "socket.request.max.bytes=1048576"]);
    // Data that must stay intact: auto-create a topic through Metadata v4 and check it exists.
    let before = metadata_ok(&b);

    // 1. Frame sizes: negative, too small, over socket.request.max.bytes.
    for size in [-1i32, 0, 3, 2 * 1024 * 1024] {
        let mut s = connect(&b);
        s.write_all(&size.to_be_bytes()).unwrap();
        assert!(
            closed(&mut s),
            "frame size {size} must close the connection"
        );
    }

    // 2. Array counts that claim billions of elements (flexible and classic encodings).
    let mut s = connect(&b);
    let mut req = header(3, 12, 7, true);
    req.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // compact array length 2^32-1
    send(&mut s, &req);
    assert!(
        closed(&mut s),
        "huge compact array must close the connection"
    );
    let mut s = connect(&b);
    let mut req = header(0, 3, 8, false);
    req.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id null
    req.extend_from_slice(&1i16.to_be_bytes()); // acks
    req.extend_from_slice(&1000i32.to_be_bytes()); // timeout
    req.extend_from_slice(&i32::MAX.to_be_bytes()); // topics: 2^31-1
    send(&mut s, &req);
    assert!(closed(&mut s), "huge array must close the connection");

    // 3. Unknown API key: UNSUPPORTED_VERSION (35) with the correlation id, then close.
    let mut s = connect(&b);
    send(&mut s, &header(9999, 0, 99, false));
    let resp = recv(&mut s).expect("an error answer");
    assert_eq!(i32::from_be_bytes(resp[0..4].try_into().unwrap()), 99);
    assert_eq!(i16::from_be_bytes(resp[4..6].try_into().unwrap()), 35);
    assert!(closed(&mut s));

    // 4. ApiVersions at a version from the future: v0 answer, error 35, and the API list.
    let mut s = connect(&b);
    send(&mut s, &header(18, 99, 5, false));
    let resp = recv(&mut s).expect("ApiVersions answer");
    assert_eq!(i32::from_be_bytes(resp[0..4].try_into().unwrap()), 5);
    assert_eq!(i16::from_be_bytes(resp[4..6].try_into().unwrap()), 35);
    let n = i32::from_be_bytes(resp[6..10].try_into().unwrap());
    assert!(n >= 10, "api list has {n} entries");

    // 5. Truncated bodies of known APIs at every length.
    let mut good = header(1, 12, 11, true);
    good.extend_from_slice(&[0u8; 40]);
    for cut in 0..good.len() {
        let mut s = connect(&b);
        send(&mut s, &good[..cut]);
        let _ = recv(&mut s);
    }

    // Still serving, and the same answer as before.
    assert_eq!(metadata_ok(&b), before);
    assert!(!b.log_text().contains("panicked"), "{}", b.log_text());
}
