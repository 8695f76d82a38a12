//! `keel-tune iotune`: measures the disk holding the data dir and writes an io-properties file
//! that `keel serve` sizes its I/O from (see the broker's `io_sizing`).
//!
//! Phases, in order, each given a fixed share of `--duration`: sequential write (which also
//! fills the probe file, so later reads hit written blocks, not holes), sequential read, random
//! 4 KiB reads at each of [`READ_DEPTHS`], random 4 KiB writes at [`WRITE_IOPS_DEPTH`], and
//! appending one block + fdatasync in a loop (a fresh file, so each sync commits a new size). Queue depth N is N threads each with one request
//! in flight (pread/pwrite), which the device sees the same as N io_uring requests. All I/O is
//! O_DIRECT; a filesystem that refuses it (tmpfs on older kernels) falls back to buffered I/O
//! and the file says so (`direct_io = false`, `note`): such numbers are the page cache's.
//!
//! Bounds: the run takes about `duration` (a phase stops at its deadline, one request late at
//! most); the probe file never grows past `file_bytes_max` (writes wrap around) nor past a
//! quarter of the free space; it is removed when the run ends, whatever happens.
//! Nothing here runs on a shard; this is the plain `keel-tune` binary.

use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::host::Host;
use crate::mounts;

/// Queue depths random reads are measured at.
pub const READ_DEPTHS: [u32; 4] = [1, 4, 16, 64];
/// Queue depth of the random-write phase (`write_iops`).
pub const WRITE_IOPS_DEPTH: u32 = 16;
/// Size (and alignment) of random I/O and of the fdatasync'ed write.
pub const BLOCK_BYTES: u64 = 4096;
/// Size of one sequential request.
pub const SEQUENTIAL_BLOCK_BYTES: u64 = 128 * 1024;
/// Requests in flight during the sequential phases.
pub const SEQUENTIAL_DEPTH: u32 = 4;
/// The probe file's default size cap.
pub const FILE_BYTES_MAX_DEFAULT: u64 = 1 << 30;
/// The default `--duration`.
pub const DURATION_DEFAULT: Duration = Duration::from_secs(10);
/// The file name written in the data dir unless `--out` says otherwise; `keel serve` looks
/// for the same name.
pub const FILE_NAME: &str = "io-properties.toml";
/// Latency samples kept for the fdatasync percentiles.
const SYNC_SAMPLES_MAX: usize = 100_000;
/// The fdatasync phase appends to a fresh file up to this size, then wraps around.
const SYNC_SPAN_BYTES_MAX: u64 = 64 << 20;

/// What one iotune run measured. Seastar/Redpanda names where they have one (`mountpoint`,
/// `read_iops`, `read_bandwidth`, `write_iops`, `write_bandwidth`: IOPS and bytes per second);
/// the rest is Keel's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoProperties {
    pub mountpoint: String,
    /// The block device under the mount (`nvme0n1`), or why it is not known.
    pub device: String,
    pub filesystem: String,
    pub data_dir: String,
    /// False when the filesystem refused O_DIRECT and buffered I/O was measured instead.
    pub direct_io: bool,
    /// Anything a reader should know about how the numbers were taken; empty when nothing.
    #[serde(default)]
    pub note: String,
    /// When the run ended: seconds since the Unix epoch, and the same as RFC 3339 (UTC).
    pub measured_at_unix_s: u64,
    pub measured_at: String,
    /// The whole run, as measured.
    pub duration_ms: u64,
    /// The probe file's size (its random-access span).
    pub file_bytes: u64,
    /// Size of a random read or write, and of the block written before each fdatasync.
    pub block_bytes: u64,
    /// Size of a sequential request, and how many were in flight.
    pub sequential_block_bytes: u64,
    pub sequential_depth: u32,
    /// Best random-read IOPS over the depths measured.
    pub read_iops: u64,
    /// Sequential read, bytes per second.
    pub read_bandwidth: u64,
    /// Random-write IOPS at `write_iops_depth`.
    pub write_iops: u64,
    pub write_iops_depth: u32,
    /// Sequential write, bytes per second.
    pub write_bandwidth: u64,
    /// fdatasync after a one-block write, microseconds.
    pub fdatasync_p50_us: u64,
    pub fdatasync_p99_us: u64,
    pub fdatasync_max_us: u64,
    pub fdatasync_samples: u64,
    /// Random-read IOPS at each depth measured, ascending by depth.
    pub random_read: Vec<DepthIops>,
}

/// Random-read IOPS at one queue depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepthIops {
    pub depth: u32,
    pub iops: u64,
}

impl IoProperties {
    /// Parses and checks an io-properties file; the error says which field is wrong.
    pub fn from_toml(text: &str) -> Result<IoProperties, String> {
        let p: IoProperties = toml::from_str(text).map_err(|e| e.message().to_string())?;
        p.validate()?;
        Ok(p)
    }

    /// Reads and checks `path`; the error names the file.
    pub fn load(path: &Path) -> Result<IoProperties, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        IoProperties::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The file's text: a header comment, then TOML.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# Written by `keel-tune iotune`; read by `keel serve` (io.properties.file).\n\
             # IOPS and bytes/s; latencies in microseconds. Re-run iotune after changing the disk.\n{body}"
        )
    }

    /// Every rate positive, percentiles ordered, depths ascending and distinct.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("read_iops", self.read_iops),
            ("read_bandwidth", self.read_bandwidth),
            ("write_iops", self.write_iops),
            ("write_bandwidth", self.write_bandwidth),
            ("block_bytes", self.block_bytes),
            ("sequential_block_bytes", self.sequential_block_bytes),
            ("fdatasync_p50_us", self.fdatasync_p50_us),
            ("fdatasync_p99_us", self.fdatasync_p99_us),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("{name} must be positive"));
            }
        }
        if self.fdatasync_p50_us > self.fdatasync_p99_us {
            return Err("fdatasync_p50_us is above fdatasync_p99_us".to_string());
        }
        if self.random_read.is_empty() {
            return Err("random_read lists no depth".to_string());
        }
        for w in self.random_read.windows(2) {
            if w[0].depth >= w[1].depth {
                return Err("random_read depths must be ascending and distinct".to_string());
            }
        }
        if let Some(d) = self
            .random_read
            .iter()
            .find(|d| d.depth == 0 || d.iops == 0)
        {
            return Err(format!(
                "random_read at depth {}: must be positive",
                d.depth
            ));
        }
        Ok(())
    }

    /// The smallest depth that reaches 90% of the best random-read IOPS: past it, more
    /// requests in flight only queue.
    pub fn saturating_depth(&self) -> u32 {
        let best = self.random_read.iter().map(|d| d.iops).max().unwrap_or(0);
        self.random_read
            .iter()
            .find(|d| d.iops.saturating_mul(10) >= best.saturating_mul(9))
            .map_or(1, |d| d.depth)
    }
}

/// What to measure and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Absolute; the probe file goes here, so it is on the disk being measured.
    pub data_dir: PathBuf,
    pub duration: Duration,
    pub file_bytes_max: u64,
}

/// Removes the probe file when the run ends, however it ends.
struct ProbeFile {
    path: PathBuf,
    file: File,
}

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A zeroed-then-filled, `BLOCK_BYTES`-aligned buffer (O_DIRECT needs aligned memory).
struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    fn new(len: u64, seed: u64) -> AlignedBuf {
        let layout = std::alloc::Layout::from_size_align(len as usize, BLOCK_BYTES as usize)
            .expect("aligned layout");
        // SAFETY: the layout has a non-zero size (callers pass whole blocks).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let mut buf = AlignedBuf { ptr, layout };
        // Incompressible content, so a compressing or deduplicating device does the full work.
        let mut rng = Rng(seed | 1);
        for chunk in buf.as_mut().chunks_mut(8) {
            let v = rng.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        buf
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` owns `layout.size()` initialised bytes, borrowed exclusively here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }

    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` owns `layout.size()` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// xorshift64: offsets and content, not security.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs every phase and returns what was measured; the probe file is gone when this returns.
pub fn run(options: &Options) -> Result<IoProperties, String> {
    let started = Instant::now();
    let dir = &options.data_dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let host = Host::live();
    let mount = mounts::mount_of(&host, dir);
    let (mountpoint, filesystem, device) = match &mount {
        Ok(m) => (
            m.mount_point.clone(),
            m.fs_type.clone(),
            mounts::block_device_of(&host, m).unwrap_or_else(|e| format!("unknown ({e})")),
        ),
        Err(e) => (
            "unknown".to_string(),
            "unknown".to_string(),
            format!("unknown ({e})"),
        ),
    };
    let file_bytes = probe_file_bytes(dir, options.file_bytes_max)?;
    let (probe, direct_io) = open_probe(dir)?;
    let mut note = String::new();
    if !direct_io {
        note = format!(
            "{filesystem} refused O_DIRECT: buffered I/O measured (the page cache, not the disk)"
        );
    } else if matches!(filesystem.as_str(), "tmpfs" | "ramfs") {
        note = format!("{filesystem} is memory: these are not a disk's numbers");
    }
    let phase = |share: u32| options.duration * share / 100;
    let write = sequential(&probe.file, file_bytes, phase(20), true)?;
    // Reads only cover what the write phase reached: unwritten blocks are holes that the
    // filesystem answers without touching the device.
    let written = write.bytes_done.min(file_bytes).max(SEQUENTIAL_BLOCK_BYTES);
    let read = sequential(&probe.file, written, phase(12), false)?;
    let mut random_read = Vec::new();
    for depth in READ_DEPTHS {
        let ops = random(&probe.file, written, depth, phase(9), false)?;
        random_read.push(DepthIops {
            depth,
            iops: per_second(ops, phase(9)),
        });
    }
    let write_ops = random(&probe.file, written, WRITE_IOPS_DEPTH, phase(10), true)?;
    // A fresh file for the syncs, so each one also commits a new file size, as appending to a
    // segment does; the first file goes first, so the disk never holds more than one.
    drop(probe);
    let (probe, _) = open_probe(dir)?;
    let sync = fdatasync_latencies(&probe.file, file_bytes.min(SYNC_SPAN_BYTES_MAX), phase(22))?;
    drop(probe);
    let (p50, p99, max) = percentiles(&sync);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let props = IoProperties {
        mountpoint,
        device,
        filesystem,
        data_dir: dir.display().to_string(),
        direct_io,
        note,
        measured_at_unix_s: now,
        measured_at: rfc3339(now),
        duration_ms: started.elapsed().as_millis() as u64,
        file_bytes,
        block_bytes: BLOCK_BYTES,
        sequential_block_bytes: SEQUENTIAL_BLOCK_BYTES,
        sequential_depth: SEQUENTIAL_DEPTH,
        read_iops: random_read.iter().map(|d| d.iops).max().unwrap_or(0),
        read_bandwidth: per_second(read.bytes_done, read.elapsed),
        write_iops: per_second(write_ops, phase(10)),
        write_iops_depth: WRITE_IOPS_DEPTH,
        write_bandwidth: per_second(write.bytes_done, write.elapsed),
        fdatasync_p50_us: p50,
        fdatasync_p99_us: p99,
        fdatasync_max_us: max,
        fdatasync_samples: sync.len() as u64,
        random_read,
    };
    props
        .validate()
        .map_err(|e| format!("the measurement is not usable ({e}); try a longer --duration"))?;
    Ok(props)
}

/// The probe file's size: `max` rounded down to whole sequential blocks, at most a quarter of
/// the free space.
fn probe_file_bytes(dir: &Path, max: u64) -> Result<u64, String> {
    let free = free_bytes(dir).unwrap_or(u64::MAX);
    let bytes = max.min(free / 4) / SEQUENTIAL_BLOCK_BYTES * SEQUENTIAL_BLOCK_BYTES;
    if bytes < SEQUENTIAL_BLOCK_BYTES * u64::from(SEQUENTIAL_DEPTH) {
        return Err(format!(
            "not enough room for a probe file in {} ({free} bytes free, cap {max})",
            dir.display()
        ));
    }
    Ok(bytes)
}

fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes only into `st`; `c` is a valid NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Creates the probe file with O_DIRECT, or buffered when the filesystem refuses O_DIRECT.
fn open_probe(dir: &Path) -> Result<(ProbeFile, bool), String> {
    let path = dir.join(format!(".keel-iotune-{}.probe", std::process::id()));
    let open = |flags: i32| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(flags)
            .open(&path)
    };
    match open(libc::O_DIRECT) {
        Ok(file) => Ok((ProbeFile { path, file }, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let _ = std::fs::remove_file(&path);
            let file = open(0).map_err(|e| format!("creating {}: {e}", path.display()))?;
            Ok((ProbeFile { path, file }, false))
        }
        Err(e) => Err(format!("creating {}: {e}", path.display())),
    }
}

struct Sequential {
    bytes_done: u64,
    elapsed: Duration,
}

/// `SEQUENTIAL_DEPTH` threads take the next block in turn, so requests go out in file order
/// with that many in flight; wraps around at `span`.
fn sequential(file: &File, span: u64, time: Duration, write: bool) -> Result<Sequential, String> {
    let blocks = (span / SEQUENTIAL_BLOCK_BYTES).max(1);
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + time;
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..SEQUENTIAL_DEPTH)
            .map(|i| {
                let next = &next;
                s.spawn(move || {
                    let mut buf = AlignedBuf::new(SEQUENTIAL_BLOCK_BYTES, u64::from(i) + 7);
                    let mut done = 0u64;
                    while Instant::now() < deadline {
                        let block = next.fetch_add(1, Ordering::Relaxed) % blocks;
                        let at = block * SEQUENTIAL_BLOCK_BYTES;
                        let n = if write {
                            file.write_at(buf.as_ref(), at)
                        } else {
                            file.read_at(buf.as_mut(), at)
                        }
                        .map_err(|e| {
                            format!("{} at {at}: {e}", if write { "write" } else { "read" })
                        })?;
                        done += n as u64;
                    }
                    Ok(done)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("probe thread panicked".into()))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut bytes_done = 0;
    for r in results {
        bytes_done += r?;
    }
    Ok(Sequential {
        bytes_done,
        elapsed,
    })
}

/// `depth` threads each keep one `BLOCK_BYTES` request at a random aligned offset in
/// `[0, span)` in flight until `time` passes; returns the requests completed.
fn random(file: &File, span: u64, depth: u32, time: Duration, write: bool) -> Result<u64, String> {
    let blocks = (span / BLOCK_BYTES).max(1);
    let deadline = Instant::now() + time;
    let results: Vec<Result<u64, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..depth)
            .map(|i| {
                s.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((u64::from(i) + 1) * 0x1000_0001));
                    let mut buf = AlignedBuf::new(BLOCK_BYTES, u64::from(i) + 11);
                    let mut ops = 0u64;
                    while Instant::now() < deadline {
                        let at = rng.next() % blocks * BLOCK_BYTES;
                        if write {
                            file.write_at(buf.as_ref(), at)
                        } else {
                            file.read_at(buf.as_mut(), at)
                        }
                        .map_err(|e| format!("random I/O at {at}: {e}"))?;
                        ops += 1;
                    }
                    Ok(ops)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err("probe thread panicked".into()))
            })
            .collect()
    });
    let mut ops = 0;
    for r in results {
        ops += r?;
    }
    Ok(ops)
}

/// Writes one block then fdatasyncs, in a loop, appending to an empty file as a log does (and
/// wrapping around at `span`); the fdatasync latency of each, in microseconds (at most
/// `SYNC_SAMPLES_MAX`).
fn fdatasync_latencies(file: &File, span: u64, time: Duration) -> Result<Vec<u64>, String> {
    let buf = AlignedBuf::new(BLOCK_BYTES, 13);
    let blocks = (span / BLOCK_BYTES).max(1);
    let deadline = Instant::now() + time;
    let mut samples = Vec::new();
    let mut block = 0;
    while samples.is_empty() || (Instant::now() < deadline && samples.len() < SYNC_SAMPLES_MAX) {
        file.write_at(buf.as_ref(), block % blocks * BLOCK_BYTES)
            .map_err(|e| format!("write before fdatasync: {e}"))?;
        let t = Instant::now();
        file.sync_data().map_err(|e| format!("fdatasync: {e}"))?;
        samples.push((t.elapsed().as_micros() as u64).max(1));
        block += 1;
    }
    Ok(samples)
}

/// Nearest-rank p50, p99 and max of `samples` (all 0 when empty).
pub fn percentiles(samples: &[u64]) -> (u64, u64, u64) {
    if samples.is_empty() {
        return (0, 0, 0);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = |p: f64| {
        let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[i - 1]
    };
    (rank(0.50), rank(0.99), sorted[sorted.len() - 1])
}

fn per_second(count: u64, time: Duration) -> u64 {
    let us = time.as_micros().max(1);
    (u128::from(count) * 1_000_000 / us) as u64
}

/// `secs` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days, proleptic Gregorian).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses `10s`, `1500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let (number, unit) = match v.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => v.split_at(i),
        None => (v, "s"),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("not a duration: {v:?} (e.g. 10s, 1500ms)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("not a duration: {v:?} (units: ms, s, m)")),
    };
    if !(secs.is_finite() && secs > 0.0 && secs <= 3600.0) {
        return Err(format!("duration out of range (0, 1h]: {v:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentiles(&v), (50, 99, 100));
        assert_eq!(percentiles(&[7]), (7, 7, 7));
    }

    #[test]
    fn dates_and_durations() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_004_061), "2026-11-30T02:01:01Z");
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("3h").is_err());
    }
}
