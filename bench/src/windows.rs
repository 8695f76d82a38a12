//! Which stage grew when a latency window grew. Every live interval (2 s) of a run against a
//! Keel broker with `--metrics`, the control thread reads the broker's request-stage
//! histograms (`keel_request_stage_seconds{api,stage}`: queue_wait, hop, append, flush,
//! response_write) and keel-bench's own CPU; the difference from the previous interval gives
//! each stage's mean and p99 in that window. After the run, a window whose publish p99 is more
//! than [`GROWN_FACTOR`] times the median window's is explained by the Produce stage whose mean
//! grew most against its own median, if it grew enough to matter (its p99 reaches half the
//! window's growth, or its mean grew by [`GROWN_MIN_MS`]), and by how busy the load generator
//! was then.
//!
//! Pure functions over parsed text and plain values; the scrape itself is `scrape::fetch_text`.
//! Everything read from the network is treated as hostile: unparsable lines are skipped, counts
//! that go backwards (a restarted broker) give an empty window.

use std::collections::BTreeMap;

use crate::result::{StageWindow, TimelinePoint};

/// A window is "grown" when its publish p99 exceeds this many times the median window's ...
pub const GROWN_FACTOR: f64 = 2.0;
/// ... and the median by at least this much (so 0.3 ms against 0.1 ms is not news).
pub const GROWN_MIN_MS: f64 = 5.0;

/// One stage's cumulative histogram as a broker reported it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageHist {
    pub count: u64,
    pub sum_s: f64,
    /// (upper bound in seconds, cumulative count), ascending; `+Inf` is `f64::INFINITY`.
    pub buckets: Vec<(f64, u64)>,
}

/// (api, stage) -> its histogram, from one /metrics text.
pub type Stages = BTreeMap<(String, String), StageHist>;

/// Parses the `keel_request_stage_seconds` histogram families out of Prometheus text.
pub fn parse_stages(text: &str) -> Stages {
    let mut out = Stages::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("keel_request_stage_seconds_") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        if !value.is_finite() || value < 0.0 {
            continue;
        }
        let (Some(api), Some(stage)) = (label(labels, "api"), label(labels, "stage")) else {
            continue;
        };
        let h = out.entry((api.to_string(), stage.to_string())).or_default();
        match kind {
            "count" => h.count = value as u64,
            "sum" => h.sum_s = value,
            "bucket" => {
                let le = match label(labels, "le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(v) => match v.parse::<f64>() {
                        Ok(b) if b >= 0.0 => b,
                        _ => continue,
                    },
                    None => continue,
                };
                h.buckets.push((le, value as u64));
            }
            _ => {}
        }
    }
    for h in out.values_mut() {
        h.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// `key="value"` out of a label list (values without quotes or commas, as Keel writes them).
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// What each stage did between two readings. Stages with no requests in the window, and any
/// whose counters went backwards, are left out.
pub fn window(before: &Stages, after: &Stages) -> Vec<StageWindow> {
    let mut out = Vec::new();
    for (key, a) in after {
        let b = before.get(key).cloned().unwrap_or_default();
        let Some(count) = a.count.checked_sub(b.count).filter(|&n| n > 0) else {
            continue;
        };
        let sum_s = (a.sum_s - b.sum_s).max(0.0);
        let want = (count as f64 * 0.99).ceil() as u64;
        let mut p99_s = 0.0;
        let mut last_finite = 0.0;
        for &(le, cum) in &a.buckets {
            let prev = b
                .buckets
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0, |&(_, c)| c);
            let in_window = cum.saturating_sub(prev);
            if le.is_finite() {
                last_finite = le;
            }
            if in_window >= want {
                p99_s = if le.is_finite() { le } else { last_finite };
                break;
            }
        }
        out.push(StageWindow {
            api: key.0.clone(),
            stage: key.1.clone(),
            count,
            mean_ms: sum_s * 1e3 / count as f64,
            p99_ms: p99_s * 1e3,
        });
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Report lines: the median window's p99, and for each grown window the Produce stage whose
/// mean grew most against its median over the run, and the load generator's cores then.
pub fn explain(timeline: &[TimelinePoint]) -> Vec<String> {
    let p99s: Vec<f64> = timeline.iter().map(|p| p.publish_p99_ms).collect();
    if p99s.len() < 2 {
        return Vec::new();
    }
    let med = median(p99s);
    let tool_med = median(timeline.iter().map(|p| p.tool_cores).collect());
    let stage_median = |stage: &str| {
        median(
            timeline
                .iter()
                .filter_map(|p| {
                    p.stages
                        .iter()
                        .find(|s| s.api == "Produce" && s.stage == stage)
                        .map(|s| s.mean_ms)
                })
                .collect(),
        )
    };
    let mut out = vec![format!(
        "  publish p99 per {} windows: median {med:.2} ms; keel-bench busy {tool_med:.2} cores in the median window",
        timeline.len()
    )];
    let mut grown = 0;
    for p in timeline {
        if p.publish_p99_ms <= med * GROWN_FACTOR || p.publish_p99_ms - med < GROWN_MIN_MS {
            continue;
        }
        grown += 1;
        let culprit = p
            .stages
            .iter()
            .filter(|s| s.api == "Produce")
            .map(|s| {
                let m = stage_median(&s.stage);
                let ratio = if m > 0.0 {
                    s.mean_ms / m
                } else {
                    f64::INFINITY
                };
                (s, m, ratio)
            })
            .filter(|(s, m, _)| s.mean_ms > *m)
            .max_by(|a, b| (a.0.mean_ms - a.1).total_cmp(&(b.0.mean_ms - b.1)));
        // A stage explains the window only if it grew by enough to matter: its p99 reaches half
        // the window's growth, or its mean grew by GROWN_MIN_MS. A stage whose mean rose 20%
        // with its p99 in the 10-25 ms bucket does not explain a window at 174 ms.
        let growth = p.publish_p99_ms - med;
        let stage = match culprit {
            Some((s, m, ratio)) if s.p99_ms >= growth / 2.0 || s.mean_ms - m >= GROWN_MIN_MS => {
                format!(
                    "Produce {} grew most: mean {:.2} ms (median {m:.2}, x{ratio:.1}), p99 {:.2} ms",
                    s.stage, s.mean_ms, s.p99_ms
                )
            }
            Some((s, m, _)) => format!(
                "no broker stage grew enough to explain it (the most, Produce {}: mean {:.2} ms, median {m:.2}, p99 {:.2} ms): the time went outside the broker's stages (before the request was read or after the answer was written)",
                s.stage, s.mean_ms, s.p99_ms
            ),
            None if p.stages.is_empty() => "no stage figures (needs --metrics)".to_string(),
            None => "no broker stage grew: the time went outside the broker".to_string(),
        };
        out.push(format!(
            "  window ending {:.1} s: p99 {:.2} ms (x{:.1} the median); {stage}; keel-bench busy {:.2} cores",
            p.t_s,
            p.publish_p99_ms,
            p.publish_p99_ms / med.max(1e-9),
            p.tool_cores
        ));
    }
    if grown == 0 {
        out.push(format!(
            "  no window's p99 grew past x{GROWN_FACTOR} the median (and +{GROWN_MIN_MS} ms)"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(count: u64, sum: f64, buckets: &[(&str, u64)]) -> String {
        let mut s = String::from("# HELP keel_request_stage_seconds x\n");
        for (le, n) in buckets {
            s.push_str(&format!(
                "keel_request_stage_seconds_bucket{{api=\"Produce\",stage=\"flush\",le=\"{le}\"}} {n}\n"
            ));
        }
        s.push_str(&format!(
            "keel_request_stage_seconds_sum{{api=\"Produce\",stage=\"flush\"}} {sum}\n"
        ));
        s.push_str(&format!(
            "keel_request_stage_seconds_count{{api=\"Produce\",stage=\"flush\"}} {count}\n"
        ));
        s.push_str("keel_request_latency_seconds_count{api=\"Produce\"} 99\ngarbage{ line\n");
        s
    }

    #[test]
    fn parses_stage_histograms_and_skips_the_rest() {
        let s = parse_stages(&text(10, 0.5, &[("0.001", 2), ("0.01", 9), ("+Inf", 10)]));
        assert_eq!(s.len(), 1, "{s:?}");
        let h = &s[&("Produce".to_string(), "flush".to_string())];
        assert_eq!(h.count, 10);
        assert_eq!(h.sum_s, 0.5);
        assert_eq!(h.buckets, vec![(0.001, 2), (0.01, 9), (f64::INFINITY, 10)]);
        assert!(parse_stages("keel_request_stage_seconds_count{api=\"P\"} 3\n").is_empty());
        assert!(
            parse_stages("keel_request_stage_seconds_count{api=\"P\",stage=\"x\"} -3\n").is_empty()
        );
    }

    #[test]
    fn a_window_is_the_difference_of_two_readings() {
        let a = parse_stages(&text(
            10,
            0.010,
            &[("0.001", 10), ("0.01", 10), ("+Inf", 10)],
        ));
        // 100 more requests: 98 under 1 ms, 2 between 1 and 10 ms, summing 0.2 s.
        let b = parse_stages(&text(
            110,
            0.210,
            &[("0.001", 108), ("0.01", 110), ("+Inf", 110)],
        ));
        let w = window(&a, &b);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].count, 100);
        assert!((w[0].mean_ms - 2.0).abs() < 1e-9, "{w:?}");
        assert_eq!(w[0].p99_ms, 10.0, "the 99th of 100 lies in (1, 10] ms");
        // Above every finite bound: the last finite bound.
        let c = parse_stages(&text(
            120,
            5.0,
            &[("0.001", 108), ("0.01", 110), ("+Inf", 120)],
        ));
        assert_eq!(window(&b, &c)[0].p99_ms, 10.0);
        // Counters that went backwards (a restart) and empty windows are left out.
        assert!(window(&b, &a).is_empty());
        assert!(window(&b, &b).is_empty());
    }

    fn point(t_s: f64, p99: f64, flush_ms: f64, hop_ms: f64, tool: f64) -> TimelinePoint {
        let stage = |name: &str, mean_ms: f64| StageWindow {
            api: "Produce".into(),
            stage: name.into(),
            count: 100,
            mean_ms,
            p99_ms: mean_ms * 2.0,
        };
        TimelinePoint {
            t_s,
            publish_p99_ms: p99,
            tool_cores: tool,
            stages: vec![stage("flush", flush_ms), stage("hop", hop_ms)],
            ..TimelinePoint::default()
        }
    }

    #[test]
    fn a_grown_window_names_the_stage_that_grew() {
        let timeline = vec![
            point(2.0, 20.0, 3.0, 0.1, 0.4),
            point(4.0, 21.0, 3.1, 0.1, 0.4),
            point(6.0, 400.0, 150.0, 0.2, 0.5),
            point(8.0, 19.0, 2.9, 0.1, 0.4),
            point(10.0, 22.0, 3.0, 3.0, 0.4),
        ];
        let lines = explain(&timeline);
        assert!(lines[0].contains("median 21.00 ms"), "{lines:?}");
        assert_eq!(lines.len(), 2, "one grown window: {lines:?}");
        assert!(lines[1].contains("window ending 6.0 s"), "{lines:?}");
        assert!(lines[1].contains("Produce flush grew most"), "{lines:?}");
        assert!(lines[1].contains("median 3.00"), "{lines:?}");
        // A window whose broker stages did not grow points outside the broker.
        let outside = vec![
            point(2.0, 20.0, 3.0, 0.1, 0.4),
            point(4.0, 300.0, 3.0, 0.1, 1.9),
            point(6.0, 20.0, 3.0, 0.1, 0.4),
        ];
        let lines = explain(&outside);
        assert!(lines[1].contains("outside the broker"), "{lines:?}");
        assert!(lines[1].contains("busy 1.90 cores"), "{lines:?}");
        // A stage that grew a little (mean 3.0 -> 3.6 ms, p99 7.2 ms) does not explain a
        // window 280 ms above the median: it is named, and the window pointed elsewhere.
        let slight = vec![
            point(2.0, 20.0, 3.0, 0.1, 0.4),
            point(4.0, 300.0, 3.6, 0.1, 0.4),
            point(6.0, 20.0, 3.0, 0.1, 0.4),
        ];
        let lines = explain(&slight);
        assert!(
            lines[1].contains("no broker stage grew enough"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("Produce flush: mean 3.60 ms"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("outside the broker's stages"),
            "{lines:?}"
        );
        // Nothing grew.
        let flat = vec![
            point(2.0, 20.0, 3.0, 0.1, 0.4),
            point(4.0, 30.0, 3.0, 0.1, 0.4),
        ];
        assert!(
            explain(&flat)[1].contains("no window"),
            "{:?}",
            explain(&flat)
        );
    }
}
