//! A broker's clean stop, on shard 0: the controlled shutdown it asks for on SIGTERM while it
//! still serves (Kafka's KRaft way: its heartbeats want to shut down; the controller moves its
//! leadership to other ISR members and takes it out of the ISRs, then approves), and the
//! clean-shutdown record its next start reads (KIP-841).

use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::controller;
use crate::shard::BrokerShard;

/// On SIGTERM, before the shards stop serving: asks the controller for this broker's
/// controlled shutdown and waits — at most `controlled.shutdown.timeout.ms` — for its approval
/// and for the image that fences this broker to be installed on every shard, so that this
/// broker leads nothing before it stops: producers and consumers get NOT_LEADER_OR_FOLLOWER
/// (retriable) and move to the new leaders, and the ISRs no longer wait for it. Past the
/// timeout it returns anyway (the session timeout fences the broker then).
pub async fn controlled_shutdown(shard: &Rc<BrokerShard>) {
    let ctl = controller(shard);
    let started = Instant::now();
    let timeout_ms = shard.config.controlled_shutdown_timeout_ms;
    let deadline = started + Duration::from_millis(timeout_ms);
    info!("controlled shutdown: asking the controller to move this broker's leadership away");
    ctl.shutdown_approved.set(None);
    ctl.handle.begin_controlled_shutdown();
    loop {
        match ctl.shutdown_approved.get() {
            Some(true) => break,
            Some(false) => {
                info!("controlled shutdown not done: not registered, or no controller answers");
                return;
            }
            None if Instant::now() >= deadline => {
                warn!(
                    timeout_ms,
                    "controlled shutdown not approved in time; stopping anyway"
                );
                return;
            }
            None => glommio::timer::sleep(Duration::from_millis(5)).await,
        }
    }
    let node = shard.config.node_id;
    loop {
        let image = shard.image();
        let fenced = image.cluster.brokers.get(&node).is_none_or(|b| b.fenced);
        if fenced && ctl.installed.get() >= image.cluster.applied_index {
            break;
        }
        if Instant::now() >= deadline {
            warn!(
                timeout_ms,
                "the image of the controlled shutdown is not installed in time; stopping anyway"
            );
            return;
        }
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "controlled shutdown done: this broker leads nothing"
    );
}

/// Where a broker that stopped cleanly leaves its broker epoch (KIP-841: the next
/// registration names it, so the controller knows no acknowledged record was lost here).
const CLEAN_SHUTDOWN_FILE: &str = ".keel-clean-shutdown";

/// The broker epoch a clean shutdown left, removed as it is read (a crash after this start
/// must not look clean); -1 when the last stop was not clean.
pub(super) fn take_clean_shutdown_epoch(data_dir: &std::path::Path) -> i64 {
    let path = data_dir.join(CLEAN_SHUTDOWN_FILE);
    let epoch = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .unwrap_or(-1);
    // Every log was closed (its indexes written) before the record was: opening them need
    // not rescan their active segments.
    keel_storage::set_previous_stop_clean(epoch >= 0);
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!(path = %path.display(), error = %e, "cannot remove the clean-shutdown record");
        }
    }
    epoch
}

/// After every log is closed at a clean stop: records this incarnation's broker epoch (see
/// [`CLEAN_SHUTDOWN_FILE`]).
pub fn record_clean_shutdown(shard: &BrokerShard) {
    let image = shard.image();
    let Some(b) = image.cluster.brokers.get(&shard.config.node_id) else {
        return;
    };
    let path = shard.config.data_dir.join(CLEAN_SHUTDOWN_FILE);
    let tmp = path.with_extension("tmp");
    let written = std::fs::write(&tmp, format!("{}\n", b.broker_epoch))
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        warn!(path = %path.display(), error = %e, "cannot record the clean shutdown");
    }
}
