//! A connection's socket, shared by its reader and writer halves, and the two I/O steps both
//! the connection loop ([`super::conn`]) and SASL authentication ([`super::sasl`]) use:
//! reading one frame, writing answers with as few `sendmsg` calls as the socket allows.

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::TcpStream;

use crate::frontend::framing::Frame;

/// The connection's read buffer: one `recv` takes up to this much, so that pipelined small
/// requests (and a frame's size prefix with its start) cost one system call, not two each.
/// Reads at least this long go straight into the frame.
pub const READ_BUFFER: usize = 32 * 1024;

pub use keel_client::aio::stream::{TLS_READ_BUFFER, TLS_WRITE_BUFFER};

/// A TLS connection's stream: rustls over the socket read through a [`TLS_READ_BUFFER`]
/// buffer (rustls reads at most 4 KiB of records per call), with [`TLS_WRITE_BUFFER`] of
/// records held unsent at most, so a 1 MiB Fetch answer goes out in one `sendmsg` where the
/// socket takes it.
pub type TlsStream = futures_rustls::server::TlsStream<BufReader<TcpStream>>;

/// A connection's byte stream: the TCP socket, or TLS over it (SSL and SASL_SSL listeners);
/// keel-client's type, with the server side of TLS.
pub type Stream = keel_client::aio::stream::MaybeTls<TlsStream>;

/// The socket, shared by the connection's reader and writer tasks. Both run on this shard's
/// thread and hold the borrow only inside one poll, never across an await.
pub(crate) type Socket = Rc<RefCell<Stream>>;

pub(crate) struct ReadSide(pub(crate) Socket);

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_read(cx, buf)
    }
}

pub(crate) struct WriteSide(pub(crate) Socket);

impl AsyncWrite for WriteSide {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_write_vectored(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0.borrow_mut()).poll_close(cx)
    }
}

/// Reads a frame of `size` bytes (the size prefix already taken) into a buffer of its own,
/// which a Produce hands to storage as it is. What the read buffer holds is copied out of it;
/// the rest of a long frame is read straight into the frame.
pub(crate) async fn read_frame(reader: &mut BufReader<ReadSide>, size: usize) -> io::Result<Bytes> {
    let mut frame = BytesMut::with_capacity(size);
    while frame.len() < size {
        let need = size - frame.len();
        if reader.buffer().is_empty() && need >= READ_BUFFER {
            let at = frame.len();
            frame.resize(size, 0);
            reader.read_exact(&mut frame[at..]).await?;
            break;
        }
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let take = available.len().min(need);
        frame.extend_from_slice(&available[..take]);
        reader.consume(take);
    }
    Ok(frame.freeze())
}

/// Writes every part of `frames`, in order, with as few `sendmsg` calls as the socket allows,
/// and flushes: when it returns, every byte has reached the socket.
pub(crate) async fn send_frames<'a>(
    out: &mut WriteSide,
    frames: impl Iterator<Item = &'a Frame>,
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = frames
        .flat_map(Frame::parts)
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let written = out
            .write_vectored(&rest[..rest.len().min(MAX_IOVECS)])
            .await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut rest, written);
    }
    // Under TLS a write counts what rustls took, and the records the socket did not take yet
    // stay in rustls: without a flush they would wait for the connection's next answer (a
    // consumer waiting for the rest of its Fetch answer would wait for ever). A no-op in plain.
    out.flush().await
}

/// Buffers handed to one `sendmsg` (Linux's UIO_MAXIOV is 1024).
const MAX_IOVECS: usize = 512;
