//! Admin HTTP endpoint on shard 0 (default 127.0.0.1:9644): `GET /metrics` renders every
//! shard's counters in Prometheus text format, gathered over the mesh, consumer group lag
//! ([`crate::group::lag`]) and the metadata quorum's gauges; `GET /quorum` shows the quorum
//! as JSON: voters, learners, leader, term, last log, committed and applied index, snapshot,
//! and on the leader each member's lag. `GET /debug/stalls`: the last reactor stalls as JSON
//! (see [`crate::ops::stalls`]). Debug builds only: `GET /debug/block?ms=N` blocks
//! shard 0's reactor for N ms (a test hook for the stall detector). A tiny HTTP/1.1 reader: one request per connection,
//! head bounded to 8 KiB, anything else gets 404/400.

use std::net::SocketAddr;
use std::rc::Rc;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tracing::{info, warn};

use crate::ops::metrics::{render, CountersSnapshot, LeaderSnapshot, PartitionSnapshot};
use crate::shard::{BrokerShard, Partition};

const HEAD_MAX: usize = 8192;

pub fn start(shard: Rc<BrokerShard>, addr: SocketAddr) {
    let listener = match keel_shard::listen_reuseport(addr, 1024) {
        Ok(l) => l,
        Err(e) => {
            warn!(admin = %addr, error = %e, "admin endpoint disabled: cannot listen");
            return;
        }
    };
    info!(admin = %addr, "admin HTTP endpoint (/metrics)");
    if !addr.ip().is_loopback() {
        // It is read-only, but unauthenticated: metrics name topics, groups and clients.
        warn!(admin = %addr, "the admin HTTP endpoint is bound beyond loopback and has no authentication: anyone who reaches it reads metrics, topic and group names");
    }
    glommio::spawn_local(async move {
        loop {
            let next = futures_lite::future::or(async { Some(listener.accept().await) }, async {
                shard.shutdown.wait().await;
                None
            })
            .await;
            match next {
                None => break,
                Some(Ok(stream)) => {
                    glommio::spawn_local(serve(shard.clone(), stream)).detach();
                }
                Some(Err(e)) => warn!(error = %e, "admin accept failed"),
            }
        }
    })
    .detach();
}

/// Every shard's counters, in shard order.
pub async fn gather(shard: &Rc<BrokerShard>) -> Vec<CountersSnapshot> {
    let mut out = Vec::with_capacity(shard.count);
    for target in 0..shard.count {
        let snap = if target == shard.id {
            snapshot(shard)
        } else {
            shard
                .mesh
                .call_uncounted(target, |s| async move { snapshot(&s) })
                .await
                .unwrap_or_default()
        };
        out.push(snap);
    }
    out
}

/// Partitions without a leader in this broker's metadata image (Kafka's
/// `OfflinePartitionsCount`): every broker reports the cluster-wide count.
fn render_offline(shard: &BrokerShard) -> String {
    let image = shard.image();
    let offline = image
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .filter(|p| p.leader < 0)
        .count();
    // The broker epoch of this incarnation (its registration's metadata offset), -1 until it
    // registered: what its follower fetches carry and what fencing compares.
    let epoch = image
        .cluster
        .brokers
        .get(&shard.config.node_id)
        .map_or(-1, |b| b.broker_epoch);
    format!(
        "# HELP keel_offline_partitions Partitions without a leader (no live ISR or ELR member to elect).\n# TYPE keel_offline_partitions gauge\nkeel_offline_partitions {offline}\n# HELP keel_broker_epoch This broker's epoch: the metadata offset of its latest registration (-1 before it registered).\n# TYPE keel_broker_epoch gauge\nkeel_broker_epoch {epoch}\n"
    )
}

/// What the leader of `p` knows of its followers.
fn leader_snapshot(p: &Partition, log_end_offset: i64, now_ms: i64) -> LeaderSnapshot {
    let r = &p.replication;
    LeaderSnapshot {
        replicas: r.replicas.borrow().len() as u32,
        isr: r.isr.borrow().len() as u32,
        min_insync_replicas: p.min_insync_replicas.get(),
        followers: r
            .local
            .borrow()
            .followers
            .iter()
            .map(|(id, f)| {
                let lag = if f.log_end_offset < 0 {
                    log_end_offset
                } else {
                    (log_end_offset - f.log_end_offset).max(0)
                };
                let ms = if f.last_caught_up_ms < 0 {
                    -1
                } else {
                    (now_ms - f.last_caught_up_ms).max(0)
                };
                (*id, lag, ms)
            })
            .collect(),
    }
}

fn snapshot(shard: &BrokerShard) -> CountersSnapshot {
    let now_ms = shard.clock.now_ms();
    let mut s = shard.counters.snapshot();
    let mesh = shard.mesh.counters();
    s.cross_shard_hops = mesh.hops_out;
    s.cross_shard_jobs = mesh.jobs_in;
    s.partitions_owned = shard.partitions_owned() as u64;
    let (cached, _, evicted) = keel_storage::tail_budget::stats();
    s.tail_cache_bytes = cached as u64;
    s.tail_cache_evictions = evicted;
    s.segment_files_open = keel_storage::file_cache::stats().0 as u64;
    // SAFETY: gettid takes no arguments and cannot fail.
    s.thread_id = unsafe { libc::syscall(libc::SYS_gettid) };
    // procfs reads do not block.
    s.thread_name = std::fs::read_to_string(format!("/proc/self/task/{}/comm", s.thread_id))
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    s.partitions = shard
        .all_partitions()
        .iter()
        .map(|p| {
            let o = p.log.offsets();
            PartitionSnapshot {
                topic: p.topic.clone(),
                partition: p.index,
                log_start_offset: o.log_start_offset.0,
                high_watermark: o.high_watermark.0,
                log_end_offset: o.log_end_offset.0,
                last_stable_offset: o.last_stable_offset.0,
                size_bytes: p.log.size_bytes(),
                segments: p.log.segment_count() as u64,
                leader: p
                    .is_leader()
                    .then(|| leader_snapshot(p, o.log_end_offset.0, now_ms)),
            }
        })
        .collect();
    s.partitions
        .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    s.reactor_stalls = keel_shard::reactor_stalls();
    s
}

async fn serve(shard: Rc<BrokerShard>, mut stream: TcpStream) {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > HEAD_MAX {
            let _ = respond(&mut stream, "400 Bad Request", "request head too large\n").await;
            return;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    match (method, path) {
        ("GET", "/metrics") => {
            let mut body = render(&gather(&shard).await);
            body.push_str(&crate::group::lag::render_metrics(&shard).await);
            if let Some(c) = &shard.controller {
                body.push_str(&render_quorum(&c.handle.quorum()));
            }
            body.push_str(&render_offline(&shard));
            body.push_str(&crate::ops::metrics::render_process_cpu(
                crate::ops::metrics::process_cpu(),
            ));
            let _ = respond(&mut stream, "200 OK", &body).await;
        }
        ("GET", "/quorum") => {
            let body = match &shard.controller {
                Some(c) => {
                    serde_json::to_string_pretty(&c.handle.quorum()).unwrap_or_default() + "\n"
                }
                None => "{}\n".to_string(),
            };
            let _ = respond(&mut stream, "200 OK", &body).await;
        }
        ("GET", "/debug/stalls") => {
            let body = crate::ops::stalls::to_json(&crate::ops::stalls::recent()) + "\n";
            let _ = respond(&mut stream, "200 OK", &body).await;
        }
        // Test hook, compiled into debug builds only: blocks this shard's reactor for `ms`
        // milliseconds (at most 10 s) so that tests can see the stall detector fire.
        #[cfg(debug_assertions)]
        ("GET", p) if p.starts_with("/debug/block?ms=") => {
            let ms: u64 = p["/debug/block?ms=".len()..]
                .parse()
                .unwrap_or(0)
                .min(10_000);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            let _ = respond(&mut stream, "200 OK", &format!("blocked {ms} ms\n")).await;
        }
        ("GET", _) => {
            let _ = respond(
                &mut stream,
                "404 Not Found",
                "not found; try /metrics or /quorum\n",
            )
            .await;
        }
        _ => {
            let _ = respond(&mut stream, "400 Bad Request", "only GET is supported\n").await;
        }
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.close().await
}

/// The metadata quorum as Prometheus gauges.
fn render_quorum(q: &keel_raft::node::QuorumStatus) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str, v: Option<u64>| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        let _ = writeln!(out, "{name} {}", v.map_or(-1, |v| v as i64));
    };
    gauge(
        &mut out,
        "keel_quorum_leader",
        "node id of the metadata quorum leader (-1 none)",
        q.leader,
    );
    gauge(
        &mut out,
        "keel_quorum_term",
        "current Raft term",
        Some(q.term),
    );
    gauge(
        &mut out,
        "keel_quorum_voters",
        "voters in the metadata quorum",
        Some(q.voters.len() as u64),
    );
    gauge(
        &mut out,
        "keel_quorum_last_log_index",
        "last index in this node's metadata log",
        q.last_log_index,
    );
    gauge(
        &mut out,
        "keel_quorum_committed_index",
        "committed index (leader: majority-matched; others: applied)",
        q.committed_index,
    );
    gauge(
        &mut out,
        "keel_quorum_applied_index",
        "index applied to this node's metadata image",
        q.applied_index,
    );
    let _ = writeln!(
        out,
        "# HELP keel_quorum_lag entries a member is behind the leader's log (leader only)\n# TYPE keel_quorum_lag gauge"
    );
    for r in &q.replication {
        let _ = writeln!(
            out,
            "keel_quorum_lag{{node=\"{}\",voter=\"{}\"}} {}",
            r.node_id,
            r.voter,
            r.lag.map_or(-1, |l| l as i64)
        );
    }
    out
}
