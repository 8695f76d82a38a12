//! Request/response over a few reusable connections per target broker, for calls one broker
//! makes to another (WriteTxnMarkers today, replica fetchers next). Any request type.
//!
//! Runs on the shard that owns the [`Pool`]. A connection serves one request at a time: taken
//! out of the pool, given back after a whole, well-formed answer; concurrent requests to one
//! broker open more, and at most [`PoolConfig::idle_per_target_max`] idle ones are kept. Any
//! error drops the connection: a pooled one that breaks on I/O (the peer closed it while
//! idle) is replaced once by a fresh one at once; anything else is the caller's to retry.
//!
//! Every connection secures itself as the pool's [`Security`] says (TLS, SASL login) before
//! its first request. Connecting, with the TLS handshake and the login, is bounded by
//! [`PoolConfig::connect_timeout_ms`], the whole exchange (first byte sent to last byte read)
//! by [`PoolConfig::request_timeout_ms`], the answer by [`PoolConfig::response_bytes_max`].
//! If the future is dropped midway the connection it holds is closed, never pooled half-read.
//! Under TLS the broker's certificate must name the target's IP address (the pool dials
//! socket addresses).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use glommio::net::TcpStream;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

use crate::core::{decode_response, encode_request};
use crate::error::ClientError;
use crate::security::Security;

use super::stream::{exchange, secure, Stream};

/// A pool's bounds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub response_bytes_max: usize,
    pub idle_per_target_max: usize,
}

struct Conn {
    stream: Stream,
    addr: SocketAddr,
}

/// One shard's connections to other brokers, by target node id.
pub struct Pool {
    config: PoolConfig,
    security: Security,
    idle: RefCell<HashMap<i32, Vec<Conn>>>,
    next_correlation_id: Cell<i32>,
}

impl Pool {
    /// A pool whose connections secure themselves with `security` ([`Security::PLAINTEXT`]:
    /// neither TLS nor a login).
    pub fn new(config: PoolConfig, security: Security) -> Pool {
        Pool {
            config,
            security,
            idle: RefCell::new(HashMap::new()),
            next_correlation_id: Cell::new(0),
        }
    }

    /// Sends `req` (`api` at `version`, header client id `client_id`) to broker `target` at
    /// `addr` and returns its answer.
    pub async fn request<Req, Resp>(
        &self,
        target: i32,
        addr: SocketAddr,
        client_id: &str,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, ClientError>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable,
    {
        let correlation_id = self.next_correlation_id.get();
        self.next_correlation_id
            .set(correlation_id.wrapping_add(1) & i32::MAX);
        let frame = encode_request(api, version, correlation_id, client_id, req)?;
        let call = Call {
            frame: &frame,
            api,
            version,
            correlation_id,
            config: &self.config,
        };
        let answer = match self.take_idle(target, addr) {
            Some(conn) => match self.timed(addr, call.exchange(conn)).await {
                Ok(r) => Ok(r),
                // A stale connection (the peer closed it while idle): once more, fresh.
                Err(ClientError::Io { .. }) => {
                    let conn = self.connect(addr, client_id).await?;
                    self.timed(addr, call.exchange(conn)).await
                }
                Err(e) => Err(e),
            },
            None => {
                let conn = self.connect(addr, client_id).await?;
                self.timed(addr, call.exchange(conn)).await
            }
        };
        let (conn, response) = answer?;
        self.give_back(target, conn);
        Ok(response)
    }

    fn take_idle(&self, target: i32, addr: SocketAddr) -> Option<Conn> {
        let mut idle = self.idle.borrow_mut();
        let conns = idle.get_mut(&target)?;
        // A broker that moved: its old connections go.
        conns.retain(|c| c.addr == addr);
        conns.pop()
    }

    fn give_back(&self, target: i32, conn: Conn) {
        let mut idle = self.idle.borrow_mut();
        let conns = idle.entry(target).or_default();
        if conns.len() < self.config.idle_per_target_max {
            conns.push(conn);
        }
    }

    /// A new connection, secured (TLS, login with `client_id`), within the connect timeout.
    async fn connect(&self, addr: SocketAddr, client_id: &str) -> Result<Conn, ClientError> {
        let timeout_ms = self.config.connect_timeout_ms;
        let open = async {
            let tcp = TcpStream::connect_timeout(addr, Duration::from_millis(timeout_ms))
                .await
                .map_err(|e| ClientError::Connect {
                    addr: addr.to_string(),
                    source: e.into(),
                })?;
            secure(tcp, &addr.to_string(), &self.security, client_id).await
        };
        let stream = within(timeout_ms, addr, open).await?;
        Ok(Conn { stream, addr })
    }

    /// `work`, or a timeout error after the request timeout (dropping `work` and its
    /// connection).
    async fn timed<T>(
        &self,
        addr: SocketAddr,
        work: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        within(self.config.request_timeout_ms, addr, work).await
    }
}

/// `work`, or a timeout error after `timeout_ms` (dropping `work`).
async fn within<T>(
    timeout_ms: u64,
    addr: SocketAddr,
    work: impl std::future::Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    futures_lite::future::or(work, async {
        glommio::timer::sleep(Duration::from_millis(timeout_ms)).await;
        Err(ClientError::Timeout {
            addr: addr.to_string(),
            timeout_ms,
        })
    })
    .await
}

/// One request's frame and what its answer must be.
struct Call<'a> {
    frame: &'a [u8],
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    config: &'a PoolConfig,
}

impl Call<'_> {
    /// Sends the frame and reads its answer; the connection comes back only after a whole,
    /// well-formed answer.
    async fn exchange<Resp: Decodable>(&self, mut conn: Conn) -> Result<(Conn, Resp), ClientError> {
        let addr = conn.addr.to_string();
        let body = exchange(
            &mut conn.stream,
            &addr,
            self.frame,
            self.config.response_bytes_max,
        )
        .await?;
        let response = decode_response(self.api, self.version, self.correlation_id, body)?;
        Ok((conn, response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{one_shot_peer, response_frame};
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

    const CONFIG: PoolConfig = PoolConfig {
        connect_timeout_ms: 1_000,
        request_timeout_ms: 500,
        response_bytes_max: 1 << 16,
        idle_per_target_max: 1,
    };

    fn answer(correlation_id: i32) -> Vec<u8> {
        let r = ApiVersionsResponse::default().with_error_code(35);
        response_frame(ApiKey::ApiVersions, 0, correlation_id, &r)
    }

    fn ask(reply: impl FnOnce(i32) -> Vec<u8> + Send + 'static) -> Result<i16, ClientError> {
        let (addr, peer) = one_shot_peer(reply, Duration::from_millis(1_500));
        let r = glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .make()
            .expect("glommio executor")
            .run(async move {
                let pool = Pool::new(CONFIG, Security::PLAINTEXT);
                let r: Result<ApiVersionsResponse, ClientError> = pool
                    .request(
                        1,
                        addr,
                        "keel-test",
                        ApiKey::ApiVersions,
                        0,
                        &ApiVersionsRequest::default(),
                    )
                    .await;
                assert_eq!(
                    pool.idle.borrow().get(&1).map_or(0, Vec::len),
                    usize::from(r.is_ok())
                );
                r.map(|r| r.error_code)
            });
        peer.join().unwrap();
        r
    }

    #[test]
    fn answers_pool_the_connection_and_hostile_ones_drop_it() {
        assert_eq!(ask(answer).unwrap(), 35);
        let r = ask(|c| answer(c + 1));
        assert!(matches!(r, Err(ClientError::CorrelationId { .. })), "{r:?}");
        let r = ask(|_| i32::MAX.to_be_bytes().to_vec());
        assert!(matches!(r, Err(ClientError::FrameSize { .. })), "{r:?}");
        let r = ask(|_| {
            let mut f = 40i32.to_be_bytes().to_vec();
            f.extend_from_slice(&[0xff; 40]);
            f
        });
        assert!(
            matches!(r, Err(ClientError::CorrelationId { got: -1, .. })),
            "{r:?}"
        );
        // The peer stops mid-frame and stays silent past the request timeout.
        let r = ask(|_| 100i32.to_be_bytes().to_vec());
        assert!(
            matches!(
                r,
                Err(ClientError::Timeout {
                    timeout_ms: 500,
                    ..
                })
            ),
            "{r:?}"
        );
    }
}
