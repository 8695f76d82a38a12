//! Small file helpers over glommio for the files that are not O_DIRECT streams: index files,
//! producer-state snapshots and the leader-epoch checkpoint (buffered I/O, never mixed with DMA on the same file), and
//! listing a partition directory. Runs on the owning shard; directory listing and existence
//! checks are plain syscalls, done only at open.

use std::path::{Path, PathBuf};

use glommio::io::{BufferedFile, DmaFile, OpenOptions};

use crate::error::StorageError;
use crate::types::Offset;

/// Replaces `path` with `data` (create/truncate, write, fdatasync).
pub async fn write_file(path: &Path, data: Vec<u8>) -> Result<(), StorageError> {
    let file = BufferedFile::create(path).await?;
    let len = data.len();
    if len > 0 {
        let n = file.write_at(data, 0).await?;
        if n != len {
            return Err(StorageError::Io(std::io::Error::other(format!(
                "short write to {}: {n} of {len} bytes",
                path.display()
            ))));
        }
    }
    file.fdatasync().await?;
    file.close().await?;
    Ok(())
}

/// Writes `data` to `<path>.tmp`, syncs it, renames it over `path` and syncs the directory:
/// once this returns, a power cut leaves the new contents (before, the old or the new).
pub async fn write_file_atomic(path: &Path, data: Vec<u8>) -> Result<(), StorageError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    write_file(&tmp, data).await?;
    glommio::io::rename(&tmp, path).await?;
    sync_dir_async(parent_of(path)).await
}

/// The directory holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The directories `create_dir_all(dir)` would create, outermost first.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    missing.reverse();
    missing
}

/// Creates `dir` and its missing parents so that they survive a power cut: each directory
/// created is fsynced into its parent (a file synced into a directory whose own entry was never
/// synced is lost with it). Blocking: for startup, before the shards run.
pub fn create_dir_all_durable(dir: &Path) -> std::io::Result<()> {
    let missing = missing_dirs(dir);
    std::fs::create_dir_all(dir)?;
    for d in &missing {
        sync_dir(parent_of(d))?;
    }
    Ok(())
}

/// [`create_dir_all_durable`] through the reactor, for a shard creating a partition.
pub async fn create_dir_all_durable_async(dir: &Path) -> Result<(), StorageError> {
    let missing = missing_dirs(dir);
    std::fs::create_dir_all(dir)?;
    for d in &missing {
        sync_dir_async(parent_of(d)).await?;
    }
    Ok(())
}

/// The whole file, or `None` if it does not exist.
pub async fn read_file(path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
    if !path.exists() {
        return Ok(None);
    }
    let file = BufferedFile::open(path).await?;
    let size = file.file_size().await? as usize;
    let data = if size == 0 {
        Vec::new()
    } else {
        file.read_at(0, size).await?.to_vec()
    };
    file.close().await?;
    Ok(Some(data))
}

/// Opens (creating if missing; truncating it if `truncate`) a segment `.log` for O_DIRECT
/// reads and writes. A file it creates is synced into its directory before it is returned, so
/// records later synced into it survive a power cut with their file.
pub async fn open_log_file(path: &Path, truncate: bool) -> Result<DmaFile, StorageError> {
    let existed = path.exists();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .dma_open(path)
        .await?;
    if !existed {
        if let Err(e) = sync_dir_async(parent_of(path)).await {
            let _ = file.close().await;
            return Err(e);
        }
    }
    Ok(file)
}

/// Base offsets of the `.log` files in `dir`, ascending.
pub fn list_segments(dir: &Path) -> Result<Vec<Offset>, StorageError> {
    list_offset_files(dir, ".log")
}

/// Offsets naming the `<offset, 20 digits><suffix>` files in `dir`, ascending.
pub fn list_offset_files(dir: &Path, suffix: &str) -> Result<Vec<Offset>, StorageError> {
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(suffix) else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(base) = stem.parse::<i64>() {
                bases.push(Offset(base));
            }
        }
    }
    bases.sort();
    Ok(bases)
}

thread_local! {
    /// Devices (st_dev) whose iopoll support glommio has probed on this thread.
    static PROBED_DEVICES: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// glommio probes io_uring IOPOLL support the first time a thread opens a DmaFile on a device,
/// by reading the start of that file. On an empty file the read short-circuits to success, so
/// a device without IOPOLL (virtio, most VMs) is wrongly marked pollable and every later read
/// fails with EOPNOTSUPP. Open a non-empty file first so the probe sees the truth.
pub async fn prime_iopoll_probe(dir: &Path) -> Result<(), StorageError> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    if PROBED_DEVICES.with(|p| p.borrow().contains(&dev)) {
        return Ok(());
    }
    let path = dir.join(".keel-iopoll-probe");
    std::fs::write(&path, [0u8; 4096])?;
    let opened = DmaFile::open(&path).await;
    std::fs::remove_file(&path)?;
    opened?.close().await?;
    PROBED_DEVICES.with(|p| p.borrow_mut().push(dev));
    Ok(())
}

/// fsyncs a directory through the reactor, so renames and deletions in it survive a crash.
pub async fn sync_dir_async(dir: &Path) -> Result<(), StorageError> {
    let d = glommio::io::Directory::open(dir).await?;
    let synced = d.sync().await;
    d.close().await?;
    synced?;
    Ok(())
}

/// fsyncs a directory, so renames and deletions in it survive a crash. A blocking syscall,
/// used only where an operation must complete in one step (the compaction swap).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
