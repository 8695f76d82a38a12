//! Deleting a whole log directory without stalling its shard.
//!
//! Unlinking a log of a few GB takes hundreds of milliseconds on ext4 (a 5 GB partition of a
//! deleted benchmark topic held its shard for 707 ms), and every other partition of that shard
//! would wait. So a directory is first renamed out of the way, `<dir>.<id>-delete` as Kafka
//! names it (one `rename`, the log is gone from its path at once), then removed by one
//! process-wide deleter thread. A directory left behind by a crash between the two steps is
//! found by [`sweep`] at the next start.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// What a directory waiting for deletion ends with.
pub const DELETE_SUFFIX: &str = "-delete";

static DELETER: OnceLock<Mutex<Sender<PathBuf>>> = OnceLock::new();

fn deleter() -> Sender<PathBuf> {
    DELETER
        .get_or_init(|| {
            let (tx, rx) = channel::<PathBuf>();
            std::thread::Builder::new()
                .name("keel-deleter".into())
                .spawn(move || {
                    for dir in rx {
                        remove_now(&dir);
                    }
                })
                .expect("starting the deleter thread");
            Mutex::new(tx)
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

fn remove_now(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => tracing::debug!(dir = %dir.display(), "deleted"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "deleting a renamed log directory failed")
        }
    }
}

/// The name `dir` is renamed to before it is deleted: `<dir>.<nanoseconds since the epoch,
/// hex>-delete`, unique per deletion of the same partition.
pub fn doomed_name(dir: &Path) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut name = dir.as_os_str().to_owned();
    name.push(format!(".{nanos:x}{DELETE_SUFFIX}"));
    PathBuf::from(name)
}

/// Renames `dir` to [`doomed_name`] and hands it to the deleter thread; returns the new name.
/// The caller has closed every file of the log. After this returns nothing is left at `dir`.
pub fn remove_dir_later(dir: &Path) -> std::io::Result<PathBuf> {
    let doomed = doomed_name(dir);
    std::fs::rename(dir, &doomed)?;
    if let Some(parent) = dir.parent() {
        crate::io::sync_dir(parent)?;
    }
    if let Err(back) = deleter().send(doomed.clone()) {
        // The thread is gone (it never exits while the process runs): delete here.
        remove_now(&back.0);
    }
    Ok(doomed)
}

/// Hands every `*-delete` directory directly under `data_dir` (left by a crash between the
/// rename and the deletion) to the deleter thread; returns how many.
pub fn sweep(data_dir: &Path) -> std::io::Result<usize> {
    let mut found = 0;
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if entry.file_type()?.is_dir() && name.to_string_lossy().ends_with(DELETE_SUFFIX) {
            found += 1;
            let path = entry.path();
            if let Err(back) = deleter().send(path) {
                remove_now(&back.0);
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_gone(p: &Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.exists() {
            assert!(Instant::now() < deadline, "{} still there", p.display());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_removed_directory_is_gone_at_once_and_deleted_later() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("topic-0");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("00000000000000000000.log"), vec![7u8; 1 << 20]).unwrap();
        let doomed = remove_dir_later(&dir).unwrap();
        assert!(!dir.exists());
        let name = doomed.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("topic-0.") && name.ends_with(DELETE_SUFFIX),
            "{name}"
        );
        wait_gone(&doomed);
        // The same partition again (recreated, deleted again) gets another name.
        std::fs::create_dir(&dir).unwrap();
        let again = remove_dir_later(&dir).unwrap();
        assert_ne!(again, doomed);
        wait_gone(&again);
        let left: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn sweep_deletes_only_leftover_delete_directories() {
        let root = tempfile::tempdir().unwrap();
        let keep = root.path().join("orders-3");
        let meta = root.path().join("__cluster_metadata-0");
        let left = root.path().join("orders-2.18a3f-delete");
        for d in [&keep, &meta, &left] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("00000000000000000000.log"), b"x").unwrap();
        }
        // A file with the suffix is not a log directory: left alone.
        std::fs::write(root.path().join("notes-delete"), b"x").unwrap();
        assert_eq!(sweep(root.path()).unwrap(), 1);
        wait_gone(&left);
        assert!(keep.join("00000000000000000000.log").exists());
        assert!(meta.join("00000000000000000000.log").exists());
        assert!(root.path().join("notes-delete").exists());
    }
}
