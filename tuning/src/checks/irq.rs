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
    fn check(self) -> &'static str {
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

pub fn nvme(host: &Host, needs: &Needs) -> Finding {
    affinity(host, needs, Queues::Nvme)
}

pub fn nic(host: &Host, needs: &Needs) -> Finding {
    affinity(host, needs, Queues::Nic)
}

fn affinity(host: &Host, needs: &Needs, queues: Queues) -> Finding {
    let check = queues.check();
    let content = match host.read("/proc/interrupts") {
        Ok(c) => c,
        Err(reason) => return Finding::unknown(check, reason, WANT),
    };
    let irqs: Vec<(u64, String)> = parse_interrupts(&content)
        .into_iter()
        .filter(|(_, name)| queues.matches(name))
        .collect();
    if irqs.is_empty() {
        return Finding::unknown(check, "no queue IRQs in /proc/interrupts", WANT);
    }
    let mut placed: Vec<(u64, BTreeSet<u64>)> = Vec::new();
    for (irq, _) in &irqs {
        let list = host.read(format!("/proc/irq/{irq}/smp_affinity_list"));
        if let Some(cpus) = list.ok().as_deref().and_then(parse_cpu_list) {
            placed.push((*irq, cpus));
        }
    }
    if placed.is_empty() {
        return Finding::unknown(
            check,
            format!("{} queue IRQs, no readable smp_affinity_list", irqs.len()),
            WANT,
        );
    }
    judge(check, needs, &irqs, &placed)
}

fn judge(
    check: &'static str,
    needs: &Needs,
    irqs: &[(u64, String)],
    placed: &[(u64, BTreeSet<u64>)],
) -> Finding {
    let shard_cores: BTreeSet<u64> = needs.shard_cores().collect();
    // With one shard, "every shard core" is any core it runs on; judge spreading only.
    let on_every_shard: Vec<u64> = placed
        .iter()
        .filter(|(_, cpus)| shard_cores.len() > 1 && shard_cores.is_subset(cpus))
        .map(|(irq, _)| *irq)
        .collect();
    let single_cores: BTreeSet<&BTreeSet<u64>> = placed.iter().map(|(_, c)| c).collect();
    let all_on_one =
        placed.len() > 1 && single_cores.len() == 1 && single_cores.iter().all(|c| c.len() == 1);
    let unread = irqs.len() - placed.len();
    let mut current = format!("{} queue IRQs", irqs.len());
    if unread > 0 {
        current.push_str(&format!(" ({unread} unreadable)"));
    }
    let (status, detail) = if !on_every_shard.is_empty() {
        (
            Status::Warn,
            format!(
                "{} may fire on every shard core {}..{} (e.g. IRQ {})",
                on_every_shard.len(),
                shard_cores.first().copied().unwrap_or(0),
                shard_cores.last().copied().unwrap_or(0),
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
        format!("pin each queue IRQ to one core, spread over cores: echo CPU > /proc/irq/{first}/smp_affinity_list (and for each other queue IRQ); stop irqbalance or ban these IRQs from it"),
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
