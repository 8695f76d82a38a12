//! keel-lazyfs: a FUSE file system that keeps unsynced writes in memory and, at a simulated
//! power cut, keeps only what was synced plus a seeded subset of the rest (issue 20), the
//! approach of Jepsen's LazyFS. The real `keel` binary runs on it in the power-loss tests
//! (broker/tests/power_loss.rs); the disk model is keel-simdisk's, strict POSIX: file bytes
//! are durable after fsync/fdatasync of the file, directory entries after fsync of the
//! directory.
//!
//! ```text
//! keel-lazyfs MOUNTPOINT --seed N [--keep-per-256 K] --control SOCKET
//! ```
//! Mounts an empty file system at MOUNTPOINT (root: mount(2) on /dev/fuse, no libfuse) and
//! prints `ready`. Each connection to the Unix socket SOCKET sends one command line and gets
//! one JSON line back:
//! - `crash`: the power cut. Refused (`"ok":false`) while a process still uses the mount.
//!   Unmounts, crashes the model (synced data and entries stay; each unsynced 512-byte sector
//!   write is kept with probability K/256, default 128, drawn from the seed), remounts.
//! - `counts`: the fault counters.
//! - `fault sync-eio|write-eio PATH_PREFIX once|always`, `fault nospace BYTES`,
//!   `fault corrupt PATH SECTOR`, `fault sync-delay|write-delay PATH_PREFIX MS once|always`,
//!   `clear`: inject or clear a fault (paths from the root, without a leading slash). A
//!   delayed request is answered from its own thread after the delay; the file system goes on
//!   answering others meanwhile.
//!
//! SIGTERM or SIGINT unmounts and exits.

mod fs;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::{BackgroundSession, Config, MountOption};
use keel_simdisk::{Fault, FaultCounts, SimDisk};

struct Args {
    mountpoint: PathBuf,
    seed: u64,
    keep_per_256: u32,
    control: PathBuf,
}

fn usage() -> ! {
    eprintln!("usage: keel-lazyfs MOUNTPOINT --seed N [--keep-per-256 K] --control SOCKET");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = std::env::args().skip(1);
    let mut mountpoint = None;
    let (mut seed, mut keep_per_256, mut control) = (None, 128, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--seed" => seed = Some(value().parse().unwrap_or_else(|_| usage())),
            "--keep-per-256" => keep_per_256 = value().parse().unwrap_or_else(|_| usage()),
            "--control" => control = Some(PathBuf::from(value())),
            _ if a.starts_with('-') => usage(),
            _ if mountpoint.is_none() => mountpoint = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    match (mountpoint, seed, control) {
        (Some(mountpoint), Some(seed), Some(control)) => Args {
            mountpoint,
            seed,
            keep_per_256,
            control,
        },
        _ => usage(),
    }
}

fn mount(disk: &Arc<Mutex<SimDisk>>, at: &Path) -> std::io::Result<BackgroundSession> {
    let mut cfg = Config::default();
    cfg.mount_options = vec![
        MountOption::FSName("keel-lazyfs".into()),
        MountOption::Subtype("keel-lazyfs".into()),
        MountOption::RW,
        MountOption::DefaultPermissions,
    ];
    cfg.n_threads = Some(1);
    fuser::spawn_mount(fs::LazyFs { disk: disk.clone() }, at, &cfg)
}

/// Unmounts without detaching: fails with EBUSY while a process still has a file or its
/// working directory there, so a crash never happens under a live broker.
fn unmount(at: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(at.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path; umount2 reads it only.
    if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn counts_json(c: &FaultCounts) -> String {
    format!(
        "\"crashes\":{},\"sectors_kept\":{},\"sectors_lost\":{},\"entries_reverted\":{},\
         \"write_eio\":{},\"sync_eio\":{},\"no_space\":{},\"corrupt_reads\":{},\
         \"delays\":{},\"delayed_ms\":{}",
        c.crashes,
        c.sectors_kept,
        c.sectors_lost,
        c.entries_reverted,
        c.write_eio,
        c.sync_eio,
        c.no_space,
        c.corrupt_reads,
        c.delays,
        c.delayed_ms
    )
}

fn error_json(e: impl std::fmt::Display) -> String {
    let text = e.to_string().replace('\\', "\\\\").replace('"', "'");
    format!("{{\"ok\":false,\"error\":\"{text}\"}}")
}

fn parse_fault(words: &[&str]) -> Result<Fault, String> {
    let once = |w: &str| match w {
        "once" => Ok(true),
        "always" => Ok(false),
        _ => Err(format!("{w}: once or always")),
    };
    let number = |w: &str| w.parse::<u64>().map_err(|_| format!("{w}: not a number"));
    match words {
        ["sync-eio", prefix, when] => Ok(Fault::SyncEio {
            prefix: prefix.to_string(),
            once: once(when)?,
        }),
        ["write-eio", prefix, when] => Ok(Fault::WriteEio {
            prefix: prefix.to_string(),
            once: once(when)?,
        }),
        ["nospace", bytes] => Ok(Fault::NoSpace {
            capacity: number(bytes)?,
        }),
        [op @ ("sync-delay" | "write-delay"), prefix, ms, when] => Ok(Fault::Delay {
            prefix: prefix.to_string(),
            write: *op == "write-delay",
            ms: number(ms)?,
            once: once(when)?,
        }),
        ["corrupt", path, sector] => Ok(Fault::CorruptSector {
            path: path.to_string(),
            sector: number(sector)?,
        }),
        _ => Err(format!("unknown fault: {}", words.join(" "))),
    }
}

struct Daemon {
    disk: Arc<Mutex<SimDisk>>,
    mountpoint: PathBuf,
    session: Mutex<Option<BackgroundSession>>,
}

impl Daemon {
    fn disk(&self) -> std::sync::MutexGuard<'_, SimDisk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn command(&self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["crash"] => match self.crash() {
                Ok(c) => format!("{{\"ok\":true,{}}}", counts_json(&c)),
                Err(e) => error_json(e),
            },
            ["counts"] => format!("{{\"ok\":true,{}}}", counts_json(&self.disk().counts)),
            ["clear"] => {
                self.disk().clear_faults();
                "{\"ok\":true}".into()
            }
            ["fault", rest @ ..] => match parse_fault(rest) {
                Ok(f) => {
                    self.disk().inject(f);
                    "{\"ok\":true}".into()
                }
                Err(e) => error_json(e),
            },
            _ => error_json(format!("unknown command: {line}")),
        }
    }

    /// The power cut: unmount (refused while the mount is in use), crash the model, remount.
    fn crash(&self) -> Result<FaultCounts, String> {
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        unmount(&self.mountpoint)
            .map_err(|e| format!("unmount {}: {e}", self.mountpoint.display()))?;
        if let Some(s) = session.take() {
            // The kernel ended the connection: the session thread returns.
            let _ = s.join();
        }
        let counts = {
            let mut disk = self.disk();
            disk.crash();
            disk.counts.clone()
        };
        *session = Some(
            mount(&self.disk, &self.mountpoint).map_err(|e| format!("remount after crash: {e}"))?,
        );
        Ok(counts)
    }

    fn serve(&self, stream: UnixStream) {
        let mut line = String::new();
        let mut reader = BufReader::new(&stream);
        if reader.read_line(&mut line).is_err() {
            return;
        }
        let reply = self.command(line.trim());
        let mut out = &stream;
        let _ = writeln!(out, "{reply}");
    }
}

fn main() {
    let args = parse_args();
    // SIGTERM/SIGINT are waited for by the main thread: block them in every thread first.
    // SAFETY: plain signal-set manipulation on a zeroed sigset_t.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let disk = Arc::new(Mutex::new(SimDisk::new(args.seed, args.keep_per_256)));
    let _ = std::fs::remove_file(&args.control);
    let listener = UnixListener::bind(&args.control).unwrap_or_else(|e| {
        eprintln!(
            "keel-lazyfs: control socket {}: {e}",
            args.control.display()
        );
        std::process::exit(1)
    });
    let session = mount(&disk, &args.mountpoint).unwrap_or_else(|e| {
        eprintln!(
            "keel-lazyfs: cannot mount at {} (root and /dev/fuse needed): {e}",
            args.mountpoint.display()
        );
        std::process::exit(1)
    });
    let daemon = Arc::new(Daemon {
        disk,
        mountpoint: args.mountpoint.clone(),
        session: Mutex::new(Some(session)),
    });
    let serving = daemon.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            serving.serve(stream);
        }
    });
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut sig: libc::c_int = 0;
    // SAFETY: waits for one of the blocked signals of `set`.
    unsafe { libc::sigwait(&set, &mut sig) };
    let session = daemon
        .session
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    if let Some(s) = session {
        if let Err(e) = s.umount_and_join() {
            eprintln!("keel-lazyfs: unmount: {e}");
        }
    }
    let _ = std::fs::remove_file(&args.control);
}
