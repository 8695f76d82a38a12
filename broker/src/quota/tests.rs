//! Quota resolution against Kafka's precedence table.

use std::collections::BTreeMap;

use keel_raft::image::ClientQuotaInfo;
use keel_raft::records::{QuotaEntityPart, QuotaValue};

use super::*;

/// An entity part: absent, the default (`Some(None)`), or a name.
type Part<'a> = Option<Option<&'a str>>;

fn entity(user: Part, client: Part) -> ClientQuotaInfo {
    let mut parts = Vec::new();
    if let Some(u) = user {
        parts.push(QuotaEntityPart {
            entity_type: USER.into(),
            entity_name: u.map(str::to_string),
        });
    }
    if let Some(c) = client {
        parts.push(QuotaEntityPart {
            entity_type: CLIENT_ID.into(),
            entity_name: c.map(str::to_string),
        });
    }
    ClientQuotaInfo {
        entity: parts,
        values: BTreeMap::new(),
    }
}

fn index(levels: &[(Part, Part, f64)]) -> QuotaIndex {
    let quotas = levels
        .iter()
        .enumerate()
        .map(|(i, (u, c, limit))| {
            let mut info = entity(*u, *c);
            info.values
                .insert("producer_byte_rate".into(), QuotaValue(*limit));
            (i.to_string(), info)
        })
        .collect();
    QuotaIndex::new(1, &quotas)
}

fn resolved(index: &QuotaIndex, user: &str, client: &str) -> Option<(f64, String, String)> {
    index
        .resolve(QuotaType::Produce, user, client)
        .map(|r| (r.limit, r.sensor.user, r.sensor.client_id))
}

#[test]
fn the_most_specific_level_wins_and_names_who_shares_it() {
    let d = Some(None);
    let all = [
        (Some(Some("alice")), Some(Some("app")), 1.0),
        (Some(Some("alice")), d, 2.0),
        (Some(Some("alice")), None, 3.0),
        (d, Some(Some("app")), 4.0),
        (d, d, 5.0),
        (d, None, 6.0),
        (None, Some(Some("app")), 7.0),
        (None, d, 8.0),
    ];
    let (a, c) = ("alice".to_string(), "app".to_string());
    let e = String::new();
    let want = [
        (1.0, a.clone(), c.clone()),
        (2.0, a.clone(), c.clone()),
        (3.0, a.clone(), e.clone()),
        (4.0, a.clone(), c.clone()),
        (5.0, a.clone(), c.clone()),
        (6.0, a.clone(), e.clone()),
        (7.0, e.clone(), c.clone()),
        (8.0, e.clone(), c.clone()),
    ];
    // Level i applies once every more specific level is gone.
    for i in 0..all.len() {
        let idx = index(&all[i..]);
        assert_eq!(
            resolved(&idx, "alice", "app"),
            Some(want[i].clone()),
            "level {}",
            i + 1
        );
    }
    // Other users and clients fall to the defaults.
    let idx = index(&all);
    assert_eq!(
        resolved(&idx, "bob", "app"),
        Some((4.0, "bob".into(), c.clone()))
    );
    assert_eq!(
        resolved(&idx, "bob", "other"),
        Some((5.0, "bob".into(), "other".into()))
    );
    let idx = index(&all[6..]);
    assert_eq!(
        resolved(&idx, "bob", "other"),
        Some((8.0, e.clone(), "other".into()))
    );
    assert_eq!(resolved(&index(&[]), "alice", "app"), None);
}

#[test]
fn each_quota_type_resolves_on_its_own() {
    let mut user = entity(Some(Some("alice")), None);
    user.values
        .insert("consumer_byte_rate".into(), QuotaValue(100.0));
    let mut client = entity(None, Some(Some("app")));
    client
        .values
        .insert("producer_byte_rate".into(), QuotaValue(200.0));
    let quotas = [("a".to_string(), user), ("b".to_string(), client)]
        .into_iter()
        .collect();
    let idx = QuotaIndex::new(1, &quotas);
    assert_eq!(
        idx.resolve(QuotaType::Fetch, "alice", "app").unwrap().limit,
        100.0
    );
    assert_eq!(
        idx.resolve(QuotaType::Produce, "alice", "app")
            .unwrap()
            .limit,
        200.0
    );
    assert!(idx.resolve(QuotaType::Request, "alice", "app").is_none());
}

#[test]
fn sensors_are_shared_by_key() {
    let sensors = Sensors::new(11, 1000);
    let key = |user: &str| SensorKey {
        quota_type: QuotaType::Produce,
        user: user.into(),
        client_id: String::new(),
    };
    let a = sensors.rate(&key("alice"));
    assert!(Arc::ptr_eq(&a, &sensors.rate(&key("alice"))));
    assert!(!Arc::ptr_eq(&a, &sensors.rate(&key("bob"))));
    assert_eq!(sensors.request_throttle_max_ms(), 1000);
}
