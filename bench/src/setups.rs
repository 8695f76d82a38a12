//! `keel-bench setups`: how many new connections a broker sets up per second, each the whole
//! way a client goes before its first real request: TCP connect, the TLS handshake (SSL,
//! SASL_SSL), SaslHandshake and the mechanism's exchange (SCRAM: client-first, client-final,
//! the broker's signature checked), then ApiVersions; then the connection closes.
//!
//! A bounded count of setups (`--connections`, at most [`SETUPS_MAX`]) runs with
//! `--concurrency` in flight over `--threads` executors; each setup is bounded by
//! [`SETUP_TIMEOUT`], and one that fails counts as a failure, not retried. The rate is given
//! per shard of the target: its shard count is read from its /metrics (`--metrics`: the shards
//! that export counters) or given with `--shards`. The target's CPU per setup comes from
//! `--target-pid` or /metrics, keel-bench's own from its process: SCRAM's PBKDF2 (the broker's
//! iteration count, 4096 by default) runs on the client, so on a machine the two share, the
//! tool's CPU can be what bounds the rate. Under TLS the client resumes sessions (rustls'
//! default, as Java's client does), so most handshakes skip the broker's signature;
//! `--full-handshakes` turns resumption off.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;
use glommio::{LocalExecutorBuilder, Placement};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use keel_client::aio::stream::{exchange, secure};
use keel_client::core::{decode_response, encode_request};
use keel_client::{ClientError, Security};

use crate::client::conn::IDENTITY;
use crate::cpu::{self, CpuTimes};
use crate::hist::LatencyHist;
use crate::result::{SetupResult, TargetCpu};
use crate::scrape::{self, Scrape};

/// The most setups one run makes (each leaves a socket in TIME_WAIT on the client).
pub const SETUPS_MAX: u64 = 20_000;
/// The most setups in flight.
pub const CONCURRENCY_MAX: usize = 1_024;
/// One setup's bound, connect to ApiVersions' answer.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// ApiVersions v3 (client software name and version): what every current client sends first.
const API_VERSIONS_VERSION: i16 = 3;
const IO_MEMORY: usize = 64 * 1024;

#[derive(Clone, Debug)]
pub struct SetupOptions {
    pub target: String,
    pub bootstrap: String,
    pub security: Security,
    pub security_label: String,
    /// TLS without session resumption: every setup a full handshake (the broker signs with
    /// its key each time). By default the client resumes, as rustls' and Java's clients do.
    pub full_handshakes: bool,
    pub setups: u64,
    pub concurrency: usize,
    pub threads: usize,
    /// Keel's admin address: the shard count, per-shard and process CPU.
    pub metrics: Option<String>,
    /// The shard count, when not read from /metrics.
    pub shards: Option<u32>,
    pub target_pid: Option<u32>,
}

/// What the setups share across executor threads.
struct Shared {
    next: AtomicU64,
    failures: AtomicU64,
    error_samples: Mutex<Vec<String>>,
}

/// Runs the setups and reports them.
pub fn run(opts: &SetupOptions) -> Result<SetupResult> {
    if !(1..=SETUPS_MAX).contains(&opts.setups) {
        bail!("--connections must be 1..={SETUPS_MAX}");
    }
    if !(1..=CONCURRENCY_MAX).contains(&opts.concurrency) {
        bail!("--concurrency must be 1..={CONCURRENCY_MAX}");
    }
    let threads = opts.threads.clamp(1, opts.concurrency);
    let mut security = opts.security.clone();
    if opts.full_handshakes {
        let tls = security
            .tls
            .as_ref()
            .ok_or_else(|| anyhow!("--full-handshakes needs TLS (SSL or SASL_SSL)"))?;
        let mut config = (**tls).clone();
        config.resumption = rustls::client::Resumption::disabled();
        security.tls = Some(Arc::new(config));
    }
    let before = Mark::now(opts)?;
    let shards = match (opts.shards, &before.scrape) {
        (Some(n), _) if n > 0 => (n, "--shards"),
        (Some(_), _) => bail!("--shards must be at least 1"),
        (None, Some(s)) if !s.shards.is_empty() => (s.shards.len() as u32, "/metrics"),
        (None, Some(_)) => {
            bail!("the target's /metrics exports no shard counters: give --shards N")
        }
        (None, None) => bail!("setups reports per shard: give --metrics HOST:PORT or --shards N"),
    };
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        failures: AtomicU64::new(0),
        error_samples: Mutex::new(Vec::new()),
    });
    let started = Instant::now();
    let mut handles = Vec::new();
    for i in 0..threads {
        // The in-flight setups, spread over the threads as evenly as they go.
        let tasks = opts.concurrency / threads + usize::from(i < opts.concurrency % threads);
        let (shared, addr, security, total) = (
            shared.clone(),
            opts.bootstrap.clone(),
            security.clone(),
            opts.setups,
        );
        let h = LocalExecutorBuilder::new(Placement::Unbound)
            .name(&format!("keel-bench-setups-{i}"))
            .io_memory(IO_MEMORY)
            .spawn(move || async move { thread_main(tasks, addr, security, total, shared).await })
            .map_err(|e| anyhow!("starting executor {i}: {e}"))?;
        handles.push(h);
    }
    let mut latency = LatencyHist::new();
    for h in handles {
        let hist = h
            .join()
            .map_err(|e| anyhow!("setup executor failed: {e}"))?;
        latency.merge(&hist);
    }
    let elapsed_s = started.elapsed().as_secs_f64().max(1e-9);
    let after = Mark::now(opts)?;
    let setups = latency.count();
    let failures = shared.failures.load(Ordering::Relaxed);
    let error_samples = shared
        .error_samples
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    if setups == 0 {
        bail!(
            "no setup succeeded ({failures} failed), e.g. {}",
            error_samples.first().map_or("-", String::as_str)
        );
    }
    let per_setup_ms = |cpu_s: f64| cpu_s * 1e3 / setups as f64;
    let target_cpu = target_cpu(opts.target_pid, &before, &after);
    let shard_cpu_s = match (&before.scrape, &after.scrape) {
        (Some(b), Some(a)) => {
            let shards = scrape::delta(&b.shards, &a.shards);
            let cpu: Option<Vec<f64>> = shards
                .iter()
                .map(|d| Some(d.cpu_user_s? + d.cpu_system_s?))
                .collect();
            cpu.map(|c| c.iter().sum::<f64>())
        }
        _ => None,
    };
    let tool_cpu_s = after.tool.since(&before.tool).total_s();
    let setups_per_s = setups as f64 / elapsed_s;
    let tls_note = match (&opts.security.tls, opts.full_handshakes) {
        (None, _) => "",
        (Some(_), false) => ", TLS sessions resumed",
        (Some(_), true) => ", full TLS handshakes",
    };
    Ok(SetupResult {
        target: opts.target.clone(),
        bootstrap: opts.bootstrap.clone(),
        security: format!("{}{tls_note}", opts.security_label),
        setups,
        failures,
        error_samples,
        concurrency: opts.concurrency as u32,
        tool_threads: threads as u32,
        elapsed_s,
        setups_per_s,
        shards: shards.0,
        shards_source: shards.1.to_string(),
        setups_per_s_per_shard: setups_per_s / f64::from(shards.0),
        setup_latency: latency.summary(),
        target_cpu_ms_per_setup: target_cpu.as_ref().map(|c| per_setup_ms(c.total_s)),
        target_cpu,
        shard_cpu_ms_per_setup: shard_cpu_s.map(per_setup_ms),
        tool_cpu_s,
        tool_cpu_ms_per_setup: per_setup_ms(tool_cpu_s),
        machine_cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    })
}

/// One executor's `tasks` setup loops; its setups' latencies.
async fn thread_main(
    tasks: usize,
    addr: String,
    security: Security,
    total: u64,
    shared: Arc<Shared>,
) -> LatencyHist {
    let latency = Rc::new(RefCell::new(LatencyHist::new()));
    let security = Rc::new(security);
    let addr: Rc<str> = addr.into();
    let mut loops = Vec::new();
    for _ in 0..tasks {
        let (latency, security, addr, shared) = (
            latency.clone(),
            security.clone(),
            addr.clone(),
            shared.clone(),
        );
        loops.push(glommio::spawn_local(async move {
            while shared.next.fetch_add(1, Ordering::Relaxed) < total {
                let started = Instant::now();
                match bounded(setup(&addr, &security)).await {
                    Ok(()) => latency.borrow_mut().record_duration(started.elapsed()),
                    Err(e) => {
                        shared.failures.fetch_add(1, Ordering::Relaxed);
                        let mut samples = shared
                            .error_samples
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        if samples.len() < 5 {
                            samples.push(e.to_string());
                        }
                    }
                }
            }
        }));
    }
    for l in loops {
        l.await;
    }
    let hist = latency.borrow().clone();
    hist
}

async fn bounded(
    work: impl std::future::Future<Output = Result<(), ClientError>>,
) -> Result<(), String> {
    futures_lite::future::or(async { work.await.map_err(|e| e.to_string()) }, async {
        glommio::timer::sleep(SETUP_TIMEOUT).await;
        Err(format!("no setup within {} s", SETUP_TIMEOUT.as_secs()))
    })
    .await
}

/// One setup: connect, secure (TLS, SASL login), ApiVersions, close.
async fn setup(addr: &str, security: &Security) -> Result<(), ClientError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| ClientError::Connect {
            addr: addr.to_string(),
            source: e.into(),
        })?;
    let mut stream = secure(tcp, addr, security, IDENTITY.client_id).await?;
    let req = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str(IDENTITY.software_name))
        .with_client_software_version(StrBytes::from_static_str(IDENTITY.software_version));
    let frame = encode_request(
        ApiKey::ApiVersions,
        API_VERSIONS_VERSION,
        1,
        IDENTITY.client_id,
        &req,
    )?;
    let body = exchange(&mut stream, addr, &frame, 1 << 20).await?;
    let answer: ApiVersionsResponse =
        decode_response(ApiKey::ApiVersions, API_VERSIONS_VERSION, 1, body)?;
    if answer.error_code != 0 {
        return Err(ClientError::ApiVersions {
            addr: addr.to_string(),
            error_code: keel_vocab::ErrorCode::from_code(answer.error_code),
        });
    }
    // TLS: close_notify, then the socket. The broker's side of it is not waited for.
    let _ = stream.close().await;
    Ok(())
}

/// CPU counters at one moment.
struct Mark {
    tool: CpuTimes,
    pid: Option<CpuTimes>,
    scrape: Option<Scrape>,
}

impl Mark {
    /// Reads the counters; a target that cannot be read fails the run (its figures are
    /// what was asked for).
    fn now(opts: &SetupOptions) -> Result<Mark> {
        let pid = opts.target_pid.map(cpu::read_pid).transpose()?;
        let scrape = opts.metrics.as_deref().map(scrape::fetch).transpose()?;
        Ok(Mark {
            tool: cpu::this_process(),
            pid,
            scrape,
        })
    }
}

fn target_cpu(pid: Option<u32>, before: &Mark, after: &Mark) -> Option<TargetCpu> {
    if let (Some(pid), Some(b), Some(a)) = (pid, before.pid, after.pid) {
        let d = a.since(&b);
        return Some(TargetCpu {
            source: format!("/proc/{pid}/stat"),
            total_s: d.total_s(),
            user_s: Some(d.user_s),
            system_s: Some(d.system_s),
        });
    }
    scrape::process_cpu(before.scrape.as_ref()?, after.scrape.as_ref()?)
}

/// The plain-text report.
pub fn table(r: &SetupResult) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3} ms"));
    let per_core = |v: Option<f64>| {
        v.filter(|v| *v > 0.0)
            .map_or("-".to_string(), |v| format!("{:.0}", 1e3 / v))
    };
    let l = &r.setup_latency;
    let mut out = vec![
        format!("keel-bench setups: {} ({})", r.target, r.bootstrap),
        format!("security: {}", r.security),
        format!(
            "{} setups ({} failed) in {:.2} s, {} in flight over {} thread(s), on a machine with {} cores",
            r.setups, r.failures, r.elapsed_s, r.concurrency, r.tool_threads, r.machine_cores
        ),
        format!(
            "setups/s: {:.1} in all, {:.1} per shard ({} shards, from {})",
            r.setups_per_s, r.setups_per_s_per_shard, r.shards, r.shards_source
        ),
        format!(
            "one setup (connect to ApiVersions answer): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            l.p50_ms, l.p99_ms, l.max_ms
        ),
        format!(
            "CPU per setup: target {} ({}), its shard threads {} (= {} setups per shard-core-second), keel-bench {:.3} ms",
            ms(r.target_cpu_ms_per_setup),
            r.target_cpu.as_ref().map_or("-", |c| c.source.as_str()),
            ms(r.shard_cpu_ms_per_setup),
            per_core(r.shard_cpu_ms_per_setup),
            r.tool_cpu_ms_per_setup
        ),
    ];
    for e in r.error_samples.iter().take(3) {
        out.push(format!("  e.g. {e}"));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_before_any_connection() {
        let opts = SetupOptions {
            target: "t".into(),
            bootstrap: "127.0.0.1:1".into(),
            security: Security::PLAINTEXT,
            security_label: "PLAINTEXT".into(),
            full_handshakes: false,
            setups: SETUPS_MAX + 1,
            concurrency: 1,
            threads: 1,
            metrics: None,
            shards: Some(1),
            target_pid: None,
        };
        assert!(run(&opts).is_err());
        let no_shards = SetupOptions {
            setups: 1,
            shards: None,
            ..opts.clone()
        };
        let e = run(&no_shards).unwrap_err();
        assert!(e.to_string().contains("--shards"), "{e}");
        // Nothing listens at port 1: every setup fails, and the run says why.
        let refused = SetupOptions { setups: 3, ..opts };
        let e = run(&refused).unwrap_err();
        assert!(e.to_string().contains("3 failed"), "{e}");
    }

    #[test]
    fn the_table_names_the_rate_per_shard_and_its_source() {
        let r = SetupResult {
            target: "keel".into(),
            bootstrap: "127.0.0.1:9094".into(),
            security: "SASL_SSL (SCRAM-SHA-512 as admin)".into(),
            setups: 1000,
            setups_per_s: 400.0,
            shards: 2,
            shards_source: "/metrics".into(),
            setups_per_s_per_shard: 200.0,
            shard_cpu_ms_per_setup: Some(2.0),
            tool_cpu_ms_per_setup: 3.0,
            ..Default::default()
        };
        let t = table(&r);
        assert!(
            t.contains("400.0 in all, 200.0 per shard (2 shards, from /metrics)"),
            "{t}"
        );
        assert!(
            t.contains("its shard threads 2.000 ms (= 500 setups per shard-core-second)"),
            "{t}"
        );
        assert!(t.contains("SASL_SSL (SCRAM-SHA-512 as admin)"), "{t}");
    }
}
