//! Start-up and shut-down: the command line, process limits, one executor per shard, and
//! each shard's accept loop and drain.
//!
//! `keel` (or `keel serve`) starts a broker: alone by default (a one-voter metadata quorum),
//! or one node of a cluster with `--node-id`, `--controller-quorum` and `--controller-listen`. Settings come from built-in
//! defaults, `KEEL_*` environment variables, a TOML file (`--config FILE`) and flags, each
//! overriding the one before.

use std::cell::Cell;
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use keel_shard::{
    install_signal_handlers, launch, memlock_limit, raise_memlock_limit, RuntimeConfig, ShardBoot,
};
use tracing::{error, info, warn};

use crate::config::{BrokerConfig, SettingsBuilder, BROKER_KEYS};
use crate::coordination::timers;
use crate::ops::print_quietly;
use crate::shard::BrokerShard;

/// glommio's floor for io_memory; below it the broker refuses to start.
const MIN_IO_MEMORY_BYTES: u64 = 65536;

const USAGE: &str = "\
keel: a Kafka-compatible, thread-per-core streaming log broker

usage: keel [serve] [OPTIONS]
       keel topic|produce|consume|group|cluster|user ...   (admin CLI, see below)
       keel profile [--duration 30s] [--admin HOST:PORT] [--out DIR]

options:
  --listen HOST:PORT     Kafka listener (default 127.0.0.1:9092)
  --advertise HOST:PORT  address given to clients in Metadata (default: --listen)
  --data-dir DIR         partition logs and metadata (default ./keel-data)
  --smp N                shards, one per core (default: every core the process may use)
  --admin HOST:PORT      admin HTTP endpoint with /metrics (default 127.0.0.1:9644; 'off' disables)
  --node-id N            this broker's id (default 0)
  --controller-quorum 1@HOST:PORT,2@HOST:PORT,...
                         the metadata quorum's voters and their controller addresses
                         (default: this node alone, a one-voter quorum)
  --controller-listen HOST:PORT
                         this node's controller (Raft) listener; needed in a multi-node cluster
  --rack RACK            this broker's rack (rack-aware replica placement)
  --config FILE          TOML file of settings (Kafka names, e.g. \"num.partitions\" = 3)
  --set KEY=VALUE        any setting by its Kafka name (repeatable)
  --add-scram 'SCRAM-SHA-256=[name=admin,password=...]'
                         a SCRAM user written to the metadata log if it has no credential
                         for that mechanism yet (repeatable; Kafka's --add-scram)
  --help                 this text and the list of settings
  --version              print the version

Environment: KEEL_<SETTING> with dots as underscores, e.g. KEEL_NUM_PARTITIONS=3.
Precedence: flags > config file > environment > defaults. Logs: RUST_LOG (default info).
";

fn parse_args(args: Vec<String>) -> Result<Option<BrokerConfig>> {
    let mut args = args.into_iter().peekable();
    if args.peek().map(String::as_str) == Some("serve") {
        args.next();
    }
    let mut flags: Vec<(String, String)> = Vec::new();
    let mut add_scram = Vec::new();
    let mut config_file: Option<String> = std::env::var("KEEL_CONFIG").ok();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") && n != "--set" => {
                (n.to_string(), Some(v.to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| -> Result<String> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args.next().with_context(|| format!("{flag} needs a value")),
            }
        };
        match name.as_str() {
            "--help" | "-h" => {
                use std::fmt::Write as _;
                let mut text = format!("{USAGE}\n{}\nsettings (default):\n", keel_cli::HELP);
                for k in BROKER_KEYS {
                    let topic = crate::config::topic_name_of(k.name)
                        .map(|t| format!(" (topic: {t})"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        text,
                        "  {:<28} {:<16} {}{topic}",
                        k.name,
                        if k.default.is_empty() { "-" } else { k.default },
                        k.doc
                    );
                }
                print_quietly(&text);
                return Ok(None);
            }
            "--version" | "-V" => {
                print_quietly(&format!("keel {}\n", env!("CARGO_PKG_VERSION")));
                return Ok(None);
            }
            "--listen" => flags.push(("listen".into(), value("--listen")?)),
            "--advertise" => flags.push(("advertise".into(), value("--advertise")?)),
            "--data-dir" => flags.push(("data.dir".into(), value("--data-dir")?)),
            "--smp" => flags.push(("smp".into(), value("--smp")?)),
            "--admin" => flags.push(("admin".into(), value("--admin")?)),
            "--node-id" => flags.push(("node.id".into(), value("--node-id")?)),
            "--controller-quorum" => flags.push((
                "controller.quorum.voters".into(),
                value("--controller-quorum")?,
            )),
            "--controller-listen" => {
                flags.push(("controller.listen".into(), value("--controller-listen")?))
            }
            "--rack" => flags.push(("broker.rack".into(), value("--rack")?)),
            "--config" => config_file = Some(value("--config")?),
            "--add-scram" => {
                add_scram.push(crate::config::parse_add_scram(&value("--add-scram")?)?)
            }
            "--set" => {
                let kv = args.next().context("--set needs KEY=VALUE")?;
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--set needs KEY=VALUE, got {kv:?}"))?;
                flags.push((k.trim().to_string(), v.trim().to_string()));
            }
            other => bail!("unknown argument {other:?}; see keel --help"),
        }
    }
    let mut settings = SettingsBuilder::default().env(std::env::vars());
    if let Some(path) = config_file {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading config file {path}"))?;
        settings = settings
            .toml_text(&text)
            .with_context(|| format!("in config file {path}"))?;
    }
    for (k, v) in flags {
        settings = settings.set(&k, &v);
    }
    let mut config = BrokerConfig::from_settings(settings.build())?;
    config.add_scram = add_scram;
    Ok(Some(config))
}

/// The `keel` binary: a client subcommand, or the broker.
pub fn main() {
    if let Some(code) = client_command(std::env::args().skip(1).collect()) {
        std::process::exit(code);
    }
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    // The stall layer sees warnings whatever RUST_LOG says (glommio reports stalls as
    // warnings); its own filter keeps everything below WARN from being built for it.
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(filter),
        )
        .with(
            crate::ops::stalls::StallLayer
                .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
        )
        .init();
    if let Err(e) = run() {
        eprintln!("keel: {e:#}");
        std::process::exit(2);
    }
}

/// Subcommands that are clients of a broker rather than the broker: the admin CLI
/// (`keel topic|produce|consume|group|cluster ...`, keel-cli) and `keel profile` (of a live
/// broker's admin endpoint). They run without the broker's logging and limits; `None` for
/// the broker's own arguments.
fn client_command(args: Vec<String>) -> Option<i32> {
    match args.first().map(String::as_str) {
        Some("profile") => Some(crate::ops::profile::main(&args[1..])),
        Some(command) if keel_cli::is_command(command) => Some(keel_cli::run(args)),
        _ => None,
    }
}

/// Shards bind with SO_REUSEPORT, which would let a second broker (or the listening socket
/// of a crashed one that the kernel has not torn down yet: io_uring releases its files
/// asynchronously) share the port and swallow connections. So first bind once without it:
/// the port must be free. A port still held is retried for a while, then refused.
fn wait_for_port(addr: std::net::SocketAddr, what: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut warned = false;
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(probe) => {
                drop(probe);
                return Ok(());
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                if !warned {
                    tracing::warn!(%addr, "{what} address is in use; waiting for it to be released");
                    warned = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            Err(e) => return Err(e).with_context(|| format!("cannot bind {what} address {addr}")),
        }
    }
}

/// Raises the soft open-files limit to the hard one (as a broker with many partitions
/// needs); returns the soft limit in force.
fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                return lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

fn run() -> Result<()> {
    let Some(mut config) = parse_args(std::env::args().skip(1).collect())? else {
        return Ok(());
    };
    keel_storage::create_dir_all_durable(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    // glommio opens directories relative to no directory fd (a relative path gets EBADF when a
    // log syncs its directory), so the data dir is made absolute once here.
    config.data_dir = std::fs::canonicalize(&config.data_dir)
        .with_context(|| format!("resolving data dir {}", config.data_dir.display()))?;
    // Logs deleted (renamed `*-delete`) but not yet unlinked when the broker last stopped.
    match keel_storage::trash::sweep(&config.data_dir) {
        Ok(0) => {}
        Ok(n) => tracing::info!(directories = n, "deleting logs left renamed for deletion"),
        Err(e) => tracing::warn!(error = %e, "looking for logs left for deletion failed"),
    }
    // The disk's measured properties (keel-tune iotune) size the I/O settings left unset.
    let shard_count = RuntimeConfig {
        smp: config.smp,
        ..RuntimeConfig::default()
    }
    .shard_count();
    crate::ops::io_sizing::configure(&mut config, shard_count)?;
    let mut runtime = RuntimeConfig {
        smp: config.smp,
        io_memory_bytes: config.io_memory_bytes,
        stall_threshold: (config.reactor_stall_threshold_ms > 0)
            .then(|| std::time::Duration::from_millis(config.reactor_stall_threshold_ms)),
        preempt_timer: std::time::Duration::from_micros(config.io_latency_goal_us),
        ..RuntimeConfig::default()
    };
    let shards = runtime.shard_count();
    // glommio registers each shard's io_memory with its three io_uring rings; every
    // registration pins (and counts against RLIMIT_MEMLOCK) the whole buffer.
    let needed = config.io_memory_bytes as u64 * 3 * shards as u64;
    let memlock = match raise_memlock_limit(needed) {
        Ok(limit) if limit == libc::RLIM_INFINITY => "raised to unlimited".to_string(),
        Ok(limit) => format!("{limit} bytes, enough"),
        Err(e) => {
            let limit = memlock_limit();
            let fit = (limit / (3 * shards as u64)) / 65536 * 65536;
            if fit < MIN_IO_MEMORY_BYTES {
                return Err(e.into());
            }
            runtime.io_memory_bytes = fit as usize;
            format!(
                "{limit} bytes and cannot be raised (no CAP_SYS_RESOURCE): io_memory sized down to {fit} bytes per shard to fit; \
                 raise the limit (ulimit -l) to use {} bytes",
                config.io_memory_bytes
            )
        }
    };
    info!(
        shards,
        io_memory_bytes = runtime.io_memory_bytes,
        listen = %config.listen,
        data_dir = %config.data_dir.display(),
        "starting keel {}; RLIMIT_MEMLOCK: {memlock}",
        env!("CARGO_PKG_VERSION")
    );
    let nofile = raise_nofile_limit();
    info!(
        open_files_limit = nofile,
        "RLIMIT_NOFILE (each partition keeps its active segment open; closed segments go through a per-shard cache of log.closed.segment.files.shard.max)"
    );
    crate::ops::host_checks::log_findings(&config.data_dir, shards, runtime.io_memory_bytes);
    for l in &config.listeners {
        wait_for_port(l.addr, "listeners")?;
    }
    // Each shard's own inter-broker port: a follower connects to the port of the shard that
    // owns its partitions here, so its fetches take no mesh hop.
    let steering = bind_shard_ports(
        config.inter_broker_bind.ip(),
        shards,
        config.inter_broker_shard_port_base,
    )?;
    config.inter_broker_shard_ports = steering.iter().map(|(_, port)| *port).collect();
    let steering = Arc::new(steering);
    if let Some(admin) = config.admin {
        wait_for_port(admin, "admin")?;
    }
    install_signal_handlers().context("installing signal handlers")?;
    let config = Arc::new(config);
    // Client quotas hold per broker: one set of rates for every shard.
    let quota_sensors = Arc::new(crate::quota::Sensors::new(
        config.quota_window_num,
        config.quota_window_size_seconds.saturating_mul(1000),
    ));
    launch(&runtime, move |boot| {
        let fd = steering.get(boot.shard_id).map(|(fd, _)| *fd);
        run_shard(boot, config.clone(), fd, quota_sensors.clone())
    })?;
    info!("keel stopped");
    Ok(())
}

/// On shard 0: once SIGINT or SIGTERM arrives, the controlled shutdown (unless
/// `controlled.shutdown.enable=false`) while every shard still serves, then every shard stops.
async fn drive_shutdown(shard: Rc<BrokerShard>) {
    wait_for_shutdown_signal().await;
    if shard.config.controlled_shutdown_enable {
        crate::controller::controlled_shutdown(&shard).await;
    }
    keel_shard::request_stop();
    // Every shard fires its shutdown event now, not at its ticker's next look at the flag.
    for target in 0..shard.mesh.shard_count() {
        if target == shard.id {
            shard.shutdown.fire();
        } else if let Err(e) = shard
            .mesh
            .notify(target, |s: Rc<BrokerShard>| s.shutdown.fire())
            .await
        {
            warn!(target, error = %e, "could not tell a shard to stop; its ticker will");
        }
    }
}

/// Until SIGINT or SIGTERM: reads the signal thread's doorbell with io_uring, so an idle
/// broker sleeps instead of polling; without a doorbell (no signal handlers installed) or
/// once it fails, polls the flag every 20 ms.
async fn wait_for_shutdown_signal() {
    if let Some(bell) = keel_shard::take_shutdown_doorbell() {
        // SAFETY: the fd is owned by `bell`, which we give up here.
        let mut stream = unsafe { glommio::net::UnixStream::from_raw_fd(bell.into_raw_fd()) };
        let mut byte = [0u8; 1];
        while !keel_shard::shutdown_requested() {
            match futures_lite::AsyncReadExt::read(&mut stream, &mut byte).await {
                Ok(n) if n > 0 => {}
                Ok(_) => break,
                Err(e) => {
                    warn!(error = %e, "reading the signal doorbell failed; polling instead");
                    break;
                }
            }
        }
    }
    while !keel_shard::shutdown_requested() {
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
}

/// Logs a shard closes at once when it stops.
const CLOSE_CONCURRENCY: usize = 64;

/// Shards that have drained their connections during shutdown.
static DRAINED: AtomicUsize = AtomicUsize::new(0);
/// Shards that have closed (synced) every log during shutdown.
static CLOSED: AtomicUsize = AtomicUsize::new(0);

/// The body of one shard's executor.
/// Binds one listening socket per shard on `ip`; returns their fds (handed to the shards) and
/// ports (registered with the controller). With `base` > 0 shard N takes `base + N`; else each
/// takes a free port below Linux's ephemeral range (32768 and up by default), so that it never
/// takes a port the kernel hands to an outgoing connection or to a `bind(0)` that another
/// program (a test harness choosing free ports) is about to use.
fn bind_shard_ports(ip: std::net::IpAddr, shards: usize, base: u16) -> Result<Vec<(RawFd, u16)>> {
    const LOW: u32 = 10_000;
    const HIGH: u32 = 32_767;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut seed = (std::process::id() ^ now) | 1;
    let mut out = Vec::with_capacity(shards);
    for shard in 0..shards {
        let listener = if base > 0 {
            let port = base
                .checked_add(shard as u16)
                .context("inter.broker.shard.port.base + shards is past port 65535")?;
            std::net::TcpListener::bind((ip, port))
                .with_context(|| format!("binding shard {shard}'s inter-broker port {ip}:{port}"))?
        } else {
            let mut bound = None;
            for _ in 0..1000 {
                // xorshift: a spread of candidates, different per process.
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let port = (LOW + seed % (HIGH - LOW)) as u16;
                if let Ok(l) = std::net::TcpListener::bind((ip, port)) {
                    bound = Some(l);
                    break;
                }
            }
            bound.with_context(|| format!("no free inter-broker port for shard {shard} on {ip}"))?
        };
        let port = listener.local_addr()?.port();
        out.push((listener.into_raw_fd(), port));
    }
    Ok(out)
}

/// Accepts connections on `listener` until shutdown; each is served on this shard.
async fn accept_loop(
    shard: Rc<BrokerShard>,
    listener: glommio::net::TcpListener,
    name: Rc<str>,
    active: Rc<Cell<usize>>,
) {
    loop {
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            shard.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok(stream)) => {
                let shard = shard.clone();
                let active = active.clone();
                let name = name.clone();
                active.set(active.get() + 1);
                glommio::spawn_local(async move {
                    crate::frontend::conn::serve(shard, stream, name).await;
                    active.set(active.get() - 1);
                })
                .detach();
                // With a backlog, accept completes at once: without this, one pass would take
                // every queued connection (500 in a burst) past the queue's time slice.
                glommio::yield_if_needed().await;
            }
            Some(Err(e)) => {
                warn!(shard = shard.id, error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub async fn run_shard(
    boot: ShardBoot<BrokerShard>,
    config: Arc<BrokerConfig>,
    steering_fd: Option<RawFd>,
    quota_sensors: Arc<crate::quota::Sensors>,
) {
    let ShardBoot {
        shard_id,
        shard_count,
        mesh,
        receivers,
    } = boot;
    let (controller, doorbell) = if shard_id == 0 {
        match crate::controller::start(&config, shard_count) {
            Ok((c, d)) => (Some(c), Some(d)),
            Err(e) => {
                error!(error = %format!("{e:#}"), "metadata node failed to start; shutting down");
                std::process::exit(1);
            }
        }
    } else {
        (None, None)
    };
    let shard = BrokerShard::new(
        shard_id,
        shard_count,
        mesh.clone(),
        config.clone(),
        controller,
        Rc::new(keel_vocab::SystemClock),
        vec![
            (
                keel_coordinator::OFFSETS_TOPIC,
                crate::group::start_load,
                crate::group::unload,
            ),
            (
                keel_coordinator::TRANSACTION_STATE_TOPIC,
                crate::txn::coordinator::start_load,
                crate::txn::coordinator::unload,
            ),
        ],
        quota_sensors,
    );
    // Storage's per-shard limits: the tail caches' memory, the closed segments' open files.
    keel_storage::tail_budget::set_budget(config.tail_cache_shard_bytes);
    keel_storage::file_cache::set_capacity(config.closed_segment_files_shard_max);
    keel_storage::write_slots::set_max(config.write_inflight_shard_max);
    mesh.serve(receivers, shard.clone(), 4096);
    glommio::spawn_local(timers::ticker(shard.clone())).detach();
    glommio::spawn_local(crate::replication::run_periodic(shard.clone())).detach();
    glommio::spawn_local(crate::replication::offline::report_offline_replicas(
        shard.clone(),
    ))
    .detach();
    // Retention deletes files in the background: a task queue with a tenth of the default
    // shares, so produce and fetch on this shard go first.
    let background = glommio::executor().create_task_queue(
        glommio::Shares::Static(100),
        glommio::Latency::NotImportant,
        "retention",
    );
    shard.counters.name_queue(background, "retention");
    // Authentication's CPU work (TLS handshakes, PLAIN's PBKDF2, and the SCRAM logins of this
    // shard's replica fetchers and marker clients) yields to produce and fetch the same way,
    // paced so that the queue's runs stay short (`frontend::auth_queue`).
    let auth = glommio::executor().create_task_queue(
        glommio::Shares::Static(100),
        glommio::Latency::NotImportant,
        "auth",
    );
    shard.counters.name_queue(auth, "auth");
    shard.set_auth_queue(auth);
    keel_client::aio::stream::set_login_queue(Some(auth));
    match glommio::spawn_local_into(timers::compaction(shard.clone()), background) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => error!(shard = shard_id, error = %e, "cannot start compaction"),
    }
    match glommio::spawn_local_into(timers::retention(shard.clone()), background) {
        Ok(task) => {
            task.detach();
        }
        Err(e) => error!(shard = shard_id, error = %e, "cannot start retention"),
    }

    if let Some(doorbell) = doorbell {
        glommio::spawn_local(drive_shutdown(shard.clone())).detach();
        if let Err(e) = crate::controller::bootstrap(&shard, doorbell).await {
            error!(error = %e, "metadata bootstrap failed; shutting down");
            std::process::exit(1);
        }
        if !config.add_scram.is_empty() {
            glommio::spawn_local(crate::controller::security::add_bootstrap_users(
                shard.clone(),
            ))
            .detach();
        }
        if let Some(addr) = config.admin {
            crate::ops::admin::start(shard.clone(), addr);
        }
        glommio::spawn_local(crate::controller::warn_short_internal_topics(
            shard.clone(),
            Duration::from_secs(300),
        ))
        .detach();
    }
    futures_lite::future::or(shard.ready.wait(), shard.shutdown.wait()).await;

    // Each socket with the name of its listener: a connection's Metadata answers with every
    // broker's endpoint of that listener.
    let mut listeners = Vec::new();
    for l in &config.listeners {
        match keel_shard::listen_reuseport(l.addr, 1024) {
            Ok(socket) => listeners.push((socket, Rc::<str>::from(l.name.as_str()))),
            Err(e) => {
                error!(shard = shard_id, listener = %l.name, addr = %l.addr, error = %e, "cannot listen");
                std::process::exit(1);
            }
        }
    }
    if let Some(fd) = steering_fd {
        // SAFETY: `fd` is a bound, listening TCP socket that `bind_shard_ports` made for this
        // shard alone; ownership moves to glommio here, once.
        let socket = unsafe { glommio::net::TcpListener::from_raw_fd(fd) };
        listeners.push((socket, Rc::from(config.inter_broker_listener_name.as_str())));
    }
    info!(shard = shard_id, listen = %config.listen, inter_broker_port = ?config.inter_broker_shard_ports.get(shard_id), partitions = shard.partitions_owned(), "shard serving");
    let active = Rc::new(Cell::new(0usize));
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|(l, name)| glommio::spawn_local(accept_loop(shard.clone(), l, name, active.clone())))
        .collect();
    for l in loops {
        l.await;
    }
    info!(
        shard = shard_id,
        connections = active.get(),
        "shutting down: finishing in-flight requests"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while active.get() > 0 && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    DRAINED.fetch_add(1, Ordering::AcqRel);
    while DRAINED.load(Ordering::Acquire) < shard_count && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    // Each close syncs the segment and writes its indexes, snapshot and checkpoint: closed
    // a batch at a time, their syncs overlap instead of adding up (hundreds of partitions
    // took seconds one by one).
    let mut all_closed = true;
    let closing_started = Instant::now();
    let parts = shard.all_partitions();
    for batch in parts.chunks(CLOSE_CONCURRENCY) {
        let closes = batch.iter().cloned().map(|part| async move {
            let closed = part.log.close().await;
            (part, closed)
        });
        for (part, closed) in crate::coordination::parking::join_all(closes.collect()).await {
            if let Err(e) = closed {
                all_closed = false;
                error!(shard = shard_id, topic = %part.topic, partition = part.index, error = %e, "closing log failed")
            }
        }
    }
    info!(
        shard = shard_id,
        partitions = parts.len(),
        elapsed_ms = closing_started.elapsed().as_millis() as u64,
        "logs closed"
    );
    if all_closed {
        CLOSED.fetch_add(1, Ordering::AcqRel);
    }
    if let Some(c) = &shard.controller {
        // Every shard's logs are closed (synced) before the stop counts as clean.
        let deadline = Instant::now() + Duration::from_secs(10);
        while CLOSED.load(Ordering::Acquire) < shard_count && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
        if CLOSED.load(Ordering::Acquire) >= shard_count {
            crate::controller::record_clean_shutdown(&shard);
        }
        c.handle.shutdown();
    }
    info!(shard = shard_id, "shard stopped; logs synced");
}
