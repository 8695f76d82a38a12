//! `keel-bench probe`: measures the machine's own limits the same way every time, so a
//! broker's numbers can be read against what the disk and the loopback network can do at all.
//!
//! Four measurements, each with a fixed amount of work (every loop is bounded by a count):
//! - sequential O_DIRECT write bandwidth on the data directory (glommio DMA writes of 1 MiB
//!   aligned buffers, several in flight, then one fdatasync; the time includes the sync);
//! - 4 KiB pwrite + fdatasync latency (plain std I/O, what a group commit of one batch costs);
//! - one-stream loopback TCP bandwidth;
//! - loopback TCP round trip of a 64-byte message with TCP_NODELAY.
//!
//! MB is 10^6 bytes, as in the run results, so the report's ratios compare like with like.
//!
//! Runs on the caller's thread except the disk bandwidth probe, which gets its own thread so
//! its glommio executor never nests inside one the caller may be running. The executor's
//! io_memory stays small because RLIMIT_MEMLOCK may be as low as 8 MiB; buffers beyond it come
//! from the heap. Probe files are removed afterwards, also when a step fails.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use hdrhistogram::Histogram;

use crate::result::{LatencySummary, ProbeResult};

const MB: f64 = 1_000_000.0;
/// Size of each DMA write of the bandwidth probe.
const DISK_WRITE_BYTES: usize = 1024 * 1024;
/// DMA writes in flight at once.
const DISK_WRITES_IN_FLIGHT: usize = 4;
const SYNC_WRITE_BYTES: usize = 4096;
const LOOPBACK_WRITE_BYTES: usize = 256 * 1024;
const PING_BYTES: usize = 64;
/// Bounds every socket wait, so a wedged peer fails the probe instead of hanging it.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);
/// io_memory of the probe's glommio executor: small, since memlock may be 8 MiB in all.
const IO_MEMORY_BYTES: usize = 512 * 1024;

/// How much work each measurement does.
#[derive(Clone, Copy, Debug)]
struct Plan {
    disk_bytes: u64,
    sync_iterations: u64,
    loopback_bytes: u64,
    round_trips: u64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                disk_bytes: 64 * 1024 * 1024,
                sync_iterations: 50,
                loopback_bytes: 128 * 1024 * 1024,
                round_trips: 2_000,
            }
        } else {
            Plan {
                disk_bytes: 512 * 1024 * 1024,
                sync_iterations: 200,
                loopback_bytes: 1024 * 1024 * 1024,
                round_trips: 20_000,
            }
        }
    }
}

/// Probes the disk under `dir` and the loopback network. `quick` does less work (for tests).
pub fn run(dir: &Path, quick: bool) -> anyhow::Result<ProbeResult> {
    let plan = Plan::new(quick);
    let disk_write_mb_per_s =
        disk_write_bandwidth(dir, plan.disk_bytes).context("disk write bandwidth probe")?;
    let fdatasync = fdatasync_latency(dir, plan.sync_iterations).context("fdatasync probe")?;
    let loopback_mb_per_s =
        loopback_bandwidth(plan.loopback_bytes).context("loopback bandwidth probe")?;
    let loopback_rtt = loopback_round_trip(plan.round_trips).context("loopback rtt probe")?;
    Ok(ProbeResult {
        dir: dir.display().to_string(),
        disk_write_mb_per_s,
        fdatasync,
        loopback_mb_per_s,
        loopback_rtt,
        floor: None,
    })
}

/// Removes the probe file when dropped, so a failed step leaves nothing behind.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn probe_path(dir: &Path, what: &str) -> PathBuf {
    dir.join(format!(".keel-bench-probe-{what}-{}", std::process::id()))
}

/// Sequential O_DIRECT writes of `total_bytes` (rounded up to whole 1 MiB writes) then one
/// fdatasync; MB/s over the whole.
fn disk_write_bandwidth(dir: &Path, total_bytes: u64) -> anyhow::Result<f64> {
    let path = probe_path(dir, "write");
    let _cleanup = RemoveOnDrop(path.clone());
    let writes = total_bytes.div_ceil(DISK_WRITE_BYTES as u64).max(1);
    let handle = thread::Builder::new()
        .name("keel-bench-probe".into())
        .spawn(move || -> anyhow::Result<(u64, Duration)> {
            let executor = glommio::LocalExecutorBuilder::default()
                .io_memory(IO_MEMORY_BYTES)
                .make()
                .map_err(|e| anyhow!("starting the glommio executor: {e}"))?;
            executor.run(dma_write(path, writes))
        })
        .context("spawning the disk probe thread")?;
    let (bytes, elapsed) = handle
        .join()
        .map_err(|_| anyhow!("the disk probe thread panicked"))??;
    Ok(rate_mb_per_s(bytes, elapsed))
}

/// Writes `writes` blocks of 1 MiB with DISK_WRITES_IN_FLIGHT tasks, each owning every
/// n-th block, then syncs. Returns bytes written and the time from first write to synced.
async fn dma_write(path: PathBuf, writes: u64) -> anyhow::Result<(u64, Duration)> {
    let file = glommio::io::DmaFile::create(&path)
        .await
        .map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
    let file = Rc::new(file);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(DISK_WRITES_IN_FLIGHT);
    for lane in 0..DISK_WRITES_IN_FLIGHT as u64 {
        let file = file.clone();
        tasks.push(glommio::spawn_local(async move {
            let mut buf = file.alloc_dma_buffer(DISK_WRITE_BYTES);
            buf.as_bytes_mut().fill(0x5a);
            let buf = Rc::new(buf);
            let mut block = lane;
            while block < writes {
                let pos = block * DISK_WRITE_BYTES as u64;
                let n = file
                    .write_rc_at(buf.clone(), pos)
                    .await
                    .map_err(|e| anyhow!("DMA write at {pos}: {e}"))?;
                if n != DISK_WRITE_BYTES {
                    bail!("short DMA write at {pos}: {n} of {DISK_WRITE_BYTES} bytes");
                }
                block += DISK_WRITES_IN_FLIGHT as u64;
            }
            Ok(())
        }));
    }
    let mut first_err = None;
    for task in tasks {
        if let Err(e) = task.await {
            first_err.get_or_insert(e);
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    file.fdatasync()
        .await
        .map_err(|e| anyhow!("fdatasync: {e}"))?;
    let elapsed = started.elapsed();
    let file = Rc::try_unwrap(file).map_err(|_| anyhow!("DMA file still shared after writes"))?;
    file.close()
        .await
        .map_err(|e| anyhow!("closing {}: {e}", path.display()))?;
    Ok((writes * DISK_WRITE_BYTES as u64, elapsed))
}

/// `iterations` rounds of pwrite 4 KiB at the next offset + fdatasync, timed per round.
fn fdatasync_latency(dir: &Path, iterations: u64) -> anyhow::Result<LatencySummary> {
    let path = probe_path(dir, "sync");
    let _cleanup = RemoveOnDrop(path.clone());
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0xa5u8; SYNC_WRITE_BYTES];
    let mut hist_us = new_histogram()?;
    for i in 0..iterations {
        let started = Instant::now();
        file.write_all_at(&block, i * SYNC_WRITE_BYTES as u64)
            .context("pwrite")?;
        file.sync_data().context("fdatasync")?;
        record(&mut hist_us, started.elapsed().as_micros() as u64);
    }
    Ok(summary(&hist_us, 1_000.0))
}

/// A listener and a thread that accepts one connection and hands it to `serve`.
/// The accept waits at most SOCKET_TIMEOUT, so the thread always ends.
fn loopback_server<T: Send + 'static>(
    serve: impl FnOnce(TcpStream) -> std::io::Result<T> + Send + 'static,
) -> anyhow::Result<(std::net::SocketAddr, thread::JoinHandle<std::io::Result<T>>)> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let handle = thread::Builder::new()
        .name("keel-bench-probe-srv".into())
        .spawn(move || {
            let deadline = Instant::now() + SOCKET_TIMEOUT;
            let stream = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "no connection to the probe server",
                            ));
                        }
                        thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(e),
                }
            };
            stream.set_nonblocking(false)?;
            stream.set_read_timeout(Some(SOCKET_TIMEOUT))?;
            stream.set_write_timeout(Some(SOCKET_TIMEOUT))?;
            stream.set_nodelay(true)?;
            serve(stream)
        })?;
    Ok((addr, handle))
}

fn connect(addr: std::net::SocketAddr) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, SOCKET_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_write_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn join<T>(handle: thread::JoinHandle<std::io::Result<T>>) -> anyhow::Result<T> {
    handle
        .join()
        .map_err(|_| anyhow!("probe server thread panicked"))?
        .context("probe server")
}

/// One stream writing `total_bytes` in 256 KiB writes to a server that discards them; the time
/// runs until the server has read the last byte.
fn loopback_bandwidth(total_bytes: u64) -> anyhow::Result<f64> {
    let (addr, server) = loopback_server(|mut s| {
        let mut buf = vec![0u8; LOOPBACK_WRITE_BYTES];
        let mut received = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(received);
            }
            received += n as u64;
        }
    })?;
    let mut client = connect(addr)?;
    let chunk = vec![0x3cu8; LOOPBACK_WRITE_BYTES];
    let writes = total_bytes.div_ceil(LOOPBACK_WRITE_BYTES as u64).max(1);
    let started = Instant::now();
    let sent: anyhow::Result<()> = (|| {
        for _ in 0..writes {
            client.write_all(&chunk)?;
        }
        client.shutdown(Shutdown::Write)?;
        Ok(())
    })();
    // Close even on error so the server sees EOF and its thread ends.
    drop(client);
    let received = join(server)?;
    let elapsed = started.elapsed();
    sent.context("writing to the loopback server")?;
    let sent_bytes = writes * LOOPBACK_WRITE_BYTES as u64;
    if received != sent_bytes {
        bail!("loopback server read {received} of {sent_bytes} bytes");
    }
    Ok(rate_mb_per_s(sent_bytes, elapsed))
}

/// `round_trips` 64-byte ping-pongs over one TCP_NODELAY connection, timed each.
fn loopback_round_trip(round_trips: u64) -> anyhow::Result<LatencySummary> {
    let (addr, server) = loopback_server(|mut s| {
        let mut buf = [0u8; PING_BYTES];
        let mut echoed = 0u64;
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(echoed),
                Err(e) => return Err(e),
            }
            s.write_all(&buf)?;
            echoed += 1;
        }
    })?;
    let mut client = connect(addr)?;
    let mut hist_ns = new_histogram()?;
    let ping = [0x7eu8; PING_BYTES];
    let mut pong = [0u8; PING_BYTES];
    let timed: anyhow::Result<()> = (|| {
        for _ in 0..round_trips {
            let started = Instant::now();
            client.write_all(&ping)?;
            client.read_exact(&mut pong)?;
            record(&mut hist_ns, started.elapsed().as_nanos() as u64);
        }
        Ok(())
    })();
    drop(client);
    let echoed = join(server)?;
    timed.context("ping-pong with the loopback server")?;
    if echoed != round_trips {
        bail!("loopback server echoed {echoed} of {round_trips} pings");
    }
    Ok(summary(&hist_ns, 1_000_000.0))
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    // Up to an hour in ns or µs alike; 3 significant digits.
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
        .map_err(|e| anyhow!("creating a histogram: {e}"))
}

fn record(hist: &mut Histogram<u64>, value: u64) {
    hist.saturating_record(value.max(1));
}

/// Summarises `hist`, whose values are in units of 1/`units_per_ms` ms.
fn summary(hist: &Histogram<u64>, units_per_ms: f64) -> LatencySummary {
    let at = |q: f64| hist.value_at_quantile(q) as f64 / units_per_ms;
    LatencySummary {
        count: hist.len(),
        mean_ms: hist.mean() / units_per_ms,
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
        p999_ms: at(0.999),
        p9999_ms: at(0.9999),
        max_ms: hist.max() as f64 / units_per_ms,
    }
}

fn rate_mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / MB / elapsed.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_probe_measures_everything() {
        let dir = tempfile::tempdir().unwrap();
        let p = run(dir.path(), true).unwrap();
        eprintln!("{p:#?}");
        assert!(p.disk_write_mb_per_s > 0.0, "{p:?}");
        assert!(p.loopback_mb_per_s > 0.0, "{p:?}");
        for (what, l) in [("fdatasync", &p.fdatasync), ("rtt", &p.loopback_rtt)] {
            assert!(l.count > 0, "{what}: {l:?}");
            assert!(l.p50_ms > 0.0, "{what}: {l:?}");
            assert!(l.mean_ms > 0.0, "{what}: {l:?}");
            assert!(l.p99_ms >= l.p50_ms, "{what}: {l:?}");
            assert!(l.max_ms >= l.p99_ms, "{what}: {l:?}");
        }
        assert_eq!(p.fdatasync.count, 50);
        assert_eq!(p.loopback_rtt.count, 2_000);
        // Probe files are gone.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        assert!(run(&dir.path().join("nope"), true).is_err());
    }
}
