//! A data dir written by the single-node version before Raft (topics in
//! `keel-metadata.json`, no `__cluster_metadata-0`) opens with its topics: same ids,
//! partitions, configs and data, leader epochs moved on by one term.

mod common;

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;

fn describe(c: &mut Client, name: &str) -> (uuid::Uuid, Vec<i32>) {
    let req = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(topic(name))),
    ]));
    let resp: MetadataResponse = c.send(ApiKey::Metadata, 12, &req);
    let t = &resp.topics[0];
    assert_eq!(t.error_code, 0, "{t:?}");
    (
        t.topic_id,
        t.partitions.iter().map(|p| p.leader_epoch).collect(),
    )
}

fn retention_ms(c: &mut Client, name: &str) -> String {
    let req = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(name.to_string().into())
            .with_configuration_keys(Some(vec!["retention.ms".to_string().into()])),
    ]);
    let resp: DescribeConfigsResponse = c.send(ApiKey::DescribeConfigs, 4, &req);
    resp.results[0].configs[0]
        .value
        .as_ref()
        .unwrap()
        .to_string()
}

#[test]
fn pre_raft_data_dir_keeps_its_topics() {
    // Write partition data with this version, then make the data dir look like the old one:
    // no Raft metadata log, the topics in keel-metadata.json in the old format.
    let mut b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "legacy", 2);
    for v in [&b"a"[..], b"b", b"c"] {
        produce(&mut c, "legacy", 0, batch(&[v]));
    }
    let (id, _) = describe(&mut c, "legacy");
    drop(c);
    b.stop();
    let data = b.data_dir();
    std::fs::remove_dir_all(data.join("__cluster_metadata-0")).unwrap();
    let id_bytes: Vec<String> = id.as_bytes().iter().map(|x| x.to_string()).collect();
    std::fs::write(
        data.join("keel-metadata.json"),
        format!(
            r#"{{"version": 12, "topics": {{"legacy": {{"name": "legacy", "id": [{}],
                "partitions": [{{"index": 0, "shard": 0, "leader_epoch": 3}},
                               {{"index": 1, "shard": 1, "leader_epoch": 5}}],
                "replication_factor": 1, "configs": {{"retention.ms": "123456"}}}}}}}}"#,
            id_bytes.join(",")
        ),
    )
    .unwrap();
    b.restart_after_stop();
    let mut c = Client::connect(&b.bootstrap());
    let (id_after, epochs) = describe(&mut c, "legacy");
    assert_eq!(id_after, id);
    // Migrated at epoch + 1: this start is a new leadership term.
    assert_eq!(epochs, vec![4, 6]);
    assert_eq!(retention_ms(&mut c, "legacy"), "123456");
    let resp: FetchResponse = c.send(
        ApiKey::Fetch,
        12,
        &fetch_request("legacy", &[(0, 0, 1 << 20)], 0, 0, 1 << 20),
    );
    let got: Vec<Vec<u8>> = values(&resp.responses[0].partitions[0].records)
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    assert!(!data.join("keel-metadata.json").exists());
    assert!(data.join("keel-metadata.json.migrated").exists());
    // And it stays so across another restart (a clean stop gives leadership back, epoch + 1,
    // and the restart takes it again, epoch + 1, as KRaft's controlled shutdown does).
    drop(c);
    b.restart();
    let mut c = Client::connect(&b.bootstrap());
    assert_eq!(describe(&mut c, "legacy"), (id, vec![6, 8]));
}
