//! Launching the shards: one glommio executor per core, pinned, joined into a full mesh.
//!
//! Also raises RLIMIT_MEMLOCK, which glommio needs for its registered io_uring buffers
//! (`io_memory` per executor).

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use glommio::channels::channel_mesh::{MeshBuilder, Receivers};
use glommio::{LocalExecutorBuilder, Placement, StallDetectionHandler, TaskQueueHandle};

use crate::mesh::{Mesh, Message};
use crate::ShardError;

/// How the runtime is laid out.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Number of shards (executors). 0 = one per core this process may use.
    pub smp: usize,
    /// Bytes of io_uring registered memory per executor.
    pub io_memory_bytes: usize,
    /// Capacity of each mesh channel (jobs in flight between two shards).
    pub mesh_channel_capacity: usize,
    /// Pin executors to cores.
    pub pin: bool,
    /// A task that keeps the reactor this long past its task queue's preemption budget is
    /// logged (task queue, backtrace) and counted in [`reactor_stalls`]. `None` disables the
    /// stall detector.
    pub stall_threshold: Option<Duration>,
    /// How long a shard runs tasks before it reaps I/O completions and switches task queues
    /// (glommio's preempt timer; a task queue with `Latency::Matters` may lower it): the
    /// shard's I/O latency goal. glommio's default is 100 ms.
    pub preempt_timer: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            smp: 0,
            io_memory_bytes: 4 << 20,
            mesh_channel_capacity: 1024,
            pin: true,
            stall_threshold: Some(Duration::from_millis(10)),
            preempt_timer: Duration::from_millis(100),
        }
    }
}

impl RuntimeConfig {
    /// The cores this process may run on, per its affinity mask.
    pub fn allowed_cores() -> Vec<usize> {
        core_affinity::get_core_ids()
            .map(|ids| ids.into_iter().map(|c| c.id).collect())
            .unwrap_or_default()
    }

    /// Shard count after resolving `smp = 0`.
    pub fn shard_count(&self) -> usize {
        if self.smp > 0 {
            self.smp
        } else {
            Self::allowed_cores().len().max(1)
        }
    }
}

thread_local! {
    // Const-initialised and without Drop: touching it from a signal handler allocates and
    // registers nothing.
    static STALLS: AtomicU64 = const { AtomicU64::new(0) };
}

/// Stalls the stall detector has seen on the calling shard (0 off a shard thread or with the
/// detector disabled).
pub fn reactor_stalls() -> u64 {
    STALLS.with(|s| s.load(Ordering::Relaxed))
}

/// glommio's stall detector arms a timer when a task queue starts running; if the queue is
/// still running `threshold` past its preemption budget, the timer thread sends SIGUSR1 to
/// the shard thread, whose handler captures a backtrace; when the queue yields, glommio logs
/// (through `log`, which tracing-subscriber forwards) the task queue's name, its overage, the
/// budget and the resolved backtrace. glommio's `StallDetection` is not exported, so
/// `stall()` cannot be overridden here: the default logger is kept, and stalls are counted
/// by a second SIGUSR1 handler ([`count_stalls`]) on the shard thread.
#[derive(Debug)]
struct StallThreshold(Duration);

impl StallDetectionHandler for StallThreshold {
    fn threshold(&self, _: TaskQueueHandle, _: Duration) -> Option<Duration> {
        Some(self.0)
    }
}

/// Registers (once per process) a SIGUSR1 handler that counts a stall on the thread it
/// lands on. glommio's timer thread directs the signal at the stalled shard thread only.
fn count_stalls() -> Result<(), ShardError> {
    static ONCE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: the action only does an atomic add on a const-initialised thread local,
        // which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(libc::SIGUSR1, || {
                let _ = STALLS.try_with(|s| s.fetch_add(1, Ordering::Relaxed));
            })
        }
        .map(|_| ())
        .map_err(|e| format!("stall detector: registering SIGUSR1: {e}"))
    })
    .clone()
    .map_err(ShardError::Setup)
}

/// glommio names an executor's thread "NAME-ID" (its notifier id); the kernel's name of the
/// thread (what `top -H`, `perf top -t` and `perf record --per-thread` show) is set to
/// exactly `keel-shard-N` here, so that profiles and `keel profile` line up.
fn name_thread(shard_id: usize) {
    let name = format!("keel-shard-{shard_id}\0");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string (truncated to 15 bytes) from a
    // pointer valid for the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}

/// The shard a thread runs, from its name ("keel-shard-N" or glommio's "keel-shard-N-ID").
pub fn shard_of_thread_name(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("keel-shard-")?;
    rest.split('-').next()?.parse().ok()
}

/// What each shard's start function receives.
pub struct ShardBoot<S: 'static> {
    pub shard_id: usize,
    pub shard_count: usize,
    pub mesh: Rc<Mesh<S>>,
    /// Hand these to [`Mesh::serve`] once the shard state exists.
    pub receivers: Receivers<Message<S>>,
}

/// The current soft RLIMIT_MEMLOCK in bytes (`u64::MAX` when unlimited).
pub fn memlock_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return 0;
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        lim.rlim_cur
    }
}

/// Raises RLIMIT_MEMLOCK so that `bytes` can be locked. Returns the new soft limit, or an
/// error that names the limit to raise.
pub fn raise_memlock_limit(bytes: u64) -> Result<u64, ShardError> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= bytes {
            return Ok(lim.rlim_cur);
        }
        let want = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        if libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) == 0 {
            return Ok(libc::RLIM_INFINITY);
        }
        if lim.rlim_max == libc::RLIM_INFINITY || lim.rlim_max >= bytes {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &want) == 0 {
                return Ok(lim.rlim_max);
            }
        }
    }
    Err(ShardError::Setup(format!(
        "RLIMIT_MEMLOCK is {} bytes and could not be raised to the {bytes} bytes glommio needs \
         (io_memory x shards); raise it (`ulimit -l unlimited`, or LimitMEMLOCK=infinity in \
         systemd, or memlock in /etc/security/limits.conf) or lower --io-memory / --smp",
        lim.rlim_cur
    )))
}

/// How often a joining shard's executor wakes to look at its channels (see [`launch`]).
const JOIN_TICK: Duration = Duration::from_millis(10);

/// Starts `config.shard_count()` executors, joins them into a mesh, runs `start` on each and
/// blocks until all have returned. Any shard's setup failure is returned.
pub fn launch<S, G, Fut>(config: &RuntimeConfig, start: G) -> Result<(), ShardError>
where
    S: 'static,
    G: Fn(ShardBoot<S>) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let count = config.shard_count();
    let cores = RuntimeConfig::allowed_cores();
    let mesh_builder: MeshBuilder<Message<S>, _> =
        MeshBuilder::full(count, config.mesh_channel_capacity);
    let mut handles = Vec::with_capacity(count);
    for shard_id in 0..count {
        let placement = if config.pin && !cores.is_empty() {
            Placement::Fixed(cores[shard_id % cores.len()])
        } else {
            Placement::Unbound
        };
        let mut builder = LocalExecutorBuilder::new(placement)
            .name(&format!("keel-shard-{shard_id}"))
            .io_memory(config.io_memory_bytes)
            .preempt_timer(config.preempt_timer);
        if let Some(threshold) = config.stall_threshold {
            count_stalls()?;
            builder = builder.detect_stalls(Some(Box::new(StallThreshold(threshold))));
        }
        let mesh_builder = mesh_builder.clone();
        let start = start.clone();
        let handle = builder
            .spawn(move || async move {
                name_thread(shard_id);
                // While the shards join, a timer wakes this executor every few milliseconds:
                // a join whose cross-thread wake-up was lost (both executors found asleep in
                // io_uring with the join's message in a channel, 1 broker start in about 100
                // under `cargo test --test io_properties`; any wake-up of the executor sweeps
                // the channels and finds it) goes on at the next tick instead of never. Once
                // joined, each shard's own ticker plays that part.
                let joining = Rc::new(Cell::new(true));
                let ticking = joining.clone();
                glommio::spawn_local(async move {
                    while ticking.get() {
                        glommio::timer::sleep(JOIN_TICK).await;
                    }
                })
                .detach();
                let joined = mesh_builder.join().await;
                joining.set(false);
                let (senders, receivers) = match joined {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::error!(shard_id, error = %e, "could not join the shard mesh");
                        return;
                    }
                };
                let mesh = Rc::new(Mesh::new(senders));
                start(ShardBoot {
                    shard_id,
                    shard_count: count,
                    mesh,
                    receivers,
                })
                .await;
            })
            .map_err(|e| ShardError::Setup(format!("shard {shard_id}: {e}")))?;
        handles.push(handle);
    }
    let mut first_err = None;
    for (i, h) in handles.into_iter().enumerate() {
        if let Err(e) = h.join() {
            first_err.get_or_insert(ShardError::Setup(format!("shard {i}: {e}")));
        }
    }
    first_err.map_or(Ok(()), Err)
}
