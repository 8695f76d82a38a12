//! The floor probe: the CPU per GB of a minimal server doing the byte movement a run asks of
//! a broker, so a report can state the target's CPU per GB as a ratio to it.
//!
//! The server is one glommio executor pinned to the last core this process may use. It
//! accepts a "producer" and a "reader" connection on 127.0.0.1 and
//! - receives length-prefixed frames (u32 big-endian length, then the bytes) of the run's
//!   produce-request size ([`frame_bytes`]);
//! - copies each frame into an aligned buffer and writes it with glommio DMA (O_DIRECT) at the
//!   end of a file, and commits like Keel's `flush.policy=group`: one fdatasync covers every
//!   frame that arrived while the previous one ran, then every frame covered is acknowledged
//!   (an 8-byte frame sequence number back on the producer connection);
//! - sends each committed frame, unchanged, to the reader (as a consumer's fetch would), and
//!   a zero-length frame at the end.
//!
//! The producer and the reader are plain std threads. The producer keeps at most
//! [`IN_FLIGHT_FRAMES`] frames unacknowledged and, at a fixed rate, paces frames by the run's
//! byte rate. Only the server's CPU counts: its thread's getrusage(RUSAGE_THREAD), read on
//! that thread when the connections are up and when the last byte went to the reader, plus
//! the io_uring workers it started (the fdatasyncs run there, and a broker's process CPU
//! includes its own).
//!
//! Everything is bounded: frames by the planned count, each socket wait by a timeout, the
//! producer by a time limit, the server's queues by a frame count (so its memory is a few
//! frames). O_DIRECT wants aligned offsets and lengths, so each commit writes from the start
//! of the file's last partial block, padded with zeros to a whole block, as a log does; the
//! file is trimmed to the bytes appended before it is measured (and, with `check_file`, read
//! back and checked byte for byte), and removed afterwards, also on error. io_memory stays small because RLIMIT_MEMLOCK may be 8 MiB; larger buffers come
//! from the heap.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::io::DmaFile;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use glommio::{LocalExecutorBuilder, Placement};

use crate::cpu::{self, CpuTimes};
use crate::result::FloorResult;
use crate::workload::Workload;

/// The largest frame: a produce request beyond this is rare (Kafka's message.max.bytes is
/// 1 MiB), and the server holds a few frames at once.
pub const FRAME_BYTES_MAX: u64 = 4 << 20;
/// Frames the producer may send before the oldest is acknowledged (Kafka's default
/// max.in.flight.requests.per.connection).
pub const IN_FLIGHT_FRAMES: u64 = 5;
/// Bytes a full floor sends at the maximum rate, and a quick one.
pub const BYTES_FULL: u64 = 1_000_000_000;
pub const BYTES_QUICK: u64 = 256_000_000;
/// At a fixed rate the floor sends this many seconds' worth (at most the bytes above).
const PACED_S: f64 = 5.0;
/// The producer stops sending after this long, whatever is left (a slow disk must not turn
/// a probe into minutes).
const DURATION_MAX_FULL: Duration = Duration::from_secs(20);
const DURATION_MAX_QUICK: Duration = Duration::from_secs(8);
/// Bounds every socket wait, so a wedged side fails the probe instead of hanging it.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);
/// io_memory of the server's executor: small, since memlock may be 8 MiB in all.
const IO_MEMORY_BYTES: usize = 512 * 1024;
/// Frames received and not yet taken by a commit (the producer's window keeps it at 5).
const QUEUED_FRAMES_MAX: u64 = 8;
/// Committed frames waiting to go to the reader.
const READER_QUEUE_FRAMES: usize = 8;
const HEADER_BYTES: usize = 4;
const ACK_BYTES: usize = 8;
const ROLE_PRODUCER: u8 = b'P';
const ROLE_READER: u8 = b'R';
/// The bytes every frame carries (the server does not look at them; the reader checks them).
const FILL: u8 = 0x5a;

/// The bytes of one produce frame for a workload of `message_size`-byte records and
/// `batch_size`-byte batches: the batch in whole records, at least one record, at most
/// [`FRAME_BYTES_MAX`]: the shape of a producer sending as fast as it can. At a fixed rate
/// linger ends requests first ([`paced_frame_bytes`]).
pub fn frame_bytes(message_size: u32, batch_size: u32) -> u64 {
    let record = u64::from(message_size.max(1));
    let records = (u64::from(batch_size) / record).max(1);
    (records * record).min(FRAME_BYTES_MAX)
}

/// At a fixed rate a producer's request holds what that producer accumulates in one linger
/// window (at least 1 ms: a request in flight makes the next wait about that long anyway):
/// records/s per producer × linger, in whole records, at least one. At 50,000 records/s of
/// 1 KiB over 4 producers with linger 1 ms that is 12 records, 12,288 bytes, where the
/// batch alone would say 131,072: a floor sized by the batch would make 10× fewer, larger
/// requests than the broker serves, and look cheaper per byte than the same traffic is.
pub fn paced_frame_bytes(w: &Workload) -> u64 {
    let record = u64::from(w.message_size.max(1));
    let producers = u64::from(w.producers_per_topic.max(1)) * u64::from(w.topics.max(1));
    let per_producer_per_s = w.producer_rate / producers;
    let records = (per_producer_per_s * w.linger_ms.max(1) / 1000).max(1);
    (records * record).min(FRAME_BYTES_MAX)
}

/// What one floor run does.
#[derive(Clone, Debug, PartialEq)]
pub struct FloorPlan {
    /// Bytes per frame (the last frame may be shorter, so exactly `total_bytes` are sent).
    pub frame_bytes: u64,
    /// Bytes the producer sends.
    pub total_bytes: u64,
    /// The producer's pace; 0 = as fast as the acknowledgements allow.
    pub rate_bytes_per_s: u64,
    /// The producer sends no frame after this long.
    pub duration_max: Duration,
    /// Read the file back after the measured part and check it holds exactly the bytes sent
    /// (tests; a report's floor skips it, reading a GB back is time not worth spending).
    pub check_file: bool,
}

impl FloorPlan {
    /// The floor of a workload: its frame size and byte rate (records/s × message_size),
    /// `PACED_S` seconds' worth at a fixed rate, else 1 GB (256 MB `quick`). A workload that
    /// finds its rate at run time (`rate_fraction_of_max`) has none yet: its floor runs at the
    /// maximum rate.
    pub fn for_workload(w: &Workload, quick: bool) -> FloorPlan {
        let rate = if w.rate_fraction_of_max > 0.0 {
            0
        } else {
            w.producer_rate.saturating_mul(u64::from(w.message_size))
        };
        let mut frame = frame_bytes(w.message_size, w.batch_size);
        if rate > 0 {
            frame = frame.min(paced_frame_bytes(w));
        }
        Self::new(frame, rate, quick)
    }

    /// A floor of `frame_bytes` frames at `rate_bytes_per_s` (0 = maximum).
    pub fn new(frame_bytes: u64, rate_bytes_per_s: u64, quick: bool) -> FloorPlan {
        let cap = if quick { BYTES_QUICK } else { BYTES_FULL };
        let total = if rate_bytes_per_s == 0 {
            cap
        } else {
            ((rate_bytes_per_s as f64 * PACED_S) as u64).min(cap)
        };
        let frame_bytes = frame_bytes.clamp(1, FRAME_BYTES_MAX);
        FloorPlan {
            frame_bytes,
            total_bytes: total.max(frame_bytes),
            rate_bytes_per_s,
            duration_max: if quick {
                DURATION_MAX_QUICK
            } else {
                DURATION_MAX_FULL
            },
            check_file: false,
        }
    }

    /// Frames the producer sends at most.
    fn frames_max(&self) -> u64 {
        self.total_bytes.div_ceil(self.frame_bytes)
    }
}

/// Runs the floor with its file under `dir`.
pub fn run(dir: &Path, plan: &FloorPlan) -> anyhow::Result<FloorResult> {
    if plan.frame_bytes == 0 || plan.frame_bytes > FRAME_BYTES_MAX || plan.total_bytes == 0 {
        bail!("floor plan out of range: {plan:?}");
    }
    let path = dir.join(format!(".keel-bench-floor-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(path.clone());
    let file_path = path.clone();
    let listener = StdListener::bind("127.0.0.1:0").context("binding 127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let core = last_allowed_core();
    let placement = core.map_or(Placement::Unbound, |c| Placement::Fixed(c as usize));
    let server_plan = plan.clone();
    let server = LocalExecutorBuilder::new(placement)
        .name("keel-bench-floor")
        .io_memory(IO_MEMORY_BYTES)
        .spawn(move || async move { serve(listener, path, server_plan).await })
        .map_err(|e| anyhow!("starting the floor server's executor: {e}"))?;
    let producer_plan = plan.clone();
    let producer = thread::Builder::new()
        .name("keel-bench-floor-producer".into())
        .spawn(move || produce(addr, &producer_plan))
        .context("spawning the floor producer")?;
    let reader_plan = plan.clone();
    let reader = thread::Builder::new()
        .name("keel-bench-floor-reader".into())
        .spawn(move || read(addr, &reader_plan))
        .context("spawning the floor reader")?;
    let produced = producer
        .join()
        .map_err(|_| anyhow!("the floor producer panicked"));
    let read_bytes = reader
        .join()
        .map_err(|_| anyhow!("the floor reader panicked"));
    let served = server
        .join()
        .map_err(|e| anyhow!("the floor server's executor failed: {e}"))?;
    // The server's error is the cause when there is one; the clients' follow from it.
    let served = served.context("floor server")?;
    let produced = produced?.context("floor producer")?;
    let read_bytes = read_bytes?.context("floor reader")?;
    check_counts(plan, &produced, read_bytes, &served)?;
    if plan.check_file {
        check_file(&file_path, served.written)?;
    }
    Ok(FloorResult {
        frame_bytes: plan.frame_bytes,
        rate_bytes_per_s: plan.rate_bytes_per_s,
        bytes_asked: plan.total_bytes,
        bytes_received: served.received,
        bytes_sent_to_reader: served.sent_to_reader,
        bytes_written: served.written,
        file_bytes: served.file_bytes,
        frames: served.frames,
        commits: served.commits,
        elapsed_s: served.elapsed.as_secs_f64(),
        core,
        user_s: served.cpu.user_s + served.io_workers.user_s,
        system_s: served.cpu.system_s + served.io_workers.system_s,
        io_worker_s: served.io_workers.total_s(),
        time_limited: produced.time_limited,
    })
}

/// Every side must agree on the bytes, or the floor measured something else.
fn check_counts(
    plan: &FloorPlan,
    produced: &Produced,
    read_bytes: u64,
    served: &Served,
) -> anyhow::Result<()> {
    let all = [
        ("sent by the producer", produced.sent),
        ("received by the server", served.received),
        ("written to the file", served.written),
        ("in the file", served.file_bytes),
        ("sent to the reader", served.sent_to_reader),
        ("read by the reader", read_bytes),
    ];
    if all.iter().any(|(_, n)| *n != produced.sent) {
        bail!("the floor's byte counts disagree: {all:?}");
    }
    if !produced.time_limited && produced.sent != plan.total_bytes {
        bail!(
            "the floor producer sent {} of {} bytes",
            produced.sent,
            plan.total_bytes
        );
    }
    Ok(())
}

/// Reads the closed file back (buffered: the DMA file is closed, so no mix of the two):
/// exactly `written` bytes, every one of them a frame's.
fn check_file(path: &Path, written: u64) -> anyhow::Result<()> {
    const CHUNK_BYTES: usize = 1 << 20;
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut pos = 0u64;
    // One more round than the chunks, to see the end.
    for _ in 0..=written.div_ceil(CHUNK_BYTES as u64) {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {} back at {pos}", path.display()))?;
        if n == 0 {
            break;
        }
        if let Some(i) = buf[..n].iter().position(|&b| b != FILL) {
            bail!(
                "file byte {} is {:#04x}, not a frame's",
                pos + i as u64,
                buf[i]
            );
        }
        pos += n as u64;
    }
    if pos != written {
        bail!("the file holds {pos} bytes, {written} were written");
    }
    Ok(())
}

/// Removes the probe file when dropped, so a failed step leaves nothing behind.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The highest-numbered CPU in this thread's affinity mask.
fn last_allowed_core() -> Option<u32> {
    // SAFETY: sched_getaffinity fills a zeroed cpu_set_t of the size it is given; CPU_ISSET
    // reads it within CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return None;
    }
    (0..libc::CPU_SETSIZE as usize)
        .rev()
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
}

// ---------------------------------------------------------------------------------------------
// The server, on its own executor thread.

/// What the server did, and the CPU it took.
struct Served {
    received: u64,
    sent_to_reader: u64,
    written: u64,
    file_bytes: u64,
    frames: u64,
    commits: u64,
    elapsed: Duration,
    cpu: CpuTimes,
    io_workers: CpuTimes,
}

async fn serve(listener: StdListener, path: PathBuf, plan: FloorPlan) -> anyhow::Result<Served> {
    // SAFETY: the fd comes from a bound, listening std listener this function owns.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    let (producer, reader) = accept_roles(&listener).await?;
    drop(listener);
    let file = DmaFile::create(&path)
        .await
        .map_err(|e| anyhow!("creating {}: {e}", path.display()))?;
    let tid = cpu::thread_id();
    let cpu_before = cpu::this_thread();
    let workers_before = cpu::io_workers_of(tid);
    let started = Instant::now();
    let moved = move_bytes(&file, producer, reader, &plan).await;
    let elapsed = started.elapsed();
    let cpu = cpu::this_thread().since(&cpu_before);
    let io_workers = cpu::io_workers_of(tid).since(&workers_before);
    // Trim the padding of the last block, then measure the file, whatever happened above.
    let trimmed = match &moved {
        Ok(m) => file
            .truncate(m.written)
            .await
            .map_err(|e| anyhow!("truncating {}: {e}", path.display())),
        Err(_) => Ok(()),
    };
    let file_bytes = file.file_size().await;
    let closed = file.close().await;
    let moved = moved?;
    trimmed?;
    let file_bytes = file_bytes.map_err(|e| anyhow!("stat of {}: {e}", path.display()))?;
    closed.map_err(|e| anyhow!("closing {}: {e}", path.display()))?;
    Ok(Served {
        received: moved.received,
        sent_to_reader: moved.sent_to_reader,
        written: moved.written,
        file_bytes,
        frames: moved.frames,
        commits: moved.commits,
        elapsed,
        cpu,
        io_workers,
    })
}

/// Accepts the two clients; each says first, in one byte, which it is.
async fn accept_roles(listener: &TcpListener) -> anyhow::Result<(TcpStream, TcpStream)> {
    let mut producer = None;
    let mut reader = None;
    for _ in 0..2 {
        let mut stream = glommio::timer::timeout(SOCKET_TIMEOUT, listener.accept())
            .await
            .map_err(|e| anyhow!("accepting a floor client: {e}"))?;
        configure(&stream)?;
        let mut role = [0u8; 1];
        stream
            .read_exact(&mut role)
            .await
            .context("reading a floor client's role")?;
        match role[0] {
            ROLE_PRODUCER if producer.is_none() => producer = Some(stream),
            ROLE_READER if reader.is_none() => reader = Some(stream),
            other => bail!("unexpected floor client role {other:#04x}"),
        }
    }
    match (producer, reader) {
        (Some(p), Some(r)) => Ok((p, r)),
        _ => bail!("the floor needs one producer and one reader"),
    }
}

fn configure(stream: &TcpStream) -> anyhow::Result<()> {
    stream
        .set_read_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| anyhow!("{e}"))?;
    stream
        .set_write_timeout(Some(SOCKET_TIMEOUT))
        .map_err(|e| anyhow!("{e}"))?;
    stream.set_nodelay(true).map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// A second handle on the same connection, so one task reads frames while another writes
/// acknowledgements without sharing a borrow.
fn second_handle(stream: &TcpStream) -> anyhow::Result<TcpStream> {
    // SAFETY: dup of an open socket fd; the new fd is owned by the returned stream alone.
    let fd = unsafe { libc::dup(stream.as_raw_fd()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("dup of the producer socket");
    }
    let second = unsafe { TcpStream::from_raw_fd(fd) };
    configure(&second)?;
    Ok(second)
}

/// Frames received and waiting for a commit. `arrived` holds one unit per queued frame plus
/// one when the receiver ends; `space` bounds the queue.
struct Queue {
    frames: RefCell<VecDeque<Vec<u8>>>,
    arrived: Semaphore,
    space: Semaphore,
    receiver_done: Cell<bool>,
    /// Set when every frame was committed: only then does the reader get the end marker.
    committed_all: Cell<bool>,
}

/// What the three tasks counted.
struct Moved {
    received: u64,
    frames: u64,
    written: u64,
    commits: u64,
    sent_to_reader: u64,
}

/// Runs the receiver and the reader's sender as tasks and the committer here; waits for all.
async fn move_bytes(
    file: &DmaFile,
    producer: TcpStream,
    reader: TcpStream,
    plan: &FloorPlan,
) -> anyhow::Result<Moved> {
    let mut acks = second_handle(&producer)?;
    let queue = Rc::new(Queue {
        frames: RefCell::new(VecDeque::new()),
        arrived: Semaphore::new(0),
        space: Semaphore::new(QUEUED_FRAMES_MAX),
        receiver_done: Cell::new(false),
        committed_all: Cell::new(false),
    });
    let (to_reader, from_committer) = local_channel::new_bounded(READER_QUEUE_FRAMES);
    let frames_max = plan.frames_max();
    let receiver = glommio::spawn_local(receive(
        producer,
        queue.clone(),
        plan.frame_bytes,
        plan.total_bytes,
    ));
    let sender = glommio::spawn_local(send_to_reader(
        reader,
        from_committer,
        queue.clone(),
        frames_max,
    ));
    let committed = commit(file, &queue, &mut acks, to_reader, frames_max).await;
    if committed.is_err() {
        // Wake the receiver if it waits for space, and end the producer's wait for acks.
        queue.space.close();
        let _ = acks.shutdown(std::net::Shutdown::Both).await;
    }
    let received = receiver.await;
    let sent_to_reader = sender.await;
    let (written, commits) = committed?;
    let (received, frames) = received?;
    Ok(Moved {
        received,
        frames,
        written,
        commits,
        sent_to_reader: sent_to_reader?,
    })
}

/// Reads frames (header kept in front of the bytes, so the reader gets the frame unchanged)
/// and queues them, until the zero-length end frame. Returns (bytes, frames).
async fn receive(
    mut producer: TcpStream,
    queue: Rc<Queue>,
    frame_bytes_max: u64,
    total_bytes: u64,
) -> anyhow::Result<(u64, u64)> {
    let frames_max = total_bytes.div_ceil(frame_bytes_max);
    let mut received = 0u64;
    let mut frames = 0u64;
    let result: anyhow::Result<()> = async {
        // The end frame is one more than the data frames.
        for _ in 0..=frames_max {
            let mut header = [0u8; HEADER_BYTES];
            producer
                .read_exact(&mut header)
                .await
                .context("reading a frame header")?;
            let len = u64::from(u32::from_be_bytes(header));
            if len == 0 {
                return Ok(());
            }
            if len > frame_bytes_max || received + len > total_bytes {
                bail!("frame of {len} bytes after {received}: over the plan");
            }
            let mut frame = vec![0u8; HEADER_BYTES + len as usize];
            frame[..HEADER_BYTES].copy_from_slice(&header);
            producer
                .read_exact(&mut frame[HEADER_BYTES..])
                .await
                .context("reading a frame")?;
            queue.space.acquire(1).await.map_err(|e| anyhow!("{e}"))?;
            queue.frames.borrow_mut().push_back(frame);
            queue.arrived.signal(1);
            received += len;
            frames += 1;
        }
        bail!("no end frame after {frames_max} frames")
    }
    .await;
    queue.receiver_done.set(true);
    queue.arrived.signal(1);
    result.map(|()| (received, frames))
}

/// Group commit: takes every queued frame, appends them to the file in one DMA write, one
/// fdatasync, acknowledges each, passes them on to the reader. Returns (bytes, commits).
async fn commit(
    file: &DmaFile,
    queue: &Queue,
    acks: &mut TcpStream,
    to_reader: LocalSender<Vec<u8>>,
    frames_max: u64,
) -> anyhow::Result<(u64, u64)> {
    let align = file.alignment().max(1) as usize;
    // The file's last partial block, rewritten (with what follows) by the next commit.
    let mut tail: Vec<u8> = Vec::with_capacity(align);
    let mut tail_pos = 0u64;
    let mut written = 0u64;
    let mut next_ack = 0u64;
    let mut ack_bytes: Vec<u8> = Vec::with_capacity(QUEUED_FRAMES_MAX as usize * ACK_BYTES);
    // Each round commits at least one frame, except the last (the receiver's end): the
    // rounds before it are the commits.
    for commits in 0..=frames_max {
        queue.arrived.acquire(1).await.map_err(|e| anyhow!("{e}"))?;
        let group: Vec<Vec<u8>> = queue.frames.borrow_mut().drain(..).collect();
        if group.is_empty() {
            if queue.receiver_done.get() {
                queue.committed_all.set(true);
                return Ok((written, commits));
            }
            bail!("woken with no frame queued");
        }
        // One unit was taken above; each further frame brought its own.
        let more = group.len() as u64 - 1;
        if more > 0
            && !queue
                .arrived
                .try_acquire(more)
                .map_err(|e| anyhow!("{e}"))?
        {
            bail!("frames queued without their signal");
        }
        queue.space.signal(group.len() as u64);

        let group_bytes: usize = group.iter().map(|f| f.len() - HEADER_BYTES).sum();
        let end = tail.len() + group_bytes;
        let write_len = end.div_ceil(align) * align;
        let mut buf = file.alloc_dma_buffer(write_len);
        let bytes = buf.as_bytes_mut();
        bytes[..tail.len()].copy_from_slice(&tail);
        let mut at = tail.len();
        for frame in &group {
            let payload = &frame[HEADER_BYTES..];
            bytes[at..at + payload.len()].copy_from_slice(payload);
            at += payload.len();
        }
        bytes[end..].fill(0);
        let whole = end / align * align;
        tail.clear();
        tail.extend_from_slice(&bytes[whole..end]);
        let n = file
            .write_at(buf, tail_pos)
            .await
            .map_err(|e| anyhow!("DMA write at {tail_pos}: {e}"))?;
        if n != write_len {
            bail!("short DMA write at {tail_pos}: {n} of {write_len} bytes");
        }
        file.fdatasync()
            .await
            .map_err(|e| anyhow!("fdatasync: {e}"))?;
        tail_pos += whole as u64;
        written += group_bytes as u64;

        ack_bytes.clear();
        for _ in &group {
            ack_bytes.extend_from_slice(&next_ack.to_be_bytes());
            next_ack += 1;
        }
        acks.write_all(&ack_bytes)
            .await
            .context("acknowledging frames")?;
        for frame in group {
            to_reader
                .send(frame)
                .await
                .map_err(|_| anyhow!("the reader's sender stopped"))?;
        }
    }
    bail!("more than {frames_max} commits")
}

/// Sends committed frames to the reader as they come, then the end frame if all went well.
async fn send_to_reader(
    mut reader: TcpStream,
    from_committer: LocalReceiver<Vec<u8>>,
    queue: Rc<Queue>,
    frames_max: u64,
) -> anyhow::Result<u64> {
    let mut sent = 0u64;
    for _ in 0..=frames_max {
        let Some(frame) = from_committer.recv().await else {
            if queue.committed_all.get() {
                reader
                    .write_all(&0u32.to_be_bytes())
                    .await
                    .context("sending the end frame to the reader")?;
                reader.flush().await.context("flushing to the reader")?;
            }
            return Ok(sent);
        };
        reader
            .write_all(&frame)
            .await
            .context("sending a frame to the reader")?;
        sent += (frame.len() - HEADER_BYTES) as u64;
    }
    bail!("more than {frames_max} frames for the reader")
}

// ---------------------------------------------------------------------------------------------
// The clients, on std threads.

fn connect(addr: SocketAddr, role: u8) -> anyhow::Result<StdStream> {
    let mut stream = StdStream::connect_timeout(&addr, SOCKET_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_write_timeout(Some(SOCKET_TIMEOUT))?;
    stream.set_nodelay(true)?;
    stream.write_all(&[role])?;
    Ok(stream)
}

/// What the producer sent.
struct Produced {
    sent: u64,
    time_limited: bool,
}

/// Sends the plan's bytes in frames, at most IN_FLIGHT_FRAMES unacknowledged, paced at a
/// fixed rate; every acknowledgement must name the next frame in order.
fn produce(addr: SocketAddr, plan: &FloorPlan) -> anyhow::Result<Produced> {
    let mut stream = connect(addr, ROLE_PRODUCER)?;
    let mut frame = vec![FILL; HEADER_BYTES + plan.frame_bytes as usize];
    let started = Instant::now();
    let deadline = started + plan.duration_max;
    let mut sent = 0u64;
    let mut in_flight = 0u64;
    let mut next_ack = 0u64;
    let mut time_limited = false;
    for _ in 0..plan.frames_max() {
        if sent >= plan.total_bytes {
            break;
        }
        if plan.rate_bytes_per_s > 0 {
            let due = started + Duration::from_secs_f64(sent as f64 / plan.rate_bytes_per_s as f64);
            if due > deadline {
                time_limited = true;
                break;
            }
            thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        if Instant::now() >= deadline {
            time_limited = true;
            break;
        }
        if in_flight == IN_FLIGHT_FRAMES {
            read_ack(&mut stream, &mut next_ack)?;
            in_flight -= 1;
        }
        let len = plan.frame_bytes.min(plan.total_bytes - sent);
        frame[..HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
        stream
            .write_all(&frame[..HEADER_BYTES + len as usize])
            .context("sending a frame")?;
        sent += len;
        in_flight += 1;
    }
    for _ in 0..in_flight {
        read_ack(&mut stream, &mut next_ack)?;
    }
    stream
        .write_all(&0u32.to_be_bytes())
        .context("sending the end frame")?;
    Ok(Produced { sent, time_limited })
}

fn read_ack(stream: &mut StdStream, next_ack: &mut u64) -> anyhow::Result<()> {
    let mut ack = [0u8; ACK_BYTES];
    stream
        .read_exact(&mut ack)
        .context("waiting for an acknowledgement")?;
    let seq = u64::from_be_bytes(ack);
    if seq != *next_ack {
        bail!("acknowledgement {seq}, expected {next_ack}");
    }
    *next_ack += 1;
    Ok(())
}

/// Reads frames until the end frame; returns the bytes read.
fn read(addr: SocketAddr, plan: &FloorPlan) -> anyhow::Result<u64> {
    let mut stream = connect(addr, ROLE_READER)?;
    let mut buf = vec![0u8; plan.frame_bytes as usize];
    let mut got = 0u64;
    for _ in 0..=plan.frames_max() {
        let mut header = [0u8; HEADER_BYTES];
        stream
            .read_exact(&mut header)
            .context("reading a frame header")?;
        let len = u32::from_be_bytes(header) as usize;
        if len == 0 {
            return Ok(got);
        }
        if len > buf.len() {
            bail!("frame of {len} bytes, over {}", buf.len());
        }
        stream
            .read_exact(&mut buf[..len])
            .context("reading a frame")?;
        if buf[0] != FILL || buf[len - 1] != FILL {
            bail!("frame bytes changed on the way");
        }
        got += len as u64;
    }
    bail!("no end frame after {} frames", plan.frames_max())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_bytes_is_the_batch_in_whole_records() {
        assert_eq!(frame_bytes(1024, 131_072), 131_072);
        assert_eq!(frame_bytes(1024, 16_384), 16_384);
        assert_eq!(frame_bytes(100, 16_384), 16_300, "163 whole records");
        assert_eq!(frame_bytes(1000, 999), 1000, "at least one record");
        assert_eq!(frame_bytes(1000, 0), 1000);
        assert_eq!(frame_bytes(0, 10), 10, "a zero size counts as 1 byte");
        assert_eq!(frame_bytes(100 << 20, 64 << 20), FRAME_BYTES_MAX, "capped");
    }

    #[test]
    fn a_paced_frame_is_one_linger_window_of_one_producer() {
        let w = Workload {
            topics: 1,
            message_size: 1024,
            batch_size: 131_072,
            producers_per_topic: 4,
            producer_rate: 50_000,
            linger_ms: 1,
            ..Workload::default()
        };
        assert_eq!(paced_frame_bytes(&w), 12 * 1024);
        assert_eq!(FloorPlan::for_workload(&w, false).frame_bytes, 12 * 1024);
        // A slow producer still sends whole records, one at least.
        let slow = Workload {
            producer_rate: 100,
            ..w.clone()
        };
        assert_eq!(paced_frame_bytes(&slow), 1024);
        // A long linger fills the batch, and the batch caps it.
        let long = Workload {
            linger_ms: 1000,
            ..w.clone()
        };
        assert_eq!(FloorPlan::for_workload(&long, false).frame_bytes, 131_072);
        // As fast as possible: the batch.
        let max = Workload {
            producer_rate: 0,
            ..w
        };
        assert_eq!(FloorPlan::for_workload(&max, false).frame_bytes, 131_072);
    }

    #[test]
    fn plans_follow_the_workload() {
        let w = Workload {
            message_size: 1024,
            batch_size: 131_072,
            producer_rate: 0,
            ..Workload::default()
        };
        let max = FloorPlan::for_workload(&w, false);
        assert_eq!(max.frame_bytes, 131_072);
        assert_eq!(max.rate_bytes_per_s, 0);
        assert_eq!(max.total_bytes, BYTES_FULL);
        assert_eq!(FloorPlan::for_workload(&w, true).total_bytes, BYTES_QUICK);
        // 10,000 records/s of 1 KiB: 10.24 MB/s for 5 s.
        let paced = FloorPlan::for_workload(
            &Workload {
                producer_rate: 10_000,
                ..w.clone()
            },
            false,
        );
        assert_eq!(paced.rate_bytes_per_s, 10_240_000);
        assert_eq!(paced.total_bytes, 51_200_000);
        // A high rate is capped at the byte budget; a tiny one still sends a frame.
        let fast = FloorPlan::for_workload(
            &Workload {
                producer_rate: 10_000_000,
                ..w.clone()
            },
            true,
        );
        assert_eq!(fast.total_bytes, BYTES_QUICK);
        assert_eq!(FloorPlan::new(4096, 1, true).total_bytes, 4096);
        // A rate found at run time is unknown here: maximum.
        let fraction = Workload {
            producer_rate: 5_000,
            rate_fraction_of_max: 0.5,
            ..w
        };
        assert_eq!(
            FloorPlan::for_workload(&fraction, false).rate_bytes_per_s,
            0
        );
    }

    fn small_plan(frame_bytes: u64, total_bytes: u64, rate_bytes_per_s: u64) -> FloorPlan {
        FloorPlan {
            frame_bytes,
            total_bytes,
            rate_bytes_per_s,
            duration_max: Duration::from_secs(60),
            check_file: true,
        }
    }

    fn assert_moved_exactly(f: &FloorResult, asked: u64) {
        assert_eq!(f.bytes_asked, asked, "{f:?}");
        assert_eq!(f.bytes_received, asked, "{f:?}");
        assert_eq!(f.bytes_sent_to_reader, asked, "{f:?}");
        assert_eq!(f.bytes_written, asked, "{f:?}");
        assert_eq!(f.file_bytes, asked, "{f:?}");
        assert!(!f.time_limited, "{f:?}");
        let cpu_s = f.user_s + f.system_s;
        assert!(cpu_s > 0.0 && cpu_s.is_finite(), "{f:?}");
        assert!(f.user_s >= 0.0 && f.system_s >= f.io_worker_s, "{f:?}");
        assert!(f.commits >= 1 && f.commits <= f.frames, "{f:?}");
        assert!(f.elapsed_s > 0.0, "{f:?}");
    }

    #[test]
    fn floor_moves_exactly_the_bytes_asked() {
        let dir = tempfile::tempdir().unwrap();
        // 8 MB in 128 KiB frames: 61 whole frames and a short last one.
        let asked = 8_000_000;
        let f = run(dir.path(), &small_plan(131_072, asked, 0)).unwrap();
        eprintln!("{f:#?}");
        assert_moved_exactly(&f, asked);
        assert_eq!(f.frames, asked.div_ceil(131_072));
        assert_eq!(f.core, last_allowed_core());
        // The probe file is gone.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn floor_paces_a_fixed_rate_with_odd_frames() {
        let dir = tempfile::tempdir().unwrap();
        // 16,300-byte frames (163 records of 100 B) at 4 MB/s for about half a second.
        let asked = 2_000_000;
        let started = Instant::now();
        let f = run(dir.path(), &small_plan(16_300, asked, 4_000_000)).unwrap();
        assert_moved_exactly(&f, asked);
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "not paced: {:?}",
            started.elapsed()
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        assert!(run(&dir.path().join("nope"), &small_plan(4096, 1_000_000, 0)).is_err());
        assert!(started.elapsed() < SOCKET_TIMEOUT * 3);
        assert!(run(dir.path(), &small_plan(0, 1, 0)).is_err());
        assert!(run(dir.path(), &small_plan(FRAME_BYTES_MAX + 1, 1, 0)).is_err());
    }
}
