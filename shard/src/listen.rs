//! The per-shard listening socket.
//!
//! Every shard binds the same address with SO_REUSEPORT, so the kernel spreads connections
//! over the shards. glommio's own `TcpListener::bind` sets only SO_REUSEPORT; the sockets it
//! accepts then leave TIME_WAIT entries without SO_REUSEADDR, which block any restart on the
//! same port for a minute. So Keel creates the socket itself with both options.

use std::net::SocketAddr;
use std::os::unix::io::{FromRawFd, IntoRawFd};

use socket2::{Domain, Protocol, Socket, Type};

/// Binds `addr` with SO_REUSEADDR and SO_REUSEPORT and listens on it, for the calling
/// shard's executor.
pub fn listen_reuseport(
    addr: SocketAddr,
    backlog: i32,
) -> std::io::Result<glommio::net::TcpListener> {
    let domain = if addr.is_ipv6() {
        Domain::IPV6
    } else {
        Domain::IPV4
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    // SAFETY: the fd is a bound, listening TCP socket we own; ownership moves to glommio.
    Ok(unsafe { glommio::net::TcpListener::from_raw_fd(socket.into_raw_fd()) })
}
