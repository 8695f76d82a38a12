//! Idempotent and transactional producers' requests: FindCoordinator (key type 1),
//! InitProducerId, AddPartitionsToTxn (v0-3) and EndTxn. Answers the broker asks a client to
//! retry (coordinator loading or not available, a previous transaction still completing) are
//! retried for a bounded time.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::admin::topic_name;
use super::conn::Conn;

/// How long a retriable answer is retried.
const RETRY_FOR: Duration = Duration::from_secs(30);
const RETRY_BACKOFF: Duration = Duration::from_millis(5);

/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, CONCURRENT_TRANSACTIONS.
fn retriable(code: i16) -> bool {
    matches!(code, 14 | 15 | 51)
}

/// A producer id and epoch from InitProducerId.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

/// Retries `attempt` while it answers a retriable error code, up to `RETRY_FOR`.
async fn with_retries<T, F, Fut>(what: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(i16, T)>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    let mut backoff = RETRY_BACKOFF;
    loop {
        let (code, value) = attempt().await?;
        if code == 0 {
            return Ok(value);
        }
        if !retriable(code) || Instant::now() >= deadline {
            bail!("{what}: error {code}");
        }
        glommio::timer::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}

/// The transaction coordinator of `transactional_id`, as "host:port".
pub async fn find_transaction_coordinator(conn: &Conn, transactional_id: &str) -> Result<String> {
    let req = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(transactional_id.to_string()))
        .with_key_type(1);
    with_retries("FindCoordinator (transaction)", || async {
        let resp: FindCoordinatorResponse = conn.request(ApiKey::FindCoordinator, &req).await?;
        Ok((
            resp.error_code,
            format!("{}:{}", resp.host.as_str(), resp.port),
        ))
    })
    .await
}

/// InitProducerId: without a transactional id for an idempotent producer, with one (and
/// its transaction timeout) for a transactional producer.
pub async fn init_producer_id(
    conn: &Conn,
    transactional_id: Option<&str>,
    transaction_timeout_ms: i32,
) -> Result<ProducerIdentity> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(txn_id))
        .with_transaction_timeout_ms(transaction_timeout_ms);
    with_retries("InitProducerId", || async {
        let resp: InitProducerIdResponse = conn.request(ApiKey::InitProducerId, &req).await?;
        Ok((
            resp.error_code,
            ProducerIdentity {
                producer_id: resp.producer_id.0,
                epoch: resp.producer_epoch,
            },
        ))
    })
    .await
}

/// AddPartitionsToTxn (v0-3, one transaction) of `partitions` of `topic`.
pub async fn add_partitions_to_txn(
    conn: &Conn,
    transactional_id: &str,
    producer: ProducerIdentity,
    topic: &str,
    partitions: &[i32],
) -> Result<()> {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(transactional_id))
        .with_v3_and_below_producer_id(ProducerId(producer.producer_id))
        .with_v3_and_below_producer_epoch(producer.epoch)
        .with_v3_and_below_topics(vec![
            add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(partitions.to_vec()),
        ]);
    with_retries("AddPartitionsToTxn", || async {
        let resp: AddPartitionsToTxnResponse =
            conn.request(ApiKey::AddPartitionsToTxn, &req).await?;
        // The first partition error, if any (they share one cause in practice).
        let code = resp
            .results_by_topic_v3_and_below
            .iter()
            .flat_map(|t| t.results_by_partition.iter())
            .map(|p| p.partition_error_code)
            .find(|&c| c != 0)
            .unwrap_or(resp.error_code);
        Ok((code, ()))
    })
    .await
    .with_context(|| format!("adding {topic} {partitions:?} to transaction {transactional_id}"))
}

/// EndTxn: commit (or abort) the producer's open transaction.
pub async fn end_txn(
    conn: &Conn,
    transactional_id: &str,
    producer: ProducerIdentity,
    commit: bool,
) -> Result<()> {
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id(transactional_id))
        .with_producer_id(ProducerId(producer.producer_id))
        .with_producer_epoch(producer.epoch)
        .with_committed(commit);
    with_retries(
        if commit {
            "EndTxn(commit)"
        } else {
            "EndTxn(abort)"
        },
        || async {
            let resp: EndTxnResponse = conn.request(ApiKey::EndTxn, &req).await?;
            Ok((resp.error_code, ()))
        },
    )
    .await
}
