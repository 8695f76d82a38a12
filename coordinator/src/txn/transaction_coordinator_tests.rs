use super::*;
use crate::testing::Rng;
use kafka_protocol::ResponseError;

const NOT_COORDINATOR: ErrorCode = ErrorCode::of(ResponseError::NotCoordinator);
const COORDINATOR_NOT_AVAILABLE: ErrorCode = ErrorCode::of(ResponseError::CoordinatorNotAvailable);
const TIMEOUT_MS: i32 = 60_000;
const EPOCH: i32 = 5;

fn tp(topic: &str, partition: i32) -> TopicPartition {
    TopicPartition::new(topic, partition)
}

fn init_answer(completion: &Completion) -> InitProducerIdResult {
    match completion.answer {
        Some(Answer::InitProducerId(r)) => r,
        ref other => panic!("not an InitProducerId answer: {other:?}"),
    }
}

fn error_answer(completion: &Completion) -> ErrorCode {
    match completion.answer {
        Some(Answer::Error(e)) => e,
        ref other => panic!("not an error answer: {other:?}"),
    }
}

/// A coordinator driven by tests: commits every write it is handed into `log` (unless told
/// otherwise) and collects the markers it asks for.
struct Harness {
    c: TransactionCoordinator,
    log: Vec<(Bytes, Option<Bytes>)>,
    now_ms: i64,
    next_producer_id: i64,
    markers: Vec<Markers>,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_config(TxnConfig::default())
    }

    fn with_config(config: TxnConfig) -> Harness {
        let no_records: Vec<(Option<Bytes>, Option<Bytes>)> = Vec::new();
        let (c, actions) = TransactionCoordinator::load(3, EPOCH, config, no_records, 0);
        assert!(actions.is_empty());
        Harness {
            c,
            log: Vec::new(),
            now_ms: 0,
            next_producer_id: 1000,
            markers: Vec::new(),
        }
    }

    fn take_actions(&mut self, actions: Vec<TxnAction>) {
        for action in actions {
            match action {
                TxnAction::WriteMarkers(m) => self.markers.push(m),
                TxnAction::Write(w) => {
                    self.commit(w);
                }
            }
        }
    }

    /// Appends the write to the log and completes it.
    fn commit(&mut self, w: Write) -> Completion {
        self.log.push((w.key.clone(), w.value.clone()));
        let completion = self
            .c
            .write_completed(&w.transactional_id, Ok(()), self.now_ms);
        self.take_actions(completion.actions.clone());
        completion
    }

    fn fail(&mut self, w: Write, error: ErrorCode) -> Completion {
        let completion = self
            .c
            .write_completed(&w.transactional_id, Err(error), self.now_ms);
        assert!(completion.actions.is_empty());
        completion
    }

    /// InitProducerId until it is answered, taking producer ids as asked.
    fn init_reply(
        &mut self,
        id: &str,
        expected: Option<(i64, i16)>,
    ) -> Reply<InitProducerIdResult> {
        let expected = expected.map(|(producer_id, producer_epoch)| ProducerIdAndEpoch {
            producer_id,
            producer_epoch,
        });
        let mut new_producer_id = None;
        loop {
            match self
                .c
                .init_producer_id(id, TIMEOUT_MS, expected, self.now_ms, new_producer_id)
            {
                Reply::NeedProducerId => {
                    assert!(new_producer_id.is_none(), "asked twice");
                    new_producer_id = Some(self.next_producer_id);
                    self.next_producer_id += 1;
                }
                reply => return reply,
            }
        }
    }

    fn init(&mut self, id: &str, expected: Option<(i64, i16)>) -> InitProducerIdResult {
        match self.init_reply(id, expected) {
            Reply::Now(r) => r,
            Reply::AfterWrite(w) => init_answer(&self.commit(w)),
            Reply::NeedProducerId => unreachable!(),
        }
    }

    fn answer(&mut self, reply: Reply<ErrorCode>) -> ErrorCode {
        match reply {
            Reply::Now(e) => e,
            Reply::AfterWrite(w) => error_answer(&self.commit(w)),
            Reply::NeedProducerId => panic!("only InitProducerId needs a producer id"),
        }
    }

    fn add(&mut self, id: &str, r: InitProducerIdResult, partitions: &[(&str, i32)]) -> ErrorCode {
        let partitions: Vec<_> = partitions.iter().map(|(t, p)| tp(t, *p)).collect();
        let reply = self.c.add_partitions(
            id,
            r.producer_id,
            r.producer_epoch,
            &partitions,
            self.now_ms,
        );
        self.answer(reply)
    }

    fn end(&mut self, id: &str, r: InitProducerIdResult, commit: bool) -> ErrorCode {
        let reply = self
            .c
            .end_txn(id, r.producer_id, r.producer_epoch, commit, self.now_ms);
        self.answer(reply)
    }

    /// Writes every marker asked for and completes their transactions.
    fn write_markers(&mut self) {
        for m in std::mem::take(&mut self.markers) {
            let w = self
                .c
                .markers_written(&m.transactional_id, self.now_ms)
                .expect("markers owed");
            assert!(self
                .c
                .markers_written(&m.transactional_id, self.now_ms)
                .is_none());
            self.commit(w);
        }
    }

    fn tick(&mut self, now_ms: i64) -> Vec<Write> {
        self.now_ms = now_ms;
        self.c
            .tick(now_ms)
            .into_iter()
            .map(|a| match a {
                TxnAction::Write(w) => w,
                other => panic!("tick asks only for writes: {other:?}"),
            })
            .collect()
    }

    /// A new coordinator (epoch + 1) loaded from the log, as after a failover.
    fn reload(&mut self) -> Vec<TxnAction> {
        let records = self.log.iter().map(|(k, v)| (Some(k.clone()), v.clone()));
        let epoch = self.c.coordinator_epoch() + 1;
        let config = self.c.config.clone();
        let (c, actions) = TransactionCoordinator::load(3, epoch, config, records, self.now_ms);
        self.c = c;
        self.markers.clear();
        actions
    }

    fn state(&self, id: &str) -> Option<TxnState> {
        self.c.get(id).map(TransactionMetadata::state)
    }

    /// The states the log holds for `id`, in order (`None` for a tombstone).
    fn logged(&self, id: &str) -> Vec<Option<TxnState>> {
        self.log
            .iter()
            .filter(|(k, _)| transaction_log::decode_key(k).as_deref() == Some(id))
            .map(|(_, v)| {
                v.as_ref()
                    .map(|v| transaction_log::decode_value(v).unwrap().state)
            })
            .collect()
    }
}

#[test]
fn state_ids_and_names_are_kafkas() {
    let names: Vec<_> = TxnState::ALL.iter().map(|s| (s.id(), s.name())).collect();
    assert_eq!(
        names,
        [
            (0, "Empty"),
            (1, "Ongoing"),
            (2, "PrepareCommit"),
            (3, "PrepareAbort"),
            (4, "CompleteCommit"),
            (5, "CompleteAbort"),
            (6, "Dead"),
            (7, "PrepareEpochFence"),
        ]
    );
    for s in TxnState::ALL {
        assert_eq!(TxnState::from_id(s.id()), Some(s));
        assert_eq!(TxnState::from_name(s.name()), Some(s));
    }
    assert_eq!(TxnState::from_id(8), None);
    assert_eq!(TxnState::from_name("ongoing"), None);
}

#[test]
fn commit_cycle() {
    let mut h = Harness::new();
    let r = h.init("tx", None);
    assert_eq!(
        (r.error, r.producer_id, r.producer_epoch),
        (ErrorCode::NONE, 1000, 0)
    );
    assert_eq!(h.state("tx"), Some(TxnState::Empty));

    h.now_ms = 100;
    assert_eq!(h.add("tx", r, &[("a", 0), ("a", 1)]), ErrorCode::NONE);
    let meta = h.c.get("tx").unwrap();
    assert_eq!(meta.state(), TxnState::Ongoing);
    assert_eq!(meta.start_timestamp_ms(), 100);
    // Partitions already in: answered at once, nothing written.
    let logged = h.log.len();
    h.now_ms = 200;
    assert_eq!(h.add("tx", r, &[("a", 1)]), ErrorCode::NONE);
    assert_eq!(h.log.len(), logged);
    let offsets =
        h.c.add_offsets("tx", r.producer_id, r.producer_epoch, 7, h.now_ms);
    assert_eq!(h.answer(offsets), ErrorCode::NONE);
    assert_eq!(h.c.get("tx").unwrap().start_timestamp_ms(), 100, "kept");

    let Reply::AfterWrite(w) = h.c.end_txn("tx", 1000, 0, true, h.now_ms) else {
        panic!("EndTxn writes its decision");
    };
    // The decision is not in effect before its write completes.
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    assert_eq!(h.end("tx", r, true), CONCURRENT_TRANSACTIONS);
    let completion = h.commit(w);
    assert_eq!(completion.answer, Some(Answer::Error(ErrorCode::NONE)));
    assert_eq!(
        completion.actions,
        vec![TxnAction::WriteMarkers(Markers {
            transactional_id: "tx".into(),
            producer_id: 1000,
            producer_epoch: 0,
            commit: true,
            partitions: vec![tp("__consumer_offsets", 7), tp("a", 0), tp("a", 1)],
            coordinator_epoch: EPOCH,
        })]
    );
    assert_eq!(h.state("tx"), Some(TxnState::PrepareCommit));
    // While the markers are written: a retry waits, the other decision is refused, and
    // nothing else moves the transaction.
    assert_eq!(h.end("tx", r, true), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("tx", r, false), INVALID_TXN_STATE);
    assert_eq!(h.add("tx", r, &[("b", 0)]), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.init("tx", None).error, CONCURRENT_TRANSACTIONS);
    assert_eq!(h.c.next_deadline_ms(), None, "markers have no deadline");

    h.write_markers();
    let meta = h.c.get("tx").unwrap();
    assert_eq!(meta.state(), TxnState::CompleteCommit);
    assert!(meta.partitions().is_empty());
    assert_eq!(meta.producer_epoch(), 0);
    // A retried EndTxn: the same decision is ErrorCode::NONE, the other INVALID_TXN_STATE.
    assert_eq!(h.end("tx", r, true), ErrorCode::NONE);
    assert_eq!(h.end("tx", r, false), INVALID_TXN_STATE);
    use TxnState::*;
    assert_eq!(
        h.logged("tx"),
        [Empty, Ongoing, Ongoing, PrepareCommit, CompleteCommit].map(Some)
    );

    // The next transaction starts afresh.
    h.now_ms = 500;
    assert_eq!(h.add("tx", r, &[("b", 0)]), ErrorCode::NONE);
    let meta = h.c.get("tx").unwrap();
    assert_eq!(meta.start_timestamp_ms(), 500);
    assert_eq!(meta.partitions().iter().collect::<Vec<_>>(), [&tp("b", 0)]);
}

#[test]
fn abort_cycle() {
    let mut h = Harness::new();
    let r = h.init("tx", None);
    assert_eq!(h.add("tx", r, &[("a", 0)]), ErrorCode::NONE);
    assert_eq!(h.end("tx", r, false), ErrorCode::NONE);
    assert_eq!(h.state("tx"), Some(TxnState::PrepareAbort));
    assert_eq!(h.markers.len(), 1);
    assert!(!h.markers[0].commit);
    assert_eq!(h.end("tx", r, false), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("tx", r, true), INVALID_TXN_STATE);
    h.write_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    assert_eq!(h.end("tx", r, false), ErrorCode::NONE);
    assert_eq!(h.end("tx", r, true), INVALID_TXN_STATE);
    // InitProducerId after a completed transaction bumps the epoch.
    let again = h.init("tx", Some((r.producer_id, r.producer_epoch)));
    assert_eq!((again.error, again.producer_epoch), (ErrorCode::NONE, 1));
}

#[test]
fn requests_outside_a_transaction() {
    let mut h = Harness::new();
    let unknown = InitProducerIdResult {
        error: ErrorCode::NONE,
        producer_id: 1,
        producer_epoch: 0,
    };
    assert_eq!(h.end("nope", unknown, true), INVALID_PRODUCER_ID_MAPPING);
    assert_eq!(
        h.add("nope", unknown, &[("a", 0)]),
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(h.add("", unknown, &[("a", 0)]), INVALID_REQUEST);
    assert_eq!(h.init("", None).error, INVALID_REQUEST);
    let r = h.init("tx", None);
    // EndTxn with nothing open.
    assert_eq!(h.end("tx", r, true), INVALID_TXN_STATE);
    assert_eq!(h.end("tx", r, false), INVALID_TXN_STATE);
    let other_producer = InitProducerIdResult {
        producer_id: r.producer_id + 1,
        ..r
    };
    assert_eq!(
        h.end("tx", other_producer, true),
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        h.add("tx", other_producer, &[("a", 0)]),
        INVALID_PRODUCER_ID_MAPPING
    );
    let newer_epoch = InitProducerIdResult {
        producer_epoch: 1,
        ..r
    };
    assert_eq!(h.add("tx", newer_epoch, &[("a", 0)]), PRODUCER_FENCED);
    assert_eq!(
        h.c.describe("nope"),
        Err(TRANSACTIONAL_ID_NOT_FOUND),
        "unknown id"
    );
    assert_eq!(h.c.describe(""), Err(INVALID_REQUEST));
}

#[test]
fn transaction_timeout_is_bounded() {
    let mut h = Harness::new();
    let max = TxnConfig::default().transaction_timeout_ms_max;
    assert_eq!(max, 900_000);
    for timeout_ms in [0, -1, max + 1, i32::MAX] {
        let reply = h.c.init_producer_id("tx", timeout_ms, None, 0, Some(1));
        assert_eq!(
            reply,
            Reply::Now(InitProducerIdResult::error(INVALID_TRANSACTION_TIMEOUT)),
            "{timeout_ms}"
        );
    }
    assert!(h.c.is_empty());
    let reply = h.c.init_producer_id("tx", max, None, 0, Some(1));
    assert!(matches!(reply, Reply::AfterWrite(_)));
}

#[test]
fn a_new_id_needs_a_producer_id_and_may_leave_one_unused() {
    let mut h = Harness::new();
    assert_eq!(
        h.c.init_producer_id("tx", TIMEOUT_MS, None, 0, None),
        Reply::NeedProducerId
    );
    assert!(h.c.is_empty(), "nothing created without an id");
    let Reply::AfterWrite(w) = h.c.init_producer_id("tx", TIMEOUT_MS, None, 0, Some(77)) else {
        panic!("a new id is written");
    };
    // While the first write is in flight the id exists at epoch -1.
    let meta = h.c.get("tx").unwrap();
    assert_eq!((meta.producer_id(), meta.producer_epoch()), (77, -1));
    assert_eq!(meta.pending_state(), Some(TxnState::Empty));
    assert_eq!(
        h.c.init_producer_id("tx", TIMEOUT_MS, None, 0, Some(78)),
        Reply::Now(InitProducerIdResult::error(CONCURRENT_TRANSACTIONS))
    );
    let r = init_answer(&h.commit(w));
    assert_eq!((r.producer_id, r.producer_epoch), (77, 0));
    // A known id bumps its epoch; a new producer id passed along is not used.
    let Reply::AfterWrite(w) = h.c.init_producer_id("tx", TIMEOUT_MS, None, 0, Some(79)) else {
        panic!("bumps are written");
    };
    let r = init_answer(&h.commit(w));
    assert_eq!((r.producer_id, r.producer_epoch), (77, 1));
}

#[test]
fn init_with_the_producers_own_id_and_epoch() {
    let mut h = Harness::new();
    // A producer recovering with an id the coordinator never saw gets a new one.
    let r = h.init("tx", Some((5, 3)));
    assert_eq!(
        (r.error, r.producer_id, r.producer_epoch),
        (ErrorCode::NONE, 1000, 0)
    );
    // The current epoch: bumped, and remembered as the last one.
    let r1 = h.init("tx", Some((1000, 0)));
    assert_eq!((r1.error, r1.producer_epoch), (ErrorCode::NONE, 1));
    assert_eq!(h.c.get("tx").unwrap().last_producer_epoch(), 0);
    // A retry of that call (its answer was lost): the same answer, no bump.
    let retry = h.init("tx", Some((1000, 0)));
    assert_eq!(retry, r1);
    // Any other epoch, or another producer id, is fenced.
    assert_eq!(h.init("tx", Some((1000, 7))).error, PRODUCER_FENCED);
    assert_eq!(h.init("tx", Some((999, 1))).error, PRODUCER_FENCED);
    // Without its epoch a producer fences whoever had the id, and the last epoch is
    // forgotten, so the old retry no longer passes.
    let r2 = h.init("tx", None);
    assert_eq!(r2.producer_epoch, 2);
    assert_eq!(h.init("tx", Some((1000, 0))).error, PRODUCER_FENCED);
}

#[test]
fn a_second_producer_fences_the_first() {
    let mut h = Harness::new();
    let zombie = h.init("tx", None);
    assert_eq!(h.add("tx", zombie, &[("a", 0), ("b", 3)]), ErrorCode::NONE);

    // The new producer's InitProducerId aborts the open transaction with epoch + 1 and is
    // told to retry.
    let Reply::AfterWrite(w) = h.init_reply("tx", None) else {
        panic!("the fencing abort is written");
    };
    let completion = h.commit(w);
    assert_eq!(
        init_answer(&completion),
        InitProducerIdResult::error(CONCURRENT_TRANSACTIONS)
    );
    let meta = h.c.get("tx").unwrap();
    assert_eq!(
        (meta.state(), meta.producer_epoch()),
        (TxnState::PrepareAbort, 1)
    );
    assert_eq!(h.markers.len(), 1);
    let m = &h.markers[0];
    assert_eq!((m.commit, m.producer_epoch), (false, 1));
    assert_eq!(m.partitions, [tp("a", 0), tp("b", 3)]);

    // The zombie is fenced at every step; the new producer waits for the abort.
    assert_eq!(h.add("tx", zombie, &[("c", 0)]), PRODUCER_FENCED);
    assert_eq!(h.end("tx", zombie, true), PRODUCER_FENCED);
    assert_eq!(h.init("tx", None).error, CONCURRENT_TRANSACTIONS);
    h.write_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
    let fresh = h.init("tx", None);
    assert_eq!((fresh.error, fresh.producer_epoch), (ErrorCode::NONE, 2));
    assert_eq!(h.add("tx", zombie, &[("c", 0)]), PRODUCER_FENCED);
    assert_eq!(h.end("tx", zombie, false), PRODUCER_FENCED);
    assert_eq!(
        h.init("tx", Some((zombie.producer_id, zombie.producer_epoch)))
            .error,
        PRODUCER_FENCED
    );
    assert_eq!(h.add("tx", fresh, &[("c", 0)]), ErrorCode::NONE);
    assert_eq!(h.end("tx", fresh, true), ErrorCode::NONE);
    h.write_markers();
    assert_eq!(h.state("tx"), Some(TxnState::CompleteCommit));
}

#[test]
fn requests_wait_while_a_write_is_in_flight() {
    let mut h = Harness::new();
    let r = h.init("tx", None);
    assert_eq!(h.add("tx", r, &[("a", 0)]), ErrorCode::NONE);
    let Reply::AfterWrite(w) = h.c.end_txn("tx", 1000, 0, false, 0) else {
        panic!("EndTxn writes");
    };
    assert_eq!(h.add("tx", r, &[("b", 0)]), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("tx", r, false), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.init("tx", None).error, CONCURRENT_TRANSACTIONS);
    assert_eq!(
        h.c.get("tx").unwrap().pending_state(),
        Some(TxnState::PrepareAbort)
    );
    // A completion for an id without a write in flight changes nothing.
    assert_eq!(
        h.c.write_completed("other", Ok(()), 0),
        Completion::default()
    );
    h.commit(w);
    assert_eq!(
        h.c.write_completed("tx", Ok(()), 0),
        Completion::default(),
        "completed twice"
    );
    assert_eq!(h.c.markers_written("other", 0), None);
}

#[test]
fn a_failed_write_changes_nothing() {
    let mut h = Harness::new();
    // The first InitProducerId of an id: the id is dropped again.
    let Reply::AfterWrite(w) = h.init_reply("tx", None) else {
        panic!();
    };
    let completion = h.fail(w, NOT_COORDINATOR);
    assert_eq!(
        init_answer(&completion),
        InitProducerIdResult::error(NOT_COORDINATOR)
    );
    assert!(h.c.is_empty());

    let r = h.init("tx", None);
    let before = h.c.get("tx").unwrap().committed.clone();
    let Reply::AfterWrite(w) = h.c.add_partitions("tx", 1001, 0, &[tp("a", 0)], 10) else {
        panic!();
    };
    assert_eq!(
        error_answer(&h.fail(w, COORDINATOR_NOT_AVAILABLE)).code(),
        15
    );
    assert_eq!(h.c.get("tx").unwrap().committed, before);
    // An epoch bump that failed is not handed out.
    let Reply::AfterWrite(w) = h.init_reply("tx", None) else {
        panic!();
    };
    h.fail(w, NOT_COORDINATOR);
    assert_eq!(h.c.get("tx").unwrap().producer_epoch(), 0);
    assert_eq!(h.add("tx", r, &[("a", 0)]), ErrorCode::NONE);

    // A failed EndTxn leaves the transaction open; a failed fencing abort leaves the old
    // producer's epoch, and its retry fences with the same epoch.
    let Reply::AfterWrite(w) = h.c.end_txn("tx", 1001, 0, true, 20) else {
        panic!();
    };
    assert_eq!(error_answer(&h.fail(w, NOT_COORDINATOR)), NOT_COORDINATOR);
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    let Reply::AfterWrite(w) = h.init_reply("tx", None) else {
        panic!();
    };
    h.fail(w, NOT_COORDINATOR);
    assert_eq!(h.c.get("tx").unwrap().producer_epoch(), 0);
    let Reply::AfterWrite(w) = h.init_reply("tx", None) else {
        panic!();
    };
    h.commit(w);
    assert_eq!(h.c.get("tx").unwrap().producer_epoch(), 1);
    assert!(h.markers.iter().all(|m| m.producer_epoch == 1));
}

#[test]
fn an_expired_transaction_is_aborted_and_its_producer_fenced() {
    let mut h = Harness::new();
    let r = h.init("tx", None);
    h.now_ms = 1_000;
    assert_eq!(h.add("tx", r, &[("a", 0)]), ErrorCode::NONE);
    // Kafka aborts once start + timeout < now.
    let due_ms = 1_000 + i64::from(TIMEOUT_MS) + 1;
    assert_eq!(h.c.next_deadline_ms(), Some(due_ms));
    assert!(h.tick(due_ms - 1).is_empty());
    let writes = h.tick(due_ms);
    assert_eq!(writes.len(), 1);
    let meta = h.c.get("tx").unwrap();
    assert_eq!(meta.pending_state(), Some(TxnState::PrepareAbort));
    assert_eq!(h.c.next_deadline_ms(), None);
    // The abort's write fails: retried after the backoff, at the same epoch.
    let w = writes.into_iter().next().unwrap();
    assert_eq!(h.fail(w, COORDINATOR_NOT_AVAILABLE).answer, None);
    assert_eq!(h.state("tx"), Some(TxnState::Ongoing));
    let retry_ms = due_ms + WRITE_RETRY_BACKOFF_MS;
    assert_eq!(h.c.next_deadline_ms(), Some(retry_ms));
    assert!(h.tick(retry_ms - 1).is_empty());
    let w = h.tick(retry_ms).into_iter().next().unwrap();
    let completion = h.commit(w);
    assert_eq!(completion.answer, None);
    let meta = h.c.get("tx").unwrap();
    assert_eq!(
        (meta.state(), meta.producer_epoch()),
        (TxnState::PrepareAbort, 1)
    );
    assert_eq!(meta.last_producer_epoch(), NO_PRODUCER_EPOCH);
    assert_eq!(h.markers.len(), 1);
    assert_eq!(
        (h.markers[0].commit, h.markers[0].producer_epoch),
        (false, 1)
    );

    // The producer is fenced: its commit, its next partition, its InitProducerId.
    assert_eq!(h.end("tx", r, true), PRODUCER_FENCED);
    h.write_markers();
    assert_eq!(h.end("tx", r, false), PRODUCER_FENCED);
    assert_eq!(h.add("tx", r, &[("a", 0)]), PRODUCER_FENCED);
    assert_eq!(
        h.init("tx", Some((r.producer_id, 0))).error,
        PRODUCER_FENCED
    );
    assert_eq!(h.state("tx"), Some(TxnState::CompleteAbort));
}

#[test]
fn a_coordinator_loaded_mid_transaction_completes_it() {
    let mut h = Harness::new();
    let committer = h.init("c", None);
    let aborter = h.init("a", None);
    let open = h.init("o", None);
    h.now_ms = 10;
    assert_eq!(
        h.add("c", committer, &[("x", 0), ("y", 1)]),
        ErrorCode::NONE
    );
    assert_eq!(h.add("a", aborter, &[("x", 1)]), ErrorCode::NONE);
    assert_eq!(h.add("o", open, &[("z", 0)]), ErrorCode::NONE);
    assert_eq!(h.end("c", committer, true), ErrorCode::NONE);
    assert_eq!(h.end("a", aborter, false), ErrorCode::NONE);
    // The coordinator dies before any marker is written.
    let mut actions = h.reload();
    assert_eq!(h.c.coordinator_epoch(), EPOCH + 1);
    actions.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(
        actions,
        vec![
            TxnAction::WriteMarkers(Markers {
                transactional_id: "a".into(),
                producer_id: aborter.producer_id,
                producer_epoch: 0,
                commit: false,
                partitions: vec![tp("x", 1)],
                coordinator_epoch: EPOCH + 1,
            }),
            TxnAction::WriteMarkers(Markers {
                transactional_id: "c".into(),
                producer_id: committer.producer_id,
                producer_epoch: 0,
                commit: true,
                partitions: vec![tp("x", 0), tp("y", 1)],
                coordinator_epoch: EPOCH + 1,
            }),
        ]
    );
    // The decision holds across the failover.
    assert_eq!(h.end("c", committer, true), CONCURRENT_TRANSACTIONS);
    assert_eq!(h.end("c", committer, false), INVALID_TXN_STATE);
    h.take_actions(actions);
    h.write_markers();
    assert_eq!(h.state("c"), Some(TxnState::CompleteCommit));
    assert_eq!(h.state("a"), Some(TxnState::CompleteAbort));
    // The open transaction is still open, and still times out.
    assert_eq!(h.state("o"), Some(TxnState::Ongoing));
    let due_ms = 10 + i64::from(TIMEOUT_MS) + 1;
    assert_eq!(h.c.next_deadline_ms(), Some(due_ms));
    for w in h.tick(due_ms) {
        h.commit(w);
    }
    h.write_markers();
    assert_eq!(h.state("o"), Some(TxnState::CompleteAbort));
    // A coordinator that dies after the markers and before the completion writes them
    // again: markers are idempotent for partition leaders.
    assert_eq!(h.add("c", committer, &[("x", 0)]), ErrorCode::NONE);
    assert_eq!(h.end("c", committer, true), ErrorCode::NONE);
    let m = h.markers.pop().unwrap();
    let _lost = h.c.markers_written(&m.transactional_id, h.now_ms).unwrap();
    let actions = h.reload();
    assert_eq!(actions.len(), 1);
    h.take_actions(actions);
    h.write_markers();
    assert_eq!(h.state("c"), Some(TxnState::CompleteCommit));
    // Requests before the load finished wait.
    let mut loading = TransactionCoordinator::new(3, 9, TxnConfig::default());
    let (k, v) = &h.log[0];
    loading.replay(Some(k), v.as_deref());
    assert_eq!(loading.describe("c"), Err(COORDINATOR_LOAD_IN_PROGRESS));
    assert_eq!(loading.list(&[], &[]), Err(COORDINATOR_LOAD_IN_PROGRESS));
    assert_eq!(
        loading.end_txn("c", committer.producer_id, 0, true, 0),
        Reply::Now(COORDINATOR_LOAD_IN_PROGRESS)
    );
    assert!(loading.tick(i64::MAX).is_empty());
    assert!(loading.finish_load(0).is_empty());
    assert_eq!(loading.describe("c").map(|d| d.state), Ok(TxnState::Empty));
}

#[test]
fn idle_ids_expire() {
    let config = TxnConfig {
        transactional_id_expiration_ms: 50_000,
        ..TxnConfig::default()
    };
    let mut h = Harness::with_config(config);
    let r = h.init("idle", None);
    h.now_ms = 50;
    let open = h.init("open", None);
    assert_eq!(h.add("open", open, &[("a", 0)]), ErrorCode::NONE);
    assert_eq!(h.c.next_deadline_ms(), Some(50_000));
    assert!(h.tick(49_999).is_empty());
    let writes = h.tick(50_000);
    assert_eq!(writes.len(), 1);
    assert_eq!(writes[0].value, None, "a tombstone");
    assert_eq!(
        h.c.get("idle").unwrap().pending_state(),
        Some(TxnState::Dead)
    );
    assert_eq!(h.init("idle", None).error, CONCURRENT_TRANSACTIONS);
    assert_eq!(h.c.describe("idle").map(|d| d.state), Ok(TxnState::Empty));
    // A failed tombstone keeps the id, and is retried after the backoff.
    let w = writes.into_iter().next().unwrap();
    assert_eq!(h.fail(w, NOT_COORDINATOR), Completion::default());
    assert_eq!(h.state("idle"), Some(TxnState::Empty));
    let retry_ms = 50_000 + WRITE_RETRY_BACKOFF_MS;
    assert_eq!(h.c.next_deadline_ms(), Some(retry_ms));
    let w = h.tick(retry_ms).into_iter().next().unwrap();
    h.commit(w);
    assert_eq!(h.state("idle"), None);
    assert_eq!(h.c.describe("idle"), Err(TRANSACTIONAL_ID_NOT_FOUND));
    assert_eq!(h.add("idle", r, &[("a", 0)]), INVALID_PRODUCER_ID_MAPPING);
    // An open transaction never expires; it times out, and its id expires a while after
    // it completed.
    let timeout_ms = 50 + i64::from(TIMEOUT_MS) + 1;
    assert_eq!(h.c.next_deadline_ms(), Some(timeout_ms));
    for w in h.tick(timeout_ms) {
        h.commit(w);
    }
    assert_eq!(h.state("open"), Some(TxnState::PrepareAbort));
    h.now_ms += 10;
    h.write_markers();
    let completed_ms = h.c.get("open").unwrap().last_update_timestamp_ms();
    assert_eq!(completed_ms, timeout_ms + 10);
    assert_eq!(h.c.next_deadline_ms(), Some(completed_ms + 50_000));
    for w in h.tick(completed_ms + 50_000) {
        h.commit(w);
    }
    assert!(h.c.is_empty());
    assert_eq!(h.c.next_deadline_ms(), None);
    // The log says the same.
    h.reload();
    assert!(h.c.is_empty());
    assert_eq!(h.logged("idle").last(), Some(&None));
    // A new producer under the same id starts over with a new producer id.
    let again = h.init("idle", None);
    assert_eq!(again.producer_epoch, 0);
    assert_ne!(again.producer_id, r.producer_id);
}

/// A coordinator loaded with one id in `state` at `epoch`.
fn loaded_at(state: TxnState, epoch: i16) -> Harness {
    let mut h = Harness::new();
    let value = TransactionLogValue {
        producer_id: 500,
        previous_producer_id: 500,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch: epoch,
        next_producer_epoch: NO_PRODUCER_EPOCH,
        transaction_timeout_ms: TIMEOUT_MS,
        state,
        partitions: if state == TxnState::Ongoing {
            [tp("a", 0)].into_iter().collect()
        } else {
            BTreeSet::new()
        },
        last_update_timestamp_ms: 0,
        start_timestamp_ms: if state == TxnState::Ongoing { 0 } else { -1 },
        client_transaction_version: 0,
    };
    h.log.push((
        transaction_log::encode_key("tx"),
        Some(transaction_log::encode_value(&value)),
    ));
    assert!(h.reload().is_empty());
    h
}

#[test]
fn an_exhausted_epoch_moves_to_a_new_producer_id() {
    let mut h = loaded_at(TxnState::CompleteCommit, PRODUCER_EPOCH_EXHAUSTED - 1);
    let r = h.init("tx", Some((500, PRODUCER_EPOCH_EXHAUSTED - 1)));
    assert_eq!(
        (r.producer_id, r.producer_epoch),
        (500, PRODUCER_EPOCH_EXHAUSTED)
    );
    // The next one rotates: a new producer id at epoch 0, the old one remembered.
    let rotated = h.init("tx", Some((500, PRODUCER_EPOCH_EXHAUSTED)));
    assert_eq!(
        (rotated.error, rotated.producer_id, rotated.producer_epoch),
        (ErrorCode::NONE, 1000, 0)
    );
    let meta = h.c.get("tx").unwrap();
    assert_eq!(meta.previous_producer_id(), 500);
    assert_eq!(meta.last_producer_epoch(), PRODUCER_EPOCH_EXHAUSTED);
    // A retry of the rotation (the old id and exhausted epoch) gets the same answer.
    let retry = h.init("tx", Some((500, PRODUCER_EPOCH_EXHAUSTED)));
    assert_eq!(retry, rotated);
    assert_eq!(h.c.get("tx").unwrap().previous_producer_id(), 1000);
    let next = h.init("tx", Some((1000, 0)));
    assert_eq!((next.producer_id, next.producer_epoch), (1000, 1));

    // Without an expected epoch: rotation, the last epoch forgotten.
    let mut h = loaded_at(TxnState::Empty, PRODUCER_EPOCH_EXHAUSTED);
    let r = h.init("tx", None);
    assert_eq!((r.producer_id, r.producer_epoch), (1000, 0));
    assert_eq!(
        h.c.get("tx").unwrap().last_producer_epoch(),
        NO_PRODUCER_EPOCH
    );
    // An exhausted epoch with a stale expected epoch is fenced, not rotated.
    let mut h = loaded_at(TxnState::Empty, PRODUCER_EPOCH_EXHAUSTED);
    assert_eq!(h.init("tx", Some((500, 3))).error, PRODUCER_FENCED);
    assert_eq!(h.c.get("tx").unwrap().producer_id(), 500);

    // Fencing an open transaction at the exhausted epoch uses the last epoch there is;
    // the retry then rotates.
    let mut h = loaded_at(TxnState::Ongoing, PRODUCER_EPOCH_EXHAUSTED);
    assert_eq!(h.init("tx", None).error, CONCURRENT_TRANSACTIONS);
    assert_eq!(h.c.get("tx").unwrap().producer_epoch(), i16::MAX);
    h.write_markers();
    let r = h.init("tx", None);
    assert_eq!((r.producer_id, r.producer_epoch), (1000, 0));
    // At i16::MAX (only a timeout can get there) the epoch stays.
    let mut h = loaded_at(TxnState::Ongoing, i16::MAX);
    for w in h.tick(i64::from(TIMEOUT_MS) + 1) {
        h.commit(w);
    }
    assert_eq!(h.markers[0].producer_epoch, i16::MAX);
}

#[test]
fn verify_describe_and_list() {
    let mut h = Harness::new();
    let a = h.init("a", None);
    let b = h.init("b", None);
    h.now_ms = 42;
    assert_eq!(
        h.add("a", a, &[("t", 1), ("t", 0), ("u", 5)]),
        ErrorCode::NONE
    );
    let verified =
        h.c.verify_partitions("a", a.producer_id, 0, &[tp("t", 0), tp("v", 0)])
            .unwrap();
    assert_eq!(
        verified,
        [
            (tp("t", 0), ErrorCode::NONE),
            (tp("v", 0), INVALID_TXN_STATE)
        ]
    );
    assert_eq!(
        h.c.verify_partitions("a", a.producer_id, 1, &[tp("t", 0)]),
        Err(PRODUCER_FENCED)
    );
    assert_eq!(
        h.c.verify_partitions("a", b.producer_id, 0, &[tp("t", 0)]),
        Err(INVALID_PRODUCER_ID_MAPPING)
    );
    assert_eq!(
        h.c.describe("a"),
        Ok(TxnDescription {
            state: TxnState::Ongoing,
            producer_id: a.producer_id,
            producer_epoch: 0,
            transaction_timeout_ms: TIMEOUT_MS,
            transaction_start_time_ms: 42,
            topics: vec![("t".into(), vec![0, 1]), ("u".into(), vec![5])],
        })
    );
    assert_eq!(h.end("a", a, true), ErrorCode::NONE);
    assert_eq!(
        h.c.verify_partitions("a", a.producer_id, 0, &[tp("t", 0)]),
        Err(CONCURRENT_TRANSACTIONS)
    );
    let all = h.c.list(&[], &[]).unwrap();
    let ids: Vec<_> = all
        .iter()
        .map(|l| (l.transactional_id.as_str(), l.state))
        .collect();
    assert_eq!(
        ids,
        [("a", TxnState::PrepareCommit), ("b", TxnState::Empty)]
    );
    let by_state =
        h.c.list(&[TxnState::Empty, TxnState::Ongoing], &[])
            .unwrap();
    assert_eq!(by_state.len(), 1);
    assert_eq!(by_state[0].transactional_id, "b");
    let by_producer = h.c.list(&[], &[a.producer_id, 12345]).unwrap();
    assert_eq!(by_producer.len(), 1);
    assert_eq!(by_producer[0].producer_id, a.producer_id);
    assert!(h.c.list(&[TxnState::Dead], &[]).unwrap().is_empty());
    assert!(h
        .c
        .list(&[TxnState::Empty], &[a.producer_id])
        .unwrap()
        .is_empty());
}

#[test]
fn old_clients_get_invalid_producer_epoch() {
    for (key, version, want) in [
        (INIT_PRODUCER_ID_KEY, 3, INVALID_PRODUCER_EPOCH),
        (INIT_PRODUCER_ID_KEY, 4, PRODUCER_FENCED),
        (ADD_PARTITIONS_TO_TXN_KEY, 1, INVALID_PRODUCER_EPOCH),
        (ADD_PARTITIONS_TO_TXN_KEY, 2, PRODUCER_FENCED),
        (ADD_OFFSETS_TO_TXN_KEY, 0, INVALID_PRODUCER_EPOCH),
        (END_TXN_KEY, 1, INVALID_PRODUCER_EPOCH),
        (END_TXN_KEY, 5, PRODUCER_FENCED),
        (0, 0, PRODUCER_FENCED),
    ] {
        assert_eq!(producer_fenced_compat(key, version, PRODUCER_FENCED), want);
    }
    assert_eq!(
        producer_fenced_compat(END_TXN_KEY, 0, INVALID_TXN_STATE).code(),
        48
    );
    assert_eq!(ResponseError::InvalidProducerEpoch.code(), 47);
}

#[test]
fn time_does_not_go_back() {
    let mut h = Harness::new();
    h.now_ms = 10_000;
    let r = h.init("tx", None);
    h.now_ms = 5_000;
    assert_eq!(h.add("tx", r, &[("a", 0)]), ErrorCode::NONE);
    assert_eq!(h.c.get("tx").unwrap().start_timestamp_ms(), 10_000);
    assert!(h.tick(0).is_empty());
}

#[test]
fn unreadable_records_are_counted_and_skipped() {
    let good = TransactionLogValue {
        producer_id: 1,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch: 0,
        next_producer_epoch: NO_PRODUCER_EPOCH,
        transaction_timeout_ms: TIMEOUT_MS,
        state: TxnState::CompleteCommit,
        partitions: [tp("left", 0)].into_iter().collect(),
        last_update_timestamp_ms: 0,
        start_timestamp_ms: 0,
        client_transaction_version: 0,
    };
    let bad_epoch = TransactionLogValue {
        producer_epoch: -3,
        ..good.clone()
    };
    let fencing = TransactionLogValue {
        state: TxnState::PrepareEpochFence,
        ..good.clone()
    };
    let dead = TransactionLogValue {
        state: TxnState::Dead,
        ..good.clone()
    };
    let key = |id: &str| Some(transaction_log::encode_key(id));
    let value = |v: &TransactionLogValue| Some(transaction_log::encode_value(v));
    let records = vec![
        (key("x"), value(&good)),
        (key("y"), value(&good)),
        (key("x"), value(&bad_epoch)),
        (key("x"), value(&fencing)),
        (key("y"), value(&dead)),
        (key("z"), Some(Bytes::from_static(b"\x00\x01junk"))),
        (None, value(&good)),
    ];
    let (c, actions) = TransactionCoordinator::load(0, 1, TxnConfig::default(), records, 0);
    assert!(actions.is_empty());
    assert_eq!(c.unreadable_records(), 4);
    assert_eq!(c.len(), 1);
    let x = c.get("x").unwrap();
    assert_eq!(x.state(), TxnState::CompleteCommit);
    assert!(
        x.partitions().is_empty(),
        "a completed transaction holds none"
    );
}

/// A producer as its client sees itself.
#[derive(Clone, Copy)]
struct Producer {
    id: usize,
    producer_id: i64,
    producer_epoch: i16,
}

/// Why a write the walk holds is in flight.
#[derive(Clone, Copy, PartialEq)]
enum Parked {
    Init(usize),
    Request,
    /// The coordinator's own: a timeout, an expiry, a completion.
    Own,
}

const IDS: [&str; 3] = ["t0", "t1", "t2"];
const TOPICS: [&str; 2] = ["a", "b"];

/// The world around one coordinator in a random walk.
struct Walk {
    c: TransactionCoordinator,
    config: TxnConfig,
    /// Two per transactional id: the current one (even) and a zombie (odd).
    producers: Vec<Producer>,
    /// The committed records.
    log: Vec<(Bytes, Option<Bytes>)>,
    /// The latest committed value per id: the model memory must match.
    model: BTreeMap<String, TransactionLogValue>,
    in_flight: Vec<(Write, Parked)>,
    markers: Vec<Markers>,
    now_ms: i64,
    epoch: i32,
    next_producer_id: i64,
}

impl Walk {
    fn park(&mut self, w: Write, parked: Parked) {
        self.in_flight.push((w, parked));
    }

    /// Completes the write in flight at `index`, committed or failed.
    fn complete(&mut self, index: usize, ok: bool, error: ErrorCode, at: &str) {
        let (w, parked) = self.in_flight.swap_remove(index);
        let result = if ok { Ok(()) } else { Err(error) };
        let completion = self
            .c
            .write_completed(&w.transactional_id, result, self.now_ms);
        if ok {
            commit_to_model(&mut self.model, &w, at);
            self.log.push((w.key.clone(), w.value.clone()));
        }
        match (parked, &completion.answer) {
            (Parked::Init(p), Some(Answer::InitProducerId(r))) => {
                if r.error == ErrorCode::NONE {
                    assert!(ok, "{at}");
                    self.producers[p].producer_id = r.producer_id;
                    self.producers[p].producer_epoch = r.producer_epoch;
                }
            }
            (Parked::Request, Some(Answer::Error(e))) => {
                assert_eq!(*e == ErrorCode::NONE, ok, "{at}");
            }
            (Parked::Own, None) => {}
            (_, answer) => panic!("{at}: {answer:?}"),
        }
        for action in completion.actions {
            match action {
                TxnAction::WriteMarkers(m) => {
                    assert!(ok, "{at}");
                    assert_eq!(m.coordinator_epoch, self.epoch, "{at}");
                    self.markers.push(m);
                }
                TxnAction::Write(_) => panic!("{at}: completions write nothing"),
            }
        }
    }

    /// A request succeeded: it came from the id's current producer, as the log says.
    fn check_current(&self, id: &str, producer_id: i64, producer_epoch: i16, at: &str) {
        let v = self
            .model
            .get(id)
            .unwrap_or_else(|| panic!("{at}: {id} unknown"));
        assert_eq!(
            (v.producer_id, v.producer_epoch),
            (producer_id, producer_epoch),
            "{at}"
        );
    }

    fn tick(&mut self, at: &str) {
        for a in self.c.tick(self.now_ms) {
            let TxnAction::Write(w) = a else {
                panic!("{at}: tick only writes")
            };
            self.park(w, Parked::Own);
        }
        if let Some(deadline_ms) = self.c.next_deadline_ms() {
            assert!(deadline_ms > self.now_ms, "{at}: due deadline left");
        }
    }
}

/// Random producers (two per transactional id, the second a zombie) doing random things
/// (valid and not) at random times, with writes completing or failing in random order,
/// markers written late, and coordinator failovers: no panic, the invariants hold after
/// every call, memory equals a replay of the committed records (with a write in flight:
/// the state before it), a decision once written is what completes (never flipped, never
/// lost), epochs of a producer id never go back, and once the producers go quiet every
/// transaction completes and every id expires.
fn random_run(seed: u64, steps: usize, seen: &mut BTreeMap<&'static str, usize>) {
    let mut rng = Rng::new(seed);
    let config = TxnConfig {
        transaction_timeout_ms_max: 30_000,
        transactional_id_expiration_ms: 100_000,
    };
    let no_records: Vec<(Option<Bytes>, Option<Bytes>)> = Vec::new();
    let (c, _) = TransactionCoordinator::load(0, 1, config.clone(), no_records, 0);
    let mut w = Walk {
        c,
        config,
        producers: (0..IDS.len() * 2)
            .map(|i| Producer {
                id: i / 2,
                producer_id: NO_PRODUCER_ID,
                producer_epoch: NO_PRODUCER_EPOCH,
            })
            .collect(),
        log: Vec::new(),
        model: BTreeMap::new(),
        in_flight: Vec::new(),
        markers: Vec::new(),
        now_ms: 0,
        epoch: 1,
        next_producer_id: 1,
    };
    let errors = [NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE];
    for step in 0..steps {
        let at = format!("seed {seed} step {step}");
        let p = 2 * rng.below(IDS.len()) + usize::from(rng.chance(20));
        let id = IDS[w.producers[p].id];
        let (pid, pe) = if rng.chance(3) {
            (rng.below(4) as i64, rng.below(3) as i16)
        } else {
            (w.producers[p].producer_id, w.producers[p].producer_epoch)
        };
        let request = w.in_flight.len();
        let action = if pid == NO_PRODUCER_ID && rng.chance(80) {
            0
        } else {
            rng.below(30)
        };
        match action {
            0..=2 => {
                let expected = rng.chance(50).then_some(ProducerIdAndEpoch {
                    producer_id: pid,
                    producer_epoch: pe,
                });
                let timeout_ms = if rng.chance(97) {
                    10_000 + rng.below(20_000) as i32
                } else {
                    rng.below(40_000) as i32 - 100
                };
                let mut new_producer_id = None;
                loop {
                    let reply =
                        w.c.init_producer_id(id, timeout_ms, expected, w.now_ms, new_producer_id);
                    match reply {
                        Reply::NeedProducerId => {
                            assert!(new_producer_id.is_none(), "{at}");
                            new_producer_id = Some(w.next_producer_id);
                            w.next_producer_id += 1;
                        }
                        Reply::Now(r) => {
                            assert_ne!(r.error, ErrorCode::NONE, "{at}: answered without a write");
                            break;
                        }
                        Reply::AfterWrite(write) => {
                            w.park(write, Parked::Init(p));
                            break;
                        }
                    }
                }
            }
            3..=9 => {
                let partitions: Vec<_> = (0..1 + rng.below(3))
                    .map(|_| tp(TOPICS[rng.below(2)], rng.below(3) as i32))
                    .collect();
                let reply = w.c.add_partitions(id, pid, pe, &partitions, w.now_ms);
                if matches!(reply, Reply::AfterWrite(_) | Reply::Now(ErrorCode::NONE)) {
                    w.check_current(id, pid, pe, &at);
                }
                match reply {
                    Reply::AfterWrite(write) => w.park(write, Parked::Request),
                    Reply::Now(ErrorCode::NONE) => {
                        let meta = w.c.get(id).unwrap();
                        assert_eq!(meta.state(), TxnState::Ongoing, "{at}");
                        assert!(partitions.iter().all(|p| meta.partitions().contains(p)));
                    }
                    Reply::Now(_) => {}
                    Reply::NeedProducerId => panic!("{at}"),
                }
            }
            10 => {
                let offsets = rng.below(50) as i32;
                if let Reply::AfterWrite(write) = w.c.add_offsets(id, pid, pe, offsets, w.now_ms) {
                    w.park(write, Parked::Request);
                }
            }
            11..=14 => {
                let commit = rng.chance(70);
                let reply = w.c.end_txn(id, pid, pe, commit, w.now_ms);
                if matches!(reply, Reply::AfterWrite(_) | Reply::Now(ErrorCode::NONE)) {
                    w.check_current(id, pid, pe, &at);
                }
                match reply {
                    Reply::AfterWrite(write) => w.park(write, Parked::Request),
                    Reply::Now(ErrorCode::NONE) => {
                        let done = if commit {
                            TxnState::CompleteCommit
                        } else {
                            TxnState::CompleteAbort
                        };
                        assert_eq!(w.c.get(id).unwrap().state(), done, "{at}");
                    }
                    Reply::Now(_) => {}
                    Reply::NeedProducerId => panic!("{at}"),
                }
            }
            15..=18 if !w.in_flight.is_empty() => {
                let index = rng.below(w.in_flight.len());
                let ok = rng.chance(85);
                w.complete(index, ok, errors[rng.below(2)], &at);
            }
            19..=21 if !w.markers.is_empty() => {
                let m = w.markers.swap_remove(rng.below(w.markers.len()));
                let meta = w.c.get(&m.transactional_id).unwrap();
                assert_eq!(meta.producer_id(), m.producer_id, "{at}");
                assert_eq!(meta.producer_epoch(), m.producer_epoch, "{at}");
                let prepared = if m.commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                assert_eq!(meta.state(), prepared, "{at}");
                let write = w.c.markers_written(&m.transactional_id, w.now_ms);
                w.park(write.expect(&at), Parked::Own);
            }
            22..=24 => {
                let span_ms = if rng.chance(90) { 3_000 } else { 60_000 };
                w.now_ms += rng.below(span_ms) as i64;
                w.tick(&at);
            }
            25 => {
                if let Some(deadline_ms) = w.c.next_deadline_ms() {
                    w.now_ms = w.now_ms.max(deadline_ms);
                    w.tick(&at);
                }
            }
            26 if rng.chance(25) => {
                // Failover: writes in flight and markers not yet written are lost with the
                // old coordinator; the new one owes the markers again.
                w.epoch += 1;
                let records = w.log.iter().map(|(k, v)| (Some(k.clone()), v.clone()));
                let (c, actions) =
                    TransactionCoordinator::load(0, w.epoch, w.config.clone(), records, w.now_ms);
                w.c = c;
                w.in_flight.clear();
                w.markers.clear();
                for action in actions {
                    let TxnAction::WriteMarkers(m) = action else {
                        panic!("{at}: loading only asks for markers")
                    };
                    *seen.entry("loaded mid-transaction").or_default() += 1;
                    w.markers.push(m);
                }
            }
            _ => {
                let _ = w.c.describe(id);
                let listed = w.c.list(&[], &[]).unwrap();
                assert_eq!(listed.len(), w.c.len(), "{at}");
                let _ = w.c.verify_partitions(id, pid, pe, &[tp("a", 0)]);
            }
        }
        // A request's write is often committed at once.
        if w.in_flight.len() > request && rng.chance(60) {
            let ok = rng.chance(90);
            w.complete(request, ok, errors[rng.below(2)], &at);
        }
        assert_eq!(w.c.check_invariants(), Ok(()), "{at}");
        // Memory is the replay of what was committed.
        for (id, value) in &w.model {
            let meta = w.c.get(id).unwrap_or_else(|| panic!("{at}: {id} lost"));
            assert_eq!(&meta.committed, value, "{at}: {id}");
        }
        for (id, meta) in &w.c.txns {
            if !w.model.contains_key(id) {
                assert_eq!(meta.producer_epoch(), NO_PRODUCER_EPOCH, "{at}: {id}");
                assert!(meta.pending.is_some(), "{at}: {id} never written");
            }
        }
    }
    for (_, v) in &w.log {
        let name = match v {
            Some(v) => transaction_log::decode_value(v).unwrap().state.name(),
            None => "tombstone",
        };
        *seen.entry(name).or_default() += 1;
    }
    // The producers go quiet: writes and markers complete, and time alone ends every
    // transaction and expires every id.
    for round in 0.. {
        assert!(round < 200, "seed {seed}: never settles");
        while !w.in_flight.is_empty() {
            w.complete(
                0,
                true,
                ErrorCode::NONE,
                &format!("seed {seed} winding down"),
            );
        }
        for m in std::mem::take(&mut w.markers) {
            let write = w.c.markers_written(&m.transactional_id, w.now_ms).unwrap();
            w.park(write, Parked::Own);
        }
        if !w.in_flight.is_empty() {
            continue;
        }
        let Some(deadline_ms) = w.c.next_deadline_ms() else {
            break;
        };
        w.now_ms = w.now_ms.max(deadline_ms);
        w.tick(&format!("seed {seed} winding down"));
        assert_eq!(w.c.check_invariants(), Ok(()), "seed {seed} winding down");
    }
    assert!(w.c.is_empty(), "seed {seed}: {:?} left", w.c.txns.keys());
    assert!(w.model.is_empty(), "seed {seed}");
}

/// Applies a committed write to the model, checking it against the previous record of the
/// id: a decision completes as taken, and a producer id's epoch never goes back.
fn commit_to_model(model: &mut BTreeMap<String, TransactionLogValue>, w: &Write, at: &str) {
    let id = w.transactional_id.clone();
    let Some(bytes) = &w.value else {
        let gone = model.remove(&id).expect("a tombstone of a known id");
        assert!(
            gone.state.expiration_allowed(),
            "{at}: {id} expired in {gone:?}"
        );
        return;
    };
    let value = transaction_log::decode_value(bytes).expect("written records read back");
    assert_eq!(
        transaction_log::decode_key(&w.key).as_deref(),
        Some(id.as_str())
    );
    if let Some(before) = model.get(&id) {
        use TxnState::*;
        match value.state {
            CompleteCommit => assert_eq!(before.state, PrepareCommit, "{at}: {id}"),
            CompleteAbort => assert_eq!(before.state, PrepareAbort, "{at}: {id}"),
            PrepareCommit | PrepareAbort => {
                assert_eq!(before.state, Ongoing, "{at}: {id}");
                // Only an abort may fence (epoch + 1); the decision keeps the partitions.
                let bump = value.producer_epoch - before.producer_epoch;
                let bumps = if value.state == PrepareCommit {
                    0..=0
                } else {
                    0..=1
                };
                assert!(
                    bumps.contains(&bump),
                    "{at}: {id} epoch {before:?} -> {value:?}"
                );
                assert_eq!(value.partitions, before.partitions, "{at}: {id}");
            }
            _ => assert!(!before.state.is_prepare(), "{at}: {id} left {before:?}"),
        }
        if value.producer_id == before.producer_id {
            assert!(value.producer_epoch >= before.producer_epoch, "{at}: {id}");
        } else {
            assert_eq!(value.state, Empty, "{at}: only InitProducerId rotates");
            assert_eq!(value.previous_producer_id, before.producer_id, "{at}");
        }
        if value.state.is_prepare() || value.state == CompleteCommit {
            assert_eq!(value.partitions.is_empty(), value.state == CompleteCommit);
        }
    } else {
        assert_eq!(
            (value.state, value.producer_epoch),
            (TxnState::Empty, 0),
            "{at}"
        );
    }
    model.insert(id, value);
}

#[test]
fn random_walks_keep_the_invariants() {
    let mut seen = BTreeMap::new();
    for seed in 0..500 {
        random_run(seed, 500, &mut seen);
    }
    // The walk writes every state a transaction can be in, and fails over in the middle
    // of transactions, so the checks above cover them all.
    assert_eq!(seen.len(), 8, "{seen:?}");
}
