//! A simulated disk for the fault simulation (issue 20): a directory tree whose file bytes and
//! directory entries are kept twice, as they read now and as they would survive a power cut,
//! and the faults real disks and kernels show. Pure, synchronous and deterministic: the same
//! seed and the same operations give the same outcome, so a failing run reproduces exactly.
//!
//! What it models (strict POSIX, as Jepsen's LazyFS and ALICE do):
//! - **Writes** go to the file's current contents (what reads see: the page cache) and are
//!   remembered, sector by sector ([`SECTOR`] bytes, aligned), as pending until the file is
//!   synced.
//! - **Sync** makes the file's current contents durable. A failed sync (an injected EIO)
//!   *drops* the pending writes from the durable path, as Linux marks the pages clean after a
//!   writeback error: a later sync succeeds without having written them, and the data is still
//!   there to read until a crash. Software that retries a failed sync into success is caught.
//! - **Directory entries** (create, mkdir, rename, unlink, rmdir) are durable only once the
//!   directory holding them is synced ([`SimDisk::sync`] on a directory): a file synced into a
//!   directory that was not is lost by a crash, with its name.
//! - **A crash** ([`SimDisk::crash`]) keeps the tree as its directories were last synced, each
//!   file's durable bytes and, of its pending sector writes, an arbitrary seeded subset, each
//!   sector on its own, so a multi-sector write may be torn at sector boundaries.
//! - **Faults** ([`Fault`]): EIO on a write or a sync (once, or from then on), ENOSPC past a
//!   number of bytes, a sector read back corrupted, a write or a sync delayed (the host waits
//!   the delay out: the model itself has no clock).
//!
//! Two ways in: by inode (`lookup`, `create`, `write`, ...: what a FUSE file system gets, see
//! `keel-lazyfs`) and by path relative to the root (`resolve`, [`SimDisk::create_path`], ...:
//! what the simulation's I/O seam gets). Paths name files for faults: `data/t-0/0.log`.

use std::collections::BTreeMap;

/// The unit a crash keeps or loses: an aligned sector of this many bytes.
pub const SECTOR: usize = 512;

/// A file's or directory's identity, stable across renames (an inode number).
pub type Ino = u64;

/// The root directory's inode (FUSE's root inode number too).
pub const ROOT: Ino = 1;

/// What an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// An injected failure. Prefixes and names are paths from the root (`data/t-0/0.log`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Writes to files whose path starts with `prefix` fail with EIO: the next one (`once`) or
    /// every one from now on.
    WriteEio { prefix: String, once: bool },
    /// Syncs of files whose path starts with `prefix` fail with EIO (and drop the pending
    /// writes, as Linux does), once or from now on.
    SyncEio { prefix: String, once: bool },
    /// Once the disk holds `capacity` bytes (every file's current length together), a write
    /// that would grow it fails with ENOSPC.
    NoSpace { capacity: u64 },
    /// Reads of sector `sector` of the file at `path` return it with its bits flipped.
    CorruptSector { path: String, sector: u64 },
    /// Writes (`write`) or syncs of files whose path starts with `prefix` take `ms`
    /// milliseconds longer, the next one (`once`) or every one from now on. The model has no
    /// clock: [`SimDisk::take_delay`] tells the host, which waits it out before the operation
    /// (keel-lazyfs answers that request from another thread after the wait, so the rest of
    /// the file system keeps answering, as a disk with one slow request does).
    Delay {
        prefix: String,
        write: bool,
        ms: u64,
        once: bool,
    },
}

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    NotFound(String),
    AlreadyExists(String),
    NotEmpty(String),
    NotADirectory(String),
    IsADirectory(String),
    /// An injected I/O error (EIO).
    Eio(String),
    /// An injected full disk (ENOSPC).
    NoSpace(String),
}

impl SimError {
    /// Linux's errno for it.
    pub fn errno(&self) -> i32 {
        match self {
            SimError::NotFound(_) => 2,
            SimError::AlreadyExists(_) => 17,
            SimError::NotEmpty(_) => 39,
            SimError::NotADirectory(_) => 20,
            SimError::IsADirectory(_) => 21,
            SimError::Eio(_) => 5,
            SimError::NoSpace(_) => 28,
        }
    }
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::NotFound(n) => write!(f, "{n}: no such file or directory"),
            SimError::AlreadyExists(n) => write!(f, "{n}: file exists"),
            SimError::NotEmpty(n) => write!(f, "{n}: directory not empty"),
            SimError::NotADirectory(n) => write!(f, "{n}: not a directory"),
            SimError::IsADirectory(n) => write!(f, "{n}: is a directory"),
            SimError::Eio(what) => write!(f, "{what}: input/output error (injected)"),
            SimError::NoSpace(what) => write!(f, "{what}: no space left on device (injected)"),
        }
    }
}

impl std::error::Error for SimError {}

/// How many faults of each kind fired, and how much crashes lost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub write_eio: u64,
    pub sync_eio: u64,
    pub no_space: u64,
    pub corrupt_reads: u64,
    pub crashes: u64,
    /// Pending sectors crashes kept, and lost.
    pub sectors_kept: u64,
    pub sectors_lost: u64,
    /// Directory entries crashes undid (created, removed or renamed since the directory's
    /// last sync).
    pub entries_reverted: u64,
    /// Operations refused because the power was off (see [`SimDisk::power_off_after`]).
    pub refused_power_off: u64,
    /// Operations a [`Fault::Delay`] held back, and the milliseconds it asked for in all.
    pub delays: u64,
    pub delayed_ms: u64,
}

#[derive(Clone, Debug)]
struct Inode {
    kind: Kind,
    /// Where it is now (for fault paths): its directory and name. An unlinked file keeps its
    /// last ones; the root is its own parent.
    parent: Ino,
    name: String,
    /// What reads see.
    current: Vec<u8>,
    /// What survives a crash for sure.
    durable: Vec<u8>,
    /// Sector writes since the last sync (or failed sync), oldest first: (sector index, its
    /// bytes as written then, at most SECTOR long: a file's last sector may be short).
    pending: Vec<(u64, Vec<u8>)>,
    /// The shortest the file was since its last sync: the durable bytes past it are gone once
    /// a sync or a crash applies the length change.
    min_len: usize,
    /// The length changed (set_len) since the last sync: a crash keeps the durable length or
    /// the new one, seeded.
    length_pending: bool,
    /// A directory's entries now, and as of its last sync.
    children: BTreeMap<String, Ino>,
    durable_children: BTreeMap<String, Ino>,
}

impl Inode {
    fn new(kind: Kind, parent: Ino, name: &str) -> Inode {
        Inode {
            kind,
            parent,
            name: name.to_string(),
            current: Vec::new(),
            durable: Vec::new(),
            pending: Vec::new(),
            min_len: 0,
            length_pending: false,
            children: BTreeMap::new(),
            durable_children: BTreeMap::new(),
        }
    }
}

/// The disk: inodes, the faults, a seeded generator.
#[derive(Clone, Debug)]
pub struct SimDisk {
    /// Every inode a name reaches now or after a crash, and unlinked files (readable through
    /// handles opened before) until the next crash.
    inodes: BTreeMap<Ino, Inode>,
    next_ino: Ino,
    faults: Vec<Fault>,
    rng: SplitMix64,
    /// The chance, in 1/256ths, that a crash keeps a pending sector.
    keep_per_256: u32,
    /// Changes left before the power goes off (`Some(0)`: off; every change is refused until
    /// the crash).
    power_left: Option<u64>,
    pub counts: FaultCounts,
}

impl SimDisk {
    /// An empty disk (an empty, durable root directory) whose crashes keep each pending sector
    /// with probability `keep_per_256`/256 (128: half of them), drawn from `seed`.
    pub fn new(seed: u64, keep_per_256: u32) -> SimDisk {
        let mut inodes = BTreeMap::new();
        inodes.insert(ROOT, Inode::new(Kind::Dir, ROOT, ""));
        SimDisk {
            inodes,
            next_ino: ROOT + 1,
            faults: Vec::new(),
            rng: SplitMix64(seed),
            keep_per_256: keep_per_256.min(256),
            power_left: None,
            counts: FaultCounts::default(),
        }
    }

    /// The power goes off after `changes` more changes (writes, syncs, length changes,
    /// directory changes): from then on each is refused with EIO, unapplied, until
    /// [`Self::crash`]. So a crash can land in the middle of any multi-step operation (between
    /// a write and its sync, between a rename and the directory sync).
    pub fn power_off_after(&mut self, changes: u64) {
        self.power_left = Some(changes);
    }

    /// Withdraws a power-off that has not happened yet (one that has stays until the crash).
    pub fn power_stays_on(&mut self) {
        if self.power_left != Some(0) {
            self.power_left = None;
        }
    }

    /// Whether the power is set to go off (or is off): only a crash restores it.
    pub fn power_left_set(&self) -> bool {
        self.power_left.is_some()
    }

    /// Whether the power is off (a crash is due).
    pub fn is_off(&self) -> bool {
        self.power_left == Some(0)
    }

    /// Counts one change against the power budget; refuses it if the power is off.
    fn powered(&mut self, what: impl FnOnce() -> String) -> Result<(), SimError> {
        match self.power_left {
            Some(0) => {
                self.counts.refused_power_off += 1;
                Err(SimError::Eio(format!("{}: the power is off", what())))
            }
            Some(n) => {
                self.power_left = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Injects `fault` from now on (until it fires, for a `once` fault).
    pub fn inject(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// The delay an injected [`Fault::Delay`] puts on a write (`write`) or a sync of inode
    /// `ino`, in milliseconds, counted; a `once` fault that fires is spent. The host waits it
    /// out and then performs the operation; syncs of directories are never delayed.
    pub fn take_delay(&mut self, ino: Ino, write: bool) -> Option<u64> {
        if self.inodes.get(&ino)?.kind == Kind::Dir {
            return None;
        }
        let path = self.path_of(ino);
        let i = self.faults.iter().position(|f| {
            matches!(f, Fault::Delay { prefix, write: w, .. }
                if *w == write && path.starts_with(prefix.as_str()))
        })?;
        let Fault::Delay { ms, once, .. } = self.faults[i] else {
            unreachable!("matched a delay")
        };
        if once {
            self.faults.remove(i);
        }
        self.counts.delays += 1;
        self.counts.delayed_ms += ms;
        Some(ms)
    }

    /// Removes every fault not yet spent.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Removes an injected capacity: the disk has space again.
    pub fn remove_no_space(&mut self) {
        self.faults.retain(|f| !matches!(f, Fault::NoSpace { .. }));
    }

    /// Bytes the disk holds: every file's current length together (what a
    /// [`Fault::NoSpace`] capacity is measured against).
    pub fn used_bytes(&self) -> u64 {
        self.inodes.values().map(|i| i.current.len() as u64).sum()
    }

    // ---- by inode ----------------------------------------------------------------------

    /// What `ino` is, if it exists.
    pub fn kind(&self, ino: Ino) -> Option<Kind> {
        self.inodes.get(&ino).map(|i| i.kind)
    }

    /// The entry `name` of directory `dir`, now.
    pub fn lookup(&self, dir: Ino, name: &str) -> Result<Ino, SimError> {
        let d = self.dir(dir)?;
        d.children
            .get(name)
            .copied()
            .ok_or_else(|| SimError::NotFound(self.child_path(dir, name)))
    }

    /// The entries of directory `dir` now, by name.
    pub fn entries(&self, dir: Ino) -> Result<Vec<(String, Ino, Kind)>, SimError> {
        Ok(self
            .dir(dir)?
            .children
            .iter()
            .map(|(n, i)| (n.clone(), *i, self.inodes[i].kind))
            .collect())
    }

    /// The file's current length (0 for a directory).
    pub fn len(&self, ino: Ino) -> Result<u64, SimError> {
        Ok(self.inode(ino)?.current.len() as u64)
    }

    /// The path of `ino` from the root, as it is named now (its last name if unlinked).
    pub fn path_of(&self, ino: Ino) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let Some(i) = self.inodes.get(&at) else { break };
            parts.push(i.name.clone());
            if parts.len() > 4096 {
                break;
            }
            at = i.parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// Creates an empty file `name` in `dir` (not durable until `dir` is synced).
    pub fn create(&mut self, dir: Ino, name: &str) -> Result<Ino, SimError> {
        self.new_entry(dir, name, Kind::File)
    }

    /// Creates an empty directory `name` in `dir` (not durable until `dir` is synced).
    pub fn mkdir(&mut self, dir: Ino, name: &str) -> Result<Ino, SimError> {
        self.new_entry(dir, name, Kind::Dir)
    }

    /// Removes the file `name` from `dir`. Handles opened before still read it.
    pub fn unlink(&mut self, dir: Ino, name: &str) -> Result<(), SimError> {
        let ino = self.lookup(dir, name)?;
        self.powered(|| format!("unlink {name}"))?;
        if self.inodes[&ino].kind == Kind::Dir {
            return Err(SimError::IsADirectory(self.path_of(ino)));
        }
        self.dir_mut(dir)?.children.remove(name);
        Ok(())
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&mut self, dir: Ino, name: &str) -> Result<(), SimError> {
        let ino = self.lookup(dir, name)?;
        let d = &self.inodes[&ino];
        if d.kind != Kind::Dir {
            return Err(SimError::NotADirectory(self.path_of(ino)));
        }
        if !d.children.is_empty() {
            return Err(SimError::NotEmpty(self.path_of(ino)));
        }
        self.powered(|| format!("rmdir {name}"))?;
        self.dir_mut(dir)?.children.remove(name);
        Ok(())
    }

    /// Renames `dir/name` to `to_dir/to_name`, replacing a file or an empty directory there.
    pub fn rename(
        &mut self,
        dir: Ino,
        name: &str,
        to_dir: Ino,
        to_name: &str,
    ) -> Result<(), SimError> {
        let ino = self.lookup(dir, name)?;
        self.dir(to_dir)?;
        if let Ok(old) = self.lookup(to_dir, to_name) {
            if old == ino {
                return Ok(());
            }
            let (moving, replaced) = (self.inodes[&ino].kind, &self.inodes[&old]);
            match (moving, replaced.kind) {
                (Kind::File, Kind::Dir) => return Err(SimError::IsADirectory(self.path_of(old))),
                (Kind::Dir, Kind::File) => return Err(SimError::NotADirectory(self.path_of(old))),
                (Kind::Dir, Kind::Dir) if !replaced.children.is_empty() => {
                    return Err(SimError::NotEmpty(self.path_of(old)))
                }
                _ => {}
            }
        }
        // A directory cannot move below itself.
        let mut at = to_dir;
        while at != ROOT {
            if at == ino {
                return Err(SimError::NotFound(self.child_path(to_dir, to_name)));
            }
            at = self.inodes[&at].parent;
        }
        self.powered(|| format!("rename {name}"))?;
        self.dir_mut(dir)?.children.remove(name);
        self.dir_mut(to_dir)?
            .children
            .insert(to_name.to_string(), ino);
        let moved = self.inodes.get_mut(&ino).expect("named inode");
        moved.parent = to_dir;
        moved.name = to_name.to_string();
        Ok(())
    }

    /// Writes `data` at `offset` of file `ino` (growing it, zero-filled, as needed).
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<(), SimError> {
        let path = self.file_path(ino)?;
        self.powered(|| format!("write to {path}"))?;
        if self.fire_eio(&path, true) {
            self.counts.write_eio += 1;
            return Err(SimError::Eio(format!("write to {path}")));
        }
        let end = offset + data.len() as u64;
        let grows = end.saturating_sub(self.inodes[&ino].current.len() as u64);
        if grows > 0 && self.full(grows) {
            self.counts.no_space += 1;
            return Err(SimError::NoSpace(format!("write to {path}")));
        }
        let inode = self.inodes.get_mut(&ino).expect("file inode");
        if inode.current.len() < end as usize {
            inode.current.resize(end as usize, 0);
        }
        inode.current[offset as usize..end as usize].copy_from_slice(data);
        // Every sector the write touched, as it now reads, is pending.
        if !data.is_empty() {
            let first = offset / SECTOR as u64;
            let last = (end - 1) / SECTOR as u64;
            for sector in first..=last {
                let from = sector as usize * SECTOR;
                let to = (from + SECTOR).min(inode.current.len());
                inode
                    .pending
                    .push((sector, inode.current[from..to].to_vec()));
            }
        }
        Ok(())
    }

    /// Cuts or extends (zero-filled) file `ino` to `len` bytes.
    pub fn set_len(&mut self, ino: Ino, len: u64) -> Result<(), SimError> {
        let path = self.file_path(ino)?;
        self.powered(|| format!("truncate {path}"))?;
        let len = len as usize;
        let grows = (len as u64).saturating_sub(self.inodes[&ino].current.len() as u64);
        if grows > 0 && self.full(grows) {
            self.counts.no_space += 1;
            return Err(SimError::NoSpace(format!("extending {path}")));
        }
        let inode = self.inodes.get_mut(&ino).expect("file inode");
        inode.current.resize(len, 0);
        inode.min_len = inode.min_len.min(len);
        // Pending writes past the cut are gone; one across it keeps its bytes before it.
        inode.pending.retain_mut(|(s, data)| {
            let from = *s as usize * SECTOR;
            data.truncate(len.saturating_sub(from));
            !data.is_empty()
        });
        inode.length_pending = true;
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` of file `ino` (fewer at its end).
    pub fn read(&mut self, ino: Ino, offset: u64, len: usize) -> Result<Vec<u8>, SimError> {
        let path = self.file_path(ino)?;
        let current = &self.inodes[&ino].current;
        let from = (offset as usize).min(current.len());
        let to = (from + len).min(current.len());
        let mut out = current[from..to].to_vec();
        for fault in &self.faults {
            if let Fault::CorruptSector { path: p, sector } = fault {
                if *p != path {
                    continue;
                }
                let s_from = *sector as usize * SECTOR;
                let s_to = s_from + SECTOR;
                let (lo, hi) = (s_from.max(from), s_to.min(to));
                if lo < hi {
                    for b in &mut out[lo - from..hi - from] {
                        *b ^= 0xA5;
                    }
                    self.counts.corrupt_reads += 1;
                }
            }
        }
        Ok(out)
    }

    /// fsync/fdatasync. A file: its current contents become durable, or (an injected EIO) its
    /// pending writes are dropped from the durable path without becoming durable. A directory:
    /// its current entries become durable.
    pub fn sync(&mut self, ino: Ino) -> Result<(), SimError> {
        self.inode(ino)?;
        let path = self.path_of(ino);
        self.powered(|| format!("sync of {path}"))?;
        if self.inode(ino)?.kind == Kind::Dir {
            let d = self.inodes.get_mut(&ino).expect("dir inode");
            d.durable_children = d.children.clone();
            return Ok(());
        }
        let path = self.path_of(ino);
        let failed = self.fire_eio(&path, false);
        let inode = self.inodes.get_mut(&ino).expect("file inode");
        if failed {
            self.counts.sync_eio += 1;
            // The kernel marks the pages clean after a writeback error: the writes are still
            // read back now, but no later sync writes them and a crash loses them.
            inode.pending.clear();
            inode.length_pending = false;
            inode.min_len = inode.current.len();
            return Err(SimError::Eio(format!("sync of {path}")));
        }
        if inode.pending.is_empty() && !inode.length_pending {
            // Nothing new since the last sync, or writes a failed sync dropped: they stay
            // where they were.
            return Ok(());
        }
        let Inode {
            durable,
            pending,
            min_len,
            current,
            ..
        } = inode;
        durable.truncate(*min_len);
        durable.resize(current.len(), 0);
        for (sector, data) in pending.drain(..) {
            let from = sector as usize * SECTOR;
            durable[from..from + data.len()].copy_from_slice(&data);
        }
        *min_len = current.len();
        inode.length_pending = false;
        Ok(())
    }

    /// A power cut and a restart: the tree as its directories were last synced; each file it
    /// reaches keeps its durable bytes and, of its pending sector writes, a seeded subset
    /// applied in order (each sector on its own: a write may be torn); a pending length change
    /// is kept or not. Unreachable inodes are gone. Faults stay injected.
    pub fn crash(&mut self) {
        self.counts.crashes += 1;
        self.power_left = None;
        let mut old = std::mem::take(&mut self.inodes);
        let mut queue = vec![(ROOT, ROOT, String::new())];
        while let Some((ino, parent, name)) = queue.pop() {
            if self.inodes.contains_key(&ino) {
                // Reached twice (renamed between two directories synced at different times):
                // one inode with two names, as a hard link.
                continue;
            }
            let Some(mut inode) = old.remove(&ino) else {
                continue;
            };
            inode.parent = parent;
            inode.name = name;
            match inode.kind {
                Kind::Dir => {
                    let now = std::mem::take(&mut inode.children);
                    let kept = inode.durable_children.clone();
                    self.counts.entries_reverted +=
                        now.iter().filter(|(n, i)| kept.get(*n) != Some(i)).count() as u64
                            + kept.keys().filter(|n| !now.contains_key(*n)).count() as u64;
                    for (n, child) in kept.iter().rev() {
                        queue.push((*child, ino, n.clone()));
                    }
                    inode.children = kept;
                }
                Kind::File => {
                    let mut bytes = std::mem::take(&mut inode.durable);
                    if inode.length_pending && self.rng.next() & 1 == 1 {
                        bytes.truncate(inode.min_len);
                        bytes.resize(inode.current.len(), 0);
                    }
                    for (sector, data) in &inode.pending {
                        if (self.rng.next() & 0xFF) < u64::from(self.keep_per_256) {
                            let from = *sector as usize * SECTOR;
                            let to = from + data.len();
                            if bytes.len() < to {
                                bytes.resize(to, 0);
                            }
                            bytes[from..to].copy_from_slice(data);
                            self.counts.sectors_kept += 1;
                        } else {
                            self.counts.sectors_lost += 1;
                        }
                    }
                    inode.pending.clear();
                    inode.length_pending = false;
                    inode.min_len = bytes.len();
                    inode.current = bytes.clone();
                    inode.durable = bytes;
                }
            }
            self.inodes.insert(ino, inode);
        }
    }

    // ---- by path -----------------------------------------------------------------------

    /// The inode at `path` (`a/b/c`, from the root; `""` is the root).
    pub fn resolve(&self, path: &str) -> Result<Ino, SimError> {
        let mut at = ROOT;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at = self.lookup(at, part)?;
        }
        Ok(at)
    }

    /// The directory holding `path`, and the last part of it.
    pub fn resolve_parent<'p>(&self, path: &'p str) -> Result<(Ino, &'p str), SimError> {
        let path = path.trim_end_matches('/');
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        Ok((self.resolve(dir)?, name))
    }

    /// Creates the empty file at `path`.
    pub fn create_path(&mut self, path: &str) -> Result<Ino, SimError> {
        let (dir, name) = self.resolve_parent(path)?;
        self.create(dir, name)
    }

    /// Replaces the file at `path` with `data` (created, or cut to nothing), then syncs it:
    /// the write half of an atomic replace (temp file, rename, directory sync).
    pub fn write_file_path(&mut self, path: &str, data: &[u8]) -> Result<(), SimError> {
        let ino = match self.resolve(path) {
            Ok(ino) => {
                self.set_len(ino, 0)?;
                ino
            }
            Err(_) => self.create_path(path)?,
        };
        self.write(ino, 0, data)?;
        self.sync(ino)
    }

    /// Creates the directory at `path`.
    pub fn mkdir_path(&mut self, path: &str) -> Result<Ino, SimError> {
        let (dir, name) = self.resolve_parent(path)?;
        self.mkdir(dir, name)
    }

    /// Removes the file at `path`.
    pub fn unlink_path(&mut self, path: &str) -> Result<(), SimError> {
        let (dir, name) = self.resolve_parent(path)?;
        self.unlink(dir, name)
    }

    /// Renames `from` to `to` (paths).
    pub fn rename_path(&mut self, from: &str, to: &str) -> Result<(), SimError> {
        let (dir, name) = self.resolve_parent(from)?;
        let (to_dir, to_name) = self.resolve_parent(to)?;
        self.rename(dir, name, to_dir, to_name)
    }

    /// The names in the directory at `path`, in order.
    pub fn list(&self, path: &str) -> Result<Vec<String>, SimError> {
        let dir = self.resolve(path)?;
        Ok(self.entries(dir)?.into_iter().map(|(n, _, _)| n).collect())
    }

    // ---- internals ---------------------------------------------------------------------

    fn inode(&self, ino: Ino) -> Result<&Inode, SimError> {
        self.inodes
            .get(&ino)
            .ok_or_else(|| SimError::NotFound(format!("inode {ino}")))
    }

    fn dir(&self, ino: Ino) -> Result<&Inode, SimError> {
        let d = self.inode(ino)?;
        if d.kind != Kind::Dir {
            return Err(SimError::NotADirectory(self.path_of(ino)));
        }
        Ok(d)
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut Inode, SimError> {
        self.dir(ino)?;
        Ok(self.inodes.get_mut(&ino).expect("dir inode"))
    }

    /// The path of file `ino`, or why it is not a file.
    fn file_path(&self, ino: Ino) -> Result<String, SimError> {
        if self.inode(ino)?.kind == Kind::Dir {
            return Err(SimError::IsADirectory(self.path_of(ino)));
        }
        Ok(self.path_of(ino))
    }

    fn child_path(&self, dir: Ino, name: &str) -> String {
        let d = self.path_of(dir);
        if d.is_empty() {
            name.to_string()
        } else {
            format!("{d}/{name}")
        }
    }

    fn new_entry(&mut self, dir: Ino, name: &str, kind: Kind) -> Result<Ino, SimError> {
        if self.dir(dir)?.children.contains_key(name) {
            return Err(SimError::AlreadyExists(self.child_path(dir, name)));
        }
        self.powered(|| format!("create {name}"))?;
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, Inode::new(kind, dir, name));
        self.dir_mut(dir)?.children.insert(name.to_string(), ino);
        Ok(ino)
    }

    /// Whether an EIO fault fires for an operation on `path` (a write, else a sync); a `once`
    /// fault that fires is spent.
    fn fire_eio(&mut self, path: &str, write: bool) -> bool {
        let hit = self.faults.iter().position(|f| match f {
            Fault::WriteEio { prefix, .. } => write && path.starts_with(prefix.as_str()),
            Fault::SyncEio { prefix, .. } => !write && path.starts_with(prefix.as_str()),
            _ => false,
        });
        let Some(i) = hit else {
            return false;
        };
        if matches!(
            self.faults[i],
            Fault::WriteEio { once: true, .. } | Fault::SyncEio { once: true, .. }
        ) {
            self.faults.remove(i);
        }
        true
    }

    /// Whether growing the disk by `more` bytes passes an injected capacity.
    fn full(&self, more: u64) -> bool {
        let capacity = self.faults.iter().find_map(|f| match f {
            Fault::NoSpace { capacity } => Some(*capacity),
            _ => None,
        });
        let Some(capacity) = capacity else {
            return false;
        };
        self.used_bytes() + more > capacity
    }
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests;
