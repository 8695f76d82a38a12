//! Client quotas (Kafka's ClientQuotaManager and ClientRequestQuotaManager: KIP-13, KIP-55,
//! KIP-124, KIP-219): `producer_byte_rate`, `consumer_byte_rate` and `request_percentage`
//! per user, client id or both, and their defaults, set with AlterClientQuotas and kept in
//! the metadata log (`ClientQuotaChanged` records, `ClusterImage::client_quotas`).
//!
//! - **Resolution** ([`QuotaIndex::resolve`]): Kafka's eight levels of precedence, per quota
//!   type, from `/users/<user>/clients/<client-id>` down to `/clients/<default>`. The level
//!   that matches also says who shares the quota: a `/users/<user>` quota is shared by all of
//!   that user's clients, a `/clients/<default>` quota is a separate allowance per client id.
//! - **Accounting** ([`rate::SharedRate`], [`Sensors`]): a quota holds per broker, as in
//!   Kafka: every shard records into the same sampled rate (`quota.window.num` windows of
//!   `quota.window.size.seconds`). It is the one piece of request-path state that shards
//!   share — a few atomics, touched only by requests of clients that have a quota (Redpanda's
//!   client quotas share theirs the same way). A broker without quotas pays one emptiness
//!   check per request.
//! - **Charging** (`frontend::throttle::Charge`, called by the handlers' dispatch): Produce is charged the
//!   request's bytes, a consumer's Fetch the record bytes of its answer, every request but
//!   the exempt ones (below) the time its handler spent on the shard's CPU (the time its
//!   future was being polled, in percent of one core, as Kafka's request threads' time).
//! - **Throttling** (KIP-219): the answer goes out at once with `throttle_time_ms`, and the
//!   connection then reads no request until that time has passed (its reader is muted). A
//!   throttled Fetch answers empty and is not charged. Keel does this at every version; Kafka
//!   delays the answer itself for clients older than KIP-219, which the mute amounts to.
//! - **Exempt** from every quota: replicas' Fetch and OffsetForLeaderEpoch, WriteTxnMarkers,
//!   the SASL requests; from the request quota also client ids starting `__` (Kafka's
//!   internal clients).
//!
//! Runs on the shard of the connection; nothing here crosses shards by message. This module
//! knows nothing of shards or sessions: `frontend::throttle` applies it to requests.

pub mod rate;
pub mod throttled;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_raft::image::ClientQuotaInfo;

use rate::SharedRate;
pub use throttled::Throttled;

/// Kafka's quota entity types.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";

/// The quota types Keel enforces, each with its Kafka config key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaType {
    Produce = 0,
    Fetch = 1,
    Request = 2,
}

pub const QUOTA_TYPES: [QuotaType; 3] = [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request];

impl QuotaType {
    /// The config key AlterClientQuotas sets.
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => "producer_byte_rate",
            QuotaType::Fetch => "consumer_byte_rate",
            QuotaType::Request => "request_percentage",
        }
    }

    /// Kafka's name of the quota type (its metrics' `quota_type`).
    pub fn label(self) -> &'static str {
        match self {
            QuotaType::Produce => "produce",
            QuotaType::Fetch => "fetch",
            QuotaType::Request => "request",
        }
    }

    pub fn of_key(key: &str) -> Option<QuotaType> {
        QUOTA_TYPES.into_iter().find(|t| t.key() == key)
    }

    /// Byte quotas take whole numbers (Kafka's LONG keys); `request_percentage` any number.
    pub fn integral(self) -> bool {
        !matches!(self, QuotaType::Request)
    }
}

/// A user or client-id part of an entity: a name, or that type's default entity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum EntityName {
    Default,
    Named(String),
}

/// A quota entity: a user, a client id, or both (`None`: the entity names no such part).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct QuotaEntity {
    pub user: Option<EntityName>,
    pub client_id: Option<EntityName>,
}

impl QuotaEntity {
    fn of(info: &ClientQuotaInfo) -> QuotaEntity {
        let mut e = QuotaEntity::default();
        for part in &info.entity {
            let name = match &part.entity_name {
                None => EntityName::Default,
                Some(n) => EntityName::Named(n.clone()),
            };
            match part.entity_type.as_str() {
                USER => e.user = Some(name),
                CLIENT_ID => e.client_id = Some(name),
                _ => {}
            }
        }
        e
    }
}

/// Who shares one quota's rate: its type and the (user, client id) tags Kafka's sensors
/// carry ("" where the matched level does not name that part).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SensorKey {
    pub quota_type: QuotaType,
    pub user: String,
    pub client_id: String,
}

/// A quota that applies to a request: who shares it and its limit in units per second
/// (bytes; for the request quota, percent of one core).
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub sensor: SensorKey,
    pub limit: f64,
}

/// The client quotas of one installed image, by entity.
#[derive(Debug, Default)]
pub struct QuotaIndex {
    /// The image version it was built from.
    pub version: u64,
    entities: HashMap<QuotaEntity, [Option<f64>; 3]>,
}

impl QuotaIndex {
    pub fn new(version: u64, quotas: &BTreeMap<String, ClientQuotaInfo>) -> QuotaIndex {
        let mut entities = HashMap::new();
        for info in quotas.values() {
            let mut limits = [None; 3];
            for (key, value) in &info.values {
                if let Some(t) = QuotaType::of_key(key) {
                    limits[t as usize] = Some(value.0);
                }
            }
            if limits.iter().any(Option::is_some) {
                entities.insert(QuotaEntity::of(info), limits);
            }
        }
        QuotaIndex { version, entities }
    }

    pub fn is_empty(&self) -> bool {
        self.entities.is_empty()
    }

    fn limit(
        &self,
        t: QuotaType,
        user: Option<EntityName>,
        client_id: Option<EntityName>,
    ) -> Option<f64> {
        self.entities
            .get(&QuotaEntity { user, client_id })
            .and_then(|l| l[t as usize])
    }

    /// The quota of type `t` for `user`'s client `client_id`, by Kafka's precedence:
    /// 1. /users/<user>/clients/<client-id>, 2. /users/<user>/clients/<default>,
    /// 3. /users/<user>, 4. /users/<default>/clients/<client-id>,
    /// 5. /users/<default>/clients/<default>, 6. /users/<default>,
    /// 7. /clients/<client-id>, 8. /clients/<default>.
    pub fn resolve(&self, t: QuotaType, user: &str, client_id: &str) -> Option<Resolved> {
        use EntityName::{Default as D, Named as N};
        let u = || Some(N(user.to_string()));
        let c = || Some(N(client_id.to_string()));
        // (user part, client part, whether the sensor is per user, per client id)
        let levels = [
            (u(), c(), true, true),
            (u(), Some(D), true, true),
            (u(), None, true, false),
            (Some(D), c(), true, true),
            (Some(D), Some(D), true, true),
            (Some(D), None, true, false),
            (None, c(), false, true),
            (None, Some(D), false, true),
        ];
        levels
            .into_iter()
            .find_map(|(user_part, client_part, by_user, by_client)| {
                let limit = self.limit(t, user_part, client_part)?;
                Some(Resolved {
                    sensor: SensorKey {
                        quota_type: t,
                        user: if by_user {
                            user.to_string()
                        } else {
                            String::new()
                        },
                        client_id: if by_client {
                            client_id.to_string()
                        } else {
                            String::new()
                        },
                    },
                    limit,
                })
            })
    }
}

/// Sensors kept past this many are dropped once idle (clients come and go; a default quota
/// makes one sensor per client id).
const SENSORS_MAX: usize = 10_000;

/// The broker's quota rates, shared by every shard; a sensor is found (or made) when a
/// connection first meets a quota, not per request.
pub struct Sensors {
    windows: usize,
    window_ms: u64,
    rates: Mutex<HashMap<SensorKey, Arc<SharedRate>>>,
}

impl Sensors {
    pub fn new(windows: usize, window_ms: u64) -> Sensors {
        Sensors {
            windows: windows.max(2),
            window_ms: window_ms.max(1),
            rates: Mutex::new(HashMap::new()),
        }
    }

    /// The rate of `key`, made on first use.
    pub fn rate(&self, key: &SensorKey) -> Arc<SharedRate> {
        let mut rates = self.rates.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = rates.get(key) {
            return r.clone();
        }
        if rates.len() >= SENSORS_MAX {
            let now = Instant::now();
            // Only this map holds an idle sensor no connection has cached.
            rates.retain(|_, r| Arc::strong_count(r) > 1 || !r.idle(now));
        }
        // Its windows start when it is made, as Kafka's first sample starts with the first
        // record: the first (windows - 1) windows' worth may come at once, no more.
        let r = Arc::new(SharedRate::new(
            self.windows,
            self.window_ms,
            Instant::now(),
        ));
        rates.insert(key.clone(), r.clone());
        r
    }

    /// The longest a request quota throttles: one window (Kafka's
    /// `ClientRequestQuotaManager.maxThrottleTimeMs`).
    pub fn request_throttle_max_ms(&self) -> u64 {
        self.window_ms
    }
}

/// One quota that applies to a connection's requests: its rate and limit.
#[derive(Clone)]
pub struct Applied {
    pub rate: Arc<SharedRate>,
    pub limit: f64,
}

/// What applies to one client id under one quota index, by [`QuotaType`].
pub struct Resolution {
    version: u64,
    client_id: String,
    pub applied: [Option<Applied>; 3],
}

/// A connection's quota state: what applies to it (kept until the quotas or its client id
/// change) and until when it is muted.
#[derive(Default)]
pub struct ConnQuota {
    muted_until: Cell<Option<Instant>>,
    resolution: RefCell<Option<Rc<Resolution>>>,
}

impl std::fmt::Debug for ConnQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnQuota")
            .field("muted_until", &self.muted_until.get())
            .finish_non_exhaustive()
    }
}

impl ConnQuota {
    /// How long the connection must still read nothing (KIP-219), if at all.
    pub fn muted_for(&self, now: Instant) -> Option<Duration> {
        self.muted_until
            .get()
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    /// Mutes the connection for `ms` from `now` (or longer, if it already is).
    pub fn mute(&self, now: Instant, ms: u64) {
        let until = now + Duration::from_millis(ms);
        if self.muted_until.get().is_none_or(|u| u < until) {
            self.muted_until.set(Some(until));
        }
    }

    /// The quotas that apply to `principal`'s client `client_id` under `index`, kept until
    /// either changes.
    pub fn resolve(
        &self,
        sensors: &Sensors,
        index: &QuotaIndex,
        principal: &str,
        client_id: &str,
    ) -> Rc<Resolution> {
        if let Some(r) = self.resolution.borrow().as_ref() {
            if r.version == index.version && r.client_id == client_id {
                return r.clone();
            }
        }
        let user = principal.strip_prefix("User:").unwrap_or(principal);
        let applied = QUOTA_TYPES.map(|t| {
            index.resolve(t, user, client_id).map(|r| Applied {
                rate: sensors.rate(&r.sensor),
                limit: r.limit,
            })
        });
        let r = Rc::new(Resolution {
            version: index.version,
            client_id: client_id.to_string(),
            applied,
        });
        *self.resolution.borrow_mut() = Some(r.clone());
        r
    }
}

#[cfg(test)]
mod tests;
