//! The simulation of one replicated partition: three replicas, each Keel's own `Log` on its own
//! simulated disk, one glommio executor, one thread. The leader serves its followers' fetches
//! and the followers apply the answers with keel-storage's replication rules
//! (`keel_storage::replication`: the diverging-epoch answer, follower progress, ISR expansion
//! and shrink, the high watermark, the follower's truncation point), the same functions the
//! broker runs. Fetches and answers cross a simulated network that delays, reorders, drops and
//! duplicates them and can cut a link; replicas crash (power cut, seeded torn writes), are
//! killed and restart; a controller fences a replica not heard from and elects a new leader
//! from the ISR (Kafka's rules: the first live ISR member in replica order, a new leader
//! epoch); clients produce with acks=all and read below the high watermark.
//!
//! Invariants: no acknowledged record is lost or moved (checked at every election and at the
//! end, on the new leader's log); a record a reader saw never disappears (the same); no
//! replica's high watermark passes what a leader committed (a follower serves reads below it);
//! the high watermark never goes back on a replica while it stays up and in the ISR; offsets
//! are dense on every replica; and once the faults stop, every replica converges to the
//! leader's log and the ISR is whole again (a follower that cannot truncate a diverged tail
//! never does).
//!
//! The fetch protocol's glue (what goes in a fetch, the leader's checks, progress and read, what
//! the follower does with each answer) is storage's `replication::fetch`, which the broker's
//! fetcher and Fetch handler run too: the broker carries its asks and answers over Kafka's
//! Fetch, this simulation over its network (the transport seam). Each replica's role, its
//! followers, its pending ISR change and its high watermark are storage's
//! `replication::ReplicaState`, the state machine the broker keeps per partition (taking up
//! the role an image names, the periodic ISR check, AlterPartition answers, an image ending a
//! pending change). Not Keel's code here: the broker's tasks around these (the fetcher's
//! loop, connections, timers, throttles, the AlterPartition queue's batching), and the
//! metadata quorum itself (its decisions are keel-raft's own functions, below). With
//! `--metadata-network` each replica acts on its own installed image, which reaches it over
//! the network (as the broker's metadata fetch brings it), and the controller hears heartbeats
//! over it: a replica cut off from the controller is fenced while it runs and leads on by its
//! old image until the new one reaches it.
//! With `--slow-take-up` a new leader takes up its role steps after its image (a slow
//! leader-epoch checkpoint sync) and clients ask ListOffsets for the latest offset (KIP-207).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

use std::sync::Arc;

use bytes::BytesMut;
use keel_raft::partition_change::{
    alter_partition, fence_records, offline_replica_records, registration_records, unfence_records,
    AlterPartitionRequest, IsrMember, Unclean, MIN_INSYNC_REPLICAS,
};
use keel_raft::records::RESOURCE_BROKER;
use keel_raft::registration::BrokerRegistration;
use keel_raft::{ApplyOutcome, ClusterImage, Record};
use keel_simdisk::{Fault, SimDisk};
use keel_storage::replication::fetch::{self as glue, Applied, FetchAnswer, FetchAsk, NotApplied};
use keel_storage::replication::timers::{self, AcksAll, FetchBackoff, IsrChangeQueue};
use keel_storage::replication::{
    Assignment, IsrChangeAnswer, PendingIsr, PendingIsrChange, ReplicaState, Role,
};
use keel_storage::{Disk, LeaderEpoch, Log, LogConfig, Offset, SimHandle, StorageError};
use keel_vocab::records::{frame_batch, parse_records, put_record, BatchFields, BatchHeader};

use crate::{Rng, SeedReport, Trail, Violation};

const REPLICAS: [i32; 3] = [1, 2, 3];
/// `min.insync.replicas`.
const MIN_ISR: i32 = 2;
/// `replica.lag.time.max.ms`.
const LAG_MS: i64 = 3_000;
/// The controller fences a replica it has not heard from for this long.
const SESSION_MS: i64 = 2_000;
/// `--timers`, scaled as `LAG_MS` is (a tenth of Kafka's defaults): an acks=all write's
/// deadline (the producer's `request.timeout.ms`), a follower fetch's (`replica.socket.timeout.ms`),
/// an AlterPartition request's, and a follower partition's back-off (`replica.fetch.backoff.ms`).
const REQUEST_TIMEOUT_MS: i64 = 3_000;
const SOCKET_TIMEOUT_MS: i64 = 3_000;
const CONTROLLER_TIMEOUT_MS: i64 = 3_000;
const FETCH_BACKOFF_MS: i64 = 100;
/// Bytes a follower fetches at most per answer.
const FETCH_MAX: usize = 16 << 10;
const TRAIL: usize = 60;

#[derive(Clone)]
enum Msg {
    Fetch {
        id: u64,
        from: i32,
        to: i32,
        epoch: i32,
        ask: FetchAsk,
    },
    Answer {
        id: u64,
        from: i32,
        to: i32,
        epoch: i32,
        answer: FetchAnswer,
    },
    /// `--controller-network`: a leader's AlterPartition (Kafka's AlterPartitionManager
    /// sends one per change), with the epochs it knows and the members' broker epochs.
    AlterPartition {
        /// The request's number (`--timers`: an answer to a request that timed out is dropped).
        req: u64,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<IsrMember>,
        why: &'static str,
    },
    /// The controller's answer to `request` (an `AlterPartition`): committed or refused, and
    /// the partition as the controller has it then (Kafka's AlterPartition response carries
    /// it).
    AlterPartitionAnswer {
        to: i32,
        request: Box<Msg>,
        answer: IsrChangeAnswer,
        view: View,
    },
    /// `--metadata-network`: a metadata image reaching a replica (what the broker's metadata
    /// fetch from the quorum brings it).
    Image { to: i32, view: View },
}

/// The partition as one replica's installed metadata image has it (the controller's newest
/// without `--metadata-network`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct View {
    /// The metadata log index of the image.
    index: u64,
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
    partition_epoch: i32,
}

impl View {
    /// The partition as this image has it, for the replica state machine.
    fn assignment(&self) -> Assignment<'_> {
        Assignment {
            leader: self.leader,
            leader_epoch: self.epoch,
            replicas: &REPLICAS,
            isr: &self.isr,
            partition_epoch: self.partition_epoch,
        }
    }
}

/// The controller's address on the simulated network.
const CONTROLLER: i32 = 0;

impl Msg {
    /// An AlterPartition's change as its leader sent it (what `ReplicaState` holds pending).
    fn as_sent(&self) -> PendingIsr {
        let Msg::AlterPartition {
            leader_epoch,
            partition_epoch,
            isr,
            ..
        } = self
        else {
            unreachable!("an AlterPartition")
        };
        PendingIsr {
            isr: isr.iter().map(|m| m.broker_id).collect(),
            leader_epoch: *leader_epoch,
            partition_epoch: *partition_epoch,
        }
    }

    fn ends(&self) -> (i32, i32) {
        match self {
            Msg::Fetch { from, to, .. } | Msg::Answer { from, to, .. } => (*from, *to),
            Msg::AlterPartition { leader, .. } => (*leader, CONTROLLER),
            Msg::AlterPartitionAnswer { to, .. } | Msg::Image { to, .. } => (CONTROLLER, *to),
        }
    }
}

struct Node {
    id: i32,
    disk: SimHandle,
    dir: PathBuf,
    log: Option<Log>,
    down_since: i64,
    /// `--metadata-network`: the image it installed last, and when the controller last heard
    /// its heartbeat.
    view: View,
    heard_ms: i64,
    /// The broker's replica state machine (storage's `replication::ReplicaState`, which the
    /// broker keeps per partition): the role taken up, the leader's followers and epoch
    /// start, the ISR change it proposed. A restart starts it afresh, as the broker's.
    state: ReplicaState,
    /// `--slow-take-up`: the leadership (epoch) it is taking up, and the step it completes.
    take_up_due: Option<(i32, u64)>,
    /// Follower: the fetch that is out and not answered. Its answer is the only one applied:
    /// one connection, one request at a time, as the broker's fetcher (a duplicated or late
    /// answer to an older fetch is dropped, as TCP and a reconnection would).
    fetching: Option<u64>,
    /// `--timers`: when the fetch out times out; the follower's back-off after an answer it
    /// could not apply; the leader's AlterPartition queue and the request in flight (its
    /// number, deadline, and the request).
    fetch_deadline: i64,
    backoff: FetchBackoff<()>,
    isr_queue: IsrChangeQueue<i32, Msg>,
    alter_in_flight: Option<(u64, i64, Msg)>,
    /// The high watermark last seen while it was up and in the ISR.
    hw_in_isr: Option<i64>,
    /// Started once: a later start is a restart (a new registration).
    started: bool,
    /// An injected EIO poisoned its log: it is offline (reported to the controller, which
    /// moved its leadership away) and does nothing until it restarts, as the broker.
    offline: bool,
}

/// The partition as the controller has it: keel-raft's own decisions
/// (`partition_change::{fence_records, registration_records, alter_partition}`, the functions
/// the metadata quorum's leader runs) applied to a real `ClusterImage`, with the partition's
/// fields read back after every change.
struct Controller {
    image: Arc<ClusterImage>,
    registrations: u8,
    leader: i32,
    epoch: i32,
    isr: Vec<i32>,
    partition_epoch: i32,
    fenced: BTreeSet<i32>,
}

const TOPIC_ID: [u8; 16] = [7; 16];

impl Controller {
    /// Three brokers registered, topic `t` with one partition on them all, broker 1 leading,
    /// `min.insync.replicas` 2.
    fn new() -> Controller {
        let mut c = Controller {
            image: Arc::new(ClusterImage::default()),
            registrations: 0,
            leader: -1,
            epoch: -1,
            isr: Vec::new(),
            partition_epoch: -1,
            fenced: BTreeSet::new(),
        };
        for b in REPLICAS {
            c.register(b);
        }
        let created = c.apply(&[
            Record::TopicCreated {
                name: "t".into(),
                topic_id: TOPIC_ID,
            },
            Record::PartitionCreated {
                topic_id: TOPIC_ID,
                partition: 0,
                replicas: REPLICAS.to_vec(),
                isr: REPLICAS.to_vec(),
                leader: REPLICAS[0],
                leader_epoch: 0,
            },
            Record::ConfigChanged {
                resource_type: RESOURCE_BROKER,
                resource_name: String::new(),
                name: MIN_INSYNC_REPLICAS.into(),
                value: Some(MIN_ISR.to_string()),
            },
        ]);
        assert!(created, "the simulated cluster's topic");
        c
    }

    /// The partition as this image has it.
    fn view(&self) -> View {
        View {
            index: self.image.applied_index,
            leader: self.leader,
            epoch: self.epoch,
            isr: self.isr.clone(),
            partition_epoch: self.partition_epoch,
        }
    }

    /// A fenced broker heartbeats again with its metadata caught up: unfenced (the same
    /// incarnation; it rejoins ISRs by fetching).
    fn unfence(&mut self, id: i32) {
        let records = unfence_records(&self.image, id, Unclean::Disabled);
        self.apply(&records);
    }

    /// Applies `records` as the next log entry; false if the image refuses them.
    fn apply(&mut self, records: &[Record]) -> bool {
        let (next, outcome) = self.image.apply(self.image.applied_index + 1, records);
        if outcome != ApplyOutcome::Applied {
            return false;
        }
        self.image = next;
        if let Some(p) = self.image.topic("t").and_then(|t| t.partitions.first()) {
            self.leader = p.leader;
            self.epoch = p.leader_epoch;
            self.isr = p.isr.clone();
            self.partition_epoch = p.partition_epoch;
        }
        self.fenced = self
            .image
            .brokers
            .values()
            .filter(|b| b.fenced)
            .map(|b| b.broker_id)
            .collect();
        true
    }

    /// A broker (re)registers as a new incarnation after a crash or kill (no clean shutdown:
    /// it leaves the ISR unless it is the last member, KIP-966).
    fn register(&mut self, id: i32) {
        self.registrations += 1;
        let reg = BrokerRegistration {
            broker_id: id,
            incarnation_id: [self.registrations; 16],
            host: format!("b{id}"),
            port: 9092,
            rack: None,
            controller_addr: None,
            shard_count: 1,
            inter_broker_host: None,
            inter_broker_port: None,
            inter_broker_shard_ports: Vec::new(),
            previous_broker_epoch: -1,
            listeners: Vec::new(),
        };
        let records = registration_records(&self.image, &reg, Unclean::Disabled);
        self.apply(&records);
    }

    fn elr(&self) -> Vec<i32> {
        self.image
            .topic("t")
            .and_then(|t| t.partitions.first())
            .map_or(Vec::new(), |p| p.elr.clone())
    }

    /// The broker reports its replica offline (its log is poisoned): keel-raft's
    /// `offline_replica_records` (out of the ISR and ELR, leadership elected away). Whether
    /// the controller took it.
    fn offline(&mut self, id: i32) -> bool {
        let epoch = self.image.brokers.get(&id).map_or(-1, |b| b.broker_epoch);
        match offline_replica_records(&self.image, id, epoch, &[(TOPIC_ID, 0)], Unclean::Disabled) {
            Ok(Some(records)) => self.apply(&records),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// The broker missed its session: fenced, out of the ISR, its leaderships elected away.
    fn fence(&mut self, id: i32) {
        let records = fence_records(&self.image, id, Unclean::Disabled);
        self.apply(&records);
    }

    /// `isr` with each member's broker epoch as the image has it now.
    fn members(&self, isr: &[i32]) -> Vec<IsrMember> {
        isr.iter()
            .map(|b| IsrMember {
                broker_id: *b,
                broker_epoch: self.image.brokers.get(b).map_or(-1, |i| i.broker_epoch),
            })
            .collect()
    }

    /// An AlterPartition sent at (`leader_epoch`, `partition_epoch`), possibly stale by the
    /// time it arrives (keel-raft refuses it then): the controller's answer.
    fn alter_isr_at(
        &mut self,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<IsrMember>,
    ) -> IsrChangeAnswer {
        let request = AlterPartitionRequest {
            topic_id: TOPIC_ID,
            partition: 0,
            leader_id: leader,
            leader_epoch,
            partition_epoch,
            new_isr,
        };
        match alter_partition(&self.image, &request) {
            Ok(Some(record)) => {
                assert!(self.apply(&[record]), "a change keel-raft decided applies");
                IsrChangeAnswer::Committed {
                    partition_epoch: self.partition_epoch,
                }
            }
            Ok(None) => IsrChangeAnswer::Committed { partition_epoch },
            Err(code) => IsrChangeAnswer::Refused { code },
        }
    }
}

struct Pending {
    leader: i32,
    epoch: i32,
    last: i64,
    records: Vec<(i64, Vec<u8>)>,
    /// The idempotent producer that sent it.
    producer: Option<usize>,
    /// `--timers`: when the acks=all wait times out.
    deadline_ms: i64,
}

/// What a replicated run adds to the network faults, power cuts and restarts every run has (a
/// seed under another mode is another run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaMode {
    /// `--disk-faults`: EIO on replicas' writes and syncs (a failed write or sync poisons the
    /// log, the replica goes offline and the controller moves its leadership away).
    pub disk_faults: bool,
    /// `--disk-full`: a replica's disk fills up (ENOSPC) and gets space back later; its log
    /// stalls (appends refused, reads go on) and retries its staged writes, as the broker's
    /// timer does once a second.
    pub disk_full: bool,
    /// `--idempotent`: two idempotent producers (`enable.idempotence`, one request in flight)
    /// beside the plain one; a batch not acknowledged is sent again, with its sequence, to
    /// whoever leads, until it is. Checked too: a retried batch the leader holds is answered
    /// at its original offsets and never appended twice; a retry of a batch the leader lacks
    /// is taken, never refused as out of sequence.
    pub idempotent: bool,
    /// `--controller-network`: a leader's ISR changes travel to the controller as
    /// AlterPartition requests over the simulated network (delayed, reordered, duplicated,
    /// lost) and stay pending until answered: the leader counts the maximal ISR meanwhile,
    /// and keel-raft refuses a request whose epochs went stale on the way.
    pub controller_network: bool,
    /// `--metadata-network`: the controller's images reach each replica over the simulated
    /// network (delayed, reordered, lost and sent again), so replicas act on stale images: a
    /// follower fetches from a former leader, a new leader takes up its role late, a former
    /// leader serves on. The controller hears each replica's heartbeats over the network too:
    /// a replica cut off from it is fenced while it runs (out of the ISR, its leadership
    /// elected away) and unfenced when its heartbeats come back.
    pub metadata_network: bool,
    /// `--slow-take-up`: a replica named leader takes up the role 1-5 steps after the image
    /// that names it (the broker awaits the leader-epoch checkpoint's fdatasync, which a slow
    /// disk stretches), while the other replicas and the clients go on; clients also ask
    /// ListOffsets for the latest offset. Checked too: no answer is below what was committed
    /// when its leader began taking up the role (KIP-207), which holds only if a replica
    /// serves as leader once it has taken the role up.
    pub slow_take_up: bool,
    /// `--timers`: the broker's timers on the simulated clock (storage's
    /// `replication::timers`, which the broker's tasks sleep on): an acks=all write waits
    /// until a deadline (`acks_all`: REQUEST_TIMED_OUT, or NOT_ENOUGH_REPLICAS_AFTER_APPEND once
    /// the committed ISR is below the minimum); a lost fetch or answer is noticed when the
    /// fetch's socket timeout passes, a follower backs off after an answer it could not apply
    /// (`FetchBackoff`); with `--controller-network`, each leader's AlterPartition queue
    /// (`IsrChangeQueue`: one request in flight, an unanswered one noticed at its timeout and
    /// sent again after the backoff if still pending, a late answer dropped). Without it every
    /// timer fires at once: a lost message is noticed as it is lost and clients wait for ever.
    pub timers: bool,
}

impl ReplicaMode {
    /// Nothing added: the replicated partition with the faults every run has.
    pub const PLAIN: ReplicaMode = ReplicaMode {
        disk_faults: false,
        disk_full: false,
        idempotent: false,
        controller_network: false,
        metadata_network: false,
        slow_take_up: false,
        timers: false,
    };

    /// The parts that are on: each one's `keel-sim` flag and its name in a violation.
    fn parts(self) -> impl Iterator<Item = (&'static str, &'static str)> {
        [
            (self.disk_faults, "--disk-faults", "disk faults"),
            (self.disk_full, "--disk-full", "disk full"),
            (self.idempotent, "--idempotent", "idempotent"),
            (
                self.controller_network,
                "--controller-network",
                "controller network",
            ),
            (
                self.metadata_network,
                "--metadata-network",
                "metadata network",
            ),
            (self.slow_take_up, "--slow-take-up", "slow take-up"),
            (self.timers, "--timers", "timers"),
        ]
        .into_iter()
        .filter(|(on, _, _)| *on)
        .map(|(_, flag, name)| (flag, name))
    }

    /// The `keel-sim` flags that select this mode, and its name in a violation.
    fn names(self) -> (String, String) {
        let mut flags = String::from("--replicated ");
        let mut kind = String::from("[replicated");
        for (flag, name) in self.parts() {
            flags.push_str(flag);
            flags.push(' ');
            kind.push_str(", ");
            kind.push_str(name);
        }
        kind.push_str("] ");
        (flags, kind)
    }
}

/// An idempotent producer.
struct Producer {
    id: i64,
    next_sequence: i32,
    /// The batch sent and not acknowledged yet: sent again until it is.
    outstanding: Option<Outstanding>,
}

#[derive(Clone)]
struct Outstanding {
    base_sequence: i32,
    timestamp: i64,
    values: Vec<Vec<u8>>,
    /// The (leader, epoch) it was last sent to.
    sent_to: Option<(i32, i32)>,
}

struct Run {
    seed: u64,
    rng: Rng,
    mode: ReplicaMode,
    producers: Vec<Producer>,
    /// Replicas whose disk is full, and the step at which space comes back.
    full_until: BTreeMap<i32, u64>,
    nodes: Vec<Node>,
    ctl: Controller,
    net: VecDeque<Msg>,
    cut: BTreeSet<(i32, i32)>,
    now_ms: i64,
    step: u64,
    /// `--slow-take-up`: by leader epoch, what was committed when its leader began taking
    /// it up; no ListOffsets (latest) answer of that epoch may be below it.
    latest_floor: BTreeMap<i32, i64>,
    sent: u64,
    /// AlterPartition requests numbered so far.
    alter_sent: u64,
    pending: Vec<Pending>,
    /// What must survive: acknowledged records and records a reader saw, by offset.
    must: BTreeMap<i64, Vec<u8>>,
    /// The highest high watermark a leader reached.
    committed: i64,
    /// `--metadata-network`: the newest image index sent to the replicas.
    broadcast_index: u64,
    report: SeedReport,
    trail: Trail,
}

/// Runs seed `seed` of the replicated partition for `steps` steps, then heals everything and
/// checks that the replicas converge. `mode` says what else is injected or run.
pub async fn run(seed: u64, steps: u64, mode: ReplicaMode) -> Result<SeedReport, Violation> {
    let mut rng = Rng::new(seed ^ 0x7265_706c);
    let mut nodes = Vec::new();
    for id in REPLICAS {
        let keep = [0u32, 128, 256][rng.range(0, 2) as usize];
        nodes.push(Node {
            id,
            disk: SimHandle::new(SimDisk::new(rng.draw(), keep)),
            dir: PathBuf::from(format!("/b{id}/t-0")),
            log: None,
            down_since: 0,
            view: View {
                index: 0,
                leader: -1,
                epoch: -1,
                isr: Vec::new(),
                partition_epoch: -1,
            },
            heard_ms: 0,
            state: ReplicaState::new(id),
            take_up_due: None,
            fetching: None,
            fetch_deadline: 0,
            backoff: FetchBackoff::default(),
            isr_queue: IsrChangeQueue::default(),
            alter_in_flight: None,
            hw_in_isr: None,
            started: false,
            offline: false,
        });
    }
    let mut run = Run {
        seed,
        rng,
        mode,
        producers: (0..2)
            .map(|i| Producer {
                id: 1000 + i,
                next_sequence: 0,
                outstanding: None,
            })
            .collect(),
        full_until: BTreeMap::new(),
        nodes,
        ctl: Controller::new(),
        net: VecDeque::new(),
        cut: BTreeSet::new(),
        now_ms: 1_700_000_000_000,
        step: 0,
        latest_floor: BTreeMap::new(),
        sent: 0,
        alter_sent: 0,
        pending: Vec::new(),
        must: BTreeMap::new(),
        committed: 0,
        broadcast_index: 0,
        report: SeedReport {
            seed,
            ..SeedReport::default()
        },
        trail: {
            let (flags, kind) = mode.names();
            Trail::new(seed, &kind, &flags, TRAIL)
        },
    };
    keel_storage::set_previous_stop_clean(false);
    for i in 0..run.nodes.len() {
        run.start(i).await?;
    }
    for step in 0..steps {
        run.step = step;
        run.now_ms += run.rng.range(0, 150) as i64;
        run.step_once().await?;
        run.settle().await?;
    }
    run.converge().await?;
    run.report.steps = steps;
    run.report.checks = run.trail.checks();
    for n in &mut run.nodes {
        let c = n.disk.disk().counts.clone();
        let d = &mut run.report.disk;
        d.crashes += c.crashes;
        d.sectors_kept += c.sectors_kept;
        d.sectors_lost += c.sectors_lost;
        d.entries_reverted += c.entries_reverted;
        d.sync_eio += c.sync_eio;
        d.write_eio += c.write_eio;
        d.no_space += c.no_space;
        n.log = None;
        keel_storage::file_cache::forget_under(&n.dir);
    }
    Ok(run.report)
}

impl Run {
    fn note(&mut self, what: String) {
        let line = format!("{:>5} t+{} {what}", self.step, self.now_ms % 1_000_000);
        if std::env::var("SIM_TRACE").is_ok() {
            eprintln!("N {line}");
        }
        self.trail.note(line);
    }

    fn violation(&self, what: String) -> Violation {
        self.trail.violation(self.step, what)
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) -> Result<(), Violation> {
        self.trail.check(self.step, ok, what)
    }

    fn idx(id: i32) -> usize {
        (id - 1) as usize
    }

    /// The partition as replica `id`'s installed image has it: the controller's newest
    /// unless `--metadata-network`.
    fn view_of(&self, id: i32) -> View {
        if self.mode.metadata_network {
            self.nodes[Self::idx(id)].view.clone()
        } else {
            self.ctl.view()
        }
    }

    /// The replicas that lead by their own image and have taken the role up (without
    /// `--metadata-network`, the controller's leader only; with it, a former leader may
    /// still believe it leads).
    fn self_leaders(&self) -> Vec<i32> {
        REPLICAS
            .iter()
            .copied()
            .filter(|id| {
                let v = self.view_of(*id);
                self.up(*id) && self.nodes[Self::idx(*id)].state.is_leader(&v.assignment())
            })
            .collect()
    }

    /// The leader a client's request goes to: one that leads by its own image, online and
    /// with its role taken up (with `--metadata-network` there may be two: a client with an
    /// older image talks to the former one).
    fn client_leader(&mut self) -> Option<i32> {
        if !self.mode.metadata_network {
            let leader = self.ctl.leader;
            let v = self.ctl.view();
            let ok = leader > 0
                && self.online(leader)
                && self.nodes[Self::idx(leader)]
                    .state
                    .is_leader(&v.assignment());
            return ok.then_some(leader);
        }
        let leaders: Vec<i32> = self
            .self_leaders()
            .into_iter()
            .filter(|id| self.online(*id))
            .collect();
        let chosen = match leaders.len() {
            0 => None,
            1 => Some(leaders[0]),
            n => Some(leaders[self.rng.range(0, n as u64 - 1) as usize]),
        };
        if chosen.is_some_and(|l| (l, self.view_of(l).epoch) != (self.ctl.leader, self.ctl.epoch)) {
            self.report.stale_leader_requests += 1;
        }
        chosen
    }

    /// `--metadata-network`: every image the controller made since the last call is sent to
    /// every live replica, and each replica cut off from the controller misses heartbeats:
    /// fenced once `SESSION_MS` passed, unfenced once it heartbeats again caught up.
    fn metadata_traffic(&mut self) {
        if !self.mode.metadata_network {
            return;
        }
        let index = self.ctl.image.applied_index;
        if index > self.broadcast_index {
            self.broadcast_index = index;
            for id in REPLICAS {
                if self.up(id) {
                    self.net.push_back(Msg::Image {
                        to: id,
                        view: self.ctl.view(),
                    });
                }
            }
        }
        for id in REPLICAS {
            let heard = self.up(id) && !self.cut.contains(&(CONTROLLER, id));
            let i = Self::idx(id);
            if heard {
                self.nodes[i].heard_ms = self.now_ms;
                let caught_up = self.nodes[i].view.index >= self.ctl.image.applied_index;
                if self.ctl.fenced.contains(&id) && caught_up && !self.nodes[i].offline {
                    self.ctl.unfence(id);
                    let (l, e, isr) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                    self.note(format!(
                        "controller unfences replica {id}: leader {l} epoch {e} ISR {isr:?}"
                    ));
                }
            } else if !self.ctl.fenced.contains(&id)
                && self.now_ms - self.nodes[i].heard_ms > SESSION_MS
            {
                self.ctl.fence(id);
                let (l, e, isr) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                let up = self.up(id);
                if up {
                    self.report.fenced_while_up += 1;
                }
                self.note(format!(
                    "controller fences replica {id} (up {up}, heartbeats lost): leader {l} \
                     epoch {e} ISR {isr:?}"
                ));
            }
        }
    }

    /// Opens replica `i`'s log (after a start, a crash or a kill).
    async fn start(&mut self, i: usize) -> Result<(), Violation> {
        let n = &mut self.nodes[i];
        keel_storage::file_cache::forget_under(&n.dir);
        let config = LogConfig {
            segment_bytes: 12_000,
            index_interval_bytes: 1024,
            ..LogConfig::default()
        };
        match Log::open_on(Disk::Sim(n.disk.clone()), &n.dir, config).await {
            Ok(log) => {
                log.set_replicated(true);
                n.log = Some(log);
                n.state = ReplicaState::new(n.id);
                n.take_up_due = None;
                n.fetching = None;
                n.backoff.clear();
                n.isr_queue.clear();
                n.alter_in_flight = None;
                n.hw_in_isr = None;
                n.offline = false;
                let (id, restarted) = (n.id, n.started);
                n.started = true;
                self.note(format!("replica {id} starts"));
                // A restart registers a new incarnation (unfenced; out of the ISR, KIP-966).
                if restarted {
                    self.ctl.register(id);
                    let (l, e, isr) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                    let elr = self.ctl.elr();
                    self.note(format!(
                        "replica {id} registers: leader {l} epoch {e} ISR {isr:?} ELR {elr:?}"
                    ));
                }
                // It serves once it has caught up with the metadata log.
                let (view, now) = (self.ctl.view(), self.now_ms);
                let n = &mut self.nodes[i];
                n.view = view;
                n.heard_ms = now;
                Ok(())
            }
            Err(_) if n.disk.disk().is_off() => {
                // The power went off while it opened: down again, its disk crashed.
                n.disk.disk().crash();
                n.down_since = self.now_ms;
                let id = n.id;
                self.report.crashes += 1;
                self.note(format!("replica {id} loses power while it opens"));
                Ok(())
            }
            Err(e) if fired(self.mode, &n.disk) && !e.to_string().contains("corrupt") => {
                // An injected EIO or ENOSPC fired while it opened: the broker's partition stays
                // offline until a later start.
                n.down_since = self.now_ms;
                let id = n.id;
                self.note(format!(
                    "replica {id} does not open (an injected fault): {e}"
                ));
                Ok(())
            }
            Err(e) => {
                let id = n.id;
                Err(self.violation(format!("replica {id} does not open: {e}")))
            }
        }
    }

    async fn step_once(&mut self) -> Result<(), Violation> {
        if self.mode.disk_faults && self.rng.chance(2) {
            self.inject_eio();
        }
        if self.mode.disk_full {
            self.disk_full().await;
        }
        if self.mode.slow_take_up && self.rng.chance(20) {
            self.list_offsets()?;
        }
        match self.rng.range(0, 99) {
            0..=21 => self.produce().await,
            22..=41 => self.send_fetch().await,
            42..=74 => self.deliver().await,
            75..=79 => self.read().await,
            80..=84 => {
                self.now_ms += self.rng.range(500, 2_500) as i64;
                self.note("time passes".into());
                Ok(())
            }
            85..=86 => {
                self.stop_replica(true);
                Ok(())
            }
            87 => {
                // The power of a live replica goes off a few disk changes from now: in the
                // middle of an append, a sync, a truncation, a checkpoint.
                let live: Vec<i32> = REPLICAS.iter().copied().filter(|r| self.up(*r)).collect();
                if let Some(&id) = live.get(self.rng.range(0, 2) as usize) {
                    let changes = self.rng.range(0, 6);
                    self.nodes[Self::idx(id)]
                        .disk
                        .disk()
                        .power_off_after(changes);
                    self.report.injected_power_off += 1;
                    self.note(format!(
                        "replica {id}'s power goes off after {changes} changes"
                    ));
                }
                Ok(())
            }
            88..=89 => {
                self.stop_replica(false);
                Ok(())
            }
            90..=94 => self.restart_one().await,
            95..=97 => {
                self.toggle_link();
                Ok(())
            }
            _ => {
                // A lost message: the fetcher times out and asks again.
                if !self.net.is_empty() {
                    let k = self.rng.range(0, self.net.len() as u64 - 1) as usize;
                    let m = self.net.remove(k).expect("in range");
                    let (f, t) = m.ends();
                    self.note(format!("lost a message {f}->{t}"));
                    self.timed_out(&m);
                }
                Ok(())
            }
        }
    }

    fn up(&self, id: i32) -> bool {
        self.nodes[Self::idx(id)].log.is_some()
    }

    /// Up with its log online: it fetches, serves fetches and may lead.
    fn online(&self, id: i32) -> bool {
        self.up(id) && !self.nodes[Self::idx(id)].offline
    }

    /// One EIO on the next write or sync of a live replica's partition dir.
    fn inject_eio(&mut self) {
        let live: Vec<i32> = REPLICAS
            .iter()
            .copied()
            .filter(|r| self.online(*r))
            .collect();
        let Some(&id) = live.get(self.rng.range(0, 2) as usize) else {
            return;
        };
        let prefix = self.nodes[Self::idx(id)]
            .dir
            .to_string_lossy()
            .trim_start_matches('/')
            .to_string();
        let fault = if self.rng.chance(50) {
            self.report.injected_sync_eio += 1;
            Fault::SyncEio { prefix, once: true }
        } else {
            self.report.injected_write_eio += 1;
            Fault::WriteEio { prefix, once: true }
        };
        self.note(format!("replica {id}: inject {fault:?}"));
        self.nodes[Self::idx(id)].disk.disk().inject(fault);
    }

    /// `--disk-full`: now and then a live replica's disk fills up (a capacity a little above
    /// what it holds); 5-40 steps later space comes back. Meanwhile its log stalls and, as the
    /// broker's timer does, retries its staged writes.
    async fn disk_full(&mut self) {
        let step = self.step;
        let back: Vec<i32> = self
            .full_until
            .iter()
            .filter(|(_, until)| **until <= step)
            .map(|(id, _)| *id)
            .collect();
        for id in back {
            self.full_until.remove(&id);
            self.nodes[Self::idx(id)].disk.disk().remove_no_space();
            self.note(format!("replica {id}'s disk has space again"));
        }
        if self.rng.chance(2) {
            let live: Vec<i32> = REPLICAS
                .iter()
                .copied()
                .filter(|r| self.online(*r) && !self.full_until.contains_key(r))
                .collect();
            if let Some(&id) = live.get(self.rng.range(0, 2) as usize) {
                let used = self.nodes[Self::idx(id)].disk.disk().used_bytes();
                let capacity = used + self.rng.range(0, 6_000);
                let until = step + self.rng.range(5, 40);
                self.nodes[Self::idx(id)]
                    .disk
                    .disk()
                    .inject(Fault::NoSpace { capacity });
                self.full_until.insert(id, until);
                self.report.injected_no_space += 1;
                self.note(format!(
                    "replica {id}'s disk fills up at {capacity} bytes until step {until}"
                ));
            }
        }
        for id in REPLICAS {
            if self.online(id) && self.log(id).is_disk_full() && self.rng.chance(30) {
                let writable = self.log(id).retry_stalled().await;
                self.note(format!(
                    "replica {id} retries its stalled writes: writable {writable}"
                ));
                if self.nodes[Self::idx(id)].disk.disk().is_off() {
                    // The power went off during the retry: the replica is down now.
                    self.down(id, true);
                }
            }
        }
    }

    fn log(&self, id: i32) -> &Log {
        self.nodes[Self::idx(id)]
            .log
            .as_ref()
            .expect("an up replica has its log")
    }

    /// After every step: the controller's periodic work, every live replica takes up its
    /// role, the leader's ISR check, acknowledgements, and the high watermark check.
    async fn settle(&mut self) -> Result<(), Violation> {
        for id in REPLICAS {
            if self.up(id) && self.nodes[Self::idx(id)].disk.disk().is_off() {
                self.down(id, true);
            }
        }
        // The controller fences replicas it has not heard from.
        self.metadata_traffic();
        for id in REPLICAS {
            let n = &self.nodes[Self::idx(id)];
            if !self.mode.metadata_network
                && n.log.is_none()
                && !self.ctl.fenced.contains(&id)
                && self.now_ms - n.down_since > SESSION_MS
            {
                self.ctl.fence(id);
                let (l, e, isr) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                self.note(format!(
                    "controller fences replica {id}: leader {l} epoch {e} ISR {isr:?}"
                ));
            }
        }
        // Roles (as the broker's `replication::apply_image`).
        for id in REPLICAS {
            if !self.up(id) {
                continue;
            }
            let v = self.view_of(id);
            let i = Self::idx(id);
            let Some(role) = self.nodes[i].state.role_to_take_up(&v.assignment()) else {
                continue;
            };
            self.nodes[i].fetching = None;
            let Role::Lead { epoch } = role else {
                self.nodes[i].state.took_up_following(&v.assignment());
                continue;
            };
            let offline = self.nodes[i].offline;
            if self.mode.slow_take_up && !offline {
                // The take-up's epoch checkpoint sync is slow: it completes some steps on.
                match self.nodes[i].take_up_due {
                    Some((e, due)) if e == epoch => {
                        if self.step < due {
                            continue;
                        }
                    }
                    _ => {
                        let due = self.step + self.rng.range(1, 5);
                        self.nodes[i].take_up_due = Some((epoch, due));
                        let committed = self.committed;
                        self.latest_floor.entry(epoch).or_insert(committed);
                        self.report.take_ups_delayed += 1;
                        self.note(format!(
                            "replica {id} begins taking up epoch {epoch} (done at step {due})"
                        ));
                        continue;
                    }
                }
            }
            if !offline {
                let log = self.nodes[i].log.as_ref().expect("up");
                if let Err(e) = log.become_leader(LeaderEpoch(epoch)).await {
                    self.io_failed(id, format!("become_leader: {e}"))?;
                    if !self.online(id) {
                        return Ok(());
                    }
                    // A full disk: as the broker, the leader takes up its role all the
                    // same, its epoch's start and its followers reset; it appends nothing
                    // until its writes go through again.
                }
            }
            // An offline replica takes up its role too (the broker's fails to record the
            // epoch on its poisoned log); it serves nothing until it restarts.
            let end = self.log(id).offsets().log_end_offset.0;
            let now_ms = self.now_ms;
            self.nodes[i]
                .state
                .took_up_leadership(&v.assignment(), end, now_ms);
            if !offline {
                self.note(format!(
                    "replica {id} leads epoch {epoch} from offset {end}"
                ));
                // Everything acknowledged or seen must be here.
                self.check_must(id, "the new leader").await?;
            }
        }
        for id in REPLICAS {
            self.image_ends_pending(id);
        }
        // The leader's ISR check (each replica that leads by its own image).
        let leaders: Vec<i32> = if self.mode.metadata_network {
            self.self_leaders()
        } else {
            vec![self.ctl.leader]
        };
        for leader in leaders.iter().copied() {
            if leader > 0 && self.online(leader) {
                let v = self.view_of(leader);
                let shrink = self.nodes[Self::idx(leader)].state.isr_to_shrink(
                    &v.assignment(),
                    self.now_ms,
                    LAG_MS,
                );
                if let Some(isr) = shrink {
                    self.propose_isr(leader, isr, "shrink");
                }
            }
        }
        self.fire_timers();
        self.acknowledge();
        // Committed is what a leader's high watermark passed; no replica's high watermark
        // (what it would serve a reader, KIP-392) may claim more.
        for leader in self.self_leaders() {
            let hw = self.log(leader).offsets().high_watermark.0;
            self.committed = self.committed.max(hw);
        }
        for id in REPLICAS {
            if !self.up(id) {
                continue;
            }
            let hw = self.log(id).offsets().high_watermark.0;
            let committed = self.committed;
            self.check(hw <= committed, || {
                format!(
                    "replica {id}'s high watermark {hw} is past anything committed ({committed})"
                )
            })?;
        }
        // The high watermark never goes back on a replica while it stays up and in the ISR.
        for id in REPLICAS {
            let i = Self::idx(id);
            let in_isr = self.ctl.isr.contains(&id);
            let Some(log) = self.nodes[i].log.as_ref() else {
                continue;
            };
            let hw = log.offsets().high_watermark.0;
            if !in_isr {
                self.nodes[i].hw_in_isr = None;
                continue;
            }
            if let Some(before) = self.nodes[i].hw_in_isr {
                self.check(hw >= before, || {
                    format!(
                        "replica {id} in the ISR: high watermark went back from {before} to {hw}"
                    )
                })?;
            }
            self.nodes[i].hw_in_isr = Some(hw);
        }
        self.metadata_traffic();
        Ok(())
    }

    /// A leader's AlterPartition (`ReplicaState::propose`: pending, counted in the maximal
    /// ISR, until answered), applied at once when the controller accepts it unless
    /// `--controller-network` sends it over the network. The members' broker epochs are the
    /// controller's registrations (the simulated followers fetch without one).
    fn propose_isr(&mut self, leader: i32, isr: Vec<i32>, why: &'static str) {
        // At the epochs of the leader's own image.
        let v = self.view_of(leader);
        let members = self.ctl.members(&isr);
        let (_, sent) = self.nodes[Self::idx(leader)]
            .state
            .propose(&v.assignment(), isr.clone());
        if self.mode.controller_network {
            self.alter_sent += 1;
            let request = Msg::AlterPartition {
                req: self.alter_sent,
                leader,
                leader_epoch: v.epoch,
                partition_epoch: v.partition_epoch,
                isr: members,
                why,
            };
            if self.mode.timers {
                // Into the leader's AlterPartition queue: sent now unless a request is in
                // flight.
                self.nodes[Self::idx(leader)].isr_queue.submit(0, request);
                self.note(format!(
                    "replica {leader} queues AlterPartition ISR {isr:?} ({why})"
                ));
                self.pump_alter_partition(leader);
            } else {
                self.net.push_back(request);
                self.note(format!(
                    "replica {leader} sends AlterPartition ISR {isr:?} ({why})"
                ));
            }
            self.advance_hw(leader);
            return;
        }
        let answer = self
            .ctl
            .alter_isr_at(leader, v.epoch, v.partition_epoch, members);
        self.note(format!(
            "replica {leader} proposes ISR {isr:?} ({why}): {answer:?}"
        ));
        let view = self.ctl.view();
        self.isr_change_answered(leader, &sent, answer, view);
    }

    /// The leader's side of an AlterPartition answer, as the broker's
    /// `leader::isr_change_done`: `ReplicaState::isr_change_answered` (storage's
    /// `replication::after_isr_change`) says whether the pending change ends, waits for the
    /// image, or is sent again (`Resend` comes only from a lost request or answer, see
    /// `timed_out`). A committed answer carries the controller's state, which the leader
    /// takes at once.
    fn isr_change_answered(
        &mut self,
        leader: i32,
        sent: &PendingIsr,
        answer: IsrChangeAnswer,
        view: View,
    ) {
        if let IsrChangeAnswer::Committed { .. } = answer {
            self.learn(leader, view);
        }
        let v = self.view_of(leader);
        self.nodes[Self::idx(leader)]
            .state
            .isr_change_answered(&v.assignment(), sent, answer);
        self.image_ends_pending(leader);
        self.advance_hw(leader);
    }

    /// An AlterPartition or its answer was lost: the leader cannot tell whether the change
    /// was committed, so (`ReplicaState::isr_change_answered` with no answer: `Resend`) it
    /// sends the same request again while the change is still its pending one.
    fn resend_alter_partition(&mut self, request: Msg) {
        let Msg::AlterPartition { leader, .. } = request else {
            unreachable!("an AlterPartition")
        };
        if !self.up(leader) {
            return;
        }
        let sent = request.as_sent();
        let v = self.view_of(leader);
        let after = self.nodes[Self::idx(leader)].state.isr_change_answered(
            &v.assignment(),
            &sent,
            IsrChangeAnswer::NoAnswer,
        );
        match after {
            PendingIsrChange::Resend => {
                let ids = &sent.isr;
                self.note(format!(
                    "replica {leader} sends AlterPartition ISR {ids:?} again (no answer)"
                ));
                self.net.push_back(request);
            }
            PendingIsrChange::End => self.advance_hw(leader),
            PendingIsrChange::Keep => {}
        }
    }

    /// `--timers`: the leader's AlterPartition queue sends its next request when none is in
    /// flight and a change is unsent or due to go again (one still pending, as the broker's
    /// `alter_partition::maybe_send` takes it).
    fn pump_alter_partition(&mut self, leader: i32) {
        if !self.up(leader) {
            return;
        }
        let now = self.now_ms;
        let v = self.view_of(leader);
        let n = &mut self.nodes[Self::idx(leader)];
        if !n.isr_queue.may_start(now) {
            return;
        }
        n.isr_queue.start();
        let state = &n.state;
        let batch = n.isr_queue.take_batch(now, 1, |m| {
            state.still_pending(&v.assignment(), &m.as_sent())
        });
        let Some(request) = batch.into_iter().next() else {
            n.isr_queue.answered();
            return;
        };
        let Msg::AlterPartition { req, ref isr, .. } = request else {
            unreachable!("the queue holds AlterPartition requests")
        };
        let ids: Vec<i32> = isr.iter().map(|m| m.broker_id).collect();
        n.alter_in_flight = Some((req, now + CONTROLLER_TIMEOUT_MS, request.clone()));
        self.net.push_back(request);
        self.note(format!(
            "replica {leader} sends AlterPartition {req} ISR {ids:?}"
        ));
    }

    /// `--timers`, after every step: what the broker's timers fire by now. A fetch out past its
    /// socket timeout is given up (the fetcher reconnects and asks again); an AlterPartition
    /// request past its timeout got no answer (`isr_change_answered` with none: sent again
    /// after the backoff while still pending); queues send what is due.
    fn fire_timers(&mut self) {
        if !self.mode.timers {
            return;
        }
        let now = self.now_ms;
        for id in REPLICAS {
            if !self.up(id) {
                continue;
            }
            let i = Self::idx(id);
            if self.nodes[i].fetching.is_some() && now >= self.nodes[i].fetch_deadline {
                self.nodes[i].fetching = None;
                self.report.fetches_timed_out += 1;
                self.note(format!("{id}'s fetch timed out: it asks again"));
            }
            let expired = self.nodes[i]
                .alter_in_flight
                .as_ref()
                .is_some_and(|(_, deadline, _)| now >= *deadline);
            if expired {
                let (req, _, mut request) = self.nodes[i].alter_in_flight.take().expect("expired");
                self.nodes[i].isr_queue.answered();
                self.report.alter_partitions_timed_out += 1;
                let sent = request.as_sent();
                let v = self.view_of(id);
                let after = self.nodes[i].state.isr_change_answered(
                    &v.assignment(),
                    &sent,
                    IsrChangeAnswer::NoAnswer,
                );
                self.note(format!(
                    "replica {id}'s AlterPartition {req} got no answer in time: {after:?}"
                ));
                match after {
                    PendingIsrChange::Resend => {
                        self.report.alter_partitions_resent += 1;
                        self.alter_sent += 1;
                        // The same change as a new request.
                        if let Msg::AlterPartition { req, .. } = &mut request {
                            *req = self.alter_sent;
                        }
                        self.nodes[i].isr_queue.resend_later(0, request, now);
                    }
                    PendingIsrChange::End => self.advance_hw(id),
                    PendingIsrChange::Keep => {}
                }
            }
            self.pump_alter_partition(id);
        }
    }

    /// As the broker's `set_from_image` (`ReplicaState::image_installed`): an image with
    /// another partition epoch than the one the pending change was sent at ends it (the
    /// change is in it, or was overtaken).
    fn image_ends_pending(&mut self, id: i32) {
        if !self.up(id) {
            return;
        }
        let v = self.view_of(id);
        if self.nodes[Self::idx(id)]
            .state
            .image_installed(&v.assignment())
        {
            self.advance_hw(id);
        }
    }

    /// `--metadata-network`: replica `id` installs `view` if it is newer than its own.
    fn learn(&mut self, id: i32, view: View) {
        if !self.mode.metadata_network || !self.up(id) {
            return;
        }
        let n = &mut self.nodes[Self::idx(id)];
        if view.index > n.view.index {
            let (l, e, isr, index) = (view.leader, view.epoch, view.isr.clone(), view.index);
            n.view = view;
            self.report.images_installed += 1;
            self.note(format!(
                "replica {id} installs image {index}: leader {l} epoch {e} ISR {isr:?}"
            ));
            self.image_ends_pending(id);
        }
    }

    /// The leader's high watermark rule (`ReplicaState::high_watermark_candidate`, as the
    /// broker's `maybe_advance_high_watermark`: only a leader that has taken up its role).
    fn advance_hw(&mut self, leader: i32) {
        if !self.up(leader) {
            return;
        }
        let v = self.view_of(leader);
        let n = &self.nodes[Self::idx(leader)];
        let log = n.log.as_ref().expect("up");
        let candidate =
            n.state
                .high_watermark_candidate(&v.assignment(), MIN_ISR, log.durable_end().0);
        if let Some(c) = candidate {
            log.advance_high_watermark(Offset(c));
        }
    }

    async fn produce(&mut self) -> Result<(), Violation> {
        let Some(leader) = self.client_leader() else {
            return Ok(());
        };
        let isr = self.view_of(leader).isr.len();
        if self.mode.timers && (isr as i32) < MIN_ISR {
            // The broker's produce handler refuses an acks=all write before appending it while
            // the committed ISR is below min.insync.replicas (NOT_ENOUGH_REPLICAS, retriable).
            self.report.produces_not_enough_replicas += 1;
            return Ok(());
        }
        if self.mode.idempotent {
            if let Some(i) = [None, Some(0), Some(1)][self.rng.range(0, 2) as usize] {
                return self.produce_idempotent(leader, i).await;
            }
        }
        let count = self.rng.range(1, 3) as usize;
        let mut values = Vec::new();
        for _ in 0..count {
            values.push(self.value());
        }
        let (epoch, now) = (self.view_of(leader).epoch, self.now_ms);
        let batch = batch(&values, now, None);
        let log = self.log(leader);
        let info = match log.append(batch, LeaderEpoch(epoch), now) {
            Ok(info) => info,
            Err(e) => return self.io_failed(leader, format!("leader append refused: {e}")),
        };
        let end = info.last_offset.0 + 1;
        if let Err(e) = log.make_durable(Offset(end)).await {
            return self.io_failed(leader, format!("leader sync: {e}"));
        }
        self.advance_hw(leader);
        let base = info.base_offset.0;
        self.note(format!("produce {count} records to {leader} at {base}"));
        self.report.appends += 1;
        self.pending.push(Pending {
            leader,
            epoch,
            last: info.last_offset.0,
            records: values
                .into_iter()
                .enumerate()
                .map(|(k, v)| (base + k as i64, v))
                .collect(),
            producer: None,
            deadline_ms: now + REQUEST_TIMEOUT_MS,
        });
        Ok(())
    }

    /// A record value, unique in the run.
    fn value(&mut self) -> Vec<u8> {
        self.sent += 1;
        let mut v = format!("{}:{}:", self.seed, self.sent).into_bytes();
        v.resize(
            v.len() + self.rng.range(0, 900) as usize,
            b'a' + (self.sent % 26) as u8,
        );
        v
    }

    /// Idempotent producer `i` sends its outstanding batch again (its answer was lost, timed
    /// out, or its leader lost the leadership), or else a new one, to `leader`.
    async fn produce_idempotent(&mut self, leader: i32, i: usize) -> Result<(), Violation> {
        let retry = self.producers[i].outstanding.is_some();
        let epoch = self.view_of(leader).epoch;
        let waiting = self
            .pending
            .iter()
            .any(|p| p.producer == Some(i) && p.leader == leader && p.epoch == epoch);
        if waiting && !self.rng.chance(15) {
            // Its request is still waiting on this leader's high watermark; now and then it
            // times out and is sent again (to the same leader, which holds it).
            return Ok(());
        }
        if !retry {
            let count = self.rng.range(1, 3) as usize;
            let mut values = Vec::new();
            for _ in 0..count {
                values.push(self.value());
            }
            self.producers[i].outstanding = Some(Outstanding {
                base_sequence: self.producers[i].next_sequence,
                timestamp: self.now_ms,
                values,
                sent_to: None,
            });
        }
        let out = self.producers[i].outstanding.clone().expect("set above");
        let id = self.producers[i].id;
        // One request in flight: a retry replaces the send it repeats.
        self.pending.retain(|p| p.producer != Some(i));
        let batch = batch(&out.values, out.timestamp, Some((id, out.base_sequence)));
        let result = self
            .log(leader)
            .append(batch, LeaderEpoch(epoch), self.now_ms);
        let seq = out.base_sequence;
        let info = match result {
            Ok(info) => info,
            Err(StorageError::OutOfOrderSequence(e))
                if (leader, epoch) != (self.ctl.leader, self.ctl.epoch) =>
            {
                // A former leader (`--metadata-network`) lacks what the current one took since:
                // Kafka's answer there too; the producer finds the current leader and retries.
                self.note(format!(
                    "former leader {leader} refuses producer {id}'s sequence {}: {e}",
                    out.base_sequence
                ));
                return Ok(());
            }
            Err(
                e @ (StorageError::OutOfOrderSequence(_) | StorageError::InvalidProducerEpoch(_)),
            ) => {
                // Every batch before this one was acknowledged, so it is in every ISR member's
                // log and its producer state: the leader must take this one.
                return Err(self.violation(format!(
                    "leader {leader} refused producer {id}'s batch at sequence {seq} \
                     (retry {retry}): {e}"
                )));
            }
            Err(e) => return self.io_failed(leader, format!("leader append refused: {e}")),
        };
        let base = info.base_offset.0;
        self.note(format!(
            "producer {id} sends sequence {seq} ({} records, retry {retry}) to {leader}: at {base}, \
             duplicate {}",
            out.values.len(),
            info.duplicate
        ));
        if retry {
            self.report.retries += 1;
        }
        if let Some(o) = self.producers[i].outstanding.as_mut() {
            o.sent_to = Some((leader, epoch));
        }
        if info.duplicate {
            self.report.retries_duplicate += 1;
            if out.sent_to.is_some_and(|to| to != (leader, epoch)) {
                // Found by a leader other than the one it was sent to: from the producer state
                // it built as a follower, or recovered after a crash.
                self.report.retries_duplicate_elsewhere += 1;
            }
            // The original batch: these values at these offsets.
            let held = match self
                .log(leader)
                .read(
                    Offset(base),
                    64 << 10,
                    self.log(leader).offsets().log_end_offset,
                )
                .await
            {
                Ok(r) => parse(&r.records),
                Err(e) => return self.io_failed(leader, format!("leader read at {base}: {e}")),
            };
            let want: Vec<(i64, Vec<u8>)> = out
                .values
                .iter()
                .enumerate()
                .map(|(k, v)| (base + k as i64, v.clone()))
                .collect();
            let got: Vec<(i64, Vec<u8>)> = held.into_iter().take(want.len()).collect();
            self.check(retry && got == want, || {
                format!(
                    "producer {id}'s batch at sequence {seq} (retry {retry}) answered as a \
                     duplicate at {base}, where the log holds other records"
                )
            })?;
        } else {
            self.report.appends += 1;
        }
        let end = info.last_offset.0 + 1;
        if let Err(e) = self.log(leader).make_durable(Offset(end)).await {
            return self.io_failed(leader, format!("leader sync: {e}"));
        }
        self.advance_hw(leader);
        self.pending.push(Pending {
            leader,
            epoch,
            last: info.last_offset.0,
            records: out
                .values
                .into_iter()
                .enumerate()
                .map(|(k, v)| (base + k as i64, v))
                .collect(),
            producer: Some(i),
            deadline_ms: self.now_ms + REQUEST_TIMEOUT_MS,
        });
        Ok(())
    }

    /// acks=all: a produce is acknowledged once its leader, still leading in its epoch, has its
    /// high watermark past it; it fails if the leadership moved first.
    fn acknowledge(&mut self) {
        let mut still = Vec::new();
        for p in std::mem::take(&mut self.pending) {
            let v = self.view_of(p.leader);
            let leading = v.epoch == p.epoch
                && self.up(p.leader)
                && self.nodes[Self::idx(p.leader)]
                    .state
                    .is_leader(&v.assignment());
            if !leading {
                // Failed (NOT_LEADER_OR_FOLLOWER): an idempotent producer sends it again.
                continue;
            }
            let hw = self.log(p.leader).offsets().high_watermark.0;
            let done = if self.mode.timers {
                // The broker's acks=all wait (`replication::timers::acks_all`), by the
                // leader's committed ISR (its image's).
                match timers::acks_all(
                    leading,
                    v.isr.len(),
                    MIN_ISR,
                    hw,
                    p.last + 1,
                    self.now_ms,
                    p.deadline_ms,
                ) {
                    AcksAll::Done => true,
                    AcksAll::Wait { .. } => false,
                    AcksAll::NotLeader => continue,
                    refused => {
                        // Failed: an idempotent producer sends it again.
                        if refused == AcksAll::TimedOut {
                            self.report.acks_timed_out += 1;
                        } else {
                            self.report.acks_not_enough_replicas += 1;
                        }
                        let (l, last) = (p.leader, p.last);
                        self.note(format!("acks=all write to {l} up to {last}: {refused:?}"));
                        continue;
                    }
                }
            } else {
                hw > p.last
            };
            if done {
                if let Some(i) = p.producer {
                    let pr = &mut self.producers[i];
                    pr.next_sequence += p.records.len() as i32;
                    pr.outstanding = None;
                }
                self.report.acked_records += p.records.len() as u64;
                if (p.leader, p.epoch) != (self.ctl.leader, self.ctl.epoch) {
                    self.report.stale_leader_acks += p.records.len() as u64;
                }
                for (o, v) in p.records {
                    self.must.insert(o, v);
                }
            } else {
                still.push(p);
            }
        }
        self.pending = still;
    }

    /// A follower that knows its leader and has no fetch out sends one, having made what it
    /// appended durable first (it fetches only past what it synced).
    async fn send_fetch(&mut self) -> Result<(), Violation> {
        let candidates: Vec<i32> = REPLICAS
            .iter()
            .copied()
            .filter(|id| {
                let n = &self.nodes[Self::idx(*id)];
                let v = self.view_of(*id);
                n.log.is_some()
                    && !n.offline
                    && n.fetching.is_none()
                    && !n.backoff.delayed(&(), self.now_ms)
                    && v.leader > 0
                    && v.leader != *id
                    && n.state.applied_role == Some((v.leader, v.epoch))
            })
            .collect();
        if candidates.is_empty() {
            return Ok(());
        }
        let id = candidates[self.rng.range(0, candidates.len() as u64 - 1) as usize];
        let log = self.log(id);
        let end = log.offsets().log_end_offset;
        if let Err(e) = log.make_durable(end).await {
            // As the broker's fetcher: a follower whose sync failed fetches nothing for it.
            return self.io_failed(id, format!("follower {id} sync: {e}"));
        }
        let ask = FetchAsk::of(log);
        self.sent += 1;
        let fetch_id = self.sent;
        let v = self.view_of(id);
        let msg = Msg::Fetch {
            id: fetch_id,
            from: id,
            to: v.leader,
            epoch: v.epoch,
            ask,
        };
        let n = &mut self.nodes[Self::idx(id)];
        n.fetching = Some(fetch_id);
        n.fetch_deadline = self.now_ms + SOCKET_TIMEOUT_MS;
        self.net.push_back(msg);
        Ok(())
    }

    async fn deliver(&mut self) -> Result<(), Violation> {
        if self.net.is_empty() {
            return Ok(());
        }
        // Any message in flight: the network reorders.
        let k = self.rng.range(0, self.net.len() as u64 - 1) as usize;
        let msg = if self.rng.chance(3) {
            // Duplicated: a copy stays in flight.
            let m = self.net.remove(k).expect("in range");
            let copy = m.clone();
            self.net.push_back(m);
            copy
        } else {
            self.net.remove(k).expect("in range")
        };
        let (from, to) = msg.ends();
        let reachable = to == CONTROLLER || self.up(to);
        if !reachable || self.cut.contains(&(from.min(to), from.max(to))) {
            self.timed_out(&msg);
            return Ok(());
        }
        match msg {
            Msg::Fetch {
                id,
                from,
                to,
                epoch,
                ask,
            } => {
                let answer = self.serve_fetch(to, from, epoch, ask).await?;
                self.net.push_back(Msg::Answer {
                    id,
                    from: to,
                    to: from,
                    epoch,
                    answer,
                });
            }
            Msg::Answer {
                id,
                from,
                to,
                epoch,
                answer,
            } => {
                if self.nodes[Self::idx(to)].fetching == Some(id) {
                    self.apply_answer(to, from, epoch, answer).await?;
                }
            }
            Msg::AlterPartition {
                leader,
                leader_epoch,
                partition_epoch,
                ref isr,
                why,
                ..
            } => {
                let ids: Vec<i32> = isr.iter().map(|m| m.broker_id).collect();
                let answer =
                    self.ctl
                        .alter_isr_at(leader, leader_epoch, partition_epoch, isr.clone());
                let accepted = matches!(answer, IsrChangeAnswer::Committed { .. });
                self.report.alter_partitions += 1;
                if !accepted {
                    self.report.alter_partitions_refused += 1;
                }
                let (l, e, now) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                self.note(format!(
                    "controller: AlterPartition from {leader} ISR {ids:?} ({why}, leader epoch \
                     {leader_epoch}, partition epoch {partition_epoch}): accepted {accepted}; \
                     leader {l} epoch {e} ISR {now:?}"
                ));
                self.net.push_back(Msg::AlterPartitionAnswer {
                    to: leader,
                    request: Box::new(msg),
                    answer,
                    view: self.ctl.view(),
                });
            }
            Msg::AlterPartitionAnswer {
                to,
                request,
                answer,
                view,
            } => {
                let Msg::AlterPartition {
                    req,
                    isr,
                    leader_epoch,
                    partition_epoch,
                    ..
                } = *request
                else {
                    unreachable!("an answer to an AlterPartition")
                };
                if self.mode.timers {
                    // Only the answer to the request in flight: one to a request that timed
                    // out was dropped with its connection.
                    let i = Self::idx(to);
                    let current = self.nodes[i]
                        .alter_in_flight
                        .as_ref()
                        .is_some_and(|(r, _, _)| *r == req);
                    if !current || !self.up(to) {
                        self.report.late_answers_dropped += 1;
                        self.note(format!(
                            "replica {to} drops the answer to AlterPartition {req} (not in flight)"
                        ));
                        return Ok(());
                    }
                    self.nodes[i].alter_in_flight = None;
                    self.nodes[i].isr_queue.answered();
                }
                let ids: Vec<i32> = isr.iter().map(|m| m.broker_id).collect();
                self.note(format!(
                    "replica {to} learns AlterPartition ISR {ids:?}: {answer:?}"
                ));
                if self.up(to) {
                    let sent = PendingIsr {
                        isr: ids,
                        leader_epoch,
                        partition_epoch,
                    };
                    self.isr_change_answered(to, &sent, answer, view);
                    if self.mode.timers {
                        self.pump_alter_partition(to);
                    }
                }
            }
            Msg::Image { to, view } => self.learn(to, view),
        }
        Ok(())
    }

    /// A fetch or its answer was lost: the fetcher times out and asks again.
    fn timed_out(&mut self, m: &Msg) {
        if self.mode.timers && !matches!(m, Msg::Image { .. }) {
            // Noticed when its request's deadline passes (`fire_timers`).
            return;
        }
        let (fetcher, id) = match m {
            Msg::Fetch { from, id, .. } => (*from, *id),
            Msg::Answer { to, id, .. } => (*to, *id),
            Msg::AlterPartition { .. } => {
                self.resend_alter_partition(m.clone());
                return;
            }
            Msg::AlterPartitionAnswer { request, .. } => {
                self.resend_alter_partition((**request).clone());
                return;
            }
            Msg::Image { to, .. } => {
                // The broker goes on fetching the metadata log: the newest image comes later.
                if self.up(*to) {
                    self.net.push_back(Msg::Image {
                        to: *to,
                        view: self.ctl.view(),
                    });
                }
                return;
            }
        };
        let n = &mut self.nodes[Self::idx(fetcher)];
        if n.fetching == Some(id) {
            n.fetching = None;
        }
    }

    /// The leader's side of a fetch: storage's replication glue, as the broker's
    /// `replication/leader.rs::serve_fetch` runs it.
    async fn serve_fetch(
        &mut self,
        leader: i32,
        follower: i32,
        epoch: i32,
        ask: FetchAsk,
    ) -> Result<FetchAnswer, Violation> {
        let i = Self::idx(leader);
        if self.nodes[i].state.applied_role != Some((leader, epoch)) || self.nodes[i].offline {
            // Not the leader of that epoch (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH), or
            // offline (KAFKA_STORAGE_ERROR): the follower backs off.
            return Ok(FetchAnswer::Refused("not the leader, or offline".into()));
        }
        let log = self.nodes[i].log.as_ref().expect("up");
        if let Some(early) = glue::check_fetch(log, Some(epoch), &ask) {
            if let FetchAnswer::Diverging {
                epoch: e,
                end_offset,
            } = early
            {
                self.note(format!(
                    "{leader} tells {follower}: diverged in epoch {e} ending at {end_offset}"
                ));
            }
            return Ok(early);
        }
        let offsets = log.offsets();
        let v = self.view_of(leader);
        let now_ms = self.now_ms;
        let expand = self.nodes[i].state.record_fetch(
            &v.assignment(),
            follower,
            -1,
            &ask,
            offsets.log_end_offset.0,
            offsets.high_watermark.0,
            now_ms,
        );
        if let Some(isr) = expand {
            self.propose_isr(leader, isr, "expand");
        }
        self.advance_hw(leader);
        match glue::read_for_follower(self.log(leader), &ask, FETCH_MAX).await {
            Ok(answer) => Ok(answer),
            Err(e) => {
                let at = ask.fetch_offset;
                self.io_failed(leader, format!("leader read at {at}: {e}"))
                    .map(|()| FetchAnswer::Refused(format!("read failed: {e}")))
            }
        }
    }

    /// The follower's side: storage's replication glue, as the broker's
    /// `replication/fetcher.rs::handle_partition` runs it.
    async fn apply_answer(
        &mut self,
        follower: i32,
        leader: i32,
        epoch: i32,
        answer: FetchAnswer,
    ) -> Result<(), Violation> {
        let i = Self::idx(follower);
        if self.nodes[i].state.applied_role != Some((leader, epoch)) || self.nodes[i].offline {
            return Ok(()); // an answer from an old role, or to a replica now offline
        }
        self.nodes[i].fetching = None;
        let log = self.nodes[i].log.as_ref().expect("up");
        match glue::apply_answer(log, LeaderEpoch(epoch), self.now_ms, answer).await {
            Ok(Applied::Truncated { outcome, .. }) => {
                let to = outcome.log_end_offset.0;
                self.note(format!("{follower} truncates to {to}"));
                Ok(())
            }
            Ok(Applied::StartedOver { at }) => {
                self.note(format!("{follower} starts over at {at}"));
                Ok(())
            }
            Ok(Applied::Appended { .. }) => Ok(()),
            Err(NotApplied::Refused(_)) => {
                self.back_off(follower);
                Ok(())
            }
            Err(e @ (NotApplied::Mismatch(_) | NotApplied::OutOfRange { .. })) => {
                // Keel's fetcher backs off and asks again: an answer that does not fit (a
                // duplicate, a reordered one) changes nothing.
                self.note(format!("{follower} refuses an answer: {e}"));
                self.back_off(follower);
                Ok(())
            }
            Err(NotApplied::Io(e)) => self.io_failed(follower, format!("follower {follower}: {e}")),
        }
    }

    /// `--timers`: a follower's partition backs off after an answer it could not apply (the
    /// broker's fetcher, `replica.fetch.backoff.ms`).
    fn back_off(&mut self, follower: i32) {
        if self.mode.timers {
            let now = self.now_ms;
            self.nodes[Self::idx(follower)]
                .backoff
                .delay((), now, FETCH_BACKOFF_MS);
            self.report.fetch_backoffs += 1;
        }
    }

    /// A reader reads from the leader below its high watermark: what it sees must stay.
    /// `--slow-take-up`: a client asks the leader it knows for the latest offset
    /// (`ReplicaState::latest_offset`, the broker's KIP-207 rule).
    fn list_offsets(&mut self) -> Result<(), Violation> {
        let Some(leader) = self.client_leader() else {
            return Ok(());
        };
        let epoch = self.view_of(leader).epoch;
        let n = &self.nodes[Self::idx(leader)];
        let hw = n.log.as_ref().expect("up").offsets().high_watermark.0;
        let Some(latest) = n.state.latest_offset(hw) else {
            return Ok(()); // OFFSET_NOT_AVAILABLE: the client asks again later
        };
        self.report.latest_offsets_checked += 1;
        let floor = self.latest_floor.get(&epoch).copied().unwrap_or(0);
        self.check(latest >= floor, || {
            format!(
                "replica {leader} leading epoch {epoch} answered ListOffsets latest {latest}, \
                 below {floor}, committed when it began taking up the role"
            )
        })
    }

    async fn read(&mut self) -> Result<(), Violation> {
        let Some(leader) = self.client_leader() else {
            return Ok(());
        };
        let o = self.log(leader).offsets();
        if o.high_watermark.0 <= o.log_start_offset.0 {
            return Ok(());
        }
        let from = self
            .rng
            .range(o.log_start_offset.0 as u64, o.high_watermark.0 as u64 - 1)
            as i64;
        let r = self
            .log(leader)
            .read(Offset(from), 32 << 10, o.high_watermark)
            .await;
        let records = match r {
            Ok(r) => parse(&r.records),
            Err(e) => {
                return self.io_failed(leader, format!("read from the leader at {from}: {e}"))
            }
        };
        self.report.reads_checked += 1;
        for (offset, value) in records
            .into_iter()
            .filter(|(o2, _)| *o2 < o.high_watermark.0)
        {
            if let Some(want) = self.must.get(&offset) {
                let ok = *want == value;
                self.check(ok, || format!("a reader at {offset} on {leader} got a record other than the acknowledged one"))?;
            }
            self.must.insert(offset, value);
        }
        Ok(())
    }

    /// Every record acknowledged or seen is on replica `id`, at its offset.
    async fn check_must(&mut self, id: i32, who: &str) -> Result<(), Violation> {
        let all = read_all(self.log(id)).await;
        let got: BTreeMap<i64, Vec<u8>> = match all {
            Ok(v) => v.into_iter().collect(),
            Err(e) => return self.io_failed(id, format!("{who} {id}: read: {e}")),
        };
        let missing: Vec<i64> = self
            .must
            .iter()
            .filter(|(o, v)| got.get(o) != Some(v))
            .map(|(o, _)| *o)
            .take(5)
            .collect();
        let end = self.log(id).offsets().log_end_offset.0;
        self.check(missing.is_empty(), || {
            format!("{who} {id} (log end {end}) lacks acknowledged or seen records at {missing:?}")
        })?;
        if self.mode.idempotent {
            // Every value was sent in one batch only: one held twice is a retry appended again.
            let mut seen = BTreeMap::new();
            let twice = got
                .iter()
                .find_map(|(o, v)| seen.insert(v, *o).map(|first| (first, *o)));
            self.check(twice.is_none(), || {
                format!("{who} {id} holds a record twice, at {twice:?}: a retry appended again")
            })?;
        }
        Ok(())
    }

    /// An operation of replica `id` failed: expected if its power went off (it then goes
    /// down, its disk crashed), a violation otherwise.
    fn io_failed(&mut self, id: i32, what: String) -> Result<(), Violation> {
        if self.nodes[Self::idx(id)].disk.disk().is_off() {
            self.down(id, true);
            return Ok(());
        }
        // No fault here corrupts a sector: a batch Keel cannot read back (`corrupt message`,
        // `corrupt segment`) is Keel's own write gone wrong, whatever else was injected.
        if what.contains("corrupt") {
            return Err(self.violation(what));
        }
        if fired(self.mode, &self.nodes[Self::idx(id)].disk) {
            let poisoned = self.nodes[Self::idx(id)]
                .log
                .as_ref()
                .is_some_and(|l| l.poisoned().is_some());
            if poisoned && !self.nodes[Self::idx(id)].offline {
                // The broker reports the replica offline; the controller moves its leadership.
                self.nodes[Self::idx(id)].offline = true;
                self.report.replicas_offline += 1;
                if self.ctl.leader == id {
                    self.report.offline_leaders += 1;
                }
                let accepted = self.ctl.offline(id);
                // It leads no more and leaves the ISR (unless it is its last member: then the
                // partition has no leader).
                let (leader, isr) = (self.ctl.leader, &self.ctl.isr);
                let out = leader != id && (!isr.contains(&id) || isr.len() == 1);
                self.check(accepted && out, || {
                    format!(
                        "offline replica {id}: controller accepted {accepted}, leader {leader}, \
                         ISR {isr:?}"
                    )
                })?;
                let (l, e, isr) = (self.ctl.leader, self.ctl.epoch, self.ctl.isr.clone());
                self.note(format!(
                    "replica {id} offline ({what}): accepted {accepted}, leader {l} epoch {e} ISR {isr:?}"
                ));
            } else {
                self.note(format!("replica {id}: {what} (an injected fault)"));
            }
            return Ok(());
        }
        Err(self.violation(what))
    }

    /// A power cut (`crash`) or a kill of a live replica.
    fn stop_replica(&mut self, crash: bool) {
        let live: Vec<i32> = REPLICAS.iter().copied().filter(|r| self.up(*r)).collect();
        if live.len() < 2 {
            return;
        }
        let id = live[self.rng.range(0, live.len() as u64 - 1) as usize];
        self.down(id, crash);
    }

    /// Replica `id` goes down: power cut (`crash`: its disk keeps what it keeps) or kill.
    fn down(&mut self, id: i32, crash: bool) {
        let n = &mut self.nodes[Self::idx(id)];
        n.log = None;
        n.down_since = self.now_ms;
        n.state = ReplicaState::new(id);
        let taking_up = n.take_up_due.is_some_and(|(_, due)| self.step < due);
        n.take_up_due = None;
        n.hw_in_isr = None;
        if crash && taking_up {
            // The power went off while its leader-epoch checkpoint's sync was in flight: the
            // checkpoint is not on disk, and it takes the role up again from its image.
            self.report.take_ups_cut += 1;
        }
        if crash {
            n.disk.disk().crash();
            self.report.crashes += 1;
        } else {
            self.report.restarts += 1;
        }
        self.note(format!(
            "replica {id} {}",
            if crash { "loses power" } else { "is killed" }
        ));
    }

    async fn restart_one(&mut self) -> Result<(), Violation> {
        // An offline replica's broker is restarted by its operator (a kill, then a start).
        if let Some(id) = REPLICAS
            .iter()
            .copied()
            .find(|r| self.up(*r) && self.nodes[Self::idx(*r)].offline)
        {
            self.down(id, false);
        }
        let down: Vec<i32> = REPLICAS.iter().copied().filter(|r| !self.up(*r)).collect();
        if down.is_empty() {
            return Ok(());
        }
        let id = down[self.rng.range(0, down.len() as u64 - 1) as usize];
        self.start(Self::idx(id)).await
    }

    fn toggle_link(&mut self) {
        // With `--metadata-network`, also the link between a replica and the controller.
        let ends: &[i32] = if self.mode.metadata_network {
            &[CONTROLLER, 1, 2, 3]
        } else {
            &REPLICAS
        };
        let last = ends.len() as u64 - 1;
        let a = ends[self.rng.range(0, last) as usize];
        let b = ends[self.rng.range(0, last) as usize];
        if a == b {
            return;
        }
        let link = (a.min(b), a.max(b));
        if !self.cut.remove(&link) {
            self.cut.insert(link);
            self.note(format!("link {a}-{b} cut"));
        } else {
            self.note(format!("link {a}-{b} healed"));
        }
    }

    /// The faults stop: every replica comes back, links heal, and fetches run until every
    /// replica has the leader's log and the ISR is whole.
    async fn converge(&mut self) -> Result<(), Violation> {
        self.note("faults stop".into());
        self.cut.clear();
        for id in REPLICAS {
            let off = {
                let mut d = self.nodes[Self::idx(id)].disk.disk();
                d.power_stays_on();
                d.clear_faults();
                d.is_off()
            };
            // A replica offline, or whose log a fault poisoned before it noticed, restarts.
            let poisoned = self.up(id) && self.log(id).poisoned().is_some();
            if off && self.up(id) {
                self.down(id, true);
            } else if off {
                // Its power went off with its last change before it was killed: the cut
                // happened, and it restarts on what the crash kept.
                self.nodes[Self::idx(id)].disk.disk().crash();
                self.report.crashes += 1;
                self.note(format!("replica {id} was down with its power off: crashed"));
            } else if self.up(id) && (self.nodes[Self::idx(id)].offline || poisoned) {
                self.down(id, false);
            }
        }
        for id in REPLICAS {
            if !self.up(id) {
                self.start(Self::idx(id)).await?;
            }
        }
        self.full_until.clear();
        for _ in 0..3_000 {
            self.now_ms += 50;
            if self.mode.slow_take_up {
                // A slow take-up completes in converge's rounds too.
                self.step += 1;
            }
            for id in REPLICAS {
                // A log stalled by a full disk retries its staged writes (the broker's timer).
                if self.online(id) && self.log(id).is_disk_full() {
                    self.log(id).retry_stalled().await;
                }
            }
            self.send_fetch().await?;
            self.deliver().await?;
            self.settle().await?;
            if self.converged() {
                break;
            }
        }
        let leader = self.ctl.leader;
        if leader < 0 && self.ctl.isr.is_empty() && self.ctl.elr().is_empty() {
            // KIP-966: every replica that held all committed records restarted uncleanly, so
            // none is eligible; the partition waits for an operator's unclean election. What
            // was checked during the run stands; there is nothing to converge on.
            self.note("offline for good: no eligible replica (KIP-966)".into());
            self.report.offline_at_end += 1;
            return Ok(());
        }
        self.check(leader > 0, || "no leader once every replica is back".into())?;
        self.check(self.converged(), || {
            let ends: Vec<(i32, i64, i64)> = REPLICAS
                .iter()
                .map(|r| {
                    let o = self.log(*r).offsets();
                    (*r, o.log_end_offset.0, o.high_watermark.0)
                })
                .collect();
            format!(
                "the replicas did not converge once the faults stopped: (replica, log end, high \
                 watermark) {ends:?}, ISR {:?}",
                self.ctl.isr
            )
        })?;
        self.check_must(leader, "the leader at the end").await?;
        let reference = match read_all(self.log(leader)).await {
            Ok(r) => r,
            Err(e) => return Err(self.violation(format!("the leader {leader}: read: {e}"))),
        };
        for id in REPLICAS {
            let got = match read_all(self.log(id)).await {
                Ok(r) => r,
                Err(e) => return Err(self.violation(format!("replica {id}: read: {e}"))),
            };
            self.check(got == reference, || {
                let first = got.iter().zip(reference.iter()).find(|(a, b)| a != b).map(
                    |((o, a), (_, b))| {
                        let head = |v: &Vec<u8>| {
                            String::from_utf8_lossy(&v[..v.len().min(12)]).to_string()
                        };
                        format!("at {o}: {:?} where the leader has {:?}", head(a), head(b))
                    },
                );
                format!("replica {id}'s log differs from the leader's: first {first:?}")
            })?;
        }
        Ok(())
    }

    fn converged(&self) -> bool {
        let leader = self.ctl.leader;
        if leader < 0 || self.ctl.isr.len() != REPLICAS.len() {
            return false;
        }
        if self.mode.metadata_network
            && REPLICAS.iter().any(|r| {
                let n = &self.nodes[Self::idx(*r)];
                n.view.index < self.ctl.image.applied_index
                    || n.state.applied_role != Some((leader, self.ctl.epoch))
            })
        {
            return false;
        }
        let end = self.log(leader).offsets().log_end_offset.0;
        let hw = self.log(leader).offsets().high_watermark.0;
        hw == end
            && REPLICAS.iter().all(|r| {
                let o = self.log(*r).offsets();
                o.log_end_offset.0 == end && o.high_watermark.0 == end
            })
    }
}

/// One batch of `values` stamped `timestamp`, from an idempotent producer `(id, base
/// sequence)` or a plain one.
fn batch(values: &[Vec<u8>], timestamp: i64, idempotent: Option<(i64, i32)>) -> BytesMut {
    let mut section = BytesMut::new();
    for (i, v) in values.iter().enumerate() {
        put_record(&mut section, 0, i as i64, None, Some(v), &[]);
    }
    let (producer_id, producer_epoch, base_sequence) = match idempotent {
        Some((id, seq)) => (id, 0, seq),
        None => (-1, -1, -1),
    };
    let fields = BatchFields {
        base_offset: 0,
        leader_epoch: -1,
        attributes: 0,
        last_offset_delta: values.len() as i32 - 1,
        base_timestamp: timestamp,
        max_timestamp: timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count: values.len() as i32,
    };
    frame_batch(&fields, &section)
}

/// Whether an injected disk fault (per `mode`) has fired on `disk`: an error is then expected.
fn fired(mode: ReplicaMode, disk: &SimHandle) -> bool {
    let d = disk.disk();
    let c = &d.counts;
    (mode.disk_faults && c.sync_eio + c.write_eio > 0) || (mode.disk_full && c.no_space > 0)
}

/// Every record of `log` from its start: (offset, value), offsets checked dense.
async fn read_all(log: &Log) -> Result<Vec<(i64, Vec<u8>)>, String> {
    let o = log.offsets();
    let mut out = Vec::new();
    let mut at = o.log_start_offset.0;
    while at < o.log_end_offset.0 {
        let r = log
            .read(Offset(at), 256 << 10, o.log_end_offset)
            .await
            .map_err(|e| e.to_string())?;
        let batch = parse(&r.records);
        let Some(last) = batch.last().map(|(x, _)| *x) else {
            return Err(format!("an empty read at {at}"));
        };
        for (offset, v) in batch.into_iter().filter(|(x, _)| *x >= at) {
            let want = o.log_start_offset.0 + out.len() as i64;
            if offset != want {
                return Err(format!("offset {offset} where {want} was next"));
            }
            out.push((offset, v));
        }
        at = last + 1;
    }
    Ok(out)
}

fn parse(bytes: &[u8]) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(h) = BatchHeader::parse(&bytes[pos..]) else {
            break;
        };
        if pos + h.size > bytes.len() {
            break;
        }
        let section = &bytes[pos + keel_vocab::records::HEADER_BYTES..pos + h.size];
        if let Ok(records) = parse_records(section, &h) {
            out.extend(
                records
                    .into_iter()
                    .map(|r| (r.offset, r.value.unwrap_or_default().to_vec())),
            );
        }
        pos += h.size;
    }
    out
}
