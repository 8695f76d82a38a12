//! Kafka request handlers: one file per API, each declaring the versions it supports. The
//! ApiVersions answer is built from those declarations ([`SUPPORTED`]).
//!
//! Handlers turn wire types into domain calls (storage, controller) and back; Kafka wire
//! types go no further than this module.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::conn::Reply;
use crate::protocol::{
    decode_body, decode_header, encode_response, peek_prefix, unsupported_frame, FrameError,
};
use crate::server::BrokerShard;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod write_txn_markers;

/// One API Keel answers, and its version range (inclusive).
#[derive(Debug, Clone, Copy)]
pub struct ApiSupport {
    pub key: ApiKey,
    /// The lowest version Keel accepts.
    pub min: i16,
    pub max: i16,
    /// The lowest version ApiVersions lists: `min` except where clients read the listed
    /// minimum as a feature flag (see [`ApiSupport::listed_from`]).
    pub listed_min: i16,
}

impl ApiSupport {
    pub const fn new(key: ApiKey, min: i16, max: i16) -> Self {
        ApiSupport {
            key,
            min,
            max,
            listed_min: min,
        }
    }

    /// Lists the API from `listed_min` while still refusing versions below `min`.
    pub const fn listed_from(self, listed_min: i16) -> Self {
        ApiSupport { listed_min, ..self }
    }
}

/// Every API Keel supports, from each handler's declaration.
pub const SUPPORTED: &[ApiSupport] = &[
    produce::SUPPORT,
    fetch::SUPPORT,
    list_offsets::SUPPORT,
    metadata::SUPPORT,
    api_versions::SUPPORT,
    create_topics::SUPPORT,
    delete_topics::SUPPORT,
    offset_for_leader_epoch::SUPPORT,
    describe_configs::SUPPORT,
    describe_configs::ALTER_SUPPORT,
    create_partitions::SUPPORT,
    describe_configs::INCREMENTAL_ALTER_SUPPORT,
    describe_cluster::SUPPORT,
    delete_records::SUPPORT,
    describe_log_dirs::SUPPORT,
    find_coordinator::SUPPORT,
    offset_commit::SUPPORT,
    offset_fetch::SUPPORT,
    offset_delete::SUPPORT,
    join_group::SUPPORT,
    heartbeat::SUPPORT,
    leave_group::SUPPORT,
    sync_group::SUPPORT,
    describe_groups::SUPPORT,
    list_groups::SUPPORT,
    delete_groups::SUPPORT,
    consumer_group_heartbeat::SUPPORT,
    consumer_group_describe::SUPPORT,
    init_producer_id::SUPPORT,
    add_partitions_to_txn::SUPPORT,
    add_offsets_to_txn::SUPPORT,
    end_txn::SUPPORT,
    txn_offset_commit::SUPPORT,
    describe_producers::SUPPORT,
    describe_transactions::SUPPORT,
    list_transactions::SUPPORT,
    write_txn_markers::SUPPORT,
];

pub fn support(key: ApiKey) -> Option<ApiSupport> {
    SUPPORTED.iter().copied().find(|s| s.key == key)
}

/// Decodes the body at the header's version, runs the handler and encodes its answer.
macro_rules! call {
    ($shard:expr, $hdr:expr, $api:expr, $body:expr, $req:ty, $handler:path) => {{
        let version = $hdr.request_api_version;
        let req: $req = match decode_body($api, version, &mut $body) {
            Ok(r) => r,
            Err(e) => return Reply::Close(e),
        };
        let resp = $handler(&$shard, &$hdr, req).await;
        reply(encode_response($api, version, $hdr.correlation_id, &resp))
    }};
}

fn reply(r: Result<Bytes, FrameError>) -> Reply {
    match r {
        Ok(f) => Reply::Frame(f),
        Err(e) => Reply::Close(e),
    }
}

/// Handles one request frame (header and body, without the size prefix). `client_host` is the
/// client's address as Kafka shows it to group members ("/127.0.0.1").
pub async fn handle_frame(shard: Rc<BrokerShard>, mut frame: Bytes, client_host: Rc<str>) -> Reply {
    use kafka_protocol::messages::*;
    let Some(prefix) = peek_prefix(&frame) else {
        return Reply::Close(FrameError::Header(
            "frame shorter than a request header".into(),
        ));
    };
    let Ok(api) = ApiKey::try_from(prefix.api_key) else {
        shard.counters.count_request(None);
        return Reply::FrameThenClose(unsupported_frame(prefix.correlation_id));
    };
    shard.counters.count_request(Some(api));
    // Versions listed but refused (Produce v0-2) are decoded so that the handler can answer
    // each partition with UNSUPPORTED_VERSION instead of closing the connection.
    let supported = support(api).filter(|s| (s.listed_min..=s.max).contains(&prefix.api_version));
    if api == ApiKey::ApiVersions && supported.is_none() {
        // Kafka's rule: an ApiVersions request at an unknown version gets a v0 answer with
        // UNSUPPORTED_VERSION and the full list, so the client can pick a version.
        return reply(encode_response(
            api,
            0,
            prefix.correlation_id,
            &api_versions::response(kafka_protocol::ResponseError::UnsupportedVersion.code()),
        ));
    }
    if supported.is_none() {
        return Reply::FrameThenClose(unsupported_frame(prefix.correlation_id));
    }
    let hdr: RequestHeader = match decode_header(api, prefix.api_version, &mut frame) {
        Ok(h) => h,
        Err(e) => return Reply::Close(e),
    };
    let mut body = frame;
    match api {
        ApiKey::Produce => {
            let version = hdr.request_api_version;
            let req: ProduceRequest = match decode_body(api, version, &mut body) {
                Ok(r) => r,
                Err(e) => return Reply::Close(e),
            };
            match produce::handle(&shard, &hdr, req).await {
                Some(resp) => reply(encode_response(api, version, hdr.correlation_id, &resp)),
                None => Reply::None,
            }
        }
        ApiKey::Fetch => call!(shard, hdr, api, body, FetchRequest, fetch::handle),
        ApiKey::ListOffsets => call!(
            shard,
            hdr,
            api,
            body,
            ListOffsetsRequest,
            list_offsets::handle
        ),
        ApiKey::Metadata => call!(shard, hdr, api, body, MetadataRequest, metadata::handle),
        ApiKey::ApiVersions => call!(
            shard,
            hdr,
            api,
            body,
            ApiVersionsRequest,
            api_versions::handle
        ),
        ApiKey::CreateTopics => call!(
            shard,
            hdr,
            api,
            body,
            CreateTopicsRequest,
            create_topics::handle
        ),
        ApiKey::DeleteTopics => call!(
            shard,
            hdr,
            api,
            body,
            DeleteTopicsRequest,
            delete_topics::handle
        ),
        ApiKey::OffsetForLeaderEpoch => {
            call!(
                shard,
                hdr,
                api,
                body,
                OffsetForLeaderEpochRequest,
                offset_for_leader_epoch::handle
            )
        }
        ApiKey::DescribeConfigs => call!(
            shard,
            hdr,
            api,
            body,
            DescribeConfigsRequest,
            describe_configs::handle
        ),
        ApiKey::AlterConfigs => call!(
            shard,
            hdr,
            api,
            body,
            AlterConfigsRequest,
            describe_configs::handle_alter
        ),
        ApiKey::IncrementalAlterConfigs => {
            call!(
                shard,
                hdr,
                api,
                body,
                IncrementalAlterConfigsRequest,
                describe_configs::handle_incremental
            )
        }
        ApiKey::CreatePartitions => call!(
            shard,
            hdr,
            api,
            body,
            CreatePartitionsRequest,
            create_partitions::handle
        ),
        ApiKey::DescribeCluster => call!(
            shard,
            hdr,
            api,
            body,
            DescribeClusterRequest,
            describe_cluster::handle
        ),
        ApiKey::DeleteRecords => call!(
            shard,
            hdr,
            api,
            body,
            DeleteRecordsRequest,
            delete_records::handle
        ),
        ApiKey::DescribeLogDirs => call!(
            shard,
            hdr,
            api,
            body,
            DescribeLogDirsRequest,
            describe_log_dirs::handle
        ),
        ApiKey::FindCoordinator => call!(
            shard,
            hdr,
            api,
            body,
            FindCoordinatorRequest,
            find_coordinator::handle
        ),
        ApiKey::OffsetCommit => call!(
            shard,
            hdr,
            api,
            body,
            OffsetCommitRequest,
            offset_commit::handle
        ),
        ApiKey::OffsetFetch => call!(
            shard,
            hdr,
            api,
            body,
            OffsetFetchRequest,
            offset_fetch::handle
        ),
        ApiKey::OffsetDelete => call!(
            shard,
            hdr,
            api,
            body,
            OffsetDeleteRequest,
            offset_delete::handle
        ),
        ApiKey::JoinGroup => {
            let version = hdr.request_api_version;
            let req: JoinGroupRequest = match decode_body(api, version, &mut body) {
                Ok(r) => r,
                Err(e) => return Reply::Close(e),
            };
            let resp = join_group::handle(&shard, &hdr, req, &client_host).await;
            reply(encode_response(api, version, hdr.correlation_id, &resp))
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let version = hdr.request_api_version;
            let req: ConsumerGroupHeartbeatRequest = match decode_body(api, version, &mut body) {
                Ok(r) => r,
                Err(e) => return Reply::Close(e),
            };
            let resp = consumer_group_heartbeat::handle(&shard, &hdr, req, &client_host).await;
            reply(encode_response(api, version, hdr.correlation_id, &resp))
        }
        ApiKey::ConsumerGroupDescribe => call!(
            shard,
            hdr,
            api,
            body,
            ConsumerGroupDescribeRequest,
            consumer_group_describe::handle
        ),
        ApiKey::AddPartitionsToTxn => call!(
            shard,
            hdr,
            api,
            body,
            AddPartitionsToTxnRequest,
            add_partitions_to_txn::handle
        ),
        ApiKey::AddOffsetsToTxn => call!(
            shard,
            hdr,
            api,
            body,
            AddOffsetsToTxnRequest,
            add_offsets_to_txn::handle
        ),
        ApiKey::EndTxn => call!(shard, hdr, api, body, EndTxnRequest, end_txn::handle),
        ApiKey::DescribeProducers => call!(
            shard,
            hdr,
            api,
            body,
            DescribeProducersRequest,
            describe_producers::handle
        ),
        ApiKey::DescribeTransactions => call!(
            shard,
            hdr,
            api,
            body,
            DescribeTransactionsRequest,
            describe_transactions::handle
        ),
        ApiKey::ListTransactions => call!(
            shard,
            hdr,
            api,
            body,
            ListTransactionsRequest,
            list_transactions::handle
        ),
        ApiKey::TxnOffsetCommit => call!(
            shard,
            hdr,
            api,
            body,
            TxnOffsetCommitRequest,
            txn_offset_commit::handle
        ),
        ApiKey::InitProducerId => call!(
            shard,
            hdr,
            api,
            body,
            InitProducerIdRequest,
            init_producer_id::handle
        ),
        ApiKey::SyncGroup => call!(shard, hdr, api, body, SyncGroupRequest, sync_group::handle),
        ApiKey::Heartbeat => call!(shard, hdr, api, body, HeartbeatRequest, heartbeat::handle),
        ApiKey::LeaveGroup => call!(
            shard,
            hdr,
            api,
            body,
            LeaveGroupRequest,
            leave_group::handle
        ),
        ApiKey::ListGroups => call!(
            shard,
            hdr,
            api,
            body,
            ListGroupsRequest,
            list_groups::handle
        ),
        ApiKey::DescribeGroups => call!(
            shard,
            hdr,
            api,
            body,
            DescribeGroupsRequest,
            describe_groups::handle
        ),
        ApiKey::DeleteGroups => call!(
            shard,
            hdr,
            api,
            body,
            DeleteGroupsRequest,
            delete_groups::handle
        ),
        ApiKey::WriteTxnMarkers => call!(
            shard,
            hdr,
            api,
            body,
            WriteTxnMarkersRequest,
            write_txn_markers::handle
        ),
        _ => Reply::FrameThenClose(unsupported_frame(hdr.correlation_id)),
    }
}

/// Topic name as a `TopicName` for responses.
pub fn topic_name(s: &str) -> kafka_protocol::messages::TopicName {
    kafka_protocol::messages::TopicName(kafka_protocol::protocol::StrBytes::from_string(
        s.to_string(),
    ))
}

pub fn str_bytes(s: impl Into<String>) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.into())
}
