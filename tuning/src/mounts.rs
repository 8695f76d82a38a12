//! `/proc/mounts`: which mount holds the data dir, and which block device backs it.

use std::path::Path;

use crate::host::Host;

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mount_point: String,
    pub fs_type: String,
    pub options: String,
}

/// Parses `/proc/mounts` content; malformed lines are skipped.
pub fn parse(content: &str) -> Vec<Mount> {
    content
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            Some(Mount {
                device: unescape(f.next()?),
                mount_point: unescape(f.next()?),
                fs_type: f.next()?.to_string(),
                options: f.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The kernel writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount that holds `data_dir`: the longest mount point that is a prefix of it (the last
/// such line when several mounts stack on one point, as the kernel lists them in mount order).
pub fn mount_of(host: &Host, data_dir: &Path) -> Result<Mount, String> {
    let mounts = parse(&host.read("/proc/mounts")?);
    let mut best: Option<&Mount> = None;
    for m in &mounts {
        if data_dir.starts_with(&m.mount_point)
            && best.is_none_or(|b| m.mount_point.len() >= b.mount_point.len())
        {
            best = Some(m);
        }
    }
    best.cloned()
        .ok_or_else(|| format!("no mount holds {}", data_dir.display()))
}

/// The whole-disk name under `/sys/block` backing `mount` (a partition maps to its disk).
pub fn block_device_of(host: &Host, mount: &Mount) -> Result<String, String> {
    if !mount.device.starts_with("/dev/") {
        return Err(format!(
            "{} on {} is not a block device",
            mount.device, mount.fs_type
        ));
    }
    let name = host
        .resolved_name(&mount.device)
        .ok_or_else(|| format!("cannot name the device {}", mount.device))?;
    if host.exists(format!("/sys/block/{name}")) {
        return Ok(name);
    }
    for disk in host.list("/sys/block") {
        if host.exists(format!("/sys/block/{disk}/{name}")) {
            return Ok(disk);
        }
    }
    Err(format!("{} not found under /sys/block", mount.device))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_unescapes() {
        let m = parse("/dev/sda1 /mnt/my\\040data ext4 rw,noatime 0 0\nbroken\n");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, "/mnt/my data");
        assert_eq!(m[0].fs_type, "ext4");
        assert_eq!(m[0].options, "rw,noatime");
    }
}
