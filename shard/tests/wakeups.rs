//! No lost wake-ups between shards. A shard that runs out of work parks in the kernel; what
//! wakes it is another shard's push onto a mesh channel (a call, or the answer it waits for)
//! or a pop that frees room it waits for. Keel's glommio (vendor/glommio/KEEL-PATCH.md)
//! orders "I am going to sleep" against "I pushed / I popped" with a fence on each side
//! instead of a membarrier IPI, and wakes a producer only when it announced that it waits
//! for room. If either side got it wrong, a shard would sleep through its message and these
//! tests would hang: each runs under a watchdog that fails it, naming how far it got.
//!
//! Nothing else wakes these shards (no timers run unless a test arms one), so a lost wake-up
//! is a hang, not a delay.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_shard::{launch, Event, Mesh, RuntimeConfig, ShardBoot};

#[derive(Default)]
struct State {
    done: Event,
}

fn config(capacity: usize) -> RuntimeConfig {
    RuntimeConfig {
        smp: 2,
        io_memory_bytes: 65536,
        mesh_channel_capacity: capacity,
        pin: false,
        ..RuntimeConfig::default()
    }
}

/// A deterministic spread of short delays (an LCG), so the answer sometimes arrives while
/// the caller still runs, sometimes as it prepares to sleep, sometimes after it slept.
fn delay_ns(i: u64) -> u64 {
    let x = i
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (x >> 33) % 40_000
}

fn spin_for(ns: u64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_nanos(ns) {
        std::hint::spin_loop();
    }
}

/// Launches two shards: shard 1 serves its mesh (at most `jobs` calls at once, channels of
/// `capacity`) until shard 0 has run `drive` and told it it is done. Fails if that has not
/// happened within 120 s, reporting `drive`'s progress counter against `total`; returns the
/// counter at the end.
fn drive_two_shards<F, Fut>(capacity: usize, jobs: u64, total: u64, drive: F) -> u64
where
    F: Fn(Rc<Mesh<State>>, Arc<AtomicU64>) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let limit = Duration::from_secs(120);
    let progress = Arc::new(AtomicU64::new(0));
    let seen = progress.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        launch(&config(capacity), move |boot: ShardBoot<State>| {
            let (drive, progress) = (drive.clone(), seen.clone());
            async move {
                let state = Rc::new(State::default());
                boot.mesh.serve(boot.receivers, state.clone(), jobs);
                if boot.shard_id == 1 {
                    state.done.wait().await;
                    return;
                }
                drive(boot.mesh.clone(), progress).await;
                // Also waits for the target to have run everything sent before (it may be
                // parked).
                boot.mesh
                    .call(1, |s: Rc<State>| async move { s.done.fire() })
                    .await
                    .expect("answered");
            }
        })
        .expect("launch");
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => runner.join().expect("shards"),
        Err(_) => panic!(
            "lost wake-up: {} of {total} steps done after {limit:?}, then nothing",
            progress.load(Ordering::Relaxed)
        ),
    }
    progress.load(Ordering::Relaxed)
}

#[test]
fn a_caller_parked_while_its_call_is_in_flight_wakes_for_the_answer() {
    const CALLS: u64 = 20_000;
    let done = drive_two_shards(1024, 64, CALLS, |mesh, progress| async move {
        for i in 0..CALLS {
            // One call at a time: between calls shard 0 has nothing to do but wait, so it
            // parks on most of them; the target answers after 0-40 µs.
            let echoed = mesh
                .call(1, move |_s: Rc<State>| async move {
                    spin_for(delay_ns(i));
                    i
                })
                .await
                .expect("answered");
            assert_eq!(echoed, i, "call {i} got another call's answer");
            progress.store(i + 1, Ordering::Relaxed);
        }
    });
    assert_eq!(done, CALLS);
}

#[test]
fn a_target_parked_between_calls_wakes_for_each_call() {
    // The mirror case: the caller spins between calls while the target, idle, parks; each
    // call must wake it. Calls are notifications (no answer), so the caller never waits on
    // the target; the target counts what it received.
    const CALLS: u64 = 20_000;
    let done = drive_two_shards(1024, 64, CALLS, |mesh, progress| async move {
        for i in 0..CALLS {
            spin_for(delay_ns(i));
            let progress = progress.clone();
            mesh.notify(1, move |_s: Rc<State>| {
                let before = progress.fetch_add(1, Ordering::Relaxed);
                assert_eq!(before, i, "notifications arrive in order");
            })
            .await
            .expect("delivered");
        }
    });
    assert_eq!(done, CALLS);
}

#[test]
fn a_sender_parked_on_a_full_channel_wakes_when_the_target_drains_it() {
    // Capacity 1 and a target that takes its time (a glommio timer, so the target parks
    // too): shard 0's senders find the channel full on almost every call, announce that
    // they wait for room and park; only the target's pop can wake them.
    const CALLS: u64 = 3_000;
    let done = drive_two_shards(1, 1, CALLS, |mesh, progress| async move {
        let tasks: Vec<_> = (0..CALLS)
            .map(|i| {
                let (mesh, progress) = (mesh.clone(), progress.clone());
                glommio::spawn_local(async move {
                    let echoed = mesh
                        .call(1, move |_s: Rc<State>| async move {
                            if i % 8 == 0 {
                                glommio::timer::sleep(Duration::from_micros(50)).await;
                            } else {
                                spin_for(delay_ns(i) / 4);
                            }
                            i
                        })
                        .await
                        .expect("answered");
                    assert_eq!(echoed, i);
                    progress.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        for t in tasks {
            t.await;
        }
    });
    assert_eq!(done, CALLS);
}
