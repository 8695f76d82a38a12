//! The FUSE file system over a [`SimDisk`]: every request becomes one call on the disk model,
//! by inode (FUSE inode numbers are the model's). Opens ask the kernel for direct I/O, so no
//! page cache sits between the broker and the model: what the broker writes reaches the model
//! at once, and what it reads is what the model holds.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};
use keel_simdisk::{Ino, Kind, SimDisk, SimError};

/// How long the kernel may cache names and attributes. Only the model changes them, and a
/// crash remounts (dropping every cache), so a second is safe.
const TTL: Duration = Duration::from_secs(1);

/// How much the file system says it holds (statfs): 16 GiB in 4 KiB blocks.
const BLOCKS: u64 = 4 << 20;

pub struct LazyFs {
    pub disk: Arc<Mutex<SimDisk>>,
}

fn errno(e: &SimError) -> Errno {
    Errno::from_i32(e.errno())
}

fn name_str(name: &OsStr) -> Result<&str, Errno> {
    name.to_str().ok_or(Errno::EINVAL)
}

impl LazyFs {
    fn disk(&self) -> MutexGuard<'_, SimDisk> {
        self.disk.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attr(disk: &SimDisk, ino: Ino) -> Result<FileAttr, Errno> {
        let kind = disk.kind(ino).ok_or(Errno::ENOENT)?;
        let size = disk.len(ino).map_err(|e| errno(&e))?;
        let (kind, perm, nlink) = match kind {
            Kind::File => (FileType::RegularFile, 0o644, 1),
            Kind::Dir => (FileType::Directory, 0o755, 2),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn entry(&self, reply: ReplyEntry, made: impl FnOnce(&mut SimDisk) -> Result<Ino, SimError>) {
        let mut disk = self.disk();
        match made(&mut disk).map_err(|e| errno(&e)) {
            Ok(ino) => match Self::attr(&disk, ino) {
                Ok(a) => reply.entry(&TTL, &a, Generation(0)),
                Err(e) => reply.error(e),
            },
            Err(e) => reply.error(e),
        }
    }

    /// A delayed request (a [`keel_simdisk::Fault::Delay`]): `op` runs on the model and
    /// answers from another thread after `ms` milliseconds, while this one goes on serving the
    /// rest of the file system. Unless the power was cut meanwhile: then nothing of it reaches
    /// the model, and the dropped reply answers EIO (to a process the cut already ended).
    fn after(&self, ms: u64, op: impl FnOnce(&mut SimDisk) + Send + 'static) {
        let disk = self.disk.clone();
        let crashes = self.disk().counts.crashes;
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            let mut disk = disk.lock().unwrap_or_else(|p| p.into_inner());
            if disk.counts.crashes == crashes {
                op(&mut disk);
            }
        });
    }

    /// fsync and fsyncdir: the model's sync, after a delay a `Fault::Delay` puts on it (never
    /// on a directory).
    fn sync(&self, ino: INodeNo, reply: ReplyEmpty) {
        let delay = self.disk().take_delay(ino.0, false);
        match delay {
            None => self.empty(reply, |d| d.sync(ino.0)),
            Some(ms) => self.after(ms, move |disk| match disk.sync(ino.0) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }),
        }
    }

    fn empty(&self, reply: ReplyEmpty, op: impl FnOnce(&mut SimDisk) -> Result<(), SimError>) {
        match op(&mut self.disk()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

impl Filesystem for LazyFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Ok(name) = name_str(name) else {
            return reply.error(Errno::ENOENT);
        };
        self.entry(reply, |d| d.lookup(parent.0, name));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match Self::attr(&self.disk(), ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Modes, owners and times are not modelled: only the length.
        let mut disk = self.disk();
        if let Some(size) = size {
            if let Err(e) = disk.set_len(ino.0, size) {
                return reply.error(errno(&e));
            }
        }
        match Self::attr(&disk, ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let Ok(name) = name_str(name) else {
            return reply.error(Errno::EINVAL);
        };
        self.entry(reply, |d| d.mkdir(parent.0, name));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Ok(name) = name_str(name) else {
            return reply.error(Errno::ENOENT);
        };
        self.empty(reply, |d| d.unlink(parent.0, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Ok(name) = name_str(name) else {
            return reply.error(Errno::ENOENT);
        };
        self.empty(reply, |d| d.rmdir(parent.0, name));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_NOREPLACE / RENAME_EXCHANGE are not modelled.
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let (Ok(name), Ok(newname)) = (name_str(name), name_str(newname)) else {
            return reply.error(Errno::EINVAL);
        };
        self.empty(reply, |d| d.rename(parent.0, name, newparent.0, newname));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.disk().kind(ino.0) {
            Some(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let Ok(name) = name_str(name) else {
            return reply.error(Errno::EINVAL);
        };
        let mut disk = self.disk();
        let made = disk.create(parent.0, name).map_err(|e| errno(&e));
        match made.and_then(|ino| Self::attr(&disk, ino)) {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.disk().read(ino.0, offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wf: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let write = move |disk: &mut SimDisk, data: &[u8]| match disk.write(ino.0, offset, data) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(&e)),
        };
        let delay = self.disk().take_delay(ino.0, true);
        match delay {
            None => write(&mut self.disk(), data),
            Some(ms) => {
                let data = data.to_vec();
                self.after(ms, move |disk| write(disk, &data));
            }
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() syncs nothing.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lo: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(ino, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.disk().entries(ino.0) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(&e)),
        };
        let dots = [
            (ino.0, FileType::Directory, ".".to_string()),
            (ino.0, FileType::Directory, "..".to_string()),
        ];
        let all = dots.into_iter().chain(entries.into_iter().map(|(n, i, k)| {
            let kind = match k {
                Kind::File => FileType::RegularFile,
                Kind::Dir => FileType::Directory,
            };
            (i, kind, n)
        }));
        for (i, (child, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync(ino, reply);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // Plain preallocation grows the file (zeros); KEEP_SIZE reserves nothing here. Hole
        // punching and the rest are not modelled.
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        self.empty(reply, |d| {
            let end = offset + length;
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && d.len(ino.0)? < end {
                d.set_len(ino.0, end)?;
            }
            Ok(())
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(BLOCKS, BLOCKS, BLOCKS, 1 << 20, 1 << 20, 4096, 255, 4096);
    }
}
