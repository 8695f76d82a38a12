//! Users and ACLs as the admin requests manage them (issue 19): conversions between Kafka's
//! wire codes, the metadata records (`keel_raft::AclEntry`) and keel-auth's model, and the
//! checks Kafka makes before anything is proposed. Nothing is enforced yet: no listener
//! authenticates and no request is authorized; these are the stored users and ACLs that
//! SASL and the authorizer will read from each shard's image.

use keel_auth::acl::{Acl, AclFilter, Operation, PatternType, Permission, ResourceType};
use keel_raft::records::AclEntry;

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

/// A CreateAcls creation as a record entry, checked as Kafka checks it (INVALID_REQUEST
/// otherwise, with the reason).
pub fn new_acl(
    resource_type: i8,
    resource_name: &str,
    pattern_type: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission_type: i8,
) -> Result<AclEntry, String> {
    let entry = AclEntry {
        resource_type,
        resource_name: resource_name.to_string(),
        pattern_type,
        principal: principal.to_string(),
        host: host.to_string(),
        operation,
        permission_type,
    };
    let acl = acl_of(&entry).ok_or_else(|| {
        format!(
            "unknown code in the ACL binding (resource type {resource_type}, pattern type \
             {pattern_type}, operation {operation}, permission type {permission_type})"
        )
    })?;
    acl.validate()?;
    Ok(entry)
}

/// The filter of a DescribeAcls request or of one DeleteAcls filter (the two carry the same
/// seven fields under the same names): [`filter_of`] over them.
macro_rules! acl_filter_of {
    ($f:expr) => {
        $crate::security::filter_of(
            $f.resource_type_filter,
            $f.resource_name_filter.as_deref(),
            $f.pattern_type_filter,
            $f.principal_filter.as_deref(),
            $f.host_filter.as_deref(),
            $f.operation,
            $f.permission_type,
        )
    };
}
pub(crate) use acl_filter_of;

/// A DescribeAcls or DeleteAcls filter; Kafka refuses one with an unknown code
/// (INVALID_REQUEST).
pub fn filter_of(
    resource_type: i8,
    resource_name: Option<&str>,
    pattern_type: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission_type: i8,
) -> Result<AclFilter, String> {
    let unknown = |what: &str, code: i8| format!("the filter's {what} {code} is unknown");
    Ok(AclFilter {
        resource_type: ResourceType::from_code(resource_type)
            .ok_or_else(|| unknown("resource type", resource_type))?,
        name: resource_name.map(str::to_string),
        pattern: PatternType::from_code(pattern_type)
            .ok_or_else(|| unknown("pattern type", pattern_type))?,
        principal: principal.map(str::to_string),
        host: host.map(str::to_string),
        operation: Operation::from_code(operation)
            .ok_or_else(|| unknown("operation", operation))?,
        permission: Permission::from_code(permission_type)
            .ok_or_else(|| unknown("permission type", permission_type))?,
    })
}

/// Whether a stored entry matches a filter (an entry with codes this build does not know
/// matches nothing).
pub fn matches(filter: &AclFilter, entry: &AclEntry) -> bool {
    acl_of(entry).is_some_and(|acl| filter.matches(&acl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creations_and_filters_are_checked_like_kafka() {
        let e = new_acl(2, "orders", 3, "User:alice", "*", 3, 3).unwrap();
        assert_eq!(acl_of(&e).unwrap().operation, Operation::Read);
        // ANY resource type, MATCH pattern, an unknown operation, a bare principal.
        assert!(new_acl(1, "orders", 3, "User:a", "*", 3, 3).is_err());
        assert!(new_acl(2, "orders", 2, "User:a", "*", 3, 3).is_err());
        assert!(new_acl(2, "orders", 3, "User:a", "*", 99, 3).is_err());
        assert!(new_acl(2, "orders", 3, "alice", "*", 3, 3).is_err());
        let all = filter_of(1, None, 1, None, None, 1, 1).unwrap();
        assert!(matches(&all, &e));
        let by_name = filter_of(2, Some("orders-1"), 2, None, None, 1, 1).unwrap();
        assert!(
            !matches(&by_name, &e),
            "a LITERAL ACL on orders does not apply to orders-1"
        );
        assert!(filter_of(0, None, 1, None, None, 1, 1).is_err());
        assert!(filter_of(1, None, 9, None, None, 1, 1).is_err());
    }
}
