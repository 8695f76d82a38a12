//! Sets of messages for `--verify` and the checker: (producer id, sequence) pairs as paged
//! bitsets (64 Ki sequences, 8 KiB, per page and producer), so a dense run of a billion
//! sequences costs about 125 MiB per set and each call is a hash lookup and a bit operation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// (topic index, partition).
pub type PartitionKey = (u32, i32);

/// log2 of the sequences covered by one bitset page.
const PAGE_BITS_LOG2: u32 = 16;
const PAGE_WORDS: usize = 1 << (PAGE_BITS_LOG2 - 6);

/// A multiply-rotate hasher for small integer keys (the std SipHash would dominate the cost).
#[derive(Default, Clone, Copy)]
pub(crate) struct IntHasher {
    hash: u64,
}

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_i32(&mut self, n: i32) {
        self.write_u64(u64::from(n as u32));
    }

    fn write_u64(&mut self, n: u64) {
        self.hash = (self.hash.rotate_left(5) ^ n).wrapping_mul(0x517C_C1B7_2722_0A95);
    }
}

pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A set of (producer id, sequence), as bitset pages keyed by (producer, sequence >> 16).
#[derive(Clone, Debug, Default)]
pub struct MessageSet {
    pages: IntMap<(u32, u64), Box<[u64]>>,
    len: u64,
}

impl MessageSet {
    /// Adds a message; true when it was not there yet.
    #[inline]
    pub fn insert(&mut self, producer_id: u32, sequence: u64) -> bool {
        let page = self
            .pages
            .entry((producer_id, sequence >> PAGE_BITS_LOG2))
            .or_insert_with(new_page);
        let (word, bit) = word_and_bit(sequence);
        let fresh = page[word] & bit == 0;
        page[word] |= bit;
        self.len += u64::from(fresh);
        fresh
    }

    pub fn contains(&self, producer_id: u32, sequence: u64) -> bool {
        let (word, bit) = word_and_bit(sequence);
        self.pages
            .get(&(producer_id, sequence >> PAGE_BITS_LOG2))
            .is_some_and(|page| page[word] & bit != 0)
    }

    /// Number of distinct messages.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds every message of `other`; returns how many were already in `self`.
    pub fn union_with(&mut self, other: &MessageSet) -> u64 {
        let mut overlap = 0;
        for (key, theirs) in &other.pages {
            let ours = self.pages.entry(*key).or_insert_with(new_page);
            for (a, b) in ours.iter_mut().zip(theirs.iter()) {
                overlap += u64::from((*a & *b).count_ones());
                self.len += u64::from((*b & !*a).count_ones());
                *a |= *b;
            }
        }
        overlap
    }

    /// Every (producer id, sequence) in the set, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pages.iter().flat_map(|(&(producer, page), words)| {
            words.iter().enumerate().flat_map(move |(w, &word)| {
                let base = (page << PAGE_BITS_LOG2) + w as u64 * 64;
                (0..64)
                    .filter(move |bit| word & (1 << bit) != 0)
                    .map(move |bit| (producer, base + bit))
            })
        })
    }

    /// Number of messages in both sets.
    pub fn intersection_len(&self, other: &MessageSet) -> u64 {
        let (small, large) = if self.pages.len() <= other.pages.len() {
            (self, other)
        } else {
            (other, self)
        };
        small
            .pages
            .iter()
            .filter_map(|(key, a)| large.pages.get(key).map(|b| (a, b)))
            .map(|(a, b)| {
                a.iter()
                    .zip(b.iter())
                    .map(|(x, y)| u64::from((x & y).count_ones()))
                    .sum::<u64>()
            })
            .sum()
    }
}

fn new_page() -> Box<[u64]> {
    vec![0u64; PAGE_WORDS].into_boxed_slice()
}

#[inline]
fn word_and_bit(sequence: u64) -> (usize, u64) {
    let in_page = (sequence & ((1 << PAGE_BITS_LOG2) - 1)) as usize;
    (in_page / 64, 1u64 << (in_page % 64))
}
