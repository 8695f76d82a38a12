//! The coordinators' internal topics and how a key finds its partition there.
//!
//! Group `g` is coordinated by partition `abs(java_hashcode(g)) % partitions` of
//! `__consumer_offsets`, transactional id `t` by the same rule over `__transaction_state`
//! (Kafka's `Utils.abs(key.hashCode) % partitions`, in `GroupCoordinatorService.partitionFor`
//! and `TransactionStateManager.partitionFor`).

/// The internal topic that holds the groups' committed offsets and memberships.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The internal topic that holds the transactions' state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// Java's `String.hashCode()`: over UTF-16 code units, `h = 31 * h + c`, wrapping.
pub fn java_string_hashcode(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The internal-topic partition of `key` (a group id or a transactional id) among `partitions`:
/// Kafka's `Utils.abs(key.hashCode) % partitions` (`Utils.abs(i32::MIN)` is 0).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    assert!(partitions > 0, "an internal topic has no partitions");
    let h = java_string_hashcode(key);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions
}

#[cfg(test)]
#[path = "internal_topics_tests.rs"]
mod tests;
