//! A scripted broker for unit tests: answers ApiVersions with a chosen set of version ranges
//! and hands every other request to the test's handler, recording what was asked. Shows the
//! client negotiating down to an older broker, falling back where an API is missing, and
//! routing partition requests to leaders and group requests to coordinators.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

/// What the handler answers: an encoded response body, or None to close the connection.
pub type Handler = dyn Fn(ApiKey, i16, Bytes) -> Option<BytesMut> + Send + Sync;

pub struct FakeBroker {
    pub addr: String,
    /// (api, version) of every request after ApiVersions, in order.
    pub seen: Arc<Mutex<Vec<(ApiKey, i16)>>>,
}

/// Encodes a response body at `version`.
pub fn body<R: Encodable>(r: &R, version: i16) -> Option<BytesMut> {
    let mut b = BytesMut::new();
    r.encode(&mut b, version).unwrap();
    Some(b)
}

impl FakeBroker {
    /// Serves connections on a free port until the test ends.
    pub fn start(versions: &[(ApiKey, i16, i16)], handler: Box<Handler>) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let api_keys: Vec<_> = versions
            .iter()
            .map(|(k, min, max)| {
                let mut v = api_versions_response::ApiVersion::default();
                v.api_key = *k as i16;
                v.min_version = *min;
                v.max_version = *max;
                v
            })
            .collect();
        let handler: Arc<Handler> = Arc::from(handler);
        let seen_by_server = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let handler = handler.clone();
                let seen = seen_by_server.clone();
                let api_keys = api_keys.clone();
                std::thread::spawn(move || loop {
                    let mut size = [0u8; 4];
                    if stream.read_exact(&mut size).is_err() {
                        return;
                    }
                    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
                    stream.read_exact(&mut frame).unwrap();
                    let mut frame = Bytes::from(frame);
                    let api = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]])).unwrap();
                    let version = i16::from_be_bytes([frame[2], frame[3]]);
                    let header =
                        RequestHeader::decode(&mut frame, api.request_header_version(version))
                            .unwrap();
                    let response = if api == ApiKey::ApiVersions {
                        let mut r = ApiVersionsResponse::default();
                        r.api_keys = api_keys.clone();
                        body(&r, version)
                    } else {
                        seen.lock().unwrap().push((api, version));
                        handler(api, version, frame)
                    };
                    let Some(response) = response else { return };
                    let mut out = BytesMut::new();
                    out.put_i32(0);
                    ResponseHeader::default()
                        .with_correlation_id(header.correlation_id)
                        .encode(&mut out, api.response_header_version(version))
                        .unwrap();
                    out.extend_from_slice(&response);
                    let n = (out.len() - 4) as i32;
                    out[0..4].copy_from_slice(&n.to_be_bytes());
                    stream.write_all(&out).unwrap();
                });
            }
        });
        FakeBroker { addr, seen }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::client::{str_bytes, topic_name};

    fn run(args: &[&str], addr: &str) -> (crate::Result<i32>, String) {
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["-b".to_string(), addr.to_string()]);
        let mut out = Vec::new();
        let result = crate::dispatch(&args, &mut out);
        (result, String::from_utf8(out).unwrap())
    }

    /// A broker of Kafka 1.x vintage: Metadata up to v4 only.
    #[test]
    fn versions_are_negotiated_down_to_what_the_broker_speaks() {
        let broker = FakeBroker::start(
            &[(ApiKey::Metadata, 0, 4)],
            Box::new(|api, version, _| {
                assert_eq!(api, ApiKey::Metadata);
                let mut r = MetadataResponse::default();
                let mut b = metadata_response::MetadataResponseBroker::default();
                b.node_id = BrokerId(7);
                b.host = str_bytes("old-broker");
                b.port = 9092;
                r.brokers = vec![b];
                r.controller_id = BrokerId(7);
                let mut t = metadata_response::MetadataResponseTopic::default();
                t.name = Some(topic_name("legacy"));
                t.partitions = (0..2)
                    .map(|i| {
                        let mut p = metadata_response::MetadataResponsePartition::default();
                        p.partition_index = i;
                        p.leader_id = BrokerId(7);
                        p.replica_nodes = vec![BrokerId(7)];
                        p.isr_nodes = vec![BrokerId(7)];
                        p
                    })
                    .collect();
                r.topics = vec![t];
                body(&r, version)
            }),
        );
        let (result, out) = run(&["topic", "list"], &broker.addr);
        assert_eq!(result.unwrap(), 0);
        assert_eq!(
            out,
            "TOPIC   PARTITIONS  REPLICATION\nlegacy  2           1\n"
        );
        assert_eq!(*broker.seen.lock().unwrap(), vec![(ApiKey::Metadata, 4)]);

        // An API the broker lacks is a clear error, not a malformed request.
        let (result, _) = run(&["topic", "create", "t"], &broker.addr);
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains("does not support CreateTopics"),
            "{err}"
        );
        assert_eq!(err.exit_code(), 1);
    }

    /// A broker whose flexible-version answer does not decode (tansu 0.6 sends a null array
    /// where OffsetFetch v7 has none): the client asks again at the highest non-flexible
    /// version on the same connection and uses that answer.
    #[test]
    fn an_undecodable_flexible_answer_is_asked_again_at_a_non_flexible_version() {
        let broker = FakeBroker::start(
            &[(ApiKey::Metadata, 0, 12)],
            Box::new(|_, version, _| {
                if version >= 9 {
                    // A flexible Metadata body cut short: it cannot decode.
                    let mut b = BytesMut::new();
                    b.put_i32(0);
                    return Some(b);
                }
                let mut r = MetadataResponse::default();
                let mut t = metadata_response::MetadataResponseTopic::default();
                t.name = Some(topic_name("kept"));
                r.topics = vec![t];
                body(&r, version)
            }),
        );
        let (result, out) = run(&["topic", "list"], &broker.addr);
        assert_eq!(result.unwrap(), 0);
        assert_eq!(
            out,
            "TOPIC  PARTITIONS  REPLICATION\nkept   0           0\n"
        );
        assert_eq!(
            *broker.seen.lock().unwrap(),
            vec![(ApiKey::Metadata, 12), (ApiKey::Metadata, 8)]
        );
    }

    /// No IncrementalAlterConfigs: AlterConfigs replaces the topic's whole set, so the client
    /// sends what is set now with the changes applied.
    #[test]
    fn alter_config_falls_back_to_alter_configs() {
        let overrides: Arc<Mutex<BTreeMap<String, String>>> = Arc::new(Mutex::new(
            [
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("retention.ms".to_string(), "1000".to_string()),
            ]
            .into(),
        ));
        let state = overrides.clone();
        let broker = FakeBroker::start(
            &[
                (ApiKey::DescribeConfigs, 0, 1),
                (ApiKey::AlterConfigs, 0, 0),
            ],
            Box::new(move |api, version, mut req| match api {
                ApiKey::DescribeConfigs => {
                    let mut result = describe_configs_response::DescribeConfigsResult::default();
                    result.resource_type = 2;
                    result.resource_name = str_bytes("t");
                    let entry = |k: &str, v: &str, source: i8| {
                        let mut c =
                            describe_configs_response::DescribeConfigsResourceResult::default();
                        c.name = str_bytes(k);
                        c.value = Some(str_bytes(v));
                        c.config_source = source;
                        c
                    };
                    result.configs = state
                        .lock()
                        .unwrap()
                        .iter()
                        .map(|(k, v)| entry(k, v, 1))
                        .chain([entry("segment.bytes", "1073741824", 5)])
                        .collect();
                    let mut r = DescribeConfigsResponse::default();
                    r.results = vec![result];
                    body(&r, version)
                }
                ApiKey::AlterConfigs => {
                    let alter = AlterConfigsRequest::decode(&mut req, version).unwrap();
                    let resource = &alter.resources[0];
                    assert_eq!(
                        (resource.resource_type, resource.resource_name.as_str()),
                        (2, "t")
                    );
                    *state.lock().unwrap() = resource
                        .configs
                        .iter()
                        .map(|c| (c.name.to_string(), c.value.as_ref().unwrap().to_string()))
                        .collect();
                    let mut ok = alter_configs_response::AlterConfigsResourceResponse::default();
                    ok.resource_type = 2;
                    ok.resource_name = str_bytes("t");
                    let mut r = AlterConfigsResponse::default();
                    r.responses = vec![ok];
                    body(&r, version)
                }
                other => panic!("unexpected {other:?}"),
            }),
        );
        let (result, out) = run(
            &[
                "topic",
                "alter-config",
                "t",
                "--add-config",
                "max.message.bytes=2048",
                "--delete-config",
                "retention.ms",
            ],
            &broker.addr,
        );
        assert_eq!(result.unwrap(), 0);
        assert_eq!(
            *overrides.lock().unwrap(),
            [
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("max.message.bytes".to_string(), "2048".to_string()),
            ]
            .into()
        );
        assert_eq!(
            out,
            "TOPIC  CONFIG             VALUE\n\
             t      cleanup.policy     compact\n\
             t      max.message.bytes  2048\n"
        );
        assert_eq!(
            *broker.seen.lock().unwrap(),
            vec![
                (ApiKey::DescribeConfigs, 1),
                (ApiKey::AlterConfigs, 0),
                (ApiKey::DescribeConfigs, 1),
            ]
        );
    }

    #[test]
    fn kafka_errors_are_named_and_a_closed_connection_is_an_error() {
        let broker = FakeBroker::start(
            &[(ApiKey::CreateTopics, 2, 4), (ApiKey::DeleteTopics, 1, 3)],
            Box::new(|api, version, _| match api {
                ApiKey::CreateTopics => {
                    let mut t = create_topics_response::CreatableTopicResult::default();
                    t.name = topic_name("t");
                    t.error_code = 37; // INVALID_PARTITIONS
                    t.error_message = Some(str_bytes("Number of partitions must be positive"));
                    let mut r = CreateTopicsResponse::default();
                    r.topics = vec![t];
                    body(&r, version)
                }
                _ => None,
            }),
        );
        let (result, _) = run(&["topic", "create", "t", "--partitions", "0"], &broker.addr);
        assert_eq!(
            result.unwrap_err().to_string(),
            "create topic t: INVALID_PARTITIONS (Number of partitions must be positive)"
        );
        assert_eq!(broker.seen.lock().unwrap()[0], (ApiKey::CreateTopics, 4));
        let (result, _) = run(&["topic", "delete", "t"], &broker.addr);
        let err = result.unwrap_err();
        assert!(matches!(err, crate::CliError::Io { .. }), "{err}");
        assert!(
            err.to_string()
                .ends_with(": the broker closed the connection"),
            "{err}"
        );
    }

    /// Two brokers: partition 1 of "t" and group "g" live on the second one, so ListOffsets
    /// for it and the group's requests must go there, not to the bootstrap broker.
    #[test]
    fn requests_go_to_the_leader_and_the_coordinator() {
        let list_offsets = |node: i32| {
            move |version: i16, mut req: Bytes| {
                let asked = ListOffsetsRequest::decode(&mut req, version).unwrap();
                let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
                t.name = asked.topics[0].name.clone();
                t.partitions = asked.topics[0]
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut r = list_offsets_response::ListOffsetsPartitionResponse::default();
                        r.partition_index = p.partition_index;
                        // Log start 0; log end 100 * the node that answered.
                        r.offset = if p.timestamp == -2 {
                            0
                        } else {
                            100 * node as i64
                        };
                        r
                    })
                    .collect();
                let mut r = ListOffsetsResponse::default();
                r.topics = vec![t];
                body(&r, version)
            }
        };
        let second = FakeBroker::start(
            &[
                (ApiKey::ListOffsets, 1, 5),
                (ApiKey::DescribeGroups, 0, 5),
                (ApiKey::OffsetFetch, 1, 7),
            ],
            Box::new(move |api, version, req| match api {
                ApiKey::ListOffsets => list_offsets(2)(version, req),
                ApiKey::DescribeGroups => {
                    let mut g = describe_groups_response::DescribedGroup::default();
                    g.group_id = GroupId(str_bytes("g"));
                    g.group_state = str_bytes("Empty");
                    let mut r = DescribeGroupsResponse::default();
                    r.groups = vec![g];
                    body(&r, version)
                }
                ApiKey::OffsetFetch => {
                    let mut p = offset_fetch_response::OffsetFetchResponsePartition::default();
                    p.partition_index = 1;
                    p.committed_offset = 150;
                    let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
                    t.name = topic_name("t");
                    t.partitions = vec![p];
                    let mut r = OffsetFetchResponse::default();
                    r.topics = vec![t];
                    body(&r, version)
                }
                other => panic!("unexpected {other:?} at the second broker"),
            }),
        );
        let second_addr = second.addr.clone();
        // The bootstrap broker lists itself as node 1 once it knows its port.
        let first_addr: Arc<std::sync::OnceLock<String>> = Arc::default();
        let own_addr = first_addr.clone();
        let first = FakeBroker::start(
            &[
                (ApiKey::Metadata, 1, 12),
                (ApiKey::DescribeConfigs, 1, 4),
                (ApiKey::ListOffsets, 1, 9),
                (ApiKey::FindCoordinator, 0, 2),
            ],
            Box::new(move |api, version, req| match api {
                ApiKey::Metadata => {
                    let mut r = MetadataResponse::default();
                    let broker = |id: i32, addr: &str| {
                        let (host, port) = addr.split_once(':').unwrap();
                        let mut b = metadata_response::MetadataResponseBroker::default();
                        b.node_id = BrokerId(id);
                        b.host = str_bytes(host);
                        b.port = port.parse().unwrap();
                        b
                    };
                    r.brokers = vec![broker(1, own_addr.get().unwrap()), broker(2, &second_addr)];
                    let mut t = metadata_response::MetadataResponseTopic::default();
                    t.name = Some(topic_name("t"));
                    t.partitions = [(0, 1), (1, 2)]
                        .into_iter()
                        .map(|(i, leader)| {
                            let mut p = metadata_response::MetadataResponsePartition::default();
                            p.partition_index = i;
                            p.leader_id = BrokerId(leader);
                            p.replica_nodes = vec![BrokerId(1), BrokerId(2)];
                            p.isr_nodes = vec![BrokerId(1), BrokerId(2)];
                            p
                        })
                        .collect();
                    r.topics = vec![t];
                    body(&r, version)
                }
                ApiKey::DescribeConfigs => {
                    let mut result = describe_configs_response::DescribeConfigsResult::default();
                    result.resource_type = 2;
                    result.resource_name = str_bytes("t");
                    let mut r = DescribeConfigsResponse::default();
                    r.results = vec![result];
                    body(&r, version)
                }
                ApiKey::ListOffsets => list_offsets(1)(version, req),
                ApiKey::FindCoordinator => {
                    let (host, port) = second_addr.split_once(':').unwrap();
                    let mut r = FindCoordinatorResponse::default();
                    r.node_id = BrokerId(2);
                    r.host = str_bytes(host);
                    r.port = port.parse().unwrap();
                    body(&r, version)
                }
                other => panic!("unexpected {other:?} at the bootstrap broker"),
            }),
        );
        first_addr.set(first.addr.clone()).unwrap();

        let (result, out) = run(&["topic", "describe", "t"], &first.addr);
        assert_eq!(result.unwrap(), 0);
        assert!(
            out.ends_with(
                "PARTITION  LEADER  REPLICAS  ISR  LOG-START  LOG-END\n\
                 0          1       1,2       1,2  0          100\n\
                 1          2       1,2       1,2  0          200\n"
            ),
            "{out}"
        );
        assert_eq!(
            *second.seen.lock().unwrap(),
            vec![(ApiKey::ListOffsets, 5), (ApiKey::ListOffsets, 5)]
        );
        second.seen.lock().unwrap().clear();

        // The group's coordinator is node 2; its committed partition's leader too.
        let (result, out) = run(&["group", "lag", "g"], &first.addr);
        assert_eq!(result.unwrap(), 0);
        assert_eq!(
            out,
            "Group: g  State: Empty  Members: 0  TotalLag: 50\n\
             TOPIC  PARTITION  COMMITTED  LOG-END  LAG  MEMBER-ID  CLIENT-ID  HOST\n\
             t      1          150        200      50   -          -          -\n"
        );
        assert_eq!(
            *second.seen.lock().unwrap(),
            vec![
                (ApiKey::DescribeGroups, 5),
                (ApiKey::OffsetFetch, 7),
                (ApiKey::ListOffsets, 5),
            ]
        );
        let at_first = first.seen.lock().unwrap().clone();
        assert_eq!(
            at_first[at_first.len() - 2..],
            [(ApiKey::FindCoordinator, 2), (ApiKey::Metadata, 12)]
        );
    }
}
