//! The simulation of one partition log: Keel's `Log` (single replica, `flush.policy=group`,
//! small segments so that rolls, index files and producer snapshots happen) on a simulated
//! disk, driven by a seed through appends from a plain and two idempotent producers, commits
//! (Kafka's acknowledgement: `commit` returned), reads, producer retries, recovery-point
//! checkpoints, faults (EIO on a write or a sync, a full disk, the power going off a few disk
//! changes later: in the middle of a flush, a roll or a checkpoint), power cuts (`SimDisk::crash`: synced data stays, a seeded
//! subset of unsynced sectors survives, torn) and process restarts (clean or not).
//!
//! Invariants, checked after every step against a model of what was sent:
//! - **no acknowledged record is lost or moved**: after any restart or power cut every
//!   record below the acknowledged end reads back at its offset with its bytes;
//! - **offsets are dense and unique**: an append lands at the log end offset, reads return
//!   consecutive offsets, and nothing is read that was not sent there;
//! - **a reader never sees a record that later disappears**: every record below the highest
//!   high watermark ever observed survives every later restart and power cut;
//! - **the high watermark never goes backwards**, across restarts too;
//! - **a failed write or sync is never reported as success**: a commit that returns `Ok` after
//!   an injected EIO is checked by the next power cut like any other;
//! - **producer-state deduplication survives every crash**: a retried batch that is in the
//!   log is answered as a duplicate at its original offset, never appended twice; one that
//!   is not is appended where its sequence allows it and refused otherwise.

use std::path::{Path, PathBuf};

use bytes::BytesMut;
use keel_simdisk::{Fault, SimDisk};
use keel_storage::{Disk, LeaderEpoch, Log, LogConfig, Offset, SimHandle, StorageError};
use keel_vocab::records::{frame_batch, parse_records, put_record, BatchFields, BatchHeader};

use crate::{Rng, SeedReport, Trail, Violation};

/// Where the simulated partition lives on its disk.
const DIR: &str = "/node/t-0";

/// Operations remembered for a violation's report.
const TRAIL: usize = 40;

/// One record as sent: its value (unique in the run) and its producer's id and sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    value: Vec<u8>,
    producer_id: i64,
    sequence: i32,
}

/// A batch an idempotent producer sent last, to retry.
#[derive(Clone)]
struct Sent {
    bytes: BytesMut,
    base_sequence: i32,
    count: i32,
}

struct Producer {
    id: i64,
    next_sequence: i32,
    last: Option<Sent>,
}

/// What the log must hold.
struct Model {
    /// What was appended, by offset from 0 (the log start; no retention here).
    records: Vec<Rec>,
    /// Below this every record was acknowledged (`commit` returned Ok).
    acked_end: i64,
    /// The highest high watermark a reader saw.
    visible_end: i64,
    producers: Vec<Producer>,
}

impl Model {
    fn log_end(&self) -> i64 {
        self.records.len() as i64
    }

    /// After the log lost its tail: each producer's next sequence as the log now says.
    fn rebuild_producers(&mut self) {
        for p in &mut self.producers {
            p.next_sequence = self
                .records
                .iter()
                .rev()
                .find(|r| r.producer_id == p.id)
                .map_or(0, |r| r.sequence + 1);
        }
    }
}

struct Run {
    seed: u64,
    rng: Rng,
    disk: SimHandle,
    config: LogConfig,
    log: Option<Log>,
    model: Model,
    report: SeedReport,
    step: u64,
    now_ms: i64,
    /// A value counter: every record's value is unique in the run.
    sent: u64,
    /// An injected fault may have fired: errors are expected until the next restart.
    faulted: bool,
    trail: Trail,
}

/// Runs seed `seed` for `steps` steps.
pub async fn run(seed: u64, steps: u64) -> Result<SeedReport, Violation> {
    let mut rng = Rng::new(seed);
    let keep_per_256 = [0u32, 64, 128, 192, 256][rng.range(0, 4) as usize];
    let disk = SimHandle::new(SimDisk::new(rng.draw(), keep_per_256));
    let config = LogConfig {
        // Small segments: rolls, finalized segments read through the file cache, index files.
        segment_bytes: rng.range(2_000, 40_000),
        index_interval_bytes: rng.range(64, 4096) as u32,
        tail_cache_bytes: [0usize, 4096, 1 << 20][rng.range(0, 2) as usize],
        ..LogConfig::default()
    };
    let mut run = Run {
        seed,
        rng,
        disk,
        config,
        log: None,
        model: Model {
            records: Vec::new(),
            acked_end: 0,
            visible_end: 0,
            producers: (0..2)
                .map(|i| Producer {
                    id: 1000 + i,
                    next_sequence: 0,
                    last: None,
                })
                .collect(),
        },
        report: SeedReport {
            seed,
            ..SeedReport::default()
        },
        step: 0,
        now_ms: 1_700_000_000_000,
        sent: 0,
        faulted: false,
        trail: Trail::new(seed, "", "", TRAIL),
    };
    keel_storage::set_previous_stop_clean(false);
    run.open().await?;
    for step in 0..steps {
        run.step = step;
        run.now_ms += run.rng.range(0, 50) as i64;
        run.step_once().await?;
    }
    // The end: a last power cut checks everything acknowledged and seen once more.
    run.power_cut().await?;
    run.report.steps = steps;
    run.report.checks = run.trail.checks();
    run.report.disk = run.disk.disk().counts.clone();
    if let Some(log) = run.log.take() {
        drop(log);
    }
    keel_storage::file_cache::forget_under(Path::new(DIR));
    Ok(run.report)
}

impl Run {
    fn note(&mut self, what: String) {
        let line = format!("{:>5} {what}", self.step);
        self.trail.note(line);
    }

    fn violation(&self, what: String) -> Violation {
        self.trail.violation(self.step, what)
    }

    fn check(&self, ok: bool, what: impl FnOnce() -> String) -> Result<(), Violation> {
        self.trail.check(self.step, ok, what)
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("the log is open between steps")
    }

    async fn step_once(&mut self) -> Result<(), Violation> {
        if self.disk.disk().is_off() {
            return self.power_cut().await;
        }
        if self.faulted && self.rng.chance(30) {
            // A log that failed a write or sync stays offline until the broker restarts.
            return self.restart_after_fault().await;
        }
        match self.rng.range(0, 99) {
            0..=39 => self.append().await,
            40..=61 => self.commit().await,
            62..=72 => self.read().await,
            73..=79 => self.retry().await,
            80..=81 => self.checkpoint().await,
            82..=86 => self.power_cut().await,
            87..=89 => self.restart(true).await,
            90..=91 => self.restart(false).await,
            _ => {
                self.inject();
                Ok(())
            }
        }
    }

    /// A batch of 1-4 records from the plain producer or one of the idempotent ones.
    fn make_batch(&mut self, producer: Option<usize>) -> (BytesMut, Vec<Rec>, i32) {
        let count = self.rng.range(1, 4) as usize;
        let (producer_id, base_sequence) = match producer {
            Some(i) => (
                self.model.producers[i].id,
                self.model.producers[i].next_sequence,
            ),
            None => (-1, -1),
        };
        let mut section = BytesMut::new();
        let mut recs = Vec::with_capacity(count);
        for i in 0..count {
            self.sent += 1;
            let mut value = format!("{}:{}:", self.seed, self.sent).into_bytes();
            let filler = self.rng.range(0, 1500) as usize;
            let byte = b'a' + (self.sent % 26) as u8;
            value.resize(value.len() + filler, byte);
            put_record(&mut section, 0, i as i64, None, Some(&value), &[]);
            recs.push(Rec {
                value,
                producer_id,
                sequence: if producer.is_some() {
                    base_sequence + i as i32
                } else {
                    -1
                },
            });
        }
        let fields = BatchFields {
            base_offset: 0,
            leader_epoch: -1,
            attributes: 0,
            last_offset_delta: count as i32 - 1,
            base_timestamp: self.now_ms,
            max_timestamp: self.now_ms,
            producer_id,
            producer_epoch: if producer.is_some() { 0 } else { -1 },
            base_sequence,
            records_count: count as i32,
        };
        (frame_batch(&fields, &section), recs, base_sequence)
    }

    async fn append(&mut self) -> Result<(), Violation> {
        let producer = match self.rng.range(0, 2) {
            0 => None,
            i => Some(i as usize - 1),
        };
        let (bytes, recs, base_sequence) = self.make_batch(producer);
        let end = self.model.log_end();
        let result = self
            .log()
            .append(bytes.clone(), LeaderEpoch(0), self.now_ms);
        self.note(format!(
            "append {} records from producer {:?} at log end {end}: {}",
            recs.len(),
            producer,
            outcome(&result.as_ref().map(|i| i.base_offset.0))
        ));
        match result {
            Ok(info) => {
                self.check(!info.duplicate && info.base_offset.0 == end, || {
                    format!(
                        "append landed at {} (duplicate {}), the log end is {end}",
                        info.base_offset.0, info.duplicate
                    )
                })?;
                self.report.appends += 1;
                if let Some(i) = producer {
                    let p = &mut self.model.producers[i];
                    p.next_sequence += recs.len() as i32;
                    p.last = Some(Sent {
                        bytes,
                        base_sequence,
                        count: recs.len() as i32,
                    });
                }
                self.model.records.extend(recs);
                Ok(())
            }
            Err(e) => self.expected_error("append", e),
        }
    }

    /// An error is expected only once an injected fault may have fired.
    fn expected_error(&mut self, what: &str, e: StorageError) -> Result<(), Violation> {
        let fired = {
            let c = &self.disk.disk().counts;
            c.write_eio + c.sync_eio + c.no_space + c.refused_power_off > 0
        };
        self.check(self.faulted && fired, || {
            format!("{what} failed with no fault injected: {e}")
        })
    }

    async fn commit(&mut self) -> Result<(), Violation> {
        let end = self.model.log_end();
        let result = self.log().commit(Offset(end)).await;
        self.note(format!("commit up to {end}: {}", outcome(&result)));
        match result {
            Ok(()) => {
                let hw = self.log().offsets().high_watermark.0;
                self.check(hw >= end, || {
                    format!("commit up to {end} returned but the high watermark is {hw}")
                })?;
                self.report.acked_records += (end - self.model.acked_end).max(0) as u64;
                self.model.acked_end = self.model.acked_end.max(end);
                self.observe_hw(hw)
            }
            Err(e) => self.expected_error("commit", e),
        }
    }

    /// A reader saw high watermark `hw`: it must never go back, and what is below it must
    /// stay.
    fn observe_hw(&mut self, hw: i64) -> Result<(), Violation> {
        let seen = self.model.visible_end;
        self.check(hw >= seen, || {
            format!("the high watermark went back from {seen} to {hw}")
        })?;
        self.check(hw <= self.model.log_end(), || {
            format!(
                "high watermark {hw} past the log end {}",
                self.model.log_end()
            )
        })?;
        self.model.visible_end = hw;
        Ok(())
    }

    async fn read(&mut self) -> Result<(), Violation> {
        let hw = self.log().offsets().high_watermark.0;
        self.observe_hw(hw)?;
        if hw == 0 {
            return Ok(());
        }
        let from = self.rng.range(0, hw as u64 - 1) as i64;
        let result = self.log().read(Offset(from), 64 << 10, Offset(hw)).await;
        self.note(format!(
            "read from {from} below {hw}: {}",
            outcome(&result.as_ref().map(|r| r.records.len()))
        ));
        match result {
            Ok(r) => {
                self.report.reads_checked += 1;
                let got = self.parse(&r.records)?;
                self.check(got.first().is_some_and(|(o, _)| *o <= from), || {
                    format!("a read from {from} did not start with the batch holding it")
                })?;
                self.compare(&got, hw, "read")
            }
            Err(e) => self.expected_error("read", e),
        }
    }

    /// Every record in `bytes`: (offset, value).
    fn parse(&mut self, bytes: &[u8]) -> Result<Vec<(i64, Vec<u8>)>, Violation> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < bytes.len() {
            let Some(h) = BatchHeader::parse(&bytes[pos..]) else {
                return Err(self.violation(format!("no batch header at byte {pos} of a read")));
            };
            if pos + h.size > bytes.len() {
                return Err(self.violation(format!("a partial batch at byte {pos} of a read")));
            }
            let section = &bytes[pos + keel_vocab::records::HEADER_BYTES..pos + h.size];
            match parse_records(section, &h) {
                Ok(records) => {
                    for r in records {
                        out.push((r.offset, r.value.unwrap_or_default().to_vec()));
                    }
                }
                Err(e) => {
                    return Err(self.violation(format!(
                        "batch at offset {} does not parse: {e:?}",
                        h.base_offset
                    )))
                }
            }
            pos += h.size;
        }
        Ok(out)
    }

    /// `got` (offset, value) is consecutive and matches what was sent there, below `end`.
    fn compare(&mut self, got: &[(i64, Vec<u8>)], end: i64, what: &str) -> Result<(), Violation> {
        let first = got.first().map_or(0, |(o, _)| *o);
        for (expect, (offset, value)) in (first..).zip(got) {
            if *offset >= end {
                break;
            }
            self.check(*offset == expect, || {
                format!("{what}: offset {offset} where {expect} was next (offsets not dense)")
            })?;
            let want = self.model.records.get(*offset as usize).map(|r| &r.value);
            self.check(want == Some(value), || {
                format!(
                    "{what}: offset {offset} holds {:?}, expected {:?}",
                    short(value),
                    want.map(|v| short(v))
                )
            })?;
        }
        Ok(())
    }

    /// The broker's periodic recovery-point checkpoint.
    async fn checkpoint(&mut self) -> Result<(), Violation> {
        let result = self.log().checkpoint_recovery_point().await;
        self.note(format!(
            "checkpoint the recovery point: {}",
            outcome(&result)
        ));
        match result {
            Ok(_) => Ok(()),
            Err(e) => self.expected_error("checkpoint", e),
        }
    }

    /// An idempotent producer resends its last batch, as after a lost answer.
    async fn retry(&mut self) -> Result<(), Violation> {
        let i = self.rng.range(0, 1) as usize;
        let Some(sent) = self.model.producers[i].last.clone() else {
            return Ok(());
        };
        let id = self.model.producers[i].id;
        // Where the log holds that batch now, if it does.
        let held = self
            .model
            .records
            .iter()
            .position(|r| r.producer_id == id && r.sequence == sent.base_sequence)
            .map(|o| o as i64);
        let expected_next = self.model.producers[i].next_sequence;
        // Kafka accepts any sequence from a producer the log holds no batch of (its state
        // is gone with its batches), and only the next one from a producer it knows.
        let known = self.model.records.iter().any(|r| r.producer_id == id);
        let acceptable = !known || sent.base_sequence == expected_next;
        let end = self.model.log_end();
        let result = self
            .log()
            .append(sent.bytes.clone(), LeaderEpoch(0), self.now_ms);
        self.report.retries += 1;
        self.note(format!(
            "retry producer {i} sequence {} (held at {held:?}, next {expected_next}): {}",
            sent.base_sequence,
            outcome(&result.as_ref().map(|r| (r.base_offset.0, r.duplicate)))
        ));
        match (result, held) {
            (Ok(info), Some(at)) => self.check(info.duplicate && info.base_offset.0 == at, || {
                format!(
                    "a retry of the batch at offset {at} was appended at {} (duplicate {})",
                    info.base_offset.0, info.duplicate
                )
            }),
            (Ok(info), None) => {
                self.check(
                    !info.duplicate && info.base_offset.0 == end && acceptable,
                    || {
                        format!(
                            "a retry of a lost batch (sequence {}, next {expected_next}, \
                             producer known {known}) answered at {} duplicate {}, log end {end}",
                            sent.base_sequence, info.base_offset.0, info.duplicate
                        )
                    },
                )?;
                let header = BatchHeader::parse(&sent.bytes).expect("our own batch");
                let section = &sent.bytes[keel_vocab::records::HEADER_BYTES..];
                let recs: Vec<Rec> = parse_records(section, &header)
                    .expect("our own batch")
                    .into_iter()
                    .enumerate()
                    .map(|(k, r)| Rec {
                        value: r.value.unwrap_or_default().to_vec(),
                        producer_id: id,
                        sequence: sent.base_sequence + k as i32,
                    })
                    .collect();
                self.model.records.extend(recs);
                self.model.producers[i].next_sequence = sent.base_sequence + sent.count;
                self.report.appends += 1;
                Ok(())
            }
            (Err(e), Some(at)) => {
                if self.faulted {
                    return self.expected_error("retry", e);
                }
                Err(self.violation(format!(
                    "a retry of the batch at offset {at} was refused: {e}"
                )))
            }
            (Err(e), None) => {
                // A lost batch whose sequence no longer follows the log's: refused, as Kafka
                // refuses an out-of-order sequence. If it did follow, refusing it is wrong.
                if acceptable && !self.faulted {
                    return Err(self.violation(format!(
                        "a retry of a lost batch at the expected sequence {expected_next} \
                         was refused: {e}"
                    )));
                }
                Ok(())
            }
        }
    }

    fn inject(&mut self) {
        if self.rng.chance(40) {
            // The power goes off a few disk changes from now: in the middle of a flush, a
            // roll, a checkpoint's rename; the next step finds it off and crashes.
            let changes = self.rng.range(0, 12);
            self.report.injected_power_off += 1;
            self.note(format!("power off after {changes} disk changes"));
            self.disk.disk().power_off_after(changes);
            self.faulted = true;
            return;
        }
        let fault = match self.rng.range(0, 2) {
            0 => {
                self.report.injected_sync_eio += 1;
                Fault::SyncEio {
                    prefix: DIR.trim_start_matches('/').to_string(),
                    once: true,
                }
            }
            1 => {
                self.report.injected_write_eio += 1;
                Fault::WriteEio {
                    prefix: DIR.trim_start_matches('/').to_string(),
                    once: true,
                }
            }
            _ => {
                self.report.injected_no_space += 1;
                let used = self
                    .model
                    .records
                    .iter()
                    .map(|r| r.value.len())
                    .sum::<usize>();
                Fault::NoSpace {
                    capacity: used as u64 + self.rng.range(0, 8192),
                }
            }
        };
        self.note(format!("inject {fault:?}"));
        self.disk.disk().inject(fault);
        self.faulted = true;
    }

    /// The broker restarts after a fault: by a power cut or a process restart, seeded.
    async fn restart_after_fault(&mut self) -> Result<(), Violation> {
        if self.rng.chance(50) || self.disk.disk().power_left_set() {
            self.power_cut().await
        } else {
            self.restart(false).await
        }
    }

    /// A power cut: the process dies with the machine; the disk keeps what it keeps.
    async fn power_cut(&mut self) -> Result<(), Violation> {
        self.note("power cut".into());
        self.report.crashes += 1;
        self.log = None;
        self.disk.disk().crash();
        keel_storage::set_previous_stop_clean(false);
        self.reopen().await
    }

    /// A process restart (the disk keeps everything written): after `Log::close` when
    /// `clean`, else a kill.
    async fn restart(&mut self, clean: bool) -> Result<(), Violation> {
        self.report.restarts += 1;
        let closed = if clean {
            let r = self.log().close().await;
            self.note(format!("clean stop: {}", outcome(&r)));
            if let Err(e) = r {
                self.expected_error("close", e)?;
            }
            true
        } else {
            self.note("kill".into());
            false
        };
        self.log = None;
        keel_storage::set_previous_stop_clean(closed && !self.faulted);
        self.reopen().await
    }

    async fn open(&mut self) -> Result<(), Violation> {
        loop {
            keel_storage::file_cache::forget_under(Path::new(DIR));
            let dir = PathBuf::from(DIR);
            let opened =
                Log::open_on(Disk::Sim(self.disk.clone()), &dir, self.config.clone()).await;
            self.note(format!("open: {}", outcome(&opened.as_ref().map(|_| ()))));
            match opened {
                Ok(log) => {
                    self.log = Some(log);
                    return Ok(());
                }
                Err(_) if self.disk.disk().is_off() => {
                    // The power went off while the log was opening (recovery writes): the
                    // machine restarts again.
                    self.note("power cut during open".into());
                    self.report.crashes += 1;
                    self.disk.disk().crash();
                    keel_storage::set_previous_stop_clean(false);
                }
                Err(e) => return Err(self.violation(format!("the log does not open: {e}"))),
            }
        }
    }

    /// Opens the log again and checks it against the model, which then takes what survived.
    async fn reopen(&mut self) -> Result<(), Violation> {
        self.disk.disk().clear_faults();
        self.open().await?;
        // A power-off still counting down stays armed across a process restart.
        self.faulted = self.disk.disk().power_left_set();
        let offsets = self.log().offsets();
        let end = offsets.log_end_offset.0;
        let must = self.model.acked_end.max(self.model.visible_end);
        self.check(end >= must, || {
            format!(
                "after restart the log ends at {end}: acknowledged up to {}, seen up to {}",
                self.model.acked_end, self.model.visible_end
            )
        })?;
        self.check(end <= self.model.log_end(), || {
            format!(
                "after restart the log ends at {end}, past what was appended ({})",
                self.model.log_end()
            )
        })?;
        // Everything in the log now, from its start: what was sent there, dense.
        let mut got = Vec::new();
        let mut at = offsets.log_start_offset.0;
        while at < end {
            let r = match self.log().read(Offset(at), 256 << 10, Offset(end)).await {
                Ok(r) => r,
                Err(e) => return Err(self.violation(format!("read at {at} after restart: {e}"))),
            };
            let batch = self.parse(&r.records)?;
            let Some(last) = batch.last().map(|(o, _)| *o) else {
                return Err(self.violation(format!("an empty read at {at} below {end}")));
            };
            got.extend(batch.into_iter().filter(|(o, _)| *o >= at));
            at = last + 1;
        }
        self.check(
            got.first()
                .map_or(end == 0, |(o, _)| *o == offsets.log_start_offset.0),
            || "the log does not start at its log start offset".to_string(),
        )?;
        self.compare(&got, end, "after restart")?;
        // The model keeps what survived; the producers go on from what the log holds.
        self.model.records.truncate(end as usize);
        self.model.rebuild_producers();
        self.model.acked_end = self.model.acked_end.min(end);
        let hw = offsets.high_watermark.0;
        self.check(hw >= self.model.visible_end, || {
            format!(
                "after restart the high watermark is {hw}, below {} seen before",
                self.model.visible_end
            )
        })?;
        self.model.visible_end = hw;
        Ok(())
    }
}

fn outcome<T: std::fmt::Debug, E: std::fmt::Display>(r: &Result<T, E>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// A value's identifying prefix (`seed:counter:`).
fn short(v: &[u8]) -> String {
    let n = v
        .iter()
        .take(24)
        .position(|b| b.is_ascii_lowercase())
        .unwrap_or(v.len().min(24));
    String::from_utf8_lossy(&v[..n]).into_owned()
}
