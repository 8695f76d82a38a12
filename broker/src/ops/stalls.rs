//! The last reactor stalls, for `/debug/stalls` and `keel profile`.
//!
//! glommio's stall detector reports a stall by logging it (its `StallDetection` is not
//! exported, so the report cannot be taken any other way): "[stall-detector -- executor N]
//! task queue Q went over-budget: D (budget: B). Backtrace: ...". [`StallLayer`] is a tracing
//! layer that recognises these events on shard threads and keeps the last [`KEPT`] of them —
//! shard, task queue, overage, budget, the first frames of Keel's own code — in a ring.
//! Stalls are rare and the ring is touched only then, so a mutex is fine.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// Stalls kept for `/debug/stalls`.
pub const KEPT: usize = 256;

#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// Increases by one per stall seen since start.
    pub seq: u64,
    pub shard: Option<usize>,
    pub queue: String,
    pub overage: Duration,
    pub budget: Duration,
    pub at_ms: u64,
    /// The innermost frames in Keel's code (`keel_*` crates), innermost first.
    pub frames: Vec<String>,
}

struct Ring {
    next_seq: u64,
    stalls: VecDeque<Stall>,
}

static RING: Mutex<Ring> = Mutex::new(Ring {
    next_seq: 1,
    stalls: VecDeque::new(),
});

/// The stalls kept, oldest first.
pub fn recent() -> Vec<Stall> {
    RING.lock()
        .map(|r| r.stalls.iter().cloned().collect())
        .unwrap_or_default()
}

fn push(mut stall: Stall) {
    if let Ok(mut r) = RING.lock() {
        stall.seq = r.next_seq;
        r.next_seq += 1;
        if r.stalls.len() == KEPT {
            r.stalls.pop_front();
        }
        r.stalls.push_back(stall);
    }
}

/// Parses glommio's stall message; `None` for any other message.
pub fn parse(message: &str, thread: Option<&str>) -> Option<Stall> {
    let rest = message.strip_prefix("[stall-detector -- executor ")?;
    let (_, rest) = rest.split_once("] task queue ")?;
    let (queue, rest) = rest.split_once(" went over-budget: ")?;
    let (overage, rest) = rest.split_once(" (budget: ")?;
    let (budget, trace) = rest.split_once(")")?;
    let frames = keel_frames(trace);
    let shard = thread.and_then(keel_shard::shard_of_thread_name);
    Some(Stall {
        seq: 0,
        shard,
        queue: queue.to_string(),
        overage: parse_duration(overage)?,
        budget: parse_duration(budget)?,
        at_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        frames,
    })
}

/// The innermost frames of Keel's own code in a backtrace as std prints it: numbered frames
/// ("   5:  0x55d0 - keel_broker::ops::admin::serve::{{closure}}::h0123"), inlined ones under them
/// without a number, each followed by its "at FILE:LINE:COL" when known. A frame is Keel's
/// when its file is in the workspace (not a registry crate, the standard library or libc);
/// each is kept as "crate/src/file.rs:LINE:COL function", innermost first.
fn keel_frames(trace: &str) -> Vec<String> {
    let mut frames: Vec<String> = Vec::new();
    let mut name: Option<&str> = None;
    for line in trace.lines().map(str::trim) {
        if let Some(at) = line.strip_prefix("at ") {
            if let (Some(n), Some(file)) = (name.take(), workspace_file(at)) {
                if frames.len() < 8 {
                    frames.push(format!("{file} {n}"));
                }
            }
            continue;
        }
        let symbol = match line.split_once(':') {
            Some((index, rest))
                if !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()) =>
            {
                rest.rsplit_once(" - ").map_or(rest, |(_, n)| n).trim()
            }
            _ => line,
        };
        // Drop the symbol hash: "::h0123456789abcdef".
        name = Some(match symbol.rsplit_once("::h") {
            Some((n, h)) if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) => n,
            _ => symbol,
        });
    }
    frames
}

/// "broker/src/ops/admin.rs:150:13" for a file of the workspace; `None` for registry crates,
/// the standard library and system libraries.
fn workspace_file(at: &str) -> Option<&str> {
    if at.contains("/.cargo/") || at.starts_with("/rustc/") || at.starts_with("./") {
        return None;
    }
    let src = at.rfind("/src/")?;
    let crate_start = at[..src].rfind('/').map_or(0, |i| i + 1);
    Some(&at[crate_start..])
}

/// Parses a `Duration`'s Debug form: "12.5ms", "3s", "250µs", "80ns".
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" | "us" => 1e-6,
        "ns" => 1e-9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(n * scale))
}

/// Renders the kept stalls as JSON, oldest first.
pub fn to_json(stalls: &[Stall]) -> String {
    let list: Vec<serde_json::Value> = stalls
        .iter()
        .map(|s| {
            serde_json::json!({
                "seq": s.seq,
                "shard": s.shard,
                "queue": s.queue,
                "overage_ms": s.overage.as_secs_f64() * 1e3,
                "budget_ms": s.budget.as_secs_f64() * 1e3,
                "at_ms": s.at_ms,
                "frames": s.frames,
            })
        })
        .collect();
    serde_json::json!({ "kept": KEPT, "stalls": list }).to_string()
}

/// Keeps glommio's stall reports (see the module docs).
pub struct StallLayer;

struct Message(String);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        }
    }
}

impl<S: Subscriber> Layer<S> for StallLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        let mut m = Message(String::new());
        event.record(&mut m);
        if let Some(stall) = parse(&m.0, std::thread::current().name()) {
            push(stall);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_glommio_stall_reports() {
        let msg = "[stall-detector -- executor 1] task queue default went over-budget: 112.345ms (budget: 100ms). Backtrace:    0:     0x55d0a1 - signal_hook_registry::register::{{closure}}::h0123456789abcdef\n   1:     0x7f5e - __GI___clock_nanosleep\n                               at ./time/../sysdeps/unix/sysv/linux/clock_nanosleep.c:48:7\n   2:     0x55d0a2 - std::thread::sleep::h0123456789abcdef\n                               at /rustc/5980/library/std/src/thread/functions.rs:289:5\n   3:     0x55d0a3 - {async_fn#0}\n                               at /work/main/broker/src/ops/admin.rs:150:13\n   4:     0x55d0a4 - run<keel::admin::serve::{async_fn_env#0}>\n                               at /root/.cargo/registry/src/index/glommio-0.9.0/src/task/raw.rs:469:20\n   5:     0x55d0a5 - keel_storage::log::Log::append::hfedcba9876543210\n                               at /work/main/storage/src/log.rs:610:9\n                           keel_storage::log::inlined\n                               at /work/main/storage/src/log.rs:700:1\n";
        let s = parse(msg, Some("keel-shard-3-4")).unwrap();
        assert_eq!(s.shard, Some(3));
        assert_eq!(s.queue, "default");
        assert_eq!(s.overage, Duration::from_micros(112_345));
        assert_eq!(s.budget, Duration::from_millis(100));
        assert_eq!(
            s.frames,
            vec![
                "broker/src/ops/admin.rs:150:13 {async_fn#0}".to_string(),
                "storage/src/log.rs:610:9 keel_storage::log::Log::append".to_string(),
                "storage/src/log.rs:700:1 keel_storage::log::inlined".to_string(),
            ]
        );
        assert_eq!(parse("something else", None), None);
        assert_eq!(parse_duration("250µs"), Some(Duration::from_micros(250)));
        assert_eq!(parse_duration("2.5s"), Some(Duration::from_millis(2500)));
        assert_eq!(parse_duration("5 parsecs"), None);
    }

    #[test]
    fn ring_keeps_the_last_stalls_in_order() {
        for i in 0..(KEPT + 5) {
            push(Stall {
                seq: 0,
                shard: Some(0),
                queue: format!("q{i}"),
                overage: Duration::from_millis(1),
                budget: Duration::from_millis(1),
                at_ms: 0,
                frames: vec![],
            });
        }
        let kept = recent();
        assert_eq!(kept.len(), KEPT);
        assert!(kept.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        assert_eq!(kept.last().unwrap().queue, format!("q{}", KEPT + 4));
    }
}
