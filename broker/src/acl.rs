//! The `authorized_operations` that Metadata, DescribeCluster, DescribeGroups and
//! ConsumerGroupDescribe report when a client asks for them.
//!
//! Keel has no authorizer yet. Kafka without one lets every principal do everything, and
//! reports for a resource every operation valid for its type (`AclEntry.supportedOperations`):
//! the same sets are reported here. When ACLs arrive, these become the ceiling that the
//! principal's allowed operations are intersected with. Runs on any shard; pure.

/// Kafka's `AclOperation` codes, as bit positions of `authorized_operations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AclOperation {
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
}

/// Kafka's value when the client did not ask (`Integer.MIN_VALUE`).
pub const OMITTED: i32 = i32::MIN;

const fn bits(operations: &[AclOperation]) -> i32 {
    let mut set = 0;
    let mut i = 0;
    while i < operations.len() {
        set |= 1 << operations[i] as u8;
        i += 1;
    }
    set
}

/// Every operation valid on the cluster (7).
pub const CLUSTER: i32 = bits(&[
    AclOperation::Create,
    AclOperation::ClusterAction,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
    AclOperation::IdempotentWrite,
    AclOperation::Alter,
    AclOperation::Describe,
]);

/// Every operation valid on a topic (8).
pub const TOPIC: i32 = bits(&[
    AclOperation::Read,
    AclOperation::Write,
    AclOperation::Create,
    AclOperation::Describe,
    AclOperation::Delete,
    AclOperation::Alter,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
]);

/// Every operation valid on a group (3).
pub const GROUP: i32 = bits(&[
    AclOperation::Read,
    AclOperation::Describe,
    AclOperation::Delete,
]);

/// `operations` when the client asked for them, else Kafka's "not asked" value.
pub fn reported(asked: bool, operations: i32) -> i32 {
    if asked {
        operations
    } else {
        OMITTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_match_kafka() {
        assert_eq!(CLUSTER.count_ones(), 7);
        assert_eq!(TOPIC.count_ones(), 8);
        assert_eq!(GROUP.count_ones(), 3);
        // Kafka's numbers for the same sets (AclOperation codes 3..=12).
        assert_eq!(CLUSTER, 0b1_1111_1010_0000);
        assert_eq!(TOPIC, 0b0_1101_1111_1000);
        assert_eq!(GROUP, 0b0_0001_0100_1000);
        assert_eq!(reported(false, TOPIC), i32::MIN);
    }
}
