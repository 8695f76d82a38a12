//! Identifiers of Kafka's data model.

/// A topic's id (a UUID), as the wire and the metadata log carry it.
pub type TopicId = [u8; 16];

/// One partition of a topic, by name (Kafka's `TopicPartition`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

/// One partition of a topic, by topic id (as KIP-848 assignments name partitions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicIdPartition {
    pub topic_id: TopicId,
    pub partition: i32,
}

/// An offset in a partition's log (Kafka `long offset`). Ranges over offsets are written
/// `[start, end)` and say so (e.g. `log_end_offset` is exclusive: the next offset to assign).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub i64);

/// A byte position in a segment file (Kafka's `physicalPosition`), where a batch starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BytePosition(pub u64);

/// A leader epoch (Kafka `partitionLeaderEpoch`): the term of the leader that appended a batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LeaderEpoch(pub i32);

/// A producer id (Kafka `producerId`); -1 is none.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerId(pub i64);

impl ProducerId {
    pub const NONE: ProducerId = ProducerId(-1);
}

/// A producer epoch (Kafka `producerEpoch`); -1 is none.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerEpoch(pub i16);

impl ProducerEpoch {
    pub const NONE: ProducerEpoch = ProducerEpoch(-1);
}
