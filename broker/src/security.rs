//! Who a connection is ([`Session`]), and users and ACLs as the admin requests manage them
//! (issue 19): conversions between Kafka's wire codes, the metadata records
//! (`keel_raft::AclEntry`) and keel-auth's model, and the checks Kafka makes before anything
//! is proposed.

use std::collections::HashMap;
use std::rc::Rc;

pub use crate::acl::acl_of;

use keel_auth::acl::{AclFilter, Operation, PatternType, Permission, ResourceType};
use keel_raft::records::AclEntry;

/// The principal of a connection that did not authenticate (a PLAINTEXT listener's).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One connection's identity, as every request on it is handled and authorized.
#[derive(Debug, Clone)]
pub struct Session {
    /// `User:<name>` once SASL authenticated the connection, else [`ANONYMOUS`].
    pub principal: Rc<str>,
    /// The client's IP address as ACL hosts name it ("127.0.0.1").
    pub host: Rc<str>,
    /// The client's address as Kafka shows it to group members ("/127.0.0.1").
    pub client_host: Rc<str>,
    /// The listener the connection came in on.
    pub listener: Rc<str>,
    /// The client quotas that apply to it, and its mute (see [`crate::quota`]).
    pub quota: Rc<crate::quota::ConnQuota>,
    /// Its recent authorization decisions (see [`AuthzCache`]).
    pub authz_cache: Rc<AuthzCache>,
}

/// Decisions cached per (operation, resource type, name) before this many are dropped.
const AUTHZ_CACHE_MAX: usize = 512;

/// A connection's recent authorization decisions, valid for one authorizer: the shard builds a
/// new one when an image changes the ACLs, so a decision is never older than the ACLs it was
/// made from. Requests of one client ask the same few questions again and again (may it
/// WRITE this topic); an answer from here costs one lookup, not a walk of the ACLs that name
/// the resource and its prefixes.
#[derive(Default)]
pub struct AuthzCache {
    inner: std::cell::RefCell<CachedDecisions>,
}

#[derive(Default)]
struct CachedDecisions {
    authorizer: Option<Rc<keel_auth::acl::Authorizer>>,
    decisions: HashMap<(Operation, ResourceType), HashMap<Box<str>, bool>>,
    len: usize,
}

impl std::fmt::Debug for AuthzCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthzCache")
            .field("len", &self.inner.borrow().len)
            .finish()
    }
}

impl AuthzCache {
    /// `decide`'s answer for the question, from the cache when `authorizer` made it.
    fn get_or(
        &self,
        authorizer: &Rc<keel_auth::acl::Authorizer>,
        key: (Operation, ResourceType),
        name: &str,
        decide: impl FnOnce() -> bool,
    ) -> bool {
        let mut c = self.inner.borrow_mut();
        if !c
            .authorizer
            .as_ref()
            .is_some_and(|a| Rc::ptr_eq(a, authorizer))
        {
            *c = CachedDecisions {
                authorizer: Some(authorizer.clone()),
                ..CachedDecisions::default()
            };
        }
        if let Some(d) = c.decisions.get(&key).and_then(|m| m.get(name)) {
            return *d;
        }
        let d = decide();
        if c.len >= AUTHZ_CACHE_MAX {
            c.decisions.clear();
            c.len = 0;
        }
        c.len += 1;
        c.decisions.entry(key).or_default().insert(name.into(), d);
        d
    }
}

/// One request's authorization: the shard's authorizer (none: every operation is allowed, as
/// in Kafka without an authorizer) and the session's principal and host.
pub struct Authz<'a> {
    authorizer: Option<Rc<keel_auth::acl::Authorizer>>,
    session: &'a Session,
}

impl<'a> Authz<'a> {
    pub fn of(shard: &crate::shard::BrokerShard, session: &'a Session) -> Authz<'a> {
        Authz {
            authorizer: shard.authorizer(),
            session,
        }
    }

    /// Whether an authorizer is configured.
    pub fn enforced(&self) -> bool {
        self.authorizer.is_some()
    }

    /// May the session do `op` on the resource?
    pub fn allows(&self, op: Operation, resource_type: ResourceType, name: &str) -> bool {
        match &self.authorizer {
            None => true,
            Some(a) => self
                .session
                .authz_cache
                .get_or(a, (op, resource_type), name, || {
                    a.authorize(
                        &self.session.principal,
                        &self.session.host,
                        op,
                        resource_type,
                        name,
                    )
                    .allowed()
                }),
        }
    }

    /// May the session do `op` on some resource of the type, existing or not (Kafka's
    /// `authorizeByResourceType`)?
    pub fn any(&self, op: Operation, resource_type: ResourceType) -> bool {
        match &self.authorizer {
            None => true,
            Some(a) => a.authorize_any(
                &self.session.principal,
                &self.session.host,
                op,
                resource_type,
            ),
        }
    }

    /// May the session do `op` on the cluster?
    pub fn cluster(&self, op: Operation) -> bool {
        self.allows(op, ResourceType::Cluster, keel_auth::acl::CLUSTER_NAME)
    }

    pub fn topic(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Topic, name)
    }

    pub fn group(&self, op: Operation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn transactional_id(&self, op: Operation, id: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, id)
    }

    /// An `authorized_operations` field for the resource: the bits of `candidates` allowed
    /// (all of them without an authorizer).
    pub fn operations(
        &self,
        resource_type: ResourceType,
        name: &str,
        candidates: &[Operation],
    ) -> i32 {
        match &self.authorizer {
            None => candidates
                .iter()
                .fold(0, |bits, op| bits | (1 << op.code())),
            Some(a) => a.authorized_operations(
                &self.session.principal,
                &self.session.host,
                resource_type,
                name,
                candidates,
            ),
        }
    }
}

/// Why an ACL request (CreateAcls, DescribeAcls, DeleteAcls) is refused, if it is: as in
/// Kafka, SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without `op`
/// (ALTER to change, DESCRIBE to read) on the cluster.
pub fn acl_admin_refusal(
    shard: &crate::shard::BrokerShard,
    session: &Session,
    op: Operation,
) -> Option<(kafka_protocol::ResponseError, String)> {
    let authz = Authz::of(shard, session);
    if !authz.enforced() {
        return Some((
            kafka_protocol::ResponseError::SecurityDisabled,
            "No Authorizer is configured (authorizer.class.name)".to_string(),
        ));
    }
    (!authz.cluster(op)).then(|| {
        (
            kafka_protocol::ResponseError::ClusterAuthorizationFailed,
            format!("{} may not {op:?} the cluster's ACLs", session.principal),
        )
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

    fn session() -> Session {
        Session {
            principal: "User:alice".into(),
            host: "127.0.0.1".into(),
            client_host: "/127.0.0.1".into(),
            listener: "PLAINTEXT".into(),
            quota: Default::default(),
            authz_cache: Default::default(),
        }
    }

    fn authorizer(acls: &[keel_auth::acl::Acl]) -> Rc<keel_auth::acl::Authorizer> {
        Rc::new(keel_auth::acl::Authorizer {
            index: keel_auth::acl::AclIndex::new(acls),
            super_users: Default::default(),
            allow_if_no_acl: false,
        })
    }

    /// A decision is reused while the authorizer is the same, and made again from a new one
    /// (new ACLs): a revoked permission is never answered from the cache.
    #[test]
    fn cached_decisions_last_as_long_as_their_authorizer() {
        let s = session();
        let read_orders =
            acl_of(&new_acl(2, "orders", 3, "User:alice", "*", 3, 3).unwrap()).unwrap();
        let with = authorizer(std::slice::from_ref(&read_orders));
        let mut asked = 0;
        let mut ask = |a: &Rc<keel_auth::acl::Authorizer>| {
            s.authz_cache
                .get_or(a, (Operation::Read, ResourceType::Topic), "orders", || {
                    asked += 1;
                    a.authorize(
                        "User:alice",
                        "127.0.0.1",
                        Operation::Read,
                        ResourceType::Topic,
                        "orders",
                    )
                    .allowed()
                })
        };
        assert!(ask(&with));
        assert!(ask(&with));
        let without = authorizer(&[]);
        assert!(!ask(&without), "the ACL is gone");
        assert_eq!(asked, 2, "one decision per authorizer");
        // Past the bound the cache starts over rather than grow.
        for i in 0..AUTHZ_CACHE_MAX + 10 {
            s.authz_cache.get_or(
                &without,
                (Operation::Write, ResourceType::Topic),
                &i.to_string(),
                || false,
            );
        }
        assert!(s.authz_cache.inner.borrow().len <= AUTHZ_CACHE_MAX);
    }

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
