//! Kafka's ACL model and its authorization rule, as `StandardAuthorizer` applies it.
//!
//! An ACL allows or denies one principal (`User:alice`, or `User:*` for all), from one host
//! (`*` or an address), one operation on the resources one pattern names: a LITERAL name
//! (`*` is every name of the type) or a PREFIXED one. To authorize an operation on a resource:
//! a super user is allowed; otherwise among the ACLs whose pattern matches the resource, a
//! matching DENY wins, then a matching ALLOW; if no ACL at all names the resource, the answer
//! is `allow.everyone.if.no.acl.found` (false by default), else deny. An ALLOW of READ, WRITE,
//! DELETE or ALTER implies DESCRIBE, and of ALTER_CONFIGS implies DESCRIBE_CONFIGS; a DENY
//! implies nothing; ALL matches every operation.
//!
//! The codes are Kafka's wire codes (CreateAcls, DescribeAcls, DeleteAcls).

use std::collections::{HashMap, HashSet};

/// `ResourceType` of Kafka's ACL requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Any,
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub fn from_code(code: i8) -> Option<ResourceType> {
        Some(match code {
            1 => ResourceType::Any,
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            6 => ResourceType::DelegationToken,
            7 => ResourceType::User,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Any => 1,
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }
}

/// `PatternType`: LITERAL and PREFIXED name ACLs; ANY and MATCH only filter them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatternType {
    Any,
    Match,
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn from_code(code: i8) -> Option<PatternType> {
        Some(match code {
            1 => PatternType::Any,
            2 => PatternType::Match,
            3 => PatternType::Literal,
            4 => PatternType::Prefixed,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        match self {
            PatternType::Any => 1,
            PatternType::Match => 2,
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }
}

/// `AclOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Any,
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

impl Operation {
    /// The operations an ACL or a check can name (not ANY).
    pub const CONCRETE: [Operation; 13] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
    ];

    pub fn from_code(code: i8) -> Option<Operation> {
        Some(match code {
            1 => Operation::Any,
            2 => Operation::All,
            3 => Operation::Read,
            4 => Operation::Write,
            5 => Operation::Create,
            6 => Operation::Delete,
            7 => Operation::Alter,
            8 => Operation::Describe,
            9 => Operation::ClusterAction,
            10 => Operation::DescribeConfigs,
            11 => Operation::AlterConfigs,
            12 => Operation::IdempotentWrite,
            13 => Operation::CreateTokens,
            14 => Operation::DescribeTokens,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        match self {
            Operation::Any => 1,
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
        }
    }

    /// Whether an ALLOW of `self` allows `wanted` (ALL, the operation itself, or an implied
    /// DESCRIBE or DESCRIBE_CONFIGS).
    fn allows(self, wanted: Operation) -> bool {
        self == Operation::All
            || self == wanted
            || (wanted == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (wanted == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY of `self` denies `wanted`: ALL or the operation itself, nothing implied.
    fn denies(self, wanted: Operation) -> bool {
        self == Operation::All || self == wanted
    }
}

/// `AclPermissionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    Any,
    Deny,
    Allow,
}

impl Permission {
    pub fn from_code(code: i8) -> Option<Permission> {
        Some(match code {
            1 => Permission::Any,
            2 => Permission::Deny,
            3 => Permission::Allow,
            _ => return None,
        })
    }

    pub fn code(self) -> i8 {
        match self {
            Permission::Any => 1,
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }
}

/// The name and host that match every name and host.
pub const WILDCARD: &str = "*";
/// The principal every principal matches.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// One ACL binding, as CreateAcls carries it and the metadata log stores it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl Acl {
    /// Checks what CreateAcls may store (Kafka answers anything else INVALID_REQUEST):
    /// a concrete resource type, a LITERAL or PREFIXED pattern with a non-empty name (the
    /// cluster's is `kafka-cluster`), a `Type:name` principal, a host, a concrete operation
    /// and permission.
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_type == ResourceType::Any {
            return Err("the resource type must be concrete, not ANY".into());
        }
        if !matches!(self.pattern, PatternType::Literal | PatternType::Prefixed) {
            return Err("the pattern type must be LITERAL or PREFIXED".into());
        }
        if self.name.is_empty() {
            return Err("the resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster
            && !(self.pattern == PatternType::Literal && self.name == CLUSTER_NAME)
        {
            return Err(format!(
                "a cluster ACL's resource is the literal {CLUSTER_NAME}"
            ));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(format!(
                    "principal {:?} is not of the form Type:name",
                    self.principal
                ))
            }
        }
        if self.host.is_empty() {
            return Err("the host must be * or an address".into());
        }
        if self.operation == Operation::Any {
            return Err("the operation must be concrete, not ANY".into());
        }
        if self.permission == Permission::Any {
            return Err("the permission must be ALLOW or DENY".into());
        }
        Ok(())
    }

    fn names(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.name == name || self.name == WILDCARD,
            PatternType::Prefixed => name.starts_with(&self.name),
            PatternType::Any | PatternType::Match => false,
        }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == WILDCARD || self.host == host)
    }
}

/// The cluster resource's name in Kafka's ACLs.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// What DescribeAcls and DeleteAcls select: `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Kafka's `AclBindingFilter.matches`: ANY matches every value; a MATCH pattern with a
    /// name selects the ACLs that would apply to a resource of that name (the literal name,
    /// the literal `*`, and the prefixes of the name).
    pub fn matches(&self, acl: &Acl) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != acl.resource_type {
            return false;
        }
        if !matches!(self.pattern, PatternType::Any | PatternType::Match)
            && self.pattern != acl.pattern
        {
            return false;
        }
        if let Some(name) = &self.name {
            let hit = if self.pattern == PatternType::Match {
                acl.names(name)
            } else {
                *name == acl.name
            };
            if !hit {
                return false;
            }
        }
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == Operation::Any || self.operation == acl.operation)
            && (self.permission == Permission::Any || self.permission == acl.permission)
    }
}

/// Why a check was answered as it was (for the audit log and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    SuperUser,
    Allowed,
    Denied,
    /// No ACL names the resource: `allow.everyone.if.no.acl.found` decided.
    NoAcls(bool),
    /// ACLs name the resource, but none allows this principal, host and operation.
    NoMatchingAllow,
}

impl Decision {
    pub fn allowed(self) -> bool {
        matches!(
            self,
            Decision::SuperUser | Decision::Allowed | Decision::NoAcls(true)
        )
    }
}

/// The ACLs of a broker's metadata image, indexed for checks: per resource type, literal ACLs
/// by name, the literal `*` ones, and the prefixed ones. Built once per ACL change and read
/// without locks by every shard.
#[derive(Debug, Default, Clone)]
pub struct AclIndex {
    literal: HashMap<(ResourceType, String), Vec<Acl>>,
    wildcard: HashMap<ResourceType, Vec<Acl>>,
    prefixed: HashMap<ResourceType, Vec<Acl>>,
    count: usize,
}

impl AclIndex {
    pub fn new<'a>(acls: impl IntoIterator<Item = &'a Acl>) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in acls {
            index.count += 1;
            let acl = acl.clone();
            match acl.pattern {
                PatternType::Literal if acl.name == WILDCARD => index
                    .wildcard
                    .entry(acl.resource_type)
                    .or_default()
                    .push(acl),
                PatternType::Literal => index
                    .literal
                    .entry((acl.resource_type, acl.name.clone()))
                    .or_default()
                    .push(acl),
                PatternType::Prefixed => index
                    .prefixed
                    .entry(acl.resource_type)
                    .or_default()
                    .push(acl),
                PatternType::Any | PatternType::Match => {}
            }
        }
        index
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The ACLs whose pattern names this resource.
    fn naming<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Acl> + 'a {
        let literal = self
            .literal
            .get(&(resource_type, name.to_string()))
            .into_iter()
            .flatten();
        let wildcard = self.wildcard.get(&resource_type).into_iter().flatten();
        let prefixed = self
            .prefixed
            .get(&resource_type)
            .into_iter()
            .flatten()
            .filter(move |a| name.starts_with(&a.name));
        literal.chain(wildcard).chain(prefixed)
    }
}

/// The authorizer's settings and its ACLs.
#[derive(Debug, Default, Clone)]
pub struct Authorizer {
    pub index: AclIndex,
    /// `super.users`: principals allowed everything.
    pub super_users: HashSet<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

impl Authorizer {
    /// May `principal`, connected from `host`, do `operation` on the resource?
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        if self.super_users.contains(principal) {
            return Decision::SuperUser;
        }
        let mut named = false;
        let mut allowed = false;
        for acl in self.index.naming(resource_type, name) {
            named = true;
            if !acl.applies_to(principal, host) {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation.denies(operation) => return Decision::Denied,
                Permission::Allow if acl.operation.allows(operation) => allowed = true,
                _ => {}
            }
        }
        if allowed {
            Decision::Allowed
        } else if !named {
            Decision::NoAcls(self.allow_if_no_acl)
        } else {
            Decision::NoMatchingAllow
        }
    }

    /// May `principal` do `operation` on some resource of the type, named or not yet (Kafka's
    /// `authorizeByResourceType`, KIP-679: an idempotent producer needs WRITE on any topic)?
    /// A `*` DENY refuses; an ALLOW whose pattern no DENY covers (a literal DENY of the same
    /// name, a prefixed DENY of a prefix of it) allows; with no ACL of the type at all,
    /// `allow.everyone.if.no.acl.found` decides.
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.super_users.contains(principal) {
            return true;
        }
        let of_type: Vec<&Acl> = self
            .index
            .literal
            .iter()
            .filter(|((rt, _), _)| *rt == resource_type)
            .flat_map(|(_, acls)| acls)
            .chain(
                self.index
                    .wildcard
                    .get(&resource_type)
                    .into_iter()
                    .flatten(),
            )
            .chain(
                self.index
                    .prefixed
                    .get(&resource_type)
                    .into_iter()
                    .flatten(),
            )
            .collect();
        if of_type.is_empty() {
            return self.allow_if_no_acl;
        }
        let mine: Vec<&Acl> = of_type
            .into_iter()
            .filter(|a| a.applies_to(principal, host))
            .collect();
        let denies: Vec<&Acl> = mine
            .iter()
            .copied()
            .filter(|a| a.permission == Permission::Deny && a.operation.denies(operation))
            .collect();
        if denies
            .iter()
            .any(|d| d.pattern == PatternType::Literal && d.name == WILDCARD)
        {
            return false;
        }
        mine.iter()
            .filter(|a| a.permission == Permission::Allow && a.operation.allows(operation))
            .any(|allow| {
                !denies.iter().any(|d| match d.pattern {
                    PatternType::Prefixed => allow.name.starts_with(&d.name),
                    _ => allow.pattern == PatternType::Literal && allow.name == d.name,
                })
            })
    }

    /// An `authorized_operations` field: bit `code` set for each of `candidates` allowed.
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        name: &str,
        candidates: &[Operation],
    ) -> i32 {
        candidates
            .iter()
            .filter(|op| {
                self.authorize(principal, host, **op, resource_type, name)
                    .allowed()
            })
            .fold(0i32, |bits, op| bits | (1 << op.code()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        rt: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        host: &str,
        op: Operation,
        perm: Permission,
    ) -> Acl {
        Acl {
            resource_type: rt,
            name: name.into(),
            pattern,
            principal: principal.into(),
            host: host.into(),
            operation: op,
            permission: perm,
        }
    }

    fn topic_allow(name: &str, pattern: PatternType, principal: &str, op: Operation) -> Acl {
        acl(
            ResourceType::Topic,
            name,
            pattern,
            principal,
            "*",
            op,
            Permission::Allow,
        )
    }

    #[test]
    fn authorize_any_finds_an_allow_no_deny_covers() {
        let w = Operation::Write;
        let deny = |name: &str, pattern| Acl {
            permission: Permission::Deny,
            ..topic_allow(name, pattern, "User:bob", w)
        };
        let any = |acls: &[Acl], allow_if_none: bool| {
            let mut a = authorizer(acls);
            a.allow_if_no_acl = allow_if_none;
            a.authorize_any("User:bob", "10.0.0.1", w, ResourceType::Topic)
        };
        // No topic ACL at all: the setting decides.
        assert!(!any(&[], false));
        assert!(any(&[], true));
        // A prefixed ALLOW is enough, even for topics that do not exist yet.
        assert!(any(
            &[topic_allow("logs-", PatternType::Prefixed, "User:bob", w)],
            false
        ));
        // Someone else's ALLOW is not.
        assert!(!any(
            &[topic_allow("t", PatternType::Literal, "User:eve", w)],
            true
        ));
        // A DENY that covers the ALLOW refuses; one that does not, does not.
        let allow = topic_allow("logs-a", PatternType::Literal, "User:bob", w);
        assert!(!any(
            &[allow.clone(), deny("logs-", PatternType::Prefixed)],
            false
        ));
        assert!(!any(
            &[allow.clone(), deny("logs-a", PatternType::Literal)],
            false
        ));
        assert!(any(
            &[allow.clone(), deny("other", PatternType::Literal)],
            false
        ));
        // A `*` DENY refuses everything.
        assert!(!any(&[allow, deny("*", PatternType::Literal)], false));
        // Super users may.
        let mut su = authorizer(&[]);
        su.super_users.insert("User:bob".into());
        assert!(su.authorize_any("User:bob", "h", w, ResourceType::Topic));
    }

    fn authorizer(acls: &[Acl]) -> Authorizer {
        Authorizer {
            index: AclIndex::new(acls),
            super_users: ["User:admin".to_string()].into(),
            allow_if_no_acl: false,
        }
    }

    use Operation::*;
    use PatternType::{Literal, Prefixed};
    use ResourceType::Topic;

    #[test]
    fn allow_deny_prefix_wildcard_and_super_users() {
        let a = authorizer(&[
            topic_allow("orders", Literal, "User:reader", Read),
            topic_allow("logs-", Prefixed, "User:writer", Write),
            topic_allow("*", Literal, "User:ops", Describe),
            acl(
                Topic,
                "logs-secret",
                Literal,
                "User:writer",
                "*",
                Write,
                Permission::Deny,
            ),
            acl(
                Topic,
                "orders",
                Literal,
                "User:*",
                "10.0.0.9",
                All,
                Permission::Deny,
            ),
        ]);
        let check = |p: &str, op, name: &str| a.authorize(p, "127.0.0.1", op, Topic, name);
        assert_eq!(check("User:reader", Read, "orders"), Decision::Allowed);
        // READ implies DESCRIBE for an ALLOW; it does not allow WRITE.
        assert_eq!(check("User:reader", Describe, "orders"), Decision::Allowed);
        assert_eq!(
            check("User:reader", Write, "orders"),
            Decision::NoMatchingAllow
        );
        // Prefixed: logs-a matches, logs does not (only the literal * names it), and the
        // literal DENY beats the prefix ALLOW.
        assert_eq!(check("User:writer", Write, "logs-a"), Decision::Allowed);
        assert_eq!(
            check("User:writer", Write, "logs"),
            Decision::NoMatchingAllow
        );
        assert_eq!(check("User:writer", Write, "logs-secret"), Decision::Denied);
        // The literal * names every topic: any topic now has ACLs, so no default applies.
        assert_eq!(check("User:ops", Describe, "anything"), Decision::Allowed);
        assert_eq!(
            check("User:ops", Read, "anything"),
            Decision::NoMatchingAllow
        );
        // Host-bound DENY for everyone (User:*), ALL: only from that host.
        assert_eq!(
            a.authorize("User:reader", "10.0.0.9", Read, Topic, "orders"),
            Decision::Denied
        );
        // Super users skip everything, DENY included.
        assert_eq!(
            a.authorize("User:admin", "10.0.0.9", Read, Topic, "orders"),
            Decision::SuperUser
        );
        // Other resource types are separate.
        assert_eq!(
            a.authorize("User:reader", "h", Read, ResourceType::Group, "orders"),
            Decision::NoAcls(false)
        );
    }

    #[test]
    fn a_deny_implies_nothing_and_alter_configs_implies_describe_configs() {
        let a = authorizer(&[
            acl(Topic, "t", Literal, "User:u", "*", Read, Permission::Deny),
            acl(
                Topic,
                "t",
                Literal,
                "User:u",
                "*",
                Describe,
                Permission::Allow,
            ),
            acl(
                Topic,
                "c",
                Literal,
                "User:u",
                "*",
                AlterConfigs,
                Permission::Allow,
            ),
        ]);
        assert_eq!(
            a.authorize("User:u", "h", Read, Topic, "t"),
            Decision::Denied
        );
        assert_eq!(
            a.authorize("User:u", "h", Describe, Topic, "t"),
            Decision::Allowed
        );
        assert_eq!(
            a.authorize("User:u", "h", DescribeConfigs, Topic, "c"),
            Decision::Allowed
        );
        assert_eq!(
            a.authorize("User:u", "h", Describe, Topic, "c"),
            Decision::NoMatchingAllow
        );
    }

    #[test]
    fn the_no_acl_default_is_allow_everyone_if_no_acl_found() {
        let mut a = authorizer(&[topic_allow("a", Literal, "User:x", Read)]);
        assert!(!a.authorize("User:y", "h", Read, Topic, "b").allowed());
        a.allow_if_no_acl = true;
        assert!(a.authorize("User:y", "h", Read, Topic, "b").allowed());
        // Only where no ACL names the resource: topic a has one, for another principal.
        assert!(!a.authorize("User:y", "h", Read, Topic, "a").allowed());
    }

    #[test]
    fn authorized_operations_sets_one_bit_per_allowed_operation() {
        let a = authorizer(&[topic_allow("t", Literal, "User:u", Write)]);
        let bits = a.authorized_operations(
            "User:u",
            "h",
            Topic,
            "t",
            &[Read, Write, Describe, DescribeConfigs],
        );
        assert_eq!(bits, (1 << Write.code()) | (1 << Describe.code()));
    }

    #[test]
    fn filters_select_as_kafka_selects() {
        let lit = topic_allow("orders", Literal, "User:a", Read);
        let star = topic_allow("*", Literal, "User:a", Read);
        let pre = topic_allow("ord", Prefixed, "User:b", Write);
        let other = topic_allow("x", Literal, "User:a", Read);
        let filter = |pattern, name: Option<&str>| AclFilter {
            resource_type: ResourceType::Any,
            name: name.map(String::from),
            pattern,
            principal: None,
            host: None,
            operation: Any,
            permission: Permission::Any,
        };
        let pick = |f: &AclFilter| {
            [&lit, &star, &pre, &other]
                .iter()
                .filter(|a| f.matches(a))
                .map(|a| a.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(&filter(PatternType::Any, None)).len(), 4);
        assert_eq!(
            pick(&filter(PatternType::Any, Some("orders"))),
            vec!["orders"]
        );
        assert_eq!(
            pick(&filter(PatternType::Match, Some("orders"))),
            vec!["orders", "*", "ord"]
        );
        assert_eq!(pick(&filter(Prefixed, None)), vec!["ord"]);
        assert_eq!(pick(&filter(Literal, Some("ord"))), Vec::<String>::new());
        let mut by_principal = filter(PatternType::Any, None);
        by_principal.principal = Some("User:b".into());
        assert_eq!(pick(&by_principal), vec!["ord"]);
        let mut by_op = filter(PatternType::Any, None);
        by_op.operation = Read;
        by_op.permission = Permission::Allow;
        assert_eq!(pick(&by_op), vec!["orders", "*", "x"]);
    }

    #[test]
    fn only_concrete_bindings_are_stored() {
        let good = topic_allow("t", Literal, "User:u", Read);
        assert_eq!(good.validate(), Ok(()));
        let cluster = acl(
            ResourceType::Cluster,
            CLUSTER_NAME,
            Literal,
            "User:u",
            "*",
            ClusterAction,
            Permission::Allow,
        );
        assert_eq!(cluster.validate(), Ok(()));
        let bad = [
            Acl {
                resource_type: ResourceType::Any,
                ..good.clone()
            },
            Acl {
                pattern: PatternType::Match,
                ..good.clone()
            },
            Acl {
                pattern: PatternType::Any,
                ..good.clone()
            },
            Acl {
                name: String::new(),
                ..good.clone()
            },
            Acl {
                principal: "alice".into(),
                ..good.clone()
            },
            Acl {
                principal: "User:".into(),
                ..good.clone()
            },
            Acl {
                host: String::new(),
                ..good.clone()
            },
            Acl {
                operation: Any,
                ..good.clone()
            },
            Acl {
                permission: Permission::Any,
                ..good.clone()
            },
            Acl {
                name: "other".into(),
                ..cluster.clone()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
    }

    #[test]
    fn codes_round_trip() {
        for code in 1..=7 {
            assert_eq!(ResourceType::from_code(code).map(|r| r.code()), Some(code));
        }
        for code in 1..=4 {
            assert_eq!(PatternType::from_code(code).map(|r| r.code()), Some(code));
        }
        for code in 1..=14 {
            assert_eq!(Operation::from_code(code).map(|r| r.code()), Some(code));
        }
        for code in 1..=3 {
            assert_eq!(Permission::from_code(code).map(|r| r.code()), Some(code));
        }
        assert_eq!(Operation::from_code(0), None);
        assert_eq!(ResourceType::from_code(8), None);
        assert_eq!(Operation::CONCRETE.len(), 13);
    }
}
