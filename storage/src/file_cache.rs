//! The per-shard cache of open closed-segment files.
//!
//! A partition keeps only its active segment's file open. Closed (finalized, immutable)
//! segments are opened on demand when read, through this cache, which holds at most
//! `capacity` files per shard and closes the least recently used beyond that. So open file
//! descriptors stay near `partitions + capacity` per shard however many segments the logs
//! hold. Thread-local: each shard (glommio executor thread) has its own; never shared.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::error::StorageError;
use crate::io::{Disk, SegmentFile};

/// Default number of closed-segment files a shard keeps open.
pub const DEFAULT_CAPACITY: usize = 1024;

struct Cache {
    capacity: usize,
    tick: u64,
    files: HashMap<PathBuf, (Rc<SegmentFile>, u64)>,
    opened_total: u64,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache {
        capacity: DEFAULT_CAPACITY,
        tick: 0,
        files: HashMap::new(),
        opened_total: 0,
    });
}

/// Sets this shard's capacity (at least 1); extra files close.
pub fn set_capacity(capacity: usize) {
    let evicted = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.capacity = capacity.max(1);
        evict(&mut c)
    });
    close_all(evicted);
}

/// (files open now, files opened since start) on this shard.
pub fn stats() -> (usize, u64) {
    CACHE.with(|c| {
        let c = c.borrow();
        (c.files.len(), c.opened_total)
    })
}

fn evict(c: &mut Cache) -> Vec<Rc<SegmentFile>> {
    let mut out = Vec::new();
    while c.files.len() > c.capacity {
        let Some(oldest) = c
            .files
            .iter()
            .min_by_key(|(_, (_, t))| *t)
            .map(|(p, _)| p.clone())
        else {
            break;
        };
        if let Some((f, _)) = c.files.remove(&oldest) {
            out.push(f);
        }
    }
    out
}

fn close_all(files: Vec<Rc<SegmentFile>>) {
    for f in files {
        // Readers holding the file keep it open until they finish; the last one closes it.
        glommio::spawn_local(async move {
            let _ = f.close_rc().await;
        })
        .detach();
    }
}

/// The open file of the closed segment at `path`, opening it if needed.
pub async fn get(disk: &Disk, path: &Path) -> Result<Rc<SegmentFile>, StorageError> {
    let hit = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.tick += 1;
        let tick = c.tick;
        c.files.get_mut(path).map(|(f, t)| {
            *t = tick;
            f.clone()
        })
    });
    if let Some(f) = hit {
        return Ok(f);
    }
    let file = Rc::new(disk.open_existing(path).await?);
    let (file, evicted) = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.tick += 1;
        let tick = c.tick;
        c.opened_total += 1;
        // Another reader may have opened it meanwhile: keep one.
        let kept = c
            .files
            .entry(path.to_path_buf())
            .or_insert((file.clone(), tick))
            .0
            .clone();
        (kept, evict(&mut c))
    });
    close_all(evicted);
    Ok(file)
}

/// Drops `path` from the cache (its segment is deleted or replaced), closing the file.
pub fn forget(path: &Path) {
    let gone = CACHE.with(|c| c.borrow_mut().files.remove(path));
    if let Some((f, _)) = gone {
        close_all(vec![f]);
    }
}

/// Drops every cached file under `dir` (the fault simulation, after a simulated crash: the
/// paths may name other files now).
pub fn forget_under(dir: &Path) {
    let gone: Vec<Rc<SegmentFile>> = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let paths: Vec<PathBuf> = c
            .files
            .keys()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect();
        paths
            .into_iter()
            .filter_map(|p| c.files.remove(&p).map(|(f, _)| f))
            .collect()
    });
    close_all(gone);
}

/// Closes every cached file now. For tests, which run one executor after another on the same
/// thread: a file must not outlive its executor in this thread-local cache, or a later
/// eviction would close it on a reactor that is gone.
#[cfg(test)]
pub async fn close_all_now() {
    let files: Vec<Rc<SegmentFile>> =
        CACHE.with(|c| c.borrow_mut().files.drain().map(|(_, (f, _))| f).collect());
    for f in files {
        let _ = f.close_rc().await;
    }
}
