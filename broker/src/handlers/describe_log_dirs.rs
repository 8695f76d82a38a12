//! DescribeLogDirs (key 35), v0-4: the one log dir (`data.dir`, as an absolute path) with the
//! size of each requested partition this broker hosts (null topics = every partition whose
//! replicas include this node). Partitions this broker does not host, and unknown ones, are
//! left out, as Kafka does. `offset_lag` is 0 and `is_future_key` false: Keel holds only
//! current replicas (Kafka reports lag only for future replicas that move between dirs).
//!
//! Sizes are logical segment bytes (the `.log` files' lengths once closed; the active
//! segment's file may be longer on disk, padded to the O_DIRECT block). Each is read on the
//! shard that owns the partition's log, over the mesh; the handler's shard only joins them.
//! v4's `total_bytes`/`usable_bytes` come from statvfs of the data dir, -1 if that fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, RequestHeader,
};
use tracing::warn;

use super::{str_bytes, ApiSupport};
use crate::coordination::parking::join_all;
use crate::errors::NONE;
use crate::metadata::MetadataImage;
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeLogDirs, 0, 4);

/// Topic -> partitions, sorted and without duplicates.
type Wanted = BTreeMap<String, BTreeSet<i32>>;

pub async fn handle(
    shard: &Rc<BrokerShard>,
    hdr: &RequestHeader,
    req: DescribeLogDirsRequest,
    session: &Session,
) -> DescribeLogDirsResponse {
    // Kafka: without DESCRIBE on the cluster, CLUSTER_AUTHORIZATION_FAILED and no dirs.
    if !Authz::of(shard, session).cluster(Operation::Describe) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let image = shard.image();
    let hosted = hosted_partitions(&image, shard.config.node_id, req.topics);
    let sizes = gather_sizes(shard, &image, hosted).await;
    let mut topics = Vec::with_capacity(sizes.len());
    for (name, parts) in sizes {
        topics.push(
            DescribeLogDirsTopic::default()
                .with_name(super::topic_name(&name))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(index, size_bytes)| {
                            DescribeLogDirsPartition::default()
                                .with_partition_index(index)
                                .with_partition_size(i64::try_from(size_bytes).unwrap_or(i64::MAX))
                                .with_offset_lag(0)
                                .with_is_future_key(false)
                        })
                        .collect(),
                ),
        );
    }
    let data_dir = &shard.config.data_dir;
    let log_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.clone());
    // total_bytes/usable_bytes exist from v4.
    let (total_bytes, usable_bytes) = if hdr.request_api_version >= 4 {
        disk_bytes(data_dir).unwrap_or((-1, -1))
    } else {
        (-1, -1)
    };
    let result = DescribeLogDirsResult::default()
        .with_error_code(NONE)
        .with_log_dir(str_bytes(log_dir.to_string_lossy()))
        .with_topics(topics)
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes);
    DescribeLogDirsResponse::default()
        .with_error_code(NONE)
        .with_results(vec![result])
}

/// The requested partitions (all when `topics` is None) whose replicas include `node`.
fn hosted_partitions(
    image: &MetadataImage,
    node: i32,
    topics: Option<Vec<DescribableLogDirTopic>>,
) -> Wanted {
    let mut wanted = Wanted::new();
    match topics {
        None => {
            for t in image.topics.values() {
                for p in t.partitions.iter().filter(|p| p.replicas.contains(&node)) {
                    wanted.entry(t.name.clone()).or_default().insert(p.index);
                }
            }
        }
        Some(topics) => {
            for t in topics {
                let name = t.topic.0.to_string();
                for index in t.partitions {
                    if image
                        .partition(&name, index)
                        .is_some_and(|p| p.replicas.contains(&node))
                    {
                        wanted.entry(name.clone()).or_default().insert(index);
                    }
                }
            }
        }
    }
    wanted
}

/// Sizes of the wanted partitions, read on their owner shards; partitions whose log is not
/// open there (being created or deleted) are left out.
async fn gather_sizes(
    shard: &Rc<BrokerShard>,
    image: &MetadataImage,
    wanted: Wanted,
) -> BTreeMap<String, BTreeMap<i32, u64>> {
    let mut by_shard: BTreeMap<usize, Vec<(String, i32)>> = BTreeMap::new();
    for (name, parts) in wanted {
        for index in parts {
            if let Some(p) = image.partition(&name, index) {
                by_shard
                    .entry(p.shard as usize)
                    .or_default()
                    .push((name.clone(), index));
            }
        }
    }
    let mut calls = Vec::with_capacity(by_shard.len());
    for (target, parts) in by_shard {
        let shard = shard.clone();
        calls.push(async move {
            if target == shard.id {
                return sizes_on_owner(&shard, parts);
            }
            match shard
                .mesh
                .call(target, move |s| async move { sizes_on_owner(&s, parts) })
                .await
            {
                Ok(sizes) => sizes,
                Err(e) => {
                    warn!(target, error = %e, "cross-shard call failed; sizes left out");
                    Vec::new()
                }
            }
        });
    }
    let mut out: BTreeMap<String, BTreeMap<i32, u64>> = BTreeMap::new();
    for sizes in join_all(calls).await {
        for (name, index, size_bytes) in sizes {
            out.entry(name).or_default().insert(index, size_bytes);
        }
    }
    out
}

fn sizes_on_owner(shard: &BrokerShard, parts: Vec<(String, i32)>) -> Vec<(String, i32, u64)> {
    parts
        .into_iter()
        .filter_map(|(name, index)| {
            let size_bytes = shard.partition(&name, index)?.log.size_bytes();
            Some((name, index, size_bytes))
        })
        .collect()
}

/// (total, usable) bytes of the file system holding `dir`, as Kafka reports them (usable =
/// blocks available to unprivileged users). statvfs blocks, but only on file-system metadata,
/// and DescribeLogDirs is a rare admin request, not the data path.
// The statvfs fields are u64 on 64-bit Linux but u32 on some targets: the casts widen there.
#[allow(clippy::unnecessary_cast)]
fn disk_bytes(dir: &Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is a valid place for one statvfs.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        warn!(dir = %dir.display(), %error, "statvfs of the data dir failed");
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    let block_bytes = st.f_frsize as u64;
    let total = (st.f_blocks as u64).checked_mul(block_bytes)?;
    let usable = (st.f_bavail as u64).checked_mul(block_bytes)?;
    Some((i64::try_from(total).ok()?, i64::try_from(usable).ok()?))
}
