//! For tests of code that talks to a broker (here and in the broker's inter-broker clients):
//! a real TCP peer on 127.0.0.1 that reads one request frame and writes whatever answer the
//! test gives it, well-formed or hostile.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;

/// Accepts one connection, reads one request frame, writes `reply(correlation_id)` and holds
/// the connection open for `hold` (so the client reads what it was sent, or times out on
/// what it was not). Join the handle to see the peer's own failures.
pub fn one_shot_peer(
    reply: impl FnOnce(i32) -> Vec<u8> + Send + 'static,
    hold: Duration,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("local address");
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut size = [0u8; 4];
        s.read_exact(&mut size).expect("request size");
        let mut req = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut req).expect("request");
        let correlation_id = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
        let _ = s.write_all(&reply(correlation_id));
        std::thread::sleep(hold);
    });
    (addr, peer)
}

/// A whole response frame (size, header, body) as a broker writes it: `resp` answering request
/// `correlation_id` of `api` at `version`.
pub fn response_frame<R: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    resp: &R,
) -> Vec<u8> {
    let mut b = BytesMut::new();
    b.put_i32(0);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut b, api.response_header_version(version))
        .expect("response header encodes");
    resp.encode(&mut b, version).expect("response encodes");
    let size = (b.len() - 4) as i32;
    b[0..4].copy_from_slice(&size.to_be_bytes());
    b.to_vec()
}
