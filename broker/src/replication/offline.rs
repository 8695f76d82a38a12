//! Offline replicas (Kafka's offline log directories, KIP-858, per partition): each shard
//! reports its partitions whose log a failed write or fdatasync poisoned, or that are corrupt,
//! to the controller, which moves their leadership away and takes them out of the ISR and ELR.

use std::rc::Rc;
use std::time::Duration;

use tracing::warn;

use crate::shard::BrokerShard;

/// How often a shard looks for replicas whose logs went offline.
const OFFLINE_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// Reports this shard's replicas whose logs went offline (a failed write or fdatasync
/// poisoned the log, or it is corrupt) to the controller, each once: it moves their
/// leadership to other replicas and takes them out of the ISR and ELR (Kafka's offline log
/// directories, KIP-858, per partition). They stay offline until the broker restarts and
/// recovers them.
pub async fn report_offline_replicas(shard: Rc<BrokerShard>) {
    let mut reported: std::collections::BTreeSet<([u8; 16], i32)> = Default::default();
    while shard.sleep_unless_shutdown(OFFLINE_CHECK_INTERVAL).await {
        let new: Vec<([u8; 16], i32)> = shard
            .offline_replicas()
            .into_iter()
            .filter(|r| !reported.contains(r))
            .collect();
        if new.is_empty() {
            continue;
        }
        match crate::controller::report_offline_replicas(&shard, new.clone()).await {
            Ok(()) => {
                warn!(
                    shard = shard.id,
                    replicas = new.len(),
                    "replicas offline; the controller moves their leadership away"
                );
                reported.extend(new);
            }
            Err(e) => {
                warn!(shard = shard.id, error = %e.message, "cannot report offline replicas; retrying")
            }
        }
    }
}
