//! DescribeClientQuotas (key 48, v0-1): the client quotas of the installed image whose entity
//! matches the filter, as Kafka's `ClientQuotasImage.describe`: each component names an
//! entity type and matches one name (EXACT), the type's default entity (DEFAULT) or any
//! entity with that type (SPECIFIED); `strict` also refuses entities with other types. Needs
//! DESCRIBE_CONFIGS on the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    ApiKey, DescribeClientQuotasRequest, DescribeClientQuotasResponse, RequestHeader,
};
use kafka_protocol::ResponseError;
use keel_auth::acl::Operation;
use keel_raft::image::ClientQuotaInfo;

use super::{str_bytes, ApiSupport};
use crate::quota::{CLIENT_ID, USER};
use crate::security::{Authz, Session};
use crate::shard::BrokerShard;

pub const SUPPORT: ApiSupport = ApiSupport::new(ApiKey::DescribeClientQuotas, 0, 1);

const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// A parsed filter: an exact name (`None`: the default entity) by type, and types that must
/// be present with any name.
#[derive(Debug, Default, PartialEq)]
struct Filter {
    exact: BTreeMap<String, Option<String>>,
    any: BTreeSet<String>,
    strict: bool,
}

/// Kafka's checks of a filter, with its error for each.
fn filter_of(req: &DescribeClientQuotasRequest) -> Result<Filter, (ResponseError, String)> {
    let invalid = |m: String| (ResponseError::InvalidRequest, m);
    let mut f = Filter {
        strict: req.strict,
        ..Filter::default()
    };
    for c in &req.components {
        let t = c.entity_type.to_string();
        if t.is_empty() {
            return Err(invalid("Invalid empty entity type.".into()));
        }
        if f.exact.contains_key(&t) || f.any.contains(&t) {
            return Err(invalid(format!(
                "Entity type {t} cannot appear more than once in the filter."
            )));
        }
        if t != USER && t != CLIENT_ID && t != "ip" {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {t}"),
            ));
        }
        let name = c._match.as_ref().map(|m| m.to_string());
        match c.match_type {
            MATCH_EXACT => {
                let Some(name) = name else {
                    return Err(invalid(
                        "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                    ));
                };
                f.exact.insert(t, Some(name));
            }
            MATCH_DEFAULT | MATCH_SPECIFIED if name.is_some() => {
                return Err(invalid(format!(
                    "Request specified match type {}, but also specified a match string.",
                    c.match_type
                )));
            }
            MATCH_DEFAULT => {
                f.exact.insert(t, None);
            }
            MATCH_SPECIFIED => {
                f.any.insert(t);
            }
            other => {
                return Err((
                    ResponseError::UnsupportedVersion,
                    format!("Unknown match type {other}"),
                ))
            }
        }
    }
    let has = |t: &str| f.exact.contains_key(t) || f.any.contains(t);
    if has("ip") && (has(USER) || has(CLIENT_ID)) {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.".into(),
        ));
    }
    Ok(f)
}

fn matches(f: &Filter, info: &ClientQuotaInfo) -> bool {
    let name_of = |t: &str| {
        info.entity
            .iter()
            .find(|p| p.entity_type == t)
            .map(|p| &p.entity_name)
    };
    if f.strict && info.entity.len() != f.exact.len() + f.any.len() {
        return false;
    }
    f.exact
        .iter()
        .all(|(t, want)| name_of(t).is_some_and(|n| n == want))
        && f.any.iter().all(|t| name_of(t).is_some())
}

pub async fn handle(
    shard: &Rc<BrokerShard>,
    _hdr: &RequestHeader,
    req: DescribeClientQuotasRequest,
    session: &Session,
) -> DescribeClientQuotasResponse {
    let resp = DescribeClientQuotasResponse::default();
    if !Authz::of(shard, session).cluster(Operation::DescribeConfigs) {
        return resp.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let filter = match filter_of(&req) {
        Ok(f) => f,
        Err((e, message)) => {
            return resp
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(message)))
        }
    };
    let image = shard.image();
    let entries = image
        .cluster
        .client_quotas
        .values()
        .filter(|info| matches(&filter, info))
        .map(|info| {
            EntryData::default()
                .with_entity(
                    info.entity
                        .iter()
                        .map(|p| {
                            EntityData::default()
                                .with_entity_type(str_bytes(p.entity_type.clone()))
                                .with_entity_name(p.entity_name.clone().map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    info.values
                        .iter()
                        .map(|(k, v)| {
                            ValueData::default()
                                .with_key(str_bytes(k.clone()))
                                .with_value(v.0)
                        })
                        .collect(),
                )
        })
        .collect();
    resp.with_entries(Some(entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
    use keel_raft::records::QuotaEntityPart;

    fn component(t: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(t.to_string()))
            .with_match_type(match_type)
            .with_match(name.map(|n| str_bytes(n.to_string())))
    }

    fn info(parts: &[(&str, Option<&str>)]) -> ClientQuotaInfo {
        ClientQuotaInfo {
            entity: parts
                .iter()
                .map(|(t, n)| QuotaEntityPart {
                    entity_type: t.to_string(),
                    entity_name: n.map(str::to_string),
                })
                .collect(),
            values: BTreeMap::new(),
        }
    }

    #[test]
    fn filters_match_as_kafkas() {
        let req = |components, strict| {
            DescribeClientQuotasRequest::default()
                .with_components(components)
                .with_strict(strict)
        };
        let alice = info(&[("user", Some("alice"))]);
        let alice_app = info(&[("client-id", Some("app")), ("user", Some("alice"))]);
        let default_user = info(&[("user", None)]);
        let exact = filter_of(&req(
            vec![component("user", MATCH_EXACT, Some("alice"))],
            false,
        ))
        .unwrap();
        assert!(matches(&exact, &alice) && matches(&exact, &alice_app));
        assert!(!matches(&exact, &default_user));
        let strict = filter_of(&req(
            vec![component("user", MATCH_EXACT, Some("alice"))],
            true,
        ))
        .unwrap();
        assert!(matches(&strict, &alice) && !matches(&strict, &alice_app));
        let default = filter_of(&req(vec![component("user", MATCH_DEFAULT, None)], false)).unwrap();
        assert!(matches(&default, &default_user) && !matches(&default, &alice));
        let any = filter_of(&req(
            vec![component("client-id", MATCH_SPECIFIED, None)],
            false,
        ))
        .unwrap();
        assert!(matches(&any, &alice_app) && !matches(&any, &alice));
        let all = filter_of(&req(vec![], false)).unwrap();
        assert!(matches(&all, &alice) && matches(&all, &default_user));
        let none_strict = filter_of(&req(vec![], true)).unwrap();
        assert!(!matches(&none_strict, &alice));
    }

    #[test]
    fn bad_filters_get_kafkas_errors() {
        let err = |components| {
            filter_of(&DescribeClientQuotasRequest::default().with_components(components))
                .unwrap_err()
                .0
        };
        assert_eq!(
            err(vec![component("user", MATCH_EXACT, None)]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            err(vec![component("user", MATCH_DEFAULT, Some("x"))]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            err(vec![
                component("user", MATCH_DEFAULT, None),
                component("user", MATCH_SPECIFIED, None)
            ]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            err(vec![component("group", MATCH_DEFAULT, None)]),
            ResponseError::UnsupportedVersion
        );
        assert_eq!(
            err(vec![component("user", 7, None)]),
            ResponseError::UnsupportedVersion
        );
        assert_eq!(
            err(vec![
                component("ip", MATCH_DEFAULT, None),
                component("user", MATCH_DEFAULT, None)
            ]),
            ResponseError::InvalidRequest
        );
        assert_eq!(
            err(vec![component("", MATCH_DEFAULT, None)]),
            ResponseError::InvalidRequest
        );
    }
}
