//! `keel-bench`: drive any Kafka-compatible broker with a workload and report honest
//! latency and throughput; compare several targets side by side; probe the machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use keel_bench::floor::{self, FloorPlan};
use keel_bench::result::{CompareResult, FloorResult, ProbeResult, RunResult};
use keel_bench::run::{run, RunOptions};
use keel_bench::security::{SecurityArgs, TargetSecurity};
use keel_bench::setups::{self, SetupOptions};
use keel_bench::workload::Workload;
use keel_bench::{cpu, probe, report};

const USAGE: &str = "\
keel-bench: latency and throughput of any Kafka-compatible broker

usage:
  keel-bench run --bootstrap HOST:PORT [--workload FILE] [options]
  keel-bench compare NAME=HOST:PORT[@WORKLOAD] NAME=HOST:PORT[@WORKLOAD] ... [--workload FILE] [--rounds N] [options]
  keel-bench probe [--dir DIR] [--quick] [--out DIR]
                   [--floor [--message-size B] [--batch-bytes B] [--rate N]]
  keel-bench setups --bootstrap HOST:PORT (--metrics HOST:PORT | --shards N)
                   [--connections N] [--concurrency N] [--threads N] [--full-handshakes]
                   [security options]

options:
  --workload FILE        workload TOML (see bench/workloads/); default: built-in defaults
                         (compare: a target written NAME=HOST:PORT@FILE runs FILE instead,
                         so one compare can set workloads side by side on one broker)
  --set KEY=VALUE        override a workload field (repeatable), e.g. --set message_size=100
  --partitions N         partitions per topic (same as --set partitions_per_topic=N)
  --rate N               total records/s over all producers, 0 = as fast as possible
  --duration S           measured seconds;  --warmup S  warm-up seconds
  --threads N            executor threads for the tool's producers and consumers (default 1)
  --metrics HOST:PORT    Keel admin address: per-shard profile and the broker's CPU from
                         /metrics (run); compare takes NAME=HOST:PORT
  --target-pid PID       the target runs on this machine as process PID: its CPU (user,
                         system) from /proc/PID/stat, for a broker without Keel's /metrics
                         (with --metrics too, the pid gives the process CPU); compare takes
                         NAME=PID (repeatable)
  --message-size B       same as --set message_size=B;  --batch-bytes B  same as
                         --set batch_size=B
  --verify               check every acknowledged message was consumed once, in order, at
                         the partition and offset it was acknowledged at
  --probe-dir DIR        probe this directory's disk first (full probe) and report ratios to it;
                         without it a quick probe of the temp directory runs. The probe
                         includes the CPU floor of the run's workload: a one-core glommio
                         server receiving the run's produce-sized frames, O_DIRECT append,
                         group-commit fdatasync, ack, and sending them to a reader; reports
                         give the target's CPU per GB moved as a ratio to it
  --quick-probe          a shorter probe (floor: 256 MB, else 1 GB);
                         --no-probe  no probe, no floor, no ratios
  --out DIR              where result.json and report.html go (default ./keel-bench-results/<time>)
  --name NAME            the target's name in reports (run)
  --quiet                no live line
  --floor                (probe) also measure the CPU floor of frames of --batch-bytes
                         (default 131072) in whole records of --message-size (default 1024)
                         at --rate records/s (default 0: as fast as the acks allow)

security (Kafka's client settings; the report names the one used):
  --security-protocol P  PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL, for addresses
                         without their own: an address may be written P://HOST:PORT, so a
                         compare can set a broker's listeners side by side
  --ssl-ca FILE          PEM CA certificates that sign the broker's certificate (TLS needs it)
  --ssl-cert FILE --ssl-key FILE
                         a client certificate chain and its unencrypted key, PEM (mTLS)
  --sasl-mechanism M     PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default)
  --sasl-username U      the SASL user
  --sasl-password-env V  the variable holding the password (never on the command line)

setups (connection setups per second: TCP connect, TLS handshake, SASL login, ApiVersions,
close; the rate per shard of the target):
  --connections N        setups to make, 1..=20000 (default 1000)
  --concurrency N        setups in flight at once (default 16)
  --shards N             the target's shard count; without it, the shards in its --metrics
  --full-handshakes      no TLS session resumption: every setup a full handshake
";

#[derive(Default)]
struct Common {
    workload: Option<PathBuf>,
    sets: Vec<(String, String)>,
    threads: usize,
    metrics: Vec<String>,
    /// `--target-pid`: PID (run) or NAME=PID (compare).
    target_pids: Vec<String>,
    floor: bool,
    verify: bool,
    probe_dir: Option<PathBuf>,
    quick_probe: bool,
    no_probe: bool,
    out: Option<PathBuf>,
    name: Option<String>,
    quiet: bool,
    rounds: u32,
    bootstrap: Option<String>,
    /// name, address, and the target's own workload file (NAME=HOST:PORT@FILE).
    targets: Vec<(String, String, Option<PathBuf>)>,
    dir: Option<PathBuf>,
    security: SecurityArgs,
    /// `setups`: how many, how many at once, the target's shards.
    connections: u64,
    concurrency: usize,
    shards: Option<u32>,
    full_handshakes: bool,
}

fn parse(args: &[String], positional_targets: bool) -> Result<Common> {
    let mut c = Common {
        threads: 1,
        rounds: 3,
        connections: 1_000,
        concurrency: 16,
        ..Default::default()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |flag: &str| {
            it.next()
                .cloned()
                .with_context(|| format!("{flag} needs a value"))
        };
        if c.security.parse_flag(a, || val(a))? {
            continue;
        }
        match a.as_str() {
            "--workload" => c.workload = Some(val("--workload")?.into()),
            "--set" => {
                let kv = val("--set")?;
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("--set needs KEY=VALUE, got {kv:?}"))?;
                c.sets.push((k.trim().into(), v.trim().into()));
            }
            "--partitions" => c
                .sets
                .push(("partitions_per_topic".into(), val("--partitions")?)),
            "--rate" => c.sets.push(("producer_rate".into(), val("--rate")?)),
            "--duration" => c.sets.push(("duration_s".into(), val("--duration")?)),
            "--warmup" => c.sets.push(("warmup_s".into(), val("--warmup")?)),
            "--threads" => c.threads = val("--threads")?.parse().context("--threads")?,
            "--metrics" => c.metrics.push(val("--metrics")?),
            "--target-pid" => c.target_pids.push(val("--target-pid")?),
            "--message-size" => c.sets.push(("message_size".into(), val("--message-size")?)),
            "--batch-bytes" => c.sets.push(("batch_size".into(), val("--batch-bytes")?)),
            "--floor" => c.floor = true,
            "--verify" => c.verify = true,
            "--probe-dir" => c.probe_dir = Some(val("--probe-dir")?.into()),
            "--quick-probe" => c.quick_probe = true,
            "--no-probe" => c.no_probe = true,
            "--out" => c.out = Some(val("--out")?.into()),
            "--name" => c.name = Some(val("--name")?),
            "--quiet" => c.quiet = true,
            "--rounds" => c.rounds = val("--rounds")?.parse().context("--rounds")?,
            "--bootstrap" => c.bootstrap = Some(val("--bootstrap")?),
            "--dir" => c.dir = Some(val("--dir")?.into()),
            "--connections" => {
                c.connections = val("--connections")?.parse().context("--connections")?
            }
            "--concurrency" => {
                c.concurrency = val("--concurrency")?.parse().context("--concurrency")?
            }
            "--shards" => c.shards = Some(val("--shards")?.parse().context("--shards")?),
            "--full-handshakes" => c.full_handshakes = true,
            "--quick" => c.quick_probe = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other if positional_targets && !other.starts_with("--") => {
                let (n, a) = other
                    .split_once('=')
                    .with_context(|| format!("a target is NAME=HOST:PORT, got {other:?}"))?;
                let (a, file) = match a.split_once('@') {
                    Some((a, f)) => (a, Some(PathBuf::from(f))),
                    None => (a, None),
                };
                c.targets.push((n.into(), a.into(), file));
            }
            other => bail!("unknown argument {other:?}; see keel-bench --help"),
        }
    }
    Ok(c)
}

fn workload(c: &Common) -> Result<Workload> {
    workload_from(c, c.workload.as_deref())
}

/// The workload in `file` (built-in defaults without one), with the `--set` overrides.
fn workload_from(c: &Common, file: Option<&Path>) -> Result<Workload> {
    let mut w = match file {
        Some(p) => Workload::from_file(p)?,
        None => Workload::default(),
    };
    for (k, v) in &c.sets {
        w.set(k, v).with_context(|| format!("--set {k}={v}"))?;
    }
    w.validate()?;
    Ok(w)
}

fn out_dir(c: &Common) -> Result<PathBuf> {
    let dir = match &c.out {
        Some(d) => d.clone(),
        None => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs();
            PathBuf::from("keel-bench-results").join(secs.to_string())
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The probe's directory, and whether the probe is quick: `--probe-dir` (full unless
/// `--quick-probe`), else the temp directory, quick.
fn probe_where(c: &Common) -> (PathBuf, bool) {
    match &c.probe_dir {
        Some(d) => (d.clone(), c.quick_probe),
        None => (std::env::temp_dir(), true),
    }
}

/// Every report carries the machine's own limits, so its figures read as ratios to them:
/// a full probe of `--probe-dir`, or a quick one of the temp directory by default.
fn maybe_probe(c: &Common) -> Result<Option<ProbeResult>> {
    if c.no_probe {
        return Ok(None);
    }
    let (dir, quick) = probe_where(c);
    if !c.quiet {
        let kind = if quick { "quick" } else { "full" };
        eprintln!(
            "probing {} ({kind}: disk, fdatasync, loopback) ...",
            dir.display()
        );
    }
    Ok(Some(probe::run(&dir, quick)?))
}

/// Floors measured so far, one per shape: a compare measures each workload's once.
type Floors = Vec<(FloorPlan, Option<FloorResult>)>;

/// `probe` with the CPU floor of workload `w` (None without a probe). A floor that fails is
/// reported and left out: the run goes on without its ratios.
fn probe_with_floor(
    c: &Common,
    probe: &Option<ProbeResult>,
    w: &Workload,
    floors: &mut Floors,
) -> Option<ProbeResult> {
    let mut p = probe.clone()?;
    let (dir, quick) = probe_where(c);
    let plan = FloorPlan::for_workload(w, quick);
    if let Some((_, f)) = floors.iter().find(|(known, _)| *known == plan) {
        p.floor = f.clone();
        return Some(p);
    }
    if !c.quiet {
        eprintln!(
            "measuring the CPU floor in {} ({} B frames, {} bytes, {}) ...",
            dir.display(),
            plan.frame_bytes,
            plan.total_bytes,
            report::floor_rate(plan.rate_bytes_per_s)
        );
    }
    let f = match floor::run(&dir, &plan) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("keel-bench: the CPU floor failed; the report goes without it: {e:#}");
            None
        }
    };
    floors.push((plan, f.clone()));
    p.floor = f;
    Some(p)
}

/// `--target-pid` of a run: one PID, checked now (a typo fails before any load runs).
fn run_target_pid(c: &Common) -> Result<Option<u32>> {
    match c.target_pids.as_slice() {
        [] => Ok(None),
        [one] => parse_pid(one).map(Some),
        _ => bail!("run takes one --target-pid"),
    }
}

/// `--target-pid NAME=PID` of a compare, for target `name`.
fn compare_target_pid(c: &Common, name: &str) -> Result<Option<u32>> {
    for given in &c.target_pids {
        let (n, pid) = given
            .split_once('=')
            .with_context(|| format!("compare takes --target-pid NAME=PID, got {given:?}"))?;
        if n == name {
            return parse_pid(pid).map(Some);
        }
    }
    Ok(None)
}

fn parse_pid(text: &str) -> Result<u32> {
    let pid: u32 = text
        .trim()
        .parse()
        .with_context(|| format!("--target-pid {text:?}: not a process id"))?;
    cpu::read_pid(pid).with_context(|| format!("--target-pid {pid}"))?;
    Ok(pid)
}

/// A run's options; `address` may name its security protocol (`SSL://HOST:PORT`).
fn options(
    c: &Common,
    target: &str,
    address: &str,
    metrics: Option<String>,
    target_pid: Option<u32>,
    w: &Workload,
    probe: Option<ProbeResult>,
) -> Result<RunOptions> {
    let (bootstrap, TargetSecurity { security, label }) = c.security.for_address(address)?;
    Ok(RunOptions {
        target: target.to_string(),
        bootstrap,
        security,
        security_label: label,
        workload: w.clone(),
        threads: c.threads,
        metrics,
        target_pid,
        verify: c.verify,
        probe,
        live: !c.quiet,
        live_every: Duration::from_secs(2),
    })
}

fn cmd_run(args: &[String]) -> Result<i32> {
    let c = parse(args, false)?;
    let bootstrap = c
        .bootstrap
        .clone()
        .context("run needs --bootstrap HOST:PORT")?;
    let w = workload(&c)?;
    let target_pid = run_target_pid(&c)?;
    // The security settings are checked (files read, password found) before any probe.
    c.security.for_address(&bootstrap)?;
    let out = out_dir(&c)?;
    let probe = maybe_probe(&c)?;
    let probe = probe_with_floor(&c, &probe, &w, &mut Floors::new());
    let name = c.name.clone().unwrap_or_else(|| "target".into());
    let r: RunResult = run(&options(
        &c,
        &name,
        &bootstrap,
        c.metrics.first().cloned(),
        target_pid,
        &w,
        probe,
    )?)?;
    println!("{}", report::run_table(&r));
    report::write_json(&out.join("result.json"), &r)?;
    report::write_html(&out.join("report.html"), &report::html_run(&r))?;
    println!(
        "wrote {}/result.json and {}/report.html",
        out.display(),
        out.display()
    );
    Ok(exit_code(std::slice::from_ref(&r)))
}

/// Non-zero when --verify found problems or the run had errors.
fn exit_code(runs: &[RunResult]) -> i32 {
    let bad_verify = runs.iter().any(|r| {
        r.verify
            .as_ref()
            .is_some_and(|v| v.lost + v.duplicated + v.reordered + v.ledger.errors() > 0)
    });
    if bad_verify {
        3
    } else {
        0
    }
}

fn cmd_compare(args: &[String]) -> Result<i32> {
    let c = parse(args, true)?;
    if c.targets.len() < 2 {
        bail!("compare needs at least two targets: NAME=HOST:PORT NAME=HOST:PORT");
    }
    let w = workload(&c)?;
    let workloads = c
        .targets
        .iter()
        .map(|(_, _, file)| match file {
            Some(f) => workload_from(&c, Some(f)),
            None => Ok(w.clone()),
        })
        .collect::<Result<Vec<Workload>>>()?;
    for given in &c.target_pids {
        let name = given.split_once('=').map_or("", |(n, _)| n);
        if !c.targets.iter().any(|(n, _, _)| n == name) {
            bail!("--target-pid {given:?}: compare takes NAME=PID for a target NAME");
        }
    }
    let target_pids = c
        .targets
        .iter()
        .map(|(name, _, _)| compare_target_pid(&c, name))
        .collect::<Result<Vec<Option<u32>>>>()?;
    for (name, addr, _) in &c.targets {
        c.security
            .for_address(addr)
            .with_context(|| format!("target {name}"))?;
    }
    let out = out_dir(&c)?;
    let probe = maybe_probe(&c)?;
    let mut floors = Floors::new();
    let probes: Vec<Option<ProbeResult>> = workloads
        .iter()
        .map(|w| probe_with_floor(&c, &probe, w, &mut floors))
        .collect();
    // The header's probe carries the floor of the compare's own workload.
    let probe = probe_with_floor(&c, &probe, &w, &mut floors);
    let metrics_for = |name: &str| -> Option<String> {
        c.metrics.iter().find_map(|m| {
            m.split_once('=')
                .filter(|(n, _)| *n == name)
                .map(|(_, a)| a.to_string())
        })
    };
    let mut runs = Vec::new();
    for round in 0..c.rounds.max(1) {
        // Rotate the order each round so drift and warm caches hit every target alike.
        let n = c.targets.len();
        for i in 0..n {
            let k = (i + round as usize) % n;
            let (name, addr, _) = &c.targets[k];
            let w = &workloads[k];
            eprintln!(
                "== round {}/{}: {name} ({addr})",
                round + 1,
                c.rounds.max(1)
            );
            let r = run(&options(
                &c,
                name,
                addr,
                metrics_for(name),
                target_pids[k],
                w,
                probes[k].clone(),
            )?)?;
            eprintln!(
                "   {name}: {:.0} rec/s, {:.1} MB/s, publish p99 {:.2} ms, errors {}",
                r.produce_records_per_s, r.produce_mb_per_s, r.publish_latency.p99_ms, r.errors
            );
            runs.push(r);
        }
    }
    let result = CompareResult {
        workload: w.summary(),
        rounds: c.rounds.max(1),
        runs,
        probe,
        machine_cores: std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    };
    println!("{}", report::compare_table(&result));
    report::write_json(&out.join("compare.json"), &result)?;
    report::write_html(&out.join("report.html"), &report::html_compare(&result))?;
    println!(
        "wrote {}/compare.json and {}/report.html",
        out.display(),
        out.display()
    );
    Ok(exit_code(&result.runs))
}

fn cmd_setups(args: &[String]) -> Result<i32> {
    let c = parse(args, false)?;
    let address = c
        .bootstrap
        .clone()
        .context("setups needs --bootstrap HOST:PORT")?;
    let (bootstrap, TargetSecurity { security, label }) = c.security.for_address(&address)?;
    let opts = SetupOptions {
        target: c.name.clone().unwrap_or_else(|| "target".into()),
        bootstrap,
        security,
        security_label: label,
        full_handshakes: c.full_handshakes,
        setups: c.connections,
        concurrency: c.concurrency,
        threads: c.threads,
        metrics: c.metrics.first().cloned(),
        shards: c.shards,
        target_pid: run_target_pid(&c)?,
    };
    let out = out_dir(&c)?;
    let r = setups::run(&opts)?;
    println!("{}", setups::table(&r));
    report::write_json(&out.join("setups.json"), &r)?;
    println!("wrote {}/setups.json", out.display());
    Ok(if r.failures > 0 { 1 } else { 0 })
}

fn cmd_probe(args: &[String]) -> Result<i32> {
    let c = parse(args, false)?;
    let dir = c.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let mut p = probe::run(Path::new(&dir), c.quick_probe)?;
    println!(
        "probe of {} ({} cores)\n  sequential O_DIRECT write  {:>10.1} MB/s\n  4 KiB write+fdatasync      p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms\n  loopback TCP               {:>10.1} MB/s\n  loopback round trip        p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms",
        p.dir,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        p.disk_write_mb_per_s,
        p.fdatasync.p50_ms,
        p.fdatasync.p99_ms,
        p.fdatasync.p999_ms,
        p.fdatasync.max_ms,
        p.loopback_mb_per_s,
        p.loopback_rtt.p50_ms,
        p.loopback_rtt.p99_ms,
        p.loopback_rtt.p999_ms,
    );
    if c.floor {
        let plan = FloorPlan::for_workload(&floor_workload(&c)?, c.quick_probe);
        let f = floor::run(Path::new(&dir), &plan).context("CPU floor")?;
        for line in report::floor_lines(&f) {
            println!("{line}");
        }
        p.floor = Some(f);
    }
    if c.out.is_some() {
        let out = out_dir(&c)?;
        report::write_json(&out.join("probe.json"), &p)?;
    }
    Ok(0)
}

/// The shape `probe --floor` measures: the workload defaults with 128 KiB batches, then
/// --message-size, --batch-bytes, --rate (and any --set).
fn floor_workload(c: &Common) -> Result<Workload> {
    let mut w = Workload {
        batch_size: 131_072,
        ..Workload::default()
    };
    for (k, v) in &c.sets {
        w.set(k, v).with_context(|| format!("{k}={v}"))?;
    }
    w.validate()?;
    Ok(w)
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => cmd_run(&args[1..]),
        Some("compare") => cmd_compare(&args[1..]),
        Some("probe") => cmd_probe(&args[1..]),
        Some("setups") => cmd_setups(&args[1..]),
        Some("-h" | "--help") | None => {
            print!("{USAGE}");
            Ok(if args.is_empty() { 2 } else { 0 })
        }
        Some(other) => Err(anyhow::anyhow!(
            "unknown command {other:?}; see keel-bench --help"
        )),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("keel-bench: {e:#}");
            std::process::exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{compare_target_pid, exit_code, parse, run_target_pid};
    use keel_bench::result::{RunResult, VerifySummary};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn target_pids_are_checked_before_any_load() {
        let me = std::process::id().to_string();
        let run = |a: &[&str]| run_target_pid(&parse(&args(a), false).unwrap());
        assert_eq!(run(&[]).unwrap(), None);
        assert_eq!(
            run(&["--target-pid", &me]).unwrap(),
            Some(std::process::id())
        );
        assert!(run(&["--target-pid", "abc"]).is_err());
        assert!(
            run(&["--target-pid", &u32::MAX.to_string()]).is_err(),
            "no such process"
        );
        assert!(run(&["--target-pid", &me, "--target-pid", &me]).is_err());

        let both = format!("a={me}");
        let c = parse(
            &args(&["a=127.0.0.1:1", "b=127.0.0.1:2", "--target-pid", &both]),
            true,
        )
        .unwrap();
        assert_eq!(
            compare_target_pid(&c, "a").unwrap(),
            Some(std::process::id())
        );
        assert_eq!(compare_target_pid(&c, "b").unwrap(), None);
        let c = parse(&args(&["a=127.0.0.1:1", "--target-pid", &me]), true).unwrap();
        assert!(
            compare_target_pid(&c, "a").is_err(),
            "compare needs NAME=PID"
        );
    }

    #[test]
    fn shape_flags_set_the_workload() {
        let c = parse(
            &args(&[
                "--floor",
                "--message-size",
                "100",
                "--batch-bytes",
                "16384",
                "--rate",
                "7",
            ]),
            false,
        )
        .unwrap();
        assert!(c.floor);
        let w = super::floor_workload(&c).unwrap();
        assert_eq!(
            (w.message_size, w.batch_size, w.producer_rate),
            (100, 16_384, 7)
        );
        let d = super::floor_workload(&parse(&args(&["--floor"]), false).unwrap()).unwrap();
        assert_eq!(
            (d.message_size, d.batch_size, d.producer_rate),
            (1024, 131_072, 0)
        );
    }

    #[test]
    fn an_offset_error_fails_the_run() {
        let mut r = RunResult {
            verify: Some(VerifySummary::default()),
            ..Default::default()
        };
        assert_eq!(exit_code(std::slice::from_ref(&r)), 0);
        if let Some(v) = r.verify.as_mut() {
            v.ledger.gone = 1;
        }
        assert_eq!(exit_code(std::slice::from_ref(&r)), 3);
        // acks=1 losses are counted apart.
        if let Some(v) = r.verify.as_mut() {
            v.ledger.gone = 0;
            v.ledger.lost_acks_one = 4;
        }
        assert_eq!(exit_code(std::slice::from_ref(&r)), 0);
    }
}
