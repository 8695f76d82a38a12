//! Kafka's `listeners`, `advertised.listeners` and `inter.broker.listener.name`: two brokers,
//! each with an INTERNAL listener (inter-broker traffic) and an EXTERNAL one advertised under
//! another host name. Metadata, FindCoordinator and DescribeCluster answer with every broker's
//! endpoint of the listener the request came in on, and a librdkafka client bootstrapped on
//! either listener produces and consumes through it.

mod common;

use std::time::{Duration, Instant};

use common::client::Client;
use common::{free_port, Broker};
use kafka_protocol::messages::*;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

/// Node `id`'s listeners: (internal port, external port).
struct Ports {
    internal: u16,
    external: u16,
}

fn brokers_in_metadata(port: u16) -> Vec<(i32, String, i32)> {
    let mut c = Client::connect(&format!("127.0.0.1:{port}"));
    let resp: MetadataResponse = c.send(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false),
    );
    let mut out: Vec<(i32, String, i32)> = resp
        .brokers
        .iter()
        .map(|b| (b.node_id.0, b.host.to_string(), b.port))
        .collect();
    out.sort();
    out
}

fn brokers_in_describe_cluster(port: u16) -> Vec<(i32, String, i32)> {
    let mut c = Client::connect(&format!("127.0.0.1:{port}"));
    let resp: DescribeClusterResponse = c.send(
        ApiKey::DescribeCluster,
        0,
        &DescribeClusterRequest::default(),
    );
    let mut out: Vec<(i32, String, i32)> = resp
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
        .collect();
    out.sort();
    out
}

fn coordinator(port: u16, group: &str) -> Option<(i32, String, i32)> {
    let mut c = Client::connect(&format!("127.0.0.1:{port}"));
    let resp: FindCoordinatorResponse = c.send(
        ApiKey::FindCoordinator,
        3,
        &FindCoordinatorRequest::default()
            .with_key(group.to_string().into())
            .with_key_type(0),
    );
    (resp.error_code == 0).then(|| (resp.node_id.0, resp.host.to_string(), resp.port))
}

#[test]
fn each_listener_advertises_every_brokers_endpoint_of_that_listener() {
    let ports: Vec<Ports> = (0..2)
        .map(|_| Ports {
            internal: free_port(),
            external: free_port(),
        })
        .collect();
    let controller: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let quorum = format!(
        "1@127.0.0.1:{},2@127.0.0.1:{}",
        controller[0], controller[1]
    );
    let mut nodes: Vec<Broker> = (0..2)
        .map(|i| {
            let p = &ports[i];
            let args = [
                "--node-id".to_string(),
                (i + 1).to_string(),
                "--controller-quorum".into(),
                quorum.clone(),
                "--controller-listen".into(),
                format!("127.0.0.1:{}", controller[i]),
                "--set".into(),
                format!(
                    "listeners=INTERNAL://127.0.0.1:{},EXTERNAL://127.0.0.1:{}",
                    p.internal, p.external
                ),
                "--set".into(),
                // EXTERNAL is advertised by name: clients of it are told "localhost".
                format!(
                    "advertised.listeners=INTERNAL://127.0.0.1:{},EXTERNAL://localhost:{}",
                    p.internal, p.external
                ),
                "--set".into(),
                "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT".into(),
                "--set".into(),
                "inter.broker.listener.name=INTERNAL".into(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut b = Broker::prepare(&args);
            b.port = p.internal;
            b
        })
        .collect();
    let starts: Vec<usize> = nodes.iter_mut().map(|b| b.spawn_nowait()).collect();
    for (b, s) in nodes.iter_mut().zip(starts) {
        b.wait_serving(s);
    }
    let internal: Vec<(i32, String, i32)> = (0..2)
        .map(|i| {
            (
                i as i32 + 1,
                "127.0.0.1".to_string(),
                i32::from(ports[i].internal),
            )
        })
        .collect();
    let external: Vec<(i32, String, i32)> = (0..2)
        .map(|i| {
            (
                i as i32 + 1,
                "localhost".to_string(),
                i32::from(ports[i].external),
            )
        })
        .collect();
    // Both brokers registered (each learns the other's endpoints from the metadata log).
    let deadline = Instant::now() + Duration::from_secs(20);
    while brokers_in_metadata(ports[0].internal).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for (i, p) in ports.iter().enumerate() {
        assert_eq!(
            brokers_in_metadata(p.internal),
            internal,
            "Metadata on INTERNAL of node {}",
            i + 1
        );
        assert_eq!(
            brokers_in_metadata(p.external),
            external,
            "Metadata on EXTERNAL of node {}",
            i + 1
        );
        assert_eq!(brokers_in_describe_cluster(p.internal), internal);
        assert_eq!(brokers_in_describe_cluster(p.external), external);
    }
    // The group coordinator, at its endpoint of the listener asked on.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut on_external = None;
    while on_external.is_none() && Instant::now() < deadline {
        on_external = coordinator(ports[0].external, "listener-group");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (node, host, port) = on_external.expect("a coordinator");
    assert_eq!(
        (host.as_str(), port),
        ("localhost", i32::from(ports[node as usize - 1].external))
    );
    let (node_i, host_i, port_i) = coordinator(ports[1].internal, "listener-group").unwrap();
    assert_eq!(node_i, node);
    assert_eq!(
        (host_i.as_str(), port_i),
        ("127.0.0.1", i32::from(ports[node as usize - 1].internal))
    );

    // A librdkafka client that only knows the EXTERNAL listener by name works through it.
    let bootstrap = format!("localhost:{}", ports[1].external);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("acks", "all")
        .set("broker.address.family", "v4")
        .create()
        .unwrap();
    for i in 0..20 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        producer
            .send(BaseRecord::to("external-topic").key(&k).payload(&v))
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "listener-group")
        .set("auto.offset.reset", "earliest")
        .set("broker.address.family", "v4")
        .create()
        .unwrap();
    consumer.subscribe(&["external-topic"]).unwrap();
    let mut got = std::collections::BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 20 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            got.insert(
                String::from_utf8_lossy(m.key().unwrap()).to_string(),
                String::from_utf8_lossy(m.payload().unwrap()).to_string(),
            );
        }
    }
    let want: std::collections::BTreeMap<String, String> = (0..20)
        .map(|i| (format!("k{i}"), format!("v{i}")))
        .collect();
    assert_eq!(got, want);

    // Replica requests are honoured only on the inter-broker listener (INTERNAL): on EXTERNAL a
    // follower's fetch and its OffsetForLeaderEpoch get TOPIC_AUTHORIZATION_FAILED.
    let mut c = Client::connect(&format!("127.0.0.1:{}", ports[0].internal));
    let created: CreateTopicsResponse = c.send(
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(common::client::topic("pair"))
                .with_num_partitions(1)
                .with_replication_factor(2)]),
    );
    assert_eq!(created.topics[0].error_code, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (leader, follower, topic_id) = loop {
        let mut c = Client::connect(&format!("127.0.0.1:{}", ports[0].internal));
        let m: MetadataResponse = c.send(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        );
        let t = m
            .topics
            .iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.as_str() == "pair"));
        if let Some((t, p)) = t.and_then(|t| t.partitions.first().map(|p| (t, p))) {
            if p.leader_id.0 > 0 && p.isr_nodes.len() == 2 {
                let follower = p
                    .replica_nodes
                    .iter()
                    .find(|r| **r != p.leader_id)
                    .unwrap()
                    .0;
                break (p.leader_id.0, follower, t.topic_id);
            }
        }
        assert!(Instant::now() < deadline, "the pair's ISR fills");
        std::thread::sleep(Duration::from_millis(100));
    };
    let epoch: i64 = nodes[follower as usize - 1]
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("keel_broker_epoch "))
        .and_then(|v| v.trim().parse().ok())
        .expect("keel_broker_epoch");
    let lp = &ports[leader as usize - 1];
    let replica_fetch = |port: u16| -> i16 {
        let mut c = Client::connect(&format!("127.0.0.1:{port}"));
        let r: FetchResponse = c.send(
            ApiKey::Fetch,
            15,
            &FetchRequest::default()
                .with_replica_state(
                    fetch_request::ReplicaState::default()
                        .with_replica_id(BrokerId(follower))
                        .with_replica_epoch(epoch),
                )
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![fetch_request::FetchTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_last_fetched_epoch(-1)
                        .with_partition_max_bytes(1 << 20)])]),
        );
        r.responses[0].partitions[0].error_code
    };
    let epoch_query = |port: u16| -> i16 {
        let mut c = Client::connect(&format!("127.0.0.1:{port}"));
        let r: OffsetForLeaderEpochResponse = c.send(
            ApiKey::OffsetForLeaderEpoch,
            4,
            &OffsetForLeaderEpochRequest::default()
                .with_replica_id(BrokerId(follower))
                .with_topics(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(common::client::topic("pair"))
                        .with_partitions(vec![
                            offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                                .with_partition(0)
                                .with_current_leader_epoch(-1)
                                .with_leader_epoch(0),
                        ]),
                ]),
        );
        r.topics[0].partitions[0].error_code
    };
    assert_eq!(
        replica_fetch(lp.external),
        29,
        "a follower fetch on EXTERNAL"
    );
    assert_eq!(
        epoch_query(lp.external),
        29,
        "a replica's OffsetForLeaderEpoch on EXTERNAL"
    );
    assert_eq!(replica_fetch(lp.internal), 0, "the same fetch on INTERNAL");
    assert_eq!(epoch_query(lp.internal), 0, "the same question on INTERNAL");
}
