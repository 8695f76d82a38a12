//! For tests of code that talks to a broker (here and in the broker's inter-broker clients):
//! a real TCP peer on 127.0.0.1 that reads one request frame and writes whatever answer the
//! test gives it, well-formed or hostile.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;
use std::time::Duration;

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
