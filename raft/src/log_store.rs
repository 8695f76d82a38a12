//! The durable Raft log and vote, in `<data.dir>/__cluster_metadata-0/`.
//!
//! - `raft.log`: frames `[len u32 LE][crc32c u32 LE][entry JSON]`, appended and fdatasync'ed
//!   before openraft hears the entries are durable.
//! - `vote.json`: the vote, replaced atomically (write temp, fsync, rename, fsync dir).
//! - `purged.json`: the last log id removed after a snapshot; written before `raft.log` is
//!   rewritten without those entries, so a crash between the two only leaves extra entries
//!   that recovery drops.
//!
//! Recovery reads frames until the first incomplete one or one whose CRC fails, and truncates
//! the file there: appends are synced one call at a time, so only the tail can be torn. An
//! append whose write or sync fails is cut off the file again (a failed fdatasync leaves the
//! bytes readable from the page cache, and a restart without a power cut would take entries
//! that the next power cut loses).
//!
//! Every file operation goes through [`MetaFs`] (the I/O seam: the real file system, or the
//! fault simulation's disk model in the crash test below).
//! Entries live in memory too (the metadata log is bounded by snapshots); the reader that
//! openraft's replication tasks use shares them behind a mutex. Runs on the `keel-metadata`
//! thread; its blocking file I/O never touches a shard.

// openraft's storage traits fix the error type (`StorageError`, large); helpers return it too.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, StorageError, StorageIOError, Vote};

pub(crate) use crate::fs::write_atomic;
use crate::fs::{MetaFs, StdFs};
use crate::{NodeId, TypeConfig};

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const PURGED_FILE: &str = "purged.json";
const FRAME_HEADER: usize = 8;
/// Largest entry accepted when reading the log back.
const ENTRY_BYTES_MAX: usize = 64 << 20;

type SE = StorageError<NodeId>;

struct Inner {
    fs: Arc<dyn MetaFs>,
    dir: PathBuf,
    /// `<dir>/raft.log`.
    path: PathBuf,
    /// index -> (entry, byte position of its frame).
    entries: BTreeMap<u64, (Entry<TypeConfig>, u64)>,
    /// Byte length of the valid log file.
    end_position: u64,
    last_purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
}

/// The log store; cheap to clone (shared state).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_err(e: impl std::fmt::Display) -> SE {
    StorageIOError::write_logs(&std::io::Error::other(e.to_string())).into()
}

fn read_json<T: serde::de::DeserializeOwned>(
    fs: &dyn MetaFs,
    path: &Path,
) -> std::io::Result<Option<T>> {
    match fs.read(path)? {
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        None => Ok(None),
    }
}

fn frame(entry: &Entry<TypeConfig>) -> Result<Vec<u8>, SE> {
    let payload = serde_json::to_vec(entry).map_err(io_err)?;
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Parses frames from `bytes`: the entries with their positions, and the length of the valid
/// prefix. The bytes are the log file as read at open: hostile, never a panic.
pub(crate) fn parse_frames(bytes: &[u8]) -> (Vec<(Entry<TypeConfig>, u64)>, u64) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while bytes.len() - pos >= FRAME_HEADER {
        let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]])
            as usize;
        let crc = u32::from_le_bytes([
            bytes[pos + 4],
            bytes[pos + 5],
            bytes[pos + 6],
            bytes[pos + 7],
        ]);
        if len > ENTRY_BYTES_MAX || bytes.len() - pos - FRAME_HEADER < len {
            break;
        }
        let payload = &bytes[pos + FRAME_HEADER..pos + FRAME_HEADER + len];
        if crc32c::crc32c(payload) != crc {
            break;
        }
        let Ok(entry) = serde_json::from_slice::<Entry<TypeConfig>>(payload) else {
            break;
        };
        out.push((entry, pos as u64));
        pos += FRAME_HEADER + len;
    }
    (out, pos as u64)
}

impl LogStore {
    /// Opens (creating) the store in `dir` on the real file system, recovering the log.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        LogStore::open_on(Arc::new(StdFs), dir)
    }

    /// Opens (creating) the store in `dir` on `fs`, recovering the log.
    pub fn open_on(fs: Arc<dyn MetaFs>, dir: &Path) -> std::io::Result<LogStore> {
        // The directory's own entry must survive a power cut with the log in it.
        fs.create_dir_all_durable(dir)?;
        let path = dir.join(LOG_FILE);
        fs.create(&path)?;
        let bytes = fs.read(&path)?.unwrap_or_default();
        let (parsed, valid) = parse_frames(&bytes);
        if valid < bytes.len() as u64 {
            tracing::warn!(
                file = %path.display(),
                valid_bytes = valid,
                file_bytes = bytes.len(),
                "metadata log has a torn or corrupt tail; truncating it"
            );
            fs.set_len(&path, valid)?;
            fs.sync_file(&path)?;
        }
        let last_purged: Option<LogId<NodeId>> = read_json(&*fs, &dir.join(PURGED_FILE))?;
        let vote: Option<Vote<NodeId>> = read_json(&*fs, &dir.join(VOTE_FILE))?;
        let mut entries = BTreeMap::new();
        for (entry, pos) in parsed {
            if last_purged.is_some_and(|p| entry.log_id.index <= p.index) {
                continue;
            }
            entries.insert(entry.log_id.index, (entry, pos));
        }
        // The log file's directory entry must survive a crash too.
        fs.sync_dir(dir)?;
        tracing::info!(
            dir = %dir.display(),
            entries = entries.len(),
            last_purged = ?last_purged.map(|l| l.index),
            "metadata log opened"
        );
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                fs,
                dir: dir.to_path_buf(),
                path,
                entries,
                end_position: valid,
                last_purged,
                vote,
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries held (after purges), for tests and metrics.
    pub fn entry_count(&self) -> usize {
        self.lock().entries.len()
    }

    fn append_sync(&self, entries: Vec<Entry<TypeConfig>>) -> Result<(), SE> {
        let mut g = self.lock();
        let mut buf = Vec::new();
        let mut positions = Vec::with_capacity(entries.len());
        for e in &entries {
            positions.push(g.end_position + buf.len() as u64);
            buf.extend_from_slice(&frame(e)?);
        }
        let written =
            g.fs.write_at(&g.path, g.end_position, &buf)
                .and_then(|()| g.fs.sync_file(&g.path));
        if let Err(e) = written {
            // Cut what may have reached the page cache: a reopen without a power cut must not
            // find entries that were never durable (and this store was not told they were).
            let cut =
                g.fs.set_len(&g.path, g.end_position)
                    .and_then(|()| g.fs.sync_file(&g.path));
            if let Err(cut) = cut {
                tracing::error!(error = %cut, "metadata log: cannot cut a failed append off the file");
            }
            return Err(io_err(e));
        }
        g.end_position += buf.len() as u64;
        for (e, pos) in entries.into_iter().zip(positions) {
            g.entries.insert(e.log_id.index, (e, pos));
        }
        Ok(())
    }

    fn save_vote_sync(&self, vote: &Vote<NodeId>) -> Result<(), SE> {
        let (fs, dir) = {
            let g = self.lock();
            (g.fs.clone(), g.dir.clone())
        };
        let bytes = serde_json::to_vec(vote).map_err(io_err)?;
        write_atomic(&*fs, &dir.join(VOTE_FILE), &bytes)
            .map_err(|e| SE::from(StorageIOError::write_vote(&e)))?;
        self.lock().vote = Some(*vote);
        Ok(())
    }

    fn truncate_sync(&self, from_index: u64) -> Result<(), SE> {
        let mut g = self.lock();
        let Some(pos) = g.entries.range(from_index..).next().map(|(_, (_, p))| *p) else {
            return Ok(());
        };
        g.fs.set_len(&g.path, pos).map_err(io_err)?;
        // From here the file may be cut or not: the next append writes at `pos` either way.
        g.end_position = pos;
        let _ = g.entries.split_off(&from_index);
        g.fs.sync_file(&g.path).map_err(io_err)
    }

    fn purge_sync(&self, log_id: LogId<NodeId>) -> Result<(), SE> {
        let mut g = self.lock();
        let (fs, dir) = (g.fs.clone(), g.dir.clone());
        write_atomic(
            &*fs,
            &dir.join(PURGED_FILE),
            &serde_json::to_vec(&log_id).map_err(io_err)?,
        )
        .map_err(io_err)?;
        g.last_purged = Some(log_id);
        let keep = g.entries.split_off(&(log_id.index + 1));
        g.entries = keep;
        // Rewrite the file with what remains: a new file renamed over the old one.
        let mut out = Vec::new();
        let mut rebuilt = BTreeMap::new();
        for (index, (entry, _)) in &g.entries {
            let pos = out.len() as u64;
            out.extend_from_slice(&frame(entry)?);
            rebuilt.insert(*index, (entry.clone(), pos));
        }
        let tmp = dir.join("raft.log.tmp");
        fs.write_new(&tmp, &out).map_err(io_err)?;
        fs.rename(&tmp, &g.path).map_err(io_err)?;
        fs.sync_dir(&dir).map_err(io_err)?;
        g.end_position = out.len() as u64;
        g.entries = rebuilt;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, SE> {
        let g = self.lock();
        Ok(g.entries
            .range(range)
            .map(|(_, (e, _))| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SE> {
        let g = self.lock();
        let last = g
            .entries
            .values()
            .next_back()
            .map(|(e, _)| e.log_id)
            .or(g.last_purged);
        Ok(LogState {
            last_purged_log_id: g.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), SE> {
        self.save_vote_sync(vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, SE> {
        Ok(self.lock().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SE>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let result = self.append_sync(entries);
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), SE> {
        self.truncate_sync(log_id.index)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), SE> {
        self.purge_sync(log_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(crate::Proposal {
                batch: vec![index as u8; 3],
            }),
        }
    }

    #[test]
    fn torn_tail_is_truncated_and_entries_survive() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        store
            .append_sync((1..=5).map(|i| entry(1, i)).collect())
            .unwrap();
        drop(store);
        // Tear the last frame.
        let path = dir.path().join(LOG_FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        let store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.entry_count(), 4);
        store.append_sync(vec![entry(2, 5)]).unwrap();
        drop(store);
        let store = LogStore::open(dir.path()).unwrap();
        let g = store.lock();
        assert_eq!(g.entries.len(), 5);
        assert_eq!(g.entries[&5].0.log_id.leader_id.term, 2);
    }

    #[test]
    fn truncate_and_purge_persist() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        store
            .append_sync((1..=10).map(|i| entry(1, i)).collect())
            .unwrap();
        store.truncate_sync(8).unwrap();
        store.append_sync(vec![entry(3, 8)]).unwrap();
        store
            .purge_sync(LogId::new(CommittedLeaderId::new(1, 1), 4))
            .unwrap();
        store.append_sync(vec![entry(3, 9)]).unwrap();
        drop(store);
        let store = LogStore::open(dir.path()).unwrap();
        let g = store.lock();
        let idx: Vec<u64> = g.entries.keys().copied().collect();
        assert_eq!(idx, vec![5, 6, 7, 8, 9]);
        assert_eq!(g.entries[&8].0.log_id.leader_id.term, 3);
        assert_eq!(g.last_purged.unwrap().index, 4);
    }

    /// What the store holds, as the crash test compares it: entries (index -> term), the
    /// last purged index, the vote's term.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Held {
        entries: BTreeMap<u64, u64>,
        purged: Option<u64>,
        vote: Option<u64>,
    }

    fn held(store: &LogStore) -> Held {
        let g = store.lock();
        Held {
            entries: g
                .entries
                .iter()
                .map(|(i, (e, _))| (*i, e.log_id.leader_id.term))
                .collect(),
            purged: g.last_purged.map(|l| l.index),
            vote: g.vote.map(|v| v.leader_id().term),
        }
    }

    enum Op {
        Append(Vec<(u64, u64)>),
        Truncate(u64),
        Purge(u64),
        Vote(u64),
    }

    impl Op {
        fn name(&self) -> &'static str {
            match self {
                Op::Append(_) => "append",
                Op::Truncate(_) => "truncation",
                Op::Purge(_) => "purge",
                Op::Vote(_) => "vote",
            }
        }
    }

    /// The states `op` may leave when it fails midway: before it, after it, and for an append
    /// each prefix of its entries (a torn append is cut at recovery).
    fn outcomes(before: &Held, op: &Op) -> Vec<Held> {
        let mut out = vec![before.clone()];
        match op {
            Op::Append(new) => {
                let mut h = before.clone();
                for (i, t) in new {
                    h.entries.insert(*i, *t);
                    out.push(h.clone());
                }
            }
            Op::Truncate(from) => {
                let mut h = before.clone();
                h.entries.retain(|i, _| i < from);
                out.push(h);
            }
            Op::Purge(upto) => {
                let mut h = before.clone();
                h.entries.retain(|i, _| i > upto);
                h.purged = Some(*upto);
                out.push(h);
            }
            Op::Vote(term) => {
                let mut h = before.clone();
                h.vote = Some(*term);
                out.push(h);
            }
        }
        out
    }

    fn apply(store: &LogStore, op: &Op) -> Result<(), SE> {
        match op {
            Op::Append(new) => store.append_sync(new.iter().map(|(i, t)| entry(*t, *i)).collect()),
            Op::Truncate(from) => store.truncate_sync(*from),
            Op::Purge(upto) => store.purge_sync(LogId::new(CommittedLeaderId::new(1, 1), *upto)),
            Op::Vote(term) => store.save_vote_sync(&Vote::new(*term, 1)),
        }
    }

    /// Opens the store; a power-off while it recovers crashes the disk and opens again.
    fn reopen(fs: &crate::fs::SimFs, dir: &Path) -> LogStore {
        for _ in 0..10 {
            match LogStore::open_on(Arc::new(fs.clone()), dir) {
                Ok(store) => return store,
                Err(_) => {
                    let mut d = fs.disk();
                    d.clear_faults();
                    d.crash();
                }
            }
        }
        panic!("the metadata log does not open");
    }

    /// The metadata log on the fault simulation's disk model (the I/O seam): seeded appends,
    /// truncations, purges and votes, with power cuts between operations and inside them (the
    /// power goes off a seeded number of disk changes from now: inside a write, between a
    /// write and its sync, between a rename and the directory sync), torn unsynced sectors,
    /// and EIO on a write or a sync. Checked: after a power cut the store holds exactly what
    /// the operations that returned Ok left (plus, for one that failed midway, one of its
    /// possible outcomes), and what a restart without a power cut finds, a power cut keeps.
    #[test]
    fn the_metadata_log_survives_power_cuts_and_failed_syncs() {
        use keel_simdisk::{Fault, SimDisk, SplitMix64};
        let seeds: u64 = std::env::var("META_LOG_SEEDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300);
        let dir = Path::new("data/__cluster_metadata-0");
        let (mut crashes, mut failed_ops, mut eio) = (0u64, 0u64, 0u64);
        for seed in 0..seeds {
            let mut rng = SplitMix64(seed ^ 0x6d65_7461);
            let keep = [0u32, 128, 256][(rng.next() % 3) as usize];
            let fs = crate::fs::SimFs::new(SimDisk::new(rng.next(), keep));
            let mut store = reopen(&fs, dir);
            let mut model = held(&store);
            let mut term = 1;
            for step in 0..200 {
                let ctx = |what: &str| format!("seed {seed} step {step}: {what}");
                let first = model.purged.map_or(1, |p| p + 1);
                let next = model.entries.keys().next_back().map_or(first, |l| l + 1);
                let op = match rng.next() % 100 {
                    0..=49 => {
                        if rng.next().is_multiple_of(8) {
                            term += 1;
                        }
                        let n = 1 + rng.next() % 3;
                        Op::Append((next..next + n).map(|i| (i, term)).collect())
                    }
                    50..=59 if next > first => Op::Truncate(first + rng.next() % (next - first)),
                    60..=67 if next > first => Op::Purge(first + rng.next() % (next - first)),
                    68..=74 => {
                        term += 1;
                        Op::Vote(term)
                    }
                    75..=82 => {
                        fs.disk().power_off_after(rng.next() % 6);
                        continue;
                    }
                    83..=87 => {
                        let prefix = "data/__cluster_metadata-0".to_string();
                        let fault = if rng.next().is_multiple_of(2) {
                            Fault::SyncEio { prefix, once: true }
                        } else {
                            Fault::WriteEio { prefix, once: true }
                        };
                        fs.disk().inject(fault);
                        continue;
                    }
                    88..=94 => {
                        // A power cut between operations: everything they returned Ok for
                        // stays.
                        drop(store);
                        fs.disk().power_stays_on();
                        fs.disk().crash();
                        crashes += 1;
                        store = reopen(&fs, dir);
                        assert_eq!(held(&store), model, "{}", ctx("after a power cut"));
                        continue;
                    }
                    _ => {
                        drop(store);
                        store = reopen(&fs, dir);
                        assert_eq!(held(&store), model, "{}", ctx("after a restart"));
                        continue;
                    }
                };
                match apply(&store, &op) {
                    Ok(()) => {
                        let after = outcomes(&model, &op).pop().expect("the outcome");
                        assert_eq!(held(&store), after, "{}", ctx("after an operation"));
                        model = after;
                    }
                    Err(_) => {
                        // Storage errors are fatal to openraft: the node restarts, with the
                        // power cut or without it.
                        failed_ops += 1;
                        let off = fs.disk().is_off();
                        if !off {
                            eio += 1;
                        }
                        drop(store);
                        let possible = outcomes(&model, &op);
                        let seen = if off {
                            fs.disk().crash();
                            crashes += 1;
                            let store = reopen(&fs, dir);
                            held(&store)
                        } else {
                            // Without a power cut first. What the restart finds it may act on
                            // (acknowledge entries to a leader, answer votes), so a power cut
                            // must keep it. A truncation or a purge that failed may come
                            // undone instead: the entries a truncation cut were never
                            // committed (Raft's log matching) and a purge only compacts.
                            fs.disk().clear_faults();
                            let store = reopen(&fs, dir);
                            let seen = held(&store);
                            drop(store);
                            fs.disk().crash();
                            crashes += 1;
                            let store = reopen(&fs, dir);
                            let kept = held(&store);
                            let may_undo = matches!(op, Op::Truncate(_) | Op::Purge(_));
                            assert!(
                                kept == seen || may_undo && possible.contains(&kept),
                                "{}: a restart found {seen:?}, the power cut left {kept:?}",
                                ctx(&format!(
                                    "what a restart found after a failed {} was lost at the \
                                     next power cut",
                                    op.name()
                                ))
                            );
                            kept
                        };
                        assert!(
                            possible.contains(&seen),
                            "{}: {seen:?} is none of {possible:?}",
                            ctx("after a failed operation")
                        );
                        fs.disk().clear_faults();
                        model = seen;
                        store = reopen(&fs, dir);
                    }
                }
            }
        }
        eprintln!(
            "metadata log: {seeds} seeds x 200 steps, {crashes} power cuts, {failed_ops} \
             operations failed midway ({eio} by EIO)"
        );
        assert!(crashes > seeds && failed_ops > seeds / 2 && eio > 0);
    }
}
