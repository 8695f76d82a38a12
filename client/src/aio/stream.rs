//! A connection's byte stream on glommio: the TCP socket, or TLS over it (futures-rustls), and
//! what makes a connected socket ready for requests as its [`Security`] says: the TLS
//! handshake, then the SASL login ([`crate::core::sasl`]'s steps, one request at a time).
//! Both [`super::pipelined`] and [`super::pool`] open their connections with [`secure`].
//!
//! Under TLS, rustls reads at most 4 KiB of records per call; the socket is read through a
//! [`TLS_READ_BUFFER`]-byte buffer so one `recv` serves many of them. Writes are buffered by
//! rustls (at most [`TLS_WRITE_BUFFER`] bytes): a writer must flush after its last frame, or
//! records may wait in rustls for the next write. If a future here is dropped midway the stream is in an unknown state: drop it.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_lite::io::BufReader;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::client::TlsStream;
use futures_rustls::TlsConnector;
use glommio::net::TcpStream;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::core::{
    decode_response, encode_request, frame_size, SaslExchange, SaslStep, SASL_AUTHENTICATE_VERSION,
    SASL_HANDSHAKE_VERSION,
};
use crate::error::ClientError;
use crate::security::{server_name, SaslLogin, Security};

/// PBKDF2 iterations between two chances to yield: a few hundred microseconds of CPU.
const PBKDF2_SLICE: u32 = 256;

thread_local! {
    /// Where this thread's SCRAM logins run PBKDF2 ([`set_login_queue`]).
    static LOGIN_QUEUE: std::cell::Cell<Option<glommio::TaskQueueHandle>> =
        const { std::cell::Cell::new(None) };
}

/// Makes this thread's connections run SCRAM's PBKDF2 (milliseconds of CPU per login) on
/// `queue`, a glommio task queue of the caller's (the broker's shard gives its `auth` queue,
/// so that a replica fetcher's login does not hold the queue its produce and fetch run on).
/// Without it, the job runs on the connecting task's queue. Either way it runs in slices, and
/// its queue yields after each one, so the executor's other queues get their turn between
/// them (glommio otherwise switches queues only when its preempt timer fires).
pub fn set_login_queue(queue: Option<glommio::TaskQueueHandle>) {
    LOGIN_QUEUE.with(|q| q.set(queue));
}

/// Runs a PBKDF2 job to its end in slices, on the login queue when one is set.
async fn derive(mut job: keel_auth::scram::SaltedPasswordJob) -> Option<Vec<u8>> {
    let work = async move {
        while !job.step(PBKDF2_SLICE) {
            glommio::executor().yield_task_queue_now().await;
        }
        job.finish()
    };
    match LOGIN_QUEUE.with(|q| q.get()) {
        Some(queue) => match glommio::spawn_local_into(work, queue) {
            Ok(task) => task.await,
            // The queue is gone (its executor removed it): the login fails.
            Err(_) => None,
        },
        None => work.await,
    }
}

/// The socket's read buffer under TLS.
pub const TLS_READ_BUFFER: usize = 64 * 1024;
/// How much TLS data rustls may hold unsent (its default is 64 KiB): 64 full records, what
/// one vectored write of rustls takes, so a 128 KiB Produce goes out in one `sendmsg`, not
/// three.
pub const TLS_WRITE_BUFFER: usize = 64 * 16 * 1024;

/// The largest answer read during the login (SaslHandshake lists mechanisms, SaslAuthenticate
/// carries a SCRAM message or an error text: a few hundred bytes).
const LOGIN_RESPONSE_BYTES_MAX: usize = 64 * 1024;

/// A connection's byte stream: the TCP socket, or TLS (`T`, a futures-rustls client or server
/// stream) over it. The broker's connections take the same type with the server side.
pub enum MaybeTls<T> {
    Plain(TcpStream),
    Tls(Box<T>),
}

/// A client connection's byte stream.
pub type Stream = MaybeTls<TlsStream<BufReader<TcpStream>>>;

impl<T: AsyncRead + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_close(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_close(cx),
        }
    }
}

/// Makes `tcp`, connected to `addr`, ready for requests: TLS if `security` has it (the
/// broker's certificate must name `addr`'s host), then the SASL login if it has one (its
/// requests carry `client_id`). An unbounded wait if the broker stops answering: callers
/// that need a bound race it against a timer.
pub async fn secure(
    tcp: TcpStream,
    addr: &str,
    security: &Security,
    client_id: &str,
) -> Result<Stream, ClientError> {
    tcp.set_nodelay(true).map_err(|e| ClientError::Io {
        addr: addr.to_string(),
        source: e.into(),
    })?;
    let mut stream = match &security.tls {
        None => Stream::Plain(tcp),
        Some(config) => {
            let name = server_name(addr)?;
            let io = BufReader::with_capacity(TLS_READ_BUFFER, tcp);
            let mut tls = TlsConnector::from(config.clone())
                .connect(name, io)
                .await
                .map_err(|e| ClientError::Tls {
                    addr: addr.to_string(),
                    reason: e.to_string(),
                })?;
            tls.get_mut().1.set_buffer_limit(Some(TLS_WRITE_BUFFER));
            Stream::Tls(Box::new(tls))
        }
    };
    if let Some(login) = &security.sasl {
        log_in(&mut stream, addr, login, client_id).await?;
    }
    Ok(stream)
}

/// Runs [`SaslExchange`]'s steps, one request and its answer at a time.
async fn log_in(
    stream: &mut Stream,
    addr: &str,
    login: &SaslLogin,
    client_id: &str,
) -> Result<(), ClientError> {
    let (mut exchange, mut step) = SaslExchange::start(addr, login)?;
    let mut correlation_id = 0;
    loop {
        correlation_id += 1;
        step = match step {
            SaslStep::Handshake(req) => {
                let call = (
                    ApiKey::SaslHandshake,
                    SASL_HANDSHAKE_VERSION,
                    correlation_id,
                );
                let answer = round_trip(stream, addr, client_id, call, &req).await?;
                exchange.on_handshake(&answer)?
            }
            SaslStep::Authenticate(req) => {
                let call = (
                    ApiKey::SaslAuthenticate,
                    SASL_AUTHENTICATE_VERSION,
                    correlation_id,
                );
                let answer = round_trip(stream, addr, client_id, call, &req).await?;
                exchange.on_authenticate(&answer)?
            }
            SaslStep::Derive(job) => exchange.on_derived(derive(job).await)?,
            SaslStep::Done => return Ok(()),
        };
    }
}

/// One request (API, version, correlation id) and its decoded answer.
async fn round_trip<Req, Resp>(
    stream: &mut Stream,
    addr: &str,
    client_id: &str,
    (api, version, correlation_id): (ApiKey, i16, i32),
    req: &Req,
) -> Result<Resp, ClientError>
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable,
{
    let frame = encode_request(api, version, correlation_id, client_id, req)?;
    let body = exchange(stream, addr, &frame, LOGIN_RESPONSE_BYTES_MAX).await?;
    decode_response(api, version, correlation_id, body)
}

/// Writes `frame`, flushes, and reads one answer frame of at most `response_bytes_max` bytes
/// (after its size prefix).
pub async fn exchange(
    stream: &mut Stream,
    addr: &str,
    frame: &[u8],
    response_bytes_max: usize,
) -> Result<Bytes, ClientError> {
    let io = |source: io::Error| ClientError::Io {
        addr: addr.to_string(),
        source,
    };
    stream.write_all(frame).await.map_err(io)?;
    stream.flush().await.map_err(io)?;
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.map_err(io)?;
    let size = frame_size(prefix, response_bytes_max)?;
    let mut body = BytesMut::zeroed(size);
    stream.read_exact(&mut body).await.map_err(io)?;
    Ok(body.freeze())
}
