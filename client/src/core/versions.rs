//! Version negotiation: a broker advertises, per API, the range of versions it serves
//! (ApiVersions); a client knows the range of versions it can fill in; each request goes at
//! the highest version in both, and an API with no common version is "unsupported" before any
//! request is sent.

use std::collections::HashMap;

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use keel_vocab::ErrorCode;

use crate::error::ClientError;

/// What a client speaks, per API, as `(api, min, max)` rows; an API without a row is
/// `(0, 0)`.
#[derive(Copy, Clone, Debug)]
pub struct ClientVersions(pub &'static [(ApiKey, i16, i16)]);

impl ClientVersions {
    /// The client's `(min, max)` for `api`.
    pub fn range(&self, api: ApiKey) -> (i16, i16) {
        self.0
            .iter()
            .find(|(a, _, _)| *a == api)
            .map_or((0, 0), |&(_, min, max)| (min, max))
    }
}

/// What one broker serves, per API, from its ApiVersions answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    /// api key -> (min, max) as the broker advertised.
    by_api: HashMap<i16, (i16, i16)>,
}

impl Versions {
    /// The broker's ranges; `Err(error)` when it answered ApiVersions with an error.
    pub fn from_response(resp: &ApiVersionsResponse) -> Result<Versions, ErrorCode> {
        let error = ErrorCode::from_code(resp.error_code);
        if !error.is_none() {
            return Err(error);
        }
        Ok(Versions {
            by_api: resp
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
        })
    }

    /// The broker's `(min, max)` of `api`, if it advertises it.
    pub fn advertised(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.by_api.get(&(api as i16)).copied()
    }

    /// The highest version of `api` both sides speak, within `client_min..=client_max`;
    /// [`ClientError::Unsupported`] (naming `addr`) when there is none.
    pub fn choose(
        &self,
        addr: &str,
        api: ApiKey,
        client_min: i16,
        client_max: i16,
    ) -> Result<i16, ClientError> {
        let advertised = self.advertised(api);
        let unsupported = || ClientError::Unsupported {
            addr: addr.to_string(),
            api,
            advertised,
            client_min,
            client_max,
        };
        let (min, max) = advertised.ok_or_else(unsupported)?;
        let version = max.min(client_max);
        if version < min.max(client_min) {
            return Err(unsupported());
        }
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use keel_vocab::error::ResponseError;

    fn broker(ranges: &[(ApiKey, i16, i16)]) -> Versions {
        let resp = ApiVersionsResponse::default().with_api_keys(
            ranges
                .iter()
                .map(|&(api, min, max)| {
                    ApiVersion::default()
                        .with_api_key(api as i16)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect(),
        );
        Versions::from_response(&resp).unwrap()
    }

    #[test]
    fn the_highest_common_version_is_chosen() {
        let v = broker(&[(ApiKey::Fetch, 4, 17), (ApiKey::Produce, 0, 7)]);
        assert_eq!(v.choose("b", ApiKey::Fetch, 4, 11).unwrap(), 11);
        assert_eq!(v.choose("b", ApiKey::Fetch, 0, 20).unwrap(), 17);
        assert_eq!(v.choose("b", ApiKey::Produce, 3, 11).unwrap(), 7);
        assert_eq!(v.advertised(ApiKey::Fetch), Some((4, 17)));
    }

    #[test]
    fn no_common_version_is_unsupported() {
        let v = broker(&[(ApiKey::Fetch, 12, 17)]);
        let e = v.choose("b:9092", ApiKey::Fetch, 4, 11).unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Unsupported {
                    advertised: Some((12, 17)),
                    client_min: 4,
                    client_max: 11,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = v.choose("b:9092", ApiKey::Metadata, 1, 12).unwrap_err();
        assert!(
            matches!(
                e,
                ClientError::Unsupported {
                    advertised: None,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "b:9092 does not support Metadata v1-v12 (broker: not advertised)"
        );
    }

    #[test]
    fn an_api_versions_error_and_the_client_table() {
        let resp = ApiVersionsResponse::default().with_error_code(35);
        assert_eq!(
            Versions::from_response(&resp),
            Err(ErrorCode::of(ResponseError::UnsupportedVersion))
        );
        const TABLE: ClientVersions = ClientVersions(&[(ApiKey::Fetch, 4, 11)]);
        assert_eq!(TABLE.range(ApiKey::Fetch), (4, 11));
        assert_eq!(TABLE.range(ApiKey::Produce), (0, 0));
    }
}
