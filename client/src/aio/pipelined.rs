//! One connection to one broker, on the executor that opened it. Requests are pipelined: a
//! writer sends frames in order while a reader task matches responses to waiters by
//! correlation id (Kafka answers in request order). The connection first secures itself as its
//! [`Security`] says (TLS, SASL login: [`super::stream::secure`]), then negotiates API
//! versions once with ApiVersions: each request uses the highest version both sides support.
//!
//! In flight: every request written and not yet answered holds one queue entry; the caller
//! bounds how many it sends. A frame past [`RESPONSE_BYTES_MAX`], an answer out of order or
//! an I/O error breaks the connection: every waiter gets the error, later sends fail at once.
//! Dropping a request's future after its frame is written leaves its entry: the answer is
//! read and discarded, so the connection stays in step.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_channel::oneshot;
use futures_lite::io::{ReadHalf, WriteHalf};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::core::{
    decode_response, encode_request, frame_size, response_correlation_id, ClientVersions, Versions,
};
use crate::error::ClientError;
use crate::security::Security;

use super::stream::{secure, Stream};

/// The largest response frame read.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Who the client is: its client id, the software it reports in ApiVersions, and the
/// versions it speaks.
#[derive(Copy, Clone, Debug)]
pub struct Identity {
    pub client_id: &'static str,
    pub software_name: &'static str,
    pub software_version: &'static str,
    pub versions: ClientVersions,
}

type Waiter = oneshot::Sender<Result<Bytes, ClientError>>;
/// Requests written and not yet answered, oldest first: correlation id, API, version, waiter.
type PendingQueue = Rc<RefCell<VecDeque<(i32, ApiKey, i16, Option<Waiter>)>>>;

pub struct PipelinedConn {
    pub addr: String,
    identity: Identity,
    writer: RefCell<Option<WriteHalf<Stream>>>,
    write_lock: Semaphore,
    pending: PendingQueue,
    next_correlation_id: Cell<i32>,
    versions: RefCell<Versions>,
    broken: Rc<Cell<bool>>,
}

impl PipelinedConn {
    /// Connects, secures the connection (TLS, SASL login; [`Security::PLAINTEXT`]: neither)
    /// and negotiates versions (ApiVersions v3). A failed login is
    /// [`ClientError::Authentication`] with the broker's error code and message.
    pub async fn connect(
        addr: &str,
        identity: Identity,
        security: &Security,
    ) -> Result<Rc<PipelinedConn>, ClientError> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| ClientError::Connect {
                addr: addr.to_string(),
                source: e.into(),
            })?;
        let stream = secure(tcp, addr, security, identity.client_id).await?;
        let (reader, writer) = futures_lite::io::split(stream);
        let conn = Rc::new(PipelinedConn {
            addr: addr.to_string(),
            identity,
            writer: RefCell::new(Some(writer)),
            write_lock: Semaphore::new(1),
            pending: Rc::new(RefCell::new(VecDeque::new())),
            next_correlation_id: Cell::new(1),
            versions: RefCell::new(Versions::default()),
            broken: Rc::new(Cell::new(false)),
        });
        glommio::spawn_local(read_loop(
            reader,
            conn.pending.clone(),
            conn.broken.clone(),
            addr.to_string(),
        ))
        .detach();
        let resp: ApiVersionsResponse = conn
            .request_at(
                ApiKey::ApiVersions,
                3,
                &ApiVersionsRequest::default()
                    .with_client_software_name(StrBytes::from_static_str(identity.software_name))
                    .with_client_software_version(StrBytes::from_static_str(
                        identity.software_version,
                    )),
            )
            .await?;
        let versions =
            Versions::from_response(&resp).map_err(|error_code| ClientError::ApiVersions {
                addr: addr.to_string(),
                error_code,
            })?;
        *conn.versions.borrow_mut() = versions;
        Ok(conn)
    }

    /// The version to use for `api`, or [`ClientError::Unsupported`].
    pub fn version(&self, api: ApiKey) -> Result<i16, ClientError> {
        let (min, max) = self.identity.versions.range(api);
        self.versions.borrow().choose(&self.addr, api, min, max)
    }

    pub fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// Sends a request at the negotiated version and awaits its response.
    pub async fn request<Req, Resp>(&self, api: ApiKey, req: &Req) -> Result<Resp, ClientError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        let version = self.version(api)?;
        self.request_at(api, version, req).await
    }

    /// Sends a request at `version` and awaits its response.
    pub async fn request_at<Req, Resp>(
        &self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        self.send(api, version, req, true).await?.response().await
    }

    fn closed(&self, reason: &str) -> ClientError {
        ClientError::Closed {
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    /// Writes the request; returns what awaits its answer (`expect_response = false` for
    /// acks=0 produce, which has none).
    pub async fn send<Req: Encodable + HeaderVersion>(
        &self,
        api: ApiKey,
        version: i16,
        req: &Req,
        expect_response: bool,
    ) -> Result<InFlight, ClientError> {
        if self.broken.get() {
            return Err(self.closed("broken"));
        }
        let correlation_id = self.next_correlation_id.get();
        self.next_correlation_id.set(correlation_id.wrapping_add(1));
        let frame = encode_request(api, version, correlation_id, self.identity.client_id, req)?;
        let _permit = self
            .write_lock
            .acquire_permit(1)
            .await
            .map_err(|e| self.closed(&e.to_string()))?;
        let (tx, rx) = if expect_response {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if expect_response {
            self.pending
                .borrow_mut()
                .push_back((correlation_id, api, version, tx));
        }
        let mut writer = self
            .writer
            .borrow_mut()
            .take()
            .ok_or_else(|| self.closed("closed"))?;
        // TLS keeps what the socket did not take in rustls until a flush (a no-op in plain).
        let written = match writer.write_all(&frame).await {
            Ok(()) => writer.flush().await,
            Err(e) => Err(e),
        };
        *self.writer.borrow_mut() = Some(writer);
        if let Err(source) = written {
            self.broken.set(true);
            return Err(ClientError::Io {
                addr: self.addr.clone(),
                source,
            });
        }
        Ok(InFlight {
            addr: self.addr.clone(),
            api,
            version,
            correlation_id,
            rx,
        })
    }
}

/// A request written to a [`PipelinedConn`], its answer not yet read.
pub struct InFlight {
    addr: String,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    rx: Option<oneshot::Receiver<Result<Bytes, ClientError>>>,
}

impl InFlight {
    /// Awaits the answer and decodes it.
    pub async fn response<Resp: Decodable>(self) -> Result<Resp, ClientError> {
        let closed = |reason: &str| ClientError::Closed {
            addr: self.addr.clone(),
            reason: reason.to_string(),
        };
        let rx = self
            .rx
            .ok_or_else(|| closed("the request expects no answer"))?;
        let body = rx.await.map_err(|_| closed("closed"))??;
        decode_response(self.api, self.version, self.correlation_id, body)
    }
}

async fn read_loop(
    mut reader: ReadHalf<Stream>,
    pending: PendingQueue,
    broken: Rc<Cell<bool>>,
    addr: String,
) {
    let error = loop {
        let mut prefix = [0u8; 4];
        if let Err(e) = reader.read_exact(&mut prefix).await {
            break format!("connection to {addr} closed: {e}");
        }
        let size = match frame_size(prefix, RESPONSE_BYTES_MAX) {
            Ok(size) => size,
            Err(e) => break format!("{addr} sent a bad frame: {e}"),
        };
        let mut frame = BytesMut::zeroed(size);
        if let Err(e) = reader.read_exact(&mut frame).await {
            break format!("connection to {addr} closed: {e}");
        }
        let frame = frame.freeze();
        let correlation_id = response_correlation_id(&frame).unwrap_or(-1);
        let Some((expected, api, version, waiter)) = pending.borrow_mut().pop_front() else {
            break format!("{addr} sent an unexpected response (correlation id {correlation_id})");
        };
        if expected != correlation_id {
            break format!("{addr} answered correlation id {correlation_id}, expected {expected} ({api:?} v{version})");
        }
        if let Some(w) = waiter {
            let _ = w.send(Ok(frame));
        }
    };
    broken.set(true);
    for (_, _, _, w) in pending.borrow_mut().drain(..) {
        if let Some(w) = w {
            let _ = w.send(Err(ClientError::Closed {
                addr: addr.clone(),
                reason: error.clone(),
            }));
        }
    }
}
