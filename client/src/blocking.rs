//! The blocking transport: one connection over `std::net`, one request at a time (no
//! pipelining), for the `keel` CLI and the broker's integration tests. Every read and write
//! has the request timeout, so a silent broker becomes an error, never a hang. Framing and
//! the checks on answers are [`crate::core`]'s. A connection may run TLS (rustls) and log in
//! with SASL (PLAIN, SCRAM-SHA-256/512: [`crate::core::sasl`]'s exchange) before its first
//! request, as [`Security`] says.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::core::{
    decode_response, encode_request, frame_size, SaslExchange, SaslStep, SASL_AUTHENTICATE_VERSION,
    SASL_HANDSHAKE_VERSION,
};
use crate::error::ClientError;
pub use crate::security::{SaslLogin, Security};

/// How a [`Conn`] connects and what it accepts.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The request header's client id.
    pub client_id: String,
    /// Per address tried.
    pub connect_timeout: Duration,
    /// Per read and per write.
    pub request_timeout: Duration,
    /// The largest response frame read.
    pub response_bytes_max: usize,
    /// TLS and SASL (Kafka's `security.protocol`); default: plaintext, no login.
    pub security: Security,
}

/// The connection's byte stream.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One broker connection.
pub struct Conn {
    addr: String,
    stream: Stream,
    correlation_id: i32,
    options: ConnectOptions,
}

impl Conn {
    /// Connects to the first address `addr` resolves to that answers.
    pub fn connect(addr: &str, options: ConnectOptions) -> Result<Conn, ClientError> {
        let connect_err = |source| ClientError::Connect {
            addr: addr.to_string(),
            source,
        };
        let addrs: Vec<_> = addr.to_socket_addrs().map_err(connect_err)?.collect();
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address resolved");
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, options.connect_timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let stream = stream.ok_or_else(|| connect_err(last))?;
        let io = |source| ClientError::Io {
            addr: addr.to_string(),
            source,
        };
        stream
            .set_read_timeout(Some(options.request_timeout))
            .map_err(io)?;
        stream
            .set_write_timeout(Some(options.request_timeout))
            .map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        let stream = match &options.security.tls {
            None => Stream::Plain(stream),
            Some(config) => {
                let name = crate::security::server_name(addr)?;
                let tls_error = |reason: String| ClientError::Tls {
                    addr: addr.to_string(),
                    reason,
                };
                let mut tls = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(|e| tls_error(e.to_string()))?;
                // The handshake now, so that a refused certificate is a TLS error, not an
                // I/O error of the first request.
                let mut stream = stream;
                while tls.is_handshaking() {
                    tls.complete_io(&mut stream)
                        .map_err(|e| tls_error(e.to_string()))?;
                }
                Stream::Tls(Box::new(rustls::StreamOwned::new(tls, stream)))
            }
        };
        let mut conn = Conn {
            addr: addr.to_string(),
            stream,
            correlation_id: 0,
            options,
        };
        if let Some(login) = conn.options.security.sasl.clone() {
            conn.login(&login)?;
        }
        Ok(conn)
    }

    /// Logs in: [`SaslExchange`]'s steps, one request each.
    fn login(&mut self, login: &SaslLogin) -> Result<(), ClientError> {
        let (mut exchange, mut step) = SaslExchange::start(&self.addr, login)?;
        loop {
            step = match step {
                SaslStep::Handshake(req) => {
                    let answer =
                        self.request(ApiKey::SaslHandshake, SASL_HANDSHAKE_VERSION, &req)?;
                    exchange.on_handshake(&answer)?
                }
                SaslStep::Authenticate(req) => {
                    let answer =
                        self.request(ApiKey::SaslAuthenticate, SASL_AUTHENTICATE_VERSION, &req)?;
                    exchange.on_authenticate(&answer)?
                }
                // A blocking caller owns its thread: PBKDF2 runs at once.
                SaslStep::Derive(mut job) => {
                    job.step(u32::MAX);
                    exchange.on_derived(job.finish())?
                }
                SaslStep::Done => return Ok(()),
            };
        }
    }

    /// The address as given to [`Conn::connect`].
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    fn write_request<Req: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<(), ClientError> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let frame = encode_request(
            api,
            version,
            self.correlation_id,
            &self.options.client_id,
            req,
        )?;
        self.stream.write_all(&frame).map_err(|e| self.io(e))
    }

    /// Sends a request that the broker does not answer (Produce with acks=0).
    pub fn send_oneway<Req: Encodable + HeaderVersion>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<(), ClientError> {
        self.write_request(api, version, req)
    }

    /// Sends a request at `version` and reads its answer. After an error other than
    /// [`ClientError::Decode`] the connection may be out of step: drop it.
    pub fn request<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ClientError> {
        self.write_request(api, version, req)?;
        let mut prefix = [0u8; 4];
        self.stream
            .read_exact(&mut prefix)
            .map_err(|e| self.io(e))?;
        let size = frame_size(prefix, self.options.response_bytes_max)?;
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).map_err(|e| self.io(e))?;
        decode_response(api, version, self.correlation_id, Bytes::from(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    use std::net::TcpListener;

    fn options() -> ConnectOptions {
        ConnectOptions {
            client_id: "keel-test".to_string(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_millis(500),
            response_bytes_max: 1 << 20,
            security: Security::default(),
        }
    }

    /// A peer that reads one request and answers `reply(correlation_id)`.
    fn peer(reply: impl FnOnce(i32) -> Vec<u8> + Send + 'static) -> String {
        crate::testing::one_shot_peer(reply, Duration::from_millis(800))
            .0
            .to_string()
    }

    fn api_versions_answer(correlation_id: i32) -> Vec<u8> {
        let r = ApiVersionsResponse::default().with_error_code(35);
        crate::testing::response_frame(ApiKey::ApiVersions, 0, correlation_id, &r)
    }

    fn ask(addr: &str) -> Result<ApiVersionsResponse, ClientError> {
        Conn::connect(addr, options())?.request(
            ApiKey::ApiVersions,
            0,
            &ApiVersionsRequest::default(),
        )
    }

    #[test]
    fn an_answer_over_tcp_and_hostile_ones() {
        assert_eq!(ask(&peer(api_versions_answer)).unwrap().error_code, 35);
        let r = ask(&peer(|c| api_versions_answer(c + 1)));
        assert!(matches!(r, Err(ClientError::CorrelationId { .. })), "{r:?}");
        let r = ask(&peer(|_| i32::MAX.to_be_bytes().to_vec()));
        assert!(matches!(r, Err(ClientError::FrameSize { .. })), "{r:?}");
        // The peer stops mid-frame and says nothing more: the read times out.
        let r = ask(&peer(|_| 100i32.to_be_bytes().to_vec()));
        assert!(matches!(r, Err(ClientError::Io { .. })), "{r:?}");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = ask(&format!("127.0.0.1:{port}"));
        assert!(matches!(r, Err(ClientError::Connect { .. })), "{r:?}");
    }
}
