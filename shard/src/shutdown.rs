//! Clean shutdown on SIGINT/SIGTERM.
//!
//! A dedicated thread waits for the signals (blocked in every other thread) and sets one
//! process-wide flag, `shutdown_requested`. The broker may first do work while it still serves
//! (a controlled shutdown: its leadership moves away), then sets the second flag,
//! `stop_requested`. Each shard polls that one from its own ticker and fires its local
//! shutdown event, which stops accept loops and idle connection reads; in-flight requests
//! finish, then the shard syncs its logs. A second signal exits at once.
//! The shard-local side is an [`crate::Event`].

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

/// True once SIGINT or SIGTERM arrived.
pub fn shutdown_requested() -> bool {
    REQUESTED.load(Ordering::Acquire)
}

/// True once the process should stop serving (after `shutdown_requested`, when what had to
/// happen before is done).
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Acquire)
}

/// Lets every shard stop serving.
pub fn request_stop() {
    STOP.store(true, Ordering::Release);
}

/// Blocks SIGINT and SIGTERM in the calling thread (and so in threads it spawns later) and
/// starts the thread that waits for them. Call before launching the executors.
pub fn install_signal_handlers() -> std::io::Result<()> {
    // SAFETY: plain libc calls on a locally owned sigset_t.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        set
    };
    std::thread::Builder::new()
        .name("keel-signals".into())
        .spawn(move || loop {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is a valid, initialised sigset_t owned by this closure.
            let rc = unsafe { libc::sigwait(&set, &mut sig) };
            if rc != 0 {
                continue;
            }
            if REQUESTED.swap(true, Ordering::AcqRel) {
                tracing::warn!(signal = sig, "second signal: exiting now");
                std::process::exit(130);
            }
            tracing::info!(signal = sig, "shutdown requested");
        })?;
    Ok(())
}
