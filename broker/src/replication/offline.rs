//! Offline replicas (Kafka's offline log directories, KIP-858, per partition): each shard
//! reports its partitions whose log a failed write or fdatasync poisoned, or that are corrupt,
//! to the controller, which moves their leadership away and takes them out of the ISR and ELR.

use std::rc::Rc;
use std::time::Duration;

use tracing::warn;

use crate::shard::BrokerShard;

/// After a report that did not reach the controller (shard 0's metadata node), the next try.
const RETRY: Duration = Duration::from_secs(1);

/// Reports this shard's replicas whose logs went offline (a failed write or fdatasync
/// poisoned the log, or it is corrupt) to the controller, each once: it moves their
/// leadership to other replicas and takes them out of the ISR and ELR (Kafka's offline log
/// directories, KIP-858, per partition). They stay offline until the broker restarts and
/// recovers them. Nothing polls: the task looks once the first image is installed, then each
/// time a log of the shard goes offline (`keel_storage::poison`), so an idle shard sleeps.
pub async fn report_offline_replicas(shard: Rc<BrokerShard>) {
    let wake = Rc::new(glommio::sync::Semaphore::new(0));
    {
        let wake = wake.clone();
        keel_storage::poison::set_offline_listener(Some(Rc::new(move || wake.signal(1))));
    }
    futures_lite::future::or(shard.ready.wait(), shard.shutdown.wait()).await;
    let mut reported: std::collections::BTreeSet<([u8; 16], i32)> = Default::default();
    loop {
        if shard.shutdown.is_fired() {
            break;
        }
        let new: Vec<([u8; 16], i32)> = shard
            .offline_replicas()
            .into_iter()
            .filter(|r| !reported.contains(r))
            .collect();
        let mut retry = false;
        if !new.is_empty() {
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
                    warn!(shard = shard.id, error = %e.message, "cannot report offline replicas; retrying");
                    retry = true;
                }
            }
        }
        let signalled = async {
            let _ = wake.acquire(1).await;
        };
        let stop = shard.shutdown.wait();
        if retry {
            let later = glommio::timer::sleep(RETRY);
            futures_lite::future::or(futures_lite::future::or(signalled, stop), later).await;
        } else {
            futures_lite::future::or(signalled, stop).await;
        }
        // One look covers every signal so far.
        while wake.try_acquire(1).unwrap_or(false) {}
    }
    keel_storage::poison::set_offline_listener(None);
}
