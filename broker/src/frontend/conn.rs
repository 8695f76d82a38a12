//! One client connection, on the shard that accepted it.
//!
//! The reader takes frames off the socket and starts a task per request; the writer sends
//! the answers in request order (Kafka clients pipeline). At most `MAX_IN_FLIGHT` requests
//! are in flight per connection: past that the reader stops reading (backpressure). A bad
//! frame, header or body closes this connection only, after the answers already due.
//! On shutdown the reader stops at the next frame boundary; in-flight requests finish.

use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel;
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use kafka_protocol::messages::ApiKey;
use tracing::{debug, warn};

use crate::frontend::dispatch::Reply;
use crate::frontend::framing::check_frame_size;
use crate::ops::metrics::Stage;
use crate::shard::BrokerShard;

const MAX_IN_FLIGHT: usize = 32;

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
    let _ = stream.set_nodelay(true);
    shard.counters.connection_opened();
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (tx, rx) = local_channel::new_bounded::<Pending>(MAX_IN_FLIGHT);

    let writer_shard = shard.clone();
    let writer_peer = peer.clone();
    let writer_task = glommio::spawn_local(async move {
        while let Some(Pending { api, read_at, task }) = rx.recv().await {
            let reply = match task.await {
                Some(r) => r,
                None => break,
            };
            let (frame, close) = match reply {
                Reply::Frame(f) => (Some(f), false),
                Reply::None => (None, false),
                Reply::FrameThenClose(f) => (Some(f), true),
                Reply::Close(e) => {
                    warn!(shard = writer_shard.id, peer = %writer_peer, error = %e, "closing connection");
                    (None, true)
                }
            };
            if let Some(frame) = frame {
                writer_shard.counters.add_bytes_out(frame.len());
                let write_started = Instant::now();
                if let Err(e) = writer.write_all(&frame).await {
                    debug!(peer = %writer_peer, error = %e, "write failed");
                    break;
                }
                let c = &writer_shard.counters;
                c.record(api, Stage::ResponseWrite, write_started.elapsed());
            }
            writer_shard
                .counters
                .record(api, Stage::Total, read_at.elapsed());
            if close {
                break;
            }
        }
        let _ = writer.close().await;
    });

    let max = shard.config.socket_request_max_bytes;
    loop {
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
        let mut frame = BytesMut::zeroed(size);
        if reader.read_exact(&mut frame).await.is_err() {
            break;
        }
        shard.counters.add_bytes_in(size + 4);
        let read_at = Instant::now();
        let frame = frame.freeze();
        // handle_frame refuses a frame too short for an API key or with an unknown one; their
        // timings are filed under -1, so hostile keys cannot grow the histogram map.
        let api = frame
            .get(..2)
            .map(|k| i16::from_be_bytes([k[0], k[1]]))
            .filter(|k| ApiKey::try_from(*k).is_ok())
            .unwrap_or(-1);
        debug!(shard = shard.id, peer = %peer, api, "request");
        let task_shard = shard.clone();
        let task_host = client_host.clone();
        let task_listener = listener.clone();
        let task = glommio::spawn_local(async move {
            task_shard
                .counters
                .record(api, Stage::QueueWait, read_at.elapsed());
            crate::frontend::dispatch::handle_frame(task_shard, frame, task_host, task_listener)
                .await
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
