//! Operating a live broker: the admin HTTP endpoint ([`admin`]), metrics ([`metrics`]),
//! CPU profiles ([`profile`]), reactor stall reports ([`stalls`]), I/O sizing from the
//! disk's measured properties ([`io_sizing`]) and host checks at start-up ([`host_checks`]).

pub mod admin;
pub mod host_checks;
pub mod io_sizing;
pub mod metrics;
pub mod profile;
pub mod stalls;

/// Writes to stdout, ignoring a closed pipe (`keel --help | head`), where print! panics.
pub(crate) fn print_quietly(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}
