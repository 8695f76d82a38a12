//! A shard's timers: retention, compaction and the 50 ms ticker (shutdown requests, interval
//! syncs, disk-full retries). Each runs until the shard shuts down.

use std::rc::Rc;
use std::time::{Duration, Instant};

use keel_shard::stop_requested;
use keel_storage::FlushPolicy;
use tracing::{debug, error, info, warn};

use crate::shard::BrokerShard;

/// Applies retention to every partition this shard owns, and expires their idempotent
/// producers (`producer.id.expiration.ms`), every `log.retention.check.interval.ms`, until
/// shutdown.
pub async fn retention(shard: Rc<BrokerShard>) {
    let interval = Duration::from_millis(shard.config.retention_check_interval_ms());
    loop {
        if !shard.sleep_unless_shutdown(interval).await {
            return;
        }
        let now_ms = shard.clock.now_ms();
        for part in shard.all_partitions() {
            match part.log.enforce_retention(now_ms).await {
                Ok(out) if out.segments_deleted > 0 => info!(
                    shard = shard.id,
                    topic = %part.topic,
                    partition = part.index,
                    segments = out.segments_deleted,
                    bytes = out.bytes_deleted,
                    log_start_offset = out.log_start_offset.0,
                    "retention deleted segments"
                ),
                Ok(_) => {}
                Err(e) => {
                    warn!(shard = shard.id, topic = %part.topic, partition = part.index, error = %e, "retention failed")
                }
            }
            let expired = part.log.expire_producers(now_ms);
            if expired > 0 {
                debug!(shard = shard.id, topic = %part.topic, partition = part.index, expired, "expired idempotent producers");
            }
            glommio::executor().yield_if_needed().await;
        }
    }
}

/// Compacts the `cleanup.policy=compact` partitions this shard owns, every
/// `log.cleaner.backoff.ms`, until shutdown. Runs in the low-share task queue and yields
/// inside each pass.
pub async fn compaction(shard: Rc<BrokerShard>) {
    let interval = Duration::from_millis(shard.config.cleaner_backoff_ms());
    let map_bytes = shard.config.cleaner_map_bytes();
    loop {
        if !shard.sleep_unless_shutdown(interval).await {
            return;
        }
        for part in shard.all_partitions() {
            if !part.log.config().cleanup_compact {
                continue;
            }
            let now_ms = shard.clock.now_ms();
            let started = Instant::now();
            match part.log.compact(now_ms, map_bytes).await {
                Ok(Some(out)) => {
                    shard
                        .counters
                        .note_compaction(out.bytes_in, started.elapsed());
                    info!(
                        shard = shard.id,
                        topic = %part.topic,
                        partition = part.index,
                        segments_in = out.segments_in,
                        segments_out = out.segments_out,
                        bytes_in = out.bytes_in,
                        bytes_out = out.bytes_out,
                        records_dropped = out.records_dropped,
                        cleaned_up_to = out.cleaned_up_to.0,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "compacted"
                    );
                    // Readers past the swapped range are unaffected; waiting fetches
                    // need no wake-up.
                }
                Ok(None) => {}
                Err(e) => {
                    warn!(shard = shard.id, topic = %part.topic, partition = part.index, error = %e, "compaction failed")
                }
            }
            glommio::executor().yield_if_needed().await;
        }
    }
}

/// The ticker's period while some log needs it.
const TICK: Duration = Duration::from_millis(50);
/// The ticker's period while no log needs it (every 20 ticks of [`TICK`]).
const IDLE_TICK: Duration = Duration::from_millis(1000);

/// Periodic work: notice that the shards are to stop (`startup::drive_shutdown`), sync flush.policy=interval logs, retry the
/// writes of disk-full logs.
///
/// It ticks every [`TICK`] while a log of the shard needs it (flush.policy=interval, or a
/// disk-full log to retry), else every [`IDLE_TICK`], so that an idle broker sleeps: shutdown
/// reaches the shards over the mesh (`startup::drive_shutdown`), and this tick's look at the
/// stop flag is only a fallback.
pub async fn ticker(shard: Rc<BrokerShard>) {
    let mut tick: u64 = 0;
    let mut period = TICK;
    loop {
        if !shard.sleep_unless_shutdown(period).await || stop_requested() {
            shard.shutdown.fire();
            return;
        }
        tick = tick.wrapping_add(period.as_millis() as u64 / TICK.as_millis() as u64);
        let parts = shard.all_partitions();
        period = if parts
            .iter()
            .any(|p| p.log.config().flush_policy == FlushPolicy::Interval || p.log.is_disk_full())
        {
            TICK
        } else {
            IDLE_TICK
        };
        for part in parts {
            // A disk-full log retries its staged writes once a second.
            if tick.is_multiple_of(20) && part.log.is_disk_full() && !part.syncing.get() {
                part.syncing.set(true);
                glommio::spawn_local(async move {
                    part.log.retry_stalled().await;
                    part.syncing.set(false);
                })
                .detach();
                continue;
            }
            if part.log.config().flush_policy != FlushPolicy::Interval || part.syncing.get() {
                continue;
            }
            if part.last_sync.get().elapsed() >= Duration::from_millis(part.flush_ms.get()) {
                part.syncing.set(true);
                let shard_id = shard.id;
                glommio::spawn_local(async move {
                    if let Err(e) = part.log.sync().await {
                        error!(shard = shard_id, topic = %part.topic, partition = part.index, error = %e, "periodic sync failed");
                    }
                    part.last_sync.set(Instant::now());
                    part.syncing.set(false);
                })
                .detach();
            }
        }
    }
}
