//! One connection to one broker, on the executor that opened it. Requests are pipelined: a
//! writer sends frames in order while a reader task matches responses to waiters by
//! correlation id (Kafka answers in request order). API versions are negotiated once with
//! ApiVersions: each request uses the highest version both sides support.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use futures_channel::oneshot;
use futures_lite::io::{ReadHalf, WriteHalf};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

/// The newest version of each API this client can speak (it names topics, never topic ids).
/// Fetch stops at v11, the last non-flexible version: some brokers put tagged fields into
/// v12 responses that only later versions define, which `kafka-protocol`'s strict decoder
/// refuses (real clients skip them); v11 carries everything a consumer needs.
pub fn client_max_version(api: ApiKey) -> i16 {
    match api {
        ApiKey::Produce => 11,
        ApiKey::Fetch => 11,
        ApiKey::ListOffsets => 7,
        ApiKey::Metadata => 12,
        ApiKey::ApiVersions => 3,
        ApiKey::CreateTopics => 7,
        ApiKey::DeleteTopics => 5,
        // Key type 1 (transaction) needs v1; v4 asks for many keys at once.
        ApiKey::FindCoordinator => 3,
        ApiKey::InitProducerId => 4,
        // v4 is the broker-to-broker form (many transactions per request).
        ApiKey::AddPartitionsToTxn => 3,
        ApiKey::EndTxn => 3,
        _ => 0,
    }
}

/// The oldest version this client can speak.
fn client_min_version(api: ApiKey) -> i16 {
    match api {
        ApiKey::Produce => 3,
        ApiKey::Fetch => 4,
        ApiKey::ListOffsets => 1,
        ApiKey::Metadata => 1,
        ApiKey::CreateTopics => 2,
        ApiKey::DeleteTopics => 1,
        ApiKey::FindCoordinator => 1,
        _ => 0,
    }
}

type Waiter = oneshot::Sender<Result<Bytes>>;
/// Requests written and not yet answered, oldest first: correlation id, API, version, waiter.
type PendingQueue = Rc<RefCell<VecDeque<(i32, ApiKey, i16, Option<Waiter>)>>>;

pub struct Conn {
    pub addr: String,
    writer: RefCell<Option<WriteHalf<TcpStream>>>,
    write_lock: Semaphore,
    pending: PendingQueue,
    next_correlation_id: Cell<i32>,
    versions: RefCell<HashMap<i16, (i16, i16)>>,
    broken: Rc<Cell<bool>>,
}

impl Conn {
    /// Connects and negotiates versions.
    pub async fn connect(addr: &str) -> Result<Rc<Conn>> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| anyhow!("cannot connect to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
        let (reader, writer) = futures_lite::io::split(stream);
        let conn = Rc::new(Conn {
            addr: addr.to_string(),
            writer: RefCell::new(Some(writer)),
            write_lock: Semaphore::new(1),
            pending: Rc::new(RefCell::new(VecDeque::new())),
            next_correlation_id: Cell::new(1),
            versions: RefCell::new(HashMap::new()),
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
                    .with_client_software_name(StrBytes::from_static_str("keel-bench"))
                    .with_client_software_version(StrBytes::from_static_str(env!(
                        "CARGO_PKG_VERSION"
                    ))),
            )
            .await
            .with_context(|| format!("ApiVersions to {addr}"))?;
        if resp.error_code != 0 {
            bail!("{addr} answered ApiVersions with error {}", resp.error_code);
        }
        *conn.versions.borrow_mut() = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(conn)
    }

    /// The version to use for `api`, or a clear error when the target does not support it.
    pub fn version(&self, api: ApiKey) -> Result<i16> {
        let (min, max) = *self
            .versions
            .borrow()
            .get(&(api as i16))
            .ok_or_else(|| anyhow!("{} does not support {api:?}", self.addr))?;
        let v = max.min(client_max_version(api));
        if v < min.max(client_min_version(api)) {
            bail!(
                "{} supports {api:?} v{min}-{max}; keel-bench needs v{}-{}",
                self.addr,
                client_min_version(api),
                client_max_version(api)
            );
        }
        Ok(v)
    }

    pub fn is_broken(&self) -> bool {
        self.broken.get()
    }

    /// Sends a request at the negotiated version and awaits its response.
    pub async fn request<Req, Resp>(&self, api: ApiKey, req: &Req) -> Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        let version = self.version(api)?;
        self.request_at(api, version, req).await
    }

    /// Sends a request at `version`; `expect_response = false` for acks=0 produce.
    pub async fn request_at<Req, Resp>(&self, api: ApiKey, version: i16, req: &Req) -> Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        let rx = self.send(api, version, req, true).await?.expect("a waiter");
        let mut body = rx
            .await
            .map_err(|_| anyhow!("connection to {} closed", self.addr))??;
        ResponseHeader::decode(&mut body, Resp::header_version(version))?;
        Resp::decode(&mut body, version)
            .with_context(|| format!("decoding {api:?} v{version} response"))
    }

    /// Writes the request; returns the waiter for its response (None without a response).
    pub async fn send<Req: Encodable + HeaderVersion>(
        &self,
        api: ApiKey,
        version: i16,
        req: &Req,
        expect_response: bool,
    ) -> Result<Option<oneshot::Receiver<Result<Bytes>>>> {
        if self.broken.get() {
            bail!("connection to {} is closed", self.addr);
        }
        let correlation_id = self.next_correlation_id.get();
        self.next_correlation_id.set(correlation_id.wrapping_add(1));
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("keel-bench")));
        let mut buf = BytesMut::with_capacity(1024);
        buf.put_i32(0);
        header.encode(&mut buf, Req::header_version(version))?;
        req.encode(&mut buf, version)?;
        let size = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&size.to_be_bytes());
        let _permit = self
            .write_lock
            .acquire_permit(1)
            .await
            .map_err(|e| anyhow!("{e}"))?;
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
            .ok_or_else(|| anyhow!("connection to {} is closed", self.addr))?;
        let written = writer.write_all(&buf).await;
        *self.writer.borrow_mut() = Some(writer);
        if let Err(e) = written {
            self.broken.set(true);
            return Err(e).with_context(|| format!("writing to {}", self.addr));
        }
        Ok(rx)
    }
}

async fn read_loop(
    mut reader: ReadHalf<TcpStream>,
    pending: PendingQueue,
    broken: Rc<Cell<bool>>,
    addr: String,
) {
    let error = loop {
        let mut size = [0u8; 4];
        if let Err(e) = reader.read_exact(&mut size).await {
            break format!("connection to {addr} closed: {e}");
        }
        let size = i32::from_be_bytes(size);
        if !(4..=256 * 1024 * 1024).contains(&size) {
            break format!("{addr} sent a frame of {size} bytes");
        }
        let mut frame = BytesMut::zeroed(size as usize);
        if let Err(e) = reader.read_exact(&mut frame).await {
            break format!("connection to {addr} closed: {e}");
        }
        let frame = frame.freeze();
        let correlation_id = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
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
            let _ = w.send(Err(anyhow!("{error}")));
        }
    }
}
