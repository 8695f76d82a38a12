//! The metadata log's file I/O seam: the Raft log store (`log_store.rs`) and the snapshot
//! (`state_machine.rs`) open, read, write, sync, rename and create through [`MetaFs`], the
//! real file system in production ([`StdFs`]) and the fault simulation's disk model
//! ([`SimFs`], `keel-simdisk`) in the metadata log's crash test. Dynamic dispatch: the
//! metadata log appends a few entries a second, each behind an fdatasync.
//!
//! Operations name files by path (no handles), so both implementations stay small; every
//! call is blocking and runs on the `keel-metadata` thread.

use std::io;
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard};

use keel_simdisk::{SimDisk, SimError};

/// File operations of the metadata log.
pub trait MetaFs: Send + Sync + std::fmt::Debug {
    /// The whole file, or `None` if it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Creates `path` empty if it does not exist (an existing file is left as it is).
    fn create(&self, path: &Path) -> io::Result<()>;
    /// Writes `data` at byte `pos` of the existing file `path`.
    fn write_at(&self, path: &Path, pos: u64, data: &[u8]) -> io::Result<()>;
    /// Cuts or extends `path` to `len` bytes.
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()>;
    /// fdatasync of `path`.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Replaces `path` with `data`: create or truncate, write, fdatasync.
    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync of the directory `dir` (its entries survive a power cut).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Creates `dir` and its missing parents, each synced into its parent.
    fn create_dir_all_durable(&self, dir: &Path) -> io::Result<()>;
}

/// Writes `data` to `path` atomically and durably: a temp file written and synced, renamed
/// over `path`, the directory synced. Once it returns a power cut leaves the new contents;
/// before, the old or the new.
pub fn write_atomic(fs: &dyn MetaFs, path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    fs.write_new(&tmp, data)?;
    fs.rename(&tmp, path)?;
    fs.sync_dir(parent_of(path))
}

fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The real file system (`std::fs`).
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

impl MetaFs for StdFs {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create(&self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map(drop)
    }

    fn write_at(&self, path: &Path, pos: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all_at(data, pos)
    }

    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .set_len(len)
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)?
            .sync_data()
    }

    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::File::create(path)?;
        f.write_all(data)?;
        f.sync_data()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }

    fn create_dir_all_durable(&self, dir: &Path) -> io::Result<()> {
        let missing = missing_dirs(dir, |d| d.exists());
        std::fs::create_dir_all(dir)?;
        for d in &missing {
            self.sync_dir(parent_of(d))?;
        }
        Ok(())
    }
}

/// `dir` and those of its ancestors that do not exist, outermost first.
fn missing_dirs(dir: &Path, exists: impl Fn(&Path) -> bool) -> Vec<&Path> {
    let mut missing: Vec<&Path> = dir
        .ancestors()
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| !exists(d))
        .collect();
    missing.reverse();
    missing
}

/// The fault simulation's disk model (`keel-simdisk`): what was written and what was synced
/// kept apart, crashes, injected EIO. Paths name files from the model's root.
#[derive(Clone)]
pub struct SimFs(Arc<Mutex<SimDisk>>);

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimFs")
    }
}

impl SimFs {
    pub fn new(disk: SimDisk) -> SimFs {
        SimFs(Arc::new(Mutex::new(disk)))
    }

    /// The model: crash it, inject faults, read its counts.
    pub fn disk(&self) -> MutexGuard<'_, SimDisk> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ino(&self, path: &Path) -> io::Result<u64> {
        self.disk().resolve(&sim_path(path)).map_err(sim_error)
    }
}

/// A path in the model: its normal components joined by `/`.
fn sim_path(path: &Path) -> String {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(p) => p.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The model's error as the kernel's (the same errno).
fn sim_error(e: SimError) -> io::Error {
    let kind = io::Error::from_raw_os_error(e.errno()).kind();
    io::Error::new(kind, e.to_string())
}

impl MetaFs for SimFs {
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        let mut d = self.disk();
        let Ok(ino) = d.resolve(&sim_path(path)) else {
            return Ok(None);
        };
        let len = d.len(ino).map_err(sim_error)?;
        d.read(ino, 0, len as usize).map(Some).map_err(sim_error)
    }

    fn create(&self, path: &Path) -> io::Result<()> {
        let mut d = self.disk();
        let p = sim_path(path);
        if d.resolve(&p).is_err() {
            d.create_path(&p).map_err(sim_error)?;
        }
        Ok(())
    }

    fn write_at(&self, path: &Path, pos: u64, data: &[u8]) -> io::Result<()> {
        let ino = self.ino(path)?;
        self.disk().write(ino, pos, data).map_err(sim_error)
    }

    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        let ino = self.ino(path)?;
        self.disk().set_len(ino, len).map_err(sim_error)
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let ino = self.ino(path)?;
        self.disk().sync(ino).map_err(sim_error)
    }

    fn write_new(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        self.disk()
            .write_file_path(&sim_path(path), data)
            .map_err(sim_error)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.disk()
            .rename_path(&sim_path(from), &sim_path(to))
            .map_err(sim_error)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let ino = self.ino(dir)?;
        self.disk().sync(ino).map_err(sim_error)
    }

    fn create_dir_all_durable(&self, dir: &Path) -> io::Result<()> {
        let missing = missing_dirs(dir, |d| self.disk().resolve(&sim_path(d)).is_ok());
        for d in &missing {
            self.disk().mkdir_path(&sim_path(d)).map_err(sim_error)?;
            self.sync_dir(parent_of(d))?;
        }
        Ok(())
    }
}
