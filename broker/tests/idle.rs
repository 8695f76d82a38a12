//! An idle broker sleeps: no shard wakes up to poll for something that could tell it instead.
//! Counted, not timed: each shard thread's voluntary context switches (one per sleep, so one
//! per wake-up) over a quiet window, from /proc. Signals reach shard 0 through a doorbell it
//! reads with io_uring, shutdown reaches the other shards over the mesh, and the ticker runs
//! once a second while no log needs it; before, shard 0 polled the signal flag every 20 ms and
//! every shard ticked every 50 ms (about 70 and 20 wake-ups a second).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Broker;

/// Voluntary context switches of each `keel-shard-N` thread of `pid`.
fn shard_wakeups(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        // glommio's own helper threads are named "keel-shard-N-ID"; the shard is exactly N.
        if !comm.starts_with("keel-shard-") || comm.matches('-').count() != 2 {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let n = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap();
        out.insert(comm, n);
    }
    out
}

#[test]
fn an_idle_broker_does_not_poll() {
    let mut b = Broker::start(&["--smp", "2"]);
    // Let start-up work (metadata, internal timers' first runs) settle.
    std::thread::sleep(Duration::from_secs(3));
    let before = shard_wakeups(b.pid());
    assert_eq!(before.len(), 2, "two shard threads: {before:?}");
    const WINDOW_S: u64 = 10;
    std::thread::sleep(Duration::from_secs(WINDOW_S));
    let after = shard_wakeups(b.pid());
    for (thread, n) in &after {
        let woke = n - before[thread];
        // The once-a-second ticker, plus on shard 0 the controller's heartbeats and metadata
        // events: a few a second at most. Polling every 20 or 50 ms would be 200-700.
        assert!(
            woke <= 5 * WINDOW_S,
            "{thread} woke {woke} times in {WINDOW_S} s of idleness"
        );
    }
    // And it still stops promptly on SIGTERM, though nothing polls for it.
    let started = std::time::Instant::now();
    assert_eq!(b.stop(), Some(0), "clean exit");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopping took {:?}",
        started.elapsed()
    );
}
