//! `keel profile`: a per-core profile of a live broker, taken from its admin endpoint.
//!
//! It reads `/metrics` and `/debug/stalls` at the start, once a second during the window, and
//! at the end, and reports the differences: per shard the reactor's busy share (and, when the
//! broker runs on this host, the kernel's CPU time of the shard thread from
//! `/proc/<tid>/stat`), time per glommio task queue, requests, bytes, hops, mean I/O queue
//! depth and stalls; per API and stage the latency percentiles of the requests finished in
//! the window (from the histograms' bucket differences, interpolated as Prometheus'
//! `histogram_quantile` does); the worst stalls of the window with their task queue and
//! Keel's frames of their backtrace. Written as `profile.json` and a self-contained
//! `profile.html`. Shard threads are named `keel-shard-N` (and their kernel thread ids
//! listed) so that `perf top -t TID` and `perf record --per-thread` line up with the report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::ops::metrics::BUCKETS_S;

const USAGE: &str = "\
keel profile: a per-core profile of a live broker (from its admin endpoint)

usage: keel profile [--duration 30s] [--admin HOST:PORT] [--out DIR]

  --duration D      how long to watch: 30s (default), 500ms, 2m
  --admin HOST:PORT the broker's admin endpoint (default 127.0.0.1:9644)
  --out DIR         where profile.json and profile.html go (default ./keel-profile-<unix time>)
";

struct Args {
    duration: Duration,
    admin: String,
    out: Option<PathBuf>,
}

fn parse_args(args: &[String]) -> Result<Option<Args>> {
    let mut a = Args {
        duration: Duration::from_secs(30),
        admin: "127.0.0.1:9644".into(),
        out: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag {
            "--help" | "-h" => {
                crate::ops::print_quietly(USAGE);
                return Ok(None);
            }
            "--duration" => a.duration = parse_duration(&value()?)?,
            "--admin" => a.admin = value()?,
            "--out" => a.out = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument {other:?}; see keel profile --help"),
        }
    }
    if a.duration.is_zero() || a.duration > Duration::from_secs(3600) {
        bail!("--duration must be between 1ms and 1h");
    }
    Ok(Some(a))
}

/// "30s", "500ms", "2m" or plain seconds.
fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (n, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let n: f64 = n
        .parse()
        .with_context(|| format!("bad duration {s:?} (try 30s, 500ms, 2m)"))?;
    if !n.is_finite() || n < 0.0 {
        bail!("bad duration {s:?}");
    }
    Ok(Duration::from_secs_f64(n * scale))
}

/// Runs `keel profile ARGS`; the process's exit code.
pub fn main(args: &[String]) -> i32 {
    match parse_args(args).and_then(|a| match a {
        Some(a) => run(a),
        None => Ok(()),
    }) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("keel profile: {e:#}");
            1
        }
    }
}

fn run(args: Args) -> Result<()> {
    let started_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("keel-profile-{}", started_ms / 1000)));
    let first = Sample::take(&args.admin)?;
    let stalls_before = max_seq(&http_get(&args.admin, "/debug/stalls")?);
    // The kernel's CPU time of each shard thread, when the broker runs on this host.
    let cpu_before: BTreeMap<String, f64> = first
        .label_values("keel_shard_info", "thread_id", &[])
        .into_iter()
        .filter_map(|tid| thread_cpu_seconds(&tid).map(|c| (tid, c)))
        .collect();
    eprintln!(
        "keel profile: watching {} ({} shards) for {:?}",
        args.admin,
        first.shards().len(),
        args.duration
    );
    let begin = Instant::now();
    let mut timeline = Vec::new();
    let mut prev = first.clone();
    while begin.elapsed() < args.duration {
        let left = args.duration.saturating_sub(begin.elapsed());
        std::thread::sleep(left.min(Duration::from_secs(1)));
        let now = Sample::take(&args.admin)?;
        timeline.push(json!({
            "t_s": round3(begin.elapsed().as_secs_f64()),
            "reactor_busy_pct": now.shards().iter().map(|s| round1(100.0 * now.shard_delta(&prev, "keel_shard_busy_seconds_total", s) / now.elapsed(&prev))).collect::<Vec<_>>(),
            "requests_per_s": round1(now.sum_delta(&prev, "keel_requests_total", &[]) / now.elapsed(&prev)),
        }));
        prev = now;
    }
    let last = prev;
    let stalls = http_get(&args.admin, "/debug/stalls")?;
    let mut report = build_report(
        &args.admin,
        started_ms,
        &first,
        &last,
        &stalls,
        stalls_before,
        timeline,
    );
    add_thread_cpu(&mut report, &cpu_before, last.elapsed(&first));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let json_path = out.join("profile.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", json_path.display()))?;
    let html_path = out.join("profile.html");
    std::fs::write(&html_path, render_html(&report))
        .with_context(|| format!("writing {}", html_path.display()))?;
    print_summary(&report);
    crate::ops::print_quietly(&format!(
        "wrote {} and {}\n",
        json_path.display(),
        html_path.display()
    ));
    Ok(())
}

// ---- reading the broker -----------------------------------------------------------------

/// A minimal HTTP/1.1 GET (the admin endpoint answers one request per connection).
fn http_get(addr: &str, path: &str) -> Result<String> {
    let sock = addr
        .to_socket_addrs()
        .with_context(|| format!("resolving {addr}"))?
        .next()
        .with_context(|| format!("no address for {addr}"))?;
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(5)).with_context(|| {
        format!("connecting to the admin endpoint {addr} (is keel running, with --admin?)")
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = Vec::new();
    s.take(256 << 20).read_to_end(&mut body)?;
    let text = String::from_utf8_lossy(&body).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("{addr}{path}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{addr}{path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// One series: labels in order of appearance.
type Labels = Vec<(String, String)>;

/// Parses Prometheus text into (name, labels, value); comments and malformed lines skipped.
fn parse_metrics(text: &str) -> Vec<(String, Labels, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some(p) => p,
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, parse_labels(rest.trim_end_matches('}'))),
            None => (series, Vec::new()),
        };
        out.push((name.to_string(), labels, value));
    }
    out
}

fn parse_labels(s: &str) -> Labels {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some((k, v)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = v.char_indices();
        let mut end = v.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((k.trim_start_matches(',').trim().to_string(), value));
        rest = &v[end..];
    }
    out
}

#[derive(Clone)]
struct Sample {
    at: Instant,
    series: Vec<(String, Labels, f64)>,
}

fn get<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

impl Sample {
    fn take(admin: &str) -> Result<Sample> {
        let text = http_get(admin, "/metrics")?;
        let at = Instant::now();
        let series = parse_metrics(&text);
        if !series
            .iter()
            .any(|(n, _, _)| n == "keel_shard_busy_seconds_total")
        {
            bail!("{admin}/metrics has no keel_shard_busy_seconds_total: not a keel broker?");
        }
        Ok(Sample { at, series })
    }

    fn elapsed(&self, earlier: &Sample) -> f64 {
        self.at.duration_since(earlier.at).as_secs_f64().max(1e-9)
    }

    /// Shard ids, from keel_shard_info.
    fn shards(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .series
            .iter()
            .filter(|(n, _, _)| n == "keel_shard_busy_seconds_total")
            .filter_map(|(_, l, _)| get(l, "shard").map(str::to_string))
            .collect();
        v.sort_by_key(|s| s.parse::<u64>().unwrap_or(u64::MAX));
        v
    }

    /// Sum of the series of `name` whose labels include every `want`.
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.series
            .iter()
            .filter(|(n, l, _)| n == name && want.iter().all(|(k, v)| get(l, k) == Some(v)))
            .map(|(_, _, v)| v)
            .sum()
    }

    fn sum_delta(&self, earlier: &Sample, name: &str, want: &[(&str, &str)]) -> f64 {
        (self.sum(name, want) - earlier.sum(name, want)).max(0.0)
    }

    fn shard_delta(&self, earlier: &Sample, name: &str, shard: &str) -> f64 {
        self.sum_delta(earlier, name, &[("shard", shard)])
    }

    /// Distinct values of label `key` among the series of `name` matching `want`.
    fn label_values(&self, name: &str, key: &str, want: &[(&str, &str)]) -> Vec<String> {
        let mut v: Vec<String> = self
            .series
            .iter()
            .filter(|(n, l, _)| n == name && want.iter().all(|(k, v)| get(l, k) == Some(v)))
            .filter_map(|(_, l, _)| get(l, key).map(str::to_string))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Bucket counts (non-cumulative, one per BUCKETS_S bound plus +Inf) of histogram
    /// `name` for the series matching `want`.
    fn buckets(&self, name: &str, want: &[(&str, &str)]) -> Vec<f64> {
        let bucket = format!("{name}_bucket");
        let mut cumulative: Vec<f64> = BUCKETS_S
            .iter()
            .map(|b| b.to_string())
            .chain(std::iter::once("+Inf".to_string()))
            .map(|le| {
                let mut w: Vec<(&str, &str)> = want.to_vec();
                w.push(("le", &le));
                self.sum(&bucket, &w)
            })
            .collect();
        for i in (1..cumulative.len()).rev() {
            cumulative[i] -= cumulative[i - 1];
        }
        cumulative
    }
}

/// The quantile `q` of bucket counts, interpolated linearly inside the bucket (as
/// Prometheus' histogram_quantile); a quantile in the +Inf bucket is the last bound.
fn quantile(buckets: &[f64], q: f64) -> Option<f64> {
    let total: f64 = buckets.iter().sum();
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut seen = 0.0;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0.0 && seen + n >= rank {
            let Some(&upper) = BUCKETS_S.get(i) else {
                return BUCKETS_S.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { BUCKETS_S[i - 1] };
            return Some(lower + (upper - lower) * ((rank - seen) / n));
        }
        seen += n;
    }
    BUCKETS_S.last().copied()
}

fn max_seq(stalls_json: &str) -> u64 {
    serde_json::from_str::<Value>(stalls_json)
        .ok()
        .and_then(|v| {
            v["stalls"].as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s["seq"].as_u64())
                    .max()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0)
}

/// utime + stime of a thread in seconds, when it is on this host. (`/proc/TID/stat` is the
/// whole process's; the thread's own is under its task directory.)
fn thread_cpu_seconds(tid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) / hz)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

// ---- the report --------------------------------------------------------------------------

fn build_report(
    admin: &str,
    started_ms: u64,
    first: &Sample,
    last: &Sample,
    stalls_json: &str,
    stalls_before: u64,
    timeline: Vec<Value>,
) -> Value {
    let secs = last.elapsed(first);
    let mut shards = Vec::new();
    for shard in last.shards() {
        let sel = [("shard", shard.as_str())];
        let tid = last
            .label_values("keel_shard_info", "thread_id", &sel)
            .into_iter()
            .next()
            .unwrap_or_default();
        let thread_name = last
            .label_values("keel_shard_info", "thread_name", &sel)
            .into_iter()
            .next()
            .unwrap_or_default();
        let busy = last.shard_delta(first, "keel_shard_busy_seconds_total", &shard);
        let mut requests = BTreeMap::new();
        for api in last.label_values("keel_requests_total", "api", &sel) {
            let n = last.sum_delta(
                first,
                "keel_requests_total",
                &[("shard", &shard), ("api", &api)],
            );
            if n > 0.0 {
                requests.insert(api, n as u64);
            }
        }
        let queues: Vec<Value> = last
            .label_values("keel_task_queue_busy_seconds_total", "queue", &sel)
            .into_iter()
            .map(|q| {
                let w = [("shard", shard.as_str()), ("queue", q.as_str())];
                let busy = last.sum_delta(first, "keel_task_queue_busy_seconds_total", &w);
                json!({
                    "queue": q,
                    "busy_s": round3(busy),
                    "busy_pct": round1(100.0 * busy / secs),
                    "runs": last.sum_delta(first, "keel_task_queue_runs_total", &w) as u64,
                })
            })
            .collect();
        let mut io_ops = BTreeMap::new();
        for op in last.label_values("keel_io_operations_total", "op", &sel) {
            let w = [("shard", shard.as_str()), ("op", op.as_str())];
            let n = last.sum_delta(first, "keel_io_operations_total", &w);
            let lat = last.sum_delta(first, "keel_io_latency_seconds_total", &w);
            io_ops.insert(
                op,
                json!({ "ops": n as u64, "mean_ms": if n > 0.0 { round3(1e3 * lat / n) } else { 0.0 } }),
            );
        }
        // Calls this shard sent to other shards per request it read: 0 when every request's
        // partitions were its own, about 1 when each was split once.
        let requests_read = last.shard_delta(first, "keel_requests_total", &shard);
        let hops_per_request = if requests_read > 0.0 {
            round3(last.shard_delta(first, "keel_cross_shard_hops_total", &shard) / requests_read)
        } else {
            0.0
        };
        shards.push(json!({
            "shard": shard.parse::<u64>().unwrap_or(0),
            "thread_id": tid.parse::<u64>().ok(),
            "thread_name": thread_name,
            "reactor_busy_pct": round1(100.0 * busy / secs),
            "requests": requests,
            "requests_per_s": round1(last.shard_delta(first, "keel_requests_total", &shard) / secs),
            "bytes_in_per_s": round1(last.shard_delta(first, "keel_bytes_in_total", &shard) / secs),
            "bytes_out_per_s": round1(last.shard_delta(first, "keel_bytes_out_total", &shard) / secs),
            "cross_shard_hops": last.shard_delta(first, "keel_cross_shard_hops_total", &shard) as u64,
            "hops_per_request": hops_per_request,
            "io_mean_queue_depth": round3(last.shard_delta(first, "keel_io_queue_depth_seconds_total", &shard) / secs),
            "io": io_ops,
            "stalls": last.shard_delta(first, "keel_reactor_stalls_total", &shard) as u64,
            "replication": {
                "served_bytes_per_s": round1(last.shard_delta(first, "keel_replica_served_bytes_total", &shard) / secs),
                "fetched_bytes_per_s": round1(last.shard_delta(first, "keel_replica_fetch_bytes_total", &shard) / secs),
                "isr_shrinks": last.shard_delta(first, "keel_isr_shrinks_total", &shard) as u64,
                "isr_expands": last.shard_delta(first, "keel_isr_expands_total", &shard) as u64,
                "truncations": last.shard_delta(first, "keel_replica_truncations_total", &shard) as u64,
            },
            "task_queues": queues,
        }));
    }
    let mut stages = Vec::new();
    for api in last.label_values("keel_request_stage_seconds_count", "api", &[]) {
        let mut names = last.label_values(
            "keel_request_stage_seconds_count",
            "stage",
            &[("api", &api)],
        );
        names.insert(0, "total".into());
        for stage in names {
            let (family, want): (&str, Vec<(&str, &str)>) = if stage == "total" {
                ("keel_request_latency_seconds", vec![("api", &api)])
            } else {
                (
                    "keel_request_stage_seconds",
                    vec![("api", &api), ("stage", &stage)],
                )
            };
            let now = last.buckets(family, &want);
            let then = first.buckets(family, &want);
            let delta: Vec<f64> = now
                .iter()
                .zip(&then)
                .map(|(a, b)| (a - b).max(0.0))
                .collect();
            let count: f64 = delta.iter().sum();
            if count <= 0.0 {
                continue;
            }
            let sum = last.sum_delta(first, &format!("{family}_sum"), &want);
            let ms = |q: f64| quantile(&delta, q).map(|s| round3(s * 1e3));
            stages.push(json!({
                "api": api,
                "stage": stage,
                "count": count as u64,
                "mean_ms": round3(1e3 * sum / count),
                "p50_ms": ms(0.5),
                "p99_ms": ms(0.99),
                "p999_ms": ms(0.999),
            }));
        }
    }
    let mut top: Vec<Value> = serde_json::from_str::<Value>(stalls_json)
        .ok()
        .and_then(|v| v["stalls"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s["seq"].as_u64().unwrap_or(0) > stalls_before)
        .collect();
    top.sort_by(|a, b| {
        let o = |v: &Value| v["overage_ms"].as_f64().unwrap_or(0.0);
        o(b).total_cmp(&o(a))
    });
    top.truncate(10);
    json!({
        "broker": admin,
        "started_at_ms": started_ms,
        "duration_s": round3(secs),
        "shards": shards,
        "stages": stages,
        "top_stalls": top,
        "timeline": timeline,
    })
}

/// Adds each shard's kernel CPU share over the window, measured by the caller's two readings.
fn add_thread_cpu(report: &mut Value, before: &BTreeMap<String, f64>, secs: f64) {
    if let Some(shards) = report["shards"].as_array_mut() {
        for s in shards {
            let tid = s["thread_id"]
                .as_u64()
                .map(|t| t.to_string())
                .unwrap_or_default();
            let pct = match (before.get(&tid), thread_cpu_seconds(&tid)) {
                (Some(a), Some(b)) => Value::from(round1(100.0 * (b - a).max(0.0) / secs)),
                _ => Value::Null,
            };
            s["thread_cpu_pct"] = pct;
        }
    }
}

fn print_summary(report: &Value) {
    let num = |v: &Value| match v {
        Value::Null => "-".to_string(),
        v => v.to_string(),
    };
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<6} {:<14} {:>8} {:>8} {:>8} {:>10} {:>7} {:>7} {:>11} {:>11}",
        "shard",
        "thread",
        "tid",
        "busy%",
        "cpu%",
        "req/s",
        "io-qd",
        "stalls",
        "repl-out/s",
        "repl-in/s"
    );
    for s in report["shards"].as_array().into_iter().flatten() {
        let _ = writeln!(
            text,
            "{:<6} {:<14} {:>8} {:>8} {:>8} {:>10} {:>7} {:>7} {:>11} {:>11}",
            num(&s["shard"]),
            s["thread_name"].as_str().unwrap_or(""),
            num(&s["thread_id"]),
            num(&s["reactor_busy_pct"]),
            num(&s["thread_cpu_pct"]),
            num(&s["requests_per_s"]),
            num(&s["io_mean_queue_depth"]),
            num(&s["stalls"]),
            num(&s["replication"]["served_bytes_per_s"]),
            num(&s["replication"]["fetched_bytes_per_s"]),
        );
    }
    crate::ops::print_quietly(&text);
}

// ---- HTML ---------------------------------------------------------------------------------

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "-".into(),
        v => esc(&v.to_string()),
    }
}

fn bar(pct: f64) -> String {
    let w = pct.clamp(0.0, 100.0) * 2.0;
    format!(
        "<svg width=\"204\" height=\"14\"><rect x=\"0\" y=\"1\" width=\"200\" height=\"12\" fill=\"#eee\"/><rect x=\"0\" y=\"1\" width=\"{w:.1}\" height=\"12\" fill=\"#3a7\"/></svg> {pct:.1}%"
    )
}

fn render_html(r: &Value) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>keel profile</title>\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:2em}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f4f4f4}}\
         td.l,th.l{{text-align:left}}code{{font-size:90%}}</style></head><body>\
         <h1>keel profile</h1><p>broker admin <code>{}</code>, window {} s, started at {} ms (Unix).\
         Shard threads are named <code>keel-shard-N</code>: <code>perf top -t TID</code> with the thread ids below.</p>",
        cell(&r["broker"]),
        r["duration_s"],
        r["started_at_ms"]
    );
    h.push_str("<h2>Shards</h2><table><tr><th>shard</th><th class=l>thread</th><th>tid</th><th class=l>reactor busy</th><th class=l>thread CPU (kernel)</th><th>req/s</th><th>bytes in/s</th><th>bytes out/s</th><th>hops</th><th>hops/request</th><th>mean I/O depth</th><th>stalls</th></tr>");
    for s in r["shards"].as_array().into_iter().flatten() {
        let cpu = s["thread_cpu_pct"].as_f64().map_or("-".to_string(), bar);
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=l>{}</td><td>{}</td><td class=l>{}</td><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            cell(&s["shard"]),
            cell(&s["thread_name"]),
            cell(&s["thread_id"]),
            bar(s["reactor_busy_pct"].as_f64().unwrap_or(0.0)),
            cpu,
            cell(&s["requests_per_s"]),
            cell(&s["bytes_in_per_s"]),
            cell(&s["bytes_out_per_s"]),
            cell(&s["cross_shard_hops"]),
            cell(&s["hops_per_request"]),
            cell(&s["io_mean_queue_depth"]),
            cell(&s["stalls"]),
        );
    }
    h.push_str("</table><h2>Time per task queue</h2><table><tr><th>shard</th><th class=l>queue</th><th>busy s</th><th class=l>busy</th><th>runs</th></tr>");
    for s in r["shards"].as_array().into_iter().flatten() {
        for q in s["task_queues"].as_array().into_iter().flatten() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=l>{}</td><td>{}</td><td class=l>{}</td><td>{}</td></tr>",
                cell(&s["shard"]),
                cell(&q["queue"]),
                cell(&q["busy_s"]),
                bar(q["busy_pct"].as_f64().unwrap_or(0.0)),
                cell(&q["runs"]),
            );
        }
    }
    h.push_str("</table><h2>Requests by API and shard</h2><table><tr><th>shard</th><th class=l>API</th><th>requests</th></tr>");
    for s in r["shards"].as_array().into_iter().flatten() {
        for (api, n) in s["requests"].as_object().into_iter().flatten() {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=l>{}</td><td>{}</td></tr>",
                cell(&s["shard"]),
                esc(api),
                cell(n)
            );
        }
    }
    h.push_str("</table><h2>Latency by API and stage (requests finished in the window)</h2><table><tr><th class=l>API</th><th class=l>stage</th><th>count</th><th>mean ms</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th></tr>");
    for s in r["stages"].as_array().into_iter().flatten() {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td class=l>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            cell(&s["api"]),
            cell(&s["stage"]),
            cell(&s["count"]),
            cell(&s["mean_ms"]),
            cell(&s["p50_ms"]),
            cell(&s["p99_ms"]),
            cell(&s["p999_ms"]),
        );
    }
    h.push_str("</table><h2>Top stalls</h2><table><tr><th>shard</th><th class=l>task queue</th><th>over budget ms</th><th>budget ms</th><th class=l>Keel frames (innermost first)</th></tr>");
    let stalls = r["top_stalls"].as_array().cloned().unwrap_or_default();
    if stalls.is_empty() {
        h.push_str("<tr><td class=l colspan=5>no stall in the window</td></tr>");
    }
    for s in &stalls {
        let frames: Vec<String> = s["frames"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| format!("<code>{}</code>", cell(f)))
            .collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=l>{}</td><td>{:.1}</td><td>{:.1}</td><td class=l>{}</td></tr>",
            cell(&s["shard"]),
            cell(&s["queue"]),
            s["overage_ms"].as_f64().unwrap_or(0.0),
            s["budget_ms"].as_f64().unwrap_or(0.0),
            frames.join("<br>")
        );
    }
    h.push_str("</table><h2>Timeline</h2><table><tr><th>t s</th><th class=l>reactor busy % per shard</th><th>req/s</th></tr>");
    for t in r["timeline"].as_array().into_iter().flatten() {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=l>{}</td><td>{}</td></tr>",
            cell(&t["t_s"]),
            cell(&t["reactor_busy_pct"]),
            cell(&t["requests_per_s"])
        );
    }
    h.push_str("</table></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prometheus_lines_and_labels() {
        let text = "# HELP x y\n# TYPE x counter\nx{shard=\"0\",api=\"Pro\\\"duce\"} 5\nplain 2.5\nbad line\n";
        let m = parse_metrics(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].0, "x");
        assert_eq!(
            m[0].1,
            vec![
                ("shard".to_string(), "0".to_string()),
                ("api".to_string(), "Pro\"duce".to_string())
            ]
        );
        assert_eq!(m[0].2, 5.0);
        assert_eq!(m[1], ("plain".to_string(), vec![], 2.5));
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let mut b = vec![0.0; BUCKETS_S.len() + 1];
        // 100 samples in (1 ms, 2.5 ms].
        b[8] = 100.0;
        let p50 = quantile(&b, 0.5).unwrap();
        assert!((p50 - 0.00175).abs() < 1e-9, "{p50}");
        assert_eq!(quantile(&b, 1.0), Some(0.0025));
        b[BUCKETS_S.len()] = 100.0; // as many above 10 s
        assert_eq!(quantile(&b, 0.99), Some(10.0));
        assert_eq!(quantile(&vec![0.0; BUCKETS_S.len() + 1], 0.5), None);
    }

    #[test]
    fn durations_and_arguments() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("soon").is_err());
        let a = parse_args(&["--duration".into(), "2s".into(), "--admin=h:1".into()])
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.duration, a.admin.as_str()),
            (Duration::from_secs(2), "h:1")
        );
        assert!(parse_args(&["--duration".into(), "0s".into()]).is_err());
        assert!(parse_args(&["--bogus".into()]).is_err());
    }
}
