//! Sizing the broker's I/O from the disk's measured properties: the io-properties file that
//! `keel-tune iotune` writes (`io.properties.file`; by default `DATA_DIR/io-properties.toml`
//! when it exists). Read once at start, before the shards launch; nothing here probes the disk.
//!
//! What is derived (each only when the operator did not set it: explicit settings win):
//! - `io.latency.goal.us`, glommio's preempt timer: the disk's median fdatasync time, within
//!   0.5 ms (Seastar's task quota) and 10 ms. Reaping completions much more often than the disk
//!   completes a sync buys nothing; much less often delays every acknowledgement behind it.
//! - `log.write.buffer.bytes`: what the disk writes sequentially in one latency goal, as a
//!   power of two within 128 KiB and 4 MiB, so one DMA write completes in about one goal.
//! - `log.write.inflight.shard.max`: the queue depth at which random-read IOPS saturate,
//!   shared among the shards, within 2 and 64: past it more writes only queue in the device.
//! - `io.memory.bytes`: room in the registered io_uring memory for every write in flight
//!   (glommio allocates DMA buffers there, on the heap when full), within the default 4 MiB
//!   and 64 MiB. startup.rs may still shrink it to fit RLIMIT_MEMLOCK.
//!
//! A file measured on another filesystem than the data dir's, or carrying a note (measured
//! without O_DIRECT, or on tmpfs), is used with a warning.
//! A file that is named but missing, unreadable or malformed is an error at start, as a bad
//! setting is in Kafka: sizing the I/O from half a file would be worse than from none.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use keel_tuning::iotune::{IoProperties, FILE_NAME};
use tracing::{info, warn};

use crate::config::BrokerConfig;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The I/O settings derived from one io-properties file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived {
    pub io_latency_goal_us: u64,
    pub write_buffer_bytes: u64,
    pub write_inflight_shard_max: usize,
    pub io_memory_bytes: usize,
}

/// The sizes `props` call for on a broker of `shards` shards.
pub fn derive(props: &IoProperties, shards: usize) -> Derived {
    let io_latency_goal_us = props.fdatasync_p50_us.clamp(500, 10_000);
    let per_goal = props.write_bandwidth.saturating_mul(io_latency_goal_us) / 1_000_000;
    let write_buffer_bytes = prev_power_of_two(per_goal).clamp(128 * KIB, 4 * MIB);
    let write_inflight_shard_max = (props.saturating_depth() as usize)
        .div_ceil(shards.max(1))
        .clamp(2, 64);
    let io_memory_bytes =
        (write_buffer_bytes * write_inflight_shard_max as u64).clamp(4 * MIB, 64 * MIB);
    Derived {
        io_latency_goal_us,
        write_buffer_bytes,
        write_inflight_shard_max,
        io_memory_bytes: io_memory_bytes as usize,
    }
}

fn prev_power_of_two(v: u64) -> u64 {
    if v == 0 {
        0
    } else {
        1 << (63 - v.leading_zeros())
    }
}

/// The io-properties file to read: `None` when `io.properties.file` is `off`, or is unset and
/// the data dir holds none.
fn locate(config: &BrokerConfig) -> Option<PathBuf> {
    match config.io_properties_file.as_str() {
        "off" | "none" => None,
        "" => Some(config.data_dir.join(FILE_NAME)).filter(|p| p.exists()),
        named => Some(PathBuf::from(named)),
    }
}

/// Reads the io-properties file, if any, and sets every I/O size the operator left unset;
/// logs what it derived and from which file. Errors on a named but bad file.
pub fn configure(config: &mut BrokerConfig, shards: usize) -> Result<()> {
    let Some(path) = locate(config) else {
        if config.io_properties_file.is_empty() {
            info!(
                "no io properties ({} not found; `keel-tune iotune --data-dir {}` writes it): I/O sized by the settings' defaults",
                config.data_dir.join(FILE_NAME).display(),
                config.data_dir.display()
            );
        }
        return Ok(());
    };
    let props = match IoProperties::load(&path) {
        Ok(p) => p,
        Err(e) => bail!(
            "io.properties.file: {e}; re-run `keel-tune iotune`, fix the file, or set io.properties.file=off"
        ),
    };
    let derived = derive(&props, shards);
    let kept = apply(config, &derived);
    let kept = if kept.is_empty() {
        String::new()
    } else {
        format!("; set explicitly, kept: {}", kept.join(", "))
    };
    info!(
        "I/O sized from {} (measured {} on {} {}): io.latency.goal.us={} log.write.buffer.bytes={} log.write.inflight.shard.max={} io.memory.bytes={}{kept}",
        path.display(),
        props.measured_at,
        props.device,
        props.mountpoint,
        config.io_latency_goal_us,
        config.write_buffer_bytes,
        config.write_inflight_shard_max,
        config.io_memory_bytes,
    );
    if !props.direct_io || !props.note.is_empty() {
        warn!(
            "io properties in {}: {} (direct_io={}): the sizes derived from them may not fit the disk",
            path.display(),
            props.note,
            props.direct_io
        );
    }
    if !same_mount(&path, &props, &config.data_dir) {
        warn!(
            "io properties in {} were measured on {}, not under the data dir {}",
            path.display(),
            props.data_dir,
            config.data_dir.display()
        );
    }
    Ok(())
}

/// Sets each derived value the operator did not set; returns the names that were kept.
fn apply(config: &mut BrokerConfig, d: &Derived) -> Vec<&'static str> {
    let mut kept = Vec::new();
    let mut set = |config: &mut BrokerConfig, key: &'static str, value: u64| -> bool {
        if config.explicit.contains_key(key) {
            kept.push(key);
            return false;
        }
        config.values.insert(key.to_string(), value.to_string());
        true
    };
    if set(config, "io.latency.goal.us", d.io_latency_goal_us) {
        config.io_latency_goal_us = d.io_latency_goal_us;
    }
    if set(config, "log.write.buffer.bytes", d.write_buffer_bytes) {
        config.write_buffer_bytes = d.write_buffer_bytes;
    }
    if set(
        config,
        "log.write.inflight.shard.max",
        d.write_inflight_shard_max as u64,
    ) {
        config.write_inflight_shard_max = d.write_inflight_shard_max;
    }
    if set(config, "io.memory.bytes", d.io_memory_bytes as u64) {
        config.io_memory_bytes = d.io_memory_bytes;
    }
    kept
}

/// Whether the file describes the disk the data dir is on: same device as the directory it
/// was measured in, when that still exists; assumed so when it cannot be told.
fn same_mount(path: &Path, props: &IoProperties, data_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let measured = dev(Path::new(&props.data_dir)).or_else(|| dev(path.parent()?));
    match (measured, dev(data_dir)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_tuning::iotune::DepthIops;

    fn props(write_bandwidth: u64, fdatasync_p50_us: u64, iops: [u64; 4]) -> IoProperties {
        IoProperties {
            mountpoint: "/".into(),
            device: "nvme0n1".into(),
            filesystem: "xfs".into(),
            data_dir: "/data".into(),
            direct_io: true,
            note: String::new(),
            measured_at_unix_s: 0,
            measured_at: "1970-01-01T00:00:00Z".into(),
            duration_ms: 10_000,
            file_bytes: 1 << 30,
            block_bytes: 4096,
            sequential_block_bytes: 128 * 1024,
            sequential_depth: 4,
            read_iops: *iops.iter().max().unwrap(),
            read_bandwidth: write_bandwidth,
            write_iops: iops[2],
            write_iops_depth: 16,
            write_bandwidth,
            fdatasync_p50_us,
            fdatasync_p99_us: fdatasync_p50_us.saturating_mul(2),
            fdatasync_max_us: fdatasync_p50_us.saturating_mul(3),
            fdatasync_samples: 100,
            random_read: [1, 4, 16, 64]
                .iter()
                .zip(iops)
                .map(|(&depth, iops)| DepthIops { depth, iops })
                .collect(),
        }
    }

    #[test]
    fn fast_nvme_and_slow_vm_disk() {
        // 2 GB/s, 60 us syncs, IOPS saturating at depth 64.
        let nvme = derive(
            &props(2_000_000_000, 60, [12_000, 45_000, 160_000, 400_000]),
            4,
        );
        assert_eq!(
            nvme,
            Derived {
                io_latency_goal_us: 500,
                write_buffer_bytes: 512 * KIB,
                write_inflight_shard_max: 16,
                io_memory_bytes: 8 << 20,
            }
        );
        // 150 MB/s, 4 ms syncs, saturated at depth 4.
        let vm = derive(&props(150_000_000, 4_000, [2_000, 7_000, 7_200, 7_100]), 2);
        assert_eq!(
            vm,
            Derived {
                io_latency_goal_us: 4_000,
                write_buffer_bytes: 512 * KIB,
                write_inflight_shard_max: 2,
                io_memory_bytes: 4 << 20,
            }
        );
    }

    #[test]
    fn bounds_hold_for_extreme_disks() {
        let tiny = derive(&props(1, 1, [1, 1, 1, 1]), 64);
        assert_eq!(tiny.write_buffer_bytes, 128 * KIB);
        assert_eq!(tiny.io_latency_goal_us, 500);
        assert_eq!(tiny.write_inflight_shard_max, 2);
        let huge = derive(&props(u64::MAX, u64::MAX, [1, 2, 3, u64::MAX]), 1);
        assert_eq!(huge.write_buffer_bytes, 4 * MIB);
        assert_eq!(huge.io_latency_goal_us, 10_000);
        assert_eq!(huge.write_inflight_shard_max, 64);
        assert_eq!(huge.io_memory_bytes as u64, 64 * MIB);
    }
}
