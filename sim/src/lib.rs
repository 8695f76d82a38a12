//! The deterministic fault simulation (issue 20). Keel's own partition log (keel-storage's
//! `Log`, opened on `Disk::Sim`) runs on one glommio executor, one thread, against a
//! keel-simdisk disk; a seed drives every choice (operations, record sizes, faults, crash
//! points, which unsynced sectors a crash keeps), and invariants are checked after every step.
//! The same seed replays the same run: `keel-sim --seed N` reproduces a failure exactly.
//!
//! [`log_sim`] is the simulation of one log, [`replica_sim`] of a replicated partition; their
//! invariants are listed there.

pub mod log_sim;
pub mod replica_sim;

pub use replica_sim::ReplicaMode;

use std::cell::Cell;
use std::collections::VecDeque;
use std::future::Future;

pub use keel_simdisk::{FaultCounts, SplitMix64};

/// The seeded generator every choice of a run is drawn from.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Mixed once, so that seeds 0, 1, 2, ... start far apart.
        let mut r = SplitMix64(seed ^ 0x6b65_656c_2d73_696d);
        r.next();
        Rng(r)
    }

    pub fn draw(&mut self) -> u64 {
        self.0.next()
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.draw() % (hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.draw() % 100 < percent
    }
}

/// What one seed did, and what it found.
#[derive(Clone, Debug, Default)]
pub struct SeedReport {
    pub seed: u64,
    pub steps: u64,
    pub appends: u64,
    pub acked_records: u64,
    pub crashes: u64,
    pub restarts: u64,
    pub retries: u64,
    /// Retries the leader found in its log already (answered with the original offsets).
    pub retries_duplicate: u64,
    /// Of those, retries a leader other than the one last sent to (another replica, or the
    /// same one in a later epoch) found in its log.
    pub retries_duplicate_elsewhere: u64,
    /// `--controller-network`: AlterPartition requests the controller received, and those it
    /// refused (epochs gone stale on the way, a member fenced or re-registered meanwhile).
    pub alter_partitions: u64,
    pub alter_partitions_refused: u64,
    /// `--metadata-network`: images replicas installed from the network, replicas the
    /// controller fenced while they ran (cut off from it), and client requests a replica
    /// served as leader by an image the controller had replaced (a former leader).
    pub images_installed: u64,
    pub fenced_while_up: u64,
    pub stale_leader_requests: u64,
    /// Records a former leader acknowledged (its high watermark passed them by its old image)
    /// after the controller had elected another.
    pub stale_leader_acks: u64,
    /// `--slow-take-up`: leaderships taken up some steps after the image named them, and
    /// ListOffsets (latest) answers checked.
    pub take_ups_delayed: u64,
    pub latest_offsets_checked: u64,
    /// Of those, take-ups a power cut ended before their checkpoint's sync completed.
    pub take_ups_cut: u64,
    /// `--timers`: acks=all writes refused before their append (NOT_ENOUGH_REPLICAS: the
    /// committed ISR below the minimum), answered REQUEST_TIMED_OUT and
    /// NOT_ENOUGH_REPLICAS_AFTER_APPEND, follower fetches timed out, AlterPartition requests
    /// that got no answer in time and changes sent again after the backoff, answers that came
    /// after their request had timed out (dropped), and follower back-offs.
    pub produces_not_enough_replicas: u64,
    pub acks_timed_out: u64,
    pub acks_not_enough_replicas: u64,
    pub fetches_timed_out: u64,
    pub alter_partitions_timed_out: u64,
    pub alter_partitions_resent: u64,
    pub late_answers_dropped: u64,
    pub fetch_backoffs: u64,
    pub reads_checked: u64,
    /// Invariant checks run (each a comparison against the model).
    pub checks: u64,
    /// Faults injected, by kind, and what the disk's crashes did.
    pub injected_sync_eio: u64,
    pub injected_write_eio: u64,
    pub injected_no_space: u64,
    pub injected_power_off: u64,
    /// Replicated: seeds that ended with the partition offline for good (KIP-966: no eligible
    /// replica left after unclean restarts), where convergence is not checked.
    pub offline_at_end: u64,
    /// Replicated, with disk faults: replicas whose log an injected EIO poisoned, taken
    /// offline by the controller (`offline_replica_records`), and how many of them led (their
    /// leadership moved to another replica or, with none eligible, to nobody).
    pub replicas_offline: u64,
    pub offline_leaders: u64,
    pub disk: FaultCounts,
}

impl SeedReport {
    /// Adds another seed's counts into this total.
    pub fn add(&mut self, o: &SeedReport) {
        self.steps += o.steps;
        self.appends += o.appends;
        self.acked_records += o.acked_records;
        self.crashes += o.crashes;
        self.restarts += o.restarts;
        self.retries += o.retries;
        self.retries_duplicate += o.retries_duplicate;
        self.retries_duplicate_elsewhere += o.retries_duplicate_elsewhere;
        self.alter_partitions += o.alter_partitions;
        self.alter_partitions_refused += o.alter_partitions_refused;
        self.images_installed += o.images_installed;
        self.fenced_while_up += o.fenced_while_up;
        self.stale_leader_requests += o.stale_leader_requests;
        self.stale_leader_acks += o.stale_leader_acks;
        self.take_ups_delayed += o.take_ups_delayed;
        self.latest_offsets_checked += o.latest_offsets_checked;
        self.take_ups_cut += o.take_ups_cut;
        self.produces_not_enough_replicas += o.produces_not_enough_replicas;
        self.acks_timed_out += o.acks_timed_out;
        self.acks_not_enough_replicas += o.acks_not_enough_replicas;
        self.fetches_timed_out += o.fetches_timed_out;
        self.alter_partitions_timed_out += o.alter_partitions_timed_out;
        self.alter_partitions_resent += o.alter_partitions_resent;
        self.late_answers_dropped += o.late_answers_dropped;
        self.fetch_backoffs += o.fetch_backoffs;
        self.reads_checked += o.reads_checked;
        self.checks += o.checks;
        self.injected_sync_eio += o.injected_sync_eio;
        self.injected_write_eio += o.injected_write_eio;
        self.injected_no_space += o.injected_no_space;
        self.injected_power_off += o.injected_power_off;
        self.offline_at_end += o.offline_at_end;
        self.replicas_offline += o.replicas_offline;
        self.offline_leaders += o.offline_leaders;
        let (d, e) = (&mut self.disk, &o.disk);
        d.write_eio += e.write_eio;
        d.sync_eio += e.sync_eio;
        d.no_space += e.no_space;
        d.corrupt_reads += e.corrupt_reads;
        d.crashes += e.crashes;
        d.sectors_kept += e.sectors_kept;
        d.sectors_lost += e.sectors_lost;
        d.entries_reverted += e.entries_reverted;
        d.refused_power_off += e.refused_power_off;
    }
}

/// An invariant that did not hold: the seed, the step, and what was seen.
#[derive(Clone, Debug)]
pub struct Violation {
    pub seed: u64,
    pub step: u64,
    pub what: String,
    /// The run's last operations, oldest first, to read the failure by.
    pub trail: Vec<String>,
    /// The `keel-sim` flags that select this simulation (`--replicated`, ...).
    pub flags: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "seed {} step {}: {}\n  reproduce: cargo run -p keel-sim -- {}--seed {}\n  last steps:",
            self.seed, self.step, self.what, self.flags, self.seed
        )?;
        for t in &self.trail {
            writeln!(f, "    {t}")?;
        }
        Ok(())
    }
}

/// What a run keeps for its report: its last operations and the checks it ran.
pub(crate) struct Trail {
    seed: u64,
    /// Names the simulation in a violation (`""` for the one-log one).
    kind: String,
    /// The `keel-sim` flags that replay it.
    flags: String,
    keep: usize,
    lines: VecDeque<String>,
    checks: Cell<u64>,
}

impl Trail {
    pub(crate) fn new(seed: u64, kind: &str, flags: &str, keep: usize) -> Trail {
        Trail {
            seed,
            kind: kind.to_string(),
            flags: flags.to_string(),
            keep,
            lines: VecDeque::new(),
            checks: Cell::new(0),
        }
    }

    /// Remembers one operation (the oldest beyond `keep` are forgotten).
    pub(crate) fn note(&mut self, line: String) {
        if self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    pub(crate) fn violation(&self, step: u64, what: String) -> Violation {
        Violation {
            seed: self.seed,
            step,
            what: format!("{}{what}", self.kind),
            trail: self.lines.iter().cloned().collect(),
            flags: self.flags.clone(),
        }
    }

    /// One invariant check: `Err` with the violation when it does not hold.
    pub(crate) fn check(
        &self,
        step: u64,
        ok: bool,
        what: impl FnOnce() -> String,
    ) -> Result<(), Violation> {
        self.checks.set(self.checks.get() + 1);
        if ok {
            Ok(())
        } else {
            Err(self.violation(step, what()))
        }
    }

    pub(crate) fn checks(&self) -> u64 {
        self.checks.get()
    }
}

/// Runs `f` on a fresh glommio executor on this thread (memlock raised first: root).
pub fn in_executor<T, F: Future<Output = T>>(f: impl FnOnce() -> F) -> T {
    let limit = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall on a stack value; failure only means the default limit stays.
    unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit);
    }
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        // No preemption slice runs out in the middle of a step: where a task yields never
        // depends on wall-clock time, so a seed replays the same interleaving.
        .preempt_timer(std::time::Duration::from_secs(3600))
        .make()
        .expect("glommio executor")
        .run(f())
}

/// Runs seeds `from..from + count` of the one-log simulation with `steps` steps each: the
/// total counts, or the first violation.
pub fn run_log_seeds(from: u64, count: u64, steps: u64) -> Result<SeedReport, Violation> {
    in_executor(|| async move {
        let mut total = SeedReport::default();
        for seed in from..from + count {
            let r = log_sim::run(seed, steps).await?;
            total.add(&r);
        }
        total.seed = from;
        Ok(total)
    })
}

/// Runs seeds `from..from + count` of the replicated-partition simulation with `steps` steps
/// each, with what `mode` adds (EIO, full disks, idempotent producers): the total counts, or
/// the first violation.
pub fn run_replica_seeds(
    from: u64,
    count: u64,
    steps: u64,
    mode: ReplicaMode,
) -> Result<SeedReport, Violation> {
    in_executor(|| async move {
        let mut total = SeedReport::default();
        for seed in from..from + count {
            let r = replica_sim::run(seed, steps, mode).await?;
            total.add(&r);
        }
        total.seed = from;
        Ok(total)
    })
}
