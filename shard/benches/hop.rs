//! What one cross-shard hop costs, against the cheapest wake-up two threads can do.
//!
//! `cargo bench -p keel-shard --bench hop [-- ROUND_TRIPS]` prints, for each case, the wall
//! time of a round trip (p50, p99, p99.9 from an HDR histogram) and the CPU both threads
//! spent per round trip (user + system, from getrusage(RUSAGE_THREAD) on each):
//! - `eventfd ping-pong`: two threads pinned to two cores; one writes an eventfd and blocks
//!   reading another, the other answers. The floor of a wake-up between cores.
//! - `mesh hop, idle target`: shard 0 calls shard 1 one call at a time through
//!   [`Mesh::call`], so both shards park between calls: the hop a lightly loaded broker
//!   makes for each request whose partition lives on the other shard.
//! - `mesh hops, batch of 64`: 64 calls in flight at once; CPU per hop when the mesh is busy.
//!
//! Each case runs a fixed number of round trips (bounded; default 20,000) after 1,000 of
//! warm-up. It needs two cores; with one, the numbers measure the scheduler instead.

use std::cell::Cell;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::time::Instant;

use hdrhistogram::Histogram;
use keel_shard::{launch, Event, RuntimeConfig, ShardBoot};

const WARMUP: u64 = 1_000;
const BATCH: u64 = 64;

fn thread_cpu_s() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage writes only into it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local struct.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

fn pin(core: usize) {
    core_affinity::set_for_current(core_affinity::CoreId { id: core });
}

struct Outcome {
    name: &'static str,
    hist: Histogram<u64>,
    cpu_s: f64,
    trips: u64,
}

impl Outcome {
    fn print(&self) {
        let us = |q: f64| self.hist.value_at_quantile(q) as f64 / 1000.0;
        println!(
            "{:<28} round trip p50 {:>7.1} µs  p99 {:>7.1} µs  p99.9 {:>7.1} µs   CPU {:>6.2} µs per round trip ({} trips)",
            self.name,
            us(0.5),
            us(0.99),
            us(0.999),
            self.cpu_s * 1e6 / self.trips as f64,
            self.trips
        );
    }
}

fn eventfd() -> OwnedFd {
    // SAFETY: eventfd has no memory preconditions; a non-negative result is a new fd we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a local u64 to an eventfd.
    let n = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    assert_eq!(n, 8, "eventfd write");
}

fn wait(fd: &OwnedFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a local u64 from an eventfd.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    assert_eq!(n, 8, "eventfd read");
}

fn eventfd_ping_pong(trips: u64, cores: (usize, usize)) -> Outcome {
    let ping = std::sync::Arc::new(eventfd());
    let pong = std::sync::Arc::new(eventfd());
    let (ping2, pong2) = (ping.clone(), pong.clone());
    let responder = std::thread::spawn(move || {
        pin(cores.1);
        let mut cpu = 0.0;
        for i in 0..WARMUP + trips {
            if i == WARMUP {
                cpu = thread_cpu_s();
            }
            wait(&ping2);
            signal(&pong2);
        }
        thread_cpu_s() - cpu
    });
    pin(cores.0);
    let mut hist = Histogram::new(3).expect("histogram");
    let mut cpu = 0.0;
    for i in 0..WARMUP + trips {
        if i == WARMUP {
            cpu = thread_cpu_s();
        }
        let t = Instant::now();
        signal(&ping);
        wait(&pong);
        if i >= WARMUP {
            let _ = hist.record(t.elapsed().as_nanos() as u64);
        }
    }
    let mine = thread_cpu_s() - cpu;
    let theirs = responder.join().expect("responder");
    Outcome {
        name: "eventfd ping-pong",
        hist,
        cpu_s: mine + theirs,
        trips,
    }
}

#[derive(Default)]
struct State {
    done: Event,
    cpu_s: Cell<f64>,
}

/// Shard 0 drives `trips` calls to shard 1, `in_flight` at a time; returns the wall-time
/// histogram and both shards' CPU over the measured calls.
fn mesh_hops(name: &'static str, trips: u64, in_flight: u64) -> Outcome {
    let config = RuntimeConfig {
        smp: 2,
        io_memory_bytes: 65536,
        pin: true,
        ..RuntimeConfig::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    launch(&config, move |boot: ShardBoot<State>| {
        let tx = tx.clone();
        async move {
            let state = Rc::new(State::default());
            boot.mesh.serve(boot.receivers, state.clone(), 4096);
            if boot.shard_id == 1 {
                state.done.wait().await;
                return;
            }
            let mesh = boot.mesh.clone();
            let call = |mesh: Rc<keel_shard::Mesh<State>>| async move {
                mesh.call(1, |_s: Rc<State>| async move {})
                    .await
                    .expect("answered");
            };
            for _ in 0..WARMUP {
                call(mesh.clone()).await;
            }
            let their_cpu = |mesh: Rc<keel_shard::Mesh<State>>| async move {
                mesh.call(1, |_s: Rc<State>| async move { thread_cpu_s() })
                    .await
                    .expect("answered")
            };
            let theirs_before = their_cpu(mesh.clone()).await;
            let mine_before = thread_cpu_s();
            let mut hist = Histogram::<u64>::new(3).expect("histogram");
            let rounds = trips / in_flight;
            for _ in 0..rounds {
                let t = Instant::now();
                if in_flight == 1 {
                    call(mesh.clone()).await;
                } else {
                    let tasks: Vec<_> = (0..in_flight)
                        .map(|_| glommio::spawn_local(call(mesh.clone())))
                        .collect();
                    for task in tasks {
                        task.await;
                    }
                }
                let _ = hist.record(t.elapsed().as_nanos() as u64);
            }
            let mine = thread_cpu_s() - mine_before;
            // The call that reads shard 1's CPU is one more hop, a small overcount.
            let theirs = their_cpu(mesh.clone()).await - theirs_before;
            state.cpu_s.set(mine + theirs);
            mesh.call(1, |s: Rc<State>| async move { s.done.fire() })
                .await
                .expect("answered");
            let _ = tx.send((hist, mine + theirs, rounds * in_flight));
        }
    })
    .expect("launch");
    let (hist, cpu_s, trips) = rx.recv().expect("shard 0 reported");
    Outcome {
        name,
        hist,
        cpu_s,
        trips,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a number among the arguments is the round-trip count.
    let trips = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<u64>().ok())
        .unwrap_or(20_000)
        .max(BATCH);
    let cores: Vec<usize> = RuntimeConfig::allowed_cores();
    if cores.len() < 2 {
        eprintln!("hop: needs two cores, found {}", cores.len());
        return;
    }
    println!(
        "one hop between two shards vs. an eventfd ping-pong, {} cores, {trips} round trips each",
        cores.len()
    );
    let base = eventfd_ping_pong(trips, (cores[0], cores[1]));
    base.print();
    let one = mesh_hops("mesh hop, idle target", trips, 1);
    one.print();
    let batch = mesh_hops("mesh hops, batch of 64", trips, BATCH);
    // A batch's histogram holds the wall time of the whole batch; CPU is per hop.
    println!(
        "{:<28} batch p50 {:>7.1} µs  p99 {:>7.1} µs                  CPU {:>6.2} µs per hop",
        batch.name,
        batch.hist.value_at_quantile(0.5) as f64 / 1000.0,
        batch.hist.value_at_quantile(0.99) as f64 / 1000.0,
        batch.cpu_s * 1e6 / batch.trips as f64
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    println!(
        "ratios to the ping-pong: idle hop p99 {:.2}x, CPU {:.2}x; batched hop CPU {:.2}x",
        ratio(
            one.hist.value_at_quantile(0.99) as f64,
            base.hist.value_at_quantile(0.99) as f64
        ),
        ratio(one.cpu_s / one.trips as f64, base.cpu_s / base.trips as f64),
        ratio(
            batch.cpu_s / batch.trips as f64,
            base.cpu_s / base.trips as f64
        ),
    );
}
