use super::*;

#[test]
fn precedence_env_file_flags() {
    let env = vec![
        ("KEEL_NUM_PARTITIONS".to_string(), "2".to_string()),
        ("KEEL_DATA_DIR".to_string(), "/env".to_string()),
        ("KEEL_SMP".to_string(), "3".to_string()),
        ("OTHER".to_string(), "x".to_string()),
    ];
    let map = SettingsBuilder::default()
        .env(env.into_iter())
        .toml_text("num.partitions = 5\n\"data.dir\" = \"/file\"\n")
        .unwrap()
        .set("data.dir", "/flag")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    assert_eq!(cfg.num_partitions, 5);
    assert_eq!(cfg.data_dir, PathBuf::from("/flag"));
    assert_eq!(cfg.smp, 3);
}

#[test]
fn configuration_reference_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let rendered = reference_markdown();
    if std::env::var("UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/configuration.md differs from the settings table in broker/src/config.rs; \
         run `UPDATE_DOCS=1 cargo test -p keel-broker configuration_reference`"
    );
}

#[test]
fn every_setting_has_the_environment_variable_the_reference_names() {
    for key in BROKER_KEYS {
        let vars = std::iter::once((env_var(key.name), "x".to_string()));
        let map = SettingsBuilder::default().env(vars).build();
        assert!(map.contains_key(key.name), "{}", key.name);
    }
}

#[test]
fn unknown_key_is_an_error() {
    let map = SettingsBuilder::default().set("num.partitons", "3").build();
    let err = BrokerConfig::from_settings(map).unwrap_err().to_string();
    assert!(err.contains("num.partitons"), "{err}");
}

#[test]
fn topic_overrides_inherit_broker_defaults() {
    let map = SettingsBuilder::default()
        .set("log.segment.bytes", "1048576")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    let mut overrides = BTreeMap::new();
    assert_eq!(cfg.log_config(&overrides).segment_bytes, 1_048_576);
    overrides.insert("segment.bytes".to_string(), "4096".to_string());
    assert_eq!(cfg.log_config(&overrides).segment_bytes, 4096);
    assert!(validate_topic_config("segment.bytes", "abc").is_err());
    assert!(validate_topic_config("no.such", "1").is_err());
    assert!(validate_topic_config("cleanup.policy", "compact,delete").is_ok());
}

#[test]
fn producer_id_expiration_is_a_broker_setting_for_every_topic() {
    let cfg = BrokerConfig::from_settings(BTreeMap::new()).unwrap();
    let mut overrides = BTreeMap::new();
    assert_eq!(
        cfg.log_config(&overrides).producer_id_expiration_ms,
        86_400_000
    );
    let map = SettingsBuilder::default()
        .set("producer.id.expiration.ms", "60000")
        .build();
    let cfg = BrokerConfig::from_settings(map).unwrap();
    overrides.insert("segment.bytes".to_string(), "4096".to_string());
    assert_eq!(cfg.log_config(&overrides).producer_id_expiration_ms, 60_000);
    assert!(validate_topic_config("producer.id.expiration.ms", "1").is_err());
    let map = SettingsBuilder::default()
        .set("producer.id.expiration.ms", "0")
        .build();
    assert!(BrokerConfig::from_settings(map).is_err());
}
