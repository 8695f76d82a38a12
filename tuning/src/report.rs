//! Renders findings as an aligned table for people or as JSON for scripts.

use serde::Serialize;

use crate::apply::Change;
use crate::check::{Finding, Needs, Status};
use crate::host::Host;

const HEADERS: [&str; 5] = ["CHECK", "CURRENT", "RECOMMENDED", "STATUS", "FIX"];

/// An aligned table, one row per finding, then a summary line.
pub fn table(findings: &[Finding]) -> String {
    let rows: Vec<[&str; 5]> = findings
        .iter()
        .map(|f| {
            [
                f.check,
                f.current.as_str(),
                f.recommended.as_str(),
                f.status.as_str(),
                f.fix.as_str(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&HEADERS).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&summary(findings));
    out.push('\n');
    out
}

/// `12 checks: 8 ok, 2 warn, 0 fail, 2 unknown`.
pub fn summary(findings: &[Finding]) -> String {
    let count = |s: Status| findings.iter().filter(|f| f.status == s).count();
    format!(
        "{} checks: {} ok, {} warn, {} fail, {} unknown",
        findings.len(),
        count(Status::Ok),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Unknown)
    )
}

#[derive(Serialize)]
struct JsonReport<'a> {
    root: String,
    data_dir: String,
    shards: u64,
    /// The cores the shards run on, ascending.
    shard_cores: Vec<u64>,
    partitions: u64,
    checks: &'a [Finding],
    /// What `--apply` or `--dry-run` did; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<&'a [Change]>,
}

/// The findings with what they were measured against, as pretty JSON.
pub fn json(host: &Host, needs: &Needs, findings: &[Finding]) -> String {
    json_with_changes(host, needs, findings, None)
}

/// [`json`] with what `--apply` or `--dry-run` did.
pub fn json_with_changes(
    host: &Host,
    needs: &Needs,
    findings: &[Finding],
    changes: Option<&[Change]>,
) -> String {
    let report = JsonReport {
        root: host.root().display().to_string(),
        data_dir: needs.data_dir.display().to_string(),
        shards: needs.shards,
        shard_cores: needs.shard_cores(host),
        partitions: needs.partitions,
        checks: findings,
        changes,
    };
    // Serializing plain strings and integers cannot fail.
    serde_json::to_string_pretty(&report).unwrap_or_default()
}
