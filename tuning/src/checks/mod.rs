//! The checks, in report order. Each is a plain function of a [`Host`] (and [`Needs`]) that
//! returns one [`Finding`]; none of them writes anything.

mod cpu;
mod disk;
mod fs;
mod irq;
mod kernel;
mod limits;

pub use cpu::governor;
pub use disk::{nomerges, rq_affinity, scheduler, write_cache};
pub use fs::{ballast, filesystem, mount_options};
pub use irq::{
    affinity_path as irq_affinity_path, format_cpu_list, nic as irq_nic, nvme as irq_nvme,
    parse_cpu_list, parse_interrupts, queue_irqs, spread as irq_spread,
    spread_cores as irq_spread_cores, QueueIrqs, Queues,
};
pub use kernel::{
    aio_max_nr, aio_need as kernel_aio_need, clocksource, swappiness, transparent_hugepages,
};
pub use limits::{memlock, nofile};

use crate::check::{Finding, Needs};
use crate::host::Host;

/// Every check, in the order the report prints them.
pub fn run_all(host: &Host, needs: &Needs) -> Vec<Finding> {
    let mut findings = vec![governor(host), irq_nvme(host, needs), irq_nic(host, needs)];
    findings.extend(disk::all(host, needs));
    findings.extend([
        swappiness(host),
        transparent_hugepages(host),
        clocksource(host),
        aio_max_nr(host, needs),
        memlock(host, needs),
        nofile(host, needs),
        filesystem(host, needs),
        mount_options(host, needs),
        ballast(host, needs),
    ]);
    findings
}

/// The value in brackets of a sysfs choice list (`[mq-deadline] kyber none` → `mq-deadline`),
/// or the whole content when it is a single value.
pub fn selected(content: &str) -> Option<&str> {
    match (content.find('['), content.find(']')) {
        (Some(open), Some(close)) if open < close => Some(&content[open + 1..close]),
        (None, None) if !content.is_empty() && !content.contains(char::is_whitespace) => {
            Some(content)
        }
        _ => None,
    }
}
