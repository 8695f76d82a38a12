//! Reports of a run or a comparison: plain-text tables for the terminal, one self-contained
//! HTML file (inline CSS and SVG, nothing fetched) for a browser, and the JSON writer.
//!
//! Both forms come from one list of blocks (headings, lines, tables), so the terminal and the
//! HTML always say the same thing. A comparison aggregates each target's rounds by the median
//! of the per-round values and states every ratio against the first target named.
//!
//! Pure functions of the result types, run once at the end on the caller's thread. Nothing here
//! panics on empty or odd data (no points, zero durations, NaN): a missing figure prints "-".

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;

use crate::checker::LedgerReport;
use crate::cpu;
use crate::result::{
    CompareResult, FloorResult, LatencySummary, PercentilePoint, ProbeResult, RunResult,
    ShardDelta, TimelinePoint, WorkloadSummary,
};

// ---------------------------------------------------------------------------------------------
// Public API

/// The final plain-text report of one run.
pub fn run_table(r: &RunResult) -> String {
    blocks_text(&run_blocks(r))
}

/// The plain-text report of a comparison: one row per target (medians over its rounds), the
/// same rows relative to the first target, and one line per round.
pub fn compare_table(c: &CompareResult) -> String {
    blocks_text(&compare_blocks(c))
}

/// Writes `value` as pretty-printed JSON to `path`.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).context("serialising the result")?;
    bytes.push(b'\n');
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes an HTML report produced by [`html_run`] or [`html_compare`] to `path`.
pub fn write_html(path: &Path, html: &str) -> anyhow::Result<()> {
    std::fs::write(path, html).with_context(|| format!("writing {}", path.display()))
}

/// One self-contained HTML page for a run: the tables, an HDR percentile plot of publish and
/// end-to-end latency, and throughput over time.
pub fn html_run(r: &RunResult) -> String {
    let title = format!("keel-bench run: {}", r.target);
    let mut body = String::new();
    blocks_html(&run_blocks(r), &mut body);
    body.push_str("<h2>Latency by percentile</h2>\n");
    body.push_str(&svg_plot(
        "Latency by percentile",
        XAxis::Percentile,
        "latency (ms)",
        &[
            Series::percentiles("publish", 0, false, &r.publish_percentiles),
            Series::percentiles("end-to-end", 1, false, &r.e2e_percentiles),
        ],
    ));
    body.push_str("<h2>Throughput over time</h2>\n");
    body.push_str(&svg_plot(
        "Throughput over time",
        XAxis::Seconds,
        "MB/s",
        &[
            Series::timeline("produce MB/s", 0, false, &r.timeline, |p| {
                p.produce_mb_per_s
            }),
            Series::timeline("consume MB/s", 1, false, &r.timeline, |p| {
                p.consume_mb_per_s
            }),
        ],
    ));
    html_page(&title, &body)
}

/// One self-contained HTML page for a comparison: the tables, HDR plots of publish and of
/// end-to-end latency (one line per target, from its first round) and throughput over time.
pub fn html_compare(c: &CompareResult) -> String {
    let targets = group_by_target(c);
    let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
    let title = format!("keel-bench compare: {}", names.join(" vs "));
    let mut body = String::new();
    blocks_html(&compare_blocks(c), &mut body);
    let first_runs: Vec<(usize, &RunResult)> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| (i, t.runs[0]))
        .collect();
    let publish: Vec<Series> = first_runs
        .iter()
        .map(|(i, r)| Series::percentiles(&r.target, *i, false, &r.publish_percentiles))
        .collect();
    let e2e: Vec<Series> = first_runs
        .iter()
        .map(|(i, r)| Series::percentiles(&r.target, *i, false, &r.e2e_percentiles))
        .collect();
    let mut throughput = Vec::new();
    for (i, r) in &first_runs {
        let produce = format!("{} produce", r.target);
        let consume = format!("{} consume", r.target);
        throughput.push(Series::timeline(&produce, *i, false, &r.timeline, |p| {
            p.produce_mb_per_s
        }));
        throughput.push(Series::timeline(&consume, *i, true, &r.timeline, |p| {
            p.consume_mb_per_s
        }));
    }
    body.push_str("<h2>Publish latency by percentile (first round)</h2>\n");
    body.push_str(&svg_plot(
        "Publish latency",
        XAxis::Percentile,
        "latency (ms)",
        &publish,
    ));
    body.push_str("<h2>End-to-end latency by percentile (first round)</h2>\n");
    body.push_str(&svg_plot(
        "End-to-end latency",
        XAxis::Percentile,
        "latency (ms)",
        &e2e,
    ));
    body.push_str("<h2>Throughput over time (first round)</h2>\n");
    body.push_str(&svg_plot(
        "Throughput over time (solid: produce, dashed: consume)",
        XAxis::Seconds,
        "MB/s",
        &throughput,
    ));
    html_page(&title, &body)
}

// ---------------------------------------------------------------------------------------------
// Number formatting: every figure goes through one of these, so "-" stands for "no figure".

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// Milliseconds with precision that keeps ~4 significant digits.
fn fmt_ms(v: f64) -> String {
    match finite(v) {
        None => "-".into(),
        Some(v) if v.abs() < 10.0 => format!("{v:.3}"),
        Some(v) if v.abs() < 1000.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.1}"),
    }
}

fn fmt_mb(v: f64) -> String {
    finite(v).map_or("-".into(), |v| format!("{v:.2}"))
}

fn fmt_rate(v: f64) -> String {
    finite(v).map_or("-".into(), |v| format!("{v:.0}"))
}

fn fmt_s(v: f64) -> String {
    finite(v).map_or("-".into(), |v| format!("{v:.2}"))
}

/// `num / den` as "x1.23"; "-" when the ratio means nothing.
fn fmt_ratio(num: f64, den: f64) -> String {
    match finite(num / den) {
        Some(x) if den != 0.0 => format!("x{x:.2}"),
        _ => "-".into(),
    }
}

/// `num / den` as a percentage; "-" when the ratio means nothing.
fn fmt_pct(num: f64, den: f64) -> String {
    match finite(num / den * 100.0) {
        Some(p) if den != 0.0 => format!("{p:.1}%"),
        _ => "-".into(),
    }
}

/// CPU seconds per GB, or "-" for no figure (nothing moved, nothing measured).
fn fmt_per_gb(v: Option<f64>) -> String {
    match v.and_then(finite) {
        None => "-".into(),
        Some(v) if v.abs() < 10.0 => format!("{v:.3}"),
        Some(v) if v.abs() < 100.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.1}"),
    }
}

/// A ratio already divided, as "x1.23", or "-".
fn fmt_x(v: Option<f64>) -> String {
    v.and_then(finite)
        .map_or("-".into(), |x| format!("x{x:.2}"))
}

/// Seconds, or "-" for a figure the target did not give.
fn fmt_opt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), fmt_s)
}

/// The floor producer's pace.
pub fn floor_rate(rate_bytes_per_s: u64) -> String {
    if rate_bytes_per_s == 0 {
        "as fast as the acks allow".into()
    } else {
        format!("at {} MB/s", fmt_mb(rate_bytes_per_s as f64 / 1e6))
    }
}

/// What the floor did and what it cost, for the probe command and the reports.
pub fn floor_lines(f: &FloorResult) -> Vec<String> {
    let core = f.core.map_or(String::new(), |c| format!(" (core {c})"));
    let limited = if f.time_limited {
        format!(
            ", stopped at the time limit ({} of {} bytes)",
            f.bytes_received, f.bytes_asked
        )
    } else {
        String::new()
    };
    let moved = f.bytes_moved();
    vec![
        format!(
            "floor: one glommio core{core}, {} B frames {}: {} B received, {} B sent to the \
             reader, {} B appended with O_DIRECT in {} group commits (fdatasync), {} s{limited}",
            f.frame_bytes,
            floor_rate(f.rate_bytes_per_s),
            f.bytes_received,
            f.bytes_sent_to_reader,
            f.bytes_written,
            f.commits,
            fmt_s(f.elapsed_s),
        ),
        format!(
            "floor CPU-s per GB moved: user {}, system {} (io_uring workers {} s of it), total {}",
            fmt_per_gb(cpu::per_gb(f.user_s, moved)),
            fmt_per_gb(cpu::per_gb(f.system_s, moved)),
            fmt_s(f.io_worker_s),
            fmt_per_gb(floor_per_gb(f)),
        ),
    ]
}

fn floor_per_gb(f: &FloorResult) -> Option<f64> {
    cpu::per_gb(f.user_s + f.system_s, f.bytes_moved())
}

/// The target's CPU-s per GB moved in run `r`.
fn target_per_gb(r: &RunResult) -> Option<f64> {
    cpu::per_gb(r.target_cpu.as_ref()?.total_s, r.bytes_moved())
}

/// The target's CPU per GB over its floor's.
fn target_over_floor(r: &RunResult) -> Option<f64> {
    cpu::ratio(target_per_gb(r), r.floor().and_then(floor_per_gb))
}

/// Whether the tool's CPU split by mode is known (results before it had only the total).
fn tool_split_known(r: &RunResult) -> bool {
    r.tool_cpu_user_s + r.tool_cpu_system_s > 0.0 || r.tool_cpu_s == 0.0
}

fn tool_per_gb(r: &RunResult) -> Option<f64> {
    cpu::per_gb(r.tool_cpu_s, r.bytes_moved())
}

/// "N.NN" cores: CPU seconds over wall seconds.
fn fmt_cores(cpu_s: f64, secs: f64) -> String {
    if secs > 0.0 {
        finite(cpu_s / secs).map_or("-".into(), |c| format!("{c:.2}"))
    } else {
        "-".into()
    }
}

/// CPU per GB moved over the measured phase: the target, the floor, keel-bench itself.
fn cpu_blocks(r: &RunResult) -> Vec<Block> {
    let moved = r.bytes_moved();
    let per = |s: f64| cpu::per_gb(s, moved);
    let mut t = Table::new(
        format!(
            "CPU per GB moved (measured phase: {} GB = (produced + consumed bytes) / 1e9)",
            fmt_per_gb(Some(moved as f64 / cpu::GB))
        ),
        &[
            "",
            "user CPU-s/GB",
            "system CPU-s/GB",
            "total CPU-s/GB",
            "x floor",
            "cores busy",
        ],
    );
    let floor = r.floor();
    match &r.target_cpu {
        Some(c) => t.row(vec![
            format!("target ({})", c.source),
            fmt_per_gb(c.user_s.and_then(per)),
            fmt_per_gb(c.system_s.and_then(per)),
            fmt_per_gb(target_per_gb(r)),
            fmt_x(target_over_floor(r)),
            fmt_cores(c.total_s, r.measured_s),
        ]),
        None => t.row(vec![
            "target (not measured)".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]),
    }
    match floor {
        Some(f) => t.row(vec![
            "floor (one core, same frames)".into(),
            fmt_per_gb(cpu::per_gb(f.user_s, f.bytes_moved())),
            fmt_per_gb(cpu::per_gb(f.system_s, f.bytes_moved())),
            fmt_per_gb(floor_per_gb(f)),
            fmt_x(floor_per_gb(f).map(|_| 1.0)),
            fmt_cores(f.user_s + f.system_s, f.elapsed_s),
        ]),
        None => t.row(vec![
            "floor (not measured)".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ]),
    }
    let split = tool_split_known(r);
    t.row(vec![
        format!("keel-bench ({} thread(s))", r.tool_threads),
        fmt_per_gb(per(r.tool_cpu_user_s).filter(|_| split)),
        fmt_per_gb(per(r.tool_cpu_system_s).filter(|_| split)),
        fmt_per_gb(tool_per_gb(r)),
        "-".into(),
        fmt_cores(r.tool_cpu_s, r.measured_s),
    ]);
    let mut blocks = vec![Block::Table(t)];
    let why = match (&r.target_cpu, floor) {
        (None, _) => " (no target CPU: give --metrics HOST:PORT of a Keel broker, or --target-pid PID of a broker on this machine)",
        (Some(_), None) => " (no floor: --no-probe, or the floor failed)",
        _ if moved == 0 => " (nothing moved)",
        _ => "",
    };
    blocks.push(Block::Line(format!(
        "  target CPU per GB / floor CPU per GB: {}{why}",
        fmt_x(target_over_floor(r))
    )));
    if let Some(f) = floor {
        blocks.extend(
            floor_lines(f)
                .into_iter()
                .map(|l| Block::Line(format!("  {l}"))),
        );
    }
    let tool_cores = r.tool_cpu_s / r.measured_s.max(1e-9);
    if r.tool_threads > 0 && tool_cores >= 0.9 * f64::from(r.tool_threads) {
        blocks.push(Block::Line(format!(
            "  keel-bench kept its {} thread(s) {} busy: the tool may be what limits this run (try --threads)",
            r.tool_threads,
            fmt_pct(tool_cores, f64::from(r.tool_threads))
        )));
    }
    blocks
}

/// The median, or NaN for no values. NaNs in the input are ignored.
fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks: what a report says, independent of how it is rendered.

enum Block {
    Heading(String),
    Line(String),
    Table(Table),
}

struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// First column left-aligned (names), the rest right-aligned (figures).
    fn text(&self, out: &mut String) {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        if !self.title.is_empty() {
            let _ = writeln!(out, "{}", self.title);
        }
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let w = widths[i];
                if i == 0 {
                    let _ = write!(line, "  {cell:<w$}");
                } else {
                    let _ = write!(line, "  {cell:>w$}");
                }
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }

    fn html(&self, out: &mut String) {
        out.push_str("<table>\n");
        if !self.title.is_empty() {
            let _ = writeln!(out, "<caption>{}</caption>", esc(&self.title));
        }
        out.push_str("<thead><tr>");
        for h in &self.header {
            let _ = write!(out, "<th>{}</th>", esc(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for (i, cell) in row.iter().enumerate() {
                if i == 0 {
                    let _ = write!(out, "<th scope=\"row\">{}</th>", esc(cell));
                } else {
                    let _ = write!(out, "<td>{}</td>", esc(cell));
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
    }
}

fn blocks_text(blocks: &[Block]) -> String {
    let mut out = String::new();
    for (i, block) in blocks.iter().enumerate() {
        match block {
            Block::Heading(h) => {
                if i > 0 {
                    out.push('\n');
                }
                let _ = writeln!(out, "{h}");
            }
            Block::Line(l) => {
                let _ = writeln!(out, "{l}");
            }
            Block::Table(t) => {
                out.push('\n');
                t.text(&mut out);
            }
        }
    }
    out
}

fn blocks_html(blocks: &[Block], out: &mut String) {
    for (i, block) in blocks.iter().enumerate() {
        match block {
            Block::Heading(h) if i == 0 => {
                let _ = writeln!(out, "<h1>{}</h1>", esc(h));
            }
            Block::Heading(h) => {
                let _ = writeln!(out, "<h2>{}</h2>", esc(h));
            }
            Block::Line(l) if l.trim().is_empty() => {}
            Block::Line(l) => {
                let _ = writeln!(out, "<p>{}</p>", esc(l.trim_start()));
            }
            Block::Table(t) => t.html(out),
        }
    }
}

fn workload_line(w: &WorkloadSummary) -> String {
    let rate = if w.target_rate == 0 {
        "max".to_string()
    } else {
        format!("{} records/s", w.target_rate)
    };
    let compression = if w.compression.is_empty() {
        "none"
    } else {
        &w.compression
    };
    let producer = if w.transaction_records > 0 {
        format!(", transactions of {} records", w.transaction_records)
    } else if w.idempotent {
        ", idempotent".to_string()
    } else {
        String::new()
    };
    format!(
        "workload {name}: {topics} topic(s) x {parts} partition(s), {size} B messages, \
         {prod} producer(s) and {cons} consumer(s) per topic, acks={acks}{producer}, compression {compression}, \
         batch {batch} B, linger {linger} ms, rate {rate}, warmup {warmup} s, duration {duration} s",
        name = w.name,
        topics = w.topics,
        parts = w.partitions_per_topic,
        size = w.message_size,
        prod = w.producers_per_topic,
        cons = w.consumers_per_topic,
        acks = w.acks,
        batch = w.batch_size,
        linger = w.linger_ms,
        warmup = w.warmup_s,
        duration = w.duration_s,
    )
}

fn latency_row(name: &str, l: &LatencySummary) -> Vec<String> {
    vec![
        name.to_string(),
        l.count.to_string(),
        fmt_ms(l.p50_ms),
        fmt_ms(l.p90_ms),
        fmt_ms(l.p99_ms),
        fmt_ms(l.p999_ms),
        fmt_ms(l.p9999_ms),
        fmt_ms(l.max_ms),
        fmt_ms(l.mean_ms),
    ]
}

fn probe_line(p: &ProbeResult) -> String {
    format!(
        "machine probe of {}: disk write {} MB/s, 4 KiB write+fdatasync p50 {} ms p99 {} ms, \
         loopback {} MB/s, loopback round trip p50 {} ms p99 {} ms",
        p.dir,
        fmt_mb(p.disk_write_mb_per_s),
        fmt_ms(p.fdatasync.p50_ms),
        fmt_ms(p.fdatasync.p99_ms),
        fmt_mb(p.loopback_mb_per_s),
        fmt_ms(p.loopback_rtt.p50_ms),
        fmt_ms(p.loopback_rtt.p99_ms),
    )
}

fn run_blocks(r: &RunResult) -> Vec<Block> {
    let mut blocks = vec![
        Block::Heading(format!("keel-bench run: {} ({})", r.target, r.bootstrap)),
        Block::Line(workload_line(&r.workload)),
        Block::Line(format!("security: {}", r.security)),
        Block::Line(format!(
            "measured {} s from unix ms {}, on a machine with {} cores",
            fmt_s(r.measured_s),
            r.started_unix_ms,
            r.machine_cores
        )),
    ];

    let mut t = Table::new("throughput", &["", "records/s", "MB/s", "records", "bytes"]);
    t.row(vec![
        "produce".into(),
        fmt_rate(r.produce_records_per_s),
        fmt_mb(r.produce_mb_per_s),
        r.produced_records.to_string(),
        r.produced_bytes.to_string(),
    ]);
    t.row(vec![
        "consume".into(),
        fmt_rate(r.consume_records_per_s),
        fmt_mb(r.consume_mb_per_s),
        r.consumed_records.to_string(),
        r.consumed_bytes.to_string(),
    ]);
    // Records read in the measured phase, whenever sent: differs from "consume" when the
    // consumers drain a backlog.
    t.row(vec![
        "fetch".into(),
        fmt_rate(r.fetched_records as f64 / r.measured_s.max(1e-9)),
        fmt_mb(r.fetch_mb_per_s),
        r.fetched_records.to_string(),
        r.fetched_bytes.to_string(),
    ]);
    blocks.push(Block::Table(t));

    let mut t = Table::new(
        "latency (ms)",
        &[
            "", "count", "p50", "p90", "p99", "p99.9", "p99.99", "max", "mean",
        ],
    );
    t.row(latency_row("publish", &r.publish_latency));
    t.row(latency_row("end-to-end", &r.e2e_latency));
    blocks.push(Block::Table(t));

    blocks.push(Block::Line(String::new()));
    blocks.push(Block::Line(format!("errors: {}", r.errors)));
    for sample in r.error_samples.iter().take(3) {
        blocks.push(Block::Line(format!("  e.g. {sample}")));
    }

    if let Some(v) = &r.verify {
        let mut t = Table::new(
            "verify",
            &["", "acked", "consumed", "lost", "duplicated", "reordered"],
        );
        t.row(vec![
            "messages".into(),
            v.acked.to_string(),
            v.consumed.to_string(),
            v.lost.to_string(),
            v.duplicated.to_string(),
            v.reordered.to_string(),
        ]);
        blocks.push(Block::Table(t));
        blocks.extend(ledger_blocks(&v.ledger));
    }

    blocks.push(Block::Line(String::new()));
    blocks.extend(cpu_blocks(r));

    if let Some(shards) = &r.shards {
        blocks.push(Block::Table(shard_table(shards, r.measured_s)));
        blocks.push(Block::Line(String::new()));
        for line in where_the_time_goes(r, shards) {
            blocks.push(Block::Line(line));
        }
    }

    let windows = crate::windows::explain(&r.timeline);
    if !windows.is_empty() {
        blocks.push(Block::Line(String::new()));
        blocks.push(Block::Line(
            "latency windows (which stage grew when a window's p99 grew)".to_string(),
        ));
        for line in windows {
            blocks.push(Block::Line(line));
        }
    }

    if let Some(p) = &r.probe {
        blocks.push(Block::Line(String::new()));
        blocks.push(Block::Line(probe_line(p)));
        blocks.push(Block::Table(probe_ratio_table(r, p)));
    }
    blocks
}

/// Where a produce's time and the machine's CPU went: the commit (write + fdatasync) per
/// append against the disk's own fdatasync, and the cores the broker and the tool kept busy.
fn where_the_time_goes(r: &RunResult, shards: &[ShardDelta]) -> Vec<String> {
    let mut out = vec!["where the time goes".to_string()];
    let appends: u64 = shards.iter().map(|s| s.produce_appends).sum();
    if appends > 0 {
        let commit_ms =
            shards.iter().map(|s| s.produce_commit_s).sum::<f64>() * 1e3 / appends as f64;
        let append_us =
            shards.iter().map(|s| s.produce_append_s).sum::<f64>() * 1e6 / appends as f64;
        let mut line = format!(
            "  produce, per partition append: validate+append {append_us:.1} µs, commit wait {commit_ms:.2} ms; publish p50 {:.2} ms",
            r.publish_latency.p50_ms
        );
        if let Some(p) = &r.probe {
            line.push_str(&format!(
                " (the disk's 4 KiB fdatasync p50 is {:.2} ms)",
                p.fdatasync.p50_ms
            ));
        }
        out.push(line);
    }
    let secs = r.measured_s.max(1e-9);
    let broker_cores = shards.iter().map(|s| s.busy_s).sum::<f64>() / secs;
    let tool_cores = r.tool_cpu_s / secs;
    out.push(format!(
        "  CPU: broker shards busy {broker_cores:.2} cores, keel-bench {tool_cores:.2} cores, of {} on the machine{}",
        r.machine_cores,
        if broker_cores + tool_cores > 0.85 * f64::from(r.machine_cores.max(1)) {
            ": the machine's cores are saturated, so throughput is bounded by CPU (broker and tool together), not by the disk"
        } else {
            ""
        }
    ));
    if let Some(c) = &r.target_cpu {
        out.push(format!(
            "  CPU: broker process {} cores (user {} s, system {} s, from {})",
            fmt_cores(c.total_s, r.measured_s),
            fmt_opt_s(c.user_s),
            fmt_opt_s(c.system_s),
            c.source
        ));
    }
    out
}

fn shard_table(shards: &[ShardDelta], measured_s: f64) -> Table {
    let mut t = Table::new(
        "per shard (target's /metrics, after minus before)",
        &[
            "shard",
            "requests",
            "bytes in",
            "bytes out",
            "cross-shard hops",
            "hops/request",
            "partitions owned",
            "busy s",
            "busy %",
            "appends",
            "append µs/each",
            "commit ms/each",
            "CPU user s",
            "CPU sys s",
        ],
    );
    let per = |secs: f64, n: u64, scale: f64| {
        if n == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", secs * scale / n as f64)
        }
    };
    let mut total = ShardDelta::default();
    for s in shards {
        t.row(vec![
            s.shard.to_string(),
            s.requests.to_string(),
            s.bytes_in.to_string(),
            s.bytes_out.to_string(),
            s.cross_shard_hops.to_string(),
            hops_per_request(s.cross_shard_hops, s.requests),
            s.partitions_owned.to_string(),
            fmt_s(s.busy_s),
            fmt_pct(s.busy_s, measured_s),
            s.produce_appends.to_string(),
            per(s.produce_append_s, s.produce_appends, 1e6),
            per(s.produce_commit_s, s.produce_appends, 1e3),
            fmt_opt_s(s.cpu_user_s),
            fmt_opt_s(s.cpu_system_s),
        ]);
        let add = |sum: Option<f64>, v: Option<f64>| match (sum, v) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        total.cpu_user_s = add(total.cpu_user_s, s.cpu_user_s);
        total.cpu_system_s = add(total.cpu_system_s, s.cpu_system_s);
        total.produce_appends = total.produce_appends.saturating_add(s.produce_appends);
        total.produce_append_s += s.produce_append_s;
        total.produce_commit_s += s.produce_commit_s;
        total.requests = total.requests.saturating_add(s.requests);
        total.bytes_in = total.bytes_in.saturating_add(s.bytes_in);
        total.bytes_out = total.bytes_out.saturating_add(s.bytes_out);
        total.cross_shard_hops = total.cross_shard_hops.saturating_add(s.cross_shard_hops);
        total.partitions_owned = total.partitions_owned.saturating_add(s.partitions_owned);
        total.busy_s += s.busy_s;
    }
    if shards.len() > 1 {
        t.row(vec![
            "all".into(),
            total.requests.to_string(),
            total.bytes_in.to_string(),
            total.bytes_out.to_string(),
            total.cross_shard_hops.to_string(),
            hops_per_request(total.cross_shard_hops, total.requests),
            total.partitions_owned.to_string(),
            fmt_s(total.busy_s),
            // Busy share of all shards together: the mean over shards.
            fmt_pct(total.busy_s, measured_s * shards.len() as f64),
            total.produce_appends.to_string(),
            per(total.produce_append_s, total.produce_appends, 1e6),
            per(total.produce_commit_s, total.produce_appends, 1e3),
            fmt_opt_s(total.cpu_user_s),
            fmt_opt_s(total.cpu_system_s),
        ]);
    }
    t
}

/// Calls a shard sent to other shards per request it read ("-" without requests): 0 when
/// every request's partitions were its own, about 1 when each was split once.
fn hops_per_request(hops: u64, requests: u64) -> String {
    if requests == 0 {
        "-".to_string()
    } else {
        format!("{:.2}", hops as f64 / requests as f64)
    }
}

fn probe_ratio_table(r: &RunResult, p: &ProbeResult) -> Table {
    let mut t = Table::new(
        "against the machine probe",
        &["", "this run", "machine", "ratio"],
    );
    t.row(vec![
        "produce MB/s vs disk write bandwidth".into(),
        fmt_mb(r.produce_mb_per_s),
        fmt_mb(p.disk_write_mb_per_s),
        fmt_pct(r.produce_mb_per_s, p.disk_write_mb_per_s),
    ]);
    t.row(vec![
        "produce MB/s vs loopback bandwidth".into(),
        fmt_mb(r.produce_mb_per_s),
        fmt_mb(p.loopback_mb_per_s),
        fmt_pct(r.produce_mb_per_s, p.loopback_mb_per_s),
    ]);
    t.row(vec![
        "publish p99 ms vs fdatasync p99 ms".into(),
        fmt_ms(r.publish_latency.p99_ms),
        fmt_ms(p.fdatasync.p99_ms),
        fmt_ratio(r.publish_latency.p99_ms, p.fdatasync.p99_ms),
    ]);
    t
}

/// One target's runs of a comparison, in the order they ran.
struct TargetRuns<'a> {
    name: &'a str,
    runs: Vec<&'a RunResult>,
}

/// Runs grouped by target name, targets in order of first appearance. Never holds an empty group.
fn group_by_target(c: &CompareResult) -> Vec<TargetRuns<'_>> {
    let mut groups: Vec<TargetRuns<'_>> = Vec::new();
    for run in &c.runs {
        match groups.iter_mut().find(|g| g.name == run.target) {
            Some(g) => g.runs.push(run),
            None => groups.push(TargetRuns {
                name: &run.target,
                runs: vec![run],
            }),
        }
    }
    groups
}

/// A target's figures: the median over its rounds of each per-round value.
struct Medians {
    records_per_s: f64,
    mb_per_s: f64,
    fetch_mb_per_s: f64,
    publish_p50_ms: f64,
    publish_p99_ms: f64,
    publish_p999_ms: f64,
    e2e_p99_ms: f64,
    /// The target's CPU-s per GB moved, its ratio to the run's floor, the tool's CPU-s per
    /// GB (NaN where a run has no figure).
    cpu_per_gb: f64,
    over_floor: f64,
    tool_per_gb: f64,
}

impl Medians {
    fn of(runs: &[&RunResult]) -> Medians {
        let m = |f: fn(&RunResult) -> f64| median(runs.iter().map(|r| f(r)));
        Medians {
            records_per_s: m(|r| r.produce_records_per_s),
            mb_per_s: m(|r| r.produce_mb_per_s),
            fetch_mb_per_s: m(|r| r.fetch_mb_per_s),
            publish_p50_ms: m(|r| r.publish_latency.p50_ms),
            publish_p99_ms: m(|r| r.publish_latency.p99_ms),
            publish_p999_ms: m(|r| r.publish_latency.p999_ms),
            e2e_p99_ms: m(|r| r.e2e_latency.p99_ms),
            cpu_per_gb: m(|r| target_per_gb(r).unwrap_or(f64::NAN)),
            over_floor: m(|r| target_over_floor(r).unwrap_or(f64::NAN)),
            tool_per_gb: m(|r| tool_per_gb(r).unwrap_or(f64::NAN)),
        }
    }
}

fn compare_blocks(c: &CompareResult) -> Vec<Block> {
    let targets = group_by_target(c);
    let names: Vec<&str> = targets.iter().map(|t| t.name).collect();
    let mut blocks = vec![
        Block::Heading(format!(
            "keel-bench compare: {} ({} round(s) planned, {} run(s))",
            names.join(" vs "),
            c.rounds,
            c.runs.len()
        )),
        Block::Line(workload_line(&c.workload)),
    ];
    // Targets that ran their own workload (compare NAME=HOST:PORT@FILE).
    for t in &targets {
        if let Some(r) = t.runs.first().filter(|r| r.workload != c.workload) {
            blocks.push(Block::Line(format!(
                "{}: {}",
                t.name,
                workload_line(&r.workload)
            )));
        }
    }
    let security: Vec<String> = targets
        .iter()
        .filter_map(|t| t.runs.first().map(|r| format!("{} {}", t.name, r.security)))
        .collect();
    if !security.is_empty() {
        blocks.push(Block::Line(format!("security: {}", security.join("; "))));
    }
    blocks.push(Block::Line(format!("machine: {} cores", c.machine_cores)));
    if let Some(p) = &c.probe {
        blocks.push(Block::Line(probe_line(p)));
    }
    // Each target's floor is that of its workload; list each distinct one once.
    let mut floors: Vec<&FloorResult> = Vec::new();
    for f in c.runs.iter().filter_map(RunResult::floor) {
        if !floors.iter().any(|known| {
            (known.frame_bytes, known.rate_bytes_per_s) == (f.frame_bytes, f.rate_bytes_per_s)
        }) {
            floors.push(f);
        }
    }
    for f in floors {
        blocks.extend(floor_lines(f).into_iter().map(Block::Line));
    }
    if targets.is_empty() {
        blocks.push(Block::Line("no runs".into()));
        return blocks;
    }

    let any_verify = c.runs.iter().any(|r| r.verify.is_some());
    let mut header = vec![
        "target",
        "rounds",
        "records/s",
        "MB/s",
        "fetch MB/s",
        "publish p50 ms",
        "publish p99 ms",
        "publish p99.9 ms",
        "e2e p99 ms",
        "errors",
        "CPU-s/GB",
        "x floor",
        "keel-bench CPU-s/GB",
    ];
    if any_verify {
        header.extend(["lost", "duplicated", "reordered", "offset errors"]);
    }
    let mut table = Table::new(
        "produce throughput and latency, median over rounds",
        &header,
    );
    let medians: Vec<Medians> = targets.iter().map(|t| Medians::of(&t.runs)).collect();
    for (t, m) in targets.iter().zip(&medians) {
        let mut row = vec![
            t.name.to_string(),
            t.runs.len().to_string(),
            fmt_rate(m.records_per_s),
            fmt_mb(m.mb_per_s),
            fmt_mb(m.fetch_mb_per_s),
            fmt_ms(m.publish_p50_ms),
            fmt_ms(m.publish_p99_ms),
            fmt_ms(m.publish_p999_ms),
            fmt_ms(m.e2e_p99_ms),
            t.runs
                .iter()
                .map(|r| r.errors)
                .fold(0u64, u64::saturating_add)
                .to_string(),
            fmt_per_gb(Some(m.cpu_per_gb)),
            fmt_x(Some(m.over_floor)),
            fmt_per_gb(Some(m.tool_per_gb)),
        ];
        if any_verify {
            // Totals over rounds: a single lost message in any round matters.
            let sum = |f: fn(&crate::result::VerifySummary) -> u64| {
                let vs: Vec<u64> = t
                    .runs
                    .iter()
                    .filter_map(|r| r.verify.as_ref().map(f))
                    .collect();
                if vs.is_empty() {
                    "-".to_string()
                } else {
                    vs.into_iter().fold(0u64, u64::saturating_add).to_string()
                }
            };
            row.extend([
                sum(|v| v.lost),
                sum(|v| v.duplicated),
                sum(|v| v.reordered),
                sum(|v| v.ledger.errors()),
            ]);
        }
        table.row(row);
    }
    blocks.push(Block::Table(table));

    let base = &medians[0];
    let mut ratios = Table::new(
        format!(
            "relative to {} (throughput: higher is better; latency: lower is better)",
            names[0]
        ),
        &[
            "target",
            "records/s",
            "MB/s",
            "fetch MB/s",
            "publish p50",
            "publish p99",
            "publish p99.9",
            "e2e p99",
            "CPU/GB",
        ],
    );
    for (t, m) in targets.iter().zip(&medians) {
        ratios.row(vec![
            t.name.to_string(),
            fmt_ratio(m.records_per_s, base.records_per_s),
            fmt_ratio(m.mb_per_s, base.mb_per_s),
            fmt_ratio(m.fetch_mb_per_s, base.fetch_mb_per_s),
            fmt_ratio(m.publish_p50_ms, base.publish_p50_ms),
            fmt_ratio(m.publish_p99_ms, base.publish_p99_ms),
            fmt_ratio(m.publish_p999_ms, base.publish_p999_ms),
            fmt_ratio(m.e2e_p99_ms, base.e2e_p99_ms),
            fmt_ratio(m.cpu_per_gb, base.cpu_per_gb),
        ]);
    }
    blocks.push(Block::Table(ratios));

    blocks.push(Block::Heading("rounds".into()));
    let rounds = targets.iter().map(|t| t.runs.len()).max().unwrap_or(0);
    for round in 0..rounds {
        let parts: Vec<String> = targets
            .iter()
            .filter_map(|t| t.runs.get(round).map(|r| (t.name, r)))
            .map(|(name, r)| {
                let cpu = match target_per_gb(r) {
                    Some(v) => format!(
                        " CPU-s/GB {} (x floor {})",
                        fmt_per_gb(Some(v)),
                        fmt_x(target_over_floor(r))
                    ),
                    None => String::new(),
                };
                format!(
                    "{name} {} records/s {} MB/s publish p99 {} ms e2e p99 {} ms errors {}{cpu}",
                    fmt_rate(r.produce_records_per_s),
                    fmt_mb(r.produce_mb_per_s),
                    fmt_ms(r.publish_latency.p99_ms),
                    fmt_ms(r.e2e_latency.p99_ms),
                    r.errors
                )
            })
            .collect();
        blocks.push(Block::Line(format!(
            "  round {}: {}",
            round + 1,
            parts.join("; ")
        )));
        // A run with a window whose p99 grew says which stage grew (the first line, the
        // median, and "nothing grew" are left to the run's own report).
        for t in &targets {
            if let Some(r) = t.runs.get(round) {
                for line in crate::windows::explain(&r.timeline).into_iter().skip(1) {
                    if line.contains("window ending") {
                        blocks.push(Block::Line(format!("    {}:{line}", t.name)));
                    }
                }
            }
        }
    }
    blocks
}

// ---------------------------------------------------------------------------------------------
// HTML and SVG

/// Escapes text for HTML element content and quoted attribute values alike.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

const CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;background:#fafafa;color:#222}
main{max-width:1100px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 12px}
h2{font-size:17px;margin:28px 0 8px}
p{margin:4px 0;font-size:14px;line-height:1.45}
table{border-collapse:collapse;margin:14px 0;font-size:13px;background:#fff;box-shadow:0 0 0 1px #ddd}
caption{text-align:left;font-weight:600;padding:4px 0;font-size:14px}
th,td{padding:4px 10px;border-bottom:1px solid #eee;white-space:nowrap}
thead th{background:#f0f0f0;text-align:right;font-weight:600}
thead th:first-child,tbody th{text-align:left}
tbody th{font-weight:500}
td{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:nth-child(even){background:#f8f8f8}
svg{display:block;width:100%;max-width:980px;height:auto;background:#fff;box-shadow:0 0 0 1px #ddd;margin:8px 0}
svg text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
";

fn html_page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        esc(title)
    )
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line of a plot, in data coordinates (x already transformed for the axis kind).
struct Series {
    name: String,
    color: usize,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// Largest percentile x the plot shows: 1/(1-p) = 10^6, i.e. 99.9999%.
const PERCENTILE_DECADES_MAX: f64 = 6.0;

/// The percentile plot's x: log10(1/(1-p)), so 90% is 1, 99% is 2, 99.9% is 3, …
/// 100% (the maximum) would be infinite and is drawn at the plot's right end.
fn percentile_x(percentile: f64) -> f64 {
    let p = if percentile.is_nan() {
        0.0
    } else {
        percentile.clamp(0.0, 100.0)
    };
    let tail = (1.0 - p / 100.0).max(10f64.powf(-PERCENTILE_DECADES_MAX));
    -tail.log10()
}

fn or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

impl Series {
    fn percentiles(name: &str, color: usize, dashed: bool, points: &[PercentilePoint]) -> Series {
        Series {
            name: name.to_string(),
            color,
            dashed,
            points: points
                .iter()
                .map(|p| (percentile_x(p.percentile), or_zero(p.latency_ms)))
                .collect(),
        }
    }

    fn timeline(
        name: &str,
        color: usize,
        dashed: bool,
        points: &[TimelinePoint],
        y: fn(&TimelinePoint) -> f64,
    ) -> Series {
        Series {
            name: name.to_string(),
            color,
            dashed,
            points: points
                .iter()
                .map(|p| (or_zero(p.t_s), or_zero(y(p))))
                .collect(),
        }
    }
}

#[derive(Clone, Copy)]
enum XAxis {
    /// x is log10(1/(1-p)); ticks at 0%, 90%, 99%, …
    Percentile,
    /// x is seconds, linear.
    Seconds,
}

/// The data maximum an axis must reach; an axis with no positive data spans 0..1.
fn axis_max(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    }
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about five intervals up to `max`.
fn nice_step(max: f64) -> f64 {
    let max = axis_max(max);
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Ticks 0, step, 2·step, … up to the first at or above `max` (at most 12).
fn nice_ticks(max: f64) -> Vec<f64> {
    let max = axis_max(max);
    let step = nice_step(max);
    let mut ticks = vec![0.0];
    for i in 1..=12 {
        let v = step * i as f64;
        ticks.push(v);
        if v >= max * (1.0 - 1e-9) {
            break;
        }
    }
    ticks
}

fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()).clamp(0.0, 6.0) as usize
    };
    format!("{v:.decimals$}")
}

const PERCENTILE_LABELS: [&str; 7] = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"];

// Plot geometry, in SVG user units.
const SVG_W: f64 = 960.0;
const PLOT_LEFT: f64 = 80.0;
const PLOT_RIGHT: f64 = 930.0;
const PLOT_TOP: f64 = 44.0;
const PLOT_BOTTOM: f64 = 364.0;
const LEGEND_TOP: f64 = 420.0;
const LEGEND_ROW: f64 = 22.0;
/// Rough width of one character of 13px text, for laying out the legend.
const CHAR_W: f64 = 7.5;

/// An SVG line plot with axes, grid, ticks, axis labels and a legend under the x axis.
fn svg_plot(title: &str, x_axis: XAxis, y_label: &str, series: &[Series]) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let y_max = all().map(|p| p.1).fold(0.0f64, f64::max);
    let x_data_max = all().map(|p| p.0).fold(0.0f64, f64::max);
    let x_min = match x_axis {
        XAxis::Percentile => 0.0,
        XAxis::Seconds => all().map(|p| p.0).fold(0.0f64, f64::min),
    };
    let (x_ticks, x_labels): (Vec<f64>, Vec<String>) = match x_axis {
        XAxis::Percentile => {
            let decades = x_data_max.ceil().clamp(5.0, PERCENTILE_DECADES_MAX) as usize;
            (0..=decades)
                .map(|d| (d as f64, PERCENTILE_LABELS[d].to_string()))
                .unzip()
        }
        XAxis::Seconds => {
            let step = nice_step(x_data_max);
            nice_ticks(x_data_max)
                .into_iter()
                .map(|t| (t, fmt_tick(t, step)))
                .unzip()
        }
    };
    let x_max = x_ticks.last().copied().unwrap_or(1.0).max(x_min + 1e-9);
    let y_ticks = nice_ticks(y_max);
    let y_step = nice_step(y_max);
    let y_top = y_ticks.last().copied().unwrap_or(1.0);

    let sx = |x: f64| PLOT_LEFT + (x - x_min) / (x_max - x_min) * (PLOT_RIGHT - PLOT_LEFT);
    let sy = |y: f64| PLOT_BOTTOM - (y.clamp(0.0, y_top) / y_top) * (PLOT_BOTTOM - PLOT_TOP);

    // Legend layout: entries left to right, wrapping at the plot's width.
    let mut legend = Vec::new();
    let (mut lx, mut ly) = (PLOT_LEFT, LEGEND_TOP);
    for s in series {
        let w = 34.0 + CHAR_W * s.name.chars().count() as f64 + 24.0;
        if lx > PLOT_LEFT && lx + w > PLOT_RIGHT {
            lx = PLOT_LEFT;
            ly += LEGEND_ROW;
        }
        legend.push((lx, ly));
        lx += w;
    }
    let height = if series.is_empty() {
        LEGEND_TOP
    } else {
        ly + LEGEND_ROW
    };

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {SVG_W} {height}\" \
         width=\"{SVG_W}\" height=\"{height}\" role=\"img\" aria-label=\"{}\">",
        esc(title)
    );
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"600\" text-anchor=\"middle\">{}</text>",
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        esc(title)
    );

    // Grid and ticks.
    svg.push_str("<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
    for &t in &y_ticks {
        let y = sy(t);
        let _ = writeln!(
            svg,
            "<line x1=\"{PLOT_LEFT}\" y1=\"{y:.1}\" x2=\"{PLOT_RIGHT}\" y2=\"{y:.1}\"/>"
        );
    }
    for &t in &x_ticks {
        let x = sx(t);
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{PLOT_TOP}\" x2=\"{x:.1}\" y2=\"{PLOT_BOTTOM}\"/>"
        );
    }
    svg.push_str("</g>\n");
    let _ = writeln!(
        svg,
        "<rect x=\"{PLOT_LEFT}\" y=\"{PLOT_TOP}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
        PLOT_RIGHT - PLOT_LEFT,
        PLOT_BOTTOM - PLOT_TOP
    );
    svg.push_str("<g font-size=\"12\" fill=\"#444\">\n");
    for &t in &y_ticks {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            PLOT_LEFT - 8.0,
            sy(t) + 4.0,
            esc(&fmt_tick(t, y_step))
        );
    }
    for (&t, label) in x_ticks.iter().zip(&x_labels) {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            sx(t),
            PLOT_BOTTOM + 18.0,
            esc(label)
        );
    }
    svg.push_str("</g>\n");
    let x_label = match x_axis {
        XAxis::Percentile => "percentile",
        XAxis::Seconds => "seconds",
    };
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" font-size=\"13\" text-anchor=\"middle\">{x_label}</text>",
        (PLOT_LEFT + PLOT_RIGHT) / 2.0,
        PLOT_BOTTOM + 40.0
    );
    let mid_y = (PLOT_TOP + PLOT_BOTTOM) / 2.0;
    let _ = writeln!(
        svg,
        "<text x=\"22\" y=\"{mid_y}\" font-size=\"13\" text-anchor=\"middle\" \
         transform=\"rotate(-90 22 {mid_y})\">{}</text>",
        esc(y_label)
    );

    // Data.
    let mut drawn = 0;
    for s in series {
        if s.points.is_empty() {
            continue;
        }
        drawn += 1;
        let color = COLORS[s.color % COLORS.len()];
        let dash = if s.dashed {
            " stroke-dasharray=\"7 4\""
        } else {
            ""
        };
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-linejoin=\"round\"{dash} points=\"{}\"><title>{}</title></polyline>",
            points.join(" "),
            esc(&s.name)
        );
        if let [(x, y)] = s.points[..] {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                sx(x),
                sy(y)
            );
        }
    }
    if drawn == 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{mid_y}\" font-size=\"14\" fill=\"#888\" text-anchor=\"middle\">no data</text>",
            (PLOT_LEFT + PLOT_RIGHT) / 2.0
        );
    }

    // Legend.
    svg.push_str("<g font-size=\"13\" fill=\"#222\">\n");
    for (s, &(x, y)) in series.iter().zip(&legend) {
        let color = COLORS[s.color % COLORS.len()];
        let dash = if s.dashed {
            " stroke-dasharray=\"7 4\""
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"3\"{dash}/>",
            x + 26.0
        );
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 32.0,
            y + 4.5,
            esc(&s.name)
        );
    }
    svg.push_str("</g>\n</svg>\n");
    svg
}

/// The offset checker's table: acknowledgements by acks level, reads, what is counted apart
/// and each kind of error, then its first examples.
fn ledger_blocks(l: &LedgerReport) -> Vec<Block> {
    let mut t = Table::new(
        "verify offsets (partition, offset of every ack and read)",
        &[
            "",
            "acked all/1/0",
            "no offset",
            "read",
            "lost acks=1",
            "unacked read",
            "errors",
        ],
    );
    t.row(vec![
        "records".into(),
        format!("{}/{}/{}", l.acked_all, l.acked_one, l.acked_none),
        l.acked_offset_unknown.to_string(),
        l.read.to_string(),
        l.lost_acks_one.to_string(),
        l.unacknowledged_read.to_string(),
        l.errors().to_string(),
    ]);
    let mut blocks = vec![Block::Table(t)];
    if l.errors() > 0 {
        blocks.push(Block::Line(format!(
            "offset errors: lost acks=all {}, two records at one offset {}, duplicated {}, \
             changed {}, gone {}, misplaced {}, untracked {}",
            l.lost_acks_all,
            l.offset_conflicts,
            l.duplicated,
            l.changed,
            l.gone,
            l.misplaced,
            l.untracked
        )));
    }
    for e in &l.examples {
        blocks.push(Block::Line(format!("  e.g. {e}")));
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{ProbeResult, TargetCpu, VerifySummary};

    fn latency(p50: f64, p99: f64) -> LatencySummary {
        LatencySummary {
            count: 1000,
            mean_ms: p50 * 1.1,
            p50_ms: p50,
            p90_ms: p50 * 1.5,
            p99_ms: p99,
            p999_ms: p99 * 2.0,
            p9999_ms: p99 * 3.0,
            max_ms: p99 * 4.0,
        }
    }

    fn percentiles(n: usize, scale: f64) -> Vec<PercentilePoint> {
        (0..n)
            .map(|i| {
                let percentile = 100.0 * (1.0 - 0.5f64.powi(i as i32));
                PercentilePoint {
                    percentile,
                    latency_ms: scale * (1.0 + i as f64 * 0.3),
                }
            })
            .collect()
    }

    fn timeline(n: usize, mb: f64) -> Vec<TimelinePoint> {
        (0..n)
            .map(|i| TimelinePoint {
                t_s: (i + 1) as f64,
                produce_records_per_s: mb * 1000.0,
                produce_mb_per_s: mb + (i % 3) as f64,
                consume_records_per_s: mb * 990.0,
                consume_mb_per_s: mb - 1.0 + (i % 2) as f64,
                publish_p99_ms: 2.0,
                ..TimelinePoint::default()
            })
            .collect()
    }

    fn run(target: &str, mb: f64, p99: f64) -> RunResult {
        RunResult {
            target: target.to_string(),
            bootstrap: "127.0.0.1:9092".into(),
            security: "PLAINTEXT".into(),
            workload: WorkloadSummary {
                name: "steady".into(),
                topics: 1,
                partitions_per_topic: 16,
                message_size: 1024,
                producers_per_topic: 2,
                consumers_per_topic: 1,
                acks: -1,
                compression: "lz4".into(),
                batch_size: 16384,
                linger_ms: 5,
                target_rate: 0,
                warmup_s: 5.0,
                duration_s: 60.0,
                ..Default::default()
            },
            started_unix_ms: 1_700_000_000_000,
            measured_s: 60.0,
            produced_records: 6_000_000,
            produced_bytes: 6_144_000_000,
            consumed_records: 5_999_000,
            consumed_bytes: 6_142_976_000,
            produce_records_per_s: mb * 1000.0,
            produce_mb_per_s: mb,
            consume_records_per_s: mb * 990.0,
            consume_mb_per_s: mb * 0.99,
            fetched_records: 5_999_000,
            fetched_bytes: 6_142_976_000,
            fetch_mb_per_s: mb * 0.99,
            errors: 0,
            error_samples: vec![],
            publish_latency: latency(1.25, p99),
            e2e_latency: latency(2.5, p99 * 2.0),
            publish_percentiles: percentiles(20, p99 / 4.0),
            e2e_percentiles: percentiles(17, p99 / 2.0),
            timeline: timeline(30, mb),
            verify: None,
            shards: None,
            probe: None,
            machine_cores: 16,
            tool_cpu_s: 4.0,
            tool_cpu_user_s: 3.0,
            tool_cpu_system_s: 1.0,
            tool_threads: 1,
            target_cpu: None,
        }
    }

    fn full_run() -> RunResult {
        let mut r = run("keel", 102.4, 7.5);
        r.errors = 5;
        r.error_samples = (1..=5).map(|i| format!("error number {i}")).collect();
        r.verify = Some(VerifySummary {
            acked: 1000,
            consumed: 998,
            lost: 2,
            duplicated: 3,
            reordered: 4,
            ledger: LedgerReport {
                acked_all: 1000,
                acked_one: 17,
                read: 1012,
                lost_acks_one: 5,
                gone: 1,
                examples: vec![
                    "gone: 0#9 read at 0/0@9; reader 1's pass found nothing there".into(),
                ],
                ..Default::default()
            },
        });
        r.shards = Some(vec![
            ShardDelta {
                shard: 0,
                requests: 1111,
                bytes_in: 2222,
                bytes_out: 3333,
                cross_shard_hops: 44,
                partitions_owned: 8,
                busy_s: 30.0,
                ..Default::default()
            },
            ShardDelta {
                shard: 1,
                requests: 5555,
                bytes_in: 6666,
                bytes_out: 7777,
                cross_shard_hops: 88,
                partitions_owned: 8,
                busy_s: 15.0,
                ..Default::default()
            },
        ]);
        r.probe = Some(ProbeResult {
            dir: "/data".into(),
            disk_write_mb_per_s: 409.6,
            fdatasync: latency(0.5, 2.5),
            loopback_mb_per_s: 2048.0,
            loopback_rtt: latency(0.02, 0.05),
            floor: Some(floor()),
        });
        r.target_cpu = Some(TargetCpu {
            source: "/metrics".into(),
            // 3, 2 and 1 CPU-s per GB of the 12.286976 GB moved.
            total_s: 36.860928,
            user_s: Some(24.573952),
            system_s: Some(12.286976),
        });
        r
    }

    /// A floor of 0.5 CPU-s per GB (0.3 user, 0.2 system) over 2 GB moved.
    fn floor() -> FloorResult {
        FloorResult {
            frame_bytes: 16384,
            rate_bytes_per_s: 0,
            bytes_asked: 1_000_000_000,
            bytes_received: 1_000_000_000,
            bytes_sent_to_reader: 1_000_000_000,
            bytes_written: 1_000_000_000,
            file_bytes: 1_000_000_000,
            frames: 61036,
            commits: 12000,
            elapsed_s: 4.0,
            core: Some(1),
            user_s: 0.6,
            system_s: 0.4,
            io_worker_s: 0.1,
            time_limited: false,
        }
    }

    fn compare(runs: Vec<RunResult>) -> CompareResult {
        let workload = runs.first().map(|r| r.workload.clone()).unwrap_or_default();
        CompareResult {
            workload,
            rounds: 3,
            runs,
            probe: None,
            machine_cores: 16,
        }
    }

    /// Point counts of every `<polyline ... points="...">`, in document order.
    fn polyline_point_counts(html: &str) -> Vec<usize> {
        html.split("<polyline")
            .skip(1)
            .map(|rest| {
                let start = rest.find("points=\"").unwrap() + "points=\"".len();
                let end = start + rest[start..].find('"').unwrap();
                rest[start..end].split_whitespace().count()
            })
            .collect()
    }

    fn assert_balanced_svg(html: &str, plots: usize) {
        assert_eq!(html.matches("<svg").count(), plots, "{html}");
        assert_eq!(html.matches("</svg>").count(), plots);
        let mut depth = 0i32;
        for piece in html.split("<svg").skip(1) {
            depth += 1;
            assert!(
                piece.contains("</svg>"),
                "an <svg> is not closed before the next opens"
            );
            depth -= piece.matches("</svg>").count() as i32;
            assert_eq!(depth, 0);
        }
        for tag in [
            "html", "head", "body", "main", "table", "tbody", "thead", "g", "style",
        ] {
            let open = html.matches(&format!("<{tag}>")).count()
                + html.matches(&format!("<{tag} ")).count();
            assert_eq!(
                open,
                html.matches(&format!("</{tag}>")).count(),
                "<{tag}> unbalanced"
            );
        }
    }

    #[test]
    fn run_table_has_the_numbers() {
        let r = full_run();
        let text = run_table(&r);
        for needle in [
            "keel",
            "steady",
            "102400", // records/s
            "102.40", // produce MB/s
            "101.38", // consume MB/s
            "1.250",  // publish p50
            "7.500",  // publish p99
            "15.00",  // publish p99.9
            "22.50",  // publish p99.99
            "30.00",  // publish max
            "1.375",  // publish mean
            "errors: 5",
            "error number 1",
            "error number 3",
            "acked",
            "998",
            "1000/17/0",
            "1012",
            "gone 1",
            "e.g. gone: 0#9 read at 0/0@9",
            "1111",
            "7777",
            "88",
            "50.0%", // shard 0 busy
            "25.0%", // shard 1 busy
            "25.0%", // produce 102.4 MB/s of 409.6 MB/s disk
            "5.0%",  // of 2048 MB/s loopback
            "x3.00", // publish p99 7.5 / fdatasync p99 2.5
            "CPU per GB moved (measured phase: 12.29 GB",
            "target (/metrics)",
            "floor: one glommio core (core 1), 16384 B frames as fast as the acks allow",
            "12000 group commits",
            "io_uring workers 0.10 s of it",
            "keel-bench (1 thread(s))",
            "0.326", // keel-bench: 4 CPU-s over 12.29 GB
            "0.244", // of which user
            "0.081",
            "target CPU per GB / floor CPU per GB: x6.00",
            "CPU: broker process 0.61 cores (user 24.57 s, system 12.29 s, from /metrics)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        assert!(
            !text.contains("error number 4"),
            "only three error samples:\n{text}"
        );
        // Every table row of a block lines up: same width per column.
        let latency_rows: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("publish  ") || l.contains("end-to-end"))
            .collect();
        assert_eq!(latency_rows.len(), 2, "{text}");
        assert_eq!(latency_rows[0].len(), latency_rows[1].len(), "{text}");
    }

    /// The CPU table's row that starts with `name`, split into cells.
    fn cpu_row(text: &str, name: &str) -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name:?} row in\n{text}"));
        line[line.rfind(')').map_or(0, |i| i + 1)..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn cpu_per_gb_block_divides_and_compares_to_the_floor() {
        let r = full_run();
        let text = run_table(&r);
        assert_eq!(
            cpu_row(&text, "target ("),
            ["2.000", "1.000", "3.000", "x6.00", "0.61"],
            "{text}"
        );
        // The floor moved 2 GB with 1 CPU-s over 4 s.
        assert_eq!(
            cpu_row(&text, "floor (one core"),
            ["0.300", "0.200", "0.500", "x1.00", "0.25"],
            "{text}"
        );
        assert_eq!(
            cpu_row(&text, "keel-bench ("),
            ["0.244", "0.081", "0.326", "-", "0.07"],
            "{text}"
        );
        assert!(!text.contains("may be what limits"), "{text}");

        // The tool at 95% of its one thread: say it may be the bottleneck.
        let mut busy = full_run();
        busy.tool_cpu_s = 57.0;
        let text = run_table(&busy);
        assert!(
            text.contains("kept its 1 thread(s) 95.0% busy: the tool may be what limits"),
            "{text}"
        );
    }

    #[test]
    fn cpu_per_gb_without_bytes_target_or_floor_prints_dashes() {
        // Nothing moved: no division by zero, every per-GB figure is "-".
        let mut r = full_run();
        r.produced_bytes = 0;
        r.consumed_bytes = 0;
        let text = run_table(&r);
        assert_eq!(
            cpu_row(&text, "target ("),
            ["-", "-", "-", "-", "0.61"],
            "{text}"
        );
        assert!(
            text.contains("floor CPU per GB: - (nothing moved)"),
            "{text}"
        );
        // No target CPU: the row says so and the line says how to get it.
        let mut r = full_run();
        r.target_cpu = None;
        let text = run_table(&r);
        assert!(text.contains("target (not measured)"), "{text}");
        assert!(text.contains("--target-pid PID"), "{text}");
        // A target giving only its total: no split.
        r.target_cpu = Some(TargetCpu {
            source: "/metrics".into(),
            total_s: 36.860928,
            user_s: None,
            system_s: None,
        });
        assert_eq!(
            cpu_row(&run_table(&r), "target ("),
            ["-", "-", "3.000", "x6.00", "0.61"]
        );
        // No floor (--no-probe): no ratio.
        r.probe = None;
        let text = run_table(&r);
        assert!(text.contains("floor (not measured)"), "{text}");
        assert!(text.contains("(no floor: --no-probe"), "{text}");
        // A result written before the split: the tool's modes are unknown.
        r.tool_cpu_user_s = 0.0;
        r.tool_cpu_system_s = 0.0;
        assert_eq!(
            cpu_row(&run_table(&r), "keel-bench ("),
            ["-", "-", "0.326", "-", "0.07"]
        );
        // A floor that moved nothing has no per-GB figure and no ratio.
        let mut r = full_run();
        if let Some(f) = r.probe.as_mut().and_then(|p| p.floor.as_mut()) {
            f.bytes_received = 0;
            f.bytes_sent_to_reader = 0;
        }
        assert_eq!(
            cpu_row(&run_table(&r), "floor (one core"),
            ["-", "-", "-", "-", "0.25"]
        );
        assert_eq!(target_over_floor(&r), None);
    }

    #[test]
    fn shard_table_has_cpu_columns() {
        let mut r = full_run();
        if let Some(shards) = r.shards.as_mut() {
            shards[0].cpu_user_s = Some(12.5);
            shards[0].cpu_system_s = Some(2.25);
            shards[1].cpu_user_s = Some(1.5);
        }
        let text = run_table(&r);
        let row = |shard: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(shard))
                .unwrap_or_else(|| panic!("no shard {shard} row in {text}"))
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert!(
            text.contains("CPU user s") && text.contains("CPU sys s"),
            "{text}"
        );
        assert_eq!(row("0 ").last().map(String::as_str), Some("2.25"), "{text}");
        assert_eq!(row("1 ").last().map(String::as_str), Some("-"), "{text}");
        let all = row("all ");
        assert_eq!(&all[all.len() - 2..], ["14.00", "2.25"], "{text}");
    }

    #[test]
    fn hops_per_request_divides_and_never_by_zero() {
        assert_eq!(hops_per_request(45, 50), "0.90");
        assert_eq!(hops_per_request(0, 10), "0.00");
        assert_eq!(hops_per_request(3, 0), "-");
        let r = full_run();
        let text = run_table(&r);
        assert!(text.contains("hops/request"), "{text}");
        let shards = r.shards.as_ref().unwrap();
        let want = hops_per_request(shards[0].cross_shard_hops, shards[0].requests);
        let row0 = text
            .lines()
            .find(|l| l.trim_start().starts_with("0 "))
            .unwrap();
        let cols: Vec<&str> = row0.split_whitespace().collect();
        assert_eq!(cols[5], want, "{text}");
    }

    #[test]
    fn compare_table_has_cpu_per_gb_and_floor_ratio() {
        let with_cpu = |name: &str, cpu_per_gb: f64| {
            let mut r = full_run();
            r.target = name.into();
            r.target_cpu = Some(TargetCpu {
                source: "/proc/1/stat".into(),
                total_s: cpu_per_gb * r.bytes_moved() as f64 / 1e9,
                user_s: None,
                system_s: None,
            });
            r
        };
        let runs = vec![
            with_cpu("keel", 1.0),
            with_cpu("other", 4.0),
            with_cpu("keel", 1.5),
            with_cpu("other", 5.0),
            with_cpu("keel", 2.0),
            with_cpu("other", 6.0),
        ];
        let text = compare_table(&compare(runs));
        let has = |name: &str, cells: [&str; 3]| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap()
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(3)
                .any(|w| w == cells)
        };
        // Medians: keel 1.5 CPU-s/GB = x3 the floor's 0.5; other 5 = x10.
        assert!(has("keel ", ["1.500", "x3.00", "0.326"]), "{text}");
        assert!(has("other", ["5.000", "x10.00", "0.326"]), "{text}");
        let other_ratio = text
            .lines()
            .filter(|l| l.trim_start().starts_with("other"))
            .nth(1)
            .unwrap();
        assert!(other_ratio.trim_end().ends_with("x3.33"), "{other_ratio}");
        assert!(
            text.contains("CPU-s/GB 2.000 (x floor x4.00)"),
            "round lines: {text}"
        );
        assert!(
            text.contains("floor: one glommio core (core 1), 16384 B frames"),
            "{text}"
        );
        // Runs without CPU figures: dashes, not NaN.
        let text = compare_table(&compare(vec![run("a", 1.0, 1.0), run("b", 2.0, 2.0)]));
        assert!(!text.contains("NaN"), "{text}");
    }

    #[test]
    fn compare_table_medians_and_ratios() {
        // Two targets, three rounds, interleaved as compare runs them.
        let runs = vec![
            run("fast", 100.0, 2.0),
            run("slow", 50.0, 8.0),
            run("fast", 90.0, 4.0),
            run("slow", 45.0, 6.0),
            run("fast", 110.0, 3.0),
            run("slow", 55.0, 100.0),
        ];
        let text = compare_table(&compare(runs));
        let fast = text
            .lines()
            .find(|l| l.trim_start().starts_with("fast"))
            .unwrap();
        let slow = text
            .lines()
            .find(|l| l.trim_start().starts_with("slow"))
            .unwrap();
        // Medians: fast 100 MB/s, p99 3; slow 50 MB/s, p99 8.
        assert!(fast.contains("100.00") && fast.contains("3.000"), "{fast}");
        assert!(slow.contains("50.00") && slow.contains("8.000"), "{slow}");
        assert!(fast.contains(" 3 "), "round count: {fast}");
        let fast_ratio = text
            .lines()
            .filter(|l| l.trim_start().starts_with("fast"))
            .nth(1)
            .unwrap();
        let slow_ratio = text
            .lines()
            .filter(|l| l.trim_start().starts_with("slow"))
            .nth(1)
            .unwrap();
        assert!(fast_ratio.contains("x1.00"), "{fast_ratio}");
        assert!(!fast_ratio.contains("x0."), "{fast_ratio}");
        assert!(
            slow_ratio.contains("x0.50"),
            "throughput ratio: {slow_ratio}"
        );
        assert!(
            slow_ratio.contains("x2.67"),
            "publish p99 ratio 8/3: {slow_ratio}"
        );
        assert!(text.contains("round 1: fast"), "{text}");
        assert!(
            text.contains("round 3: fast 110000 records/s 110.00 MB/s"),
            "{text}"
        );
        assert!(
            text.contains("slow 55000 records/s 55.00 MB/s publish p99 100.00 ms"),
            "{text}"
        );
        // First-appearance order: fast before slow.
        assert!(text.find("fast").unwrap() < text.find("slow").unwrap());
        assert!(
            !text.contains("lost"),
            "no verify column without verify data"
        );
    }

    #[test]
    fn compare_table_even_rounds_and_verify() {
        let mut a1 = run("a", 100.0, 2.0);
        let mut a2 = run("a", 200.0, 4.0);
        a1.verify = Some(VerifySummary {
            lost: 1,
            duplicated: 2,
            reordered: 3,
            ledger: LedgerReport {
                lost_acks_all: 1,
                changed: 3,
                ..Default::default()
            },
            ..Default::default()
        });
        a2.verify = Some(VerifySummary {
            lost: 10,
            duplicated: 20,
            reordered: 30,
            ..Default::default()
        });
        a2.errors = 7;
        let b = run("b", 300.0, 1.0);
        let text = compare_table(&compare(vec![a1, b, a2]));
        let a = text
            .lines()
            .find(|l| l.trim_start().starts_with("a "))
            .unwrap();
        assert!(
            a.contains("150.00"),
            "median of two rounds is their mean: {a}"
        );
        assert!(
            a.contains(" 11 ") && a.contains(" 22 ") && a.contains(" 33 "),
            "{a}"
        );
        assert!(
            a.trim_end().ends_with(" 4"),
            "offset errors summed over rounds: {a}\n{text}"
        );
        assert!(a.contains(" 7 "), "errors: {a}");
        let b_ratio = text
            .lines()
            .filter(|l| l.trim_start().starts_with("b "))
            .nth(1)
            .unwrap();
        assert!(b_ratio.contains("x2.00"), "{b_ratio}");
        assert!(b_ratio.contains("x0.33"), "{b_ratio}");
    }

    #[test]
    fn html_run_has_plots_and_tables() {
        let r = full_run();
        let html = html_run(&r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert_balanced_svg(&html, 2);
        assert_eq!(polyline_point_counts(&html), vec![20, 17, 30, 30]);
        for needle in [
            "<table>", "102.40", "7.500", "99.99%", "99.999%", "90%", "seconds", "MB/s",
        ] {
            assert!(html.contains(needle), "missing {needle:?}");
        }
        assert!(!html.contains("<script"), "self-contained, no scripts");
        // The SVG namespace is the only URL: nothing is fetched.
        assert!(!html
            .replace("http://www.w3.org/2000/svg", "")
            .contains("http"));
    }

    #[test]
    fn html_compare_has_three_plots_and_escapes_names() {
        let mut evil = run("<b>&", 50.0, 8.0);
        evil.timeline = timeline(12, 50.0);
        evil.e2e_percentiles = vec![];
        let runs = vec![run("keel", 100.0, 2.0), evil, run("keel", 100.0, 3.0)];
        let html = html_compare(&compare(runs));
        assert_balanced_svg(&html, 3);
        // Publish: keel 20, evil 20; e2e: keel 17 (evil has none); throughput: 30,30,12,12.
        assert_eq!(
            polyline_point_counts(&html),
            vec![20, 20, 17, 30, 30, 12, 12]
        );
        assert!(!html.contains("<b>&"), "target name not escaped");
        assert!(html.contains("&lt;b&gt;&amp;"));
        assert!(html.contains("x0.50"));
    }

    #[test]
    fn empty_inputs_do_not_panic() {
        let r = RunResult::default();
        let text = run_table(&r);
        assert!(text.contains("errors: 0"));
        let html = html_run(&r);
        assert_balanced_svg(&html, 2);
        assert!(polyline_point_counts(&html).is_empty());
        assert!(html.contains("no data"));

        let c = CompareResult::default();
        assert!(compare_table(&c).contains("no runs"));
        let html = html_compare(&c);
        assert_balanced_svg(&html, 3);

        // Zeros and NaNs everywhere: ratios print "-", nothing panics.
        let mut z = RunResult {
            target: "z".into(),
            ..Default::default()
        };
        z.produce_mb_per_s = f64::NAN;
        z.publish_percentiles = vec![PercentilePoint {
            percentile: 100.0,
            latency_ms: f64::INFINITY,
        }];
        z.timeline = vec![TimelinePoint {
            t_s: f64::NAN,
            ..Default::default()
        }];
        z.shards = Some(vec![ShardDelta::default()]);
        z.probe = Some(ProbeResult::default());
        let text = run_table(&z);
        assert!(text.contains('-'));
        let html = html_run(&z);
        assert_eq!(polyline_point_counts(&html), vec![1, 1, 1]);
        let c = compare(vec![z.clone(), run("y", 1.0, 1.0)]);
        let _ = compare_table(&c);
        let _ = html_compare(&c);
    }

    #[test]
    fn percentile_axis_and_ticks() {
        assert_eq!(percentile_x(0.0), 0.0);
        assert!((percentile_x(90.0) - 1.0).abs() < 1e-9);
        assert!((percentile_x(99.9) - 3.0).abs() < 1e-9);
        assert!((percentile_x(100.0) - PERCENTILE_DECADES_MAX).abs() < 1e-9);
        assert_eq!(nice_ticks(7.3), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
        assert_eq!(nice_ticks(100.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let empty = nice_ticks(0.0);
        assert_eq!((empty.len(), empty[5]), (6, 1.0));
        assert_eq!(fmt_tick(0.4, 0.2), "0.4");
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0]), 2.5);
        assert!(median([]).is_nan());
        assert_eq!(fmt_ratio(50.0, 100.0), "x0.50");
        assert_eq!(fmt_ratio(1.0, 0.0), "-");
    }

    #[test]
    fn write_json_and_html() {
        let dir = tempfile::tempdir().unwrap();
        let r = full_run();
        let json = dir.path().join("r.json");
        write_json(&json, &r).unwrap();
        let back: RunResult = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        // Floats may differ in the last bit through JSON text; the structure must not.
        assert_eq!(back.target, r.target);
        assert_eq!(back.error_samples, r.error_samples);
        assert_eq!(back.shards, r.shards);
        assert_eq!(back.publish_percentiles.len(), r.publish_percentiles.len());
        let html = dir.path().join("r.html");
        write_html(&html, &html_run(&r)).unwrap();
        assert!(std::fs::read_to_string(&html).unwrap().contains("</html>"));
        assert!(write_json(&dir.path().join("no/such/dir.json"), &r).is_err());
    }

    /// Not a check: writes sample reports for a look in a browser
    /// (`KEEL_BENCH_SAMPLE_HTML=/tmp cargo test -p keel-bench --lib report::tests::sample`).
    #[test]
    fn sample_html() {
        let Some(dir) = std::env::var_os("KEEL_BENCH_SAMPLE_HTML") else {
            return;
        };
        let dir = std::path::PathBuf::from(dir);
        write_html(&dir.join("report.html"), &html_run(&full_run())).unwrap();
        std::fs::write(dir.join("report.txt"), run_table(&full_run())).unwrap();
        let mut runs = Vec::new();
        for round in 0..3 {
            let k = round as f64;
            runs.push(run("keel", 100.0 + k, 2.0 + k / 10.0));
            runs.push(run("redpanda", 80.0 + k, 3.0 + k / 10.0));
            runs.push(run("kafka <b>&", 60.0 + k, 9.0 + k / 10.0));
        }
        std::fs::write(
            dir.join("compare.txt"),
            compare_table(&compare(runs.clone())),
        )
        .unwrap();
        write_html(&dir.join("compare.html"), &html_compare(&compare(runs))).unwrap();
    }

    #[test]
    fn where_the_time_goes_names_commit_and_cpu() {
        let mut r = RunResult {
            measured_s: 10.0,
            machine_cores: 2,
            tool_cpu_s: 8.0,
            ..Default::default()
        };
        r.publish_latency.p50_ms = 7.5;
        let shards = vec![
            ShardDelta {
                shard: 0,
                busy_s: 5.0,
                produce_appends: 100,
                produce_append_s: 0.003,
                produce_commit_s: 0.4,
                ..Default::default()
            },
            ShardDelta {
                shard: 1,
                busy_s: 6.0,
                produce_appends: 100,
                produce_append_s: 0.003,
                produce_commit_s: 0.2,
                ..Default::default()
            },
        ];
        let lines = where_the_time_goes(&r, &shards).join("\n");
        assert!(
            lines.contains("validate+append 30.0 µs, commit wait 3.00 ms; publish p50 7.50 ms"),
            "{lines}"
        );
        assert!(
            lines.contains("broker shards busy 1.10 cores, keel-bench 0.80 cores, of 2"),
            "{lines}"
        );
        assert!(lines.contains("saturated"), "{lines}");
        r.tool_cpu_s = 1.0;
        let shards: Vec<ShardDelta> = shards
            .into_iter()
            .map(|s| ShardDelta { busy_s: 1.0, ..s })
            .collect();
        assert!(!where_the_time_goes(&r, &shards)
            .join("\n")
            .contains("saturated"));
    }
}
