//! Scrapes a Keel broker's counters from its admin endpoint (`GET /metrics`, Prometheus text
//! format) so a run can report what each shard did and what CPU the broker used.
//!
//! Kept: per-shard samples (a `shard` label), the process's CPU (`process_cpu_seconds_total`
//! without labels, `keel_process_cpu_seconds_total{mode="user"|"system"}`) and each shard
//! thread's CPU (`keel_shard_cpu_seconds_total{shard,mode}`).
//!
//! Runs on the caller's thread with plain blocking std I/O: it is called once at the start
//! and once at the end of the measured phase, never on a load-generating executor. Every wait
//! is bounded (connect, read and whole-exchange timeouts, a response size cap), and the parser
//! never panics on whatever the other side sends: unknown families, comments and malformed
//! lines are skipped, and a family the target does not export counts as 0 (a CPU family as
//! absent: None).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::result::{ShardDelta, TargetCpu};

/// Connect timeout, and the timeout of each read and write.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The whole exchange, so a server trickling bytes cannot hold us forever.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// A /metrics answer larger than this is refused rather than buffered.
const RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// One shard's counters as read from /metrics: cumulative since the broker started (a
/// [`delta`] of two of them is what a run did). `requests` is summed over every `api` label;
/// `partitions_owned` is a gauge.
pub type ShardCounters = ShardDelta;

/// One scrape: cumulative per-shard counters and the process's CPU seconds so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    /// Sorted by shard.
    pub shards: Vec<ShardCounters>,
    /// `process_cpu_seconds_total` (user + system), if exported.
    pub process_total_s: Option<f64>,
    /// `keel_process_cpu_seconds_total{mode="user"}` and `{mode="system"}`, if exported.
    pub process_user_s: Option<f64>,
    pub process_system_s: Option<f64>,
}

/// Parses Prometheus text. Shard samples count only with a `shard` label that parses as a
/// u32; a CPU sample only with a finite, non-negative value (and, for the per-mode families,
/// a `mode` of "user" or "system").
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    let mut shards: BTreeMap<u32, ShardCounters> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, labels, value)) = parse_sample(line) else {
            continue;
        };
        let mode = label(labels, "mode");
        match name {
            "process_cpu_seconds_total" if labels.trim().is_empty() => {
                scrape.process_total_s = cpu_seconds(value).or(scrape.process_total_s);
                continue;
            }
            "keel_process_cpu_seconds_total" => {
                match mode {
                    Some("user") => scrape.process_user_s = cpu_seconds(value),
                    Some("system") => scrape.process_system_s = cpu_seconds(value),
                    _ => {}
                }
                continue;
            }
            _ => {}
        }
        let Some(shard) = label(labels, "shard").and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let entry = shards.entry(shard).or_insert_with(|| ShardCounters {
            shard,
            ..ShardCounters::default()
        });
        match name {
            "keel_requests_total" => entry.requests = entry.requests.saturating_add(as_u64(value)),
            "keel_bytes_in_total" => entry.bytes_in = as_u64(value),
            "keel_bytes_out_total" => entry.bytes_out = as_u64(value),
            "keel_cross_shard_hops_total" => entry.cross_shard_hops = as_u64(value),
            "keel_partitions_owned" => entry.partitions_owned = as_u64(value),
            "keel_shard_busy_seconds_total" => entry.busy_s = as_seconds(value),
            "keel_produce_appends_total" => entry.produce_appends = as_u64(value),
            "keel_produce_append_seconds_total" => entry.produce_append_s = as_seconds(value),
            "keel_produce_commit_seconds_total" => entry.produce_commit_s = as_seconds(value),
            "keel_shard_cpu_seconds_total" => match mode {
                Some("user") => entry.cpu_user_s = cpu_seconds(value),
                Some("system") => entry.cpu_system_s = cpu_seconds(value),
                _ => {}
            },
            _ => {}
        }
    }
    scrape.shards = shards.into_values().collect();
    scrape
}

/// A CPU counter's value: None for what no counter can read (NaN, infinite, negative).
fn cpu_seconds(value: f64) -> Option<f64> {
    (value.is_finite() && value >= 0.0).then_some(value)
}

fn as_seconds(value: f64) -> f64 {
    if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    }
}

/// Fetches and parses `http://{admin}/metrics`. `admin` is "HOST:PORT".
pub fn fetch(admin: &str) -> anyhow::Result<Scrape> {
    let body = http_get(admin, "/metrics")?;
    Ok(parse(&body))
}

/// The request-stage histograms of `http://{admin}/metrics` (see `windows`).
pub fn fetch_stages(admin: &str) -> anyhow::Result<crate::windows::Stages> {
    Ok(crate::windows::parse_stages(&http_get(admin, "/metrics")?))
}

/// What each shard did between two scrapes. Counters subtract (saturating, so a broker restart
/// reads as 0 rather than wrapping); `partitions_owned` is the gauge's value after.
/// A shard present only after the run counts from zero.
pub fn delta(before: &[ShardCounters], after: &[ShardCounters]) -> Vec<ShardDelta> {
    let mut out: Vec<ShardDelta> = after
        .iter()
        .map(|a| {
            let zero = ShardCounters::default();
            let b = before.iter().find(|b| b.shard == a.shard).unwrap_or(&zero);
            let busy_s = a.busy_s - b.busy_s;
            let secs = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
            ShardDelta {
                shard: a.shard,
                requests: a.requests.saturating_sub(b.requests),
                bytes_in: a.bytes_in.saturating_sub(b.bytes_in),
                bytes_out: a.bytes_out.saturating_sub(b.bytes_out),
                cross_shard_hops: a.cross_shard_hops.saturating_sub(b.cross_shard_hops),
                partitions_owned: a.partitions_owned,
                busy_s: secs(busy_s),
                produce_appends: a.produce_appends.saturating_sub(b.produce_appends),
                produce_append_s: secs(a.produce_append_s - b.produce_append_s),
                produce_commit_s: secs(a.produce_commit_s - b.produce_commit_s),
                cpu_user_s: cpu_delta(b.cpu_user_s, a.cpu_user_s),
                cpu_system_s: cpu_delta(b.cpu_system_s, a.cpu_system_s),
            }
        })
        .collect();
    out.sort_by_key(|d| d.shard);
    out
}

/// A CPU counter's growth: None when the after scrape lacks it; a counter absent before
/// counts from zero (like a shard that appeared), and one that went backwards reads 0.
fn cpu_delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some((after? - before.unwrap_or(0.0)).max(0.0))
}

/// The process's CPU between two scrapes, or None if the target exports no CPU family in
/// both. The total is `process_cpu_seconds_total`'s growth, else user + system; the split
/// needs both `keel_process_cpu_seconds_total` modes in both scrapes.
pub fn process_cpu(before: &Scrape, after: &Scrape) -> Option<TargetCpu> {
    let both = |b: Option<f64>, a: Option<f64>| Some((a? - b?).max(0.0));
    let user_s = both(before.process_user_s, after.process_user_s);
    let system_s = both(before.process_system_s, after.process_system_s);
    let split = user_s.zip(system_s);
    let (user_s, system_s) = (split.map(|s| s.0), split.map(|s| s.1));
    let total_s = both(before.process_total_s, after.process_total_s)
        .or_else(|| split.map(|(u, s)| u + s))?;
    Some(TargetCpu {
        source: "/metrics".into(),
        total_s,
        user_s,
        system_s,
    })
}

/// Splits one exposition line into (metric name, raw label block, value).
/// Returns None for comments, blank lines and anything malformed.
fn parse_sample(line: &str) -> Option<(&str, &str, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let rest = &line[name_end..];
    let (labels, rest) = if let Some(inner) = rest.strip_prefix('{') {
        let close = closing_brace(inner)?;
        (&inner[..close], &inner[close + 1..])
    } else {
        ("", rest)
    };
    // A sample may carry a timestamp after the value; the value is the first field.
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some((name, labels, value))
}

/// Index of the `}` closing a label block, skipping braces inside quoted values.
fn closing_brace(s: &str) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i),
            _ => {}
        }
    }
    None
}

/// The value of label `key` in a raw label block like `shard="0",api="Produce"`.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let mut rest = labels;
    // Each iteration consumes one `k="v"` pair, so this ends within labels.len() rounds.
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.is_empty() {
            return None;
        }
        let eq = rest.find('=')?;
        let k = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start().strip_prefix('"')?;
        let end = closing_quote(after)?;
        if k == key {
            return Some(&after[..end]);
        }
        rest = &after[end + 1..];
    }
}

fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(i),
            _ => {}
        }
    }
    None
}

fn as_u64(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        // `as` saturates at u64::MAX for huge values.
        v as u64
    } else {
        0
    }
}

/// A minimal blocking HTTP/1.1 GET. Returns the body of a 200 answer.
fn http_get(admin: &str, path: &str) -> anyhow::Result<String> {
    let addrs: Vec<_> = admin
        .to_socket_addrs()
        .with_context(|| format!("resolving admin address {admin}"))?
        .collect();
    let mut last_err = None;
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, IO_TIMEOUT) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_err = Some(e),
        }
    }
    let Some(mut stream) = stream else {
        match last_err {
            Some(e) => return Err(e).with_context(|| format!("connecting to {admin}")),
            None => bail!("admin address {admin} resolved to nothing"),
        }
    };
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {admin}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .with_context(|| format!("sending GET {path} to {admin}"))?;

    let deadline = Instant::now() + EXCHANGE_TIMEOUT;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if Instant::now() > deadline {
            bail!("GET {path} from {admin}: no complete answer within {EXCHANGE_TIMEOUT:?}");
        }
        let n = stream
            .read(&mut buf)
            .with_context(|| format!("reading the answer to GET {path} from {admin}"))?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if raw.len() > RESPONSE_BYTES_MAX {
            bail!("GET {path} from {admin}: answer over {RESPONSE_BYTES_MAX} bytes");
        }
        if response_complete(&raw) {
            break;
        }
    }
    parse_response(&raw).with_context(|| format!("GET {path} from {admin}"))
}

/// True once a Content-Length body has fully arrived (so we need not wait for the close).
fn response_complete(raw: &[u8]) -> bool {
    let Some(head_end) = find(raw, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..head_end]);
    match header(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        Some(len) => raw.len() - (head_end + 4) >= len,
        None => false,
    }
}

fn parse_response(raw: &[u8]) -> anyhow::Result<String> {
    let head_end = find(raw, b"\r\n\r\n").context("answer has no complete HTTP header")?;
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let status_line = head.lines().next().unwrap_or("");
    let status = status_line.split_whitespace().nth(1).unwrap_or("");
    if !status_line.starts_with("HTTP/") || status != "200" {
        bail!("unexpected HTTP status line {status_line:?}");
    }
    let mut body = &raw[head_end + 4..];
    let dechunked;
    if header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunked = dechunk(body).context("malformed chunked body")?;
        body = &dechunked;
    } else if let Some(len) = header(&head, "content-length").and_then(|v| v.parse::<usize>().ok())
    {
        if body.len() < len {
            bail!("body truncated: {} of {len} bytes", body.len());
        }
        body = &body[..len];
    }
    Ok(String::from_utf8_lossy(body).into_owned())
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    // Each round consumes at least the size line, so this ends.
    loop {
        let line_end = find(body, b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if body.len() < size {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = body.get(size..)?;
        body = body.strip_prefix(b"\r\n").unwrap_or(body);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    const SAMPLE: &str = "\
# HELP keel_requests_total Requests handled.
# TYPE keel_requests_total counter
keel_requests_total{shard=\"0\",api=\"Produce\"} 12
keel_requests_total{shard=\"0\",api=\"Fetch\"} 30
keel_requests_total{shard=\"1\",api=\"Produce\"} 5
keel_bytes_in_total{shard=\"0\"} 235
keel_bytes_out_total{shard=\"0\"} 261
keel_cross_shard_hops_total{shard=\"0\"} 2
keel_partitions_owned{shard=\"0\"} 1
keel_shard_busy_seconds_total{shard=\"0\"} 1.25
keel_bytes_in_total{shard=\"1\"} 7 1700000000000
keel_unknown_family{shard=\"0\"} 99
keel_up 1
";

    #[test]
    fn parses_the_sample() {
        let got = parse(SAMPLE);
        assert_eq!(got.process_total_s, None, "no CPU family in the sample");
        assert_eq!(
            got.shards,
            vec![
                ShardCounters {
                    shard: 0,
                    requests: 42,
                    bytes_in: 235,
                    bytes_out: 261,
                    cross_shard_hops: 2,
                    partitions_owned: 1,
                    busy_s: 1.25,
                    ..Default::default()
                },
                ShardCounters {
                    shard: 1,
                    requests: 5,
                    bytes_in: 7,
                    ..ShardCounters::default()
                },
            ]
        );
    }

    #[test]
    fn garbage_does_not_panic() {
        let inputs = [
            "",
            "{",
            "}}}",
            "keel_requests_total{",
            "keel_requests_total{shard=\"0\"",
            "keel_requests_total{shard=\"0\"}",
            "keel_requests_total{shard=\"x\"} 1",
            "keel_requests_total{shard=0} 1",
            "keel_requests_total{shard=\"-1\"} 1",
            "keel_requests_total{shard=\"0\"} NaN",
            "keel_requests_total{shard=\"0\"} -5",
            "keel_requests_total{shard=\"0\"} +Inf",
            "keel_requests_total{shard=\"0\",api=\"a\\\"}\"} 3",
            "keel_requests_total{api=\"Produce\"} 3",
            "\u{0}\u{ff}é漢字 {=\"\"} 1",
            "keel_bytes_in_total{shard=\"99999999999999999999\"} 1",
            "keel_bytes_in_total{shard=\"1\"} 1e30",
        ];
        for input in inputs {
            let _ = parse(input);
        }
        let odd = parse(&inputs.join("\n")).shards;
        // The escaped-quote line parses: the `}` inside the quoted api value is not the end.
        assert_eq!(
            odd.iter().find(|s| s.shard == 0).map(|s| s.requests),
            Some(3)
        );
        assert_eq!(
            odd.iter().find(|s| s.shard == 1).map(|s| s.bytes_in),
            Some(u64::MAX)
        );
        let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let _ = parse(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn delta_subtracts_and_keeps_the_gauge() {
        let before = parse(SAMPLE).shards;
        let mut after = before.clone();
        after[0].requests += 100;
        after[0].bytes_in += 1000;
        after[0].bytes_out += 2000;
        after[0].cross_shard_hops += 3;
        after[0].partitions_owned = 4;
        after[0].busy_s += 2.5;
        after[1].bytes_in = 0; // went backwards (restart): saturates to 0
        after.push(ShardCounters {
            shard: 2,
            requests: 9,
            busy_s: 0.5,
            ..Default::default()
        });
        let d = delta(&before, &after);
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[0],
            ShardDelta {
                shard: 0,
                requests: 100,
                bytes_in: 1000,
                bytes_out: 2000,
                cross_shard_hops: 3,
                partitions_owned: 4,
                busy_s: 2.5,
                ..Default::default()
            }
        );
        assert_eq!(d[1].bytes_in, 0);
        assert_eq!(d[2].requests, 9);
        assert_eq!(d[2].busy_s, 0.5);
    }

    const CPU_SAMPLE: &str = "\
# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
keel_process_cpu_seconds_total{mode=\"user\"} 9.25
keel_process_cpu_seconds_total{mode=\"system\"} 3.25
keel_shard_cpu_seconds_total{shard=\"0\",mode=\"user\"} 4.5
keel_shard_cpu_seconds_total{shard=\"0\",mode=\"system\"} 1.5
keel_shard_cpu_seconds_total{mode=\"user\",shard=\"1\"} 3
keel_shard_cpu_seconds_total{shard=\"1\",mode=\"system\"} 1 1700000000000
keel_bytes_in_total{shard=\"1\"} 7
";

    #[test]
    fn parses_the_cpu_families() {
        let got = parse(CPU_SAMPLE);
        assert_eq!(got.process_total_s, Some(12.5));
        assert_eq!(got.process_user_s, Some(9.25));
        assert_eq!(got.process_system_s, Some(3.25));
        assert_eq!(got.shards.len(), 2);
        assert_eq!(got.shards[0].cpu_user_s, Some(4.5));
        assert_eq!(got.shards[0].cpu_system_s, Some(1.5));
        assert_eq!(got.shards[1].cpu_user_s, Some(3.0), "label order");
        assert_eq!(got.shards[1].cpu_system_s, Some(1.0), "timestamp");
        assert_eq!(got.shards[1].bytes_in, 7);
        // The shard families do not leak into the process figures, nor the other way round.
        let only_process = parse("process_cpu_seconds_total 2\n");
        assert!(only_process.shards.is_empty());
        assert_eq!(only_process.process_user_s, None);
    }

    #[test]
    fn malformed_cpu_lines_are_skipped() {
        let inputs = [
            // A process total with labels is some other exporter's family.
            "process_cpu_seconds_total{shard=\"0\"} 5",
            "process_cpu_seconds_total NaN",
            "process_cpu_seconds_total -1",
            "process_cpu_seconds_total +Inf",
            "process_cpu_seconds_total",
            "process_cpu_seconds_total{} ",
            "keel_process_cpu_seconds_total 4",
            "keel_process_cpu_seconds_total{mode=\"idle\"} 4",
            "keel_process_cpu_seconds_total{mode=\"user\"} x",
            "keel_process_cpu_seconds_total{mode=\"user\" 4",
            "keel_process_cpu_seconds_total{mode=user} 4",
            "keel_shard_cpu_seconds_total{mode=\"user\"} 4",
            "keel_shard_cpu_seconds_total{shard=\"0\"} 4",
            "keel_shard_cpu_seconds_total{shard=\"0\",mode=\"steal\"} 4",
            "keel_shard_cpu_seconds_total{shard=\"0\",mode=\"user\"} -4",
            "keel_shard_cpu_seconds_total{shard=\"0\",mode=\"system\"} NaN",
        ];
        let got = parse(&inputs.join("\n"));
        assert_eq!(got.process_total_s, None, "{got:?}");
        assert_eq!(got.process_user_s, None, "{got:?}");
        assert_eq!(got.process_system_s, None, "{got:?}");
        for s in &got.shards {
            assert_eq!((s.cpu_user_s, s.cpu_system_s), (None, None), "{got:?}");
        }
        // An unlabelled total with empty braces is still the total.
        assert_eq!(
            parse("process_cpu_seconds_total{} 3").process_total_s,
            Some(3.0)
        );
    }

    #[test]
    fn process_cpu_is_after_minus_before() {
        let before = parse(CPU_SAMPLE);
        let after = parse(
            "process_cpu_seconds_total 22.5\n\
             keel_process_cpu_seconds_total{mode=\"user\"} 16.25\n\
             keel_process_cpu_seconds_total{mode=\"system\"} 6.25\n\
             keel_shard_cpu_seconds_total{shard=\"0\",mode=\"user\"} 8.5\n\
             keel_shard_cpu_seconds_total{shard=\"0\",mode=\"system\"} 1.0\n\
             keel_shard_cpu_seconds_total{shard=\"2\",mode=\"user\"} 0.5\n",
        );
        let cpu = process_cpu(&before, &after).unwrap();
        assert_eq!(cpu.total_s, 10.0);
        assert_eq!((cpu.user_s, cpu.system_s), (Some(7.0), Some(3.0)));
        assert_eq!(cpu.source, "/metrics");
        let d = delta(&before.shards, &after.shards);
        assert_eq!(d[0].cpu_user_s, Some(4.0));
        assert_eq!(d[0].cpu_system_s, Some(0.0), "went backwards: 0");
        assert_eq!(d[1].shard, 2);
        assert_eq!(d[1].cpu_user_s, Some(0.5), "a new shard counts from zero");
        assert_eq!(d[1].cpu_system_s, None, "not exported");
        // Only the total: no split. Only the split: the total is their sum.
        let total_only = |v: f64| parse(&format!("process_cpu_seconds_total {v}"));
        let cpu = process_cpu(&total_only(1.0), &total_only(3.5)).unwrap();
        assert_eq!((cpu.total_s, cpu.user_s, cpu.system_s), (2.5, None, None));
        let mut split_only = after.clone();
        split_only.process_total_s = None;
        let mut split_before = before.clone();
        split_before.process_total_s = None;
        assert_eq!(
            process_cpu(&split_before, &split_only).map(|c| c.total_s),
            Some(10.0)
        );
        // Nothing exported, or only before: no figure.
        assert_eq!(process_cpu(&parse(SAMPLE), &parse(SAMPLE)), None);
        assert_eq!(process_cpu(&before, &parse(SAMPLE)), None);
    }

    /// Serves one canned answer to one connection, returning what the client sent.
    fn serve_once(answer: Vec<u8>) -> (String, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while find(&req, b"\r\n\r\n").is_none() {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            s.write_all(&answer).unwrap();
            String::from_utf8_lossy(&req).into_owned()
        });
        (addr, server)
    }

    #[test]
    fn fetch_reads_a_content_length_answer() {
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SAMPLE}",
            SAMPLE.len()
        );
        let (addr, server) = serve_once(answer.into_bytes());
        let got = fetch(&addr).unwrap();
        let req = server.join().unwrap();
        assert!(req.starts_with("GET /metrics HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("Connection: close\r\n"), "{req}");
        assert_eq!(got, parse(SAMPLE));
    }

    #[test]
    fn fetch_reads_a_chunked_answer() {
        let (a, b) = SAMPLE.split_at(50);
        let answer = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        let (addr, server) = serve_once(answer.into_bytes());
        let got = fetch(&addr).unwrap();
        server.join().unwrap();
        assert_eq!(got, parse(SAMPLE));
    }

    #[test]
    fn fetch_rejects_an_error_status() {
        let (addr, server) =
            serve_once(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
        let err = fetch(&addr).unwrap_err();
        server.join().unwrap();
        assert!(format!("{err:#}").contains("404"), "{err:#}");
    }

    #[test]
    fn fetch_fails_cleanly_when_nothing_listens() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        assert!(fetch(&addr).is_err());
        assert!(fetch("not an address").is_err());
    }
}
