//! One client connection, on the shard that accepted it.
//!
//! The reader takes frames off the socket and starts a task per request; the writer sends
//! the answers in request order (Kafka clients pipeline). At most `MAX_IN_FLIGHT` requests
//! are in flight per connection: past that the reader stops reading (backpressure). A bad
//! frame, header or body closes this connection only, after the answers already due.
//! On shutdown the reader stops at the next frame boundary; in-flight requests finish.
//! A connection a client quota throttled reads nothing until its throttle time has passed
//! (KIP-219's mute; see `crate::quota`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::io::BufReader;
use futures_lite::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver};
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use kafka_protocol::messages::ApiKey;
use tracing::{debug, info, warn};

use crate::frontend::dispatch::Reply;
use crate::frontend::framing::{check_frame_size, Frame};
use crate::frontend::io::{
    read_frame, send_frames, ReadSide, Socket, Stream, WriteSide, READ_BUFFER,
};
use crate::ops::metrics::Stage;
use crate::security::{Session, ANONYMOUS};
use crate::shard::BrokerShard;

const MAX_IN_FLIGHT: usize = 32;

/// Answers already complete are sent together, up to this many bytes in one `sendmsg`.
const GATHER_BYTES: usize = 1 << 20;

/// A request in flight on the connection, in arrival order.
struct Pending {
    api: i16,
    read_at: Instant,
    task: JoinHandle<Reply>,
}

/// Serves one connection accepted on the listener named `listener`.
pub async fn serve(shard: Rc<BrokerShard>, stream: TcpStream, listener: Rc<str>) {
    let peer_addr = stream.peer_addr().ok();
    let peer = peer_addr.map(|a| a.to_string()).unwrap_or_default();
    // Kafka shows a member's host as Java's InetAddress.toString() does: "/127.0.0.1".
    let client_host: Rc<str> = peer_addr
        .map_or_else(String::new, |a| format!("/{}", a.ip()))
        .into();
    let ip: Rc<str> = peer_addr
        .map_or_else(String::new, |a| a.ip().to_string())
        .into();
    let _ = stream.set_nodelay(true);
    let exempt = *listener == *shard.config.inter_broker_listener_name;
    let _admission = match crate::frontend::limits::admit(
        peer_addr.map(|a| a.ip()),
        shard.config.max_connections,
        shard.config.max_connections_per_ip,
        exempt,
    ) {
        Ok(a) => a,
        Err(why) => {
            info!(shard = shard.id, peer = %peer, listener = %listener, why = %why, "connection refused");
            return;
        }
    };
    shard.counters.connection_opened();
    let Some(config) = shard.config.listeners.iter().find(|l| *l.name == *listener) else {
        warn!(shard = shard.id, listener = %listener, "a connection on an unknown listener");
        shard.counters.connection_closed();
        return;
    };
    let mut principal: Rc<str> = Rc::from(ANONYMOUS);
    // An SSL or SASL_SSL listener's TLS handshake comes first; a verified client certificate
    // names the principal (a SASL login replaces it).
    let stream = match &config.tls {
        None => Stream::Plain(stream),
        Some(tls) => match crate::frontend::handshake::accept(&shard, tls, stream).await {
            Ok((tls_stream, cert_principal)) => {
                if let Some(p) = cert_principal {
                    principal = p.into();
                }
                Stream::Tls(Box::new(tls_stream))
            }
            Err(why) => {
                info!(shard = shard.id, peer = %peer, listener = %listener, why = %why, "closing a connection: TLS handshake failed");
                shard.counters.connection_closed();
                return;
            }
        },
    };
    let socket: Socket = Rc::new(RefCell::new(stream));
    let mut reader = BufReader::with_capacity(READ_BUFFER, ReadSide(socket.clone()));
    let mut session = Session {
        principal,
        host: ip,
        client_host,
        listener: listener.clone(),
        quota: Default::default(),
        authz_cache: Default::default(),
    };
    // A SASL listener authenticates the connection before anything else.
    if config.protocol.is_sasl() {
        let mut out = WriteSide(socket.clone());
        match crate::frontend::sasl::authenticate(&shard, &mut reader, &mut out, config, &session)
            .await
        {
            Ok(user) => {
                debug!(shard = shard.id, peer = %peer, listener = %listener, user = %user, "authenticated");
                session.principal = format!("User:{user}").into();
            }
            Err(why) => {
                info!(shard = shard.id, peer = %peer, listener = %listener, why = %why, "closing an unauthenticated connection");
                let _ = out.close().await;
                shard.counters.connection_closed();
                return;
            }
        }
    }
    let session = Rc::new(session);
    let (tx, rx) = local_channel::new_bounded::<Pending>(MAX_IN_FLIGHT);
    // For `connections.max.idle.ms`: requests read but not answered yet, and the last time a
    // frame was read or answers were written.
    let activity = Rc::new(Activity {
        in_flight: Cell::new(0),
        last: Cell::new(Instant::now()),
    });

    let writer_task = glommio::spawn_local(write_answers(
        shard.clone(),
        WriteSide(socket),
        rx,
        peer.clone(),
        activity.clone(),
    ));

    let max = shard.config.socket_request_max_bytes;
    let idle = Duration::from_millis(shard.config.connections_max_idle_ms);
    loop {
        if let Some(wait) = session.quota.muted_for(Instant::now()) {
            // KIP-219: a throttled client's connection reads nothing until its throttle time
            // has passed (its answer already went out, carrying that time).
            let stop = futures_lite::future::or(
                async {
                    glommio::timer::sleep(wait).await;
                    false
                },
                async {
                    shard.shutdown.wait().await;
                    true
                },
            )
            .await;
            if stop {
                break;
            }
            activity.last.set(Instant::now());
        }
        // Wait for bytes without taking any (cancel-safe), so that the idle check cannot cut
        // a frame's size prefix in two.
        let wake = futures_lite::future::or(
            async { Wake::Data(reader.fill_buf().await.map(|b| b.is_empty())) },
            async {
                let left = idle.saturating_sub(activity.last.get().elapsed());
                futures_lite::future::or(
                    async {
                        shard.shutdown.wait().await;
                        Wake::Shutdown
                    },
                    async {
                        glommio::timer::sleep(left.max(Duration::from_millis(1))).await;
                        Wake::Idle
                    },
                )
                .await
            },
        )
        .await;
        match wake {
            Wake::Shutdown => break,
            Wake::Data(Ok(false)) => {}
            Wake::Data(Ok(true)) => {
                debug!(shard = shard.id, peer = %peer, "connection closed by peer");
                break;
            }
            Wake::Data(Err(e)) => {
                debug!(shard = shard.id, peer = %peer, error = %e, "connection closed by peer");
                break;
            }
            Wake::Idle => {
                if activity.in_flight.get() == 0 && activity.last.get().elapsed() >= idle {
                    info!(shard = shard.id, peer = %peer, idle_ms = idle.as_millis() as u64, "closing an idle connection (connections.max.idle.ms)");
                    break;
                }
                continue;
            }
        }
        let mut size_buf = [0u8; 4];
        let read = futures_lite::future::or(
            async { Some(reader.read_exact(&mut size_buf).await) },
            async {
                shard.shutdown.wait().await;
                None
            },
        )
        .await;
        match read {
            None => break,
            Some(Err(e)) => {
                debug!(shard = shard.id, peer = %peer, error = %e, "connection closed by peer");
                break;
            }
            Some(Ok(())) => {}
        }
        let size = match check_frame_size(i32::from_be_bytes(size_buf), max) {
            Ok(s) => s,
            Err(e) => {
                warn!(shard = shard.id, peer = %peer, error = %e, "closing connection");
                break;
            }
        };
        let frame = match read_frame(&mut reader, size).await {
            Ok(f) => f,
            Err(e) => {
                debug!(shard = shard.id, peer = %peer, error = %e, "connection closed mid-frame");
                break;
            }
        };
        shard.counters.add_bytes_in(size + 4);
        let read_at = Instant::now();
        activity.last.set(read_at);
        activity.in_flight.set(activity.in_flight.get() + 1);
        // handle_frame refuses a frame too short for an API key or with an unknown one; their
        // timings are filed under -1, so hostile keys cannot grow the histogram map.
        let api = frame
            .get(..2)
            .map(|k| i16::from_be_bytes([k[0], k[1]]))
            .filter(|k| ApiKey::try_from(*k).is_ok())
            .unwrap_or(-1);
        debug!(shard = shard.id, peer = %peer, api, "request");
        let task_shard = shard.clone();
        let task_session = session.clone();
        let task = glommio::spawn_local(async move {
            task_shard
                .counters
                .record(api, Stage::QueueWait, read_at.elapsed());
            crate::frontend::dispatch::handle_frame(task_shard, frame, task_session).await
        })
        .detach();
        if tx.send(Pending { api, read_at, task }).await.is_err() {
            break; // the writer stopped: the connection is closing
        }
    }
    drop(tx);
    let _ = writer_task.await;
    shard.counters.connection_closed();
}

/// What the reader's idle check reads: requests in flight, the last read or write.
struct Activity {
    in_flight: Cell<usize>,
    last: Cell<Instant>,
}

/// What woke the reader.
enum Wake {
    /// Bytes to read (`false`), or the end of the stream (`true`), or an error.
    Data(std::io::Result<bool>),
    Shutdown,
    Idle,
}

/// One answer taken for sending: its API, when its request was read, its frame.
struct Outgoing {
    api: i16,
    read_at: Instant,
    frame: Option<Frame>,
}

/// Sends the answers in request order. Answers that are already complete when one is ready
/// go with it in the same `sendmsg` (a group commit often completes several Produce requests
/// of one connection at once); a Fetch answer's records are sent from where they are stored.
async fn write_answers(
    shard: Rc<BrokerShard>,
    mut out: WriteSide,
    rx: LocalReceiver<Pending>,
    peer: String,
    activity: Rc<Activity>,
) {
    let mut held: Option<Pending> = None;
    let mut batch: Vec<Outgoing> = Vec::new();
    loop {
        let first = match held.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => break,
            },
        };
        let Some(reply) = first.task.await else {
            break;
        };
        let mut close = take_reply(&shard, &peer, first.api, first.read_at, reply, &mut batch);
        let mut gathered: usize = batch
            .iter()
            .filter_map(|o| o.frame.as_ref())
            .map(Frame::len)
            .sum();
        let mut cancelled = false;
        while !close && gathered < GATHER_BYTES {
            let Some(Some(mut next)) = futures_lite::future::poll_once(rx.recv()).await else {
                break;
            };
            match futures_lite::future::poll_once(&mut next.task).await {
                Some(Some(reply)) => {
                    close = take_reply(&shard, &peer, next.api, next.read_at, reply, &mut batch);
                    gathered += batch
                        .last()
                        .and_then(|o| o.frame.as_ref())
                        .map_or(0, Frame::len);
                }
                Some(None) => {
                    cancelled = true;
                    break;
                }
                None => {
                    held = Some(next);
                    break;
                }
            }
        }
        let write_started = Instant::now();
        let sent = send_frames(&mut out, batch.iter().filter_map(|o| o.frame.as_ref())).await;
        let c = &shard.counters;
        activity.last.set(Instant::now());
        activity
            .in_flight
            .set(activity.in_flight.get().saturating_sub(batch.len()));
        for o in batch.drain(..) {
            if let Some(frame) = &o.frame {
                c.add_bytes_out(frame.len());
                c.record(o.api, Stage::ResponseWrite, write_started.elapsed());
            }
            c.record(o.api, Stage::Total, o.read_at.elapsed());
        }
        if let Err(e) = sent {
            debug!(peer = %peer, error = %e, "write failed");
            break;
        }
        if close || cancelled {
            break;
        }
    }
    let _ = out.close().await;
}

/// Files one reply in `batch`; true when the connection closes after it.
fn take_reply(
    shard: &BrokerShard,
    peer: &str,
    api: i16,
    read_at: Instant,
    reply: Reply,
    batch: &mut Vec<Outgoing>,
) -> bool {
    let (frame, close) = match reply {
        Reply::Frame(f) => (Some(f), false),
        Reply::None => (None, false),
        Reply::FrameThenClose(f) => (Some(f), true),
        Reply::Close(e) => {
            warn!(shard = shard.id, peer = %peer, error = %e, "closing connection");
            (None, true)
        }
    };
    batch.push(Outgoing {
        api,
        read_at,
        frame,
    });
    close
}
