//! The offset checker behind `--verify` and the replication fault tests: a [`Ledger`] of where
//! each record was acknowledged and where each was read, judged by [`Ledger::report`].
//!
//! A record is a [`MessageId`] (producer, sequence). The producer side calls
//! [`Ledger::acknowledged`] with the (partition, offset) the broker answered (the offset may be
//! unknown: librdkafka reports -1001 for a retried idempotent batch it learned was persisted)
//! and the acks level; the consumer side calls [`Ledger::read`] for every record it reads.
//! A reader that reads a partition from a known offset to a known end records a full pass
//! ([`Pass`], [`Ledger::add_pass`]): it claims that every offset it covered and did not
//! return holds no record.
//!
//! Errors ([`LedgerReport::errors`]):
//! - `lost_acks_all`: acknowledged with acks=all, never read;
//! - `offset_conflicts`: two different records acknowledged with acks=all at one (partition,
//!   offset), or one acknowledged with acks=all and another read there. (An acks=1 or acks=0
//!   record may be lost and its offset taken by another: then it is judged as acknowledged
//!   without an offset, below.)
//! - `duplicated`: one record read (or acknowledged) at two offsets;
//! - `changed`: two reads of one offset found different records;
//! - `gone`: a record was read at an offset that a full pass covering it found empty;
//! - `misplaced`: acknowledged at one offset, read only at another;
//! - `untracked`: an identity or offset out of the ledger's range (so nothing passes unseen).
//!
//! Order does not matter: reads are compared with each other whenever they happened (a record
//! at an offset that an earlier pass found empty is as wrong as one that vanished later), so
//! the ledger can be filled from several threads behind one lock in any interleaving.
//!
//! Counted apart, not errors: acks=1 and acks=0 records never read (`lost_acks_one`,
//! `lost_acks_none`), and records read but never acknowledged (`unacknowledged_read`: acks=0,
//! in flight at the end, or a failed send whose write landed).
//!
//! Memory: 8 bytes per acknowledged offset and 8 per distinct offset read, in pages of 4096
//! offsets, plus the bitsets of [`MessageSet`]. Limits: producer < 65535, sequence < 2^48,
//! offset < 2^62.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::message_set::{MessageSet, PartitionKey};

/// The first examples kept of each kind of error.
const EXAMPLES_PER_KIND: usize = 3;
/// log2 of the offsets covered by one page of [`Slots`].
const SLOT_PAGE_LOG2: u32 = 12;
const SLOT_PAGE_LEN: usize = 1 << SLOT_PAGE_LOG2;
const PRODUCER_MAX: u32 = 0xFFFE;
const SEQUENCE_BITS: u32 = 48;
const OFFSET_MAX: i64 = (1 << 62) - 1;

/// A record's identity: its producer and that producer's sequence number for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId {
    pub producer: u32,
    pub sequence: u64,
}

impl MessageId {
    pub fn new(producer: u32, sequence: u64) -> Self {
        Self { producer, sequence }
    }

    /// Non-zero packed form (0 marks an empty slot), or None out of range.
    fn pack(self) -> Option<u64> {
        (self.producer <= PRODUCER_MAX && self.sequence < 1 << SEQUENCE_BITS)
            .then(|| (u64::from(self.producer) + 1) << SEQUENCE_BITS | self.sequence)
    }

    fn unpack(packed: u64) -> Self {
        debug_assert_ne!(packed, 0);
        Self {
            producer: (packed >> SEQUENCE_BITS) as u32 - 1,
            sequence: packed & ((1 << SEQUENCE_BITS) - 1),
        }
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.producer, self.sequence)
    }
}

/// The acks level a record was acknowledged under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Acks {
    /// acks=0: "acknowledged" when sent.
    None,
    /// acks=1: the leader appended it.
    Leader,
    /// acks=all: the in-sync replicas have it.
    All,
}

impl Acks {
    /// From Produce's `acks` field (-1 = all).
    pub fn from_produce(acks: i16) -> Self {
        match acks {
            0 => Acks::None,
            1 => Acks::Leader,
            _ => Acks::All,
        }
    }
}

/// Offset -> packed record identity, paged; 0 is an empty slot.
#[derive(Clone, Debug, Default)]
struct Slots {
    pages: BTreeMap<u64, Box<[u64]>>,
}

impl Slots {
    fn get(&self, offset: u64) -> u64 {
        self.pages
            .get(&(offset >> SLOT_PAGE_LOG2))
            .map_or(0, |p| p[offset as usize % SLOT_PAGE_LEN])
    }

    fn set(&mut self, offset: u64, value: u64) {
        let page = self
            .pages
            .entry(offset >> SLOT_PAGE_LOG2)
            .or_insert_with(|| vec![0; SLOT_PAGE_LEN].into_boxed_slice());
        page[offset as usize % SLOT_PAGE_LEN] = value;
    }

    /// Non-empty slots with offsets in `from..to`, in offset order.
    fn range(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let pages = if from < to {
            self.pages
                .range(from >> SLOT_PAGE_LOG2..=(to - 1) >> SLOT_PAGE_LOG2)
        } else {
            self.pages.range(1..1)
        };
        pages.flat_map(move |(page, slots)| {
            let base = page << SLOT_PAGE_LOG2;
            slots.iter().enumerate().filter_map(move |(i, &v)| {
                let offset = base + i as u64;
                (v != 0 && offset >= from && offset < to).then_some((offset, v))
            })
        })
    }

    fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.range(0, u64::MAX)
    }
}

/// One reader's pass over one partition from `from`: feed it every offset it returned, in
/// order, then hand it to [`Ledger::add_pass`] with the offset it stopped at.
#[derive(Clone, Debug)]
pub struct Pass {
    partition: PartitionKey,
    reader: u32,
    from: i64,
    next: i64,
    /// Offset ranges (start inclusive, end exclusive) the pass covered and found empty.
    gaps: Vec<(i64, i64)>,
    /// An offset returned out of order (at or before one already returned).
    backwards: u64,
}

impl Pass {
    /// A pass of `reader` over `partition` that starts reading at `from`.
    pub fn new(reader: u32, partition: PartitionKey, from: i64) -> Self {
        Self {
            partition,
            reader,
            from,
            next: from,
            gaps: Vec::new(),
            backwards: 0,
        }
    }

    /// The pass returned a record (any record, ours or not) at `offset`.
    pub fn saw(&mut self, offset: i64) {
        if offset < self.next {
            // A fetch that starts inside a batch returns its earlier records: callers skip
            // those; anything else out of order is counted.
            self.backwards += u64::from(offset >= self.from);
            return;
        }
        if offset > self.next {
            self.gaps.push((self.next, offset));
        }
        self.next = offset + 1;
    }

    /// The next offset the pass would read.
    pub fn position(&self) -> i64 {
        self.next
    }
}

/// A finished pass: it covered `from..end` and found nothing in `gaps`.
#[derive(Clone, Debug)]
struct FinishedPass {
    reader: u32,
    partition: usize,
    gaps: Vec<(i64, i64)>,
}

/// What one partition holds, as acknowledged and as read.
#[derive(Clone, Debug, Default)]
struct PartitionLog {
    acked_at: Slots,
    read_at: Slots,
}

/// Counters of the errors found while recording, with their first examples.
#[derive(Clone, Debug, Default)]
struct Findings {
    offset_conflicts: u64,
    duplicated: u64,
    changed: u64,
    untracked: u64,
    examples: BTreeMap<&'static str, Vec<String>>,
}

impl Findings {
    fn example(&mut self, kind: &'static str, text: impl FnOnce() -> String) {
        let list = self.examples.entry(kind).or_default();
        if list.len() < EXAMPLES_PER_KIND {
            list.push(text());
        }
    }
}

/// Every acknowledgement and read of a run; plain data (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    partition_keys: Vec<PartitionKey>,
    partition_index: HashMap<PartitionKey, usize>,
    logs: Vec<PartitionLog>,
    /// Acknowledged records by level.
    acked_none: MessageSet,
    acked_one: MessageSet,
    acked_all: MessageSet,
    /// Acknowledged without an offset (any level).
    acked_offset_unknown: MessageSet,
    /// Acknowledged below acks=all at an offset another record was acknowledged at: judged
    /// as if acknowledged without an offset.
    acked_displaced: MessageSet,
    /// Records read at least once, anywhere.
    read: MessageSet,
    reads: u64,
    passes: Vec<FinishedPass>,
    passes_backwards: u64,
    found: Findings,
}

fn fmt_tp((topic, partition): PartitionKey) -> String {
    format!("{topic}/{partition}")
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    fn partition(&mut self, tp: PartitionKey) -> usize {
        if let Some(&i) = self.partition_index.get(&tp) {
            return i;
        }
        self.partition_keys.push(tp);
        self.logs.push(PartitionLog::default());
        self.partition_index.insert(tp, self.logs.len() - 1);
        self.logs.len() - 1
    }

    fn acked_set(&mut self, acks: Acks) -> &mut MessageSet {
        match acks {
            Acks::None => &mut self.acked_none,
            Acks::Leader => &mut self.acked_one,
            Acks::All => &mut self.acked_all,
        }
    }

    /// The broker acknowledged `id` at `offset` of `tp` under `acks`; a negative offset is
    /// unknown (then the record must be read once, anywhere).
    pub fn acknowledged(&mut self, id: MessageId, tp: PartitionKey, offset: i64, acks: Acks) {
        let Some(packed) = id.pack() else {
            self.found.untracked += 1;
            self.found
                .example("untracked", || format!("identity {id} out of range"));
            return;
        };
        let acked_before = self.is_acked(id);
        self.acked_set(acks).insert(id.producer, id.sequence);
        if offset < 0 {
            self.acked_offset_unknown.insert(id.producer, id.sequence);
            return;
        }
        if offset > OFFSET_MAX {
            self.found.untracked += 1;
            self.found
                .example("untracked", || format!("{id} acknowledged at {offset}"));
            return;
        }
        let p = self.partition(tp);
        let there = self.logs[p].acked_at.get(offset as u64);
        if there == packed {
            return;
        }
        if there != 0 {
            let other = MessageId::unpack(there);
            if acks == Acks::All && self.acks_of(other) == Some(Acks::All) {
                self.found.offset_conflicts += 1;
                self.found.example("offset_conflicts", || {
                    format!(
                        "{other} and {id} both acknowledged at {}@{offset}",
                        fmt_tp(tp)
                    )
                });
                return;
            }
            // A weaker acknowledgement gives way: its record was lost and the offset reused.
            if acks == Acks::All {
                self.acked_displaced.insert(other.producer, other.sequence);
                self.logs[p].acked_at.set(offset as u64, packed);
            } else {
                self.acked_displaced.insert(id.producer, id.sequence);
            }
            return;
        }
        if acked_before {
            self.found.duplicated += 1;
            self.found.example("duplicated", || {
                format!(
                    "{id} acknowledged again at {}@{offset}, after another offset",
                    fmt_tp(tp)
                )
            });
        }
        self.logs[p].acked_at.set(offset as u64, packed);
    }

    fn is_acked(&self, id: MessageId) -> bool {
        [&self.acked_none, &self.acked_one, &self.acked_all]
            .iter()
            .any(|s| s.contains(id.producer, id.sequence))
    }

    fn acks_of(&self, id: MessageId) -> Option<Acks> {
        let has = |s: &MessageSet| s.contains(id.producer, id.sequence);
        if has(&self.acked_all) {
            Some(Acks::All)
        } else if has(&self.acked_one) {
            Some(Acks::Leader)
        } else if has(&self.acked_none) {
            Some(Acks::None)
        } else {
            None
        }
    }

    /// `reader` read `id` at `offset` of `tp`.
    pub fn read(&mut self, reader: u32, id: MessageId, tp: PartitionKey, offset: i64) {
        self.reads += 1;
        let (Some(packed), true) = (id.pack(), (0..=OFFSET_MAX).contains(&offset)) else {
            self.found.untracked += 1;
            self.found.example("untracked", || {
                format!("reader {reader} read {id} at {}@{offset}", fmt_tp(tp))
            });
            return;
        };
        let p = self.partition(tp);
        let there = self.logs[p].read_at.get(offset as u64);
        if there == packed {
            return; // a re-read of the same offset
        }
        if there != 0 {
            self.found.changed += 1;
            self.found.example("changed", || {
                format!(
                    "{}@{offset} read as {} before, now as {id} by reader {reader}",
                    fmt_tp(tp),
                    MessageId::unpack(there)
                )
            });
            self.read.insert(id.producer, id.sequence);
            return;
        }
        if !self.read.insert(id.producer, id.sequence) {
            self.found.duplicated += 1;
            self.found.example("duplicated", || {
                format!(
                    "{id} read at {}@{offset} by reader {reader}, and at another offset",
                    fmt_tp(tp)
                )
            });
        }
        self.logs[p].read_at.set(offset as u64, packed);
    }

    /// A finished [`Pass`] that stopped before `end` (exclusive): it claims the offsets it
    /// covered and did not return are empty.
    pub fn add_pass(&mut self, mut pass: Pass, end: i64) {
        if end > pass.next {
            pass.gaps.push((pass.next, end));
        }
        self.passes_backwards += pass.backwards;
        let partition = self.partition(pass.partition);
        self.passes.push(FinishedPass {
            reader: pass.reader,
            partition,
            gaps: pass.gaps,
        });
    }

    /// Distinct records acknowledged.
    pub fn acked(&self) -> u64 {
        self.acked_none.len() + self.acked_one.len() + self.acked_all.len()
    }

    /// The verdict over everything recorded so far.
    pub fn report(&self) -> LedgerReport {
        let mut found = self.found.clone();
        let mut r = LedgerReport {
            acked_all: self.acked_all.len(),
            acked_one: self.acked_one.len(),
            acked_none: self.acked_none.len(),
            acked_offset_unknown: self.acked_offset_unknown.len(),
            read: self.read.len(),
            reads: self.reads,
            passes: self.passes.len() as u64,
            ..Default::default()
        };
        self.judge_acknowledged(&mut r, &mut found);
        self.judge_passes(&mut r, &mut found);
        // Read but never acknowledged.
        for (producer, sequence) in self.read.iter() {
            if !self.is_acked(MessageId::new(producer, sequence)) {
                r.unacknowledged_read += 1;
            }
        }
        r.offset_conflicts = found.offset_conflicts;
        r.duplicated = found.duplicated;
        r.changed = found.changed;
        r.untracked = found.untracked + self.passes_backwards;
        if self.passes_backwards > 0 {
            found.example("untracked", || {
                format!(
                    "{} offsets a pass returned out of order",
                    self.passes_backwards
                )
            });
        }
        r.examples = found
            .examples
            .into_iter()
            .flat_map(|(kind, list)| list.into_iter().map(move |e| format!("{kind}: {e}")))
            .collect();
        r
    }

    /// Every acknowledged record was read at its offset (or, offset unknown, somewhere).
    fn judge_acknowledged(&self, r: &mut LedgerReport, found: &mut Findings) {
        for (p, log) in self.logs.iter().enumerate() {
            let tp = self.partition_keys[p];
            for (offset, packed) in log.acked_at.iter() {
                let id = MessageId::unpack(packed);
                let there = log.read_at.get(offset);
                if there == packed {
                    continue;
                }
                // A lost acks=1 record's offset may hold another record.
                if there != 0 && self.acks_of(id) == Some(Acks::All) {
                    found.offset_conflicts += 1;
                    found.example("offset_conflicts", || {
                        format!(
                            "{}@{offset} acknowledged as {id}, read as {}",
                            fmt_tp(tp),
                            MessageId::unpack(there)
                        )
                    });
                }
                if self.read.contains(id.producer, id.sequence) {
                    r.misplaced += 1;
                    found.example("misplaced", || {
                        format!(
                            "{id} acknowledged at {}@{offset}, read at another offset",
                            fmt_tp(tp)
                        )
                    });
                } else {
                    self.count_lost(id, &format!("{}@{offset}", fmt_tp(tp)), r, found);
                }
            }
        }
        for (producer, sequence) in self.acked_offset_unknown.iter() {
            if !self.read.contains(producer, sequence) {
                let id = MessageId::new(producer, sequence);
                self.count_lost(id, "an unknown offset", r, found);
            }
        }
        for (producer, sequence) in self.acked_displaced.iter() {
            if !self.read.contains(producer, sequence) {
                let id = MessageId::new(producer, sequence);
                self.count_lost(id, "an offset another record took", r, found);
            }
        }
    }

    fn count_lost(&self, id: MessageId, at: &str, r: &mut LedgerReport, found: &mut Findings) {
        match self.acks_of(id) {
            Some(Acks::All) => {
                r.lost_acks_all += 1;
                found.example("lost_acks_all", || {
                    format!("{id} acknowledged (acks=all) at {at}, never read")
                });
            }
            Some(Acks::Leader) => r.lost_acks_one += 1,
            Some(Acks::None) | None => r.lost_acks_none += 1,
        }
    }

    /// Nothing was read at an offset a full pass covered and found empty.
    fn judge_passes(&self, r: &mut LedgerReport, found: &mut Findings) {
        for pass in &self.passes {
            let log = &self.logs[pass.partition];
            let tp = self.partition_keys[pass.partition];
            for &(from, to) in &pass.gaps {
                let (from, to) = (from.max(0) as u64, to.max(0) as u64);
                for (offset, packed) in log.read_at.range(from, to) {
                    r.gone += 1;
                    found.example("gone", || {
                        format!(
                            "{} read at {}@{offset}; reader {}'s pass found nothing there",
                            MessageId::unpack(packed),
                            fmt_tp(tp),
                            pass.reader
                        )
                    });
                }
            }
        }
    }
}

/// The ledger's verdict (see the module doc for each count).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LedgerReport {
    /// Distinct records acknowledged, by acks level.
    pub acked_all: u64,
    pub acked_one: u64,
    pub acked_none: u64,
    /// Of those, acknowledged without an offset.
    pub acked_offset_unknown: u64,
    /// Distinct records read, and reads in all.
    pub read: u64,
    pub reads: u64,
    /// Full passes recorded.
    pub passes: u64,
    // Counted apart:
    pub lost_acks_one: u64,
    pub lost_acks_none: u64,
    pub unacknowledged_read: u64,
    // Errors:
    pub lost_acks_all: u64,
    pub offset_conflicts: u64,
    pub duplicated: u64,
    pub changed: u64,
    pub gone: u64,
    pub misplaced: u64,
    pub untracked: u64,
    /// The first few examples of each kind of error, "kind: what".
    pub examples: Vec<String>,
}

impl LedgerReport {
    /// Errors of every kind.
    pub fn errors(&self) -> u64 {
        self.lost_acks_all
            + self.offset_conflicts
            + self.duplicated
            + self.changed
            + self.gone
            + self.misplaced
            + self.untracked
    }

    /// One line of counts, for logs and the closing note.
    pub fn counts_line(&self) -> String {
        format!(
            "acked all/1/0 {}/{}/{} ({} without offset), read {} ({} reads, {} passes), \
             lost acks=1 {}, lost acks=0 {}, unacked read {}, errors {} (lost acks=all {}, \
             offset conflicts {}, duplicated {}, changed {}, gone {}, misplaced {}, untracked {})",
            self.acked_all,
            self.acked_one,
            self.acked_none,
            self.acked_offset_unknown,
            self.read,
            self.reads,
            self.passes,
            self.lost_acks_one,
            self.lost_acks_none,
            self.unacknowledged_read,
            self.errors(),
            self.lost_acks_all,
            self.offset_conflicts,
            self.duplicated,
            self.changed,
            self.gone,
            self.misplaced,
            self.untracked
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP0: PartitionKey = (0, 0);
    const TP1: PartitionKey = (0, 1);

    fn id(sequence: u64) -> MessageId {
        MessageId::new(0, sequence)
    }

    /// `n` records of producer 0 acknowledged under `acks` at offsets 0..n of TP0.
    fn acked(n: u64, acks: Acks) -> Ledger {
        let mut l = Ledger::new();
        for s in 0..n {
            l.acknowledged(id(s), TP0, s as i64, acks);
        }
        l
    }

    /// A full pass of `reader` over TP0 from 0 that returns `records` (sequence, offset) and
    /// stops at `end`.
    fn pass(l: &mut Ledger, reader: u32, records: &[(u64, i64)], end: i64) {
        let mut p = Pass::new(reader, TP0, 0);
        for &(s, o) in records {
            l.read(reader, id(s), TP0, o);
            p.saw(o);
        }
        l.add_pass(p, end);
    }

    fn in_order(n: u64) -> Vec<(u64, i64)> {
        (0..n).map(|s| (s, s as i64)).collect()
    }

    #[test]
    fn a_clean_run_has_no_errors() {
        let mut l = acked(100, Acks::All);
        for s in 100..150 {
            l.acknowledged(id(s), TP0, s as i64, Acks::Leader);
        }
        pass(&mut l, 0, &in_order(150), 150);
        // A second reader reads part of it again: re-reads of the same offsets are fine.
        for s in 20..40 {
            l.read(1, id(s), TP0, s as i64);
        }
        let r = l.report();
        assert_eq!(r.errors(), 0, "{r:?}");
        assert_eq!((r.acked_all, r.acked_one, r.acked_none), (100, 50, 0));
        assert_eq!((r.read, r.reads, r.passes), (150, 170, 1));
        assert_eq!((r.lost_acks_one, r.unacknowledged_read), (0, 0));
        assert!(r.examples.is_empty());
    }

    #[test]
    fn an_acks_all_record_never_read_is_an_error_acks_1_and_0_are_counted_apart() {
        let mut l = acked(10, Acks::All);
        l.acknowledged(id(10), TP0, 10, Acks::Leader);
        l.acknowledged(id(11), TP0, 11, Acks::Leader);
        l.acknowledged(id(12), TP0, 12, Acks::None);
        // Offsets 3 (acks=all), 10 and 11 (acks=1), 12 (acks=0) never come back.
        let read: Vec<(u64, i64)> = in_order(10).into_iter().filter(|&(s, _)| s != 3).collect();
        pass(&mut l, 0, &read, 10);
        let r = l.report();
        assert_eq!(r.lost_acks_all, 1);
        assert_eq!(r.lost_acks_one, 2);
        assert_eq!(r.lost_acks_none, 1);
        assert_eq!(r.errors(), 1, "{r:?}");
        assert_eq!(
            r.examples,
            vec!["lost_acks_all: 0#3 acknowledged (acks=all) at 0/0@3, never read"]
        );
    }

    #[test]
    fn two_records_acknowledged_at_one_offset_are_an_error() {
        let mut l = acked(3, Acks::All);
        l.acknowledged(MessageId::new(1, 0), TP0, 1, Acks::All);
        pass(&mut l, 0, &in_order(3), 3);
        let r = l.report();
        assert_eq!(r.offset_conflicts, 1, "{r:?}");
        // The second record acknowledged at offset 1 is also never read.
        assert_eq!(
            r.lost_acks_all, 0,
            "its ack was refused, it is counted once"
        );
        assert!(r.errors() >= 1);
        // The same offset on another partition is another place.
        let mut l = acked(3, Acks::All);
        l.acknowledged(MessageId::new(1, 0), TP1, 1, Acks::All);
        l.read(0, MessageId::new(1, 0), TP1, 1);
        pass(&mut l, 0, &in_order(3), 3);
        assert_eq!(l.report().errors(), 0);
    }

    #[test]
    fn a_lost_acks_1_record_whose_offset_another_took_is_counted_apart() {
        // The old leader acknowledged 0#3 and 0#4 (acks=1) at 3 and 4, then lost them; the
        // new leader wrote 0#5 (acks=all) at 3, in either order of the answers.
        for all_first in [false, true] {
            let mut l = acked(3, Acks::All);
            if all_first {
                l.acknowledged(id(5), TP0, 3, Acks::All);
            }
            l.acknowledged(id(3), TP0, 3, Acks::Leader);
            l.acknowledged(id(4), TP0, 4, Acks::Leader);
            if !all_first {
                l.acknowledged(id(5), TP0, 3, Acks::All);
            }
            pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (5, 3)], 4);
            let r = l.report();
            assert_eq!(r.errors(), 0, "{r:?}");
            assert_eq!(r.lost_acks_one, 2, "{r:?}");
            // Had 0#5 been lost as well, that is an error.
            let mut l = acked(3, Acks::All);
            l.acknowledged(id(3), TP0, 3, Acks::Leader);
            l.acknowledged(id(5), TP0, 3, Acks::All);
            pass(&mut l, 0, &in_order(3), 3);
            assert_eq!(l.report().lost_acks_all, 1);
        }
        // An acks=1 record read and then replaced is still an error (changed).
        let mut l = acked(3, Acks::All);
        l.acknowledged(id(3), TP0, 3, Acks::Leader);
        l.read(1, id(3), TP0, 3);
        l.acknowledged(id(5), TP0, 3, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (5, 3)], 4);
        assert_eq!(l.report().changed, 1);
    }

    #[test]
    fn a_record_read_where_another_was_acknowledged_is_an_error() {
        let mut l = acked(3, Acks::All);
        // Offset 1 holds a record nobody acknowledged; 0#1 is nowhere.
        pass(&mut l, 0, &[(0, 0), (7, 1), (2, 2)], 3);
        let r = l.report();
        assert_eq!(r.offset_conflicts, 1, "{r:?}");
        assert_eq!(r.lost_acks_all, 1);
        assert_eq!(r.unacknowledged_read, 1);
        assert_eq!(r.errors(), 2);
    }

    #[test]
    fn a_record_read_at_two_offsets_is_a_duplicate() {
        let mut l = acked(3, Acks::All);
        l.acknowledged(id(3), TP0, 3, Acks::All);
        // A retried write landed twice: 0#1 at offsets 1 and 4.
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (3, 3), (1, 4)], 5);
        let r = l.report();
        assert_eq!(r.duplicated, 1, "{r:?}");
        assert_eq!(r.errors(), 1);
        // On another partition too.
        let mut l = acked(3, Acks::All);
        pass(&mut l, 0, &in_order(3), 3);
        l.read(0, id(0), TP1, 0);
        assert_eq!(l.report().duplicated, 1);
    }

    #[test]
    fn a_record_acknowledged_at_two_offsets_is_a_duplicate() {
        let mut l = acked(3, Acks::All);
        l.acknowledged(id(1), TP0, 3, Acks::All);
        // Acknowledging the same record at the same place again is not.
        l.acknowledged(id(2), TP0, 2, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (1, 3)], 4);
        let r = l.report();
        // Once for the second acknowledgement, once for the second read.
        assert_eq!(r.duplicated, 2, "{r:?}");
    }

    #[test]
    fn a_record_read_then_changed_is_an_error() {
        let mut l = acked(3, Acks::All);
        // A consumer reads an acks=1 record at 3 ..
        l.acknowledged(id(3), TP0, 3, Acks::Leader);
        l.read(1, id(3), TP0, 3);
        // .. later the log holds another record there (a truncated and rewritten tail).
        l.acknowledged(id(4), TP0, 4, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (4, 3)], 4);
        let r = l.report();
        assert_eq!(r.changed, 1, "{r:?}");
        // 0#4 was acknowledged at 4 but read at 3.
        assert_eq!(r.misplaced, 1);
        assert!(r.examples.iter().any(|e| e.starts_with("changed: 0/0@3")));
    }

    #[test]
    fn a_record_read_then_gone_is_an_error() {
        let mut l = acked(5, Acks::Leader);
        // A consumer read all five; a later full pass finds offsets 3 and 4 empty.
        for s in 0..5 {
            l.read(1, id(s), TP0, s as i64);
        }
        pass(&mut l, 0, &in_order(3), 5);
        let r = l.report();
        assert_eq!(r.gone, 2, "{r:?}");
        assert_eq!(r.lost_acks_one, 0, "they were read");
        // A pass that stopped at 3 claims nothing about 3 and 4.
        let mut l = acked(5, Acks::Leader);
        for s in 0..5 {
            l.read(1, id(s), TP0, s as i64);
        }
        pass(&mut l, 0, &in_order(3), 3);
        assert_eq!(l.report().errors(), 0);
        // A gap in the middle of a pass counts too, and a pass that found it empty before
        // the record was read there is as wrong.
        let mut l = acked(5, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (3, 3), (4, 4)], 5);
        l.read(1, id(2), TP0, 2);
        let r = l.report();
        assert_eq!(r.gone, 1, "{r:?}");
        assert_eq!(r.lost_acks_all, 0);
    }

    #[test]
    fn acknowledged_at_one_offset_and_read_at_another_is_an_error() {
        let mut l = acked(2, Acks::All);
        l.acknowledged(id(2), TP0, 5, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2)], 3);
        let r = l.report();
        assert_eq!(r.misplaced, 1, "{r:?}");
        assert_eq!(r.lost_acks_all, 0);
        assert_eq!(r.errors(), 1);
        assert_eq!(
            r.examples,
            vec!["misplaced: 0#2 acknowledged at 0/0@5, read at another offset"]
        );
    }

    #[test]
    fn an_acknowledgement_without_an_offset_must_be_read_once_somewhere() {
        let mut l = acked(2, Acks::All);
        l.acknowledged(id(2), TP0, -1001, Acks::All);
        l.acknowledged(id(3), TP0, -1001, Acks::All);
        pass(&mut l, 0, &in_order(3), 3);
        let r = l.report();
        assert_eq!(r.acked_offset_unknown, 2);
        assert_eq!(r.acked_all, 4);
        assert_eq!(r.lost_acks_all, 1, "0#3 was never read: {r:?}");
        assert_eq!(r.errors(), 1);
        // Read twice: a duplicate.
        let mut l = acked(2, Acks::All);
        l.acknowledged(id(2), TP0, -1001, Acks::All);
        pass(&mut l, 0, &[(0, 0), (1, 1), (2, 2), (2, 3)], 4);
        let r = l.report();
        assert_eq!((r.duplicated, r.errors()), (1, 1), "{r:?}");
    }

    #[test]
    fn unacknowledged_reads_are_counted_not_errors() {
        let mut l = acked(2, Acks::All);
        pass(&mut l, 0, &in_order(4), 4);
        let r = l.report();
        assert_eq!(r.unacknowledged_read, 2);
        assert_eq!(r.errors(), 0);
    }

    #[test]
    fn identities_and_offsets_out_of_range_are_errors_not_silence() {
        let mut l = Ledger::new();
        l.acknowledged(MessageId::new(PRODUCER_MAX + 1, 0), TP0, 0, Acks::All);
        l.read(0, MessageId::new(0, 1 << SEQUENCE_BITS), TP0, 0);
        l.read(0, id(0), TP0, -5);
        let r = l.report();
        assert_eq!(r.untracked, 3, "{r:?}");
        // A pass whose offsets go backwards past its start is counted as well.
        let mut l = Ledger::new();
        let mut p = Pass::new(0, TP0, 10);
        p.saw(9); // the start of a batch before the fetch offset: skipped by callers, fine
        p.saw(10);
        p.saw(11);
        p.saw(10);
        l.add_pass(p, 12);
        assert_eq!(l.report().untracked, 1);
    }

    #[test]
    fn offsets_across_pages_and_gaps_spanning_pages() {
        let base = 3 * SLOT_PAGE_LEN as i64 - 7;
        let mut l = Ledger::new();
        for s in 0..20u64 {
            l.acknowledged(id(s), TP0, base + s as i64, Acks::All);
            l.read(1, id(s), TP0, base + s as i64);
        }
        assert_eq!(l.report().errors(), 0);
        // A pass from 0 that found nothing before base + 10 covers the first ten.
        let mut p = Pass::new(0, TP0, 0);
        for s in 10..20u64 {
            l.read(0, id(s), TP0, base + s as i64);
            p.saw(base + s as i64);
        }
        l.add_pass(p, base + 20);
        let r = l.report();
        assert_eq!(r.gone, 10, "{r:?}");
        assert_eq!(r.read, 20);
        // Identities pack and unpack.
        let m = MessageId::new(PRODUCER_MAX, (1 << SEQUENCE_BITS) - 1);
        assert_eq!(MessageId::unpack(m.pack().unwrap()), m);
        assert_eq!(MessageId::unpack(id(0).pack().unwrap()), id(0));
    }

    #[test]
    fn examples_are_bounded_per_kind() {
        let mut l = acked(100, Acks::All);
        pass(&mut l, 0, &[], 0);
        let r = l.report();
        assert_eq!(r.lost_acks_all, 100);
        assert_eq!(r.examples.len(), EXAMPLES_PER_KIND);
        let line = r.counts_line();
        assert!(line.contains("errors 100 (lost acks=all 100"), "{line}");
    }
}
