//! The aborted transaction index of one segment, held in memory and written as Kafka's
//! `.txnindex`: one 34-byte entry per ABORT marker in the segment (all big-endian):
//!
//! ```text
//! version i16 (0) | producer_id i64 | first_offset i64 | last_offset i64 | last_stable_offset i64
//! ```
//!
//! `first_offset` is the transaction's first offset (possibly in an earlier segment),
//! `last_offset` the marker's offset (in this segment), `last_stable_offset` the first offset
//! of the earliest other transaction open when the marker was appended (else the marker's
//! offset + 1): an entry whose LSO is at or past a read's end tells that no later entry can
//! concern it. Entries ascend by `last_offset`.
//!
//! Who writes it: the log appends an entry when it appends an ABORT marker, and writes the
//! file (temp file, sync, rename, directory sync) when the segment is finalized, at close, by
//! recovery and by compaction. The file, when present, lists every marker of its segment's
//! file: before the log writes more bytes into a segment whose index is on disk, it removes
//! the file. Decoding assumes hostile bytes. Runs on the shard owning the partition.

use crate::types::Offset;

pub const TXN_ENTRY_BYTES: usize = 34;
const TXN_INDEX_VERSION: i16 = 0;

/// One aborted transaction (Kafka `AbortedTxn`). Offsets are inclusive.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: Offset,
    /// The ABORT marker's offset.
    pub last_offset: Offset,
    pub last_stable_offset: Offset,
}

/// The aborted transactions whose markers lie in one segment, ascending by marker offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnIndex {
    entries: Vec<AbortedTxn>,
}

impl TxnIndex {
    #[cfg(test)]
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Appends the entry of a marker appended after every marker indexed so far.
    pub fn push(&mut self, txn: AbortedTxn) {
        assert!(
            self.entries
                .last()
                .is_none_or(|l| l.last_offset < txn.last_offset),
            "aborted transaction {txn:?} appended out of order"
        );
        debug_assert!(txn.first_offset <= txn.last_offset);
        self.entries.push(txn);
    }

    /// Appends every entry of `other` (the next segment's, when compaction merges them).
    pub fn extend(&mut self, other: &TxnIndex) {
        for &txn in &other.entries {
            self.push(txn);
        }
    }

    /// Kafka `TransactionIndex.collectAbortedTxns`: adds to `out` the transactions whose
    /// range `[first_offset, last_offset]` meets `[from, upto)`. Returns true when no later
    /// segment can hold one that does (an entry's LSO reached `upto`).
    pub fn collect(&self, from: Offset, upto: Offset, out: &mut Vec<AbortedTxn>) -> bool {
        for txn in &self.entries {
            if txn.last_offset >= from && txn.first_offset < upto {
                out.push(*txn);
            }
            if txn.last_stable_offset >= upto {
                return true;
            }
        }
        false
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * TXN_ENTRY_BYTES);
        for t in &self.entries {
            out.extend_from_slice(&TXN_INDEX_VERSION.to_be_bytes());
            out.extend_from_slice(&t.producer_id.to_be_bytes());
            out.extend_from_slice(&t.first_offset.0.to_be_bytes());
            out.extend_from_slice(&t.last_offset.0.to_be_bytes());
            out.extend_from_slice(&t.last_stable_offset.0.to_be_bytes());
        }
        out
    }

    /// Decodes a file's bytes for the segment `[base_offset, next_offset)`; `None` unless it is
    /// a whole number of version-0 entries with markers inside the segment, ascending, each
    /// with `0 <= first_offset <= last_offset` and an LSO in `[0, last_offset + 1]`.
    pub fn decode(b: &[u8], base_offset: Offset, next_offset: Offset) -> Option<TxnIndex> {
        if b.len() % TXN_ENTRY_BYTES != 0 {
            return None;
        }
        let mut index = TxnIndex::default();
        for e in b.chunks_exact(TXN_ENTRY_BYTES) {
            let i64_at = |at: usize| {
                let mut a = [0u8; 8];
                a.copy_from_slice(&e[at..at + 8]);
                i64::from_be_bytes(a)
            };
            if i16::from_be_bytes([e[0], e[1]]) != TXN_INDEX_VERSION {
                return None;
            }
            let txn = AbortedTxn {
                producer_id: i64_at(2),
                first_offset: Offset(i64_at(10)),
                last_offset: Offset(i64_at(18)),
                last_stable_offset: Offset(i64_at(26)),
            };
            let ordered = index
                .entries
                .last()
                .is_none_or(|l| l.last_offset < txn.last_offset);
            if !ordered
                || txn.producer_id < 0
                || txn.first_offset.0 < 0
                || txn.first_offset > txn.last_offset
                || txn.last_offset < base_offset
                || txn.last_offset >= next_offset
                || txn.last_stable_offset.0 < 0
                || txn.last_stable_offset.0 > txn.last_offset.0 + 1
            {
                return None;
            }
            index.entries.push(txn);
        }
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn txn(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: Offset(first),
            last_offset: Offset(last),
            last_stable_offset: Offset(lso),
        }
    }

    fn sample() -> TxnIndex {
        let mut index = TxnIndex::default();
        index.push(txn(1, 90, 105, 100));
        index.push(txn(2, 100, 110, 111));
        index.push(txn(3, 112, 130, 120));
        index.push(txn(4, 120, 140, 141));
        index
    }

    #[test]
    fn entries_round_trip_in_kafkas_layout() {
        let index = sample();
        let bytes = index.encode();
        assert_eq!(bytes.len(), 4 * TXN_ENTRY_BYTES);
        assert_eq!(&bytes[..2], &[0, 0], "version 0");
        assert_eq!(&bytes[2..10], &1i64.to_be_bytes());
        assert_eq!(&bytes[10..18], &90i64.to_be_bytes());
        assert_eq!(&bytes[18..26], &105i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &100i64.to_be_bytes());
        assert_eq!(
            TxnIndex::decode(&bytes, Offset(100), Offset(150)),
            Some(index)
        );
        assert_eq!(
            TxnIndex::decode(&[], Offset(0), Offset(0)),
            Some(TxnIndex::default())
        );
    }

    #[test]
    fn inconsistent_files_are_refused() {
        let bytes = sample().encode();
        // Cut short, a marker past the segment's end or before its base, another version.
        assert_eq!(
            TxnIndex::decode(&bytes[..33], Offset(100), Offset(150)),
            None
        );
        assert_eq!(TxnIndex::decode(&bytes, Offset(100), Offset(140)), None);
        assert_eq!(TxnIndex::decode(&bytes, Offset(106), Offset(150)), None);
        let mut v1 = bytes.clone();
        v1[1] = 1;
        assert_eq!(TxnIndex::decode(&v1, Offset(100), Offset(150)), None);
        // Out of order.
        let mut swapped = bytes[TXN_ENTRY_BYTES..2 * TXN_ENTRY_BYTES].to_vec();
        swapped.extend_from_slice(&bytes[..TXN_ENTRY_BYTES]);
        assert_eq!(TxnIndex::decode(&swapped, Offset(100), Offset(150)), None);
    }

    #[test]
    fn collect_finds_the_transactions_meeting_a_range() {
        let index = sample();
        let found = |from: i64, upto: i64| {
            let mut out = Vec::new();
            let complete = index.collect(Offset(from), Offset(upto), &mut out);
            (
                out.iter().map(|t| t.producer_id).collect::<Vec<_>>(),
                complete,
            )
        };
        assert_eq!(found(0, 90), (vec![], true), "before every transaction");
        assert_eq!(found(0, 91), (vec![1], true));
        assert_eq!(found(106, 112), (vec![2], true), "txn 1 ended at 105");
        assert_eq!(
            found(131, 200),
            (vec![4], false),
            "the next segment may hold more"
        );
        assert_eq!(found(100, 121), (vec![1, 2, 3, 4], true));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Some(index) = TxnIndex::decode(&bytes, Offset(0), Offset(i64::MAX)) {
                prop_assert_eq!(index.encode(), bytes);
            }
        }
    }
}
