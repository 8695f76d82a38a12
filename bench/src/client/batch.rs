//! An idempotent producer's per-partition sequence numbers. The record-batch codec itself is
//! keel-vocab's (`keel_vocab::records`).

use keel_vocab::records::increment_sequence as next_sequence;

/// Per-partition sequence numbers of an idempotent producer: each batch takes the next
/// sequence as its base and advances it by its record count, wrapping past `i32::MAX` to 0
/// as Kafka does. A retried batch keeps the base it was given (it is not taken again).
#[derive(Clone, Debug, Default)]
pub struct Sequences {
    next: Vec<i32>,
}

impl Sequences {
    pub fn new(partitions: usize) -> Self {
        Sequences {
            next: vec![0; partitions],
        }
    }

    /// The base sequence for a batch of `count` records to `partition`; advances it.
    pub fn take(&mut self, partition: usize, count: i32) -> i32 {
        if partition >= self.next.len() {
            self.next.resize(partition + 1, 0);
        }
        let base = self.next[partition];
        self.next[partition] = next_sequence(base, count);
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_advance_per_partition_by_record_count_and_wrap() {
        let mut s = Sequences::new(2);
        assert_eq!(s.take(0, 5), 0);
        assert_eq!(s.take(0, 3), 5);
        assert_eq!(s.take(1, 4), 0);
        assert_eq!(s.take(0, 1), 8);
        assert_eq!(s.take(1, 1), 4);
        // A partition beyond the initial count grows the table.
        assert_eq!(s.take(3, 2), 0);
        assert_eq!(s.take(3, 2), 2);
        // Kafka wraps past i32::MAX to 0.
        assert_eq!(next_sequence(i32::MAX - 2, 2), i32::MAX);
        assert_eq!(next_sequence(i32::MAX - 2, 3), 0);
        assert_eq!(next_sequence(i32::MAX, 5), 4);
        let mut s = Sequences::new(1);
        s.next[0] = i32::MAX - 1;
        assert_eq!(s.take(0, 10), i32::MAX - 1);
        assert_eq!(s.take(0, 1), 8);
    }
}
