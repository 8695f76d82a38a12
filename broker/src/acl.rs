//! The `authorized_operations` that Metadata, DescribeCluster, DescribeGroups and
//! ConsumerGroupDescribe report when a client asks for them.
//!
//! Kafka without an authorizer lets every principal do everything, and reports for a resource
//! every operation valid for its type (`AclEntry.supportedOperations`): the same sets are here,
//! as bits and as lists. With an authorizer, the list is what is checked, and the bits of the
//! allowed operations are reported (`security::Authz::operations`). Also the conversion of a
//! stored ACL record to keel-auth's model, which each shard's authorizer index is built from.
//! Runs on any shard; pure.

use keel_auth::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use keel_raft::records::AclEntry;

/// Every operation valid on the cluster, as [`CLUSTER`]'s bits.
pub const CLUSTER_OPERATIONS: &[Operation] = &[
    Operation::Create,
    Operation::ClusterAction,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
    Operation::IdempotentWrite,
    Operation::Alter,
    Operation::Describe,
];

/// Every operation valid on a topic, as [`TOPIC`]'s bits.
pub const TOPIC_OPERATIONS: &[Operation] = &[
    Operation::Read,
    Operation::Write,
    Operation::Create,
    Operation::Describe,
    Operation::Delete,
    Operation::Alter,
    Operation::DescribeConfigs,
    Operation::AlterConfigs,
];

/// Every operation valid on a group, as [`GROUP`]'s bits.
pub const GROUP_OPERATIONS: &[Operation] =
    &[Operation::Read, Operation::Describe, Operation::Delete];

/// The ACL an entry stores, `None` if a code is not one Kafka defines.
pub fn acl_of(e: &AclEntry) -> Option<Acl> {
    Some(Acl {
        resource_type: ResourceType::from_code(e.resource_type)?,
        name: e.resource_name.clone(),
        pattern: PatternType::from_code(e.pattern_type)?,
        principal: e.principal.clone(),
        host: e.host.clone(),
        operation: Operation::from_code(e.operation)?,
        permission: Permission::from_code(e.permission_type)?,
    })
}

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
        let bits_of = |ops: &[Operation]| ops.iter().fold(0i32, |b, op| b | (1 << op.code()));
        assert_eq!(bits_of(CLUSTER_OPERATIONS), CLUSTER);
        assert_eq!(bits_of(TOPIC_OPERATIONS), TOPIC);
        assert_eq!(bits_of(GROUP_OPERATIONS), GROUP);
    }
}
