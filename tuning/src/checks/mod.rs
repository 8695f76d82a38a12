//! The checks, in report order. Each is a plain function of a [`Host`] (and [`Needs`]) that
//! returns one [`Finding`]; none of them writes anything.

mod cpu;
mod disk;
mod fs;
mod kernel;
mod limits;

pub use cpu::governor;
pub use disk::{nomerges, rq_affinity, scheduler, write_cache};
pub use fs::filesystem;
pub use kernel::{aio_max_nr, clocksource, swappiness, transparent_hugepages};
pub use limits::{memlock, nofile};

use crate::check::{Finding, Needs};
use crate::host::Host;

/// Every check, in the order the report prints them.
pub fn run_all(host: &Host, needs: &Needs) -> Vec<Finding> {
    let mut findings = vec![governor(host)];
    findings.extend(disk::all(host, needs));
    findings.extend([
        swappiness(host),
        transparent_hugepages(host),
        clocksource(host),
        aio_max_nr(host, needs),
        memlock(host, needs),
        nofile(host, needs),
        filesystem(host, needs),
    ]);
    findings
}

/// The value in brackets of a sysfs choice list (`[mq-deadline] kyber none` → `mq-deadline`),
/// or the whole content when it is a single value.
pub(crate) fn selected(content: &str) -> Option<&str> {
    match (content.find('['), content.find(']')) {
        (Some(open), Some(close)) if open < close => Some(&content[open + 1..close]),
        (None, None) if !content.is_empty() && !content.contains(char::is_whitespace) => {
            Some(content)
        }
        _ => None,
    }
}
