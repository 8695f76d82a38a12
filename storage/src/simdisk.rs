//! A simulated disk for the fault simulation (issue 20): files whose written bytes and durable
//! bytes are kept apart, a directory whose entries are durable only once it is synced, and the
//! faults real disks and kernels show. Pure, synchronous and deterministic: the same seed and the
//! same operations give the same outcome, so a failing run reproduces exactly.
//!
//! What it models:
//! - **Writes** go to the file's current contents (what reads see: the page cache) and are
//!   remembered, sector by sector ([`SECTOR`] bytes, aligned), as pending until the file is
//!   synced.
//! - **Sync** makes the current contents durable. A failed sync (an injected EIO) *drops* the
//!   pending writes from the durable path, as Linux marks the pages clean after a writeback
//!   error: a later sync succeeds without having written them, and the data is still there to
//!   read until a crash. Software that retries a failed sync into success is caught here.
//! - **Directory entries** (create, rename, remove) are durable only after [`SimDisk::sync_dir`].
//! - **A crash** ([`SimDisk::crash`]) keeps what was durable, and of each file's pending sector
//!   writes an arbitrary seeded subset, each sector on its own, so a multi-sector write may be
//!   torn at sector boundaries; then the directory reverts to its last synced state.
//! - **Faults** ([`Fault`]): EIO on a write or a sync (once, or from then on), ENOSPC past a
//!   number of bytes, a sector read back corrupted.
//!
//! The simulation drives storage's own code against it through the I/O seam; by itself it is
//! the disk model, tested here.

use std::collections::BTreeMap;

/// The unit a crash keeps or loses: an aligned sector of this many bytes.
pub const SECTOR: usize = 512;

/// A file's identity, stable across renames (an inode).
pub type FileId = u64;

/// An injected failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Writes to files whose name starts with `prefix` fail with EIO: the next one (`once`) or
    /// every one from now on.
    WriteEio { prefix: String, once: bool },
    /// Syncs of files whose name starts with `prefix` fail with EIO (and drop the pending
    /// writes, as Linux does), once or from now on.
    SyncEio { prefix: String, once: bool },
    /// Once the disk holds `capacity` bytes (every file's current length together), a write
    /// that would grow it fails with ENOSPC.
    NoSpace { capacity: u64 },
    /// Reads of sector `sector` of the file named `name` return it with its bits flipped.
    CorruptSector { name: String, sector: u64 },
}

/// Why an operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    NotFound(String),
    AlreadyExists(String),
    /// An injected I/O error (EIO).
    Eio(String),
    /// An injected full disk (ENOSPC).
    NoSpace(String),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::NotFound(n) => write!(f, "{n}: no such file"),
            SimError::AlreadyExists(n) => write!(f, "{n}: file exists"),
            SimError::Eio(what) => write!(f, "{what}: input/output error (injected)"),
            SimError::NoSpace(what) => write!(f, "{what}: no space left on device (injected)"),
        }
    }
}

impl std::error::Error for SimError {}

/// How many faults of each kind fired, and how much a crash lost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub write_eio: u64,
    pub sync_eio: u64,
    pub no_space: u64,
    pub corrupt_reads: u64,
    pub crashes: u64,
    /// Pending sectors a crash kept, and lost.
    pub sectors_kept: u64,
    pub sectors_lost: u64,
}

#[derive(Clone, Debug, Default)]
struct Inode {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a crash for sure.
    durable: Vec<u8>,
    /// Sector writes since the last sync (or failed sync), oldest first: (sector index, its
    /// bytes as written then, at most SECTOR long: a file's last sector may be short).
    pending: Vec<(u64, Vec<u8>)>,
    /// The current length differs from the durable one without a pending write saying so (a
    /// truncation): a crash keeps the durable length or the new one, seeded.
    length_pending: bool,
}

/// The disk: inodes, the current and the durable directory, the faults, a seeded generator.
#[derive(Clone, Debug)]
pub struct SimDisk {
    inodes: BTreeMap<FileId, Inode>,
    names: BTreeMap<String, FileId>,
    durable_names: BTreeMap<String, FileId>,
    next_id: FileId,
    faults: Vec<Fault>,
    rng: SplitMix64,
    /// The chance, in 1/256ths, that a crash keeps a pending sector.
    keep_per_256: u32,
    pub counts: FaultCounts,
}

impl SimDisk {
    /// An empty disk whose crashes keep each pending sector with probability `keep_per_256`/256
    /// (128: half of them), drawn from `seed`.
    pub fn new(seed: u64, keep_per_256: u32) -> SimDisk {
        SimDisk {
            inodes: BTreeMap::new(),
            names: BTreeMap::new(),
            durable_names: BTreeMap::new(),
            next_id: 1,
            faults: Vec::new(),
            rng: SplitMix64(seed),
            keep_per_256: keep_per_256.min(256),
            counts: FaultCounts::default(),
        }
    }

    /// Injects `fault` from now on (until it fires, for a `once` fault).
    pub fn inject(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// Removes every fault not yet spent.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Creates an empty file `name` (not durable until the directory is synced).
    pub fn create(&mut self, name: &str) -> Result<FileId, SimError> {
        if self.names.contains_key(name) {
            return Err(SimError::AlreadyExists(name.to_string()));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.inodes.insert(id, Inode::default());
        self.names.insert(name.to_string(), id);
        Ok(id)
    }

    /// The file named `name` now.
    pub fn open(&self, name: &str) -> Result<FileId, SimError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| SimError::NotFound(name.to_string()))
    }

    /// The names of the directory now, in order.
    pub fn list(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    /// The file's current length.
    pub fn len(&self, name: &str) -> Result<u64, SimError> {
        let id = self.open(name)?;
        Ok(self.inodes[&id].current.len() as u64)
    }

    /// Writes `data` at `offset` of file `name` (growing it, zero-filled, as needed).
    pub fn write(&mut self, name: &str, offset: u64, data: &[u8]) -> Result<(), SimError> {
        let id = self.open(name)?;
        if self.fire_eio(name, true) {
            self.counts.write_eio += 1;
            return Err(SimError::Eio(format!("write to {name}")));
        }
        let end = offset + data.len() as u64;
        let grows = end.saturating_sub(self.inodes[&id].current.len() as u64);
        if grows > 0 && self.full(grows) {
            self.counts.no_space += 1;
            return Err(SimError::NoSpace(format!("write to {name}")));
        }
        let inode = self.inodes.get_mut(&id).expect("named inode");
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

    /// Cuts or extends (zero-filled) file `name` to `len` bytes.
    pub fn set_len(&mut self, name: &str, len: u64) -> Result<(), SimError> {
        let id = self.open(name)?;
        let inode = self.inodes.get_mut(&id).expect("named inode");
        inode.current.resize(len as usize, 0);
        inode
            .pending
            .retain(|(s, _)| (*s as usize) * SECTOR < len as usize);
        inode.length_pending = true;
        Ok(())
    }

    /// Reads up to `len` bytes at `offset` of file `name` (fewer at its end).
    pub fn read(&mut self, name: &str, offset: u64, len: usize) -> Result<Vec<u8>, SimError> {
        let id = self.open(name)?;
        let current = &self.inodes[&id].current;
        let from = (offset as usize).min(current.len());
        let to = (from + len).min(current.len());
        let mut out = current[from..to].to_vec();
        for fault in &self.faults {
            if let Fault::CorruptSector { name: n, sector } = fault {
                if n != name {
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

    /// fdatasync: the file's current contents become durable, or (an injected EIO) its
    /// pending writes are dropped from the durable path without becoming durable.
    pub fn sync(&mut self, name: &str) -> Result<(), SimError> {
        let id = self.open(name)?;
        let failed = self.fire_eio(name, false);
        let inode = self.inodes.get_mut(&id).expect("named inode");
        if failed {
            self.counts.sync_eio += 1;
            // The kernel marks the pages clean after a writeback error: the writes are still
            // read back now, but no later sync writes them and a crash loses them.
            inode.pending.clear();
            inode.length_pending = false;
            return Err(SimError::Eio(format!("sync of {name}")));
        }
        if inode.pending.is_empty() && !inode.length_pending {
            // Nothing new since the last sync, or writes a failed sync dropped: they stay
            // where they were.
            return Ok(());
        }
        inode.durable = inode.current.clone();
        inode.pending.clear();
        inode.length_pending = false;
        Ok(())
    }

    /// Renames `from` over `to` (replacing it) in the current directory.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), SimError> {
        let id = self
            .names
            .remove(from)
            .ok_or_else(|| SimError::NotFound(from.to_string()))?;
        self.names.insert(to.to_string(), id);
        Ok(())
    }

    /// Removes `name` from the current directory.
    pub fn remove(&mut self, name: &str) -> Result<(), SimError> {
        self.names
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| SimError::NotFound(name.to_string()))
    }

    /// Syncs the directory: its current entries become durable.
    pub fn sync_dir(&mut self) {
        self.durable_names = self.names.clone();
        let live: std::collections::BTreeSet<FileId> = self
            .names
            .values()
            .chain(self.durable_names.values())
            .copied()
            .collect();
        self.inodes.retain(|id, _| live.contains(id));
    }

    /// A power cut and a restart: each file the synced directory names keeps its durable bytes
    /// and, of its pending sector writes, a seeded subset applied in order (each sector on its
    /// own: a write may be torn); a pending truncation is kept or not. The directory returns to
    /// its synced state. Faults stay injected.
    pub fn crash(&mut self) {
        self.counts.crashes += 1;
        self.names = self.durable_names.clone();
        let mut ids: Vec<FileId> = self.names.values().copied().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut inodes = BTreeMap::new();
        for id in ids {
            let Some(old) = self.inodes.get(&id) else {
                continue;
            };
            let mut bytes = old.durable.clone();
            if old.length_pending && self.rng.next() & 1 == 1 {
                bytes.resize(old.current.len(), 0);
            }
            for (sector, data) in &old.pending {
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
            inodes.insert(
                id,
                Inode {
                    current: bytes.clone(),
                    durable: bytes,
                    pending: Vec::new(),
                    length_pending: false,
                },
            );
        }
        self.inodes = inodes;
    }

    /// Whether an EIO fault fires for an operation on `name` (a write, else a sync); a `once`
    /// fault that fires is spent.
    fn fire_eio(&mut self, name: &str, write: bool) -> bool {
        let hit = self.faults.iter().position(|f| match f {
            Fault::WriteEio { prefix, .. } => write && name.starts_with(prefix.as_str()),
            Fault::SyncEio { prefix, .. } => !write && name.starts_with(prefix.as_str()),
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
        let used: u64 = self
            .names
            .values()
            .map(|id| self.inodes[id].current.len() as u64)
            .sum();
        self.faults
            .iter()
            .any(|f| matches!(f, Fault::NoSpace { capacity } if used + more > *capacity))
    }
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk_with(name: &str, durable: &[u8], seed: u64, keep: u32) -> SimDisk {
        let mut d = SimDisk::new(seed, keep);
        d.create(name).unwrap();
        d.write(name, 0, durable).unwrap();
        d.sync(name).unwrap();
        d.sync_dir();
        d
    }

    #[test]
    fn a_crash_keeps_what_was_synced_and_loses_unsynced_sectors_by_seed() {
        let synced = vec![1u8; 3 * SECTOR];
        // keep 0: every pending sector is lost; keep 256: every one is kept.
        for (keep, want_tail) in [(0u32, None), (256, Some(2u8))] {
            let mut d = disk_with("a.log", &synced, 7, keep);
            d.write("a.log", 3 * SECTOR as u64, &[2u8; 2 * SECTOR])
                .unwrap();
            assert_eq!(d.len("a.log").unwrap(), 5 * SECTOR as u64);
            d.crash();
            let got = d.read("a.log", 0, 10 * SECTOR).unwrap();
            assert_eq!(&got[..3 * SECTOR], &synced[..]);
            match want_tail {
                None => assert_eq!(got.len(), 3 * SECTOR),
                Some(b) => assert_eq!(&got[3 * SECTOR..], &[b; 2 * SECTOR][..]),
            }
        }
    }

    #[test]
    fn crashes_tear_writes_at_sector_boundaries_and_repeat_for_a_seed() {
        let outcome = |seed: u64| {
            let mut d = disk_with("a.log", &[], seed, 128);
            d.write("a.log", 0, &[9u8; 16 * SECTOR]).unwrap();
            d.crash();
            d.read("a.log", 0, 16 * SECTOR).unwrap()
        };
        let mut torn = 0;
        for seed in 0..20 {
            let got = outcome(seed);
            assert_eq!(got, outcome(seed), "seed {seed} must repeat");
            // Each sector is whole or absent (zeros up to the file's new end).
            for chunk in got.chunks(SECTOR) {
                assert!(chunk.iter().all(|b| *b == 9) || chunk.iter().all(|b| *b == 0));
            }
            let kept = got.chunks(SECTOR).filter(|c| c[0] == 9).count();
            if kept > 0 && kept < 16 {
                torn += 1;
            }
        }
        assert!(
            torn > 10,
            "half of the sectors kept: most crashes tear ({torn} of 20)"
        );
    }

    #[test]
    fn a_failed_sync_never_turns_into_a_later_success() {
        let mut d = disk_with("a.log", b"durable", 1, 256);
        d.inject(Fault::SyncEio {
            prefix: "a.".into(),
            once: true,
        });
        d.write("a.log", 7, b"+lost").unwrap();
        assert!(matches!(d.sync("a.log"), Err(SimError::Eio(_))));
        // The page cache still shows the write, and a retried sync "succeeds"...
        assert_eq!(d.read("a.log", 0, 64).unwrap(), b"durable+lost");
        assert_eq!(d.sync("a.log"), Ok(()));
        // ...but a crash shows it was never written, even with every pending sector kept.
        d.crash();
        assert_eq!(d.read("a.log", 0, 64).unwrap(), b"durable");
        assert_eq!(d.counts.sync_eio, 1);
    }

    #[test]
    fn directory_entries_need_a_directory_sync() {
        let mut d = disk_with("old", b"old contents", 3, 256);
        d.create("new.tmp").unwrap();
        d.write("new.tmp", 0, b"new contents").unwrap();
        d.sync("new.tmp").unwrap();
        d.rename("new.tmp", "old").unwrap();
        assert_eq!(d.read("old", 0, 64).unwrap(), b"new contents");
        d.crash();
        // Without the directory sync the rename is gone: the old file is back.
        assert_eq!(d.list(), vec!["old".to_string()]);
        assert_eq!(d.read("old", 0, 64).unwrap(), b"old contents");
        d.create("new.tmp").unwrap();
        d.write("new.tmp", 0, b"new contents").unwrap();
        d.sync("new.tmp").unwrap();
        d.rename("new.tmp", "old").unwrap();
        d.sync_dir();
        d.crash();
        assert_eq!(d.read("old", 0, 64).unwrap(), b"new contents");
    }

    #[test]
    fn write_errors_full_disks_and_corrupt_sectors() {
        let mut d = disk_with("a.log", &[0u8; 2 * SECTOR], 5, 128);
        d.inject(Fault::WriteEio {
            prefix: "a.log".into(),
            once: true,
        });
        assert!(matches!(d.write("a.log", 0, b"x"), Err(SimError::Eio(_))));
        d.write("a.log", 0, b"x").unwrap(); // once: spent
        d.inject(Fault::NoSpace {
            capacity: 2 * SECTOR as u64 + 10,
        });
        d.write("a.log", 2 * SECTOR as u64, &[1; 10]).unwrap();
        assert!(matches!(
            d.write("a.log", 2 * SECTOR as u64 + 10, &[1; 1]),
            Err(SimError::NoSpace(_))
        ));
        // Overwriting inside the file needs no space.
        d.write("a.log", 1, b"y").unwrap();
        d.clear_faults();
        d.inject(Fault::CorruptSector {
            name: "a.log".into(),
            sector: 1,
        });
        let got = d.read("a.log", 0, 2 * SECTOR).unwrap();
        assert_eq!(&got[..2], b"xy");
        assert!(got[SECTOR..].iter().all(|b| *b == 0xA5), "sector 1 flipped");
        assert_eq!(
            (
                d.counts.write_eio,
                d.counts.no_space,
                d.counts.corrupt_reads
            ),
            (1, 1, 1)
        );
    }

    #[test]
    fn truncations_are_kept_or_not_by_the_crash() {
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..16 {
            let mut d = disk_with("a.log", &[4u8; 4 * SECTOR], seed, 128);
            d.set_len("a.log", SECTOR as u64).unwrap();
            d.crash();
            lengths.insert(d.len("a.log").unwrap());
        }
        assert_eq!(
            lengths.into_iter().collect::<Vec<_>>(),
            vec![SECTOR as u64, 4 * SECTOR as u64]
        );
    }
}
