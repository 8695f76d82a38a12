//! Kafka request handlers: one file per API, each declaring the versions it supports. One
//! table ([`api_table!`]) lists them: the ApiVersions answer ([`SUPPORTED`]) and the dispatch
//! ([`call`]) are both built from it.
//!
//! Handlers turn wire types into domain calls (storage, controller) and back; Kafka wire
//! types go no further than this module.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};

use crate::frontend::framing::{decode_body, encode_response, Frame, FrameError};
use crate::frontend::throttle::Charge;
use crate::security::Session;
use crate::shard::BrokerShard;

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod alter_client_quotas;
pub mod alter_configs;
pub mod alter_partition_reassignments;
pub mod alter_user_scram_credentials;
pub mod api_versions;
pub mod consumer_group_describe;
pub mod consumer_group_heartbeat;
pub mod create_acls;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_acls;
pub mod delete_groups;
pub mod delete_records;
pub mod delete_topics;
pub mod describe_acls;
pub mod describe_client_quotas;
pub mod describe_cluster;
pub mod describe_configs;
pub mod describe_groups;
pub mod describe_log_dirs;
pub mod describe_producers;
pub mod describe_topic_partitions;
pub mod describe_transactions;
pub mod describe_user_scram_credentials;
pub mod elect_leaders;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod incremental_alter_configs;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_groups;
pub mod list_offsets;
pub mod list_partition_reassignments;
pub mod list_transactions;
pub mod metadata;
pub mod offset_commit;
pub mod offset_delete;
pub mod offset_fetch;
pub mod offset_for_leader_epoch;
pub mod produce;
pub mod sasl_authenticate;
pub mod sasl_handshake;
pub mod sync_group;
pub mod txn_offset_commit;
pub mod unregister_broker;
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

/// The one table of the APIs Keel answers: each row names the API key, the handler's declared
/// version range, the request type and how the handler is called (`session`: shard, header,
/// request and the connection's [`Session`] (its principal, the client's address,
/// the listener the request came in on); `body`: the handler decodes the body it is given
/// whole, is given the session too, and may answer nothing, as Produce does for acks=0).
/// Every call is charged to the client quotas that apply ([`Charge`]): its handler's time,
/// Produce's bytes, a consumer Fetch's answer; a throttled answer carries
/// `throttle_time_ms` and mutes the connection.
/// [`SUPPORTED`] (the ApiVersions answer) and [`call`] (the dispatch) are both generated from
/// it, so they cannot disagree.
macro_rules! api_table {
    ($($key:ident: $support:expr => $kind:ident $handler:path, $req:ident;)*) => {
        /// Every API Keel supports, from each handler's declaration.
        pub const SUPPORTED: &[ApiSupport] = &[$($support),*];

        /// Decodes the body of a request whose API and version the caller has checked
        /// against [`SUPPORTED`], runs its handler and encodes the answer (`None`: no answer
        /// is sent).
        pub async fn call(
            shard: &Rc<BrokerShard>,
            hdr: &RequestHeader,
            api: ApiKey,
            body: &mut Bytes,
            session: &Session,
        ) -> Result<Option<Frame>, FrameError> {
            let version = hdr.request_api_version;
            match api {
                $(ApiKey::$key => {
                    let (mut answer, charge) =
                        api_table!(@call $kind $handler, $req, api, version, shard, hdr, body, session);
                    charge.finish(shard, session, answer.as_mut());
                    match answer {
                        Some(resp) => encode_response(api, version, hdr.correlation_id, &resp).map(Some),
                        None => Ok(None),
                    }
                })*
                _ => Err(FrameError::Header(format!("no handler for {api:?}"))),
            }
        }

        /// Decodes a request body as its handler would and drops it (for Produce, also splits
        /// its records as [`produce::take_records`] does): what a hostile body reaches before
        /// any state is touched. The fuzz targets' entry point.
        pub fn decode_request(api: ApiKey, version: i16, mut body: Bytes) -> Result<(), FrameError> {
            // Produce's row below is shadowed by its own arm.
            #[allow(unreachable_patterns)]
            match api {
                ApiKey::Produce => {
                    let mut cursor = body.clone();
                    let req: kafka_protocol::messages::ProduceRequest =
                        decode_body(api, version, &mut cursor)?;
                    drop(cursor);
                    produce::take_records(req, body);
                    Ok(())
                }
                $(ApiKey::$key => {
                    decode_body::<kafka_protocol::messages::$req>(api, version, &mut body).map(drop)
                })*
                _ => Err(FrameError::Header(format!("no handler for {api:?}"))),
            }
        }

        /// The table's rows as (key, declared support), for the test that they agree.
        #[cfg(test)]
        fn table_rows() -> Vec<(ApiKey, ApiSupport)> {
            vec![$((ApiKey::$key, $support)),*]
        }
    };
    (@call session $h:path, $req:ident, $api:ident, $v:ident, $shard:ident, $hdr:ident, $body:ident, $session:ident) => {{
        let mut req: kafka_protocol::messages::$req = decode_body($api, $v, $body)?;
        let mut charge = Charge::begin($shard, $hdr, $session, $api, &mut req, 0);
        let answer = charge.run($h($shard, $hdr, req, $session)).await;
        (Some(answer), charge)
    }};
    (@call body $h:path, $req:ident, $api:ident, $v:ident, $shard:ident, $hdr:ident, $body:ident, $session:ident) => {{
        let mut charge = Charge::begin($shard, $hdr, $session, $api, &mut (), $body.len());
        let answer = charge.run($h($shard, $hdr, std::mem::take($body), $session)).await?;
        (answer, charge)
    }};
}

api_table! {
    Produce: produce::SUPPORT => body produce::handle_body, ProduceRequest;
    Fetch: fetch::SUPPORT => session fetch::handle, FetchRequest;
    ListOffsets: list_offsets::SUPPORT => session list_offsets::handle, ListOffsetsRequest;
    Metadata: metadata::SUPPORT => session metadata::handle, MetadataRequest;
    ApiVersions: api_versions::SUPPORT => session api_versions::handle, ApiVersionsRequest;
    CreateTopics: create_topics::SUPPORT => session create_topics::handle, CreateTopicsRequest;
    DeleteTopics: delete_topics::SUPPORT => session delete_topics::handle, DeleteTopicsRequest;
    OffsetForLeaderEpoch: offset_for_leader_epoch::SUPPORT
        => session offset_for_leader_epoch::handle, OffsetForLeaderEpochRequest;
    DescribeConfigs: describe_configs::SUPPORT
        => session describe_configs::handle, DescribeConfigsRequest;
    AlterConfigs: alter_configs::SUPPORT => session alter_configs::handle, AlterConfigsRequest;
    CreatePartitions: create_partitions::SUPPORT
        => session create_partitions::handle, CreatePartitionsRequest;
    ElectLeaders: elect_leaders::SUPPORT => session elect_leaders::handle, ElectLeadersRequest;
    IncrementalAlterConfigs: incremental_alter_configs::SUPPORT
        => session incremental_alter_configs::handle, IncrementalAlterConfigsRequest;
    DescribeCluster: describe_cluster::SUPPORT
        => session describe_cluster::handle, DescribeClusterRequest;
    DescribeTopicPartitions: describe_topic_partitions::SUPPORT
        => session describe_topic_partitions::handle, DescribeTopicPartitionsRequest;
    DeleteRecords: delete_records::SUPPORT => session delete_records::handle, DeleteRecordsRequest;
    DescribeLogDirs: describe_log_dirs::SUPPORT
        => session describe_log_dirs::handle, DescribeLogDirsRequest;
    FindCoordinator: find_coordinator::SUPPORT
        => session find_coordinator::handle, FindCoordinatorRequest;
    OffsetCommit: offset_commit::SUPPORT => session offset_commit::handle, OffsetCommitRequest;
    OffsetFetch: offset_fetch::SUPPORT => session offset_fetch::handle, OffsetFetchRequest;
    OffsetDelete: offset_delete::SUPPORT => session offset_delete::handle, OffsetDeleteRequest;
    JoinGroup: join_group::SUPPORT => session join_group::handle, JoinGroupRequest;
    Heartbeat: heartbeat::SUPPORT => session heartbeat::handle, HeartbeatRequest;
    LeaveGroup: leave_group::SUPPORT => session leave_group::handle, LeaveGroupRequest;
    SyncGroup: sync_group::SUPPORT => session sync_group::handle, SyncGroupRequest;
    DescribeGroups: describe_groups::SUPPORT => session describe_groups::handle, DescribeGroupsRequest;
    ListGroups: list_groups::SUPPORT => session list_groups::handle, ListGroupsRequest;
    DeleteGroups: delete_groups::SUPPORT => session delete_groups::handle, DeleteGroupsRequest;
    ConsumerGroupHeartbeat: consumer_group_heartbeat::SUPPORT
        => session consumer_group_heartbeat::handle, ConsumerGroupHeartbeatRequest;
    ConsumerGroupDescribe: consumer_group_describe::SUPPORT
        => session consumer_group_describe::handle, ConsumerGroupDescribeRequest;
    InitProducerId: init_producer_id::SUPPORT
        => session init_producer_id::handle, InitProducerIdRequest;
    AddPartitionsToTxn: add_partitions_to_txn::SUPPORT
        => session add_partitions_to_txn::handle, AddPartitionsToTxnRequest;
    AddOffsetsToTxn: add_offsets_to_txn::SUPPORT
        => session add_offsets_to_txn::handle, AddOffsetsToTxnRequest;
    EndTxn: end_txn::SUPPORT => session end_txn::handle, EndTxnRequest;
    TxnOffsetCommit: txn_offset_commit::SUPPORT
        => session txn_offset_commit::handle, TxnOffsetCommitRequest;
    DescribeProducers: describe_producers::SUPPORT
        => session describe_producers::handle, DescribeProducersRequest;
    DescribeTransactions: describe_transactions::SUPPORT
        => session describe_transactions::handle, DescribeTransactionsRequest;
    ListTransactions: list_transactions::SUPPORT
        => session list_transactions::handle, ListTransactionsRequest;
    WriteTxnMarkers: write_txn_markers::SUPPORT
        => session write_txn_markers::handle, WriteTxnMarkersRequest;
    AlterPartitionReassignments: alter_partition_reassignments::SUPPORT
        => session alter_partition_reassignments::handle, AlterPartitionReassignmentsRequest;
    ListPartitionReassignments: list_partition_reassignments::SUPPORT
        => session list_partition_reassignments::handle, ListPartitionReassignmentsRequest;
    UnregisterBroker: unregister_broker::SUPPORT
        => session unregister_broker::handle, UnregisterBrokerRequest;
    DescribeUserScramCredentials: describe_user_scram_credentials::SUPPORT
        => session describe_user_scram_credentials::handle, DescribeUserScramCredentialsRequest;
    AlterUserScramCredentials: alter_user_scram_credentials::SUPPORT
        => session alter_user_scram_credentials::handle, AlterUserScramCredentialsRequest;
    CreateAcls: create_acls::SUPPORT => session create_acls::handle, CreateAclsRequest;
    DescribeAcls: describe_acls::SUPPORT => session describe_acls::handle, DescribeAclsRequest;
    DeleteAcls: delete_acls::SUPPORT => session delete_acls::handle, DeleteAclsRequest;
    DescribeClientQuotas: describe_client_quotas::SUPPORT
        => session describe_client_quotas::handle, DescribeClientQuotasRequest;
    AlterClientQuotas: alter_client_quotas::SUPPORT
        => session alter_client_quotas::handle, AlterClientQuotasRequest;
    SaslHandshake: sasl_handshake::SUPPORT
        => session sasl_handshake::handle, SaslHandshakeRequest;
    SaslAuthenticate: sasl_authenticate::SUPPORT
        => session sasl_authenticate::handle, SaslAuthenticateRequest;
}

pub fn support(key: ApiKey) -> Option<ApiSupport> {
    SUPPORTED.iter().copied().find(|s| s.key == key)
}

pub use crate::frontend::framing::{str_bytes, topic_name};

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row's key is the key its handler declares, and no API has two rows.
    #[test]
    fn table_rows_agree_with_declarations() {
        let rows = table_rows();
        for (key, support) in &rows {
            assert_eq!(*key, support.key, "row {key:?} declares {:?}", support.key);
            assert!(support.listed_min <= support.min && support.min <= support.max);
        }
        let mut keys: Vec<i16> = rows.iter().map(|(k, _)| *k as i16).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), rows.len(), "an API has two rows");
    }
}
