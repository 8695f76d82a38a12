//! The partition log's hot path on the real disk, for the I/O seam's cost (issue 20): appends
//! `MIB` MiB of `BATCH` byte batches to one `Log` (glommio DMA files) and commits (fdatasync,
//! `flush.policy=group`) every `SYNC_EVERY` batches, on one glommio executor; prints the wall
//! time and the process's CPU time (user + system) per GiB appended.
//!
//! ```text
//! cargo run --release -p keel-storage --example append_bench -- DIR [MIB] [BATCH] [SYNC_EVERY]
//! ```
//!
//! It uses only `Log::open`, `append` and `commit`, which the log had before the seam, so the
//! same file builds against a checkout from before it: run both binaries alternately in one
//! session and compare the CPU per GiB (the machines are noisy; the ratio holds).

use std::path::PathBuf;
use std::time::Instant;

use keel_storage::{LeaderEpoch, Log, LogConfig, Offset};
use keel_vocab::records::{frame_batch, put_record, BatchFields};

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass; no other memory is touched.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: append_bench DIR [MIB] [BATCH] [SYNC_EVERY]"),
    );
    let arg = |a: Option<String>, default: usize| a.and_then(|v| v.parse().ok()).unwrap_or(default);
    let mib = arg(args.next(), 1024);
    let batch_bytes = arg(args.next(), 16 << 10);
    let sync_every = arg(args.next(), 16).max(1);
    let _ = std::fs::remove_dir_all(&dir);
    // 10 records per batch, each a tenth of the batch.
    let records = 10usize;
    let value = vec![b'k'; batch_bytes / records];
    let mut section = bytes::BytesMut::new();
    for i in 0..records {
        put_record(&mut section, 0, i as i64, None, Some(&value), &[]);
    }
    let fields = BatchFields {
        base_offset: 0,
        leader_epoch: -1,
        attributes: 0,
        last_offset_delta: records as i32 - 1,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_000_000,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records_count: records as i32,
    };
    let batch = frame_batch(&fields, &section);
    let batch_len = batch.len();
    let batches = (mib << 20) / batch_len;
    let (wall, cpu) = glommio::LocalExecutorBuilder::default()
        .make()
        .expect("glommio executor")
        .run(async move {
            let log = Log::open(&dir, LogConfig::default()).await.expect("open");
            let (started, cpu0) = (Instant::now(), cpu_seconds());
            for i in 0..batches {
                let info = log
                    .append(batch.clone(), LeaderEpoch(0), 1_700_000_000_000)
                    .expect("append");
                if (i + 1) % sync_every == 0 || i + 1 == batches {
                    log.commit(Offset(info.last_offset.0 + 1))
                        .await
                        .expect("commit");
                }
            }
            let out = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu0);
            log.close().await.expect("close");
            let _ = std::fs::remove_dir_all(&dir);
            out
        });
    let gib = (batches * batch_len) as f64 / (1u64 << 30) as f64;
    println!(
        "append_bench: {:.2} GiB in {batches} batches of {} bytes, a commit every {sync_every}: \
         {wall:.2} s wall ({:.2} GiB/s), {cpu:.2} s CPU, {:.3} CPU-s/GiB",
        gib,
        batch_len,
        gib / wall,
        cpu / gib
    );
}
