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
//! the file there: appends are synced one call at a time, so only the tail can be torn.
//! Entries live in memory too (the metadata log is bounded by snapshots); the reader that
//! openraft's replication tasks use shares them behind a mutex. Runs on the `keel-metadata`
//! thread; its blocking file I/O never touches a shard.

// openraft's storage traits fix the error type (`StorageError`, large); helpers return it too.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{Entry, LogId, StorageError, StorageIOError, Vote};

use crate::{NodeId, TypeConfig};

const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const PURGED_FILE: &str = "purged.json";
const FRAME_HEADER: usize = 8;
/// Largest entry accepted when reading the log back.
const ENTRY_BYTES_MAX: usize = 64 << 20;

type SE = StorageError<NodeId>;

struct Inner {
    dir: PathBuf,
    file: File,
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

/// Writes `data` to `path` atomically and durably.
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
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
    /// Opens (creating) the store in `dir`, recovering the log.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        if !dir.exists() {
            // The directory's own entry must survive a power cut with the log in it.
            std::fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let path = dir.join(LOG_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (parsed, valid) = parse_frames(&bytes);
        if valid < bytes.len() as u64 {
            tracing::warn!(
                file = %path.display(),
                valid_bytes = valid,
                file_bytes = bytes.len(),
                "metadata log has a torn or corrupt tail; truncating it"
            );
            file.set_len(valid)?;
            file.sync_data()?;
        }
        let last_purged: Option<LogId<NodeId>> = read_json(&dir.join(PURGED_FILE))?;
        let vote: Option<Vote<NodeId>> = read_json(&dir.join(VOTE_FILE))?;
        let mut entries = BTreeMap::new();
        for (entry, pos) in parsed {
            if last_purged.is_some_and(|p| entry.log_id.index <= p.index) {
                continue;
            }
            entries.insert(entry.log_id.index, (entry, pos));
        }
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(valid))?;
        // The log file's directory entry must survive a crash too.
        sync_dir(dir)?;
        tracing::info!(
            dir = %dir.display(),
            entries = entries.len(),
            last_purged = ?last_purged.map(|l| l.index),
            "metadata log opened"
        );
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_path_buf(),
                file,
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
        g.file.write_all(&buf).map_err(io_err)?;
        g.file.sync_data().map_err(io_err)?;
        g.end_position += buf.len() as u64;
        for (e, pos) in entries.into_iter().zip(positions) {
            g.entries.insert(e.log_id.index, (e, pos));
        }
        Ok(())
    }

    fn truncate_sync(&self, from_index: u64) -> Result<(), SE> {
        let mut g = self.lock();
        let Some(pos) = g.entries.range(from_index..).next().map(|(_, (_, p))| *p) else {
            return Ok(());
        };
        g.file.set_len(pos).map_err(io_err)?;
        g.file.sync_data().map_err(io_err)?;
        use std::io::Seek;
        g.file.seek(std::io::SeekFrom::Start(pos)).map_err(io_err)?;
        g.end_position = pos;
        let _ = g.entries.split_off(&from_index);
        Ok(())
    }

    fn purge_sync(&self, log_id: LogId<NodeId>) -> Result<(), SE> {
        let mut g = self.lock();
        let dir = g.dir.clone();
        write_atomic(
            &dir.join(PURGED_FILE),
            &serde_json::to_vec(&log_id).map_err(io_err)?,
        )
        .map_err(io_err)?;
        g.last_purged = Some(log_id);
        let keep = g.entries.split_off(&(log_id.index + 1));
        g.entries = keep;
        // Rewrite the file with what remains.
        let tmp = dir.join("raft.log.tmp");
        let mut out = Vec::new();
        let mut rebuilt = BTreeMap::new();
        for (index, (entry, _)) in std::mem::take(&mut g.entries) {
            let pos = out.len() as u64;
            out.extend_from_slice(&frame(&entry)?);
            rebuilt.insert(index, (entry, pos));
        }
        {
            let mut f = File::create(&tmp).map_err(io_err)?;
            f.write_all(&out).map_err(io_err)?;
            f.sync_data().map_err(io_err)?;
        }
        std::fs::rename(&tmp, dir.join(LOG_FILE)).map_err(io_err)?;
        sync_dir(&dir).map_err(io_err)?;
        let file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(dir.join(LOG_FILE))
            .map_err(io_err)?;
        g.file = file;
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
        let dir = self.lock().dir.clone();
        let bytes = serde_json::to_vec(vote).map_err(io_err)?;
        write_atomic(&dir.join(VOTE_FILE), &bytes)
            .map_err(|e| SE::from(StorageIOError::write_vote(&e)))?;
        self.lock().vote = Some(*vote);
        Ok(())
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
        let f = OpenOptions::new().write(true).open(&path).unwrap();
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
}
