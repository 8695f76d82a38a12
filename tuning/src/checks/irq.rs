//! IRQ affinity of the NVMe and NIC queues against the shard cores. A queue interrupt that may
//! fire on every shard core steals time from whichever shard it hits; all queues on one core
//! make that core the bottleneck for every completion. Reads `/proc/interrupts` to find the
//! queues by name and `/proc/irq/<n>/smp_affinity_list` for where each may fire.

use std::collections::BTreeSet;

use crate::check::{Finding, Needs, Status};
use crate::host::Host;

const WANT: &str = "each queue IRQ on one core, spread over cores, not on every shard core";

/// The devices whose queue interrupts are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queues {
    Nvme,
    Nic,
}

impl Queues {
    /// The check's name: `irq.nvme`, `irq.nic`.
    pub fn check(self) -> &'static str {
        match self {
            Queues::Nvme => "irq.nvme",
            Queues::Nic => "irq.nic",
        }
    }

    /// True when an interrupt named `name` (last column of `/proc/interrupts`) is one of these
    /// queues: `nvme0q3`; `virtio2-input.0` (virtio-net, not `virtio4-input` of virtio-rng),
    /// `eth0-TxRx-1`, `ens5-rx-0`, `mlx5_comp3@pci:...`.
    pub fn matches(self, name: &str) -> bool {
        match self {
            Queues::Nvme => name.starts_with("nvme"),
            Queues::Nic => {
                let virtio_net = name.strip_prefix("virtio").is_some_and(|rest| {
                    rest.split_once('-').is_some_and(|(n, queue)| {
                        n.bytes().all(|b| b.is_ascii_digit())
                            && (queue.starts_with("input.") || queue.starts_with("output."))
                    })
                });
                virtio_net
                    || ["eth", "ens", "enp", "eno", "mlx"]
                        .iter()
                        .any(|p| name.starts_with(p))
            }
        }
    }
}

/// `(irq number, name)` of every numbered line of `/proc/interrupts` (skips `NMI:`, `LOC:`...).
pub fn parse_interrupts(content: &str) -> Vec<(u64, String)> {
    content
        .lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq = irq.parse::<u64>().ok()?;
            let name = rest.split_whitespace().last()?;
            Some((irq, name.to_string()))
        })
        .collect()
}

/// A cpu list as the kernel writes it (`0-3,8,10-11`); `None` when malformed.
pub fn parse_cpu_list(list: &str) -> Option<BTreeSet<u64>> {
    let mut cpus = BTreeSet::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (lo.parse::<u64>().ok()?, hi.parse::<u64>().ok()?);
                if lo > hi || hi - lo > 65536 {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => {
                cpus.insert(part.parse().ok()?);
            }
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// A cpu set as the kernel writes a cpu list: `0-3,8,10-11`.
pub fn format_cpu_list(cpus: impl IntoIterator<Item = u64>) -> String {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    let mut sorted: Vec<u64> = cpus.into_iter().collect();
    sorted.sort_unstable();
    sorted.dedup();
    for cpu in sorted {
        match ranges.last_mut() {
            Some((_, hi)) if *hi + 1 == cpu => *hi = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    let parts: Vec<String> = ranges
        .into_iter()
        .map(|(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect();
    parts.join(",")
}

pub fn nvme(host: &Host, needs: &Needs) -> Finding {
    affinity(host, needs, Queues::Nvme)
}

pub fn nic(host: &Host, needs: &Needs) -> Finding {
    affinity(host, needs, Queues::Nic)
}

/// The queue IRQs of one kind, as `/proc/interrupts` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueIrqs {
    /// How many lines name a queue of this kind, affinity readable or not.
    pub named: usize,
    /// `(irq, cpus it may fire on)` of each whose `smp_affinity_list` reads; never empty.
    pub placed: Vec<(u64, BTreeSet<u64>)>,
}

/// The queue IRQs of `queues` and where each may fire, or why there are none to look at.
pub fn queue_irqs(host: &Host, queues: Queues) -> Result<QueueIrqs, String> {
    let content = host.read("/proc/interrupts")?;
    let irqs: Vec<u64> = parse_interrupts(&content)
        .into_iter()
        .filter(|(_, name)| queues.matches(name))
        .map(|(irq, _)| irq)
        .collect();
    if irqs.is_empty() {
        return Err("no queue IRQs in /proc/interrupts".to_string());
    }
    let placed: Vec<(u64, BTreeSet<u64>)> = irqs
        .iter()
        .filter_map(|irq| {
            let list = host.read(affinity_path(*irq)).ok()?;
            Some((*irq, parse_cpu_list(&list)?))
        })
        .collect();
    if placed.is_empty() {
        return Err(format!(
            "{} queue IRQs, no readable smp_affinity_list",
            irqs.len()
        ));
    }
    Ok(QueueIrqs {
        named: irqs.len(),
        placed,
    })
}

/// The file that says where IRQ `irq` may fire.
pub fn affinity_path(irq: u64) -> String {
    format!("/proc/irq/{irq}/smp_affinity_list")
}

/// The cores `--apply` spreads queue IRQs over: every core the broker may use (so a broker with
/// fewer shards than cores has only part of the interrupts land on shards), or the shard cores
/// when the allowed cores are not known.
pub fn spread_cores(host: &Host, needs: &Needs) -> Vec<u64> {
    host.allowed_cpus()
        .unwrap_or_else(|| needs.shard_cores(host))
}

/// `(irq, core)` for each queue IRQ: one core each, round-robin over `cores` starting at the
/// `next`-th, which is advanced so that a second kind continues where the first stopped rather
/// than piling onto the same first cores. Empty when `cores` is.
pub fn spread(queues: &QueueIrqs, cores: &[u64], next: &mut usize) -> Vec<(u64, u64)> {
    if cores.is_empty() {
        return Vec::new();
    }
    queues
        .placed
        .iter()
        .map(|(irq, _)| {
            let core = cores[*next % cores.len()];
            *next += 1;
            (*irq, core)
        })
        .collect()
}

fn affinity(host: &Host, needs: &Needs, queues: Queues) -> Finding {
    match queue_irqs(host, queues) {
        Ok(found) => judge(queues.check(), &needs.shard_cores(host), &found),
        Err(reason) => Finding::unknown(queues.check(), reason, WANT),
    }
}

fn judge(check: &'static str, shard_cores: &[u64], found: &QueueIrqs) -> Finding {
    let placed = &found.placed;
    let shard_cores: BTreeSet<u64> = shard_cores.iter().copied().collect();
    // With one shard, "every shard core" is any core it runs on; judge spreading only.
    let on_every_shard: Vec<u64> = placed
        .iter()
        .filter(|(_, cpus)| shard_cores.len() > 1 && shard_cores.is_subset(cpus))
        .map(|(irq, _)| *irq)
        .collect();
    let single_cores: BTreeSet<&BTreeSet<u64>> = placed.iter().map(|(_, c)| c).collect();
    let all_on_one =
        placed.len() > 1 && single_cores.len() == 1 && single_cores.iter().all(|c| c.len() == 1);
    let unread = found.named - placed.len();
    let mut current = format!("{} queue IRQs", found.named);
    if unread > 0 {
        current.push_str(&format!(" ({unread} unreadable)"));
    }
    let (status, detail) = if !on_every_shard.is_empty() {
        (
            Status::Warn,
            format!(
                "{} may fire on every shard core {} (e.g. IRQ {})",
                on_every_shard.len(),
                format_cpu_list(shard_cores),
                on_every_shard[0]
            ),
        )
    } else if all_on_one {
        let cpu = single_cores
            .iter()
            .next()
            .and_then(|c| c.first())
            .copied()
            .unwrap_or(0);
        (Status::Warn, format!("all on cpu {cpu}"))
    } else {
        (Status::Ok, "each on a subset of cores, spread".to_string())
    };
    current.push_str(": ");
    current.push_str(&detail);
    let first = placed[0].0;
    Finding::new(
        check,
        current,
        WANT,
        status,
        format!("pin each queue IRQ to one core, spread over cores: keel-tune --apply, or echo CPU > /proc/irq/{first}/smp_affinity_list (and for each other queue IRQ); stop irqbalance or ban these IRQs from it"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_names() {
        assert_eq!(
            parse_cpu_list("0-2,5\n").map(|s| s.into_iter().collect::<Vec<_>>()),
            Some(vec![0, 1, 2, 5])
        );
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(format_cpu_list([8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list([5]), "5");
        assert_eq!(format_cpu_list([]), "");
        assert!(Queues::Nic.matches("virtio2-input.0"));
        assert!(!Queues::Nic.matches("virtio4-input"));
        assert!(!Queues::Nic.matches("virtio1-req.0"));
        assert!(Queues::Nic.matches("mlx5_comp0@pci:0000:00:08.0"));
        assert!(Queues::Nvme.matches("nvme0q1"));
        let parsed = parse_interrupts(
            "           CPU0       CPU1\n 34:  1  2  PCI-MSIX-0000:00:05.0   1-edge      nvme0q1\nNMI:  0  0  Non-maskable interrupts\n",
        );
        assert_eq!(parsed, vec![(34, "nvme0q1".to_string())]);
    }
}
