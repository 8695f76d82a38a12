//! keel-sim: runs the deterministic fault simulation for a range of seeds and prints the
//! counts (seeds, steps, faults injected per kind, invariant checks, violations), or the first
//! violation with the command that replays it.
//!
//! ```text
//! keel-sim [--seeds N] [--from S] [--steps K]   N seeds from S (default 100 from 0)
//! keel-sim --seed S [--steps K]                 one seed, e.g. a failing one
//! keel-sim --replicated ...                     the replicated partition instead of one log
//! keel-sim --replicated --disk-faults ...       with EIO injected into the replicas' disks
//! keel-sim --replicated --disk-full ...         with full disks (ENOSPC) that get space back
//! keel-sim --replicated --idempotent ...        with idempotent producers retrying their batches
//! keel-sim --replicated --controller-network ... with AlterPartition over the simulated network
//! keel-sim --replicated --metadata-network ... with metadata images and heartbeats over it too
//! keel-sim --replicated --slow-take-up ...     leaderships taken up some steps after their image
//! keel-sim --replicated --timers ...           the broker's timers: deadlines, resends, back-offs
//! ```
//!
//! `SIM_TRACE=1` prints every step of a replicated run to stderr (a violation prints the last
//! 60).

use std::time::Instant;

fn usage() -> ! {
    eprintln!(
        "usage: keel-sim [--replicated [--disk-faults] [--disk-full] [--idempotent] [--controller-network] [--metadata-network] [--slow-take-up] [--timers]] [--seeds N] [--from S] [--seed S] [--steps K]"
    );
    std::process::exit(2)
}

fn main() {
    let (mut from, mut count, mut steps) = (0u64, 100u64, 300u64);
    let mut replicated = false;
    let mut mode = keel_sim::ReplicaMode::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match a.as_str() {
            "--seeds" => count = value(),
            "--from" => from = value(),
            "--seed" => {
                from = value();
                count = 1;
            }
            "--steps" => steps = value(),
            "--replicated" => replicated = true,
            "--disk-faults" => mode.disk_faults = true,
            "--disk-full" => mode.disk_full = true,
            "--idempotent" => mode.idempotent = true,
            "--controller-network" => mode.controller_network = true,
            "--metadata-network" => mode.metadata_network = true,
            "--slow-take-up" => mode.slow_take_up = true,
            "--timers" => mode.timers = true,
            _ => usage(),
        }
    }
    let started = Instant::now();
    let (what, result) = if replicated {
        (
            "replicated-partition",
            keel_sim::run_replica_seeds(from, count, steps, mode),
        )
    } else {
        ("log", keel_sim::run_log_seeds(from, count, steps))
    };
    match result {
        Ok(t) => {
            println!(
                "{what} simulation: seeds {from}..{} ({count}), {} steps, {:.1} s",
                from + count,
                t.steps,
                started.elapsed().as_secs_f64()
            );
            println!(
                "  operations: {} appends, {} records acknowledged, {} producer retries, {} reads checked",
                t.appends, t.acked_records, t.retries, t.reads_checked
            );
            if t.images_installed > 0 {
                println!(
                    "  metadata over the network: {} images installed, {} replicas fenced while \
                     running, {} client requests served by a former leader, {} records it \
                     acknowledged after another was elected",
                    t.images_installed,
                    t.fenced_while_up,
                    t.stale_leader_requests,
                    t.stale_leader_acks
                );
            }
            if t.take_ups_delayed > 0 {
                println!(
                    "  slow take-up: {} leaderships taken up 1-5 steps after their image ({} cut short \
                     by a power cut before their checkpoint synced), {} ListOffsets (latest) \
                     answers checked",
                    t.take_ups_delayed, t.take_ups_cut, t.latest_offsets_checked
                );
            }
            if mode.timers {
                println!(
                    "  timers: {} acks=all writes refused NOT_ENOUGH_REPLICAS, {} timed out, {} refused NOT_ENOUGH_REPLICAS_AFTER_APPEND; {} follower fetches timed out, {} follower back-offs; {} AlterPartition requests unanswered in time, {} changes sent again after the backoff, {} late answers dropped",
                    t.produces_not_enough_replicas,
                    t.acks_timed_out,
                    t.acks_not_enough_replicas,
                    t.fetches_timed_out,
                    t.fetch_backoffs,
                    t.alter_partitions_timed_out,
                    t.alter_partitions_resent,
                    t.late_answers_dropped
                );
            }
            if t.alter_partitions > 0 {
                println!(
                    "  AlterPartition requests over the network: {} ({} refused by the controller)",
                    t.alter_partitions, t.alter_partitions_refused
                );
            }
            if t.retries_duplicate > 0 {
                println!(
                    "  retries the leader already held (answered at their original offsets): {} ({} of them by a leader other than the one last sent to)",
                    t.retries_duplicate, t.retries_duplicate_elsewhere
                );
            }
            println!(
                "  faults injected: {} sync EIO, {} write EIO, {} disk full, {} power-offs mid-operation; fired: {} sync EIO, {} write EIO, {} ENOSPC",
                t.injected_sync_eio,
                t.injected_write_eio,
                t.injected_no_space,
                t.injected_power_off,
                t.disk.sync_eio,
                t.disk.write_eio,
                t.disk.no_space
            );
            println!(
                "  power cuts: {} ({} unsynced sectors kept, {} lost, {} directory entries undone); process restarts: {}",
                t.crashes, t.disk.sectors_kept, t.disk.sectors_lost, t.disk.entries_reverted, t.restarts
            );
            if replicated
                && (t.replicas_offline > 0 || t.injected_sync_eio + t.injected_write_eio > 0)
            {
                println!(
                    "  replicas taken offline after a failed write or sync: {} ({} of them leading; leadership moved by keel-raft's offline_replica_records)",
                    t.replicas_offline, t.offline_leaders
                );
            }
            if replicated {
                println!(
                    "  seeds ending offline for good (KIP-966: no eligible replica after unclean restarts; convergence not checked): {}",
                    t.offline_at_end
                );
            }
            println!("  invariant checks: {}; violations: 0", t.checks);
        }
        Err(v) => {
            eprintln!("VIOLATION {v}");
            std::process::exit(1)
        }
    }
}
