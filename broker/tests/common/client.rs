//! A minimal blocking Kafka client over `kafka-protocol`, for tests that need exact control
//! of request fields (fetch long-poll, byte limits, sessions).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

pub struct Client {
    stream: TcpStream,
    correlation_id: i32,
}

impl Client {
    pub fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Client {
            stream,
            correlation_id: 0,
        }
    }

    pub fn send<Req: Encodable + HeaderVersion, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("keel-test")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, Req::header_version(version))
            .unwrap();
        req.encode(&mut buf, version).unwrap();
        let size = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).unwrap();
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).unwrap();
        let mut body = Bytes::from(body);
        let resp_header_version = api.response_header_version(version);
        let rh = ResponseHeader::decode(&mut body, resp_header_version).unwrap();
        assert_eq!(rh.correlation_id, self.correlation_id);
        Resp::decode(&mut body, version).unwrap()
    }
}

pub fn topic(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// One uncompressed batch of records with these values (keys k0, k1, ...).
pub fn batch(values: &[&[u8]]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(v)),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
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
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::copy_from_slice(v)),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
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
    let mut value = vec![0u8, 0];
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id,
        producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
        value: Some(Bytes::from(value)),
        headers: Default::default(),
    };
    encode(&[record])
}

fn encode(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// (offset, value) of every record in a fetch response's records.
pub fn values(records: &Option<Bytes>) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let Some(b) = records else { return out };
    let mut b = b.clone();
    while b.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut b).unwrap();
        for r in set.records {
            out.push((r.offset, r.value.map(|v| v.to_vec()).unwrap_or_default()));
        }
    }
    out
}

pub fn produce(c: &mut Client, name: &str, partition: i32, batch: Bytes) -> i64 {
    let p = try_produce(c, name, partition, batch);
    assert_eq!(p.error_code, 0, "produce failed: {p:?}");
    p.base_offset
}

/// Produces one partition's batch (acks=all) and returns the partition's answer, errors and
/// all.
pub fn try_produce(
    c: &mut Client,
    name: &str,
    partition: i32,
    batch: Bytes,
) -> produce_response::PartitionProduceResponse {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![produce_request::TopicProduceData::default()
            .with_name(topic(name))
            .with_partition_data(vec![
                produce_request::PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch)),
            ])]);
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
