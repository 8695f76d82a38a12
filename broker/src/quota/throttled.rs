//! The answers a quota can throttle: every response type with a `throttle_time_ms` field
//! (the generated encoders leave it out at versions that lack it, so it may be set at any
//! version). Fetch also reports its record bytes (what the consumer byte quota charges) and
//! empties itself when throttled.

use kafka_protocol::messages::*;

/// A response a quota may throttle.
pub trait Throttled {
    /// Sets `throttle_time_ms` to at least `ms` (responses without the field ignore it).
    fn set_throttle_time_ms(&mut self, ms: i32);

    /// Record bytes the answer carries (what a consumer byte quota charges).
    fn record_bytes(&self) -> usize {
        0
    }

    /// Drops what a throttled answer may not carry (a Fetch's partitions).
    fn empty_for_throttle(&mut self) {}
}

macro_rules! throttle_time_field {
    ($($t:ty),* $(,)?) => {
        $(impl Throttled for $t {
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = self.throttle_time_ms.max(ms);
            }
        })*
    };
}

macro_rules! no_throttle_time_field {
    ($($t:ty),* $(,)?) => {
        $(impl Throttled for $t {
            fn set_throttle_time_ms(&mut self, _ms: i32) {}
        })*
    };
}

throttle_time_field!(
    ProduceResponse,
    ListOffsetsResponse,
    MetadataResponse,
    ApiVersionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    OffsetForLeaderEpochResponse,
    DescribeConfigsResponse,
    AlterConfigsResponse,
    CreatePartitionsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    DescribeClusterResponse,
    DescribeTopicPartitionsResponse,
    DeleteRecordsResponse,
    DescribeLogDirsResponse,
    FindCoordinatorResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    OffsetDeleteResponse,
    JoinGroupResponse,
    HeartbeatResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
    DeleteGroupsResponse,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupDescribeResponse,
    InitProducerIdResponse,
    AddPartitionsToTxnResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerResponse,
    DescribeUserScramCredentialsResponse,
    AlterUserScramCredentialsResponse,
    CreateAclsResponse,
    DescribeAclsResponse,
    DeleteAclsResponse,
    DescribeClientQuotasResponse,
    AlterClientQuotasResponse,
);

no_throttle_time_field!(
    WriteTxnMarkersResponse,
    SaslHandshakeResponse,
    SaslAuthenticateResponse
);

impl Throttled for FetchResponse {
    fn set_throttle_time_ms(&mut self, ms: i32) {
        self.throttle_time_ms = self.throttle_time_ms.max(ms);
    }

    fn record_bytes(&self) -> usize {
        self.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum()
    }

    /// Kafka's throttled Fetch: no error, no partitions.
    fn empty_for_throttle(&mut self) {
        self.responses.clear();
    }
}
