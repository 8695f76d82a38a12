//! Clean shutdown on SIGINT/SIGTERM.
//!
//! A dedicated thread waits for the signals (blocked in every other thread), sets one
//! process-wide flag, `shutdown_requested`, and rings a doorbell: one byte on a socket pair
//! whose reading end a shard takes ([`take_shutdown_doorbell`]) and reads with io_uring, so an
//! idle broker does not poll for signals. The broker may first do work while it still serves
//! (a controlled shutdown: its leadership moves away), then sets the second flag,
//! `stop_requested`, and tells every shard over the mesh to fire its local shutdown event,
//! which stops accept loops and idle connection reads; in-flight requests finish, then the
//! shard syncs its logs. A second signal exits at once. The shard-local side is an
//! [`crate::Event`].

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);
/// The reading end of the signal doorbell, until a shard takes it.
static DOORBELL: Mutex<Option<UnixStream>> = Mutex::new(None);

/// The reading end of the doorbell the signal thread writes one byte to per signal (`None`
/// before [`install_signal_handlers`] or once taken). A byte written before it was taken waits
/// in the socket.
pub fn take_shutdown_doorbell() -> Option<UnixStream> {
    DOORBELL.lock().ok()?.take()
}

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
    let (reader, mut writer) = UnixStream::pair()?;
    if let Ok(mut slot) = DOORBELL.lock() {
        *slot = Some(reader);
    }
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
            // A failed write leaves the reader to notice the flag at its next wake-up.
            let _ = writer.write_all(&[1]);
        })?;
    Ok(())
}
