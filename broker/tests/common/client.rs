//! A minimal blocking Kafka client for tests that need exact control of request fields
//! (fetch long-poll, byte limits, sessions): keel-client's blocking transport, with the
//! record batches of keel-vocab's codec.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use keel_client::blocking::{Conn, ConnectOptions};
use keel_vocab::records::{
    end_txn_marker_batch, for_each_record_of, frame_batch, next_fetched_batch, put_record,
    BatchBuilder, BatchFields, Codec, ProducerStamp,
};

pub struct Client {
    conn: Conn,
}

impl Client {
    pub fn connect(addr: &str) -> Client {
        let options = ConnectOptions {
            client_id: "keel-test".to_string(),
            connect_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            response_bytes_max: 256 * 1024 * 1024,
            security: Default::default(),
        };
        Client {
            conn: Conn::connect(addr, options).unwrap(),
        }
    }

    pub fn send<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        self.conn.request(api, version, req).unwrap()
    }

    /// [`Client::send`] that returns the error (a closed connection) instead of panicking.
    pub fn try_send<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Result<Resp, String> {
        self.conn
            .request(api, version, req)
            .map_err(|e| e.to_string())
    }
}

pub fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// Records with these values (keys k0, k1, ...), uncompressed, one batch per record at base
/// offsets 0, 1, ... (as the tests have always sent them).
pub fn batch(values: &[&[u8]]) -> Bytes {
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let timestamp = 1_700_000_000_000 + i as i64;
        let mut section = bytes::BytesMut::new();
        let key = format!("k{i}");
        put_record(&mut section, 0, 0, Some(key.as_bytes()), Some(v), &[]);
        let fields = BatchFields {
            base_offset: i as i64,
            leader_epoch: 0,
            attributes: 0,
            last_offset_delta: 0,
            base_timestamp: timestamp,
            max_timestamp: timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count: 1,
        };
        out.extend_from_slice(&frame_batch(&fields, &section));
    }
    Bytes::from(out)
}

/// One uncompressed batch from producer `producer_id` at `producer_epoch` (transactional or
/// idempotent), its records numbered from `base_sequence`, wrapping after `i32::MAX` as Kafka's
/// sequences do; keys k0, k1, ...
pub fn producer_batch(
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    transactional: bool,
    values: &[&[u8]],
) -> Bytes {
    let mut b = BatchBuilder::new().with_leader_epoch(0);
    for (i, v) in values.iter().enumerate() {
        let key = format!("k{i}");
        b.push(1_700_000_000_000 + i as i64, Some(key.as_bytes()), v);
    }
    let stamp = ProducerStamp {
        producer_id,
        epoch: producer_epoch,
        base_sequence,
        transactional,
    };
    b.finish_stamped(Codec::None, Some(stamp)).unwrap()
}

/// Kafka's `EndTransactionMarker` as the coordinator writes it: a transactional control batch
/// of one record, key = version 0 + type (0 abort, 1 commit), value = version 0 +
/// `coordinator_epoch`.
pub fn marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> Bytes {
    end_txn_marker_batch(
        producer_id,
        producer_epoch,
        commit,
        coordinator_epoch,
        1_700_000_000_000,
        0,
    )
}

/// (offset, value) of every record in a fetch response's records, control records included.
pub fn values(records: &Option<Bytes>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let Some(b) = records else { return out };
    let mut pos = 0;
    while let Some((header, batch)) = next_fetched_batch(b, &mut pos).unwrap() {
        for_each_record_of(&header, batch, |r| {
            out.push((r.offset, r.value.map(<[u8]>::to_vec).unwrap_or_default()))
        })
        .unwrap();
    }
    assert_eq!(pos, b.len(), "a partial batch at the end of the records");
    out
}

pub fn produce(c: &mut Client, name: &str, partition: i32, batch: Bytes) -> i64 {
    let p = try_produce(c, name, partition, batch);
    assert_eq!(p.error_code, 0, "produce failed: {p:?}");
    p.base_offset
}

/// An acks=all Produce request (5 s timeout) of one topic: each partition's index and batch.
pub fn produce_request(name: &str, parts: Vec<(i32, Bytes)>) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(name))
            .with_partition_data(
                parts
                    .into_iter()
                    .map(|(index, batch)| {
                        produce_request::PartitionProduceData::default()
                            .with_index(index)
                            .with_records(Some(batch))
                    })
                    .collect(),
            )])
}

/// Produces one partition's batch (acks=all) and returns the partition's answer, errors and
/// all.
pub fn try_produce(
    c: &mut Client,
    name: &str,
    partition: i32,
    batch: Bytes,
) -> produce_response::PartitionProduceResponse {
    let req = produce_request(name, vec![(partition, batch)]);
    let resp: ProduceResponse = c.send(ApiKey::Produce, 9, &req);
    resp.responses[0].partition_responses[0].clone()
}

pub fn create_topic(c: &mut Client, name: &str, partitions: i32) {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(5000)
        .with_topics(vec![create_topics_request::CreatableTopic::default()
            .with_name(topic(name))
            .with_num_partitions(partitions)
            .with_replication_factor(1)]);
    let resp: CreateTopicsResponse = c.send(ApiKey::CreateTopics, 7, &req);
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
}

/// ListOffsets for one partition at `timestamp` (-1 latest, -2 earliest, else milliseconds),
/// as a consumer asks it (replica -1, no leader epoch, read_uncommitted unless set after).
pub fn list_offsets_request(name: &str, partition: i32, timestamp: i64) -> ListOffsetsRequest {
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(topic(name))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp),
            ])])
}

pub fn fetch_request(
    name: &str,
    parts: &[(i32, i64, i32)],
    max_wait_ms: i32,
    min_bytes: i32,
    max_bytes: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(topic(name))
            .with_partitions(
                parts
                    .iter()
                    .map(|&(p, offset, max)| {
                        fetch_request::FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(max)
                    })
                    .collect(),
            )])
}
