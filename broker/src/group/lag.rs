//! Consumer lag on `/metrics`: per group, topic and partition, the committed offset and how far
//! it trails the partition's high watermark, and per group the sum and the largest of those.
//!
//! Runs on the shard that serves `/metrics` (shard 0), in two passes over the mesh:
//! 1. every shard reads the committed offsets of the groups it coordinates (those of its
//!    `__consumer_offsets` partitions that are loaded and led here, see
//!    [`GroupCoordinator::ready`](super::GroupCoordinator::ready));
//! 2. the owner shard of each partition named by a commit reads that log's high watermark,
//!    for the partitions this broker leads ([`crate::coordination::route::on_owners`]).
//!
//! Lag is `max(0, high_watermark - committed_offset)`: what a consumer resuming from its
//! commit still has to read, the number Kafka's lag tools show (they compare the committed
//! offset with ListOffsets(latest), which is the high watermark). A partition this broker does
//! not lead (another broker leads it, it has no leader, or its topic is gone) has no high
//! watermark here: its `keel_group_committed_offset` is still shown, its lag is left out, and
//! so is it from the group's sum and maximum. A negative committed offset (a client committed
//! "none") has no lag either. `keel_group_lag_sum` and `keel_group_lag_max` are shown for the
//! groups with at least one lag.
//!
//! Bounds: one scrape reports at most [`PARTITIONS_MAX`] committed partitions; the others are
//! counted in `keel_group_lag_partitions_omitted`. Every pass yields to the reactor between
//! groups (or partitions) when its time slice is spent, and no `RefCell` borrow is held
//! across a yield. If the scrape's future is dropped midway, nothing changes: it only reads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::rc::Rc;

use crate::coordination::route::{on_owners, Item};
use crate::shard::BrokerShard;
use keel_vocab::ErrorCode;

/// Committed partitions (group, topic, partition) one scrape reports at most.
pub const PARTITIONS_MAX: usize = 100_000;

/// One group's committed offsets, as its coordinator holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    pub group: String,
    /// (topic, partition, committed offset), in (topic, partition) order.
    pub offsets: Vec<(String, i32, i64)>,
}

/// What one scrape gathered: the groups in name order, and how many committed partitions
/// [`PARTITIONS_MAX`] left out.
#[derive(Debug, Default)]
struct Committed {
    groups: Vec<GroupOffsets>,
    omitted: usize,
}

/// The lag metric families, rendered in Prometheus text format.
pub async fn render_metrics(shard: &Rc<BrokerShard>) -> String {
    let committed = gather_committed(shard).await;
    let high_watermarks = gather_high_watermarks(shard, &committed.groups).await;
    let mut out = Families::default();
    for g in &committed.groups {
        out.add_group(g, &high_watermarks);
        glommio::executor().yield_if_needed().await;
    }
    out.finish(committed.omitted)
}

/// Every shard's coordinated groups, in group order, within [`PARTITIONS_MAX`].
async fn gather_committed(shard: &Rc<BrokerShard>) -> Committed {
    let mut all: BTreeMap<String, GroupOffsets> = BTreeMap::new();
    let mut omitted = 0;
    for target in 0..shard.count {
        let budget = PARTITIONS_MAX.saturating_sub(all.values().map(|g| g.offsets.len()).sum());
        let part = if target == shard.id {
            committed_on(shard, budget).await
        } else {
            match shard
                .mesh
                .call_uncounted(
                    target,
                    move |s| async move { committed_on(&s, budget).await },
                )
                .await
            {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(target, error = %e, "gathering committed offsets failed");
                    Committed::default()
                }
            }
        };
        omitted += part.omitted;
        for g in part.groups {
            // A group shows up twice only while its partition moves between shards; either
            // copy is a committed state.
            all.entry(g.group.clone()).or_insert(g);
        }
    }
    Committed {
        groups: all.into_values().collect(),
        omitted,
    }
}

/// The committed offsets of the groups this shard coordinates, at most `budget` partitions.
async fn committed_on(shard: &BrokerShard, budget: usize) -> Committed {
    let mut names: Vec<(String, i32)> = shard
        .groups
        .groups
        .borrow()
        .iter()
        .filter(|(_, g)| !g.offsets.is_empty())
        .map(|(name, g)| (name.clone(), g.partition))
        .collect();
    names.sort();
    let mut ready: HashMap<i32, bool> = HashMap::new();
    let mut out = Committed::default();
    let mut left = budget;
    for (name, p) in names {
        let coordinated = *ready
            .entry(p)
            .or_insert_with(|| super::ready(shard, p) == ErrorCode::NONE);
        if !coordinated {
            continue;
        }
        // The group may have gone (or changed) while this task yielded: read it afresh.
        let offsets: Vec<(String, i32, i64)> = match shard.groups.groups.borrow().get(&name) {
            Some(g) => {
                out.omitted += g.offsets.len().saturating_sub(left);
                g.offsets
                    .iter()
                    .take(left)
                    .map(|((topic, partition), o)| (topic.clone(), *partition, o.offset))
                    .collect()
            }
            None => Vec::new(),
        };
        left -= offsets.len();
        if !offsets.is_empty() {
            out.groups.push(GroupOffsets {
                group: name,
                offsets,
            });
        }
        glommio::executor().yield_if_needed().await;
    }
    out
}

/// The high watermark of every partition the groups name that this broker leads, read on
/// its owner shard.
async fn gather_high_watermarks(
    shard: &Rc<BrokerShard>,
    groups: &[GroupOffsets],
) -> HashMap<(String, i32), i64> {
    let wanted: BTreeSet<(&str, i32)> = groups
        .iter()
        .flat_map(|g| g.offsets.iter().map(|(t, p, _)| (t.as_str(), *p)))
        .collect();
    let items: Vec<Item<()>> = wanted
        .iter()
        .map(|&(topic, partition)| Item {
            topic: topic.to_string(),
            partition,
            payload: (),
        })
        .collect();
    let found = on_owners(None, shard, items, |_| None, high_watermarks_on_owner).await;
    wanted
        .into_iter()
        .zip(found)
        .filter_map(|((t, p), hw)| Some(((t.to_string(), p), hw?)))
        .collect()
}

/// On the owner shard: each item's high watermark, `None` where its log is not open here.
async fn high_watermarks_on_owner(
    shard: Rc<BrokerShard>,
    items: Vec<Item<()>>,
) -> Vec<Option<i64>> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let hw = shard
            .partition(&item.topic, item.partition)
            .map(|part| part.log.offsets().high_watermark.0);
        out.push(hw);
        glommio::executor().yield_if_needed().await;
    }
    out
}

/// The four per-group families, filled group by group, so each family's lines stay together
/// as the text format requires.
#[derive(Default)]
struct Families {
    committed: String,
    lag: String,
    lag_sum: String,
    lag_max: String,
}

impl Families {
    fn add_group(&mut self, g: &GroupOffsets, high_watermarks: &HashMap<(String, i32), i64>) {
        let group = escape_label_value(&g.group);
        let mut lags = Vec::new();
        for (topic, partition, committed) in &g.offsets {
            let labels = format!(
                "group=\"{group}\",topic=\"{}\",partition=\"{partition}\"",
                escape_label_value(topic)
            );
            let _ = writeln!(
                self.committed,
                "keel_group_committed_offset{{{labels}}} {committed}"
            );
            let hw = high_watermarks.get(&(topic.clone(), *partition));
            if let (Some(&hw), true) = (hw, *committed >= 0) {
                let lag = lag(hw, *committed);
                let _ = writeln!(self.lag, "keel_group_lag{{{labels}}} {lag}");
                lags.push(lag);
            }
        }
        if let Some(&max) = lags.iter().max() {
            let sum: i64 = lags.iter().fold(0i64, |s, l| s.saturating_add(*l));
            let _ = writeln!(
                self.lag_sum,
                "keel_group_lag_sum{{group=\"{group}\"}} {sum}"
            );
            let _ = writeln!(
                self.lag_max,
                "keel_group_lag_max{{group=\"{group}\"}} {max}"
            );
        }
    }

    fn finish(self, omitted: usize) -> String {
        let mut out = String::with_capacity(
            self.committed.len() + self.lag.len() + self.lag_sum.len() + self.lag_max.len() + 1024,
        );
        let mut family = |name: &str, help: &str, lines: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            out.push_str(lines);
        };
        family(
            "keel_group_committed_offset",
            "Offset a group committed for a partition (groups this broker coordinates).",
            &self.committed,
        );
        family(
            "keel_group_lag",
            "max(0, high watermark - committed offset), for partitions this broker leads.",
            &self.lag,
        );
        family(
            "keel_group_lag_sum",
            "Sum of a group's keel_group_lag.",
            &self.lag_sum,
        );
        family(
            "keel_group_lag_max",
            "Largest of a group's keel_group_lag.",
            &self.lag_max,
        );
        family(
            "keel_group_lag_partitions_omitted",
            "Committed partitions this scrape left out (over its bound of partitions).",
            &format!("keel_group_lag_partitions_omitted {omitted}\n"),
        );
        out
    }
}

/// Records a consumer resuming at `committed` has left to read below `high_watermark`.
fn lag(high_watermark: i64, committed: i64) -> i64 {
    high_watermark.saturating_sub(committed).max(0)
}

/// A label value in the text format: backslash, double quote and line feed escaped.
fn escape_label_value(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    let mut out = String::with_capacity(v.len() + 8);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(groups: &[GroupOffsets], hws: &[((&str, i32), i64)], omitted: usize) -> String {
        let hws = hws
            .iter()
            .map(|((t, p), hw)| ((t.to_string(), *p), *hw))
            .collect();
        let mut f = Families::default();
        for g in groups {
            f.add_group(g, &hws);
        }
        f.finish(omitted)
    }

    fn group(name: &str, offsets: &[(&str, i32, i64)]) -> GroupOffsets {
        GroupOffsets {
            group: name.into(),
            offsets: offsets
                .iter()
                .map(|(t, p, o)| (t.to_string(), *p, *o))
                .collect(),
        }
    }

    #[test]
    fn lag_is_the_distance_to_the_high_watermark_never_negative() {
        assert_eq!(lag(10, 4), 6);
        assert_eq!(lag(10, 10), 0);
        // A commit past the high watermark (the log was truncated): no negative lag.
        assert_eq!(lag(10, 12), 0);
        assert_eq!(lag(i64::MAX, -5), i64::MAX);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label_value("plain-group.1"), "plain-group.1");
        assert_eq!(escape_label_value(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label_value("line\nfeed"), "line\\nfeed");
    }

    #[test]
    fn renders_each_family_together_and_leaves_out_unknown_watermarks() {
        let text = render(
            &[
                group("a", &[("t", 0, 3), ("t", 1, 7), ("gone", 0, 5)]),
                group("b\"x", &[("t", 0, 9), ("t", 2, -1)]),
                group("only-elsewhere", &[("gone", 0, 1)]),
            ],
            &[(("t", 0), 10), (("t", 1), 7), (("t", 2), 4)],
            2,
        );
        let expected = "\
# HELP keel_group_committed_offset Offset a group committed for a partition (groups this broker coordinates).
# TYPE keel_group_committed_offset gauge
keel_group_committed_offset{group=\"a\",topic=\"t\",partition=\"0\"} 3
keel_group_committed_offset{group=\"a\",topic=\"t\",partition=\"1\"} 7
keel_group_committed_offset{group=\"a\",topic=\"gone\",partition=\"0\"} 5
keel_group_committed_offset{group=\"b\\\"x\",topic=\"t\",partition=\"0\"} 9
keel_group_committed_offset{group=\"b\\\"x\",topic=\"t\",partition=\"2\"} -1
keel_group_committed_offset{group=\"only-elsewhere\",topic=\"gone\",partition=\"0\"} 1
# HELP keel_group_lag max(0, high watermark - committed offset), for partitions this broker leads.
# TYPE keel_group_lag gauge
keel_group_lag{group=\"a\",topic=\"t\",partition=\"0\"} 7
keel_group_lag{group=\"a\",topic=\"t\",partition=\"1\"} 0
keel_group_lag{group=\"b\\\"x\",topic=\"t\",partition=\"0\"} 1
# HELP keel_group_lag_sum Sum of a group's keel_group_lag.
# TYPE keel_group_lag_sum gauge
keel_group_lag_sum{group=\"a\"} 7
keel_group_lag_sum{group=\"b\\\"x\"} 1
# HELP keel_group_lag_max Largest of a group's keel_group_lag.
# TYPE keel_group_lag_max gauge
keel_group_lag_max{group=\"a\"} 7
keel_group_lag_max{group=\"b\\\"x\"} 1
# HELP keel_group_lag_partitions_omitted Committed partitions this scrape left out (over its bound of partitions).
# TYPE keel_group_lag_partitions_omitted gauge
keel_group_lag_partitions_omitted 2
";
        assert_eq!(text, expected);
    }

    #[test]
    fn no_groups_renders_empty_families() {
        let text = render(&[], &[], 0);
        assert!(text.contains("# TYPE keel_group_lag gauge\n"));
        assert!(text.ends_with("keel_group_lag_partitions_omitted 0\n"));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 1);
    }
}
