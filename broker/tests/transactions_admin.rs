//! The operators' view of transactions: DescribeTransactions, ListTransactions and
//! DescribeProducers against a librdkafka transactional producer with a transaction open,
//! then committed.

mod common;

use std::time::{Duration, Instant};

use common::client::*;
use common::Broker;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn describe_txn(c: &mut Client, id: &str) -> describe_transactions_response::TransactionState {
    let r: DescribeTransactionsResponse = c.send(
        ApiKey::DescribeTransactions,
        0,
        &DescribeTransactionsRequest::default()
            .with_transactional_ids(vec![TransactionalId(s(id))]),
    );
    r.transaction_states.into_iter().next().unwrap()
}

fn list_txns(c: &mut Client, states: &[&str]) -> ListTransactionsResponse {
    c.send(
        ApiKey::ListTransactions,
        1,
        &ListTransactionsRequest::default()
            .with_state_filters(states.iter().map(|x| s(x)).collect())
            .with_duration_filter(-1),
    )
}

/// (producer id, epoch, txn start offset) of each active producer of `topic`-0.
fn producers(c: &mut Client, topic: &str) -> Vec<(i64, i32, i64)> {
    let r: DescribeProducersResponse = c.send(
        ApiKey::DescribeProducers,
        0,
        &DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(TopicName(s(topic)))
                .with_partition_indexes(vec![0]),
        ]),
    );
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.active_producers
        .iter()
        .map(|x| {
            (
                x.producer_id.0,
                x.producer_epoch,
                x.current_txn_start_offset,
            )
        })
        .collect()
}

#[test]
fn transactions_and_producers_are_described_while_open_and_after_commit() {
    let b = Broker::start(&[]);
    let mut c = Client::connect(&b.bootstrap());
    create_topic(&mut c, "ops", 1);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", b.bootstrap())
        .set("transactional.id", "ops-txn")
        .set("transaction.timeout.ms", "60000")
        .create()
        .unwrap();
    p.init_transactions(Duration::from_secs(30)).unwrap();
    let d = describe_txn(&mut c, "ops-txn");
    assert_eq!(d.error_code, 0);
    assert_eq!(d.transaction_state.to_string(), "Empty");
    let (pid, epoch) = (d.producer_id.0, d.producer_epoch);
    assert!(pid >= 0);

    p.begin_transaction().unwrap();
    for i in 0..3 {
        p.send(
            BaseRecord::<str, str>::to("ops")
                .partition(0)
                .key("k")
                .payload(&format!("v{i}")),
        )
        .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
    // Open: Ongoing with the partition, the producer's transaction starts at offset 0.
    let d = describe_txn(&mut c, "ops-txn");
    assert_eq!(d.transaction_state.to_string(), "Ongoing");
    assert_eq!((d.producer_id.0, d.producer_epoch), (pid, epoch));
    assert_eq!(d.transaction_timeout_ms, 60000);
    assert!(d.transaction_start_time_ms > 0);
    let topics: Vec<(String, Vec<i32>)> = d
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(topics, vec![("ops".to_string(), vec![0])]);
    let listed = list_txns(&mut c, &["Ongoing"]);
    assert_eq!(listed.error_code, 0);
    let ids: Vec<(String, i64, String)> = listed
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        vec![("ops-txn".to_string(), pid, "Ongoing".to_string())]
    );
    assert_eq!(producers(&mut c, "ops"), vec![(pid, i32::from(epoch), 0)]);

    // Committed: the marker closes the producer's transaction.
    p.commit_transaction(Duration::from_secs(30)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let d = describe_txn(&mut c, "ops-txn");
        if d.transaction_state.to_string() == "CompleteCommit" {
            break;
        }
        assert!(Instant::now() < deadline, "not completed: {d:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(producers(&mut c, "ops"), vec![(pid, i32::from(epoch), -1)]);
    assert!(list_txns(&mut c, &["Ongoing"])
        .transaction_states
        .is_empty());
    let unknown = list_txns(&mut c, &["NoSuchState"]);
    assert_eq!(
        unknown
            .unknown_state_filters
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>(),
        vec!["NoSuchState".to_string()]
    );
    // An id nobody used.
    assert_eq!(describe_txn(&mut c, "never-used").error_code, 105);
}
